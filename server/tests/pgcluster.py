"""A throwaway PostgreSQL cluster for tests: initdb + pg_ctl in a temp directory.

PostgreSQL refuses to run as root, so when the tests run as root the cluster is
owned by and run as the ``postgres`` system user (``runuser -u postgres --``). It
listens on 127.0.0.1 on a free port with ``trust`` authentication, fsync off.

Also runnable by hand: ``python server/tests/pgcluster.py`` starts a cluster, prints
its URL and keeps it up until Ctrl-C.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def find_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None when PostgreSQL is absent."""
    candidates = [os.environ.get("LAYERSYNC_PG_BIN", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    which = shutil.which("pg_ctl")
    if which:
        candidates.append(str(Path(os.path.realpath(which)).parent))
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    """A running cluster. ``url(dbname)`` gives a libpq URL; ``create_database`` makes one."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.as_root = os.geteuid() == 0
        self.dir = Path(tempfile.mkdtemp(prefix="layersync-pg-"))
        self.port = _free_port()
        if self.as_root:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        os.chmod(self.dir, 0o700)
        self._run("initdb", "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres",
                  "-E", "UTF8", "--locale=C", "--no-sync")
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "log"), "-w",
                  "-t", "60", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                  "-c max_connections=300 -c fsync=off -c synchronous_commit=off "
                  "-c full_page_writes=off", "start")

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin_dir / tool), *args]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            log = (self.dir / "log").read_text(errors="replace") if (self.dir / "log").exists() else ""
            raise RuntimeError(f"{tool} failed: {result.stdout}{result.stderr}{log}")

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (letters, digits, _) and return its URL."""
        import psycopg
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


if __name__ == "__main__":
    found = find_bin_dir()
    if found is None:
        raise SystemExit("PostgreSQL binaries not found (apt-get install postgresql)")
    cluster = PgCluster(found)
    print(cluster.url(), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        cluster.stop()
