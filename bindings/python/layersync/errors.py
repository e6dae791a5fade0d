"""Exceptions of the LayerSync bindings: one class per `layersync_error_code_t`.

Every exception derives from :class:`LayerSyncError`, which carries the fields of the C
``layersync_error`` struct. Where a builtin exception fits, the class also derives from
it, so ``except ValueError`` / ``except ConnectionError`` / ``except PermissionError``
work as a Python programmer expects::

    try:
        doc = client.document_for_jwt("not a jwt")
    except layersync.InvalidJWTError as e:      # also a ValueError
        print(e.code, e.code_name, e.message)   # 32 INVALID_JWT ...

The table :data:`ERROR_CLASSES` maps every code of ``_ffi.ERROR_CODE_NAMES`` to its class;
it is built from ``_ffi.ERROR_EXCEPTIONS``, generated from api/layersync.toml (a test checks
that none is missing). Codes unknown to these bindings map to :class:`LayerSyncError` itself.
"""
from __future__ import annotations

import ctypes
from typing import Any, Mapping

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


# One class per error code of docs/architecture.md §5, for the codes whose class derives
# from a builtin exception too or says more than the C documentation. Which class stands
# for which code is not written here: ERROR_CLASSES below is built from the table
# _ffi.ERROR_EXCEPTIONS that tools/gen_api.py generates from api/layersync.toml, and a code
# without a class here gets a plain one (test_errors checks that every code has exactly one).


class UnknownError(LayerSyncError):
    """An error that fits no other code. Code 1 ``UNKNOWN``."""

    default_code = _ffi.LAYERSYNC_ERROR_UNKNOWN


class FeatureUnsupportedError(LayerSyncError, NotImplementedError):
    """The server or this build does not support the feature. Code 2 ``FEATURE_UNSUPPORTED``."""

    default_code = _ffi.LAYERSYNC_ERROR_FEATURE_UNSUPPORTED


class InvalidDocumentError(LayerSyncError, LookupError):
    """The server has no such document or layer (HTTP 404). Code 3 ``INVALID_DOCUMENT``."""

    default_code = _ffi.LAYERSYNC_ERROR_INVALID_DOCUMENT


class AccessDeniedError(LayerSyncError, PermissionError):
    """The server rejected the JWT (HTTP 401/403). Code 4 ``ACCESS_DENIED``."""

    default_code = _ffi.LAYERSYNC_ERROR_ACCESS_DENIED


class AlreadyDownloadedError(LayerSyncError):
    """download() on a downloaded document. Code 5 ``ALREADY_DOWNLOADED``."""

    default_code = _ffi.LAYERSYNC_ERROR_ALREADY_DOWNLOADED


class DatabaseAccessFailedError(LayerSyncError, OSError):
    """The local SQLite store failed; see sqlite_extended_code. Code 6 ``DATABASE_ACCESS_FAILED``."""

    default_code = _ffi.LAYERSYNC_ERROR_DATABASE_ACCESS_FAILED


class CouldNotWriteToDiskError(LayerSyncError, OSError):
    """A file or directory of the local store could not be written. Code 7 ``COULD_NOT_WRITE_TO_DISK``."""

    default_code = _ffi.LAYERSYNC_ERROR_COULD_NOT_WRITE_TO_DISK


class InvalidURLError(LayerSyncError, ValueError):
    """Malformed server URL, or http:// to a non-loopback host without opting in. Code 8 ``INVALID_URL``."""

    default_code = _ffi.LAYERSYNC_ERROR_INVALID_URL


class UnmanagedDocumentError(LayerSyncError):
    """The document is not managed by this client. Code 10 ``UNMANAGED_DOCUMENT``."""

    default_code = _ffi.LAYERSYNC_ERROR_UNMANAGED_DOCUMENT


class NoSuchAnnotationError(LayerSyncError, LookupError):
    """No annotation with that id in the layer. Code 11 ``NO_SUCH_ANNOTATION``."""

    default_code = _ffi.LAYERSYNC_ERROR_NO_SUCH_ANNOTATION


class UnmanagedAnnotationError(LayerSyncError):
    """The annotation is not managed by this layer. Code 12 ``UNMANAGED_ANNOTATION``."""

    default_code = _ffi.LAYERSYNC_ERROR_UNMANAGED_ANNOTATION


