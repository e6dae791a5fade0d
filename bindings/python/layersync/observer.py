"""Per-document observers (``layersync_document_add_observer``): :class:`Observer`, made
by :meth:`Document.observe`.

An observer belongs to its document: the document keeps it (and with it the trampolines C
calls) referenced until the library released it. It is built only from what the document
hands it (the handle, the dispatcher, the document's set of observers), so this module
imports no :class:`~layersync.Document`; the trampolines are the generated per-document
events of :mod:`layersync._callbacks`.

Imports :mod:`layersync._ffi`, :mod:`layersync.errors`, :mod:`layersync._convert`,
:mod:`layersync._callbacks` and :mod:`layersync.events`.
"""
from __future__ import annotations

import ctypes
import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Union

from . import _ffi
from ._callbacks import document_trampolines, guarded
from ._convert import ErrorOut
from .errors import InvalidArgumentError, InvalidStateError, check
from .events import OBSERVER_EVENT_NAMES, Event

if TYPE_CHECKING:  # annotations only
    from .document import Document

__all__ = ["Observer", "ObserverHandler"]

log = logging.getLogger("layersync")

#: What :meth:`Document.observe` takes: a callable receiving an :class:`Event`, or a mapping
#: ``{event name: fn(doc, *args)}``.
ObserverHandler = Union[Callable[["Event"], Any], Mapping[str, Callable[..., Any]]]


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
        self._callbacks = document._dispatcher.callbacks
        self._owner: set[Observer] = document._observers
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

        # Only the events asked for, plus release_context; nothing raised reaches C.
        def guard(fn: Callable[..., None]) -> Callable[..., None]:
            return guarded(fn, self._fail)
        self._trampolines = document_trampolines(self._deliver, guard, names)
        self._trampolines["release_context"] = _ffi.layersync_release_context_cb(
            guard(lambda _ctx: self.released.set()))
        struct = _ffi.layersync_document_observer()
        struct.version = _ffi.LAYERSYNC_DOCUMENT_OBSERVER_VERSION
        for name, fn in self._trampolines.items():
            setattr(struct, name, fn)
        out = ctypes.c_void_p()
        err = ErrorOut()
        with self._handle.lock:  # kept before C can call in
            self._owner.add(self)
        try:
            rc = document._invoke("layersync_document_add_observer", ctypes.byref(struct), ctypes.byref(out), err.ref)
            check(self._handle.lib, rc, err.struct)
        except BaseException:
            with self._handle.lock:
                self._owner.discard(self)
            raise
        self._pointer = int(out.value or 0)

    def _deliver(self, name: str, address: int | None, args: tuple[Any, ...]) -> None:
        self._callbacks.enter()
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
        self._callbacks.store(exc)

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
        err = ErrorOut()
        try:
            rc = self._handle.call("layersync_observer_remove", err.ref, document=pointer)
        except InvalidStateError:  # closing concurrently: the close removes it
            return
        check(self._handle.lib, rc, err.struct)
        if not self._callbacks.on_callback_thread():
            # release_context has returned on this thread: C holds no trampoline any more.
            # (Removed from a callback, it stays referenced until the client is closed.)
            with self._handle.lock:
                self._owner.discard(self)

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"<layersync.Observer {'active' if self.active else 'removed'}>"
