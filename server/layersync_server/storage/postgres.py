"""PostgreSQL backend (psycopg 3): the same SQL as SQLite, plus cross-process wake-ups.

Several server processes may share one database (docs/architecture.md §10):

* writers of one layer are serialised by ``SELECT ... FOR UPDATE`` on the layer row,
  so revisions stay unique and gap-free per layer across processes;
* reads run in ``REPEATABLE READ`` transactions (one consistent snapshot per page);
* a write transaction that moved a layer's revision sends
  ``NOTIFY layersync_changes, '{"d": doc, "l": layer, "r": revision}'`` before it
  commits (PostgreSQL delivers it on commit), and every process LISTENs on that
  channel (:class:`PgChangeFeed`) to wake its long-polls. Deleting a layer (or its
  document) adds ``"reset": true``: every process then forgets the layer's revision,
  since a layer re-created under that name counts again from 0 (``"r"`` stays, so
  listeners of the previous release still wake their long-polls).

Connections come from a small bounded pool (``pool_size``, default 10, per process).
The schema version lives in table ``layersync_schema``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from typing import Iterator

import psycopg
from psycopg.rows import dict_row

from layersync_server.storage.base import LayerState
from layersync_server.storage.sql import SqlStorage

log = logging.getLogger(__name__)
CHANNEL = "layersync_changes"


class _Pool:
    """A bounded pool of autocommit connections; broken ones are dropped.

    :meth:`close` closes the idle connections at once and each one in use when it is
    handed back; a later :meth:`connection` opens new ones (as SQLite's storage reopens)."""

    def __init__(self, url: str, size: int):
        self._url = url
        self._idle: list[psycopg.Connection] = []
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._closes = 0  # close() calls so far: a connection taken before the latest is not kept

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        if not self._slots.acquire(timeout=60):
            raise TimeoutError("no PostgreSQL connection free for 60 s")
        try:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
                taken_at = self._closes
            if conn is None or conn.closed:
                conn = psycopg.connect(self._url, autocommit=True, row_factory=dict_row)
            try:
                yield conn
            finally:
                with self._lock:
                    keep = (taken_at == self._closes and not conn.closed
                            and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)
                    if keep:
                        self._idle.append(conn)
                if not keep:
                    with contextlib.suppress(Exception):
                        conn.close()
        finally:
            self._slots.release()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            self._closes += 1
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()


class PostgresStorage(SqlStorage):
    """:class:`Storage` on PostgreSQL; ``url`` is a libpq URL (``postgresql://...``)."""

    TYPES = {"blob": "BYTEA", "bigint": "BIGINT"}
    LOCK_SUFFIX = " FOR UPDATE"

    def __init__(self, url: str, history_versions: int = 20, pool_size: int = 10):
        super().__init__(history_versions)
        self.url = url
        self._pool = _Pool(url, pool_size)
        try:
            with self.connection() as conn:  # one migrator at a time across processes
                conn.execute("SELECT pg_advisory_lock(7335001)")
                try:
                    self.migrate()
                finally:
                    conn.execute("SELECT pg_advisory_unlock(7335001)")
        except BaseException:  # e.g. SchemaTooNew: do not leak the pool's connections
            self._pool.close()
            raise

    def connection(self):
        return self._pool.connection()

    def execute(self, conn, sql: str, params=()):
        return conn.execute(sql.replace("?", "%s"), params or None)

    def executemany(self, conn, sql: str, seq_of_params) -> None:
        with conn.cursor() as cur:  # psycopg pipelines the statements (one round trip)
            cur.executemany(sql.replace("?", "%s"), seq_of_params)

    def batch(self, conn):
        return conn.pipeline()

    def begin_sql(self, write: bool) -> str:
        return "BEGIN" if write else "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

    def schema_version(self, conn) -> int:
        if conn.execute("SELECT to_regclass('layersync_schema') AS t").fetchone()["t"] is None:
            return 0
        row = conn.execute("SELECT max(version) AS v FROM layersync_schema").fetchone()
        return int(row["v"] or 0)

    def set_schema_version(self, conn, version: int) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS layersync_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO layersync_schema (version) VALUES (%s)", (version,))

    def layer_changed(self, conn, layer: LayerState, reset: bool = False) -> None:
        payload = json.dumps(notification(layer, reset))
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))

    def change_feed(self) -> "PgChangeFeed":
        return PgChangeFeed(self.url)

    def close(self) -> None:
        self._pool.close()


def notification(layer: LayerState, reset: bool = False) -> dict:
    """The JSON payload sent on :data:`CHANNEL` for a change of ``layer``."""
    payload = {"d": layer.document_id, "l": layer.name, "r": layer.revision}
    if reset:
        payload["reset"] = True
    return payload


class PgChangeFeed:
    """LISTENs on :data:`CHANNEL` and reports every committed layer change.

    Reconnects with back-off when the connection drops; after a reconnect it calls
    ``on_gap()`` (if given) because notifications sent meanwhile are lost.
    """

    def __init__(self, url: str):
        self.url = url

    async def dispatch(self, payload: str, callback, on_reset=None) -> None:
        """Report one notification: ``await on_reset(document_id, layer)`` for a layer
        reset (when ``on_reset`` is given), else ``await callback(document_id, layer,
        revision)``. Raises ValueError, KeyError or TypeError when it is malformed."""
        change = json.loads(payload)
        document_id, layer, revision = change["d"], change["l"], int(change["r"])
        if change.get("reset") and on_reset is not None:
            await on_reset(document_id, layer)
        else:
            await callback(document_id, layer, revision)

    async def run(self, callback, on_gap=None, on_reset=None) -> None:
        delay_s = 0.2
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    if on_gap is not None:
                        await on_gap()
                    delay_s = 0.2
                    async for notify in conn.notifies():
                        try:
                            await self.dispatch(notify.payload, callback, on_reset)
                        except (ValueError, KeyError, TypeError):
                            log.warning("ignoring malformed notification %r", notify.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 — keep listening whatever happened
                log.warning("change feed lost its connection (%s); retrying in %.1f s", exc, delay_s)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 5.0)
