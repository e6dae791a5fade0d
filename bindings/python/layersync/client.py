"""The Pythonic layer over liblayersync: :class:`Client` and :class:`Document`.

Mirrors PSPDFKit Instant's ``InstantClient`` / ``InstantDocumentDescriptor``:

    with layersync.Client("http://127.0.0.1:5000", "/tmp/store") as client:
        client.wait_validated(timeout=10)
        doc = client.document_for_jwt(jwt)
        doc.download(wait=True, timeout=60, progress=lambda done, total: ...)
        ann = doc.create_annotation({"type": "pspdfkit/note", "pageIndex": 0,
                                     "bbox": [10, 10, 32, 32], "text": "héllo 👋"})
        doc.sync(wait=True, timeout=30)

Threading: every method may be called from any thread. The library runs all callbacks of
a client on one serial background thread of its own; handlers registered with
:meth:`Client.on` (or given as ``delegate``) run on that thread, never on the caller's.
An exception raised by a handler never reaches C: it is logged (logger ``layersync``)
and re-raised from the next blocking call of the client (``wait_*``, ``download(wait=True)``,
``sync(wait=True)``, ``reauthenticate(wait=True)``) or :meth:`Client.raise_callback_errors`.

Every event is also recorded in a bounded, thread-safe log with sequence numbers, so a
caller can take :meth:`Client.mark` before acting and :meth:`Client.wait_for` an event
afterwards without racing the callback thread.

The package is split by concept, each module importing only those before it (pygit2
style): ``_ffi`` (generated ctypes declarations and tables), ``errors``, ``_convert``
(text/JSON/enums/error structs across ctypes), ``_callbacks`` (trampolines, exceptions
raised inside callbacks), ``_handle`` (the C handle's lifetime), ``events`` (:class:`Event`,
the dispatcher), ``observer``, ``document``, and this module (:class:`Client`). Every name
this module exported before the split is still importable from it.
"""
from __future__ import annotations

import ctypes
import logging
import os
import weakref
from typing import Any, Callable, Iterable, Mapping

from . import _ffi
from ._callbacks import delegate_trampolines
from ._convert import CallsIntoC, DocumentState, ErrorOut, decode, encode_json, encode_text, json_list, json_object
from ._handle import Handle, finalize
from ._library import get_library, load_library
from .document import SYNC_DISABLED, Attachment, Document
from .errors import (InvalidArgumentError, InvalidStateError, LayerSyncError, check,  # noqa: F401 (re-exported)
                     exception_from_error, exception_from_struct)
from .events import (DOWNLOAD_OUTCOME, EVENT_NAMES, OBSERVER_EVENT_NAMES, REAUTH_OUTCOME,  # noqa: F401
                     SYNC_OUTCOME, Event, _Dispatcher, _fresh, raise_if_failed, sync_outcome_predicate)
from .observer import Observer, ObserverHandler  # noqa: F401 (re-exported)

__all__ = ["Client", "Document", "DocumentState", "Event", "EVENT_NAMES", "SYNC_DISABLED",
           "OBSERVER_EVENT_NAMES", "Observer", "Attachment",
           "DOWNLOAD_OUTCOME", "SYNC_OUTCOME", "REAUTH_OUTCOME", "sync_outcome_predicate",
           "raise_if_failed", "encode_text", "encode_json"]

log = logging.getLogger("layersync")

#: Values of ``Client(durability=...)``: the ``layersync_durability_t`` each one sets.
DURABILITY: dict[str, int] = {"full": _ffi.LAYERSYNC_DURABILITY_FULL, "normal": _ffi.LAYERSYNC_DURABILITY_NORMAL}


DelegateLike = Mapping[str, Callable[..., Any]] | object