class CouldNotReadFromDiskCacheError(LayerSyncError, OSError):
    """A file of the local store could not be read. Code 13 ``COULD_NOT_READ_FROM_DISK_CACHE``."""

    default_code = _ffi.LAYERSYNC_ERROR_COULD_NOT_READ_FROM_DISK_CACHE


class CouldNotRemoveDiskCacheEntriesError(LayerSyncError, OSError):
    """Local storage could not be removed. Code 14 ``COULD_NOT_REMOVE_DISK_CACHE_ENTRIES``."""

    default_code = _ffi.LAYERSYNC_ERROR_COULD_NOT_REMOVE_DISK_CACHE_ENTRIES


class RequestFailedError(LayerSyncError, ConnectionError):
    """A network request failed (offline, timeout, 5xx); retried automatically. Code 16 ``REQUEST_FAILED``."""

    default_code = _ffi.LAYERSYNC_ERROR_REQUEST_FAILED


class InvalidServerDataError(LayerSyncError):
    """The server answered with data that does not follow the protocol. Code 17 ``INVALID_SERVER_DATA``."""

    default_code = _ffi.LAYERSYNC_ERROR_INVALID_SERVER_DATA


class InvalidRequestError(LayerSyncError):
    """The server rejected the request as malformed (HTTP 400). Code 18 ``INVALID_REQUEST``."""

    default_code = _ffi.LAYERSYNC_ERROR_INVALID_REQUEST


class PayloadLimitExceededError(LayerSyncError):
    """A single change is larger than the server's max_request_bytes. Code 19 ``PAYLOAD_LIMIT_EXCEEDED``."""

    default_code = _ffi.LAYERSYNC_ERROR_PAYLOAD_LIMIT_EXCEEDED


class OldClientError(LayerSyncError):
    """The server needs a newer protocol than this library speaks. Code 21 ``OLD_CLIENT``."""

    default_code = _ffi.LAYERSYNC_ERROR_OLD_CLIENT


class OldServerError(LayerSyncError):
    """This library needs a newer protocol than the server speaks. Code 22 ``OLD_SERVER``."""

    default_code = _ffi.LAYERSYNC_ERROR_OLD_SERVER


class InvalidJWTError(LayerSyncError, ValueError):
    """The JWT is malformed (checked offline: shape and claim types). Code 32 ``INVALID_JWT``."""

    default_code = _ffi.LAYERSYNC_ERROR_INVALID_JWT


class UserIDMismatchError(LayerSyncError, ValueError):
    """The JWT's user_id differs from the one pinned in the local store. Code 33 ``USER_ID_MISMATCH``."""

    default_code = _ffi.LAYERSYNC_ERROR_USER_ID_MISMATCH


class AttachmentNotLoadedError(LayerSyncError):
    """The attachment exists but its bytes are not downloaded yet. Code 40 ``ATTACHMENT_NOT_LOADED``."""

    default_code = _ffi.LAYERSYNC_ERROR_ATTACHMENT_NOT_LOADED


class NoSuchAttachmentError(LayerSyncError, LookupError):
    """No attachment with that id. Code 41 ``NO_SUCH_ATTACHMENT``."""

    default_code = _ffi.LAYERSYNC_ERROR_NO_SUCH_ATTACHMENT


class CouldNotCreateAttachmentError(LayerSyncError, OSError):
    """The attachment could not be stored. Code 42 ``COULD_NOT_CREATE_ATTACHMENT``."""

    default_code = _ffi.LAYERSYNC_ERROR_COULD_NOT_CREATE_ATTACHMENT


class AlreadyAuthenticatingError(LayerSyncError):
    """A reauthentication is already running for the document. Code 66 ``ALREADY_AUTHENTICATING``."""

    default_code = _ffi.LAYERSYNC_ERROR_ALREADY_AUTHENTICATING


class ContentMigrationNeededError(LayerSyncError):
    """The local store needs a content migration first. Code 96 ``CONTENT_MIGRATION_NEEDED``."""

    default_code = _ffi.LAYERSYNC_ERROR_CONTENT_MIGRATION_NEEDED


class PerformingContentMigrationError(LayerSyncError):
    """A content migration is running. Code 97 ``PERFORMING_CONTENT_MIGRATION``."""

    default_code = _ffi.LAYERSYNC_ERROR_PERFORMING_CONTENT_MIGRATION


class InvalidJSONStructureError(LayerSyncError, ValueError):
    """Valid JSON but not a valid Instant JSON record. Code 112 ``INVALID_JSON_STRUCTURE``."""

    default_code = _ffi.LAYERSYNC_ERROR_INVALID_JSON_STRUCTURE


