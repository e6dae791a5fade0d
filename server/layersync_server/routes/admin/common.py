"""What the admin routes share: the admin-token dependency, the router they are made
with, and the checks of documents, JSON bodies and annotations."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from layersync_server.auth import check_admin_token
from layersync_server.changes import normalize_content
from layersync_server.context import (AppContext, check_document_id, get_context, no_document,
                                      read_body)
from layersync_server.errors import invalid_request
from layersync_server.errors_http import COMMON_ERROR_RESPONSES
from layersync_server.ids import is_valid_record_id, new_ulid
from layersync_server.json_http import WireJSONResponse, WireRoute
from layersync_server.record_schema import record_schema_problem
from layersync_server.storage import DocumentInfo
from layersync_server.wire_json import MAX_JSON_DEPTH, json_problem, parse_json


def require_admin(request: Request, ctx: AppContext = Depends(get_context)) -> AppContext:
    """Dependency: check the admin token, return the app context."""
    check_admin_token(request.headers.get("authorization"), ctx.settings.admin_token)
    return ctx


async def find_document(ctx: AppContext, document_id: str) -> DocumentInfo:
    check_document_id(document_id)
    info = await run_in_threadpool(ctx.storage.get_document, document_id)
    if info is None:
        raise no_document(document_id)
    return info


async def json_body(request: Request, ctx: AppContext) -> object:
    """The parsed body; 400 when it is not JSON or holds a bad number or lone surrogate
    anywhere (record content is further held to ``MAX_JSON_DEPTH``)."""
    body = parse_json(await read_body(request, ctx.settings.max_request_bytes))
    problem = json_problem(body, None)
    if problem:
        raise invalid_request(problem)
    return body


def instant_json_entries(body: object) -> list[dict]:
    """Annotations and comments of an Instant JSON document, validated and with ids."""
    if not isinstance(body, dict):
        raise invalid_request("Instant JSON must be an object")
    entries = []
    for key in ("annotations", "comments"):
        items = body.get(key, [])
        if not isinstance(items, list):
            raise invalid_request(f"Instant JSON '{key}' must be an array")
        for item in items:
            entries.append(annotation_content(item, None))
    return entries


def annotation_content(item: object, record_id: str | None) -> dict:
    """An Instant JSON annotation (or ``{"id"?, "content": {...}}``) as record content."""
    if isinstance(item, dict) and isinstance(item.get("content"), dict) and "type" not in item:
        record_id = record_id or item.get("id")
        item = item["content"]
    if not isinstance(item, dict):
        raise invalid_request("annotation must be a JSON object")
    record_id = record_id or item.get("id") or item.get("name") or new_ulid()
    check_annotation_id(record_id)
    problem = json_problem(item, MAX_JSON_DEPTH) or record_schema_problem(item)  # + Instant JSON fields
    if problem:
        raise invalid_request(f"annotation: {problem}")
    return normalize_content(record_id, item)


def check_annotation_id(record_id: object) -> None:
    if not is_valid_record_id(record_id):
        raise invalid_request("annotation id must be 1..128 characters without control characters "
                              "or lone surrogates")


DOC = "/documents/{document_id}"


LAYER = "/documents/{document_id}/layers/{layer}"


def admin_router() -> APIRouter:
    """A router of admin routes: under ``/api``, tagged ``admin``, documenting the common
    errors, answering through :class:`WireJSONResponse`."""
    return APIRouter(prefix="/api", tags=["admin"], responses=COMMON_ERROR_RESPONSES,
                     route_class=WireRoute, default_response_class=WireJSONResponse)
