"""Exceptions of the LayerSync bindings: one class per `layersync_error_code_t`.

Every exception derives from :class:`LayerSyncError`, which carries the fields of the C
``layersync_error`` struct. Where a builtin exception fits, the class also derives from
it, so ``except ValueError`` / ``except ConnectionError`` / ``except PermissionError``
work as a Python programmer expects::

    try:
        doc = client.document_for_jwt("not a jwt")
    except layersync.InvalidJWTError as e:      # also a ValueError
        print(e.code, e.code_name, e.message)   # 32 INVALID_JWT ...

The table :data:`ERROR_CLASSES` maps every code of ``_ffi.ERROR_CODE_NAMES`` to its class
(a test checks that none is missing). Codes unknown to these bindings map to
:class:`LayerSyncError` itself.
"""
from __future__ import annotations

import ctypes
from typing import Any

from . import _ffi

__all__ = ["LayerSyncError", "ERROR_CLASSES", "error_class", "exception_from_error",
           "exception_from_struct", "check"]


class LayerSyncError(Exception):
    """A failure reported by liblayersync (or detected by the bindings before calling it).

    Attributes:
        code: The ``layersync_error_code_t`` value (e.g. 32).
        code_name: Its name without prefix (e.g. ``"INVALID_JWT"``).
        message: Human-readable text from the library ("" if none).
        sqlite_extended_code: SQLite extended result code for ``DATABASE_ACCESS_FAILED``, else 0.
        http_status: HTTP status of the failed request, else 0.
        document_id: Document the error concerns, or None.
        record_id: Record (annotation) the error concerns, or None.
        attachment_id: Attachment the error concerns, or None.
    """

    #: The code this class stands for (0 on the base class: "any").
    default_code: int = 0

    def __init__(self, message: str = "", *, code: int | None = None,
                 sqlite_extended_code: int = 0, http_status: int = 0,
                 document_id: str | None = None, record_id: str | None = None,
                 attachment_id: str | None = None) -> None:
        super().__init__(message)
        self.code: int = self.default_code if code is None else int(code)
        self.code_name: str = _ffi.ERROR_CODE_NAMES.get(self.code, "UNRECOGNIZED")
        self.message: str = message
        self.sqlite_extended_code: int = sqlite_extended_code
        self.http_status: int = http_status
        self.document_id: str | None = document_id
        self.record_id: str | None = record_id
        self.attachment_id: str | None = attachment_id

    def __str__(self) -> str:
        parts = [f"[{self.code_name} {self.code}] {self.message}".rstrip()]
        if self.http_status:
            parts.append(f"http_status={self.http_status}")
        if self.sqlite_extended_code:
            parts.append(f"sqlite_extended_code={self.sqlite_extended_code}")
        if self.document_id:
            parts.append(f"document_id={self.document_id}")
        if self.record_id:
            parts.append(f"record_id={self.record_id}")
        if self.attachment_id:
            parts.append(f"attachment_id={self.attachment_id}")
        return parts[0] if len(parts) == 1 else f"{parts[0]} ({', '.join(parts[1:])})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, message={self.message!r})"

    def __reduce__(self) -> Any:  # picklable despite keyword-only fields
        return (_rebuild, (type(self), self.message, dict(self.__dict__)))


def _rebuild(cls: type[LayerSyncError], message: str, state: dict[str, Any]) -> LayerSyncError:
    exc = cls(message)
    exc.__dict__.update(state)
    return exc


# One line per error code: (code, class name, builtin base or None, docstring).
_TABLE: list[tuple[int, str, type[BaseException] | None, str]] = [
    (1, "UnknownError", None, "An error that fits no other code."),
    (2, "FeatureUnsupportedError", NotImplementedError, "The server or this build does not support the feature."),
    (3, "InvalidDocumentError", LookupError, "The server has no such document or layer (HTTP 404)."),
    (4, "AccessDeniedError", PermissionError, "The server rejected the JWT (HTTP 401/403)."),
    (5, "AlreadyDownloadedError", None, "download() on a downloaded document."),
    (6, "DatabaseAccessFailedError", OSError, "The local SQLite store failed; see sqlite_extended_code."),
    (7, "CouldNotWriteToDiskError", OSError, "A file or directory of the local store could not be written."),
    (8, "InvalidURLError", ValueError, "Malformed server URL, or http:// to a non-loopback host without opting in."),
    (10, "UnmanagedDocumentError", None, "The document is not managed by this client."),
    (11, "NoSuchAnnotationError", LookupError, "No annotation with that id in the layer."),
    (12, "UnmanagedAnnotationError", None, "The annotation is not managed by this layer."),
    (13, "CouldNotReadFromDiskCacheError", OSError, "A file of the local store could not be read."),
    (14, "CouldNotRemoveDiskCacheEntriesError", OSError, "Local storage could not be removed."),
    (16, "RequestFailedError", ConnectionError, "A network request failed (offline, timeout, 5xx); retried automatically."),
    (17, "InvalidServerDataError", None, "The server answered with data that does not follow the protocol."),
    (18, "InvalidRequestError", None, "The server rejected the request as malformed (HTTP 400)."),
    (19, "PayloadLimitExceededError", None, "A single change is larger than the server's max_request_bytes."),
    (21, "OldClientError", None, "The server needs a newer protocol than this library speaks."),
    (22, "OldServerError", None, "This library needs a newer protocol than the server speaks."),
    (32, "InvalidJWTError", ValueError, "The JWT is malformed (checked offline: shape and claim types)."),
    (33, "UserIDMismatchError", ValueError, "The JWT's user_id differs from the one pinned in the local store."),
    (40, "AttachmentNotLoadedError", None, "The attachment exists but its bytes are not downloaded yet."),
    (41, "NoSuchAttachmentError", LookupError, "No attachment with that id."),
    (42, "CouldNotCreateAttachmentError", OSError, "The attachment could not be stored."),
    (66, "AlreadyAuthenticatingError", None, "A reauthentication is already running for the document."),
    (96, "ContentMigrationNeededError", None, "The local store needs a content migration first."),
    (97, "PerformingContentMigrationError", None, "A content migration is running."),
    (112, "InvalidJSONStructureError", ValueError, "Valid JSON but not a valid Instant JSON record."),
    (113, "InvalidCustomDataError", ValueError, "A record's customData is not a JSON object."),
    (1000, "InvalidArgumentError", ValueError, "NULL where a value is required, invalid UTF-8, or text that is not JSON."),
    (1001, "CancelledError", None, "The operation was cancelled."),
    (1002, "StorageLockedError", None, "Another process owns this layer's local store."),
    (1003, "ServerResetError", None, "The server's layer epoch changed; local changes were rebased."),
    (1004, "ConflictError", None, "A local change was rejected in favour of the server's (first writer wins)."),
    (1005, "NotDownloadedError", None, "The document must be downloaded first."),
    (1006, "InvalidStateError", RuntimeError, "The call is not allowed in the current state."),
]

