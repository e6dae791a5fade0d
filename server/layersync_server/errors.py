"""The one error envelope of every non-2xx response: the error type, its codes and the
envelope's shape, as plain Python (nothing here knows the web framework;
:mod:`layersync_server.errors_http` holds the handlers, the responses and the OpenAPI
models built on them).

Shape (docs/protocol.md, "Error envelope")::

    {"error": {"code": "conflict", "message": "human readable", "details": {}}}

Rules and routes raise :class:`ApiError`; FastAPI validation errors, unknown routes
(404), wrong methods (405), a storage ``LayerDeleted`` (404 ``not_found``) and
unexpected exceptions (500 ``internal``) are translated by the handlers of :func:`layersync_server.errors_http.install_error_handlers`, with
:func:`code_for_status` and :func:`invalid_fields`.
"""

from __future__ import annotations

from typing import Iterable

#: HTTP status → default error code, for errors not raised as ApiError.
_CODE_FOR_STATUS = {
    400: "invalid_request",
    401: "unauthorized",
    403: "access_denied",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    426: "old_client",
}


def code_for_status(status: int) -> str:
    """The error code of an error answered with ``status`` that was not raised as
    :class:`ApiError` (a framework 404/405, an ``HTTPException``): ``internal`` for an
    unlisted 5xx, ``error`` for any other unlisted status."""
    return _CODE_FOR_STATUS.get(status, "internal" if status >= 500 else "error")


def error_envelope(code: str, message: str, details: dict | None = None) -> dict:
    """The body of a non-2xx response: ``{"error": {"code", "message", "details"}}``."""
    return {"error": {"code": code, "message": message, "details": details or {}}}


class ApiError(Exception):
    """An error answered with the envelope. ``details`` must be JSON-serialisable."""

    def __init__(self, status: int, code: str, message: str, details: dict | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers


def invalid_request(message: str, **details) -> ApiError:
    """400 ``invalid_request``."""
    return ApiError(400, "invalid_request", message, details)


def invalid_fields(errors: Iterable[dict]) -> ApiError:
    """400 ``invalid_request`` for request fields that failed validation, the one answer
    of the FastAPI routes' parameter and body validation and of the hot routes' query.

    ``errors`` are pydantic's (``ValidationError.errors()``): each a dict with ``loc``
    (a sequence of names and indexes) and ``msg``. ``details.errors`` lists one
    ``{"loc": [str, ...], "msg": str}`` per error; the message is the first one's
    ``"loc.joined: msg"``."""
    problems = [{"loc": [str(part) for part in error.get("loc", ())],
                 "msg": str(error.get("msg", ""))} for error in errors]
    first = problems[0] if problems else {"loc": [], "msg": "invalid"}
    return invalid_request(f"{'.'.join(first['loc'])}: {first['msg']}", errors=problems)


def not_found(message: str, **details) -> ApiError:
    """404 ``not_found``."""
    return ApiError(404, "not_found", message, details)


def access_denied(message: str) -> ApiError:
    """403 ``access_denied``."""
    return ApiError(403, "access_denied", message)


def forbidden(message: str) -> ApiError:
    """403 ``forbidden``: the token is valid but its collaboration permissions do not
    allow this action on this record (docs/protocol.md, "Collaboration permissions")."""
    return ApiError(403, "forbidden", message)


def unauthorized(message: str, scheme: str = "Bearer") -> ApiError:
    """401 ``unauthorized`` with the ``WWW-Authenticate`` challenge RFC 9110 §15.5.2
    requires on a 401: ``scheme`` is the one the route takes (``Bearer`` for a sync JWT,
    ``Token`` for the admin API, Document Engine's ``ApiAuthToken``)."""
    return ApiError(401, "unauthorized", message,
                    headers={"WWW-Authenticate": f'{scheme} realm="layersync"'})


def payload_too_large(limit_bytes: int) -> ApiError:
    """413 ``payload_too_large`` with the limit in ``details.max_request_bytes``."""
    return ApiError(413, "payload_too_large",
                    f"request body is larger than {limit_bytes} bytes",
                    {"max_request_bytes": limit_bytes})
