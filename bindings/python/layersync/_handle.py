"""The C side of a client and its lifetime: the ``layersync_client *`` pointer, the delegate
struct and trampolines kept alive with it, the guard that lets no call run into a freed
handle, and the destroy that closes it.

Imports :mod:`layersync._ffi`, :mod:`layersync.errors`, :mod:`layersync._convert` and
:mod:`layersync._callbacks` only; it knows no :class:`~layersync.Client` (the finalizer
references the handle, so the handle must not reference the client).
"""
from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any

from . import _ffi
from ._callbacks import PendingResults
from ._convert import ErrorOut
from .errors import InvalidStateError, exception_from_struct

__all__ = ["Handle", "finalize"]

log = logging.getLogger("layersync")


class Handle:
    """The C side of a client: pointer, delegate struct and trampolines kept alive together.
    Referenced by the finalizer, so it must not reference the :class:`Client`.

    Threading: :meth:`call` and :meth:`destroy` may run on any threads at once; destroy
    waits until no call is running and refuses new ones before the C handle is freed.
    """

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
        #: One-shot server operations (history, rollback, ...), failed when the client closes.
        self.results = PendingResults()

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
        """``layersync_client_destroy`` once no call is running; idempotent. Fails pending
        one-shot results afterwards.

        Raises:
            InvalidStateError: called from one of the client's own callbacks (the client
                stays alive; a later close from another thread can succeed).
        """
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
        err = ErrorOut()
        rc = self.lib.layersync_client_destroy(self.pointer, err.ref)
        with self.idle:
            self.closing = False
            if rc != _ffi.LAYERSYNC_OK:
                # INVALID_STATE: called from one of the client's own callbacks. Leave the
                # client alive (a later close() from another thread can succeed).
                raise exception_from_struct(self.lib, err.struct, rc)
            self.closed = True
            self.pointer = ctypes.c_void_p()
        self.results.fail_all()


def finalize(handle: Handle) -> None:
    """The finalizer of a dropped client (and at interpreter exit): destroys its handle,
    best effort, never raising."""
    try:
        handle.destroy()
    except BaseException:  # at interpreter exit: best effort, never crash
        log.debug("layersync: destroying client at exit failed", exc_info=True)
