"""The storage interface: documents, layers, records and the change-id log.

Two abstract classes:

* :class:`Storage` — the backend. All methods are blocking (call them from a worker
  thread in async code) and thread-safe.
* :class:`LayerWriter` — one write transaction on one layer, holding that layer's
  write lock, handed out by :meth:`Storage.write_layer`. The conflict rules of the
  protocol (``layersync_server.changes``) are written once against this class, so a
  new backend only implements primitive reads/writes, never the rules.

Revisions: each layer has an integer revision counter starting at 0; every record
write (create, update, tombstone) increments it by one and stamps the record with
the new value (docs/protocol.md, "Record shape").
"""

from __future__ import annotations

import abc
import contextlib
import json
from dataclasses import dataclass, field
from typing import Iterator

from layersync_server.record_kinds import FORM_FIELD_PREFIX


class DocumentNotFound(LookupError):
    """No document with that id."""


class DocumentExists(Exception):
    """A document with that id already exists (with other bytes)."""


class WriteWouldWait(Exception):
    """A write transaction made where waiting is not allowed (``SqliteStorage.without_waiting``,
    the event loop thread) could not be made without waiting for another writer; it was
    rolled back and may be retried where waiting is allowed."""


class LayerExists(Exception):
    """A layer with that name already exists."""


class LayerDeleted(LookupError):
    """The layer was deleted (alone or with its document) and has not been created again
    on purpose (:meth:`Storage.create_layer`, or :meth:`Storage.create_document` for the
    default layer): storage keeps a tombstone per deleted layer so that no read or write
    brings it back by itself (docs/protocol.md, "When a layer is created")."""


#: Keys a record is handed out with beside its content (its ownership, which the server
#: stamps) and the permission flags clients add under a claim: never part of a record's
#: content. :meth:`LayerWriter.put_record` drops them from every content it stores, so no
#: write path (sync, rollback/restore, admin API, imports) stores ``createdBy: lead`` in
#: a record bob created (docs/protocol.md, "Record shape"). The group is set by the
#: change's ``group`` sibling only.
HANDED_OUT_KEYS = ("createdBy", "updatedBy", "group", "isEditable", "isDeletable", "canReply",
                   "isFillable", "canSetGroup")


def has_handed_out_keys(content: dict) -> bool:
    """Whether ``content`` holds one of :data:`HANDED_OUT_KEYS`."""
    return not content.keys().isdisjoint(HANDED_OUT_KEYS)


def without_handed_out_keys(content: dict) -> dict:
    """``content`` without :data:`HANDED_OUT_KEYS` (``content`` itself when it has none)."""
    if not has_handed_out_keys(content):
        return content
    return {key: value for key, value in content.items() if key not in HANDED_OUT_KEYS}


#: :meth:`LayerWriter.put_record`'s default ``group``: keep the record's.
KEEP_GROUP = object()


@dataclass(frozen=True)
class Attachment:
    """An attachment's bytes, addressed by the SHA-256 hex of those bytes."""

    sha256: str
    content_type: str
    data: bytes


@dataclass(frozen=True)
class StoredRecord:
    """A record as stored. ``content`` is ``None`` for tombstones (``deleted``)."""

    id: str
    revision: int
    deleted: bool
    content: dict | None
    created_by: str | None = None
    updated_by: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    group: str | None = None

    def to_wire(self) -> dict:
        """The protocol's record shape ``{"id", "revision", "deleted", "content"}``; a
        live record also carries its ownership ``createdBy``, ``updatedBy``, ``group``
        (docs/protocol.md, "Record shape"); a tombstone carries nothing more."""
        if self.deleted:
            return {"id": self.id, "revision": self.revision, "deleted": True, "content": None}
        return {"id": self.id, "revision": self.revision, "deleted": False,
                "content": self.content, "createdBy": self.created_by,
                "updatedBy": self.updated_by, "group": self.group}


