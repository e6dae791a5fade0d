"""SQLite backend: one database file in WAL mode, stdlib ``sqlite3``.

Each thread gets its own connection (autocommit mode, explicit transactions).
Writes use ``BEGIN IMMEDIATE``, which takes SQLite's single write lock, so writers
of all layers are serialised — the per-layer serialisation the interface promises.
Reads run in deferred transactions and see one consistent WAL snapshot. The schema
version is kept in ``PRAGMA user_version``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Iterator

from layersync_server.storage.sql import SCHEMA_VERSION, SqlStorage

__all__ = ["SCHEMA_VERSION", "SqliteStorage"]


class SqliteStorage(SqlStorage):
    """:class:`Storage` in one SQLite file (WAL). Thread-safe: a connection per thread."""

    def __init__(self, path: str | Path, history_versions: int = 20):
        super().__init__(history_versions)
        self.path = Path(path)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        with self.connection() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
        self.migrate()

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=30.0)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        yield conn

    def execute(self, conn, sql: str, params=()):
        return conn.execute(sql, params)

    def begin_sql(self, write: bool) -> str:
        return "BEGIN IMMEDIATE" if write else "BEGIN"

    def schema_version(self, conn) -> int:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])

    def set_schema_version(self, conn, version: int) -> None:
        conn.execute(f"PRAGMA user_version={int(version)}")

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._connections.clear()
        self._local = threading.local()
