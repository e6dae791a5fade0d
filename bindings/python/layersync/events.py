"""Events of a client: the :class:`Event` record, the event names, and the dispatcher that
receives every delegate callback, records it, runs the handlers and wakes waiters.

The per-document event names come from ``_ffi.DOCUMENT_EVENTS``, generated from the
``layersync_document_observer`` struct of api/layersync.toml.

Threading: the dispatcher's ``emit`` runs on the library's callback thread; everything
else may be called from any thread (all state is under one reentrant condition).

Imports :mod:`layersync._ffi`, :mod:`layersync.errors` and :mod:`layersync._callbacks`;
it makes no :class:`~layersync.Document` itself (the client gives it a factory).
"""
from __future__ import annotations

import collections
import copy
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from . import _ffi
from ._callbacks import CallbackContext
from .errors import LayerSyncError

if TYPE_CHECKING:  # annotations only
    from .document import Document

__all__ = ["Event", "EVENT_NAMES", "OBSERVER_EVENT_NAMES", "DOWNLOAD_OUTCOME", "SYNC_OUTCOME",
           "REAUTH_OUTCOME", "sync_outcome_predicate", "raise_if_failed"]

log = logging.getLogger("layersync")

#: Names of the per-document observer callbacks (:meth:`Document.observe`): the delegate's
#: document events (including ``did_reset_layer(doc, error: ServerResetError)``), in the
#: order of ``layersync_document_observer``.
OBSERVER_EVENT_NAMES: tuple[str, ...] = tuple(_ffi.DOCUMENT_EVENTS)

#: Names of the delegate callbacks that :meth:`Client.on` accepts (the fields of
#: ``layersync_client_delegate`` except ``is_network_available``, which is a query and is
#: given once at construction).
EVENT_NAMES: tuple[str, ...] = ("server_did_validate",) + OBSERVER_EVENT_NAMES

#: Events that end the wait of :meth:`Document.download`.
DOWNLOAD_OUTCOME: tuple[str, str] = ("did_finish_download", "did_fail_download")
#: Events :meth:`Document.sync` watches (the begin marks the cycle that serves the call).
SYNC_OUTCOME: tuple[str, str, str] = ("did_begin_sync", "did_finish_sync", "did_fail_sync")
#: Events that end the wait of :meth:`Document.reauthenticate`.
REAUTH_OUTCOME: tuple[str, str] = ("did_finish_reauthentication", "did_fail_reauthentication")


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


def _fresh(exc: BaseException) -> BaseException:
    """A copy of a recorded exception to raise, so the recorded one never holds a traceback
    (whose frames would keep callers' objects alive through the event log)."""
    if isinstance(exc, LayerSyncError):
        return copy.copy(exc)
    return exc


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


class _Dispatcher:
    """Receives every callback, records it, runs user handlers, wakes waiters.

    Holds no reference to the :class:`Client`, so a dropped client can be collected (its
    finalizer then destroys the C client). The one :class:`Document` per C address comes
    from ``document_factory(address)``, which the client sets before C can call in."""

    def __init__(self, max_events: int = 4096,
                 document_factory: Callable[[int], Document] | None = None) -> None:
        #: Callback thread and the exceptions raised on it; its condition is :attr:`cond`.
        self.callbacks = CallbackContext()
        self.cond = self.callbacks.cond
        self.events: collections.deque[Event] = collections.deque(maxlen=max_events)
        self.seq = 0
        self.handlers: dict[str, list[Callable[..., Any]]] = {n: [] for n in EVENT_NAMES}
        self.documents: dict[int, Document] = {}
        self.documents_lock = threading.Lock()
        self.document_factory = document_factory
        self.network_available: Callable[[], bool] | None = None
        self.released = threading.Event()
        self.subscribers: list[Callable[[Event], None]] = []

    def document(self, address: int | None) -> Document | None:
        """The one :class:`Document` wrapping ``address`` (created on first use)."""
        if not address:
            return None
        with self.documents_lock:
            doc = self.documents.get(address)
            if doc is None and self.document_factory is not None:
                doc = self.document_factory(address)
                self.documents[address] = doc
            return doc

    def deliver(self, name: str, address: int | None, args: tuple[Any, ...]) -> None:
        """A trampoline's delivery (``_callbacks.Deliver``): :meth:`emit` for the document
        at ``address`` (None for client events)."""
        self.emit(name, self.document(address), args)

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
                self.callbacks.store(exc, wake=False)
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
                self.callbacks.store(exc)

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
        self.callbacks.raise_pending()

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
                    if not self.callbacks.errors:
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
