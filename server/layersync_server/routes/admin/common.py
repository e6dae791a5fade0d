"""What the admin routes share: the admin-token dependency, the router they are made
with, the checks of documents, JSON bodies and annotations, and the response shaping
Nutrient Document Engine's OpenAPI description (``../shared/vendor/document-engine/
document-engine-api.yml``) gives every route: the ``{"data": ...}`` envelope, the
annotation record (``AnnotationRecord``), the bulk answer (``AnnotationMultipleResponse``),
422 for a body the spec refuses, cursor paging and the ``instant.json`` multipart part.

The names below are used by every admin module (and by the routes added beside them);
keep them stable."""

from __future__ import annotations

import base64
import binascii

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from layersync_server.auth import check_admin_token
from layersync_server.changes import normalize_content
from layersync_server.context import (AppContext, check_document_id, client_address, get_context,
                                      no_document, read_body, replayed_request)
from layersync_server.errors import ApiError, invalid_request
from layersync_server.errors_http import COMMON_ERROR_RESPONSES
from layersync_server.ids import is_valid_record_id, new_ulid
from layersync_server.json_http import WireJSONResponse, WireRoute
from layersync_server.record_kinds import FORM_FIELD_VALUE_TYPE
from layersync_formats.record_schema import record_schema_problem
from layersync_server.storage import DocumentInfo, StoredRecord
from layersync_server.storage.base import KEEP_GROUP
from layersync_server.wire_json import MAX_JSON_DEPTH, dumps, json_problem, parse_json
from layersync_formats.values import page_past_last


def require_admin(request: Request, ctx: AppContext = Depends(get_context)) -> AppContext:
    """Dependency: check the admin token (a wrong one counts against the client address:
    429 past the limit, :class:`~layersync_server.auth.AdminSecretGuard`), return the app
    context."""
    check_admin_token(request.headers.get("authorization"), ctx.settings.admin_token,
                      ctx.admin_guard, client_address(request))
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


async def required_json_body(request: Request, ctx: AppContext, required: str) -> object:
    """The JSON body of an admin write whose body the spec requires. No body at all
    lacks the required fields and is answered 422 (as Document Engine answers a missing
    field; ``required`` names them in the message); a body that is not JSON is 400
    ``invalid_request``, as on every route."""
    body = await read_body(request, ctx.settings.max_request_bytes)
    if not body.strip():
        raise unprocessable(f"the body is required: {required}")
    return await json_body(replayed_request(request, body), ctx)


#: Instant JSON keys whose entries are records of their own (record_kinds); a
#: ``formFieldValues`` entry sets its field's widgets' ``value`` instead.
RECORD_KEYS = ("annotations", "comments", "bookmarks", "formFields")


def instant_json_entries(body: object, page_count: int | None = None) -> list[dict]:
    """The records of an Instant JSON document (its :data:`RECORD_KEYS` entries, and the
    ``formFieldValues`` entries with an ``id``: stored ``pspdfkit/form-field-value``
    records as ``document.json`` gives them), validated and with ids. 400 for a record on
    a page past the document's ``page_count`` (:func:`~layersync_formats.values.page_past_last`,
    the rule XFDF applies too)."""
    if not isinstance(body, dict):
        raise invalid_request("Instant JSON must be an object")
    entries = []
    for key in RECORD_KEYS:
        items = body.get(key, [])
        if not isinstance(items, list):
            raise invalid_request(f"Instant JSON '{key}' must be an array")
        for item in items:
            entries.append(annotation_content(item, None))
    values = body.get("formFieldValues", [])
    for item in values if isinstance(values, list) else []:
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            entries.append(annotation_content({"v": 1, **item, "type": FORM_FIELD_VALUE_TYPE}, None))
    for entry in entries:
        if problem := page_past_last(entry, page_count):
            raise invalid_request(f"annotation {entry['id'][:128]!r}: {problem}")
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


