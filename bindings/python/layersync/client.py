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
"""
from __future__ import annotations

import collections
import concurrent.futures
import copy
import ctypes
import itertools
import enum
import json
import logging
import math
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Union

from . import _ffi
from ._library import get_library, load_library
from .errors import (InvalidArgumentError, InvalidStateError, LayerSyncError, check,
                     exception_from_error, exception_from_struct)

__all__ = ["Client", "Document", "DocumentState", "Event", "EVENT_NAMES", "SYNC_DISABLED",
           "OBSERVER_EVENT_NAMES", "Observer", "Attachment",
           "DOWNLOAD_OUTCOME", "SYNC_OUTCOME", "REAUTH_OUTCOME", "sync_outcome_predicate",
           "raise_if_failed", "encode_text", "encode_json"]

log = logging.getLogger("layersync")

#: ``sync_delay`` value that turns automatic syncing after local edits off.
SYNC_DISABLED: float = _ffi.LAYERSYNC_SYNC_DISABLED

#: Values of ``Client(durability=...)``: the ``layersync_durability_t`` each one sets.
DURABILITY: dict[str, int] = {"full": _ffi.LAYERSYNC_DURABILITY_FULL, "normal": _ffi.LAYERSYNC_DURABILITY_NORMAL}

#: Names of the delegate callbacks that :meth:`Client.on` accepts (the fields of
#: ``layersync_client_delegate`` except ``is_network_available``, which is a query and is
#: given once at construction).
EVENT_NAMES: tuple[str, ...] = (
    "server_did_validate", "did_finish_download", "did_fail_download",
    "did_fail_authentication", "did_finish_reauthentication", "did_fail_reauthentication",
    "did_begin_sync", "did_change_sync_state", "did_fail_sync", "did_finish_sync",
    "download_progress", "did_receive_changes", "did_reject_changes", "request_token",
    "did_reset_layer",
)

#: Names of the per-document observer callbacks (:meth:`Document.observe`): the delegate's
#: document events (including ``did_reset_layer(doc, error: ServerResetError)``).
OBSERVER_EVENT_NAMES: tuple[str, ...] = tuple(n for n in EVENT_NAMES if n != "server_did_validate")


class DocumentState(enum.IntEnum):
    """Sync state of a document layer; raw values are Instant's ``InstantDocumentState``."""

    UNKNOWN = _ffi.LAYERSYNC_DOCUMENT_STATE_UNKNOWN
    NEEDS_CONTENT_MIGRATION = _ffi.LAYERSYNC_DOCUMENT_STATE_NEEDS_CONTENT_MIGRATION
    MIGRATING_CONTENT = _ffi.LAYERSYNC_DOCUMENT_STATE_MIGRATING_CONTENT
    NEEDS_RESET_FOR_DATABASE_MIGRATION = _ffi.LAYERSYNC_DOCUMENT_STATE_NEEDS_RESET_FOR_DATABASE_MIGRATION
    RESETTING_FOR_DATABASE_MIGRATION = _ffi.LAYERSYNC_DOCUMENT_STATE_RESETTING_FOR_DATABASE_MIGRATION
    CLEAN = _ffi.LAYERSYNC_DOCUMENT_STATE_CLEAN
    DIRTY = _ffi.LAYERSYNC_DOCUMENT_STATE_DIRTY
    SENDING_CHANGES = _ffi.LAYERSYNC_DOCUMENT_STATE_SENDING_CHANGES
    RECEIVING_CHANGES = _ffi.LAYERSYNC_DOCUMENT_STATE_RECEIVING_CHANGES
    INVALID = _ffi.LAYERSYNC_DOCUMENT_STATE_INVALID


@dataclass(frozen=True)
class Event:
    """One callback as recorded by the client.

    ``args`` are the handler's arguments after the document (see :meth:`Client.on`);
    ``time`` is ``time.monotonic()`` when it arrived.
    """

    seq: int
    name: str
    document: Document | None
    args: tuple[Any, ...]
    time: float = field(compare=False)


# ---------------------------------------------------------------------------------------
# Conversions at the boundary


def encode_text(value: str, what: str) -> bytes:
    """UTF-8 bytes of ``value`` for C; refuses what C cannot carry.

    Raises:
        InvalidArgumentError: ``value`` is not a str, holds a lone surrogate (not
            encodable as UTF-8) or a NUL character (would truncate the C string).
    """
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be str, not {type(value).__name__}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{what} is not valid Unicode text: {exc.reason} at {exc.start}") from None
    if b"\x00" in raw:
        raise InvalidArgumentError(f"{what} contains a NUL character")
    return raw