def is_form_field_named(record: StoredRecord, name: str) -> bool:
    """Whether ``record`` is a live form field whose ``content.name`` is ``name``."""
    content = record.content
    if record.deleted or not content:
        return False
    record_type = content.get("type")
    return (isinstance(record_type, str) and record_type.startswith(FORM_FIELD_PREFIX)
            and content.get("name") == name)


@dataclass(frozen=True)
class LayerState:
    """A layer's identity and counters: ``epoch`` (UUID string) and current ``revision``."""

    document_id: str
    name: str
    epoch: str
    revision: int


@dataclass(frozen=True)
class RecordPage:
    """One page of records ordered by revision ascending.

    ``next_since`` is the revision of the last record on the page when ``has_more``,
    else the layer's current revision.
    """

    layer: LayerState
    records: list[StoredRecord]
    has_more: bool
    next_since: int


@dataclass(frozen=True)
class DocumentInfo:
    """Metadata of a stored document (its PDF is read with :meth:`Storage.read_pdf`)."""

    document_id: str
    title: str
    sha256: str
    size_bytes: int
    page_count: int
    annotation_count: int
    created_at: str


@dataclass(frozen=True)
class NewDocument:
    """A document to create: metadata, the PDF bytes, the records to import into the
    default layer (Instant JSON dicts with ``id``), in order, and the attachments
    embedded in the PDF (SHA-256 hex → bytes), stored with it."""

    document_id: str
    title: str
    pdf: bytes
    sha256: str
    page_count: int
    records: list[dict] = field(default_factory=list)
    attachments: dict[str, bytes] = field(default_factory=dict)

    @property
    def annotation_count(self) -> int:
        """Document Engine's ``annotationCount`` of the upload: its records but the
        bookmarks (the PDF's outline, which is no annotation)."""
        return sum(1 for r in self.records if r.get("type") != "pspdfkit/bookmark")


class LayerWriter(abc.ABC):
    """One open write transaction on one layer (see :meth:`Storage.write_layer`)."""

    @property
    @abc.abstractmethod
    def layer(self) -> LayerState:
        """The layer as of now inside the transaction (revision moves with writes)."""

    @abc.abstractmethod
    def get_record(self, record_id: str) -> StoredRecord | None:
        """The record (live or tombstone), or ``None`` if it never existed."""

    @abc.abstractmethod
    def live_children(self, root_id: str) -> list[StoredRecord]:
        """Live records whose ``content.rootId`` equals ``root_id``, by revision."""

    def form_field(self, name: str) -> StoredRecord | None:
        """The live form field (``content.type`` ``pspdfkit/form-field/*``) whose
        ``content.name`` is ``name`` (the oldest when several are), as of now inside the
        transaction, or None: what a form field value's ``fill`` is judged by
        (:func:`layersync_server.permissions.forbidden_change`). Default: a pass over the
        layer's records."""
        since = 0
        while True:
            page = self.changes_since(since, 1000)
            for record in page.records:
                if is_form_field_named(record, name):
                    return record
            if not page.has_more:
                return None
            since = page.next_since

    @abc.abstractmethod
    def put_record(self, record_id: str, content: dict | None, user_id: str | None,
                   content_text: str | None = None, group: object = KEEP_GROUP) -> int:
        """Write ``content`` (``None`` = tombstone) at a new revision and return it.

        Increments the layer revision by one. Keeps ``created_by``/``created_at`` of an
        existing row; sets ``updated_by``/``updated_at``. ``group``: the record's group
        (a string or None); :data:`KEEP_GROUP` keeps an existing row's (a new row: None).
        :data:`HANDED_OUT_KEYS` in ``content`` are not stored (``content_text`` is then
        not used). ``content_text``: when given,
        ``content`` encoded as the backend stores it (``storage.sql.dump_json``), which
        the caller already has; the backend may store it instead of encoding again.
        """

    @abc.abstractmethod
    def history(self, record_id: str) -> list[StoredRecord]:
        """The kept versions of a record (newest first; tombstones have ``content=None``).

        At most ``history_versions`` versions are kept per record; each carries its
        ownership as it was (``created_by``, ``updated_by``, ``group``; a version kept by a
        server before schema 6 has ``group`` None, unknown) and ``updated_at``, not
        ``created_at``.
        """

    @abc.abstractmethod
    def changes_since(self, since: int, limit: int,
                      exclude_revisions: frozenset[int] = frozenset()) -> "RecordPage":
        """The page :meth:`Storage.list_records` (tombstones included) will give once
        this transaction commits: records with ``revision > since`` but not in
        ``exclude_revisions``, by revision, at most ``limit``. Lets a sync answer
        without another transaction."""

    @abc.abstractmethod
    def recorded_outcome(self, change_id: str) -> dict | None:
        """The outcome stored for ``change_id`` by :meth:`record_outcome`, if any."""

    @abc.abstractmethod
    def record_outcome(self, change_id: str, outcome: dict) -> None:
        """Remember the outcome (an ``accepted`` or ``rejected`` entry) of a change id."""

    def prefetch(self, record_ids, change_ids) -> None:
        """Hint: a batch touching these records and change ids follows; a backend may
        load them at once. Changes no result. Default: nothing."""