def annotation_write(item: object, record_id: str | None = None,
                     where: str = "body") -> tuple[dict, str | None, object]:
    """Record content, ``user_id`` and ``group`` of one Document Engine annotation write
    (``AnnotationCreateSingle`` / ``AnnotationUpdate`` or an item of the bulk forms:
    ``{"content": {...}, "id"?, "user_id"?, "group"?}``); ``record_id`` (a path id) wins
    over the body's. The group is :data:`~layersync_server.storage.base.KEEP_GROUP` when
    the body has none (an update keeps the record's, a create makes it null). 422 ``invalid_request`` when ``content`` is missing or is not an
    annotation the record schema accepts, or ``user_id`` / ``group`` is not a string or
    null; nothing is stored then. ``where`` names the item in messages (``$.annotations[2]``)."""
    if not isinstance(item, dict):
        raise unprocessable(f"{where} must be a JSON object")
    if not isinstance(item.get("content"), dict):
        raise unprocessable(f"{where}: 'content' (the annotation) is required and must be an object")
    if not isinstance(item["content"].get("type"), str) and not isinstance(
            item["content"].get("content"), dict):
        # Document Engine's AnnotationContent is one of its annotation types: each has a type
        raise unprocessable(f"{where}: 'content.type' (the annotation's type) is required")
    for key in ("user_id", "group"):
        if item.get(key) is not None and not isinstance(item[key], str):
            raise unprocessable(f"{where}: '{key}' must be a string or null")
    body_id = item.get("id")
    if record_id is None and body_id is not None and not isinstance(body_id, str):
        raise unprocessable(f"{where}: 'id' must be a string")
    try:
        content = annotation_content(item["content"], record_id or body_id)
    except ApiError as exc:
        raise as_unprocessable(ApiError(exc.status, exc.code, f"{where}: {exc.message}",
                                        exc.details)) from None
    if record_id is not None:
        content["id"] = record_id
    return content, item.get("user_id"), item["group"] if "group" in item else KEEP_GROUP


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


# --- response shaping (Document Engine's shapes) -------------------------------------

def data_envelope(payload: object) -> dict:
    """``{"data": payload}``: the envelope of most Document Engine answers."""
    return {"data": payload}


def record_authors(record: StoredRecord | None) -> dict:
    """``createdBy``, ``updatedBy`` and ``group`` of a record as Document Engine's
    ``AnnotationRecord`` gives them (``User`` and ``Group`` are string or null).

    The one place these are filled, from storage: the users are the ``user_id`` the
    writes carried (the JWT's on the sync API, the body's here; null when none did), the
    group the record's (docs/protocol.md, "Collaboration permissions")."""
    if record is None:
        return {"createdBy": None, "updatedBy": None, "group": None}
    return {"createdBy": record.created_by, "updatedBy": record.updated_by, "group": record.group}


def annotation_record(record: StoredRecord) -> dict:
    """A live record as Document Engine's ``AnnotationRecord``: ``{id, content, createdBy,
    updatedBy, group}``, plus LayerSync's own ``revision``, ``createdAt``, ``updatedAt``
    (the spec allows more fields)."""
    return {"id": record.id, "content": record.content, **record_authors(record),
            "revision": record.revision, "createdAt": record.created_at,
            "updatedAt": record.updated_at}


def bulk_result(records: list[StoredRecord], failing_paths: list[dict] | None = None) -> dict:
    """Document Engine's ``AnnotationMultipleResponse`` for a bulk create or update:
    ``{"data": [{id, content, user_id, group, updatedBy}], "result", "status": 200,
    "failing_paths"}``; ``result`` is ``success``, ``partial_failure`` or ``failure``."""
    failing = failing_paths or []
    result = "failure" if failing and not records else "partial_failure" if failing else "success"
    data = []
    for record in records:
        authors = record_authors(record)
        data.append({"id": record.id, "content": record.content, "user_id": authors["updatedBy"],
                     "group": authors["group"], "updatedBy": authors["updatedBy"],
                     "revision": record.revision})
    return {"data": data, "result": result, "status": 200, "failing_paths": failing}


def unprocessable(message: str, **details) -> ApiError:
    """422 ``invalid_request``: Document Engine's answer to a body that lacks a required
    field or holds an invalid one (annotation, comment and form-field writes); nothing is
    stored. Same error envelope as every other error."""
    return ApiError(422, "invalid_request", message, details)


