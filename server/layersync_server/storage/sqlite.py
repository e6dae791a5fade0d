"""SQLite backend: one database file in WAL mode, stdlib ``sqlite3``.

Each thread gets its own connection (autocommit mode, explicit transactions).
Writes use ``BEGIN IMMEDIATE``, which takes SQLite's single write lock, so writers
of all layers are serialised — the per-layer serialisation the interface promises.
Reads run in deferred transactions and see one consistent WAL snapshot.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from layersync_server.storage.base import (DocumentExists, DocumentInfo, DocumentNotFound,
                                           LayerState, LayerWriter, NewDocument, RecordPage,
                                           Storage, StoredRecord)

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    document_id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    page_count INTEGER NOT NULL,
    annotation_count INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    pdf BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS layers (
    document_id TEXT NOT NULL REFERENCES documents(document_id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    epoch TEXT NOT NULL,
    revision INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (document_id, name)
);
CREATE TABLE IF NOT EXISTS records (
    document_id TEXT NOT NULL,
    layer TEXT NOT NULL,
    id TEXT NOT NULL,
    revision INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    content TEXT,
    root_id TEXT,
    created_by TEXT,
    updated_by TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (document_id, layer, id),
    FOREIGN KEY (document_id, layer) REFERENCES layers(document_id, name) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS records_by_revision ON records(document_id, layer, revision);
CREATE INDEX IF NOT EXISTS records_by_root ON records(document_id, layer, root_id)
    WHERE root_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS change_log (
    document_id TEXT NOT NULL,
    layer TEXT NOT NULL,
    change_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    PRIMARY KEY (document_id, layer, change_id),
    FOREIGN KEY (document_id, layer) REFERENCES layers(document_id, name) ON DELETE CASCADE
);
"""

_RECORD_COLUMNS = "id, revision, deleted, content, created_by, updated_by, created_at, updated_at"
_DOCUMENT_COLUMNS = "document_id, title, sha256, size_bytes, page_count, annotation_count, created_at"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dump(content: dict) -> str:
    # ensure_ascii=False keeps text as UTF-8; json round-trips every string value exactly.
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"))


def _record(row: sqlite3.Row) -> StoredRecord:
    return StoredRecord(id=row["id"], revision=row["revision"], deleted=bool(row["deleted"]),
                        content=None if row["content"] is None else json.loads(row["content"]),
                        created_by=row["created_by"], updated_by=row["updated_by"],
                        created_at=row["created_at"], updated_at=row["updated_at"])


def _document(row: sqlite3.Row) -> DocumentInfo:
    return DocumentInfo(**{k: row[k] for k in row.keys()})


class _SqliteLayerWriter(LayerWriter):
    """LayerWriter over a connection that is inside ``BEGIN IMMEDIATE``."""

    def __init__(self, conn: sqlite3.Connection, layer: LayerState):
        self._conn = conn
        self._layer = layer

    @property
    def layer(self) -> LayerState:
        return self._layer

    def _key(self) -> tuple[str, str]:
        return self._layer.document_id, self._layer.name

    def get_record(self, record_id: str) -> StoredRecord | None:
        row = self._conn.execute(
            f"SELECT {_RECORD_COLUMNS} FROM records WHERE document_id=? AND layer=? AND id=?",
            (*self._key(), record_id)).fetchone()
        return _record(row) if row else None

    def live_children(self, root_id: str) -> list[StoredRecord]:
        rows = self._conn.execute(
            f"SELECT {_RECORD_COLUMNS} FROM records WHERE document_id=? AND layer=? "
            "AND root_id=? AND deleted=0 ORDER BY revision", (*self._key(), root_id)).fetchall()
        return [_record(r) for r in rows]

    def put_record(self, record_id: str, content: dict | None, user_id: str | None) -> int:
        revision = self._layer.revision + 1
        now = _now()
        root_id = content.get("rootId") if content else None
        self._conn.execute(
            "INSERT INTO records (document_id, layer, id, revision, deleted, content, root_id,"
            " created_by, updated_by, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (document_id, layer, id) DO UPDATE SET revision=excluded.revision,"
            " deleted=excluded.deleted, content=excluded.content, root_id=excluded.root_id,"
            " updated_by=excluded.updated_by, updated_at=excluded.updated_at",
            (*self._key(), record_id, revision, content is None,
             None if content is None else _dump(content),
             root_id if isinstance(root_id, str) else None, user_id, user_id, now, now))
        self._conn.execute("UPDATE layers SET revision=? WHERE document_id=? AND name=?",
                           (revision, *self._key()))
        self._layer = LayerState(self._layer.document_id, self._layer.name, self._layer.epoch, revision)
        return revision

    def recorded_outcome(self, change_id: str) -> dict | None:
        row = self._conn.execute(
            "SELECT outcome FROM change_log WHERE document_id=? AND layer=? AND change_id=?",
            (*self._key(), change_id)).fetchone()
        return json.loads(row["outcome"]) if row else None

    def record_outcome(self, change_id: str, outcome: dict) -> None:
        self._conn.execute(
            "INSERT INTO change_log (document_id, layer, change_id, outcome) VALUES (?,?,?,?)",
            (*self._key(), change_id, _dump(outcome)))


