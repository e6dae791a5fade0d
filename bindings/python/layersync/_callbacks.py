"""Callbacks from C: the ctypes trampolines, and the store of exceptions raised inside them.

A trampoline is a ``CFUNCTYPE`` object that C calls on the library's one serial callback
thread. It converts its C arguments to Python values and hands them on; nothing it raises
reaches C. An exception raised inside a callback (by a handler, or by a conversion) is
stored in the client's :class:`CallbackContext` and re-raised on the caller's thread from
the next blocking call after the C call that waits for it returns (``wait_for`` and every
``wait=True`` helper), or from :meth:`~layersync.Client.raise_callback_errors`.

The per-document events and their C callback types come from ``_ffi.DOCUMENT_EVENTS``,
generated from the ``layersync_document_observer`` struct of api/layersync.toml; this
module says only how the arguments of each payload kind convert (one entry per kind).

Imports :mod:`layersync._ffi`, :mod:`layersync.errors` and :mod:`layersync._convert` only.
"""
from __future__ import annotations

import concurrent.futures
import itertools
import json
import logging
import threading
from typing import Any, Callable, Iterable

from . import _ffi
from ._convert import decode, document_state, json_or_text
from .errors import InvalidStateError, LayerSyncError, exception_from_error

__all__ = ["CallbackContext", "guarded", "document_trampolines", "delegate_trampolines", "PendingResults"]

log = logging.getLogger("layersync")

#: ``deliver(event name, document address or None, converted arguments)``.
Deliver = Callable[[str, "int | None", "tuple[Any, ...]"], None]