def as_unprocessable(exc: ApiError) -> ApiError:
    """``exc`` (a 400 ``invalid_request`` from a shared check) answered as 422."""
    if exc.status == 400 and exc.code == "invalid_request":
        return ApiError(422, exc.code, exc.message, exc.details, exc.headers)
    return exc


# --- paging (Document Engine's ``page_size`` and ``cursor``) ---------------------------

#: ``page_size`` when the request gives none (Document Engine's default).
DEFAULT_PAGE_SIZE = 10
#: Largest ``page_size`` answered (a larger one is clamped, not refused).
MAX_PAGE_SIZE = 1000


def encode_cursor(position: object) -> str:
    """An opaque, URL-safe cursor (base64url of JSON) for a position in a listing."""
    return base64.urlsafe_b64encode(dumps(position).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> object:
    """The position a cursor of :func:`encode_cursor` holds; None without a cursor.
    400 ``invalid_request`` when it is not one of ours."""
    if cursor is None or cursor == "":
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return parse_json(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError, ApiError):
        raise invalid_request("cursor is not a cursor this server gave") from None


def page_window(total: int, offset: int, page_size: int) -> dict:
    """Cursors of the page of ``page_size`` items at ``offset`` in ``total``:
    ``next_cursor`` / ``prev_cursor`` (null at either end), ``prev_document_count`` and
    ``next_document_count`` (items before and after the page)."""
    page_size = max(1, min(page_size, MAX_PAGE_SIZE))
    end = min(total, offset + page_size)
    return {"next_cursor": encode_cursor({"offset": end}) if end < total else None,
            "prev_cursor": encode_cursor({"offset": max(0, offset - page_size)}) if offset > 0 else None,
            "prev_document_count": min(offset, total), "next_document_count": max(0, total - end)}


def cursor_offset(cursor: str | None) -> int:
    """The offset a paging cursor of :func:`page_window` holds (0 without one)."""
    position = decode_cursor(cursor)
    if position is None:
        return 0
    offset = position.get("offset") if isinstance(position, dict) else None
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise invalid_request("cursor is not a cursor this server gave")
    return offset


# --- request bodies: JSON or multipart with an ``instant.json`` part -------------------

#: The multipart part Document Engine reads Instant JSON from.
INSTANT_JSON_PART = "instant.json"


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def form_body(request: Request, ctx: AppContext):
    """The multipart form of ``request`` (read once, bounded by ``max_request_bytes``),
    or None when the body is not ``multipart/form-data``."""
    if _media_type(request) != "multipart/form-data":
        return None
    body = await read_body(request, ctx.settings.max_request_bytes)
    try:
        return await replayed_request(request, body).form()
    except Exception as exc:  # malformed multipart (python-multipart raises its own types)
        raise invalid_request(f"malformed multipart body: {exc}") from None


async def json_part(form, name: str) -> object:
    """A multipart part (file or field) parsed as JSON, checked as :func:`json_body`
    checks a body; None when the form has no such part."""
    part = form.get(name)
    if part is None:
        return None
    raw = part.encode() if isinstance(part, str) else await part.read()
    value = parse_json(raw)
    problem = json_problem(value, None)
    if problem:
        raise invalid_request(f"{name}: {problem}")
    return value


async def instant_json_body(request: Request, ctx: AppContext) -> object:
    """The Instant JSON of a request: the ``instant.json`` part of a multipart body (as
    Document Engine sends it) or the whole body as ``application/json``; no body at all
    is an empty document (``{}``). 400 when a multipart body has no ``instant.json`` part."""
    form = await form_body(request, ctx)
    if form is None:
        if request.headers.get("content-length") == "0" or (
                "content-length" not in request.headers and "transfer-encoding" not in request.headers):
            return {}  # no body: nothing to apply (Document Engine's body is optional)
        return await json_body(request, ctx)
    value = await json_part(form, INSTANT_JSON_PART)
    if value is None:
        raise invalid_request(f"multipart body needs an '{INSTANT_JSON_PART}' part")
    return value