class Storage(abc.ABC):
    """A storage backend. Blocking and thread-safe."""

    @abc.abstractmethod
    def create_document(self, document: NewDocument) -> DocumentInfo:
        """Store a document and import its records into the default layer ``""``
        (created with a new epoch; records at revisions 1..N), atomically. Clears a
        tombstone of the default layer left by a deleted document of that id.

        Raises:
            DocumentExists: the id is taken.
        """

    @abc.abstractmethod
    def get_document(self, document_id: str) -> DocumentInfo | None:
        """The document's metadata, or ``None``."""

    @abc.abstractmethod
    def list_documents(self, offset: int = 0, limit: int | None = None) -> list[DocumentInfo]:
        """Documents, oldest first, skipping ``offset``, at most ``limit`` (None = all)."""

    @abc.abstractmethod
    def count_documents(self) -> int:
        """How many documents exist."""

    @abc.abstractmethod
    def delete_document(self, document_id: str) -> bool:
        """Delete a document with its layers, records, history and attachments, leaving
        a tombstone for each of its layers (see :meth:`delete_layer`; a document created
        again under the id gets its default layer back, the other layers stay deleted
        until :meth:`create_layer`). Returns False when it did not exist."""

    @abc.abstractmethod
    def read_pdf(self, document_id: str) -> bytes:
        """The PDF bytes. Raises :class:`DocumentNotFound`."""

    @abc.abstractmethod
    def ensure_layer(self, document_id: str, layer: str) -> LayerState:
        """The layer, created empty (revision 0, new UUID epoch) if it never existed.

        Raises:
            DocumentNotFound: the document does not exist.
            LayerDeleted: the layer was deleted (see :meth:`delete_layer`).
        """

    @abc.abstractmethod
    def get_layer(self, document_id: str, layer: str) -> LayerState | None:
        """The layer, or ``None`` (never creates it)."""

    @abc.abstractmethod
    def list_layers(self, document_id: str) -> list[LayerState]:
        """The document's layers by name."""

    @abc.abstractmethod
    def create_layer(self, document_id: str, layer: str, records: list[dict],
                     user_id: str | None = None) -> LayerState:
        """Create a layer (new epoch) holding ``records`` (Instant JSON dicts with ``id``)
        at revisions 1..N, atomically. The one way to bring a deleted layer back: clears
        its tombstone (see :meth:`delete_layer`).

        Raises:
            LayerExists: the layer exists. DocumentNotFound: no such document.
        """

    @abc.abstractmethod
    def delete_layer(self, document_id: str, layer: str) -> bool:
        """Delete a layer with its records and history, leaving a tombstone of its name:
        from then on :meth:`ensure_layer`, :meth:`list_records` and :meth:`write_layer`
        raise :class:`LayerDeleted` instead of creating it again, until
        :meth:`create_layer` re-creates it (a new epoch). False when it did not exist."""

    @abc.abstractmethod
    def is_layer_deleted(self, document_id: str, layer: str) -> bool:
        """Whether the layer has a tombstone (deleted, not created again since)."""

    @abc.abstractmethod
    def get_record(self, document_id: str, layer: str, record_id: str) -> StoredRecord | None:
        """One record (live or tombstone), or ``None``."""

    @abc.abstractmethod
    def record_history(self, document_id: str, layer: str, record_id: str) -> list[StoredRecord]:
        """Kept versions of a record, newest first (see :meth:`LayerWriter.history`)."""

    @abc.abstractmethod
    def layer_record_counts(self, limit: int = 1000) -> list[tuple[str, str, int]]:
        """``(document_id, layer, live records)`` for at most ``limit`` layers (metrics)."""

    @abc.abstractmethod
    def count_records(self, document_id: str, layer: str) -> int:
        """Live records of a layer."""

    @abc.abstractmethod
    def put_attachment(self, document_id: str, sha256: str, content_type: str, data: bytes) -> bool:
        """Store an attachment (the caller verified ``sha256``). False if it already existed.

        Raises:
            DocumentNotFound: no such document.
        """

    @abc.abstractmethod
    def get_attachment(self, document_id: str, sha256: str) -> Attachment | None:
        """An attachment, or ``None``."""

    @abc.abstractmethod
    def revoke_token(self, jti: str) -> None:
        """Remember that JWTs with this ``jti`` are revoked."""

    @abc.abstractmethod
    def is_token_revoked(self, jti: str) -> bool:
        """True when ``jti`` was revoked."""

    def revoked_jtis(self, jtis: list[str]) -> set[str]:
        """Those of ``jtis`` that were revoked (the change streams check theirs)."""
        return {jti for jti in jtis if self.is_token_revoked(jti)}

    @abc.abstractmethod
    def list_records(self, document_id: str, layer: str, since: int, limit: int,
                     include_tombstones: bool, exclude_revisions: frozenset[int] = frozenset(),
                     only_tombstones: bool = False) -> RecordPage:
        """Records with ``revision > since`` ordered by revision, at most ``limit``,
        from one consistent snapshot. Creates the layer if it never existed.
        ``only_tombstones`` lists deleted records only.

        ``exclude_revisions`` are skipped (a sync response leaves out the revisions the
        request itself created).

        Raises:
            DocumentNotFound: the document does not exist.
            LayerDeleted: the layer was deleted (see :meth:`delete_layer`).
        """

    @abc.abstractmethod
    def write_layer(self, document_id: str, layer: str) -> contextlib.AbstractContextManager[LayerWriter]:
        """Open a write transaction on the layer (created if it never existed) and
        yield a :class:`LayerWriter`. Commits when the block exits normally, rolls back
        on an exception. Writers on the same layer are serialised.

        Raises:
            DocumentNotFound: the document does not exist.
            LayerDeleted: the layer was deleted (see :meth:`delete_layer`).
        """

    def iter_records(self, document_id: str, layer: str, include_tombstones: bool = False,
                     page_size: int = 1000) -> Iterator[StoredRecord]:
        """Every record of a layer by revision, paging through :meth:`list_records`."""
        since = 0
        while True:
            page = self.list_records(document_id, layer, since, page_size, include_tombstones)
            yield from page.records
            if not page.has_more:
                return
            since = page.next_since

    def records_mentioning(self, document_id: str, layer: str, text: str) -> list[StoredRecord]:
        """Live records of a layer whose content's JSON text contains ``text`` (an
        attachment's hash: which records use it). Default: every record, filtered."""
        return [r for r in self.iter_records(document_id, layer)
                if text in json.dumps(r.content, ensure_ascii=False)]

    def change_feed(self):
        """An object with ``async run(callback, on_gap=None, on_reset=None)`` that calls
        ``await callback(document_id, layer, revision)`` for every layer change committed
        by *any* process, and ``await on_reset(document_id, layer)`` instead when the
        change deleted the layer or its document (a re-created layer counts revisions
        from 0 again); or ``None`` when changes can only come from this process (SQLite)."""
        return None

    def close(self) -> None:
        """Release connections. The default does nothing."""
