"""The one error envelope of every non-2xx response, and the handlers that produce it.

Shape (docs/protocol.md, "Error envelope")::

    {"error": {"code": "conflict", "message": "human readable", "details": {}}}

Routes raise :class:`ApiError`; FastAPI validation errors, unknown routes (404),
wrong methods (405), a storage ``LayerDeleted`` (404 ``not_found``) and unexpected
exceptions (500 ``internal``) are translated by the handlers installed with
:func:`install_error_handlers`.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

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


class ErrorBody(BaseModel):
    """The inside of the envelope."""

    code: str = Field(description="stable machine-readable code, e.g. invalid_request")
    message: str = Field(description="human-readable explanation")
    details: dict = Field(default_factory=dict, description="code-specific details")


class ErrorEnvelope(BaseModel):
    """``{"error": {"code", "message", "details"}}`` — the body of every non-2xx response."""

    error: ErrorBody


def error_responses(*statuses: int) -> dict:
    """OpenAPI ``responses`` entries documenting the envelope for ``statuses``."""
    descriptions = {400: "invalid request", 401: "no credentials", 403: "access denied",
                    404: "not found", 409: "conflict", 413: "payload too large",
                    416: "range not satisfiable", 426: "client protocol too old",
                    500: "internal server error"}
    return {status: {"model": ErrorEnvelope, "description": descriptions.get(status, "error")}
            for status in statuses}


#: Errors any route may answer.
COMMON_ERROR_RESPONSES = error_responses(400, 401, 403, 404, 413, 426)


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


def not_found(message: str, **details) -> ApiError:
    """404 ``not_found``."""
    return ApiError(404, "not_found", message, details)


def access_denied(message: str) -> ApiError:
    """403 ``access_denied``."""
    return ApiError(403, "access_denied", message)


def unauthorized(message: str) -> ApiError:
    """401 ``unauthorized``."""
    return ApiError(401, "unauthorized", message)


def payload_too_large(limit_bytes: int) -> ApiError:
    """413 ``payload_too_large`` with the limit in ``details.max_request_bytes``."""
    return ApiError(413, "payload_too_large",
                    f"request body is larger than {limit_bytes} bytes",
                    {"max_request_bytes": limit_bytes})


def error_response(status: int, code: str, message: str, details: dict | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    """Build the envelope response."""
    from layersync_server.json_http import WireJSONResponse  # (wire_json imports this module)
    return WireJSONResponse({"error": {"code": code, "message": message, "details": details or {}}},
                            status_code=status, headers=headers)


def api_error_response(exc: ApiError) -> Response:
    """The envelope response of a raised :class:`ApiError`."""
    return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)


def unexpected_error_response(exc: Exception) -> Response:
    """500 ``internal`` for an exception no route expected (logged here, with its
    traceback; the message says nothing of it)."""
    log.error("unhandled error", exc_info=exc)
    return error_response(500, "internal", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    """Route every error path of ``app`` through :func:`error_response`."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError):
        return api_error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException):
        code = _CODE_FOR_STATUS.get(exc.status_code, "internal" if exc.status_code >= 500 else "error")
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return error_response(exc.status_code, code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError):
        problems = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))}
                    for e in exc.errors()]
        first = problems[0] if problems else {"loc": [], "msg": "invalid"}
        message = f"{'.'.join(first['loc'])}: {first['msg']}"
        return error_response(400, "invalid_request", message, {"errors": problems})

    from layersync_server.storage.base import LayerDeleted

    @app.exception_handler(LayerDeleted)
    async def _layer_deleted(_: Request, exc: LayerDeleted):
        # a storage read of a deleted layer in a route that does not say so itself
        # (the client routes answer it through context.deleted_layer)
        return error_response(404, "not_found", f"layer {exc.args[0]!r} was deleted")

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception):
        return unexpected_error_response(exc)