class Client(CallsIntoC):
    """A LayerSync client: one per server URL and local storage directory.

    Mirrors Instant's ``InstantClient``. Creating it starts the connection sequence in the
    background (``GET /sync/v1/info``); its outcome arrives once as ``server_did_validate``
    (see :meth:`wait_validated`). Use it as a context manager or call :meth:`close`; a client
    left open is destroyed when collected or at interpreter exit.

    Args:
        server_url: Base URL of the sync server, e.g. ``"https://sync.example.com"``.
            Plain ``http://`` is accepted only for loopback hosts unless
            ``allow_insecure_http``.
        storage_path: Directory of the local store (created 0700 if missing).
        allow_insecure_http: Allow ``http://`` to non-loopback hosts.
        sync_delay_s: Debounce in seconds between a local edit and the automatic sync;
            ``None`` or :data:`SYNC_DISABLED` turns automatic syncing off. Default 1.0.
        connect_timeout_s, request_timeout_s: Network timeouts in seconds (library
            defaults 10 and 30 when None).
        long_poll_wait_s: Seconds a long-poll asks the server to wait (default 30).
        durability: How local writes made through the API commit (C
            ``layersync_client_options.durability``, docs/durability.md). ``"full"`` (default):
            each one is fsynced, durable across a power loss when the call returns.
            ``"normal"``: no fsync per write (SQLite ``synchronous=NORMAL``, Android's WAL
            default); a write survives an app crash, but a power loss or OS crash may undo the
            most recent ones (never one that was already sent). A layer another client of this
            process has open with ``"full"`` stays ``"full"`` (the strictest wins).
        delegate: Event handlers, either a mapping ``{event name: callable}`` or an object
            with methods named like the events (see :meth:`on`). It may also provide
            ``is_network_available() -> bool``, the host's reachability hint: the library
            asks it on its callback thread after a request failed without an HTTP answer,
            then every ``LAYERSYNC_NETWORK_HINT_RECHECK_S`` (5) seconds while it returns
            False. False works like ``set_network_available(False)`` (no requests, syncs fail
            with ``RequestFailedError``, edits stay pending) until it returns True, which
            resumes pending work at once; it never lifts an explicit
            ``set_network_available(False)``. It must return quickly and may call the API; an
            exception in it counts as True and is re-raised by the next wait.
        library: Path of liblayersync to load instead of the default lookup.

    Raises:
        ValueError: ``durability`` is neither ``"full"`` nor ``"normal"``.
        InvalidArgumentError, InvalidURLError, CouldNotWriteToDiskError: from
            ``layersync_client_create``.
        LibraryLoadError: the library cannot be loaded.
    """

    def __init__(self, server_url: str, storage_path: str | os.PathLike[str], *,
                 allow_insecure_http: bool = False, sync_delay_s: float | None = 1.0,
                 connect_timeout_s: float | None = None, request_timeout_s: float | None = None,
                 long_poll_wait_s: int | None = None, durability: str = "full",
                 delegate: DelegateLike | None = None, library: str | None = None) -> None:
        if durability not in DURABILITY:
            raise ValueError(f"durability must be one of {', '.join(map(repr, DURABILITY))}, not {durability!r}")
        lib = load_library(library) if library is not None else get_library()
        self._lib = lib
        self._dispatcher = d = _Dispatcher()
        url_b = encode_text(server_url, "server_url")
        path_b = encode_text(os.fspath(storage_path), "storage_path")

        opts = _ffi.layersync_client_options()
        rc = lib.layersync_client_options_init(ctypes.byref(opts), _ffi.LAYERSYNC_CLIENT_OPTIONS_VERSION)
        if rc != _ffi.LAYERSYNC_OK:
            raise LayerSyncError("layersync_client_options_init failed", code=rc)
        opts.server_url = url_b
        opts.storage_path = path_b
        opts.allow_insecure_http = bool(allow_insecure_http)
        opts.sync_delay_s = SYNC_DISABLED if sync_delay_s is None else float(sync_delay_s)
        if connect_timeout_s is not None:
            opts.connect_timeout_s = float(connect_timeout_s)
        if request_timeout_s is not None:
            opts.request_timeout_s = float(request_timeout_s)
        if long_poll_wait_s is not None:
            opts.long_poll_wait_s = int(long_poll_wait_s)
        opts.durability = DURABILITY[durability]

        handle = Handle(lib)
        client_ref = weakref.ref(self)
        d.document_factory = lambda address: Document(handle, d, address, client_ref)
        handle.trampolines = delegate_trampolines(d.callbacks, d.deliver, d.released,
                                                  lambda: d.network_available)
        for name, fn in handle.trampolines.items():
            if name == "is_network_available":
                continue
            setattr(handle.delegate, name, fn)
        handle.delegate.version = _ffi.LAYERSYNC_CLIENT_DELEGATE_VERSION
        handle.delegate.context = None

        if delegate is not None:
            self._install_delegate(delegate)
        if d.network_available is not None:
            handle.delegate.is_network_available = handle.trampolines["is_network_available"]

        err = ErrorOut()
        rc = lib.layersync_client_create(ctypes.byref(opts), ctypes.byref(handle.delegate),
                                         ctypes.byref(handle.pointer), err.ref)
        check(lib, rc, err.struct)
        self._handle = handle
        self._finalizer = weakref.finalize(self, finalize, handle)
        self._network_available = True

    # -- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        """Destroys the C client: cancels network work, drains queued callbacks, frees every
        document handle. Idempotent. Must not be called from one of this client's handlers
        (raises :class:`InvalidStateError`)."""
        self._handle.destroy()
        self._finalizer.detach()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._handle.closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.server_url
        return f"<layersync.Client {state}>"

    def _invoke(self, fn_name: str, *args: Any) -> Any:
        return self._handle.call(fn_name, *args)

    # -- delegate and events ------------------------------------------------------------

    def _install_delegate(self, delegate: DelegateLike) -> None:
        if isinstance(delegate, Mapping):
            items: Iterable[tuple[str, Any]] = delegate.items()
        else:
            items = ((n, getattr(delegate, n, None)) for n in EVENT_NAMES + ("is_network_available",))
        for name, fn in items:
            if fn is None:
                continue
            if name == "is_network_available":
                self._dispatcher.network_available = fn
            else:
                self.on(name, fn)

    def on(self, event: str, handler: Callable[..., Any]) -> Callable[[], None]:
        """Registers ``handler`` for a delegate event; returns a function that removes it.

        Handlers run on the library's callback thread with these arguments:

        - ``server_did_validate(info: dict | None, error: LayerSyncError | None)`` — info is
          ``GET /sync/v1/info``: ``{"server_version", "protocol": {"min", "max"}, "limits", ...}``
        - ``did_finish_download(doc)``, ``did_begin_sync(doc)``, ``did_finish_sync(doc)``,
          ``request_token(doc)`` (answer with ``doc.reauthenticate(jwt, wait=False)``)
        - ``did_fail_download / did_fail_authentication / did_fail_reauthentication /
          did_fail_sync(doc, error: LayerSyncError)``
        - ``did_finish_reauthentication(doc, jwt: str)``
        - ``did_change_sync_state(doc, state: DocumentState)``
        - ``download_progress(doc, done_bytes: int, total_bytes: int)`` (total may be 0 if unknown)
        - ``did_receive_changes(doc, {"created": [ids], "updated": [ids], "deleted": [ids]})``
        - ``did_reject_changes(doc, [{"report_id", "change_id", "id", "reason", "code", "local": dict|None,
          "server": dict|None}])`` — at least once per report: drop duplicates by ``report_id``;
          reports stay listed by :meth:`Document.rejected_changes` until acknowledged
        - ``did_reset_layer(doc, error: ServerResetError)`` — the server's layer epoch changed;
          the local store was re-based and unsynced edits kept (to be re-sent)

        Raises:
            ValueError: unknown event name.
        """
        return self._dispatcher.add_handler(event, handler)

    def mark(self) -> int:
        """The sequence number of the latest recorded event; pass it as ``since`` to
        :meth:`wait_for` / :meth:`events` to see only later events."""
        return self._dispatcher.mark()

    def events(self, since: int = 0, name: str | None = None,
               document: Document | None = None) -> list[Event]:
        """Recorded events with ``seq > since`` (the newest 4096 are kept), optionally filtered."""
        with self._dispatcher.cond:
            return [e for e in self._dispatcher.events
                    if e.seq > since and (name is None or e.name == name)
                    and (document is None or e.document is document)]

    def subscribe(self, subscriber: Callable[[Event], None]) -> Callable[[], None]:
        """Calls ``subscriber(event)`` with every :class:`Event` after it is recorded (all
        event names, all documents); returns a function that removes it.

        Runs on the library's callback thread, like :meth:`on` handlers; an exception it
        raises is logged and re-raised from the next blocking call. This is the hook the
        asyncio adapter (:mod:`layersync.aio`) uses.
        """
        return self._dispatcher.subscribe(subscriber)

    def raise_callback_errors(self) -> None:
        """Re-raises the oldest exception a handler raised on the callback thread, if any."""
        self._dispatcher.raise_callback_errors()

    def wait_for(self, names: str | Iterable[str], *, since: int = 0,
                 document: Document | None = None,
                 predicate: Callable[[Event], bool] | None = None,
                 timeout: float | None = 30.0,
                 on_event: Callable[[Event], None] | None = None,
                 watch: Iterable[str] = ()) -> Event:
        """Blocks until an event named in ``names`` (for ``document``, if given, and matching
        ``predicate``) with ``seq > since`` is recorded, and returns it. Take ``since`` from
        :meth:`mark` *before* starting what should cause the event, so no event is missed.

        ``on_event`` is called on the *calling* thread for every such event and for events
        named in ``watch`` (e.g. ``download_progress``) while waiting.

        Raises:
            TimeoutError: nothing matching within ``timeout`` seconds (None: wait forever).
            BaseException: an exception a handler raised on the callback thread.
        """
        return self._dispatcher.wait_for(names, since=since, document=document, predicate=predicate,
                                         timeout=timeout, on_event=on_event, watch=watch)

    def wait_validated(self, timeout: float | None = 30.0) -> dict[str, Any]:
        """Waits for the connection sequence's outcome (``server_did_validate``).

        Returns:
            The server's info JSON as a dict.

        Raises:
            RequestFailedError, OldClientError, OldServerError, InvalidServerDataError: the
                validation failed.
            TimeoutError: no outcome within ``timeout`` seconds.
        """
        event = self.wait_for("server_did_validate", since=0, timeout=timeout)
        info, error = event.args
        if error is not None:
            raise _fresh(error)
        return info if isinstance(info, dict) else {"raw": info}

    # -- properties and calls ---------------------------------------------------------------

    @property
    def server_url(self) -> str:
        """The server URL the client was created with."""
        return decode(self._invoke("layersync_client_server_url")) or ""

    @property
    def storage_path(self) -> str:
        """The local storage directory."""
        return decode(self._invoke("layersync_client_storage_path")) or ""

    @property
    def listening_transport(self) -> str:
        """How listening works: ``"stream"`` (one change stream for every listened layer, the
        default, whatever users the layers' JWTs name) or ``"long-poll"`` (the client fell back to one long-poll per layer: the server
        does not offer the stream, or something in between buffers it; the reason is written to
        stderr; the stream is tried again every few minutes and takes the layers back when it
        works). One layer may long-poll while the client is on the stream
        (``Document.listening_transport``)."""
        value = self._invoke("layersync_client_listening_transport")
        return "long-poll" if value == _ffi.LAYERSYNC_LISTENING_LONG_POLL else "stream"

    def set_network_available(self, available: bool) -> None:
        """Tells the engine whether the host has network access. ``False``: no requests are
        made, syncs fail with ``REQUEST_FAILED`` and edits stay pending; ``True``: resume.
        The explicit call wins over the delegate's ``is_network_available`` hint: False holds
        whatever the hint answers, True also clears the hint's last False, and no answer to
        an ask for a failure before this call (nor one given during it) can undo it
        (docs/threading.md §8)."""
        err = ErrorOut()
        rc = self._invoke("layersync_client_set_network_available", bool(available), err.ref)
        check(self._lib, rc, err.struct)
        self._network_available = bool(available)

    def document_for_jwt(self, jwt: str) -> "Document":
        """The document descriptor for the document and layer ``jwt`` grants (shape checked
        offline; the server checks the signature). Mirrors Instant's
        ``documentDescriptor(forJWT:)``. The same document and layer give the same
        :class:`Document` object.

        Raises:
            InvalidJWTError: malformed JWT (not three base64url parts, bad claim types).
            InvalidArgumentError, StorageLockedError, DatabaseAccessFailedError.
        """
        raw = encode_text(jwt, "jwt")
        out = ctypes.c_void_p()
        err = ErrorOut()
        rc = self._invoke("layersync_client_document_for_jwt", raw, ctypes.byref(out), err.ref)
        check(self._lib, rc, err.struct)
        doc = self._dispatcher.document(int(out.value or 0))
        assert doc is not None
        return doc

    # -- local storage ---------------------------------------------------------------------

    def local_documents(self) -> dict[str, list[dict[str, Any]]]:
        """The layers stored under :attr:`storage_path` for this server, whether or not a
        :class:`Document` was obtained for them in this process (Instant's
        ``localDocumentDescriptors``). Reads local files only.

        Returns:
            ``{document_id: [{"layer_name": str, "downloaded": bool,
            "has_unsynced_changes": bool, "pending_changes": int (count of queued local
            changes), "record_count": int, "locked": bool}, ...]}``. A layer another process
            holds has ``"locked": True`` and no details.

        Raises:
            InvalidStateError: the client is closed.
        """
        raw = self._call_out("layersync_client_local_documents")
        return json_object(raw) if raw else {}

    def cache_entries(self) -> list[dict[str, Any]]:
        """The disk cache (Instant's ``listCacheEntries()``).

        Returns:
            ``[{"document_id", "kind", "layer_name"?, "attachment_id"?, "path",
            "size_bytes": int, "referenced": bool}]``; ``kind`` is ``"pdf"``, ``"layer"``,
            ``"attachment"`` or ``"partial_download"``. Unreferenced entries are what
            :meth:`remove_unreferenced_cache_entries` deletes.
        """
        raw = self._call_out("layersync_client_list_cache_entries")
        return json_list(raw, "cache entry list")

    def remove_unreferenced_cache_entries(self) -> None:
        """Deletes every cache entry :meth:`cache_entries` reports as unreferenced
        (attachments no record refers to, PDFs without a layer store, stale partial
        downloads). Instant's ``removeUnreferencedCacheEntries()``.

        Raises:
            CouldNotRemoveDiskCacheEntriesError.
        """
        self._call("layersync_client_remove_unreferenced_cache_entries")

    def remove_local_storage(self) -> None:
        """Deletes the local storage of every document of this server: PDFs, layer stores
        **including unsynced changes**, attachments (Instant's ``removeLocalStorage()``).
        Every :class:`Document` handed out goes to :attr:`DocumentState.INVALID` and its
        calls then raise :class:`InvalidStateError`; :meth:`document_for_jwt` gives a new one.

        Raises:
            StorageLockedError: a layer is held by another process (the others are removed).
            CouldNotRemoveDiskCacheEntriesError.
        """
        self._call("layersync_client_remove_local_storage")

    def remove_local_storage_for_document(self, document_id: str) -> None:
        """Like :meth:`remove_local_storage` for one document id and all its layers; a
        document with nothing stored is not an error.

        Raises:
            InvalidArgumentError, StorageLockedError, CouldNotRemoveDiskCacheEntriesError.
        """
        self._call("layersync_client_remove_local_storage_for_document", encode_text(document_id, "document_id"))
