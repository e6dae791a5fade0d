"""Conversions across the ctypes boundary: text and JSON in and out, C enum values, the
``layersync_error`` out-parameter, and the two call conventions of include/layersync.h.

Below everything but :mod:`layersync._ffi` and :mod:`layersync.errors`; imports no other
module of the package. Nothing here keeps state or starts threads.
"""
from __future__ import annotations

import ctypes
import enum
import json
from typing import Any

from . import _ffi
from .errors import InvalidArgumentError, LayerSyncError, check

__all__ = ["DocumentState", "document_state", "encode_text", "encode_json", "json_object", "json_list",
           "json_or_text", "int_arg", "decode", "take_string", "ErrorOut", "CallsIntoC"]


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


def document_state(value: int) -> DocumentState | int:
    """The :class:`DocumentState` of a ``layersync_document_state_t`` value; a value these
    bindings do not know is returned as the int."""
    try:
        return DocumentState(value)
    except ValueError:
        return value


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


def json_object(raw: bytes) -> dict[str, Any]:
    """The JSON object the library returned as UTF-8 bytes.

    Raises:
        LayerSyncError: (``UNKNOWN``) the JSON is not an object.
    """
    value = json.loads(raw.decode("utf-8"))
    if not isinstance(value, dict):
        raise LayerSyncError("library returned JSON that is not an object", code=_ffi.LAYERSYNC_ERROR_UNKNOWN)
    return value


def json_list(raw: bytes | None, what: str) -> list[dict[str, Any]]:
    """The JSON array of objects the library returned (``[]`` for NULL or empty).

    Raises:
        LayerSyncError: (``UNKNOWN``) the JSON is not an array; ``what`` names it.
    """
    if not raw:
        return []
    items = json.loads(raw.decode("utf-8"))
    if not isinstance(items, list):
        raise LayerSyncError(f"library returned a {what} that is not an array", code=_ffi.LAYERSYNC_ERROR_UNKNOWN)
    return [dict(item) for item in items]


def json_or_text(raw: bytes | None) -> Any:
    """A callback's string payload: parsed JSON, or the text itself when it is not JSON
    (None for NULL). Never raises on bad JSON: a callback must not fail on it."""
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def int_arg(value: int, what: str, bits: int) -> int:
    """``value`` checked to be an int (not a bool) that fits a signed C integer of ``bits``.

    Raises:
        InvalidArgumentError: not an int, or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be int, not {type(value).__name__}")
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise InvalidArgumentError(f"{what} out of range: {value}")
    return value


def decode(raw: bytes | None) -> str | None:
    """UTF-8 text of a C string the library lent (None for NULL)."""
    return None if raw is None else raw.decode("utf-8")


def take_string(lib: ctypes.CDLL, out: ctypes.c_char_p) -> bytes | None:
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


class ErrorOut:
    """A fresh ``layersync_error`` for one call (the optional last out-parameter)."""

    __slots__ = ("struct",)

    def __init__(self) -> None:
        self.struct = _ffi.layersync_error()
        self.struct.version = _ffi.LAYERSYNC_ERROR_VERSION

    @property
    def ref(self) -> Any:
        """``ctypes.byref`` of the struct, to pass as the ``layersync_error *`` argument."""
        return ctypes.byref(self.struct)


class CallsIntoC:
    """The call conventions of include/layersync.h, shared by :class:`~layersync.Client`
    and :class:`~layersync.Document`: ``int fn(handle, ..., layersync_error *)`` and the
    variant with a ``char **`` out-string (freed with ``layersync_free``) before the error.
    Subclasses say how a call reaches its handle (:meth:`_invoke`)."""

    _lib: ctypes.CDLL

    def _invoke(self, fn_name: str, *args: Any) -> Any:
        raise NotImplementedError

    def _call(self, fn_name: str, *args: Any) -> None:
        err = ErrorOut()
        rc = self._invoke(fn_name, *args, err.ref)
        check(self._lib, rc, err.struct)

    def _call_out(self, fn_name: str, *args: Any) -> bytes | None:
        out = ctypes.c_char_p()
        err = ErrorOut()
        rc = self._invoke(fn_name, *args, ctypes.byref(out), err.ref)
        try:
            check(self._lib, rc, err.struct)
        finally:
            value = take_string(self._lib, out)
        return value
