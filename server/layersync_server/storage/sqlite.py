"""SQLite backend: one database file in WAL mode, stdlib ``sqlite3``.

Each thread gets its own connection (autocommit mode, explicit transactions).
Writes use ``BEGIN IMMEDIATE``, which takes SQLite's single write lock, so writers
of all layers are serialised — the per-layer serialisation the interface promises.
Inside one process, write transactions first queue on a :class:`threading.RLock`, so
concurrent writers in the thread pool are woken as soon as the previous one commits
instead of polling in SQLite's busy handler (which sleeps 1..100 ms between tries);
the busy timeout then only arbitrates between processes.
Inside :meth:`SqliteStorage.without_waiting` (the event loop thread's writes) a
transaction neither queues nor busy-waits: it raises :class:`WriteWouldWait` instead.
Reads run in deferred transactions and see one consistent WAL snapshot. The schema
version is kept in ``PRAGMA user_version``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Iterator

from layersync_server.storage.base import WriteWouldWait
from layersync_server.storage.sql import SCHEMA_VERSION, SqlStorage

__all__ = ["SCHEMA_VERSION", "SqliteStorage", "WriteWouldWait"]

#: Busy timeout of every connection, milliseconds (the ``timeout`` of ``sqlite3.connect``).
BUSY_TIMEOUT_MS = 30_000
_SQLITE_BUSY = 5  # primary result code (extended codes keep it in the low byte)

# ``sqlite3`` binds str, int, float and bytearray as they are, and looks every other
# parameter up as an adaptable type first: for ``None`` two failing attribute lookups
# with formatted AttributeErrors (~0.3 us each; a pushed record binds two, its rootId
# and group: a sixth of the cost of inserting it). An adapter for ``None`` that returns
# it (``{}.get(None)``, a C call) finds it in the adapters table instead; it is bound
# as NULL exactly as before. (Process-wide, like every ``register_adapter``.)
sqlite3.register_adapter(type(None), {}.get)


class SqliteStorage(SqlStorage):
    """:class:`Storage` in one SQLite file (WAL). Thread-safe: a connection per thread."""

    ORDERED_TEXT_KEYS = True  # BINARY collation: memcmp of UTF-8

    def __init__(self, path: str | Path, history_versions: int = 20):
        super().__init__(history_versions)
        self.path = Path(path)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._write_lock = threading.RLock()  # re-entrant: a nested BEGIN errors, not hangs
        with self.connection() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
        try:
            self.migrate()
        except BaseException:  # e.g. SchemaTooNew
            self.close()
            raise

    def _thread_connection(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use, busy timeout ``BUSY_TIMEOUT_MS``)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=BUSY_TIMEOUT_MS / 1000)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            self._local.waits = True
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        conn = self._thread_connection()
        local = self._local
        if not local.waits and not getattr(local, "without_waiting", False):
            # the busy timeout :meth:`without_waiting` left at 0: back to waiting
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            local.waits = True
        yield conn

    @contextlib.contextmanager
    def transaction(self, write: bool) -> Iterator[sqlite3.Connection]:
        if not write:
            with super().transaction(write) as conn:
                yield conn
            return
        if getattr(self._local, "without_waiting", False):
            if not self._write_lock.acquire(blocking=False):
                raise WriteWouldWait()
        else:
            self._write_lock.acquire()
        try:
            with super().transaction(write) as conn:
                yield conn
        finally:
            self._write_lock.release()

    @contextlib.contextmanager
    def without_waiting(self) -> Iterator[None]:
        """Storage calls of this thread inside the block never wait for another writer,
        for a caller that must not block (the event loop): a write transaction that
        would queue behind another thread of this process, or meet SQLite's write lock
        held by another process (``SQLITE_BUSY`` with a zero busy timeout), is rolled
        back and :class:`WriteWouldWait` leaves the block; a read that meets
        ``SQLITE_BUSY`` (rare in WAL mode) raises ``sqlite3.OperationalError`` at once.
        A body that writes once may then run again with waiting allowed (in a worker).

        Raises:
            WriteWouldWait: the write transaction was not made; retry it elsewhere.
        """
        conn = self._thread_connection()
        local = self._local
        if local.waits:  # left at 0 until this thread next uses storage outside a block
            conn.execute("PRAGMA busy_timeout=0")  # (the event loop thread seldom does)
            local.waits = False
        local.without_waiting = True
        try:
            yield
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF != _SQLITE_BUSY:
                raise
            if conn.in_transaction:  # e.g. a busy COMMIT: the transaction is open
                conn.execute("ROLLBACK")
            raise WriteWouldWait() from exc
        finally:
            local.without_waiting = False

    def execute(self, conn, sql: str, params=()):
        return conn.execute(sql, params)

    def executemany(self, conn, sql: str, seq_of_params) -> None:
        conn.executemany(sql, seq_of_params)

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
