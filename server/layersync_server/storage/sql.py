"""The SQL shared by the SQLite and PostgreSQL backends.

:class:`SqlStorage` implements the whole :class:`Storage` interface in portable SQL
(``?`` placeholders, ``INSERT ... ON CONFLICT``), and a backend subclass supplies
the dialect: how to get a connection, how to begin a transaction, how to lock one
layer, the column types, and what to do after a layer changed (PostgreSQL sends a
``NOTIFY``). Schema changes are versioned migrations (:data:`MIGRATIONS`), applied in
order at open; the backend stores the version it reached.
"""

from __future__ import annotations

import abc
import contextlib
import itertools
import json
import uuid
from datetime import datetime, timezone
from typing import Any, Iterator

import orjson

from layersync_server.storage.base import (Attachment, DocumentExists, DocumentInfo,
                                           DocumentNotFound, LayerDeleted, LayerExists,
                                           LayerState, LayerWriter, NewDocument, RecordPage,
                                           KEEP_GROUP, Storage, StoredRecord,
                                           has_handed_out_keys, is_form_field_named,
                                           without_handed_out_keys)
from layersync_server.record_kinds import FORM_FIELD_PREFIX
from layersync_server.wire_json import fast_dumps, loads

#: Versioned schema migrations: ``(version, statements)``. ``{blob}`` / ``{bigint}`` are
#: filled in by the dialect. Never edit a released entry; append a new one.
MIGRATIONS: list[tuple[int, list]] = [
    (1, [
        """CREATE TABLE IF NOT EXISTS documents (
            document_id TEXT PRIMARY KEY,
            title TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            size_bytes {bigint} NOT NULL,
            page_count INTEGER NOT NULL,
            annotation_count INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            pdf {blob} NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS layers (
            document_id TEXT NOT NULL REFERENCES documents(document_id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            epoch TEXT NOT NULL,
            revision {bigint} NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (document_id, name))""",
        """CREATE TABLE IF NOT EXISTS records (
            document_id TEXT NOT NULL,
            layer TEXT NOT NULL,
            id TEXT NOT NULL,
            revision {bigint} NOT NULL,
            deleted INTEGER NOT NULL,
            content TEXT,
            root_id TEXT,
            created_by TEXT,
            updated_by TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (document_id, layer, id),
            FOREIGN KEY (document_id, layer) REFERENCES layers(document_id, name) ON DELETE CASCADE)""",
        "CREATE INDEX IF NOT EXISTS records_by_revision ON records(document_id, layer, revision)",
        """CREATE INDEX IF NOT EXISTS records_by_root ON records(document_id, layer, root_id)
            WHERE root_id IS NOT NULL""",
        """CREATE TABLE IF NOT EXISTS change_log (
            document_id TEXT NOT NULL,
            layer TEXT NOT NULL,
            change_id TEXT NOT NULL,
            outcome TEXT NOT NULL,
            PRIMARY KEY (document_id, layer, change_id),
            FOREIGN KEY (document_id, layer) REFERENCES layers(document_id, name) ON DELETE CASCADE)""",
    ]),
    (2, [
        """CREATE TABLE IF NOT EXISTS record_versions (
            document_id TEXT NOT NULL,
            layer TEXT NOT NULL,
            id TEXT NOT NULL,
            revision {bigint} NOT NULL,
            deleted INTEGER NOT NULL,
            content TEXT,
            updated_by TEXT,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (document_id, layer, id, revision),
            FOREIGN KEY (document_id, layer) REFERENCES layers(document_id, name) ON DELETE CASCADE)""",
        """CREATE TABLE IF NOT EXISTS attachments (
            document_id TEXT NOT NULL REFERENCES documents(document_id) ON DELETE CASCADE,
            sha256 TEXT NOT NULL,
            content_type TEXT NOT NULL,
            size_bytes {bigint} NOT NULL,
            data {blob} NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (document_id, sha256))""",
        """CREATE TABLE IF NOT EXISTS revoked_tokens (
            jti TEXT PRIMARY KEY,
            revoked_at TEXT NOT NULL)""",
    ]),
    # record_versions keeps only superseded versions: a record's current version is its
    # row in records (history reads both), so a create writes no version row.
    (3, [
        """DELETE FROM record_versions WHERE EXISTS (SELECT 1 FROM records r
            WHERE r.document_id = record_versions.document_id AND r.layer = record_versions.layer
            AND r.id = record_versions.id AND r.revision = record_versions.revision)""",
    ]),
    # A tombstone per deleted layer (Storage.delete_layer): a request naming the layer
    # gets LayerDeleted instead of creating it again; create_layer clears it. Not tied to
    # documents: a document deleted and uploaded again keeps its layers' tombstones
    # (its default layer excepted, which the upload creates).
    (4, [
        """CREATE TABLE IF NOT EXISTS deleted_layers (
            document_id TEXT NOT NULL,
            name TEXT NOT NULL,
            deleted_at TEXT NOT NULL,
            PRIMARY KEY (document_id, name))""",
    ]),
    # Collaboration permissions: each record's mutable group (docs/protocol.md,
    # "Collaboration permissions"); created_by/updated_by were there from the start.
    # (An added column is a callable: a database whose version was set back, as the
    # migration tests do, may have it already, and SQLite has no ADD COLUMN IF NOT EXISTS.)
    (5, [
        lambda storage, conn: storage.add_column(conn, "records", "group_name", "TEXT"),
    ]),
    # Each kept version carries its ownership (history hands it out, and a version is
    # shown only to users who may view that version). created_by never changes, so the
    # versions kept before get their record's; their group is unknown and stays NULL,
    # which reads as "in no group": only a view grant that needs no group (all, self,
    # createdBy=) covers them (docs/protocol.md, "history").
    (6, [
        lambda storage, conn: storage.add_column(conn, "record_versions", "created_by", "TEXT"),
        lambda storage, conn: storage.add_column(conn, "record_versions", "group_name", "TEXT"),
        """UPDATE record_versions SET created_by = (SELECT r.created_by FROM records r
            WHERE r.document_id = record_versions.document_id AND r.layer = record_versions.layer
            AND r.id = record_versions.id) WHERE created_by IS NULL""",
    ]),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]

