"""The web framework's side of :mod:`layersync_server.errors`: the envelope as a
response, the exception handlers that route every error path of the app through it,
and the OpenAPI models and ``responses`` entries that document it."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from layersync_server.errors import ApiError, code_for_status, error_envelope, invalid_fields
from layersync_server.json_http import WireJSONResponse
from layersync_server.storage.base import LayerDeleted

log = logging.getLogger(__name__)


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
                    416: "range not satisfiable",
                    422: "body refused (a required field is missing or invalid)", 426: "client protocol too old",
                    500: "internal server error"}
    return {status: {"model": ErrorEnvelope, "description": descriptions.get(status, "error")}
            for status in statuses}


#: Errors any route may answer.
COMMON_ERROR_RESPONSES = error_responses(400, 401, 403, 404, 413, 426)


def error_response(status: int, code: str, message: str, details: dict | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    """Build the envelope response."""
    return WireJSONResponse(error_envelope(code, message, details), status_code=status,
                            headers=headers)


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
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return error_response(exc.status_code, code_for_status(exc.status_code), message,
                              headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError):
        return api_error_response(invalid_fields(exc.errors()))

    @app.exception_handler(LayerDeleted)
    async def _layer_deleted(_: Request, exc: LayerDeleted):
        # a storage read of a deleted layer in a route that does not say so itself
        # (the client routes answer it through context.deleted_layer)
        return error_response(404, "not_found", f"layer {exc.args[0]!r} was deleted")

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception):
        return unexpected_error_response(exc)
