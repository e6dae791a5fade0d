"""Runs the LayerSync reference server (``layersync-server``) locally, for tests and demos.

Not needed by applications. It drives the server's own CLI, exactly as a developer would:
``keygen`` for an ES256 key pair, ``serve`` on loopback with an embedded SQLite store,
``mint-token`` for client JWTs and ``upload`` for PDFs; the admin REST API is read with
urllib (``Authorization: Token token="<secret>"``)::

    with ReferenceServer(tmp_dir) as server:
        server.upload("doc.pdf", document_id="doc-1")
        jwt = server.mint_token("doc-1", user_id="alice", expires_in_s=3600)
        print(server.url, server.admin_json("/api/documents/doc-1/annotations"))
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Sequence

__all__ = ["ReferenceServer", "find_server_command", "stop_process"]

_LISTENING = re.compile(r"layersync-server listening on (http://\S+)")


def find_server_command() -> list[str]:
    """``layersync-server`` next to this interpreter (a virtualenv), else on PATH, else
    ``python -m layersync_server``."""
    here = Path(sys.executable).parent / "layersync-server"
    if here.exists():
        return [str(here)]
    found = shutil.which("layersync-server")
    if found:
        return [found]
    return [sys.executable, "-m", "layersync_server"]


def stop_process(proc: subprocess.Popen[Any] | None, timeout_s: float = 10.0) -> None:
    """Ends a child process and reaps it: SIGTERM, then SIGKILL if it is still running
    ``timeout_s`` later. Nothing to do if it is ``None`` or has exited."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout_s)


class ReferenceServer:
    """One ``layersync-server serve`` process on loopback, with its keys and database in
    ``workdir``.

    Args:
        workdir: Directory for keys, the SQLite file and the server log (must exist or be
            creatable).
        admin_token: Secret of the admin API.
        command: The server command (default :func:`find_server_command`).
        extra_args: More ``serve`` arguments, e.g. ``["--max-wait-s", "5"]``.
        env: Extra environment of the server process, e.g.
            ``{"LAYERSYNC_SERVER_JWT_LEEWAY_S": "0"}`` so that short-lived tokens expire on time.
    """

    def __init__(self, workdir: str | os.PathLike[str], *, admin_token: str = "secret",
                 command: list[str] | None = None, extra_args: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.admin_token = admin_token
        self.command = command or find_server_command()
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        self.url = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "server.log"
        self.private_key = self.workdir / "private.pem"
        self.public_key = self.workdir / "public.pem"

    def _run(self, *args: str, timeout: float = 60) -> str:
        proc = subprocess.run([*self.command, *args], capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"layersync-server {args[0]} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    def start(self, timeout_s: float = 30.0) -> "ReferenceServer":
        """Generates keys and starts the server; returns once it prints its URL.

        Raises:
            RuntimeError: the server exited or did not announce itself within ``timeout_s``.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.private_key.exists():
            self._run("keygen", "--out", str(self.workdir))
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [*self.command, "serve", "--host", "127.0.0.1", "--port", "0",
             "--db", str(self.workdir / "s.sqlite"), "--public-key", str(self.public_key),
             "--admin-token", self.admin_token, *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.log_path.read_text("utf-8", "replace")
            match = _LISTENING.search(text)
            if match:
                self.url = match.group(1).rstrip("/")
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"layersync-server exited with {self.process.returncode}:\n{text}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"layersync-server did not start within {timeout_s} s:\n"
                           + self.log_path.read_text("utf-8", "replace"))

    def stop(self) -> None:
        """Stops the server (SIGTERM, then SIGKILL after 10 s). Idempotent."""
        proc, self.process = self.process, None
        stop_process(proc)

    def __enter__(self) -> "ReferenceServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- helpers ---------------------------------------------------------------------

    def mint_token(self, document_id: str, *, layer: str | None = None, user_id: str | None = None,
                   expires_in_s: int | None = None, collaboration_permissions: Sequence[str] | None = None,
                   default_group: str | None = None, creator_name: str | None = None,
                   permissions: Sequence[str] | None = None) -> str:
        """A signed client JWT from ``layersync-server mint-token``; ``collaboration_permissions``
        (entries ``<content-type>:<action>:<scope>``), ``default_group``, ``creator_name`` and
        ``permissions`` set those claims (docs/protocol.md "Collaboration permissions")."""
        args = ["mint-token", "--private-key", str(self.private_key), "--document-id", document_id]
        for entry in collaboration_permissions or ():
            args += ["--collaboration-permission", entry]  # one entry, as it is (commas too)
        if default_group is not None:
            args += ["--default-group", default_group]
        if creator_name is not None:
            args += ["--creator-name", creator_name]
        if permissions is not None:
            args += ["--permissions", *permissions]
        if layer is not None:
            args += ["--layer", layer]
        if user_id is not None:
            args += ["--user-id", user_id]
        if expires_in_s is not None:
            args += ["--expires-in", str(int(expires_in_s))]
        return self._run(*args).strip()

    def upload(self, pdf: str | os.PathLike[str], document_id: str) -> dict[str, Any]:
        """Uploads a PDF through the admin API (its annotations are imported into the
        default layer); returns the ``data`` object (Document Engine's ``DocumentCreated``:
        ``document_id``, ``sourcePdfSha256``, ``annotationCount``, ``pageCount``, ...)."""
        out = self._run("upload", "--url", self.url, "--admin-token", self.admin_token,
                        str(pdf), "--document-id", document_id)
        body = json.loads(out)
        data = body.get("data", body) if isinstance(body, dict) else body
        if not isinstance(data, dict):
            raise RuntimeError(f"layersync-server upload printed no JSON object: {out!r}")
        return data

    def admin_request(self, path: str, *, method: str = "GET", json_body: Any = None) -> bytes:
        """Raw bytes of an admin API call (``Authorization: Token token="<secret>"``), with
        ``json_body`` sent as the JSON request body when given."""
        headers = {"Authorization": f'Token token="{self.admin_token}"'}
        data = None
        if json_body is not None:
            data = json.dumps(json_body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            body: bytes = response.read()
            return body

    def admin_json(self, path: str) -> Any:
        """Decoded JSON of an admin API ``GET``."""
        return json.loads(self.admin_request(path).decode("utf-8"))

    def annotations(self, document_id: str, layer: str | None = None) -> dict[str, dict[str, Any]]:
        """The server's live annotations and comments of a layer: ``{id: content}``, all of
        them: the annotation listing as NDJSON (the JSON one stops at 1000 with
        ``"truncated": true``), plus the comments, which Document Engine's listing leaves out,
        from the layer's ``document.json`` (a comment's content carries its id)."""
        base = f"/api/documents/{document_id}"
        if layer:
            base += f"/layers/{urllib.parse.quote(layer, safe='')}"
        request = urllib.request.Request(self.url + base + "/annotations", headers={
            "Authorization": f'Token token="{self.admin_token}"', "Accept": "application/x-ndjson"})
        with urllib.request.urlopen(request, timeout=60) as response:
            lines = response.read().decode("utf-8").splitlines()
        found = {a["id"]: a["content"] for a in map(json.loads, filter(None, lines))}
        for comment in self.admin_json(base + "/document.json")["comments"]:
            found[comment["id"]] = comment
        return found