class InvalidCustomDataError(LayerSyncError, ValueError):
    """A record's customData is not a JSON object. Code 113 ``INVALID_CUSTOM_DATA``."""

    default_code = _ffi.LAYERSYNC_ERROR_INVALID_CUSTOM_DATA


class InvalidArgumentError(LayerSyncError, ValueError):
    """NULL where a value is required, invalid UTF-8, or text that is not JSON. Code 1000 ``INVALID_ARGUMENT``."""

    default_code = _ffi.LAYERSYNC_ERROR_INVALID_ARGUMENT


class CancelledError(LayerSyncError):
    """The operation was cancelled. Code 1001 ``CANCELLED``."""

    default_code = _ffi.LAYERSYNC_ERROR_CANCELLED


class StorageLockedError(LayerSyncError):
    """Another process owns this layer's local store. Code 1002 ``STORAGE_LOCKED``."""

    default_code = _ffi.LAYERSYNC_ERROR_STORAGE_LOCKED


class ServerResetError(LayerSyncError):
    """The server's layer epoch changed; local changes were rebased. Code 1003 ``SERVER_RESET``."""

    default_code = _ffi.LAYERSYNC_ERROR_SERVER_RESET


class ConflictError(LayerSyncError):
    """A local change was rejected in favour of the server's (first writer wins). Code 1004 ``CONFLICT``."""

    default_code = _ffi.LAYERSYNC_ERROR_CONFLICT


class NotDownloadedError(LayerSyncError):
    """The document must be downloaded first. Code 1005 ``NOT_DOWNLOADED``."""

    default_code = _ffi.LAYERSYNC_ERROR_NOT_DOWNLOADED


class InvalidStateError(LayerSyncError, RuntimeError):
    """The call is not allowed in the current state. Code 1006 ``INVALID_STATE``."""

    default_code = _ffi.LAYERSYNC_ERROR_INVALID_STATE


class ForbiddenError(LayerSyncError, PermissionError):
    """The JWT is valid, but its ``collaboration_permissions`` do not allow this on this
    record (a local update, delete, comment, fill or group change refused at once, nothing
    queued; a rollback/restore the server answered 403 ``forbidden``). The message says what is
    refused ("may not edit this record"). Not an authentication failure. Code 1007 ``FORBIDDEN``."""

    default_code = _ffi.LAYERSYNC_ERROR_FORBIDDEN


def _exception_classes(namespace: dict[str, Any],
                       exceptions: Mapping[int, tuple[str, str]]) -> dict[int, type[LayerSyncError]]:
    """Code → class from ``exceptions`` (``_ffi.ERROR_EXCEPTIONS``, generated from
    api/layersync.toml: code → (class name, doc)): the class of that name in ``namespace``
    (this module's), or, for a code that has none written there, a plain
    :class:`LayerSyncError` subclass documented with the code's text, added to
    ``namespace`` (so a new code is one entry in the toml).

    Raises:
        ImportError: a class of the table stands for another code, or a class in
            ``namespace`` stands for no code of the table.
    """
    table: dict[int, type[LayerSyncError]] = {}
    for code, (name, doc) in exceptions.items():
        cls = namespace.get(name)
        if cls is None:
            cls = type(name, (LayerSyncError,), {
                "__doc__": f"{doc} Code {code} ``{_ffi.ERROR_CODE_NAMES.get(code, 'UNRECOGNIZED')}``.",
                "__module__": __name__, "default_code": code})
            namespace[name] = cls
        if not (isinstance(cls, type) and issubclass(cls, LayerSyncError)) or cls.default_code != code:
            raise ImportError(f"layersync.errors.{name} is not the LayerSyncError of code {code}")
        table[code] = cls
    stray = {c for c in namespace.values() if isinstance(c, type) and issubclass(c, LayerSyncError)
             and c is not LayerSyncError} - set(table.values())
    if stray:
        raise ImportError(f"exception classes without an error code: {sorted(c.__name__ for c in stray)}")
    return table


#: Code → exception class, for every code these bindings know (generated table, see above).
ERROR_CLASSES: dict[int, type[LayerSyncError]] = _exception_classes(globals(), _ffi.ERROR_EXCEPTIONS)

__all__ += [cls.__name__ for cls in ERROR_CLASSES.values()]


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
