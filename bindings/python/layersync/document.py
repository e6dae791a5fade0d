"""Documents: :class:`Document` (a document id + layer of a client) and :class:`Attachment`.

Mirrors Instant's ``InstantDocumentDescriptor``. A document is made by its client (through
the dispatcher's factory) and stays valid until the client is closed; it holds no strong
reference to the :class:`~layersync.Client`. It owns its observers
(:class:`~layersync.Observer`).

Threading: every method may be called from any thread; the ``wait=True`` helpers and the
server requests block the caller (never call them with ``wait`` on the callback thread).

Imports :mod:`layersync._ffi`, :mod:`layersync.errors`, :mod:`layersync._convert`,
:mod:`layersync.events` and :mod:`layersync.observer` (and :mod:`layersync._handle` for
annotations only).
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from . import _ffi
from ._convert import (CallsIntoC, DocumentState, ErrorOut, decode, encode_json, encode_text, int_arg,
                       json_list, json_object)
from .errors import (InvalidArgumentError, InvalidJSONStructureError, InvalidStateError, LayerSyncError,
                     NoSuchAnnotationError, check)
from .events import (DOWNLOAD_OUTCOME, REAUTH_OUTCOME, SYNC_OUTCOME, Event, _Dispatcher, raise_if_failed,
                     sync_outcome_predicate)
from .observer import Observer, ObserverHandler

if TYPE_CHECKING:  # annotations only
    from ._handle import Handle
    from .client import Client

__all__ = ["Document", "Attachment", "SYNC_DISABLED"]


#: The ownership every record handed out carries besides its Instant JSON, with or without a
#: ``collaboration_permissions`` claim: ``createdBy``, ``updatedBy`` (the JWT ``user_id`` that
#: created / last changed it) and ``group``; each a string, or None when there is none (a
#: record imported from a PDF or XFDF on the server, which no user created, has
#: ``"createdBy": None``). The Records section of include/layersync.h.
OWNERSHIP_KEYS = ("createdBy", "updatedBy", "group")

#: What the document's JWT may do with a record, present only under a
#: ``collaboration_permissions`` claim (as in Nutrient's Web SDK): booleans.
PERMISSION_FLAG_KEYS = ("isEditable", "isDeletable", "canReply", "isFillable", "canSetGroup")

#: Every key a record handed out may carry besides its Instant JSON.
HANDOUT_KEYS = OWNERSHIP_KEYS + PERMISSION_FLAG_KEYS


def record_content(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record handed out (:meth:`Document.get_annotation`, :meth:`Document.list_annotations`,
    ...) without its ownership and flags (:data:`HANDOUT_KEYS`): its Instant JSON content, as
    the server stores it. The one place that strips them (compare records with the server's
    content through it)."""
    return {k: v for k, v in record.items() if k not in HANDOUT_KEYS}


def _xfdf_codec() -> Any:
    """The XFDF codec (``layersync_formats``, the repository's formats/ package, shared with the
    server); ImportError with a hint when it is not installed (its ``name`` is
    ``"layersync_formats"``, which the CLI tells from other ImportErrors)."""
    try:
        import layersync_formats
    except ImportError:
        raise ImportError("XFDF needs the layersync-formats package: pip install ./formats "
                          "(or the bindings' [xfdf] extra)", name="layersync_formats") from None
    return layersync_formats

def _partial_import_error(exc: LayerSyncError, record_id: object, applied: list[str]) -> LayerSyncError:
    """``exc`` (the engine refused XFDF annotation ``record_id`` while
    :meth:`Document.import_xfdf` wrote the file) again, same class, code and fields, its
    message saying which writes before it stay applied (``applied``: ``"created 'ID'"`` ...,
    in order) or that nothing was."""
    done = (f"{len(applied)} write(s) before it stay applied and queued: {', '.join(applied)}"
            if applied else "nothing was applied")
    return type(exc)(f"XFDF annotation {record_id!r}: {exc.message}; {done}", code=exc.code,
                     sqlite_extended_code=exc.sqlite_extended_code, http_status=exc.http_status,
                     document_id=exc.document_id, record_id=exc.record_id,
                     attachment_id=exc.attachment_id)


#: ``sync_delay`` value that turns automatic syncing after local edits off.
SYNC_DISABLED: float = _ffi.LAYERSYNC_SYNC_DISABLED


@dataclass(frozen=True)
class Attachment:
    """An attachment read from the local disk cache (:meth:`Document.attachment`).

    ``data`` is the exact bytes; ``content_type`` the MIME type given when it was added (or
    the server's); ``id`` the lowercase hex SHA-256 of ``data``.
    """

    id: str
    data: bytes
    content_type: str


