"""Admin API: a layer with Instant JSON applied, as a downloaded PDF or as a new
document, and copies of documents, as Document Engine's routes define them.

- ``POST .../pdf_with_instant_json`` (default layer or ``.../layers/{layerName}``),
  multipart with an ``instant.json`` part (or the Instant JSON as the body): the PDF of
  the layer's live records with the Instant JSON applied on top (its ``annotations``,
  ``comments``, ``bookmarks``, ``formFields``, ``formFieldValues`` and ``attachments``:
  what ``apply_instant_json`` reads), written by the same export as
  ``GET .../pdf``. Nothing is stored.
- ``POST .../copy_with_instant_json``: the same PDF stored as a new document whose
  default layer holds those records exactly (ids, comments, ``customData``; what the PDF
  cannot carry is not lost). A JSON body is ignored (the layer is copied as is), as the
  spec says. Answers ``{documentId, title, createdAt, sourcePdfSha256, errors: [],
  password_protected: false}`` (no envelope, as the spec has it).
- ``POST /api/copy_document`` body ``{"document_id", "new_document_id"?}`` (``documentId``
  is read too: the spec names both): the same PDF under a new id with every layer's live
  records and the attachments they use → ``{"data": {"document_id"}}``; 409
  ``document_exists`` when ``new_document_id`` is taken.

The copies are independent documents: their layers have new epochs and revisions, and
writes to either side never reach the other.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from fastapi import Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from layersync_server.context import AppContext, check_document_id, layer_from_segment
from layersync_server.errors import ApiError, invalid_request
from layersync_server.errors_http import error_responses
from layersync_server.ids import is_valid_document_id, new_ulid
from layersync_server.openapi_bodies import json_body as body_doc
from layersync_server.openapi_bodies import media
from layersync_server.pdf.export import export_pdf
from layersync_server.routes.admin import exports
from layersync_server.routes.admin.acroform import with_field_values
from layersync_server.routes.admin.common import (DOC, INSTANT_JSON_PART, LAYER, admin_router,
                                                  data_envelope, find_document, form_body,
                                                  instant_json_body, instant_json_entries,
                                                  json_body, json_part, require_admin)
from layersync_server.storage import DocumentExists, DocumentInfo, NewDocument

router = admin_router()

def _instant_json_attachments(body: dict) -> dict[str, tuple[str, bytes]]:
    """Instant JSON ``attachments`` (``{sha256: {"binary": base64, "contentType"}}``) as
    ``{sha256: (content type, bytes)}``; 400 when one is not base64 of bytes with that hash."""
    found = {}
    items = body.get("attachments") or {}
    if not isinstance(items, dict):
        raise invalid_request("Instant JSON 'attachments' must be an object")
    for sha256, item in items.items():
        try:
            data = base64.b64decode(item["binary"], validate=True)
        except (TypeError, KeyError, binascii.Error):
            raise invalid_request(f"attachment {sha256!r}: 'binary' must be base64") from None
        if hashlib.sha256(data).hexdigest() != str(sha256).lower():
            raise invalid_request(f"attachment {sha256!r}: the bytes do not have that SHA-256")
        found[str(sha256).lower()] = (str(item.get("contentType") or "application/octet-stream"), data)
    return found


async def _merged(ctx: AppContext, document_id: str, layer: str, body: dict | None):
    page_count = (await find_document(ctx, document_id)).page_count
    """The layer's live record contents with ``body`` (Instant JSON) applied on top, and
    the attachments (``{sha256: (content type, bytes)}``) they use."""
    records = await run_in_threadpool(lambda: list(ctx.storage.iter_records(document_id, layer)))
    contents = {r.id: r.content for r in records}
    added = {}
    if body is not None:
        for entry in instant_json_entries(body, page_count):
            contents[entry["id"]] = entry
        for widget in with_field_values(contents.values(), exports._form_field_values(body))[0]:
            contents[widget["id"]] = widget
        added = _instant_json_attachments(body)
    merged = list(contents.values())
    stored = await run_in_threadpool(exports.stored_attachments, ctx, document_id, merged, added)
    return merged, {**added, **stored}


async def _exported(ctx: AppContext, document_id: str, contents: list[dict], attachments: dict) -> bytes:
    original = await run_in_threadpool(ctx.storage.read_pdf, document_id)
    result = await run_in_threadpool(export_pdf, original, contents, exports.attachment_bytes(attachments))
    return result.pdf


async def _multipart_instant_json(request: Request, ctx: AppContext) -> dict | None:
    """The ``instant.json`` part of a multipart body; None for another body."""
    form = await form_body(request, ctx)
    if form is None:
        return None
    value = await json_part(form, INSTANT_JSON_PART)
    if value is None:
        raise invalid_request(f"multipart body needs an '{INSTANT_JSON_PART}' part")
    return value


async def _pdf_with_instant_json(request: Request, ctx: AppContext, document_id: str, layer: str) -> Response:
    await find_document(ctx, document_id)
    body = await instant_json_body(request, ctx)
    contents, attachments = await _merged(ctx, document_id, layer, body)
    pdf = await _exported(ctx, document_id, contents, attachments)
    return Response(pdf, media_type="application/pdf",
                    headers={"ETag": f'"{hashlib.sha256(pdf).hexdigest()}"'})


async def _store_copy(ctx: AppContext, new: NewDocument, attachments: dict) -> DocumentInfo:
    try:
        info = await run_in_threadpool(ctx.storage.create_document, new)
    except DocumentExists:
        raise ApiError(409, "document_exists", f"document {new.document_id!r} exists") from None
    ctx.notifier.forget(new.document_id, "")  # a new default layer: no revision left from before

    def put():
        for sha256, (content_type, data) in attachments.items():
            ctx.storage.put_attachment(new.document_id, sha256, content_type, data)
    await run_in_threadpool(put)
    return info


async def _copy_with_instant_json(request: Request, ctx: AppContext, document_id: str, layer: str) -> dict:
    source = await find_document(ctx, document_id)
    body = await _multipart_instant_json(request, ctx)  # a JSON body is ignored (the spec)
    contents, attachments = await _merged(ctx, document_id, layer, body)
    pdf = await _exported(ctx, document_id, contents, attachments)
    sha256 = hashlib.sha256(pdf).hexdigest()
    new = NewDocument(new_ulid(), source.title, pdf, sha256, source.page_count, contents)
    info = await _store_copy(ctx, new, attachments)
    return {"documentId": info.document_id, "title": info.title, "createdAt": info.created_at,
            "sourcePdfSha256": info.sha256, "errors": [], "password_protected": False}


_COPIED = {200: media("application/json", "the new document", {
    "type": "object", "required": ["createdAt", "documentId", "errors", "password_protected",
                                   "sourcePdfSha256", "title"],
    "properties": {"createdAt": {"type": "string"}, "documentId": {"type": "string"},
                   "errors": {"type": "array"}, "password_protected": {"type": "boolean"},
                   "sourcePdfSha256": {"type": "string"}, "title": {"type": ["string", "null"]}}})}
_INSTANT_JSON_MULTIPART = {"requestBody": {"content": {
    "multipart/form-data": {"schema": {"type": "object", "properties": {
        INSTANT_JSON_PART: {"type": "object", "description": "Instant JSON"}}}},
    "application/json": {"schema": {"type": ["object", "null"]}}}}}
_PDF = {200: media("application/pdf", "the PDF with the layer and the Instant JSON written in")}


@router.post(DOC + "/pdf_with_instant_json", summary="The PDF of the default layer with Instant JSON applied",
             response_class=Response, responses=_PDF, openapi_extra=_INSTANT_JSON_MULTIPART)
async def pdf_with_instant_json(document_id: str, request: Request,
                                ctx: AppContext = Depends(require_admin)) -> Response:
    return await _pdf_with_instant_json(request, ctx, document_id, "")


@router.post(LAYER + "/pdf_with_instant_json", summary="The PDF of a layer with Instant JSON applied",
             response_class=Response, responses=_PDF, openapi_extra=_INSTANT_JSON_MULTIPART)
async def layer_pdf_with_instant_json(document_id: str, layer: str, request: Request,
                                      ctx: AppContext = Depends(require_admin)) -> Response:
    return await _pdf_with_instant_json(request, ctx, document_id, layer_from_segment(layer))


@router.post(DOC + "/copy_with_instant_json", summary="Copy the default layer, with Instant JSON applied, "
             "into a new document", responses={**_COPIED, **error_responses(409)},
             openapi_extra=_INSTANT_JSON_MULTIPART)
async def copy_with_instant_json(document_id: str, request: Request,
                                 ctx: AppContext = Depends(require_admin)) -> dict:
    return await _copy_with_instant_json(request, ctx, document_id, "")


@router.post(LAYER + "/copy_with_instant_json", summary="Copy a layer, with Instant JSON applied, "
             "into a new document", responses={**_COPIED, **error_responses(409)},
             openapi_extra=_INSTANT_JSON_MULTIPART)
async def layer_copy_with_instant_json(document_id: str, layer: str, request: Request,
                                       ctx: AppContext = Depends(require_admin)) -> dict:
    return await _copy_with_instant_json(request, ctx, document_id, layer_from_segment(layer))


@router.post("/copy_document", summary="Copy a document with all its layers",
             responses={200: media("application/json", "the new document's id", {
                 "type": "object", "required": ["data"], "properties": {"data": {
                     "type": "object", "required": ["document_id"],
                     "properties": {"document_id": {"type": "string"}}}}}), **error_responses(409)},
             openapi_extra=body_doc({"type": "object", "properties": {
                 "document_id": {"type": "string"}, "documentId": {"type": "string"},
                 "new_document_id": {"type": "string"}}}))
async def copy_document(request: Request, ctx: AppContext = Depends(require_admin)) -> dict:
    body = await json_body(request, ctx)
    if not isinstance(body, dict):
        raise invalid_request("body must be an object with document_id")
    source_id = body.get("document_id") or body.get("documentId")
    if not isinstance(source_id, str):
        raise invalid_request("document_id is required")
    check_document_id(source_id)
    new_id = body.get("new_document_id") or new_ulid()
    if not isinstance(new_id, str) or not is_valid_document_id(new_id):
        raise invalid_request("new_document_id must be 1..128 characters without control characters, "
                              "'/' or '\\', and not '.', '..' or '~'")
    source = await find_document(ctx, source_id)
    layers = await run_in_threadpool(ctx.storage.list_layers, source_id)
    copied, attachments = {}, {}
    for layer in layers:
        contents, used = await _merged(ctx, source_id, layer.name, None)
        copied[layer.name] = contents
        attachments.update(used)
    pdf = await run_in_threadpool(ctx.storage.read_pdf, source_id)
    new = NewDocument(new_id, source.title, pdf, source.sha256, source.page_count, copied.pop("", []))
    await _store_copy(ctx, new, attachments)
    for name, contents in copied.items():
        await run_in_threadpool(ctx.storage.create_layer, new_id, name, contents)
        ctx.notifier.forget(new_id, name)
    return data_envelope({"document_id": new_id})