class CallbackContext:
    """What the callbacks of one client share: the condition waiters sleep on, the
    exceptions raised inside callbacks (oldest first) and the callback thread's identity.

    Threading: :meth:`store` and :meth:`fail` run on the callback thread, :meth:`pop` and
    :meth:`raise_pending` on any thread; all under :attr:`cond` (a reentrant lock).
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.errors: list[BaseException] = []
        #: ``threading.get_ident()`` of the library's callback thread, once it called in.
        self.thread: int | None = None

    def enter(self) -> None:
        """Notes the calling thread as the callback thread (called by each trampoline)."""
        self.thread = threading.get_ident()

    def on_callback_thread(self) -> bool:
        """Whether the caller runs on the library's callback thread (where a blocking
        wait would wait for itself)."""
        return threading.get_ident() == self.thread

    def store(self, exc: BaseException, *, wake: bool = True) -> None:
        """Keeps ``exc`` to be re-raised by the next blocking call; ``wake`` wakes waiters
        now (without it they see it with the next event)."""
        with self.cond:
            self.errors.append(exc)
            if wake:
                self.cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        """A trampoline itself failed (not a user handler): logged, then stored."""
        log.error("layersync: internal callback failure", exc_info=exc)
        self.store(exc)

    def pop(self) -> BaseException | None:
        """Takes the oldest stored exception, or None."""
        with self.cond:
            return self.errors.pop(0) if self.errors else None

    def raise_pending(self) -> None:
        """Re-raises the oldest stored exception, if any."""
        exc = self.pop()
        if exc is not None:
            raise exc


def guarded(fn: Callable[..., None], on_error: Callable[[BaseException], None],
            on_enter: Callable[[], None] | None = None) -> Callable[..., None]:
    """``fn`` wrapped for C: ``on_enter()`` first (if given), and any exception goes to
    ``on_error`` instead of into C."""
    def wrapper(*a: Any) -> None:
        if on_enter is not None:
            on_enter()
        try:
            fn(*a)
        except BaseException as exc:
            on_error(exc)
    return wrapper


def _no_args() -> tuple[Any, ...]:
    return ()


def _error_arg(err: Any) -> tuple[Any, ...]:
    # The error is lent for the call only: copied into an exception now.
    return (exception_from_error(err.contents) if err else None,)


def _state_arg(state: int) -> tuple[Any, ...]:
    return (document_state(state),)


def _progress_args(done: int, total: int) -> tuple[Any, ...]:
    return (int(done), int(total))


def _json_arg(value: bytes | None) -> tuple[Any, ...]:
    return (json_or_text(value),)


def _text_arg(value: bytes | None) -> tuple[Any, ...]:
    return (decode(value),)


#: How the C arguments after ``(context, document)`` of each payload kind of
#: ``_ffi.DOCUMENT_EVENTS`` become the handler's arguments (see :meth:`layersync.Client.on`).
_CONVERSIONS: dict[str, Callable[..., tuple[Any, ...]]] = {
    "none": _no_args,
    "error": _error_arg,
    "string": _text_arg,
    "json": _json_arg,
    "state": _state_arg,
    "progress": _progress_args,
}

#: Event name -> (callback type, conversion), for every generated per-document event.
#: Fails at import when api/layersync.toml gives an event a kind this module cannot convert.
_EVENT_CONVERSIONS: dict[str, tuple[Any, Callable[..., tuple[Any, ...]]]] = {}
for _name, (_cb, _kind) in _ffi.DOCUMENT_EVENTS.items():
    if _kind not in _CONVERSIONS:
        raise ImportError(f"layersync._callbacks: no conversion for event {_name} (payload kind {_kind!r})")
    _EVENT_CONVERSIONS[_name] = (_cb, _CONVERSIONS[_kind])


def document_trampolines(deliver: Deliver, guard: Callable[[Callable[..., None]], Callable[..., None]],
                         names: Iterable[str]) -> dict[str, Any]:
    """CFUNCTYPE objects for the per-document events ``names`` (keys of
    ``_ffi.DOCUMENT_EVENTS``): each converts its C arguments and calls
    ``deliver(name, document address, args)``, wrapped by ``guard`` (see :func:`guarded`).
    The objects must stay referenced while C may call them (ctypes frees the thunks of
    collected callback objects)."""
    def trampoline(name: str, convert: Callable[..., tuple[Any, ...]]) -> Callable[..., None]:
        def f(_ctx: Any, doc: int | None, *raw: Any) -> None:
            deliver(name, doc, convert(*raw))
        return f

    out: dict[str, Any] = {}
    for name in names:
        cb_type, convert = _EVENT_CONVERSIONS[name]
        out[name] = cb_type(guard(trampoline(name, convert)))
    return out


def delegate_trampolines(context: CallbackContext, deliver: Deliver, released: threading.Event,
                         network_available: Callable[[], Callable[[], bool] | None]) -> dict[str, Any]:
    """The CFUNCTYPE objects of a ``layersync_client_delegate``, by field name: every event
    goes to ``deliver`` (``server_did_validate`` with document None and arguments
    ``(info, error)``), ``release_context`` sets ``released``, and ``is_network_available``
    asks the provider ``network_available()`` returns (True when there is none, or when it
    raises: the exception is stored). They must stay referenced for as long as the C client
    exists."""
    def guard(fn: Callable[..., None]) -> Callable[..., None]:
        return guarded(fn, context.fail, context.enter)

    def on_validate(_ctx: Any, info: bytes | None, err: Any) -> None:
        error = exception_from_error(err.contents) if err else None
        deliver("server_did_validate", None, (json_or_text(info), error))

    def on_release(_ctx: Any) -> None:
        released.set()

    def on_network(_ctx: Any) -> bool:
        provider = network_available()
        if provider is None:
            return True
        try:
            return bool(provider())
        except BaseException as exc:
            context.fail(exc)
            return True

    out: dict[str, Any] = {
        "release_context": _ffi.layersync_release_context_cb(guard(on_release)),
        "server_did_validate": _ffi.layersync_server_did_validate_cb(guard(on_validate)),
    }
    out.update(document_trampolines(deliver, guard, _ffi.DOCUMENT_EVENTS))
    out["is_network_available"] = _ffi.layersync_is_network_available_cb(on_network)
    return out


class PendingResults:
    """One-shot server operations (history, rollback, ...) of a client: token -> Future,
    resolved by the one shared ``layersync_document_result_cb`` trampoline on the callback
    thread (the token travels as the call's ``context``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.futures: dict[int, concurrent.futures.Future[Any]] = {}
        self.tokens = itertools.count(1)
        #: The trampoline to pass as the ``callback`` argument.
        self.callback = _ffi.layersync_document_result_cb(self._on_result)

    def _on_result(self, context: int | None, _document: int | None, result: bytes | None,
                   error: Any) -> None:
        """``layersync_document_result_cb``: resolves the Future registered under ``context``
        with the parsed JSON result or the error's exception."""
        try:
            with self.lock:
                future = self.futures.pop(int(context or 0), None)
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

    def new(self) -> tuple[int, concurrent.futures.Future[Any]]:
        """A fresh (token, Future) pair for one result-callback operation."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self.lock:
            token = next(self.tokens)
            self.futures[token] = future
        return token, future

    def drop(self, token: int) -> None:
        """Forgets ``token`` (its call failed, so no result will come)."""
        with self.lock:
            self.futures.pop(token, None)

    def fail_all(self) -> None:
        """Fails every pending Future with :class:`InvalidStateError` (the client closed:
        no answer will come)."""
        with self.lock:
            pending = list(self.futures.values())
            self.futures.clear()
        for future in pending:
            if not future.done():
                try:
                    future.set_exception(InvalidStateError("the client was closed before the server answered"))
                except concurrent.futures.InvalidStateError:
                    pass