def encode_json(value: Any, what: str) -> bytes:
    """UTF-8 JSON of ``value`` (non-ASCII kept as is, so the engine stores it byte-exact)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"{what} is not JSON-serialisable: {exc}") from None
    return encode_text(text, what)


def _json_object(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw.decode("utf-8"))
    if not isinstance(value, dict):
        raise LayerSyncError("library returned JSON that is not an object", code=_ffi.LAYERSYNC_ERROR_UNKNOWN)
    return value


def _json_list(raw: bytes | None, what: str) -> list[dict[str, Any]]:
    if not raw:
        return []
    items = json.loads(raw.decode("utf-8"))
    if not isinstance(items, list):
        raise LayerSyncError(f"library returned a {what} that is not an array", code=_ffi.LAYERSYNC_ERROR_UNKNOWN)
    return [dict(item) for item in items]


def _int_arg(value: int, what: str, bits: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be int, not {type(value).__name__}")
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise InvalidArgumentError(f"{what} out of range: {value}")
    return value


def _decode(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8")


def _take_string(lib: ctypes.CDLL, out: ctypes.c_char_p) -> bytes | None:
    """Copies the bytes behind a ``char *`` the library handed over, then frees it with
    ``layersync_free``. Reads the raw pointer (not ctypes' automatic bytes conversion), so
    the very pointer the library allocated is the one freed."""
    address = ctypes.c_void_p.from_buffer(out).value
    if not address:
        return None
    try:
        return ctypes.string_at(address)
    finally:
        lib.layersync_free(address)


class _Error:
    """A fresh ``layersync_error`` for one call."""

    __slots__ = ("struct",)

    def __init__(self) -> None:
        self.struct = _ffi.layersync_error()
        self.struct.version = _ffi.LAYERSYNC_ERROR_VERSION

    @property
    def ref(self) -> Any:
        return ctypes.byref(self.struct)


# ---------------------------------------------------------------------------------------
# Event dispatch (runs on the library's callback thread)


class _Dispatcher:
    """Receives every callback, records it, runs user handlers, wakes waiters.

    Holds no reference to the :class:`Client`, so a dropped client can be collected (its
    finalizer then destroys the C client)."""

    def __init__(self, max_events: int = 4096) -> None:
        self.cond = threading.Condition()
        self.events: collections.deque[Event] = collections.deque(maxlen=max_events)
        self.seq = 0
        self.handlers: dict[str, list[Callable[..., Any]]] = {n: [] for n in EVENT_NAMES}
        self.callback_errors: list[BaseException] = []
        self.documents: dict[int, Document] = {}
        self.documents_lock = threading.Lock()
        self.handle: _Handle | None = None
        self.client_ref: Callable[[], Client | None] = lambda: None
        self.network_available: Callable[[], bool] | None = None
        self.released = threading.Event()
        self.subscribers: list[Callable[[Event], None]] = []
        #: ``threading.get_ident()`` of the library's callback thread, once it called in.
        self.callback_thread: int | None = None

    def document(self, address: int | None) -> Document | None:
        """The one :class:`Document` wrapping ``address`` (created on first use)."""
        if not address:
            return None
        with self.documents_lock:
            doc = self.documents.get(address)
            if doc is None and self.handle is not None:
                doc = Document(self.handle, self, address)
                self.documents[address] = doc
            return doc

    def emit(self, name: str, document: Document | None, args: tuple[Any, ...]) -> None:
        # Handlers first, then record: a waiter woken by this event then also sees an
        # exception its handlers raised, and re-raises it from the very wait.
        with self.cond:
            handlers = list(self.handlers.get(name, ()))
        for handler in handlers:
            try:
                if name == "server_did_validate":
                    handler(*args)
                else:
                    handler(document, *args)
            except BaseException as exc:  # never let it reach C
                log.exception("layersync: %s handler %r raised; re-raised from the next blocking call",
                              name, handler)
                with self.cond:
                    self.callback_errors.append(exc)
        with self.cond:
            self.seq += 1
            event = Event(self.seq, name, document, args, time.monotonic())
            self.events.append(event)
            self.cond.notify_all()
            subscribers = list(self.subscribers)
        for subscriber in subscribers:
            try:
                subscriber(event)
            except BaseException as exc:  # never let it reach C
                log.exception("layersync: event subscriber %r raised; re-raised from the next blocking call",
                              subscriber)
                with self.cond:
                    self.callback_errors.append(exc)
                    self.cond.notify_all()

    def record_failure(self, exc: BaseException) -> None:
        log.error("layersync: internal callback failure", exc_info=exc)
        with self.cond:
            self.callback_errors.append(exc)
            self.cond.notify_all()

    def pop_callback_error(self) -> BaseException | None:
        with self.cond:
            return self.callback_errors.pop(0) if self.callback_errors else None

    def add_handler(self, event: str, handler: Callable[..., Any]) -> Callable[[], None]:
        if event not in self.handlers:
            raise ValueError(f"unknown event {event!r}; one of {', '.join(EVENT_NAMES)}")
        with self.cond:
            self.handlers[event].append(handler)

        def remove() -> None:
            with self.cond:
                try:
                    self.handlers[event].remove(handler)
                except ValueError:
                    pass
        return remove

    def subscribe(self, subscriber: Callable[[Event], None]) -> Callable[[], None]:
        with self.cond:
            self.subscribers.append(subscriber)

        def remove() -> None:
            with self.cond:
                try:
                    self.subscribers.remove(subscriber)
                except ValueError:
                    pass
        return remove

    def raise_callback_errors(self) -> None:
        exc = self.pop_callback_error()
        if exc is not None:
            raise exc

    def mark(self) -> int:
        with self.cond:
            return self.seq

    def wait_for(self, names: str | Iterable[str], *, since: int = 0,
                 document: Document | None = None,
                 predicate: Callable[[Event], bool] | None = None,
                 timeout: float | None = 30.0,
                 on_event: Callable[[Event], None] | None = None,
                 watch: Iterable[str] = ()) -> Event:
        wanted = {names} if isinstance(names, str) else set(names)
        watched = set(watch)
        deadline = None if timeout is None else time.monotonic() + timeout
        cursor = since
        while True:
            self.raise_callback_errors()
            with self.cond:
                fresh = [e for e in self.events if e.seq > cursor]
                if not fresh:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"no {'/'.join(sorted(wanted))} event within {timeout} s")
                    if not self.callback_errors:
                        self.cond.wait(remaining)
                    continue
                cursor = fresh[-1].seq
            for e in fresh:
                if document is not None and e.document is not document:
                    continue
                if e.name in watched and on_event is not None:
                    on_event(e)
                if e.name in wanted and (predicate is None or predicate(e)):
                    self.raise_callback_errors()
                    return e


def _fresh(exc: BaseException) -> BaseException:
    """A copy of a recorded exception to raise, so the recorded one never holds a traceback
    (whose frames would keep callers' objects alive through the event log)."""
    if isinstance(exc, LayerSyncError):
        return copy.copy(exc)
    return exc


#: Events that end the wait of :meth:`Document.download`.
DOWNLOAD_OUTCOME: tuple[str, str] = ("did_finish_download", "did_fail_download")
#: Events :meth:`Document.sync` watches (the begin marks the cycle that serves the call).
SYNC_OUTCOME: tuple[str, str, str] = ("did_begin_sync", "did_finish_sync", "did_fail_sync")
#: Events that end the wait of :meth:`Document.reauthenticate`.
REAUTH_OUTCOME: tuple[str, str] = ("did_finish_reauthentication", "did_fail_reauthentication")


def sync_outcome_predicate() -> Callable[[Event], bool]:
    """A stateful predicate over :data:`SYNC_OUTCOME` events (in order) that accepts the
    first terminal event after a ``did_begin_sync``.

    The engine queues a new cycle per ``sync`` call (or merges the call into one that is
    queued and has not begun), so a cycle that was already running when the call was made
    (and its ``did_finish_sync``) must not count as this call's outcome."""
    begun = False

    def ours(e: Event) -> bool:
        nonlocal begun
        if e.name == "did_begin_sync":
            begun = True
            return False
        return begun
    return ours


def raise_if_failed(event: Event, what: str) -> None:
    """Raises the error carried by a ``did_fail_*`` event (a fresh copy); no-op otherwise."""
    if event.name.startswith("did_fail_"):
        error = event.args[0] if event.args else None
        raise _fresh(error if isinstance(error, BaseException)
                     else LayerSyncError(f"{what} failed", code=_ffi.LAYERSYNC_ERROR_UNKNOWN))


def _json_or_text(raw: bytes | None) -> Any:
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def _make_trampolines(d: _Dispatcher) -> dict[str, Any]:
    """The CFUNCTYPE objects of the delegate. They must stay referenced for as long as the
    C client exists (ctypes frees the thunks of collected callback objects)."""

    def guard(fn: Callable[..., None]) -> Callable[..., None]:
        def wrapper(*a: Any) -> None:
            d.callback_thread = threading.get_ident()
            try:
                fn(*a)
            except BaseException as exc:
                d.record_failure(exc)
        return wrapper

    def on_validate(_ctx: Any, info: bytes | None, err: Any) -> None:
        error = exception_from_error(err.contents) if err else None
        d.emit("server_did_validate", None, (_json_or_text(info), error))

    def doc_event(name: str) -> Callable[..., None]:
        def f(_ctx: Any, doc: int | None) -> None:
            d.emit(name, d.document(doc), ())
        return f

    def doc_error_event(name: str) -> Callable[..., None]:
        def f(_ctx: Any, doc: int | None, err: Any) -> None:
            error = exception_from_error(err.contents) if err else None
            d.emit(name, d.document(doc), (error,))
        return f

    def on_state(_ctx: Any, doc: int | None, state: int) -> None:
        try:
            value: DocumentState | int = DocumentState(state)
        except ValueError:
            value = state
        d.emit("did_change_sync_state", d.document(doc), (value,))

    def on_progress(_ctx: Any, doc: int | None, done: int, total: int) -> None:
        d.emit("download_progress", d.document(doc), (int(done), int(total)))

    def on_reauth(_ctx: Any, doc: int | None, jwt: bytes | None) -> None:
        d.emit("did_finish_reauthentication", d.document(doc), (_decode(jwt),))

    def json_event(name: str) -> Callable[..., None]:
        def f(_ctx: Any, doc: int | None, value: bytes | None) -> None:
            d.emit(name, d.document(doc), (_json_or_text(value),))
        return f

    def on_release(_ctx: Any) -> None:
        d.released.set()

    def on_network(_ctx: Any) -> bool:
        provider = d.network_available
        if provider is None:
            return True
        try:
            return bool(provider())
        except BaseException as exc:
            d.record_failure(exc)
            return True

    F = _ffi
    return {
        "release_context": F.layersync_release_context_cb(guard(on_release)),
        "server_did_validate": F.layersync_server_did_validate_cb(guard(on_validate)),
        "did_finish_download": F.layersync_document_cb(guard(doc_event("did_finish_download"))),
        "did_fail_download": F.layersync_document_error_cb(guard(doc_error_event("did_fail_download"))),
        "did_fail_authentication": F.layersync_document_error_cb(guard(doc_error_event("did_fail_authentication"))),
        "did_finish_reauthentication": F.layersync_document_string_cb(guard(on_reauth)),
        "did_fail_reauthentication": F.layersync_document_error_cb(guard(doc_error_event("did_fail_reauthentication"))),
        "did_begin_sync": F.layersync_document_cb(guard(doc_event("did_begin_sync"))),
        "did_change_sync_state": F.layersync_document_state_cb(guard(on_state)),
        "did_fail_sync": F.layersync_document_error_cb(guard(doc_error_event("did_fail_sync"))),
        "did_finish_sync": F.layersync_document_cb(guard(doc_event("did_finish_sync"))),
        "download_progress": F.layersync_download_progress_cb(guard(on_progress)),
        "did_receive_changes": F.layersync_document_string_cb(guard(json_event("did_receive_changes"))),
        "did_reject_changes": F.layersync_document_string_cb(guard(json_event("did_reject_changes"))),
        "request_token": F.layersync_document_cb(guard(doc_event("request_token"))),
        "did_reset_layer": F.layersync_document_error_cb(guard(doc_error_event("did_reset_layer"))),
        "is_network_available": F.layersync_is_network_available_cb(on_network),
    }


class _Handle:
    """The C side of a client: pointer, delegate struct and trampolines kept alive together.
    Referenced by the finalizer, so it must not reference the :class:`Client`."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.pointer = ctypes.c_void_p()
        self.delegate = _ffi.layersync_client_delegate()
        self.trampolines: dict[str, Any] = {}
        self.lock = threading.RLock()
        # Guards the C handle's lifetime: every C call on the client or one of its documents
        # runs inside call(), and destroy() waits until none is running (and refuses new
        # ones) before layersync_client_destroy frees the handle. Without this, a thread
        # could pass the closed check, lose the CPU to close(), and call into freed memory.
        self.idle = threading.Condition(self.lock)
        self.calls_in_flight = 0
        self.closing = False
        self.closed = False
        # One-shot server operations (history, rollback, ...): token -> Future, resolved by
        # the one shared result trampoline on the callback thread.
        self.results: dict[int, concurrent.futures.Future[Any]] = {}
        self.result_tokens = itertools.count(1)
        self.result_cb = _ffi.layersync_document_result_cb(self._on_result)
        # Registered observers, kept (with their trampolines) until the C side released them.
        self.observers: set[Observer] = set()

    def _on_result(self, context: int | None, _document: int | None, result: bytes | None,
                   error: Any) -> None:
        """``layersync_document_result_cb``: resolves the Future registered under ``context``."""
        try:
            with self.lock:
                future = self.results.pop(int(context or 0), None)
            if future is None or future.done():
                return
            if error:
                future.set_exception(exception_from_error(error.contents))
                return
            try:
                value = None if result is None else json.loads(result.decode("utf-8"))
            except ValueError as exc:
                future.set_exception(LayerSyncError(f"library returned a result that is not JSON: {exc}",
                                                    code=_ffi.LAYERSYNC_ERROR_UNKNOWN))
                return
            future.set_result(value)
        except BaseException:  # never let it reach C (e.g. a Future cancelled meanwhile)
            log.debug("layersync: delivering a result failed", exc_info=True)

    def new_result(self) -> tuple[int, concurrent.futures.Future[Any]]:
        """A fresh (token, Future) pair for one result-callback operation."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self.lock:
            token = next(self.result_tokens)
            self.results[token] = future
        return token, future

    def drop_result(self, token: int) -> None:
        with self.lock:
            self.results.pop(token, None)

    def fail_pending_results(self) -> None:
        with self.lock:
            pending = list(self.results.values())
            self.results.clear()
        for future in pending:
            if not future.done():
                try:
                    future.set_exception(InvalidStateError("the client was closed before the server answered"))
                except concurrent.futures.InvalidStateError:
                    pass

    def call(self, fn_name: str, *args: Any, document: int | None = None) -> Any:
        """Calls ``fn_name(handle, *args)`` on the client (or on ``document``, an address),
        raising :class:`InvalidStateError` once the client is closing or closed."""
        with self.idle:
            if self.closed or self.closing:
                raise InvalidStateError("the client is closed")
            self.calls_in_flight += 1
            pointer = self.pointer if document is None else ctypes.c_void_p(document)
        try:
            return getattr(self.lib, fn_name)(pointer, *args)
        finally:
            with self.idle:
                self.calls_in_flight -= 1
                if not self.calls_in_flight:
                    self.idle.notify_all()

    def destroy(self) -> None:
        with self.idle:
            if self.closing:  # another thread is destroying it right now
                return
            if self.closed or not self.pointer.value:
                self.closed = True
                return
            self.closing = True
            while self.calls_in_flight:
                self.idle.wait()
        # Not under the lock: destroy drains callbacks, which may try (and fail) to call in.
        err = _Error()
        rc = self.lib.layersync_client_destroy(self.pointer, err.ref)
        with self.idle:
            self.closing = False
            if rc != _ffi.LAYERSYNC_OK:
                # INVALID_STATE: called from one of the client's own callbacks. Leave the
                # client alive (a later close() from another thread can succeed).
                raise exception_from_struct(self.lib, err.struct, rc)
            self.closed = True
            self.pointer = ctypes.c_void_p()
        self.fail_pending_results()


def _finalize(handle: _Handle) -> None:
    try:
        handle.destroy()
    except BaseException:  # at interpreter exit: best effort, never crash
        log.debug("layersync: destroying client at exit failed", exc_info=True)


@dataclass(frozen=True)
class Attachment:
    """An attachment read from the local disk cache (:meth:`Document.attachment`).

    ``data`` is the exact bytes; ``content_type`` the MIME type given when it was added (or
    the server's); ``id`` the lowercase hex SHA-256 of ``data``.
    """

    id: str
    data: bytes
    content_type: str


ObserverHandler = Union[Callable[["Event"], Any], Mapping[str, Callable[..., Any]]]


def _observer_trampolines(deliver: Callable[[str, int | None, tuple[Any, ...]], None],
                          release: Callable[[], None], fail: Callable[[BaseException], None],
                          names: Iterable[str]) -> dict[str, Any]:
    """CFUNCTYPE objects of one ``layersync_document_observer``: only for ``names`` plus
    ``release_context``. Each converts its C arguments like the delegate's and calls
    ``deliver(name, document address, args)``; nothing raised reaches C."""

    def guard(fn: Callable[..., None]) -> Callable[..., None]:
        def wrapper(*a: Any) -> None:
            try:
                fn(*a)
            except BaseException as exc:
                fail(exc)
        return wrapper

    def plain(name: str) -> Callable[..., None]:
        return lambda _ctx, doc: deliver(name, doc, ())

    def with_error(name: str) -> Callable[..., None]:
        return lambda _ctx, doc, err: deliver(name, doc, (exception_from_error(err.contents) if err else None,))

    def with_json(name: str) -> Callable[..., None]:
        return lambda _ctx, doc, value: deliver(name, doc, (_json_or_text(value),))

    def on_state(_ctx: Any, doc: int | None, state: int) -> None:
        try:
            value: DocumentState | int = DocumentState(state)
        except ValueError:
            value = state
        deliver("did_change_sync_state", doc, (value,))

    F = _ffi
    table: dict[str, tuple[Any, Callable[..., None]]] = {
        "did_finish_download": (F.layersync_document_cb, plain("did_finish_download")),
        "did_fail_download": (F.layersync_document_error_cb, with_error("did_fail_download")),
        "did_fail_authentication": (F.layersync_document_error_cb, with_error("did_fail_authentication")),
        "did_finish_reauthentication": (F.layersync_document_string_cb,
                                        lambda _c, doc, jwt: deliver("did_finish_reauthentication", doc, (_decode(jwt),))),
        "did_fail_reauthentication": (F.layersync_document_error_cb, with_error("did_fail_reauthentication")),
        "did_begin_sync": (F.layersync_document_cb, plain("did_begin_sync")),
        "did_change_sync_state": (F.layersync_document_state_cb, on_state),
        "did_fail_sync": (F.layersync_document_error_cb, with_error("did_fail_sync")),
        "did_finish_sync": (F.layersync_document_cb, plain("did_finish_sync")),
        "download_progress": (F.layersync_download_progress_cb,
                              lambda _c, doc, done, total: deliver("download_progress", doc, (int(done), int(total)))),
        "did_receive_changes": (F.layersync_document_string_cb, with_json("did_receive_changes")),
        "did_reject_changes": (F.layersync_document_string_cb, with_json("did_reject_changes")),
        "request_token": (F.layersync_document_cb, plain("request_token")),
        "did_reset_layer": (F.layersync_document_error_cb, with_error("did_reset_layer")),
    }
    out = {name: table[name][0](guard(table[name][1])) for name in names}
    out["release_context"] = F.layersync_release_context_cb(guard(lambda _ctx: release()))
    return out


class Observer:
    """A registration of :meth:`Document.observe`: receives one document's events until
    :meth:`remove` (or the client's close). A context manager: ``with doc.observe(fn):``
    removes it on exit.

    Threading: callbacks run on the library's callback thread, right after the client's
    delegate handlers for the same event, in the order observers were added. An exception a
    callback raises is logged (logger ``layersync``) and re-raised from the next blocking
    call of the client, like :meth:`Client.on` handlers.
    """

    def __init__(self, document: Document, handler: ObserverHandler) -> None:
        self._document = document
        self._handle = document._handle
        self._dispatcher = document._dispatcher
        self._pointer = 0
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        #: Set once the library released the observer (after its last callback returned).
        self.released = threading.Event()
        if isinstance(handler, Mapping):
            unknown = sorted(set(handler) - set(OBSERVER_EVENT_NAMES))
            if unknown:
                raise InvalidArgumentError(f"unknown observer event(s) {', '.join(unknown)}; "
                                           f"one of {', '.join(OBSERVER_EVENT_NAMES)}")
            self._handlers: dict[str, Callable[..., Any]] = {n: f for n, f in handler.items() if f is not None}
            self._callback: Callable[[Event], Any] | None = None
            names: Iterable[str] = self._handlers
        elif callable(handler):
            self._handlers = {}
            self._callback = handler
            names = OBSERVER_EVENT_NAMES
        else:
            raise InvalidArgumentError("observe() needs a callable or a mapping {event name: callable}")
        self._trampolines = _observer_trampolines(self._deliver, self.released.set, self._fail, names)
        struct = _ffi.layersync_document_observer()
        struct.version = _ffi.LAYERSYNC_DOCUMENT_OBSERVER_VERSION
        for name, fn in self._trampolines.items():
            setattr(struct, name, fn)
        out = ctypes.c_void_p()
        err = _Error()
        with self._handle.lock:  # registered before C can call in
            self._handle.observers.add(self)
        try:
            rc = document._invoke("layersync_document_add_observer", ctypes.byref(struct), ctypes.byref(out), err.ref)
            check(self._handle.lib, rc, err.struct)
        except BaseException:
            with self._handle.lock:
                self._handle.observers.discard(self)
            raise
        self._pointer = int(out.value or 0)

    def _deliver(self, name: str, address: int | None, args: tuple[Any, ...]) -> None:
        self._dispatcher.callback_thread = threading.get_ident()
        doc = self._dispatcher.document(address) or self._document
        try:
            if self._callback is not None:
                self._callback(Event(next(self._seq), name, doc, args, time.monotonic()))
            else:
                handler = self._handlers.get(name)
                if handler is not None:
                    handler(doc, *args)
        except BaseException as exc:
            log.exception("layersync: observer %r raised on %s; re-raised from the next blocking call", self, name)
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        with self._dispatcher.cond:
            self._dispatcher.callback_errors.append(exc)
            self._dispatcher.cond.notify_all()

    @property
    def document(self) -> Document:
        """The observed document."""
        return self._document

    @property
    def active(self) -> bool:
        """Whether callbacks can still arrive (not removed, client not closed)."""
        return bool(self._pointer) and not self._handle.closed and not self.released.is_set()

    def remove(self) -> None:
        """Unregisters the observer; idempotent, a no-op once the client is closed.

        From another thread it returns after a callback of this observer that is running
        has returned (no callback starts afterwards); from inside a callback of the same
        client it returns at once and the observer is released when that callback returns.
        """
        with self._lock:
            pointer, self._pointer = self._pointer, 0
        if not pointer or self._handle.closed:
            return
        err = _Error()
        try:
            rc = self._handle.call("layersync_observer_remove", err.ref, document=pointer)
        except InvalidStateError:  # closing concurrently: the close removes it
            return
        check(self._handle.lib, rc, err.struct)
        if threading.get_ident() != self._dispatcher.callback_thread:
            # release_context has returned on this thread: C holds no trampoline any more.
            # (Removed from a callback, it stays referenced until the client is closed.)
            with self._handle.lock:
                self._handle.observers.discard(self)

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"<layersync.Observer {'active' if self.active else 'removed'}>"


# ---------------------------------------------------------------------------------------


class _CallsIntoC:
    """The call conventions of include/layersync.h, shared by :class:`Client` and
    :class:`Document`: ``int fn(handle, ..., layersync_error *)`` and the variant with a
    ``char **`` out-string (freed with ``layersync_free``) before the error."""

    _lib: ctypes.CDLL

    def _invoke(self, fn_name: str, *args: Any) -> Any:
        raise NotImplementedError

    def _call(self, fn_name: str, *args: Any) -> None:
        err = _Error()
        rc = self._invoke(fn_name, *args, err.ref)
        check(self._lib, rc, err.struct)

    def _call_out(self, fn_name: str, *args: Any) -> bytes | None:
        out = ctypes.c_char_p()
        err = _Error()
        rc = self._invoke(fn_name, *args, ctypes.byref(out), err.ref)
        try:
            check(self._lib, rc, err.struct)
        finally:
            value = _take_string(self._lib, out)
        return value


DelegateLike = Mapping[str, Callable[..., Any]] | object


class Client(_CallsIntoC):
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

        handle = _Handle(lib)
        d.handle = handle
        d.client_ref = weakref.ref(self)
        handle.trampolines = _make_trampolines(d)
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

        err = _Error()
        rc = lib.layersync_client_create(ctypes.byref(opts), ctypes.byref(handle.delegate),
                                         ctypes.byref(handle.pointer), err.ref)
        check(lib, rc, err.struct)
        self._handle = handle
        self._finalizer = weakref.finalize(self, _finalize, handle)
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
        - ``did_reject_changes(doc, [{"id", "reason", "local": dict|None, "server": dict|None}])``
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
        return _decode(self._invoke("layersync_client_server_url")) or ""

    @property
    def storage_path(self) -> str:
        """The local storage directory."""
        return _decode(self._invoke("layersync_client_storage_path")) or ""

    def set_network_available(self, available: bool) -> None:
        """Tells the engine whether the host has network access. ``False``: no requests are
        made, syncs fail with ``REQUEST_FAILED`` and edits stay pending; ``True``: resume.
        The explicit call wins over the delegate's ``is_network_available`` hint: False holds
        whatever the hint answers, True also clears the hint's last False, and no answer to
        an ask for a failure before this call (nor one given during it) can undo it
        (docs/threading.md §8)."""
        err = _Error()
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
        err = _Error()
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
        return _json_object(raw) if raw else {}

    def cache_entries(self) -> list[dict[str, Any]]:
        """The disk cache (Instant's ``listCacheEntries()``).

        Returns:
            ``[{"document_id", "kind", "layer_name"?, "attachment_id"?, "path",
            "size_bytes": int, "referenced": bool}]``; ``kind`` is ``"pdf"``, ``"layer"``,
            ``"attachment"`` or ``"partial_download"``. Unreferenced entries are what
            :meth:`remove_unreferenced_cache_entries` deletes.
        """
        raw = self._call_out("layersync_client_list_cache_entries")
        return _json_list(raw, "cache entry list")

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


class Document(_CallsIntoC):
    """A document descriptor (document id + layer), owned by its :class:`Client`.

    Mirrors Instant's ``InstantDocumentDescriptor``. Obtain it with
    :meth:`Client.document_for_jwt`; it stays valid until the client is closed. Records are
    Instant JSON v2 objects passed in and out as dicts.
    """

    def __init__(self, handle: _Handle, dispatcher: _Dispatcher, address: int) -> None:
        # No strong reference to the Client: the client's finalizer keeps the dispatcher
        # (and through it every Document) alive, which must not keep the Client alive.
        self._handle = handle
        self._dispatcher = dispatcher
        self._address = address
        self._lib = handle.lib

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
        client = self._dispatcher.client_ref()
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
        return _decode(self._invoke("layersync_document_id")) or ""

    @property
    def layer_name(self) -> str:
        """The layer name; ``""`` is the default layer."""
        return _decode(self._invoke("layersync_document_layer_name")) or ""

    @property
    def user_id(self) -> str | None:
        """The JWT's ``user_id``, or None when it has none."""
        raw = self._call_out("layersync_document_user_id")
        return _decode(raw)

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
        return _decode(self._call_out("layersync_document_pdf_path")) or ""

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

    def start_listening(self) -> None:
        """Starts the long-poll for server changes; they arrive as ``did_receive_changes``."""
        self._call("layersync_document_start_listening")

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
            The stored annotation with its ``id``.

        Raises:
            InvalidArgumentError (not JSON, unencodable text), InvalidJSONStructureError,
            NotDownloadedError, DatabaseAccessFailedError.
        """
        raw = self._call_out("layersync_document_create_annotation", encode_json(dict(annotation), "annotation"))
        return _json_object(raw) if raw else dict(annotation)

    def update_annotation(self, annotation: Mapping[str, Any]) -> dict[str, Any]:
        """Replaces an annotation's content (the whole object, with its ``id``).

        Raises:
            NoSuchAnnotationError and the errors of :meth:`create_annotation`.
        """
        raw = self._call_out("layersync_document_update_annotation", encode_json(dict(annotation), "annotation"))
        return _json_object(raw) if raw else dict(annotation)

    def delete_annotation(self, annotation_id: str) -> None:
        """Deletes an annotation (and its comments).

        Raises:
            NoSuchAnnotationError, InvalidArgumentError, NotDownloadedError.
        """
        self._call("layersync_document_delete_annotation", encode_text(annotation_id, "annotation_id"))

    def get_annotation(self, annotation_id: str) -> dict[str, Any]:
        """One annotation of the local layer as a dict.

        Raises:
            NoSuchAnnotationError, InvalidArgumentError, NotDownloadedError.
        """
        raw = self._call_out("layersync_document_get_annotation", encode_text(annotation_id, "annotation_id"))
        if raw is None:
            raise LayerSyncError("library returned no annotation", code=_ffi.LAYERSYNC_ERROR_UNKNOWN)
        return _json_object(raw)

    def list_annotations(self, page_index: int | None = None, type: str | None = None,
                         creator_name: str | None = None, limit: int | None = None,
                         offset: int | None = None) -> list[dict[str, Any]]:
        """Annotations of the local layer ordered by id, optionally filtered and paged.

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
            ``type``), InvalidArgumentError (another ``rootId``), NotDownloadedError.
        """
        body: dict[str, Any] = ({"text": {"format": "plain", "value": comment}}
                                if isinstance(comment, str) else dict(comment))
        if creator_name is not None:
            body["creatorName"] = creator_name
        raw = self._call_out("layersync_document_create_comment", encode_text(root_id, "root_id"),
                             encode_json(body, "comment"))
        return _json_object(raw) if raw else body

    def list_comments(self, root_id: str) -> list[dict[str, Any]]:
        """The comments of root annotation ``root_id`` in the local layer, oldest first
        (``createdAt``, then id).

        Raises:
            NoSuchAnnotationError, InvalidArgumentError, NotDownloadedError.
        """
        raw = self._call_out("layersync_document_list_comments", encode_text(root_id, "root_id"))
        return _json_list(raw, "comment list")

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
        n = 0 if limit is None else _int_arg(limit, "limit", 32)
        raw = self._call_out("layersync_document_search_annotations", encode_text(query, "query"), ctypes.c_int32(n))
        return _json_list(raw, "search result")

    # -- server-side history (one-shot requests answered on the callback thread) ------------------

    def _begin(self, fn_name: str, *args: Any) -> concurrent.futures.Future[Any]:
        """Starts a ``layersync_document_result_cb`` operation; the Future gets its parsed
        result JSON or its error (:class:`InvalidStateError` if the client closes first)."""
        token, future = self._handle.new_result()
        err = _Error()
        try:
            rc = self._invoke(fn_name, *args, self._handle.result_cb, ctypes.c_void_p(token), err.ref)
            check(self._lib, rc, err.struct)
        except BaseException:
            self._handle.drop_result(token)
            raise
        return future

    def _await(self, future: concurrent.futures.Future[Any], timeout: float | None, what: str) -> Any:
        if threading.get_ident() == self._dispatcher.callback_thread:
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
                           ctypes.c_int64(_int_arg(revision, "revision", 64)))

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
            NoSuchAttachmentError: unknown here.
            CouldNotReadFromDiskCacheError, NotDownloadedError, InvalidArgumentError.
        """
        struct = _ffi.layersync_attachment()
        struct.version = _ffi.LAYERSYNC_ATTACHMENT_VERSION
        err = _Error()
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