_RECORD_COLUMNS = ("id, revision, deleted, content, created_by, updated_by, created_at, updated_at, "
                   "group_name")
_DOCUMENT_COLUMNS = "document_id, title, sha256, size_bytes, page_count, annotation_count, created_at"


class SchemaTooNew(ValueError):
    """The database's schema version is newer than this server's :data:`SCHEMA_VERSION`
    (a ValueError, so ``layersync-server serve`` reports it in one line and exits 1)."""

    def __init__(self, found: int, supported: int):
        super().__init__(f"database schema version {found} is newer than this server's schema "
                         f"version {supported}: it was migrated by a newer LayerSync server; "
                         "upgrade this server (it refuses to run on a schema it does not know)")
        self.found = found
        self.supported = supported


def now_iso() -> str:
    """Current UTC time as ISO 8601 with milliseconds and ``Z``."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def dump_json(content: dict) -> str:
    """Compact JSON; ``ensure_ascii=False`` keeps text as UTF-8 and round-trips exactly.
    Always the stdlib encoder's text: orjson's when it is the same (see wire_json;
    orjson writes a non-finite float as ``null`` where the stdlib writes ``NaN``)."""
    data = fast_dumps(content)
    if data is None or b"null" in data:
        return json.dumps(content, ensure_ascii=False, separators=(",", ":"))
    return data.decode("utf-8")


def _row_of_create(values: tuple, now: str) -> dict:
    """The cached row (columns of ``_RECORD_COLUMNS``) of a pending create
    (:meth:`SqlLayerWriter.put_record` of a new record: ``(id, revision, content, root_id, user_id, group)``)."""
    record_id, revision, content, _, user_id, group = values
    return {"id": record_id, "revision": revision, "deleted": 0, "content": content,
            "created_by": user_id, "created_at": now, "updated_by": user_id, "updated_at": now,
            "group_name": group}


def _not_in(keys: dict, cache: dict) -> dict:
    """``keys`` without the keys of ``cache`` (``keys`` itself when the cache is empty,
    as it is at a writer's first prefetch)."""
    return {key: None for key in keys if key not in cache} if cache else keys


def _record(row) -> StoredRecord:
    return StoredRecord(id=row["id"], revision=row["revision"], deleted=bool(row["deleted"]),
                        content=None if row["content"] is None else loads(row["content"]),
                        created_by=row["created_by"], updated_by=row["updated_by"],
                        created_at=row["created_at"], updated_at=row["updated_at"],
                        group=row["group_name"])


def _version(row) -> StoredRecord:
    return StoredRecord(id=row["id"], revision=row["revision"], deleted=bool(row["deleted"]),
                        content=None if row["content"] is None else loads(row["content"]),
                        created_by=row["created_by"], updated_by=row["updated_by"],
                        updated_at=row["updated_at"], group=row["group_name"])


def _page_query(document_id: str, layer: str, since: int, limit: int, include_tombstones: bool,
                exclude_revisions: frozenset[int], only_tombstones: bool) -> tuple[str, list]:
    """SQL and parameters of a page of records (one more than ``limit``: has_more).

    ``exclude_revisions`` that are one run (a push's own revisions) cost no list: right
    after ``since`` they move ``since`` past the run, elsewhere they are one range."""
    excluded = [r for r in exclude_revisions if r > since] if exclude_revisions else []
    run = bool(excluded) and max(excluded) - min(excluded) + 1 == len(excluded)
    if run and min(excluded) == since + 1:
        since, excluded = max(excluded), []
    sql = (f"SELECT {_RECORD_COLUMNS} FROM records WHERE document_id=? AND layer=? "
           "AND revision > ?")
    params: list = [document_id, layer, since]
    if only_tombstones:
        sql += " AND deleted=1"
    elif not include_tombstones:
        sql += " AND deleted=0"
    if run and excluded:
        sql += " AND (revision < ? OR revision > ?)"
        params.extend((min(excluded), max(excluded)))
    elif excluded:
        sql += f" AND revision NOT IN ({','.join('?' * len(excluded))})"
        params.extend(sorted(excluded))
    sql += " ORDER BY revision LIMIT ?"
    params.append(limit + 1)
    return sql, params


def _page(state: LayerState, rows: list, limit: int) -> RecordPage:
    """A :class:`RecordPage` from up to ``limit + 1`` record rows ordered by revision."""
    records = [_record(r) for r in rows[:limit]]
    has_more = len(rows) > limit
    next_since = records[-1].revision if has_more else state.revision
    return RecordPage(state, records, has_more, next_since)


def _document(row) -> DocumentInfo:
    return DocumentInfo(**{k: row[k] for k in row.keys()})


_INSERT_RECORD = ("INSERT INTO records (document_id, layer, id, revision, deleted, content, root_id,"
                  " created_by, updated_by, created_at, updated_at, group_name)")
#: A pending create's row, from its ``(id, revision, content, root_id, user_id, group)``
#: (the columns of ``VALUES``) and ``(document_id, layer, created_at, updated_at)``.
_CREATED_RECORD = "?, ?, column1, column2, 0, column3, column4, column5, column5, ?, ?, column6"
_INSERT_OUTCOME = "INSERT INTO change_log (document_id, layer, change_id, outcome)"
_UPSERT_RECORD = ("ON CONFLICT (document_id, layer, id) DO UPDATE SET revision=excluded.revision,"
                  " deleted=excluded.deleted, content=excluded.content, root_id=excluded.root_id,"
                  " updated_by=excluded.updated_by, updated_at=excluded.updated_at,"
                  " group_name=excluded.group_name")


class SqlLayerWriter(LayerWriter):
    """LayerWriter over a connection inside a write transaction holding the layer lock.

    Writes are buffered and sent as multi-row inserts (:meth:`SqlStorage.insert_rows`;
    :meth:`flush`, called by :meth:`SqlStorage.write_layer` before commit and before any
    SQL read that could see them), so a batch of N changes costs a few statements
    instead of several per change; new records (the bulk of a batch of creates) go in one
    ``INSERT ... SELECT`` of their varying columns (:meth:`SqlStorage.insert_selected_rows`).
    Every record this transaction reads or writes is cached by id (``_rows``; ``None`` =
    no such record), so the cache is authoritative for every id it holds: the layer lock
    guarantees nobody else writes the layer meanwhile, and an id is cached before its
    first write (a write reads the row it replaces). :meth:`prefetch` fills the caches
    for a whole batch in one query per table. All rows written by one writer carry the
    same timestamp (taken when the transaction started).

    History: a record's current version is its ``records`` row; ``record_versions``
    holds the versions it superseded (the newest ``history_versions - 1``). A write
    moves the row it replaces there, so a create writes one row, not two.
    """

    #: Ids per ``IN (...)`` query of :meth:`prefetch` (SQLite's old variable limit is 999).
    PREFETCH_CHUNK = 500
    #: Fewest keys :meth:`prefetch` first tries to prove absent with one range probe.
    RANGE_PROBE_MIN = 2

    def __init__(self, storage: "SqlStorage", conn, layer: LayerState, fresh: bool = False):
        """``fresh``: the layer was created by this transaction, so it holds no records
        but the ones written here (no read is needed to know a record is new)."""
        self._s = storage
        self._conn = conn
        self._layer = layer  # as of self._revision (built again only when asked for)
        self._revision = layer.revision
        self._key_tuple = (layer.document_id, layer.name)
        self.start_revision = layer.revision
        self._now = now_iso()
        self._fresh = fresh
        # id -> record row (columns of _RECORD_COLUMNS), or the tuple of its pending create
        # (made a row when read: see _row), None = no such record
        self._rows: dict[str, dict | tuple | None] = {}
        self._outcomes: dict[str, str | None] = {}  # change id -> outcome JSON, None = not logged
        self._new: set[str] = set()  # ids known absent before this transaction (no versions kept)
        self._superseded: dict[str, int] = {}  # id -> version rows added since the last flush
        self._flushed_revision = layer.revision
        # rows to insert, each starting with (document_id, layer)
        self._pending_records: list[tuple] = []
        self._pending_versions: list[tuple] = []
        # new records, (id, revision, content, root_id, user_id, group): also their rows in
        # _rows until read (_row makes the dict); and (change_id, outcome) of logged changes
        self._pending_creates: list[tuple] = []
        self._pending_outcomes: list[tuple] = []
        self._form_fields: dict[str, StoredRecord | None] = {}  # form_field's answers by name

    @property
    def layer(self) -> LayerState:
        if self._layer.revision != self._revision:
            self._layer = LayerState(*self._key_tuple, self._layer.epoch, self._revision)
        return self._layer

    def _key(self) -> tuple[str, str]:
        return self._key_tuple

    def _q(self, sql: str, params=()):
        return self._s.execute(self._conn, sql, params)

    def prefetch(self, record_ids, change_ids) -> None:
        """Load the records ``record_ids`` and the logged outcomes of ``change_ids`` (a
        batch about to be applied) in one query per table and chunk; a batch of keys that
        :meth:`_none_between` proves absent (new ids) costs one index probe per table."""
        wanted = _not_in(dict.fromkeys(record_ids), self._rows)  # id -> None, in order
        ids = list(wanted)
        if self._fresh or self._none_between("records", "id", ids):
            self._rows.update(wanted)
            self._new.update(ids)
            ids = []
        for start in range(0, len(ids), self.PREFETCH_CHUNK):
            chunk = ids[start:start + self.PREFETCH_CHUNK]
            rows = self._q(f"SELECT {_RECORD_COLUMNS} FROM records WHERE document_id=? AND layer=? "
                           f"AND id IN ({','.join('?' * len(chunk))})", (*self._key(), *chunk)).fetchall()
            found = {r["id"]: dict(r) for r in rows}
            self._rows.update(dict.fromkeys(chunk))  # (ids are unique: dict.fromkeys above)
            self._rows.update(found)
            self._new.update(chunk)
            self._new.difference_update(found)
        wanted = _not_in(dict.fromkeys(change_ids), self._outcomes)
        cids = list(wanted)
        if self._none_between("change_log", "change_id", cids):
            self._outcomes.update(wanted)
            cids = []
        for start in range(0, len(cids), self.PREFETCH_CHUNK):
            chunk = cids[start:start + self.PREFETCH_CHUNK]
            rows = self._q("SELECT change_id, outcome FROM change_log WHERE document_id=? AND layer=? "
                           f"AND change_id IN ({','.join('?' * len(chunk))})", (*self._key(), *chunk)).fetchall()
            self._outcomes.update(dict.fromkeys(chunk))
            self._outcomes.update((r["change_id"], r["outcome"]) for r in rows)

    def _none_between(self, table: str, column: str, keys: list) -> bool:
        """True when the layer has no row in ``table`` whose ``column`` (its primary key
        after the layer's) lies between the least and the greatest of ``keys``, so none of
        them is there: one probe of the primary key index instead of one per key. A
        client's new ids are time-ordered (ULIDs) and sort after every id it made before,
        so a batch of creates nearly always passes. False: unknown (also when the backend
        does not order text as Python orders ``str``, see :attr:`SqlStorage.ORDERED_TEXT_KEYS`)."""
        if (len(keys) < self.RANGE_PROBE_MIN or not self._s.ORDERED_TEXT_KEYS
                or set(map(type, keys)) != {str}):
            return False
        row = self._q(f"SELECT 1 FROM {table} WHERE document_id=? AND layer=? AND {column} >= ? "
                      f"AND {column} <= ? LIMIT 1", (*self._key(), min(keys), max(keys))).fetchone()
        return row is None

    def flush(self) -> None:
        """Send the buffered writes (and the layer's new revision) to the database."""
        key = self._key()
        many = self._s.executemany
        if self._pending_creates:  # first: a later write of such a record is an upsert below
            self._s.insert_selected_rows(self._conn, _INSERT_RECORD, _CREATED_RECORD,
                                         (*key, self._now, self._now), self._pending_creates)
            self._pending_creates = []
        if self._pending_records:
            records = self._pending_records
            if len({values[2] for values in records}) == len(records):
                # one statement per many rows; not with an id twice (PostgreSQL refuses an
                # ON CONFLICT DO UPDATE that meets its own row)
                self._s.insert_rows(self._conn, _INSERT_RECORD, records, _UPSERT_RECORD)
            else:
                many(self._conn, f"{_INSERT_RECORD} VALUES (?,?,?,?,?,?,?,?,?,?,?,?) {_UPSERT_RECORD}",
                     records)
            self._pending_records = []
        if self._pending_versions:
            # DO NOTHING: a server of the previous release (schema 2 semantics) sharing the
            # database during a rolling upgrade also writes the row of the current version,
            # which this write now moves here; both rows hold the same version.
            many(self._conn, "INSERT INTO record_versions (document_id, layer, id, revision, deleted,"
                 " content, updated_by, updated_at, created_by, group_name) VALUES (?,?,?,?,?,?,?,?,?,?) "
                 "ON CONFLICT (document_id, layer, id, revision) DO NOTHING", self._pending_versions)
            self._pending_versions = []
            keep = self._s.history_versions - 1
            trim = [i for i, n in self._superseded.items() if i not in self._new or n > keep]
            if trim:
                many(self._conn, "DELETE FROM record_versions WHERE document_id=? AND layer=? AND id=? "
                     "AND revision NOT IN (SELECT revision FROM record_versions WHERE document_id=? "
                     "AND layer=? AND id=? ORDER BY revision DESC LIMIT ?)",
                     [(*key, i, *key, i, keep) for i in trim])
            self._new.difference_update(self._superseded)  # they have versions now
            self._superseded = {}
        if self._pending_outcomes:
            self._s.insert_selected_rows(self._conn, _INSERT_OUTCOME, "?, ?, column1, column2", key,
                                         self._pending_outcomes)
            self._pending_outcomes = []
        if self._revision != self._flushed_revision:
            self._q("UPDATE layers SET revision=? WHERE document_id=? AND name=?",
                    (self._revision, *key))
            self._flushed_revision = self._revision

    def _row(self, record_id: str) -> dict | None:
        """The record's current row (cached), or None."""
        try:
            row = self._rows[record_id]
        except KeyError:
            pass
        else:
            if type(row) is tuple:  # a pending create (put_record)
                row = self._rows[record_id] = _row_of_create(row, self._now)
            return row
        row = None
        if not self._fresh:  # an id not cached has no pending write: the table is current
            row = self._q(f"SELECT {_RECORD_COLUMNS} FROM records WHERE document_id=? AND layer=? AND id=?",
                          (*self._key(), record_id)).fetchone()
            row = dict(row) if row else None
        self._rows[record_id] = row
        if row is None:
            self._new.add(record_id)
        return row

    def get_record(self, record_id: str) -> StoredRecord | None:
        row = self._row(record_id)
        return _record(row) if row else None

    def live_children(self, root_id: str) -> list[StoredRecord]:
        self.flush()
        rows = self._q(f"SELECT {_RECORD_COLUMNS} FROM records WHERE document_id=? AND layer=? "
                       "AND root_id=? AND deleted=0 ORDER BY revision",
                       (*self._key(), root_id)).fetchall()
        children = []
        for row in rows:
            row = self._rows[row["id"]] = dict(row)  # flushed: the table is current
            children.append(_record(row))
        return children

    def form_field(self, name: str) -> StoredRecord | None:
        """:meth:`LayerWriter.form_field` in one query (its content names a form field
        type; the name is matched here, exactly), cached per name until this writer writes
        a form field."""
        if name in self._form_fields:
            return self._form_fields[name]
        self.flush()
        rows = self._q(f"SELECT {_RECORD_COLUMNS} FROM records WHERE document_id=? AND layer=? "
                       "AND deleted=0 AND content LIKE ? ORDER BY revision",
                       (*self._key(), f'%"{FORM_FIELD_PREFIX}%')).fetchall()
        found = None
        for row in rows:
            record = _record(row)
            if is_form_field_named(record, name):
                self._rows[row["id"]] = dict(row)  # flushed: the table is current
                found = record
                break
        self._form_fields[name] = found
        return found

    def _forget_form_fields(self, *texts: str | None) -> None:
        """Drops :meth:`form_field`'s cache when a write may add, change or remove a form field."""
        if self._form_fields and any(t is not None and FORM_FIELD_PREFIX in t for t in texts):
            self._form_fields = {}

    def put_record(self, record_id: str, content: dict | None, user_id: str | None,
                   content_text: str | None = None, group: object = KEEP_GROUP) -> int:
        if content is None:
            text = None
        else:
            if has_handed_out_keys(content):
                content, content_text = without_handed_out_keys(content), None
            text = dump_json(content) if content_text is None else content_text
        old = self._row(record_id)
        self._forget_form_fields(text, old["content"] if old is not None else None)
        revision = self._revision = self._revision + 1
        now = self._now
        deleted = int(content is None)
        if group is KEEP_GROUP:
            group = old["group_name"] if old is not None else None
        root_id = content.get("rootId") if content else None
        if type(root_id) is not str:
            root_id = None
        if old is None and text is not None:  # a new record: the batched insert of creates
            self._rows[record_id] = values = (record_id, revision, text, root_id, user_id, group)
            self._pending_creates.append(values)
            return revision
        if old is None:
            self._rows[record_id] = {
                "id": record_id, "revision": revision, "deleted": deleted, "content": text,
                "created_by": user_id, "created_at": now, "updated_by": user_id, "updated_at": now,
                "group_name": group}
        else:
            if self._s.history_versions > 1:
                self._pending_versions.append((*self._key_tuple, record_id, old["revision"], old["deleted"],
                                               old["content"], old["updated_by"], old["updated_at"],
                                               old["created_by"], old["group_name"]))
                self._superseded[record_id] = self._superseded.get(record_id, 0) + 1
            self._rows[record_id] = {
                "id": record_id, "revision": revision, "deleted": deleted, "content": text,
                "created_by": old["created_by"], "created_at": old["created_at"],
                "updated_by": user_id, "updated_at": now, "group_name": group}
        document_id, layer = self._key_tuple
        self._pending_records.append((document_id, layer, record_id, revision, deleted, text,
                                      root_id, user_id, user_id, now, now, group))
        return revision

    def history(self, record_id: str) -> list[StoredRecord]:
        self.flush()
        return self._s._history(self._conn, *self._key(), record_id)

    def changes_since(self, since: int, limit: int,
                      exclude_revisions: frozenset[int] = frozenset()) -> RecordPage:
        self.flush()
        sql, params = _page_query(*self._key(), since, limit, True, exclude_revisions, False)
        rows = self._q(sql, params).fetchall()
        return _page(self.layer, rows, limit)

    def recorded_outcome(self, change_id: str) -> dict | None:
        if change_id in self._outcomes:
            text = self._outcomes[change_id]
        else:
            row = self._q("SELECT outcome FROM change_log WHERE document_id=? AND layer=? AND change_id=?",
                          (*self._key(), change_id)).fetchone()
            text = self._outcomes[change_id] = row["outcome"] if row else None
        return loads(text) if text is not None else None

    def record_outcome(self, change_id: str, outcome: dict) -> None:
        if "reason" not in outcome:  # accepted: two checked ids and an int, so orjson's
            text = orjson.dumps(outcome).decode("utf-8")  # text is the stdlib's (no scans)
        else:
            text = dump_json(outcome)
        self._outcomes[change_id] = text
        self._pending_outcomes.append((change_id, text))


class SqlStorage(Storage):
    """:class:`Storage` in portable SQL; subclasses provide the dialect hooks."""

    #: Column type names substituted into :data:`MIGRATIONS`.
    TYPES: dict[str, str] = {"blob": "BLOB", "bigint": "INTEGER"}
    #: Whether the text columns compare as Python compares ``str`` of valid ids (by code
    #: point), so that a range of keys in SQL is the range ``min(keys)..max(keys)``.
    #: SQLite's BINARY collation does (UTF-8 bytes sort as code points); PostgreSQL's
    #: database collation (e.g. ``en_US.UTF-8``) need not.
    ORDERED_TEXT_KEYS = False

    def __init__(self, history_versions: int = 20):
        self.history_versions = history_versions

    # -- dialect hooks -------------------------------------------------------------------

    @abc.abstractmethod
    def connection(self) -> contextlib.AbstractContextManager:
        """A connection (autocommit mode) usable by the calling thread."""

    @abc.abstractmethod
    def execute(self, conn, sql: str, params=()) -> Any:
        """Run ``sql`` (``?`` placeholders) and return a cursor whose rows index by name."""

    def executemany(self, conn, sql: str, seq_of_params) -> None:
        """Run ``sql`` once per parameter tuple (backends override with a batched call)."""
        for params in seq_of_params:
            self.execute(conn, sql, params)

    #: Most ``?`` parameters :meth:`insert_rows` puts in one statement (SQLite's limit
    #: before 3.32.0; PostgreSQL allows 65535).
    MAX_STATEMENT_PARAMS = 999

    def insert_rows(self, conn, insert: str, rows: list[tuple], suffix: str = "") -> None:
        """Run ``insert VALUES (?,..),(?,..).. suffix`` for ``rows`` (tuples of one length),
        as many rows per statement as :data:`MAX_STATEMENT_PARAMS` allows, through
        :meth:`executemany` (one call for the full statements, one for the rest): SQLite
        then costs about 40% less per row than a statement per row. Rows go in order, so
        the result is that of inserting them one by one, except that PostgreSQL refuses
        an ``ON CONFLICT DO UPDATE`` suffix when two rows of one statement conflict with
        each other (the caller avoids that)."""
        width = len(rows[0])
        per_statement = max(1, self.MAX_STATEMENT_PARAMS // width)
        row_sql = "(" + ",".join("?" * width) + ")"
        full = len(rows) - len(rows) % per_statement
        if full:
            self.executemany(conn, f"{insert} VALUES {','.join([row_sql] * per_statement)} {suffix}",
                             [list(itertools.chain.from_iterable(rows[start:start + per_statement]))
                              for start in range(0, full, per_statement)])
        if full < len(rows):
            self.executemany(conn, f"{insert} VALUES {','.join([row_sql] * (len(rows) - full))} "
                             f"{suffix}", [list(itertools.chain.from_iterable(rows[full:]))])

    def insert_selected_rows(self, conn, insert: str, select: str, constants: tuple,
                             rows: list[tuple]) -> None:
        """Run ``insert SELECT select FROM (VALUES (?,..),(?,..)..) AS v`` for ``rows``
        (tuples of one length): ``select`` reads each row's values as ``column1``,
        ``column2``... (the names both SQLite and PostgreSQL give them) and takes its
        other ``?`` from ``constants``, sent once per statement instead of once per row
        (:meth:`insert_rows` otherwise). For SQLite about 30% cheaper than
        :meth:`insert_rows` with the constants in every row, for rows of which most
        columns are the same (a batch of creates)."""
        width = len(rows[0])
        per_statement = max(1, (self.MAX_STATEMENT_PARAMS - len(constants)) // width)
        row_sql = "(" + ",".join("?" * width) + ")"

        def statement(count: int) -> str:
            return f"{insert} SELECT {select} FROM (VALUES {','.join([row_sql] * count)}) AS v"

        full = len(rows) - len(rows) % per_statement
        if full:
            chain = itertools.chain.from_iterable
            self.executemany(conn, statement(per_statement),
                             [[*constants, *chain(rows[start:start + per_statement])]
                              for start in range(0, full, per_statement)])
        if full < len(rows):
            self.executemany(conn, statement(len(rows) - full),
                             [[*constants, *itertools.chain.from_iterable(rows[full:])]])

    def batch(self, conn) -> contextlib.AbstractContextManager:
        """Statements run inside may be sent together (PostgreSQL: a pipeline, one
        round trip); errors may surface when the block exits. Default: no batching."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def begin_sql(self, write: bool) -> str:
        """The statement that starts a read or write transaction."""

    @abc.abstractmethod
    def schema_version(self, conn) -> int:
        """The migration version the database is at (0 = empty)."""

    @abc.abstractmethod
    def set_schema_version(self, conn, version: int) -> None:
        """Store the migration version (inside the migration's transaction)."""

    #: Suffix of the ``SELECT`` that locks one layer row in a write transaction.
    LOCK_SUFFIX = ""

    def layer_changed(self, conn, layer: LayerState, reset: bool = False) -> None:
        """Called inside a write transaction, before commit, when the layer's revision
        moved; ``reset``: the layer (its epoch) is being deleted, so revisions of a layer
        re-created under that name start again from 0."""

    # -- shared machinery ----------------------------------------------------------------

    def migrate(self) -> None:
        """Apply the migrations the database has not seen, each in its own transaction.

        Raises:
            SchemaTooNew: the database was migrated by a newer server (its schema
                version is above :data:`SCHEMA_VERSION`); this server refuses to use it.
        """
        with self.transaction(write=True) as conn:
            current = self.schema_version(conn)
        if current > SCHEMA_VERSION:
            raise SchemaTooNew(current, SCHEMA_VERSION)
        for version, statements in MIGRATIONS:
            if version <= current:
                continue
            with self.transaction(write=True) as conn:
                if self.schema_version(conn) >= version:  # another process got there first
                    continue
                for statement in statements:
                    if callable(statement):
                        statement(self, conn)
                    else:
                        self.execute(conn, statement.format(**self.TYPES))
                self.set_schema_version(conn, version)

    def add_column(self, conn, table: str, column: str, column_type: str) -> None:
        """``ALTER TABLE table ADD COLUMN column column_type`` unless it is there."""
        columns = [d[0] for d in self.execute(conn, f"SELECT * FROM {table} LIMIT 0").description]
        if column not in columns:
            self.execute(conn, f"ALTER TABLE {table} ADD COLUMN {column} {column_type}")

    @contextlib.contextmanager
    def transaction(self, write: bool) -> Iterator[Any]:
        with self.connection() as conn:
            self.execute(conn, self.begin_sql(write))
            try:
                yield conn
            except BaseException:
                self.execute(conn, "ROLLBACK")
                raise
            self.execute(conn, "COMMIT")

    # -- documents -----------------------------------------------------------------------

    def create_document(self, document: NewDocument) -> DocumentInfo:
        now = now_iso()
        with self.transaction(write=True) as conn:
            inserted = self.execute(
                conn, f"INSERT INTO documents ({_DOCUMENT_COLUMNS}, pdf) VALUES (?,?,?,?,?,?,?,?) "
                "ON CONFLICT (document_id) DO NOTHING",
                (document.document_id, document.title, document.sha256, len(document.pdf),
                 document.page_count, document.annotation_count, now, document.pdf)).rowcount
            if inserted != 1:
                raise DocumentExists(document.document_id)
            self._clear_tombstone(conn, document.document_id, "")  # the upload creates it
            for sha256, data in document.attachments.items():
                self.execute(conn, "INSERT INTO attachments (document_id, sha256, content_type,"
                             " size_bytes, data, created_at) VALUES (?,?,?,?,?,?) "
                             "ON CONFLICT (document_id, sha256) DO NOTHING",
                             (document.document_id, sha256, "application/octet-stream", len(data),
                              data, now))
            writer = SqlLayerWriter(self, conn, self._lock_layer(conn, document.document_id, ""),
                                    fresh=True)  # the document, so its layer, is new
            for content in document.records:
                writer.put_record(content["id"], content, None)
            writer.flush()
            if writer.layer.revision:
                self.layer_changed(conn, writer.layer)
        return DocumentInfo(document.document_id, document.title, document.sha256,
                            len(document.pdf), document.page_count, document.annotation_count, now)

    def get_document(self, document_id: str) -> DocumentInfo | None:
        with self.connection() as conn:
            row = self.execute(conn, f"SELECT {_DOCUMENT_COLUMNS} FROM documents WHERE document_id=?",
                               (document_id,)).fetchone()
        return _document(row) if row else None

    def list_documents(self, offset: int = 0, limit: int | None = None) -> list[DocumentInfo]:
        sql = f"SELECT {_DOCUMENT_COLUMNS} FROM documents ORDER BY created_at, document_id"
        params: tuple = ()
        if limit is not None:
            sql += " LIMIT ? OFFSET ?"
            params = (limit, offset)
        with self.connection() as conn:
            rows = self.execute(conn, sql, params).fetchall()
        return [_document(r) for r in rows]

    def count_documents(self) -> int:
        with self.connection() as conn:
            return int(self.execute(conn, "SELECT COUNT(*) AS n FROM documents").fetchone()["n"])

    def delete_document(self, document_id: str) -> bool:
        with self.transaction(write=True) as conn:
            for layer in self.execute(conn, "SELECT name, epoch, revision FROM layers WHERE "
                                      "document_id=?", (document_id,)).fetchall():
                # every process forgets the layer's revision and wakes its long-polls:
                # they re-read and get 404
                self.layer_changed(conn, LayerState(document_id, layer["name"], layer["epoch"],
                                                    layer["revision"] + 1), reset=True)
                self._leave_tombstone(conn, document_id, layer["name"])
            # children first: SQLite enforces the cascade only with foreign_keys=ON
            for table in ("change_log", "record_versions", "records", "layers", "attachments"):
                self.execute(conn, f"DELETE FROM {table} WHERE document_id=?", (document_id,))
            return self.execute(conn, "DELETE FROM documents WHERE document_id=?",
                                (document_id,)).rowcount == 1

    def read_pdf(self, document_id: str) -> bytes:
        with self.connection() as conn:
            row = self.execute(conn, "SELECT pdf FROM documents WHERE document_id=?",
                               (document_id,)).fetchone()
        if row is None:
            raise DocumentNotFound(document_id)
        return bytes(row["pdf"])

    # -- layers --------------------------------------------------------------------------

    def _read_layer(self, conn, document_id: str, name: str, lock: bool = False) -> LayerState | None:
        row = self.execute(conn, "SELECT epoch, revision FROM layers WHERE document_id=? AND name=?"
                           + (self.LOCK_SUFFIX if lock else ""), (document_id, name)).fetchone()
        return LayerState(document_id, name, row["epoch"], row["revision"]) if row else None

    def _insert_layer(self, conn, document_id: str, name: str) -> bool:
        """Insert the layer (revision 0, a new epoch) unless it exists or has a tombstone
        (one statement: the tombstone check and the insert see the same rows). True when
        inserted.

        Raises:
            DocumentNotFound: no such document. LayerDeleted: the layer has a tombstone.
        """
        if not self.execute(conn, "SELECT 1 FROM documents WHERE document_id=?",
                            (document_id,)).fetchone():
            raise DocumentNotFound(document_id)
        if self.execute(conn, "INSERT INTO layers (document_id, name, epoch, revision, created_at) "
                        "SELECT ?,?,?,0,? WHERE NOT EXISTS (SELECT 1 FROM deleted_layers "
                        "WHERE document_id=? AND name=?) ON CONFLICT (document_id, name) DO NOTHING",
                        (document_id, name, str(uuid.uuid4()), now_iso(), document_id,
                         name)).rowcount == 1:
            return True
        if self._has_tombstone(conn, document_id, name):
            raise LayerDeleted(name)
        return False

    def _has_tombstone(self, conn, document_id: str, name: str) -> bool:
        return self.execute(conn, "SELECT 1 FROM deleted_layers WHERE document_id=? AND name=?",
                            (document_id, name)).fetchone() is not None

    def _leave_tombstone(self, conn, document_id: str, name: str) -> None:
        self.execute(conn, "INSERT INTO deleted_layers (document_id, name, deleted_at) "
                     "VALUES (?,?,?) ON CONFLICT (document_id, name) DO NOTHING",
                     (document_id, name, now_iso()))

    def _clear_tombstone(self, conn, document_id: str, name: str) -> None:
        self.execute(conn, "DELETE FROM deleted_layers WHERE document_id=? AND name=?",
                     (document_id, name))

    def _lock_layer(self, conn, document_id: str, name: str) -> LayerState:
        """The layer, created if it never existed, locked for this write transaction.

        Raises:
            DocumentNotFound, LayerDeleted: as :meth:`_insert_layer`.
        """
        state = self._read_layer(conn, document_id, name, lock=True)
        if state is None:
            self._insert_layer(conn, document_id, name)
            state = self._read_layer(conn, document_id, name, lock=True)
        return state

    def is_layer_deleted(self, document_id: str, layer: str) -> bool:
        with self.connection() as conn:
            return self._has_tombstone(conn, document_id, layer)

    def ensure_layer(self, document_id: str, layer: str) -> LayerState:
        with self.connection() as conn:
            found = self._read_layer(conn, document_id, layer)
        if found:
            return found
        with self.transaction(write=True) as conn:
            self._insert_layer(conn, document_id, layer)
            return self._read_layer(conn, document_id, layer)

    def get_layer(self, document_id: str, layer: str) -> LayerState | None:
        with self.connection() as conn:
            return self._read_layer(conn, document_id, layer)

    def list_layers(self, document_id: str) -> list[LayerState]:
        with self.connection() as conn:
            rows = self.execute(conn, "SELECT name, epoch, revision FROM layers WHERE document_id=? "
                                "ORDER BY name", (document_id,)).fetchall()
        return [LayerState(document_id, r["name"], r["epoch"], r["revision"]) for r in rows]

    def create_layer(self, document_id: str, layer: str, records: list[dict],
                     user_id: str | None = None) -> LayerState:
        with self.transaction(write=True) as conn:
            self._clear_tombstone(conn, document_id, layer)  # brought back on purpose
            if not self._insert_layer(conn, document_id, layer):
                raise LayerExists(layer)
            writer = SqlLayerWriter(self, conn, self._read_layer(conn, document_id, layer, lock=True),
                                    fresh=True)
            for content in records:
                writer.put_record(content["id"], content, user_id)
            writer.flush()
            self.layer_changed(conn, writer.layer)
            return writer.layer

    def delete_layer(self, document_id: str, layer: str) -> bool:
        with self.transaction(write=True) as conn:
            state = self._read_layer(conn, document_id, layer, lock=True)
            if state is None:
                return False
            # every process forgets the layer's revision (a re-created layer starts again
            # from 0) and wakes its long-polls: they re-read and get LayerDeleted (404)
            self.layer_changed(conn, LayerState(document_id, layer, state.epoch, state.revision + 1),
                               reset=True)
            self._leave_tombstone(conn, document_id, layer)
            for table in ("change_log", "record_versions", "records"):
                self.execute(conn, f"DELETE FROM {table} WHERE document_id=? AND layer=?",
                             (document_id, layer))
            self.execute(conn, "DELETE FROM layers WHERE document_id=? AND name=?", (document_id, layer))
            return True

    def list_records(self, document_id: str, layer: str, since: int, limit: int,
                     include_tombstones: bool, exclude_revisions: frozenset[int] = frozenset(),
                     only_tombstones: bool = False) -> RecordPage:
        sql, params = _page_query(document_id, layer, since, limit, include_tombstones,
                                  exclude_revisions, only_tombstones)
        # One statement reads the layer and its page in one snapshot (a statement is
        # atomic on both backends): one round trip, no BEGIN/COMMIT. A layer without
        # matching records gives one row of NULL record columns; no layer, no row.
        sql = ("SELECT l.epoch AS layer_epoch, l.revision AS layer_revision, "
               + ", ".join(f"r.{c}" for c in _RECORD_COLUMNS.split(", "))
               + f" FROM layers l LEFT JOIN ({sql}) r ON 1=1 WHERE l.document_id=? AND l.name=? "
               "ORDER BY r.revision")
        params += [document_id, layer]
        for attempt in range(2):
            with self.connection() as conn:
                rows = self.execute(conn, sql, params).fetchall()
            if rows:
                break
            if attempt == 0:  # a layer is created on first use (DocumentNotFound without
                self.ensure_layer(document_id, layer)  # document, LayerDeleted once deleted)
        if not rows:  # deleted between ensure and read
            if self.is_layer_deleted(document_id, layer):
                raise LayerDeleted(layer)
            raise DocumentNotFound(document_id)
        state = LayerState(document_id, layer, rows[0]["layer_epoch"], rows[0]["layer_revision"])
        return _page(state, [r for r in rows if r["id"] is not None], limit)

    def get_record(self, document_id: str, layer: str, record_id: str) -> StoredRecord | None:
        with self.connection() as conn:
            row = self.execute(conn, f"SELECT {_RECORD_COLUMNS} FROM records WHERE document_id=? "
                               "AND layer=? AND id=?", (document_id, layer, record_id)).fetchone()
        return _record(row) if row else None

    def record_history(self, document_id: str, layer: str, record_id: str) -> list[StoredRecord]:
        with self.connection() as conn:
            return self._history(conn, document_id, layer, record_id)

    def _history(self, conn, document_id: str, layer: str, record_id: str) -> list[StoredRecord]:
        """The kept versions, newest first: the current row and the superseded ones.

        A version row of the current revision (written by a previous-release server
        sharing the database, see :meth:`SqlLayerWriter.flush`) is left out: the
        ``records`` row stands for it."""
        if self.history_versions <= 0:
            return []
        rows = self.execute(
            conn, "SELECT id, revision, deleted, content, created_by, updated_by, updated_at, "
            "group_name FROM records WHERE document_id=? AND layer=? AND id=? UNION ALL "
            "SELECT v.id, v.revision, v.deleted, v.content, v.created_by, v.updated_by, "
            "v.updated_at, v.group_name "
            "FROM record_versions v WHERE v.document_id=? AND v.layer=? AND v.id=? "
            "AND NOT EXISTS (SELECT 1 FROM records r WHERE r.document_id=v.document_id "
            "AND r.layer=v.layer AND r.id=v.id AND r.revision=v.revision) "
            "ORDER BY revision DESC LIMIT ?",
            (document_id, layer, record_id, document_id, layer, record_id,
             self.history_versions)).fetchall()
        return [_version(r) for r in rows]

    def layer_record_counts(self, limit: int = 1000) -> list[tuple[str, str, int]]:
        with self.connection() as conn:
            rows = self.execute(conn, "SELECT document_id, layer, COUNT(*) AS n FROM records "
                                "WHERE deleted=0 GROUP BY document_id, layer "
                                "ORDER BY document_id, layer LIMIT ?", (limit,)).fetchall()
        return [(r["document_id"], r["layer"], int(r["n"])) for r in rows]

    def count_records(self, document_id: str, layer: str) -> int:
        with self.connection() as conn:
            return int(self.execute(conn, "SELECT COUNT(*) AS n FROM records WHERE document_id=? "
                                    "AND layer=? AND deleted=0", (document_id, layer)).fetchone()["n"])

    def records_mentioning(self, document_id: str, layer: str, text: str) -> list[StoredRecord]:
        """:meth:`Storage.records_mentioning` in one query (``text`` is hex: no LIKE
        wildcards in it)."""
        if not text.isalnum():
            return super().records_mentioning(document_id, layer, text)
        with self.connection() as conn:
            rows = self.execute(conn, f"SELECT {_RECORD_COLUMNS} FROM records WHERE document_id=? "
                                "AND layer=? AND deleted=0 AND content LIKE ?",
                                (document_id, layer, f"%{text}%")).fetchall()
        return [_record(r) for r in rows]

    @contextlib.contextmanager
    def write_layer(self, document_id: str, layer: str) -> Iterator[LayerWriter]:
        with self.transaction(write=True) as conn:
            writer = SqlLayerWriter(self, conn, self._lock_layer(conn, document_id, layer))
            yield writer
            with self.batch(conn):
                writer.flush()
                if writer.layer.revision != writer.start_revision:
                    self.layer_changed(conn, writer.layer)

    # -- attachments and token revocation -------------------------------------------------

    def put_attachment(self, document_id: str, sha256: str, content_type: str, data: bytes) -> bool:
        with self.transaction(write=True) as conn:
            if not self.execute(conn, "SELECT 1 FROM documents WHERE document_id=?",
                                (document_id,)).fetchone():
                raise DocumentNotFound(document_id)
            return self.execute(conn, "INSERT INTO attachments (document_id, sha256, content_type,"
                                " size_bytes, data, created_at) VALUES (?,?,?,?,?,?) "
                                "ON CONFLICT (document_id, sha256) DO NOTHING",
                                (document_id, sha256, content_type, len(data), data,
                                 now_iso())).rowcount == 1

    def get_attachment(self, document_id: str, sha256: str) -> Attachment | None:
        with self.connection() as conn:
            row = self.execute(conn, "SELECT content_type, data FROM attachments WHERE document_id=? "
                               "AND sha256=?", (document_id, sha256)).fetchone()
        return Attachment(sha256, row["content_type"], bytes(row["data"])) if row else None

    def revoke_token(self, jti: str) -> None:
        with self.transaction(write=True) as conn:
            self.execute(conn, "INSERT INTO revoked_tokens (jti, revoked_at) VALUES (?,?) "
                         "ON CONFLICT (jti) DO NOTHING", (jti, now_iso()))

    def revoked_jtis(self, jtis: list[str]) -> set[str]:
        found: set[str] = set()
        with self.connection() as conn:
            for at in range(0, len(jtis), 500):
                chunk = jtis[at:at + 500]
                marks = ",".join("?" * len(chunk))
                found.update(row["jti"] for row in self.execute(
                    conn, f"SELECT jti FROM revoked_tokens WHERE jti IN ({marks})", chunk))
        return found

    def is_token_revoked(self, jti: str) -> bool:
        with self.connection() as conn:
            return self.execute(conn, "SELECT 1 FROM revoked_tokens WHERE jti=?",
                                (jti,)).fetchone() is not None