#: Code → exception class, for every code these bindings know.
ERROR_CLASSES: dict[int, type[LayerSyncError]] = {}

for _code, _name, _builtin, _doc in _TABLE:
    _bases: tuple[type, ...] = (LayerSyncError,) if _builtin is None else (LayerSyncError, _builtin)
    _cls = type(_name, _bases, {"__doc__": f"{_doc} (code {_code}, {_ffi.ERROR_CODE_NAMES.get(_code, '?')})",
                                "default_code": _code, "__module__": __name__})
    globals()[_name] = _cls
    ERROR_CLASSES[_code] = _cls
    __all__.append(_name)
del _code, _name, _builtin, _doc, _bases, _cls

# Names for static type checkers (the classes above are created from the table).
UnknownError: type[LayerSyncError]
FeatureUnsupportedError: type[LayerSyncError]
InvalidDocumentError: type[LayerSyncError]
AccessDeniedError: type[LayerSyncError]
AlreadyDownloadedError: type[LayerSyncError]
DatabaseAccessFailedError: type[LayerSyncError]
CouldNotWriteToDiskError: type[LayerSyncError]
InvalidURLError: type[LayerSyncError]
UnmanagedDocumentError: type[LayerSyncError]
NoSuchAnnotationError: type[LayerSyncError]
UnmanagedAnnotationError: type[LayerSyncError]
CouldNotReadFromDiskCacheError: type[LayerSyncError]
CouldNotRemoveDiskCacheEntriesError: type[LayerSyncError]
RequestFailedError: type[LayerSyncError]
InvalidServerDataError: type[LayerSyncError]
InvalidRequestError: type[LayerSyncError]
PayloadLimitExceededError: type[LayerSyncError]
OldClientError: type[LayerSyncError]
OldServerError: type[LayerSyncError]
InvalidJWTError: type[LayerSyncError]
UserIDMismatchError: type[LayerSyncError]
AttachmentNotLoadedError: type[LayerSyncError]
NoSuchAttachmentError: type[LayerSyncError]
CouldNotCreateAttachmentError: type[LayerSyncError]
AlreadyAuthenticatingError: type[LayerSyncError]
ContentMigrationNeededError: type[LayerSyncError]
PerformingContentMigrationError: type[LayerSyncError]
InvalidJSONStructureError: type[LayerSyncError]
InvalidCustomDataError: type[LayerSyncError]
InvalidArgumentError: type[LayerSyncError]
CancelledError: type[LayerSyncError]
StorageLockedError: type[LayerSyncError]
ServerResetError: type[LayerSyncError]
ConflictError: type[LayerSyncError]
NotDownloadedError: type[LayerSyncError]
InvalidStateError: type[LayerSyncError]


def error_class(code: int) -> type[LayerSyncError]:
    """The exception class for ``code`` (:class:`LayerSyncError` for unknown codes)."""
    return ERROR_CLASSES.get(int(code), LayerSyncError)


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


def exception_from_error(error: _ffi.layersync_error, fallback_code: int = 0) -> LayerSyncError:
    """Builds the exception for a filled ``layersync_error`` struct, without clearing it.

    Use this for errors the library lends to callbacks (valid only during the call).
    ``fallback_code`` (the function's return value) is used when the struct's code is 0.
    """
    code = int(error.code) or int(fallback_code) or _ffi.LAYERSYNC_ERROR_UNKNOWN
    return error_class(code)(
        _text(error.message) or "",
        code=code,
        sqlite_extended_code=int(error.sqlite_extended_code),
        http_status=int(error.http_status),
        document_id=_text(error.document_id),
        record_id=_text(error.record_id),
        attachment_id=_text(error.attachment_id),
    )


def exception_from_struct(lib: ctypes.CDLL, error: _ffi.layersync_error,
                          fallback_code: int = 0) -> LayerSyncError:
    """Builds the exception for an error struct the caller owns, then always clears it
    with ``layersync_error_clear`` (freeing its strings)."""
    try:
        return exception_from_error(error, fallback_code)
    finally:
        lib.layersync_error_clear(ctypes.byref(error))


def check(lib: ctypes.CDLL, rc: int, error: _ffi.layersync_error) -> None:
    """Raises the mapped exception if ``rc`` is not ``LAYERSYNC_OK``; clears ``error`` either way."""
    if rc != _ffi.LAYERSYNC_OK:
        raise exception_from_struct(lib, error, rc)
    if error.code or error.message:
        lib.layersync_error_clear(ctypes.byref(error))