class Document(CallsIntoC):
    """A document descriptor (document id + layer), owned by its :class:`Client`.

    Mirrors Instant's ``InstantDocumentDescriptor``. Obtain it with
    :meth:`Client.document_for_jwt`; it stays valid until the client is closed. Records are
    Instant JSON v2 objects passed in and out as dicts.
    """

    def __init__(self, handle: Handle, dispatcher: _Dispatcher, address: int,
                 client_ref: Callable[[], Client | None] = lambda: None) -> None:
        # No strong reference to the Client (``client_ref`` is a weak one): the client's
        # finalizer keeps the dispatcher (and through it every Document) alive, which must
        # not keep the Client alive.
        self._handle = handle
        self._dispatcher = dispatcher
        self._address = address
        self._lib = handle.lib
        self._client_ref = client_ref
        #: This document's registered observers, kept (with their trampolines) until the
        #: library released them; guarded by the handle's lock.
        self._observers: set[Observer] = set()

    def __enter__(self) -> "Document":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stops this document's network work: listening and automatic syncing stop, a
        request in flight and a running download are cancelled (their local changes stay
        pending and durable). The handle stays valid (it is owned by the client) and may be
        used again, e.g. to ``sync``. No-op when the client is already closed. Used by
        ``with doc:``; closing the :class:`Client` does this for every document and then
        drains the callbacks."""
        if self._handle.closed:
            return
        self._call("layersync_document_stop_syncing", True)
        self._call("layersync_document_cancel_download")

    def __repr__(self) -> str:
        if self._handle.closed:
            return "<layersync.Document (client closed)>"
        return f"<layersync.Document id={self.id!r} layer={self.layer_name!r} state={self.state.name}>"

    @property
    def client(self) -> Client:
        """The client that owns this document.

        Raises:
            InvalidStateError: the client object was garbage-collected.
        """
        client = self._client_ref()
        if client is None:
            raise InvalidStateError("the client of this document no longer exists")
        return client

    @property
    def address(self) -> int:
        """The C handle's address (``layersync_document *``), for interop and debugging."""
        return self._address

    def _invoke(self, fn_name: str, *args: Any) -> Any:
        return self._handle.call(fn_name, *args, document=self._address)

    # -- identity and state ------------------------------------------------------------------

    @property
    def id(self) -> str:
        """The document id (the JWT's ``document_id``)."""
        return decode(self._invoke("layersync_document_id")) or ""

    @property
    def layer_name(self) -> str:
        """The layer name; ``""`` is the default layer."""
        return decode(self._invoke("layersync_document_layer_name")) or ""

    @property
    def user_id(self) -> str | None:
        """The JWT's ``user_id``, or None when it has none."""
        raw = self._call_out("layersync_document_user_id")
        return decode(raw)

    @property
    def default_group(self) -> str | None:
        """The group new records get (collaboration permissions): the override set here, else
        the JWT's ``default_group``, else None. Set a string to override it for this document
        (kept in the local store; Instant's ``overrideDefaultGroup``), None to go back to the
        JWT's (``resetDefaultGroup``). Under a ``collaboration_permissions`` claim, creating in
        a group other than the JWT's ``default_group`` needs ``set-group`` for it
        (:class:`ForbiddenError` at the create).

        Raises:
            InvalidArgumentError (an empty name, control characters), InvalidStateError.
        """
        return decode(self._call_out("layersync_document_default_group"))

    @default_group.setter
    def default_group(self, group: str | None) -> None:
        self._call("layersync_document_set_default_group", None if group is None else encode_text(group, "group"))

    @property
    def state(self) -> DocumentState:
        """The current :class:`DocumentState`."""
        value = int(self._invoke("layersync_document_state"))
        try:
            return DocumentState(value)
        except ValueError:
            return DocumentState.UNKNOWN

    @property
    def is_downloaded(self) -> bool:
        """Whether the PDF and the layer snapshot are stored locally."""
        return bool(self._invoke("layersync_document_is_downloaded"))

    @property
    def has_unsynced_changes(self) -> bool:
        """Whether local changes are waiting to be sent."""
        return bool(self._invoke("layersync_document_has_unsynced_changes"))

    @property
    def last_sync_time(self) -> float | None:
        """Wall-clock time (seconds since the Unix epoch, UTC) at which the last sync cycle of
        this layer finished (``did_finish_sync``), or None if none did. Persisted with the
        layer; informational only (``layersync_document_last_sync_time``)."""
        value = float(self._invoke("layersync_document_last_sync_time"))
        return value if value > 0 else None

    @property
    def pdf_path(self) -> str:
        """Path of the downloaded PDF. Raises :class:`NotDownloadedError` before download."""
        return decode(self._call_out("layersync_document_pdf_path")) or ""

    @property
    def sync_delay(self) -> float | None:
        """Debounce in seconds between a local edit and the automatic sync; None = off."""
        value = float(self._invoke("layersync_document_sync_delay"))
        return None if value == SYNC_DISABLED else value

    @sync_delay.setter
    def sync_delay(self, delay_s: float | None) -> None:
        value = SYNC_DISABLED if delay_s is None else float(delay_s)
        if math.isnan(value):
            raise InvalidArgumentError("sync_delay must be a number or None")
        self._call("layersync_document_set_sync_delay", ctypes.c_double(value))

    # -- download, sync, listen ------------------------------------------------------------------

    def download(self, *, wait: bool = True, timeout: float | None = 300.0,
                 progress: Callable[[int, int], None] | None = None) -> None:
        """Downloads the PDF and the layer's records (Instant's ``download(usingJWT:)``).

        Args:
            wait: Block until ``did_finish_download`` / ``did_fail_download``.
            timeout: Seconds to wait (``wait=True`` only).
            progress: ``progress(done_bytes, total_bytes)``; with ``wait=True`` it is called
                on the calling thread while waiting, otherwise on the callback thread until
                the download ends.

        Raises:
            AlreadyDownloadedError, InvalidStateError: from the call.
            Any error of ``did_fail_download`` (RequestFailedError, AccessDeniedError,
            InvalidDocumentError, CancelledError, ...) when waiting; TimeoutError.
        """
        c = self._dispatcher
        since = c.mark()
        removers: list[Callable[[], None]] = []
        if progress is not None and not wait:
            def relay(doc: Document, done: int, total: int) -> None:
                if doc is self:
                    progress(done, total)

            def finish(doc: Document, *_: Any) -> None:
                if doc is self:
                    for remove in removers:
                        remove()
            removers += [c.add_handler("download_progress", relay),
                         c.add_handler("did_finish_download", finish),
                         c.add_handler("did_fail_download", finish)]
        try:
            self._call("layersync_document_download")
        except BaseException:
            for remove in removers:
                remove()
            raise
        if not wait:
            return

        def on_event(e: Event) -> None:
            if e.name == "download_progress" and progress is not None:
                progress(*e.args)

        event = c.wait_for(DOWNLOAD_OUTCOME, since=since, document=self,
                           timeout=timeout, on_event=on_event, watch=("download_progress",))
        raise_if_failed(event, "download")

    def cancel_download(self) -> None:
        """Cancels a running download; ``did_fail_download`` reports ``CANCELLED``."""
        self._call("layersync_document_cancel_download")

    def sync(self, *, wait: bool = True, timeout: float | None = 60.0) -> None:
        """Runs a two-way sync cycle (Instant's ``sync()``): sends pending changes, receives
        server changes, repeats until nothing is pending.

        With ``wait=True`` blocks until the cycle that serves this call ends: returns on its
        ``did_finish_sync``, raises the error of its ``did_fail_sync`` (RequestFailedError
        when offline, AccessDeniedError when the JWT expired, ...). A cycle that was already
        running when called does not count (its ``did_begin_sync`` came before the call).

        Raises:
            NotDownloadedError; the cycle's error; TimeoutError.
        """
        since = self._dispatcher.mark()
        self._call("layersync_document_sync")
        if not wait:
            return
        event = self._dispatcher.wait_for(SYNC_OUTCOME, since=since, document=self,
                                          predicate=sync_outcome_predicate(), timeout=timeout)
        raise_if_failed(event, "sync")

    def stop_syncing(self, cancel_current_request: bool = False) -> None:
        """Stops listening and automatic syncing (Instant's ``stopSyncing(cancelCurrentRequest:)``)."""
        self._call("layersync_document_stop_syncing", bool(cancel_current_request))

    # -- conflict reports (stored until acknowledged; docs/durability.md) -----------------------

    def rejected_changes(self) -> list[dict[str, Any]]:
        """The layer's stored conflict reports, oldest first: every local change that lost
        against the server and is not acknowledged yet, whether ``did_reject_changes`` has
        delivered it or not (``layersync_document_list_rejected_changes``). Reads the local
        store only.

        Each is ``{"report_id", "change_id", "id", "reason", "code", "local": dict|None,
        "server": dict|None, "delivered": bool}``: the objects of the ``did_reject_changes``
        payload (``report_id`` is the same there) plus whether a ``did_reject_changes``
        callback carrying it has returned. Each report was stored in the transaction that
        adopted the server version, so a crash never loses one; an undelivered one is
        delivered again when the layer is next opened.

        Raises:
            InvalidStateError (local storage removed), ContentMigrationNeededError,
            DatabaseAccessFailedError.
        """
        return json_list(self._call_out("layersync_document_list_rejected_changes"), "rejected change list")

    def acknowledge_rejected_changes(self, report_ids: Iterable[str]) -> None:
        """Deletes the conflict reports ``report_ids`` (their ``report_id``): they are neither
        listed by :meth:`rejected_changes` nor delivered again. Unknown ids are ignored
        (``layersync_document_acknowledge_rejected_changes``).

        Raises:
            InvalidArgumentError: an id that is not a non-empty str (a single str is refused:
                pass a list).
            InvalidStateError, ContentMigrationNeededError, DatabaseAccessFailedError.
        """
        if isinstance(report_ids, (str, bytes)):
            raise InvalidArgumentError("report_ids must be an iterable of report ids, not a single string")
        ids = list(report_ids)
        for report_id in ids:
            if not isinstance(report_id, str) or not report_id:
                raise InvalidArgumentError(f"a report id must be a non-empty str, not {report_id!r}")
        self._call("layersync_document_acknowledge_rejected_changes", encode_json(ids, "report_ids"))

    def start_listening(self) -> None:
        """Starts the long-poll for server changes; they arrive as ``did_receive_changes``."""
        self._call("layersync_document_start_listening")

    @property
    def listening_transport(self) -> str:
        """How this layer is listened to: ``"stream"`` (the client's change stream) or
        ``"long-poll"`` (its own long-poll: the client fell back, or the stream refused the
        layer's subscription: 429, the server takes no more on the stream, or 404 while the
        stream is open, the request did not reach the process holding it or lost its key on
        the way; the reason is written to stderr)."""
        value = self._invoke("layersync_document_listening_transport")
        return "long-poll" if value == _ffi.LAYERSYNC_LISTENING_LONG_POLL else "stream"

    def stop_listening(self) -> None:
        """Stops listening for server changes."""
        self._call("layersync_document_stop_listening")

    def reauthenticate(self, jwt: str, *, wait: bool = True, timeout: float | None = 30.0) -> None:
        """Replaces the document's JWT (Instant's ``reauthenticate(withJWT:)``). Pending
        changes are sent afterwards.

        With ``wait=True`` blocks until ``did_finish_reauthentication`` or raises the error of
        ``did_fail_reauthentication``. Safe to call from a ``request_token`` handler only with
        ``wait=False`` (waiting there would block the callback thread that must deliver the
        outcome).

        Raises:
            InvalidJWTError, UserIDMismatchError, AlreadyAuthenticatingError, AccessDeniedError,
            TimeoutError.
        """
        raw = encode_text(jwt, "jwt")
        since = self._dispatcher.mark()
        self._call("layersync_document_reauthenticate", raw)
        if not wait:
            return
        event = self._dispatcher.wait_for(REAUTH_OUTCOME, since=since, document=self, timeout=timeout)
        raise_if_failed(event, "reauthentication")

    # -- records -------------------------------------------------------------------------------

    def create_annotation(self, annotation: Mapping[str, Any]) -> dict[str, Any]:
        """Creates an annotation in the local layer; durable when this returns and synced
        after ``sync_delay``.

        Args:
            annotation: Instant JSON v2 (``{"type": "pspdfkit/...", "pageIndex": 0,
                "bbox": [x, y, w, h], ...}``); a missing ``id`` is generated (ULID).

        Returns:
            The stored annotation with its ``id`` and its ownership (:data:`OWNERSHIP_KEYS`:
            ``createdBy``, ``updatedBy``, ``group``, always there, None when none). Under a
            ``collaboration_permissions`` claim also what this JWT may do with it
            (:data:`PERMISSION_FLAG_KEYS`: ``isEditable``, ``isDeletable``, ``canReply``,
            ``isFillable``, ``canSetGroup``; see the Records section of
            include/layersync.h). A ``group`` key in ``annotation`` is the new record's group
            (default :attr:`default_group`) and the other of those keys are ignored, so a
            record handed out can be passed back as it is (:func:`record_content` strips
            them all).

        Raises:
            InvalidArgumentError (not JSON, unencodable text), InvalidJSONStructureError,
            ForbiddenError (the collaboration permissions do not allow it; nothing stored),
            NotDownloadedError, DatabaseAccessFailedError.
        """
        raw = self._call_out("layersync_document_create_annotation", encode_json(dict(annotation), "annotation"))
        return json_object(raw) if raw else dict(annotation)

    def update_annotation(self, annotation: Mapping[str, Any]) -> dict[str, Any]:
        """Replaces an annotation's content (the whole object, with its ``id``); a ``group``
        other than the record's is a group change (needs ``set-group`` under a claim), the
        other keys of a record handed out are ignored.

        Returns:
            The stored annotation as handed out (as :meth:`create_annotation`).

        Raises:
            NoSuchAnnotationError, ForbiddenError (no ``edit``/``fill``/``set-group``: nothing
            queued) and the errors of :meth:`create_annotation`.
        """
        raw = self._call_out("layersync_document_update_annotation", encode_json(dict(annotation), "annotation"))
        return json_object(raw) if raw else dict(annotation)

    def delete_annotation(self, annotation_id: str) -> None:
        """Deletes an annotation (and its comments).

        Raises:
            NoSuchAnnotationError, ForbiddenError (no ``delete`` on it or on one of its
            replies: nothing queued), InvalidArgumentError, NotDownloadedError.
        """
        self._call("layersync_document_delete_annotation", encode_text(annotation_id, "annotation_id"))

    def get_annotation(self, annotation_id: str) -> dict[str, Any]:
        """One annotation of the local layer as a dict, as handed out (its Instant JSON, its
        ownership and under a claim the flags: :meth:`create_annotation`).

        Raises:
            NoSuchAnnotationError, InvalidArgumentError, NotDownloadedError.
        """
        raw = self._call_out("layersync_document_get_annotation", encode_text(annotation_id, "annotation_id"))
        if raw is None:
            raise LayerSyncError("library returned no annotation", code=_ffi.LAYERSYNC_ERROR_UNKNOWN)
        return json_object(raw)

    def list_annotations(self, page_index: int | None = None, type: str | None = None,
                         creator_name: str | None = None, limit: int | None = None,
                         offset: int | None = None) -> list[dict[str, Any]]:
        """Annotations of the local layer ordered by id, optionally filtered and paged, each
        as handed out (:meth:`get_annotation`).

        Args:
            page_index: Only this page (0-based).
            type: Only this Instant type, e.g. ``"pspdfkit/ink"``.
            creator_name: Only this ``creatorName``.
            limit, offset: Paging.

        Raises:
            InvalidArgumentError, NotDownloadedError.
        """
        flt: dict[str, Any] = {}
        if page_index is not None:
            flt["pageIndex"] = int(page_index)
        if type is not None:
            flt["type"] = type
        if creator_name is not None:
            flt["creatorName"] = creator_name
        if limit is not None:
            flt["limit"] = int(limit)
        if offset is not None:
            flt["offset"] = int(offset)
        raw = self._call_out("layersync_document_list_annotations",
                             encode_json(flt, "filter") if flt else None)
        if not raw:
            return []
        items = json.loads(raw.decode("utf-8"))
        if not isinstance(items, list):
            raise LayerSyncError("library returned a non-array annotation list", code=_ffi.LAYERSYNC_ERROR_UNKNOWN)
        return [dict(item) for item in items]

    # -- local storage and content migration ----------------------------------------------------

    def remove_local_storage(self) -> None:
        """Deletes this layer's local store (records **and unsynced changes**) and, when no
        other layer of the document is stored, its PDF and attachments (Instant's
        ``removeLocalStorage()``). Cancels the document's transfers and waits until they
        stopped. Afterwards :attr:`state` is :attr:`DocumentState.INVALID` (reported once
        through ``did_change_sync_state``) and other calls raise :class:`InvalidStateError`;
        get a new document with :meth:`Client.document_for_jwt`.

        Raises:
            CouldNotRemoveDiskCacheEntriesError.
        """
        self._call("layersync_document_remove_local_storage")

    def attempt_content_migration(self) -> None:
        """Migrates a layer stored in an older content format (state
        :attr:`DocumentState.NEEDS_CONTENT_MIGRATION`; until then record calls and syncs raise
        :class:`ContentMigrationNeededError`) to the current one, in one SQLite transaction
        on the calling thread; a no-op when nothing needs migrating. Afterwards the state is
        CLEAN or DIRTY; changed records are reported through ``did_receive_changes``.

        Raises:
            PerformingContentMigrationError, InvalidStateError, DatabaseAccessFailedError.
        """
        self._call("layersync_document_attempt_content_migration")

    # -- comments and search ---------------------------------------------------------------------

    def create_comment(self, root_id: str, comment: Mapping[str, Any] | str, *,
                       creator_name: str | None = None) -> dict[str, Any]:
        """Creates a comment (a ``pspdfkit/comment`` record with ``rootId``) on the root
        annotation ``root_id``; durable when this returns and synced like a create.
        Deleting the root deletes its comments.

        Args:
            root_id: Id of a live annotation.
            comment: Instant JSON (``{"text": {"format": "plain", "value": ...}, ...}``;
                ``type`` defaults to ``pspdfkit/comment``, ``rootId`` is set), or plain text.
            creator_name: Sets ``creatorName`` (overrides the dict's).

        Returns:
            The stored comment with its ``id``.

        Raises:
            NoSuchAnnotationError (no such root), InvalidJSONStructureError (another
            ``type``), InvalidArgumentError (another ``rootId``), NotDownloadedError,
            ForbiddenError (the JWT's ``collaboration_permissions`` grant no ``reply`` on
            this thread; nothing stored).
        """
        body: dict[str, Any] = ({"text": {"format": "plain", "value": comment}}
                                if isinstance(comment, str) else dict(comment))
        if creator_name is not None:
            body["creatorName"] = creator_name
        raw = self._call_out("layersync_document_create_comment", encode_text(root_id, "root_id"),
                             encode_json(body, "comment"))
        return json_object(raw) if raw else body

    def list_comments(self, root_id: str) -> list[dict[str, Any]]:
        """The comments of root annotation ``root_id`` in the local layer, oldest first
        (``createdAt``, then id).

        Raises:
            NoSuchAnnotationError, InvalidArgumentError, NotDownloadedError.
        """
        raw = self._call_out("layersync_document_list_comments", encode_text(root_id, "root_id"))
        return json_list(raw, "comment list")

    def search_annotations(self, query: str, limit: int | None = None) -> list[dict[str, Any]]:
        """Full-text search over the local layer's records (annotations and comments; SQLite
        FTS5, works offline), best match first.

        Args:
            query: Words; each must occur as a word prefix in a string value of the record
                (case- and diacritics-insensitive). FTS syntax characters are taken literally.
            limit: Maximum number of results (None: the library's default, 100).

        Raises:
            InvalidArgumentError: a query without words, a negative limit.
            NotDownloadedError, DatabaseAccessFailedError.
        """
        n = 0 if limit is None else int_arg(limit, "limit", 32)
        raw = self._call_out("layersync_document_search_annotations", encode_text(query, "query"), ctypes.c_int32(n))
        return json_list(raw, "search result")

    # -- server-side history (one-shot requests answered on the callback thread) ------------------

    def _begin(self, fn_name: str, *args: Any) -> concurrent.futures.Future[Any]:
        """Starts a ``layersync_document_result_cb`` operation; the Future gets its parsed
        result JSON or its error (:class:`InvalidStateError` if the client closes first)."""
        token, future = self._handle.results.new()
        err = ErrorOut()
        try:
            rc = self._invoke(fn_name, *args, self._handle.results.callback, ctypes.c_void_p(token), err.ref)
            check(self._lib, rc, err.struct)
        except BaseException:
            self._handle.results.drop(token)
            raise
        return future

    def _await(self, future: concurrent.futures.Future[Any], timeout: float | None, what: str) -> Any:
        if self._dispatcher.callbacks.on_callback_thread():
            raise InvalidStateError(f"{what} cannot wait on the library's callback thread (it delivers the "
                                    "answer); use layersync.aio or call it from another thread")
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"no answer to {what} within {timeout} s (it may still complete)") from None

    def _begin_history(self, annotation_id: str) -> concurrent.futures.Future[Any]:
        return self._begin("layersync_document_annotation_history", encode_text(annotation_id, "annotation_id"))

    def _begin_rollback(self, annotation_id: str, revision: int) -> concurrent.futures.Future[Any]:
        return self._begin("layersync_document_rollback_annotation", encode_text(annotation_id, "annotation_id"),
                           ctypes.c_int64(int_arg(revision, "revision", 64)))

    def _begin_deleted(self) -> concurrent.futures.Future[Any]:
        return self._begin("layersync_document_list_deleted_annotations")

    def _begin_restore(self, annotation_id: str) -> concurrent.futures.Future[Any]:
        return self._begin("layersync_document_restore_annotation", encode_text(annotation_id, "annotation_id"))

    def _begin_download_attachment(self, attachment_id: str) -> concurrent.futures.Future[Any]:
        return self._begin("layersync_document_download_attachment", encode_text(attachment_id, "attachment_id"))

    def annotation_history(self, annotation_id: str, *, timeout: float | None = 30.0) -> list[dict[str, Any]]:
        """The versions of a record the server keeps (a request; blocks until answered).

        Returns:
            ``[{"id": str, "revision": int, "deleted": bool, "content": dict | None}]``,
            newest first (the server keeps its ``history_versions`` latest).

        Raises:
            UnmanagedAnnotationError (the record exists only locally: created here and never
            synced; no request is made), NoSuchAnnotationError (the server keeps none),
            RequestFailedError (offline), AccessDeniedError, NotDownloadedError,
            InvalidStateError (closed, or called on the callback thread), TimeoutError.
        """
        return list(self._await(self._begin_history(annotation_id), timeout, "annotation_history") or [])

    def rollback_annotation(self, annotation_id: str, revision: int, *,
                            timeout: float | None = 30.0) -> dict[str, Any]:
        """Writes the content of kept version ``revision`` as the record's new version on the
        server (a deleted record comes back), then applies it locally
        (``did_receive_changes``) before returning.

        Returns:
            The record's new Instant JSON.

        Raises:
            ConflictError: the record changed on the server since this client last saw it
                (first writer wins: sync, then retry).
            NoSuchAnnotationError (version not kept), InvalidRequestError (the version is a
            deletion), RequestFailedError, InvalidArgumentError, TimeoutError.
        """
        result = self._await(self._begin_rollback(annotation_id, revision), timeout, "rollback_annotation")
        return dict(result or {})

    def list_deleted_annotations(self, *, timeout: float | None = 30.0) -> list[dict[str, Any]]:
        """The layer's deleted records as the server knows them (a request).

        Returns:
            ``[{"id": str, "revision": int, "last_content": dict | None}]``, oldest deletion first.

        Raises:
            RequestFailedError, AccessDeniedError, NotDownloadedError, TimeoutError.
        """
        return list(self._await(self._begin_deleted(), timeout, "list_deleted_annotations") or [])

    def restore_annotation(self, annotation_id: str, *, timeout: float | None = 30.0) -> dict[str, Any]:
        """Brings a deleted record back on the server with its last live content, then
        applies it locally before returning.

        Returns:
            The restored record's Instant JSON.

        Raises:
            ConflictError (the record is live), NoSuchAnnotationError (never existed or no
            live version kept), RequestFailedError, TimeoutError.
        """
        result = self._await(self._begin_restore(annotation_id), timeout, "restore_annotation")
        return dict(result or {})

    # -- attachments ------------------------------------------------------------------------------

    def add_attachment(self, data: bytes | bytearray | memoryview, content_type: str) -> str:
        """Stores bytes (an image annotation's image, an embedded file) in the document's
        disk cache, durably, and queues the upload: the next sync uploads it before any
        record change, so a record referencing it (``imageAttachmentId``) never reaches the
        server first.

        Args:
            data: The bytes (copied).
            content_type: MIME type, e.g. ``"image/png"`` (1–255 printable ASCII characters).

        Returns:
            The attachment id: the lowercase hex SHA-256 of ``data`` (same bytes, same id).

        Raises:
            InvalidArgumentError, CouldNotCreateAttachmentError, NotDownloadedError.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"data must be bytes, not {type(data).__name__}")
        raw = bytes(data)
        ctype = encode_text(content_type, "content_type")
        out = self._call_out("layersync_document_add_attachment", raw or None, ctypes.c_size_t(len(raw)), ctype)
        if not out:
            raise LayerSyncError("library returned no attachment id", code=_ffi.LAYERSYNC_ERROR_UNKNOWN)
        return out.decode("ascii")

    def attachment(self, attachment_id: str) -> Attachment:
        """An attachment's bytes and content type from the local disk cache (never the network).

        Raises:
            AttachmentNotLoadedError: a local record references it but its bytes are not
                downloaded yet (use :meth:`download_attachment`).
            NoSuchAttachmentError: unknown here, or, under a JWT with
                ``collaboration_permissions``, used by no record it may view (the server's rule).
            CouldNotReadFromDiskCacheError, NotDownloadedError, InvalidArgumentError.
        """
        struct = _ffi.layersync_attachment()
        struct.version = _ffi.LAYERSYNC_ATTACHMENT_VERSION
        err = ErrorOut()
        rc = self._invoke("layersync_document_attachment_data", encode_text(attachment_id, "attachment_id"),
                          ctypes.byref(struct), err.ref)
        # Read the raw pointers (c_char_p fields would hand out copies), copy, then free them.
        data_ptr = int(struct.data or 0)
        type_ptr = ctypes.c_void_p.from_buffer(struct, _ffi.layersync_attachment.content_type.offset).value
        try:
            check(self._lib, rc, err.struct)
            data = ctypes.string_at(data_ptr, int(struct.size_bytes)) if data_ptr else b""
            ctype = ctypes.string_at(type_ptr).decode("utf-8", "replace") if type_ptr else ""
        finally:
            if data_ptr:
                self._lib.layersync_free(data_ptr)
            if type_ptr:
                self._lib.layersync_free(type_ptr)
        return Attachment(attachment_id, data, ctype)

    def attachment_data(self, attachment_id: str) -> bytes:
        """The bytes of an attachment from the local disk cache; see :meth:`attachment`.

        Raises:
            AttachmentNotLoadedError, NoSuchAttachmentError, CouldNotReadFromDiskCacheError.
        """
        return self.attachment(attachment_id).data

    def download_attachment(self, attachment_id: str, *, wait: bool = True,
                            timeout: float | None = 60.0) -> dict[str, Any] | None:
        """Downloads an attachment into the disk cache (attachments are downloaded lazily);
        the bytes are checked against the id.

        Args:
            wait: Block until the bytes are stored (else return None at once; the download
                goes on in the background and :meth:`attachment_data` succeeds afterwards).
            timeout: Seconds to wait.

        Returns:
            ``{"attachment_id": str, "size_bytes": int, "content_type": str}`` when waiting.

        Raises:
            NoSuchAttachmentError (the server does not have it), InvalidServerDataError
            (bytes do not hash to the id), RequestFailedError (offline), TimeoutError.
        """
        future = self._begin_download_attachment(attachment_id)
        if not wait:
            return None
        return dict(self._await(future, timeout, "download_attachment") or {})

    # -- XFDF ------------------------------------------------------------------------------------

    def export_xfdf(self, *, pages: Any = None) -> str:
        """The local layer as an XFDF document (ISO 19444-1): annotations, comments as
        replies (``inreplyto``), form field values of widgets in ``<fields>``, and the bytes
        of downloaded file attachments. Same codec and mapping as the server's
        ``document.xfdf`` (the ``layersync-formats`` package; docs/protocol.md, "XFDF and
        Instant JSON").

        Args:
            pages: Each page's CropBox ``(left, bottom, right, top)`` in points, by page
                index (XFDF is in PDF user space); default: read from the downloaded PDF
                when pikepdf is installed, else US Letter.

        Returns:
            The XFDF text (encode as UTF-8 to write it).

        Raises:
            ImportError (``layersync-formats`` not installed), NotDownloadedError.
        """
        codec = _xfdf_codec()
        records = [record_content(r) for r in self.list_annotations()]  # XFDF carries content only
        attachments: dict[str, bytes] = {}
        for record in records:
            file_id = record.get("fileAttachmentId")
            if isinstance(file_id, str) and file_id not in attachments:
                try:
                    attachments[file_id] = self.attachment_data(file_id)
                except LayerSyncError:  # not downloaded: the record keeps its id only
                    pass
        values = {r["formFieldName"]: r["value"] for r in records
                  if r.get("type") == "pspdfkit/widget" and isinstance(r.get("formFieldName"), str) and "value" in r}
        text: str = codec.write_xfdf(records, pages=self._page_boxes(pages), form_field_values=values,
                                     attachments=attachments)
        return text

    def import_xfdf(self, xfdf: str | bytes, *, pages: Any = None) -> dict[str, int]:
        """Applies XFDF to the local layer as local edits (durable, then synced like any
        edit). A plain XFDF creates each annotation or replaces the one with its ``name``;
        a command document's ``<add>`` must be new, ``<modify>`` must exist, ``<delete>``
        deletes (a missing id is already deleted). ``<fields>`` values land on the widgets
        of those fields; embedded files become attachments.

        All or nothing for what the file says: the whole document is read, and every record
        it would write checked (``<add>``/``<modify>`` as above, each record against the
        record schema, the one Python check the server's ``apply_xfdf`` makes,
        ``layersync_formats.record_schema``), before the first write, so a refused document
        changes nothing. The writes themselves are one engine call each (the C API has no
        call that writes several records in one transaction): a refusal only the engine
        makes at write time (a record id over 128 characters, the collaboration permissions
        of a create, a record over the engine's size limits) still leaves the records
        before it applied.

        Args:
            xfdf: The document (untrusted: DTDs and entities are refused).
            pages: As for :meth:`export_xfdf`.

        Returns:
            ``{"created", "updated", "deleted"}`` counts.

        Raises:
            InvalidArgumentError (not XFDF, or an ``<add>`` of an existing annotation),
            NoSuchAnnotationError (a ``<modify>`` of a missing one), InvalidJSONStructureError
            (a record the schema refuses: the message names the annotation and the field;
            nothing applied), the errors of :meth:`create_annotation` (a refusal at write
            time: the same class and code, its message naming the annotation and the writes
            before it that stay applied and queued, or "nothing was applied"), ImportError
            (``layersync-formats`` not installed).
        """
        codec = _xfdf_codec()
        from layersync_formats.record_schema import record_schema_problem
        try:
            changes = codec.read_xfdf(xfdf, pages=self._page_boxes(pages))
        except codec.XfdfError as exc:
            raise InvalidArgumentError(f"XFDF: {exc}") from None
        # What the XFDF is compared with: the records' content, without ownership and flags.
        live = {r["id"]: record_content(r) for r in self.list_annotations() if isinstance(r.get("id"), str)}
        if changes.is_command:
            for record in changes.added:
                if record.get("id") in live:
                    raise InvalidArgumentError(f"<add>: annotation {record['id']!r} exists; nothing was applied")
            for record in changes.modified:
                if record.get("id") not in live:
                    raise NoSuchAnnotationError(f"<modify>: no annotation {record.get('id')!r}; nothing was applied")
        values = changes.form_field_values

        def same(a: Any, b: Any) -> bool:
            """JSON sameness (false is not 0), numbers by value: XFDF's have no type, so an
            integral ``bbox`` read back as floats is not a change."""
            return bool(codec.values.same_json(a, b, typed_numbers=False))
        widgets = [dict(w, value=values[w["formFieldName"]]) for w in live.values()
                   if w.get("type") == "pspdfkit/widget" and w.get("formFieldName") in values
                   and not same(w.get("value"), values[w["formFieldName"]])]
        # The plan: every write, decided and checked before the first. XFDF carries content
        # only: never ownership, group or flags (the codec drops them too; a group here would
        # be a group change).
        planned = dict(live)  # each id's content as it will be (a second one of an id updates)
        writes: list[tuple[str, dict[str, Any]]] = []
        for record in [record_content(r) for r in changes.records] + widgets:
            record_id = record.get("id")
            if record_id in planned and same(planned[record_id], record):
                continue
            problem = record_schema_problem(record)
            if problem:
                raise InvalidJSONStructureError(f"XFDF annotation {record_id!r}: {problem}; nothing was applied",
                                                document_id=self.id, record_id=record_id if isinstance(record_id, str) else None)
            writes.append(("update" if record_id in planned else "create", record))
            if isinstance(record_id, str):
                planned[record_id] = record
        deletes = [record_id for record_id in changes.deleted if record_id in planned]
        for data in changes.attachments.values():
            self.add_attachment(data, "application/octet-stream")
        counts = {"created": 0, "updated": 0, "deleted": 0}
        applied: list[str] = []  # "created 'ID'" ... in order, for the error of a write that fails

        def apply(op: str, record_id: object, write: Callable[[], object]) -> None:
            try:
                write()
            except LayerSyncError as exc:
                raise _partial_import_error(exc, record_id, applied) from exc
            counts[op + "d"] += 1
            applied.append(f"{op}d {record_id!r}")
        for op, record in writes:
            write = self.update_annotation if op == "update" else self.create_annotation
            apply(op, record.get("id"), functools.partial(write, record))
        for record_id in deletes:
            apply("delete", record_id, functools.partial(self.delete_annotation, record_id))
        return counts

    def _page_boxes(self, pages: Any) -> Any:
        """``pages``, or the downloaded PDF's CropBoxes when pikepdf is installed, or None."""
        if pages is not None:
            return pages
        try:
            import pikepdf  # optional: only to place XFDF coordinates on the real pages
        except ImportError:
            return None
        try:
            with pikepdf.open(self.pdf_path) as pdf:
                return [tuple(float(v) for v in page.cropbox) for page in pdf.pages]
        except (pikepdf.PdfError, OSError, LayerSyncError):
            return None

    # -- observers ------------------------------------------------------------------------------

    def observe(self, handler: ObserverHandler) -> Observer:
        """Registers callbacks for this document's events only; returns an
        :class:`Observer` (``.remove()``, or use it as a context manager).

        Args:
            handler: Either a callable taking an :class:`Event` (every event of
                :data:`OBSERVER_EVENT_NAMES`; ``event.seq`` counts this observer's events),
                or a mapping ``{event name: fn}`` whose functions get the arguments of
                :meth:`Client.on` handlers (``fn(doc, *args)``), plus
                ``did_reset_layer(doc, error)`` when the server's layer was reset and local
                changes were re-based.

        Threading: called on the library's callback thread after the client delegate's
        handlers; exceptions are logged and re-raised from the next blocking call.

        Raises:
            InvalidArgumentError: unknown event name, or not a callable/mapping.
            InvalidStateError: the client is closed.
        """
        return Observer(self, handler)