class SqliteStorage(Storage):
    """:class:`Storage` in one SQLite file (WAL). Thread-safe: a connection per thread."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        conn = self._conn()
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(_SCHEMA)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _conn(self) -> sqlite3.Connection:
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
        return conn

    @contextlib.contextmanager
    def _transaction(self, write: bool) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    # -- documents ---------------------------------------------------------------------

    def create_document(self, document: NewDocument) -> DocumentInfo:
        now = _now()
        with self._transaction(write=True) as conn:
            if conn.execute("SELECT 1 FROM documents WHERE document_id=?",
                            (document.document_id,)).fetchone():
                raise DocumentExists(document.document_id)
            conn.execute(
                f"INSERT INTO documents ({_DOCUMENT_COLUMNS}, pdf) VALUES (?,?,?,?,?,?,?,?)",
                (document.document_id, document.title, document.sha256, len(document.pdf),
                 document.page_count, len(document.records), now, document.pdf))
            writer = _SqliteLayerWriter(conn, self._create_layer(conn, document.document_id, ""))
            for content in document.records:
                writer.put_record(content["id"], content, None)
        return DocumentInfo(document.document_id, document.title, document.sha256,
                            len(document.pdf), document.page_count, len(document.records), now)

    def get_document(self, document_id: str) -> DocumentInfo | None:
        row = self._conn().execute(f"SELECT {_DOCUMENT_COLUMNS} FROM documents WHERE document_id=?",
                                   (document_id,)).fetchone()
        return _document(row) if row else None

    def list_documents(self) -> list[DocumentInfo]:
        rows = self._conn().execute(
            f"SELECT {_DOCUMENT_COLUMNS} FROM documents ORDER BY created_at, document_id").fetchall()
        return [_document(r) for r in rows]

    def read_pdf(self, document_id: str) -> bytes:
        row = self._conn().execute("SELECT pdf FROM documents WHERE document_id=?",
                                   (document_id,)).fetchone()
        if row is None:
            raise DocumentNotFound(document_id)
        return bytes(row["pdf"])

    # -- layers ------------------------------------------------------------------------

    @staticmethod
    def _read_layer(conn: sqlite3.Connection, document_id: str, name: str) -> LayerState | None:
        row = conn.execute("SELECT epoch, revision FROM layers WHERE document_id=? AND name=?",
                           (document_id, name)).fetchone()
        return LayerState(document_id, name, row["epoch"], row["revision"]) if row else None

    @staticmethod
    def _create_layer(conn: sqlite3.Connection, document_id: str, name: str) -> LayerState:
        """Insert a layer; the caller holds the write lock and checked it is missing."""
        if not conn.execute("SELECT 1 FROM documents WHERE document_id=?", (document_id,)).fetchone():
            raise DocumentNotFound(document_id)
        epoch = str(uuid.uuid4())
        conn.execute("INSERT INTO layers (document_id, name, epoch, revision, created_at) "
                     "VALUES (?,?,?,0,?)", (document_id, name, epoch, _now()))
        return LayerState(document_id, name, epoch, 0)

    def ensure_layer(self, document_id: str, layer: str) -> LayerState:
        found = self._read_layer(self._conn(), document_id, layer)
        if found:
            return found
        with self._transaction(write=True) as conn:
            return (self._read_layer(conn, document_id, layer)
                    or self._create_layer(conn, document_id, layer))

    def list_records(self, document_id: str, layer: str, since: int, limit: int,
                     include_tombstones: bool, exclude_revisions: frozenset[int] = frozenset()
                     ) -> RecordPage:
        self.ensure_layer(document_id, layer)
        sql = (f"SELECT {_RECORD_COLUMNS} FROM records WHERE document_id=? AND layer=? "
               "AND revision > ?")
        params: list = [document_id, layer, since]
        if not include_tombstones:
            sql += " AND deleted=0"
        if exclude_revisions:
            sql += f" AND revision NOT IN ({','.join('?' * len(exclude_revisions))})"
            params.extend(sorted(exclude_revisions))
        sql += " ORDER BY revision LIMIT ?"
        params.append(limit + 1)
        with self._transaction(write=False) as conn:
            state = self._read_layer(conn, document_id, layer)
            rows = conn.execute(sql, params).fetchall()
        records = [_record(r) for r in rows[:limit]]
        has_more = len(rows) > limit
        next_since = records[-1].revision if has_more else state.revision
        return RecordPage(state, records, has_more, next_since)

    @contextlib.contextmanager
    def write_layer(self, document_id: str, layer: str) -> Iterator[LayerWriter]:
        with self._transaction(write=True) as conn:
            state = (self._read_layer(conn, document_id, layer)
                     or self._create_layer(conn, document_id, layer))
            yield _SqliteLayerWriter(conn, state)

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._connections.clear()
        self._local = threading.local()
