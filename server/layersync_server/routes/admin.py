"""Admin API under ``/api`` (server to server), shaped like Nutrient Document Engine.

Auth: ``Authorization: Token token="<secret>"`` (401 missing, 403 wrong). Responses
wrap their payload in ``{"data": ...}``; errors use the common envelope.
"""

from __future__ import annotations

import hashlib

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from layersync_server import openapi_bodies as bodies
from layersync_server.auth import check_admin_token
from layersync_server.changes import delete_record, normalize_content
from layersync_server.context import (AppContext, check_document_id, commit, get_context,
                                      layer_from_segment, no_document, read_body)
from layersync_server.errors import COMMON_ERROR_RESPONSES, ApiError, error_responses, invalid_request, not_found
from layersync_server.openapi_bodies import media, ok
from layersync_server.ids import is_valid_document_id, is_valid_layer_name, is_valid_record_id, new_ulid
from layersync_server.pdf_export import export_pdf
from layersync_server.pdf_import import PdfImportError, import_pdf
from layersync_server.record_schema import record_schema_problem
from layersync_server.wire_json import (MAX_JSON_DEPTH, WireJSONResponse, WireRoute,
                                        dumps, json_problem, parse_json)
from layersync_server.storage import (DocumentExists, DocumentInfo, LayerExists, LayerState,
                                      NewDocument, StoredRecord)


def require_admin(request: Request, ctx: AppContext = Depends(get_context)) -> AppContext:
    """Dependency: check the admin token, return the app context."""
    check_admin_token(request.headers.get("authorization"), ctx.settings.admin_token)
    return ctx


router = APIRouter(prefix="/api", tags=["admin"], responses=COMMON_ERROR_RESPONSES,
                   route_class=WireRoute, default_response_class=WireJSONResponse)
INSTANT_JSON_FORMAT = "https://pspdfkit.com/instant-json/v1"


def _document_json(info: DocumentInfo) -> dict:
    return {"document_id": info.document_id, "title": info.title, "sha256": info.sha256,
            "page_count": info.page_count, "annotation_count": info.annotation_count,
            "size_bytes": info.size_bytes, "created_at": info.created_at}


async def _upload_parts(request: Request, max_bytes: int) -> tuple[bytes, dict[str, str]]:
    """The PDF bytes and form fields of a raw ``application/pdf`` or multipart body."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        body = await read_body(request, max_bytes)  # bounded, chunked uploads included
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        form = await Request(request.scope, replay).form()
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise invalid_request("multipart body needs a 'file' part with the PDF")
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not fields.get("title") and getattr(upload, "filename", None):
            fields["filename"] = upload.filename
        return await upload.read(), fields
    if content_type in ("application/pdf", "application/octet-stream", ""):
        return await read_body(request, max_bytes), {}
    raise invalid_request(f"unsupported Content-Type {content_type!r}; "
                          "send application/pdf or multipart/form-data with a 'file' part")


@router.post("/documents", summary="Upload a PDF (raw body or multipart 'file' part)",
             responses={**ok(bodies.DocumentOut, "the stored document"), **error_responses(409)},
             openapi_extra=bodies.UPLOAD)
async def upload_document(request: Request, document_id: str | None = Query(None),
                          title: str | None = Query(None),
                          ctx: AppContext = Depends(require_admin)) -> dict:
    """Store a PDF and import its annotations into the default layer.

    Re-uploading the same bytes under the same id answers the existing document;
    other bytes under a taken id → 409 ``document_exists``. A PDF that cannot be read
    → 400 ``invalid_request`` and nothing is stored.
    """
    data, fields = await _upload_parts(request, ctx.settings.max_upload_bytes)
    document_id = document_id or fields.get("document_id") or new_ulid()
    if not is_valid_document_id(document_id):
        raise invalid_request("document_id must be 1..128 characters without control characters, "
                              "'/' or '\\', and not '.', '..' or '~'")
    try:
        imported = await run_in_threadpool(import_pdf, data)
    except PdfImportError as exc:
        raise invalid_request(str(exc)) from None
    title = title or fields.get("title") or imported.title or fields.get("filename") or document_id
    new = NewDocument(document_id, title, data, imported.sha256, imported.page_count, imported.records,
                      imported.attachments or {})
    try:
        info = await run_in_threadpool(ctx.storage.create_document, new)
    except DocumentExists:
        info = await run_in_threadpool(ctx.storage.get_document, document_id)
        if info is None or info.sha256 != imported.sha256:
            raise ApiError(409, "document_exists",
                           f"document {document_id!r} exists with different content") from None
    else:  # a new default layer (new epoch): drop any revision left from a deleted one
        ctx.notifier.forget(document_id, "")
    if info.document_id == document_id:
        await ctx.notifier.published(document_id, "", info.annotation_count)
    return {"data": _document_json(info)}


#: Largest ``annotations`` list in a JSON answer; ``Accept: application/x-ndjson`` streams all.
MAX_LISTED_ANNOTATIONS = 1000


# -- documents --------------------------------------------------------------------------------

@router.get("/documents", summary="List documents, oldest first, paged",
            responses=ok(bodies.DocumentListOut, "a page of documents"))
async def list_documents(page: int = Query(1, ge=1, le=1_000_000),
                         per_page: int = Query(100, ge=1, le=1000),
                         ctx: AppContext = Depends(require_admin)) -> dict:
    """``{"data": [document...], "meta": {"page", "per_page", "total"}}``."""
    docs = await run_in_threadpool(ctx.storage.list_documents, (page - 1) * per_page, per_page)
    total = await run_in_threadpool(ctx.storage.count_documents)
    return {"data": [_document_json(d) for d in docs],
            "meta": {"page": page, "per_page": per_page, "total": total}}


async def _document(ctx: AppContext, document_id: str) -> DocumentInfo:
    check_document_id(document_id)
    info = await run_in_threadpool(ctx.storage.get_document, document_id)
    if info is None:
        raise no_document(document_id)
    return info


@router.get("/documents/{document_id}", summary="Document info",
            responses=ok(bodies.DocumentInfoOut, "the document and its layers"))
@router.get("/documents/{document_id}/document_info", summary="Document info (Document Engine path)",
            responses=ok(bodies.DocumentInfoOut, "the document and its layers"))
async def document_info(document_id: str, ctx: AppContext = Depends(require_admin)) -> dict:
    """The document's metadata and its layers."""
    info = await _document(ctx, document_id)
    layers = await run_in_threadpool(ctx.storage.list_layers, document_id)
    return {"data": {**_document_json(info), "layers": [layer.name for layer in layers]}}


@router.delete("/documents/{document_id}", summary="Delete a document with all its layers",
               responses=ok(bodies.DocumentDeletedOut, "deleted"))
async def delete_document(document_id: str, ctx: AppContext = Depends(require_admin)) -> dict:
    """Deletes the PDF, layers, records, history and attachments. 404 when unknown.
    Long-polls on its layers are woken (they then get 404), and their revisions
    forgotten (a document re-uploaded under the id counts again from 0)."""
    check_document_id(document_id)
    layers = await run_in_threadpool(ctx.storage.list_layers, document_id)
    if not await run_in_threadpool(ctx.storage.delete_document, document_id):
        raise no_document(document_id)
    for layer in layers:
        ctx.notifier.forget(document_id, layer.name)
    return {"data": {"document_id": document_id, "deleted": True}}


# -- layers -----------------------------------------------------------------------------------

def _layer_json(state: LayerState, record_count: int | None = None) -> dict:
    out = {"name": state.name, "epoch": state.epoch, "revision": state.revision}
    if record_count is not None:
        out["record_count"] = record_count
    return out


@router.get("/documents/{document_id}/layers", summary="List layers",
            responses=ok(bodies.LayerListOut, "the layers"))
async def list_layers(document_id: str, ctx: AppContext = Depends(require_admin)) -> dict:
    """``{"data": [{"name", "epoch", "revision", "record_count"}]}``; the default layer is ``""``."""
    await _document(ctx, document_id)

    def read():
        return [_layer_json(s, ctx.storage.count_records(document_id, s.name))
                for s in ctx.storage.list_layers(document_id)]
    return {"data": await run_in_threadpool(read)}


async def _json_body(request: Request, ctx: AppContext) -> object:
    """The parsed body; 400 when it is not JSON or holds a bad number or lone surrogate
    anywhere (record content is further held to ``MAX_JSON_DEPTH``)."""
    body = parse_json(await read_body(request, ctx.settings.max_request_bytes))
    problem = json_problem(body, None)
    if problem:
        raise invalid_request(problem)
    return body


def _instant_json_entries(body: object) -> list[dict]:
    """Annotations and comments of an Instant JSON document, validated and with ids."""
    if not isinstance(body, dict):
        raise invalid_request("Instant JSON must be an object")
    entries = []
    for key in ("annotations", "comments"):
        items = body.get(key, [])
        if not isinstance(items, list):
            raise invalid_request(f"Instant JSON '{key}' must be an array")
        for item in items:
            entries.append(_annotation_content(item, None))
    return entries


def _annotation_content(item: object, record_id: str | None) -> dict:
    """An Instant JSON annotation (or ``{"id"?, "content": {...}}``) as record content."""
    if isinstance(item, dict) and isinstance(item.get("content"), dict) and "type" not in item:
        record_id = record_id or item.get("id")
        item = item["content"]
    if not isinstance(item, dict):
        raise invalid_request("annotation must be a JSON object")
    record_id = record_id or item.get("id") or item.get("name") or new_ulid()
    _check_annotation_id(record_id)
    problem = json_problem(item, MAX_JSON_DEPTH) or record_schema_problem(item)  # + Instant JSON fields
    if problem:
        raise invalid_request(f"annotation: {problem}")
    return normalize_content(record_id, item)


def _check_annotation_id(record_id: object) -> None:
    if not is_valid_record_id(record_id):
        raise invalid_request("annotation id must be 1..128 characters without control characters "
                              "or lone surrogates")


@router.post("/documents/{document_id}/layers", summary="Create a layer",
             responses={**ok(bodies.LayerOut, "the new layer"), **error_responses(409)},
             openapi_extra=bodies.CREATE_LAYER)
async def create_layer(document_id: str, request: Request,
                       ctx: AppContext = Depends(require_admin)) -> dict:
    """Body ``{"name": "review", "source_layer_name": "other"?, "instant_json": {...}?}``.

    Without ``source_layer_name`` the layer starts from the base layer (the PDF's own
    annotations, same ids as the import); with it, from a copy of that layer's live
    records. ``instant_json`` annotations are then applied on top (same id replaces).
    409 ``layer_exists`` when the name is taken.
    """
    info = await _document(ctx, document_id)
    body = await _json_body(request, ctx)
    if not isinstance(body, dict):
        raise invalid_request("body must be a JSON object")
    name, source = body.get("name"), body.get("source_layer_name")
    if not isinstance(name, str) or name == "" or not is_valid_layer_name(name):
        raise invalid_request("name must be 1..128 characters without control characters, "
                              "'/' or '\\\\', and not '.', '..' or '~'")
    if source is not None and (not isinstance(source, str) or not is_valid_layer_name(source)):
        raise invalid_request("source_layer_name must be a layer name")
    extra = _instant_json_entries(body["instant_json"]) if body.get("instant_json") is not None else []
    if source is None:
        pdf = await run_in_threadpool(ctx.storage.read_pdf, document_id)
        imported = await run_in_threadpool(import_pdf, pdf)
        records = imported.records
    else:
        if await run_in_threadpool(ctx.storage.get_layer, document_id, source) is None:
            raise not_found(f"no layer {source!r} in document {info.document_id!r}")
        records = [r.content for r in
                   await run_in_threadpool(lambda: list(ctx.storage.iter_records(document_id, source)))]
    by_id = {c["id"]: c for c in records}
    for content in extra:
        by_id[content["id"]] = content
    try:
        state = await run_in_threadpool(ctx.storage.create_layer, document_id, name,
                                        list(by_id.values()), body.get("user_id"))
    except LayerExists:
        raise ApiError(409, "layer_exists", f"layer {name!r} exists") from None
    ctx.notifier.forget(document_id, name)  # a new epoch: no revision of a deleted one counts
    await ctx.notifier.published(document_id, name, state.revision)
    return {"data": _layer_json(state, len(by_id))}


@router.delete("/documents/{document_id}/layers/{layer}", summary="Delete a layer",
               responses=ok(bodies.LayerDeletedOut, "deleted"))
async def delete_layer(document_id: str, layer: str, ctx: AppContext = Depends(require_admin)) -> dict:
    """Deletes the layer's records and history; re-creating it gives a new epoch, so
    clients re-download. 404 when it does not exist."""
    name = layer_from_segment(layer)
    await _document(ctx, document_id)
    state = await run_in_threadpool(ctx.storage.get_layer, document_id, name)
    if state is None or not await run_in_threadpool(ctx.storage.delete_layer, document_id, name):
        raise not_found(f"no layer {name!r}")
    # wake its long-polls (they re-read and see the new epoch) and forget its revision:
    # the re-created layer counts from 0 again
    ctx.notifier.forget(document_id, name)
    return {"data": {"name": name, "deleted": True}}


# -- annotations ------------------------------------------------------------------------------

def _annotation_json(record: StoredRecord) -> dict:
    return {"id": record.id, "content": record.content, "revision": record.revision,
            "createdBy": record.created_by, "updatedBy": record.updated_by,
            "createdAt": record.created_at, "updatedAt": record.updated_at}


async def _list_annotations(request: Request, ctx: AppContext, document_id: str, layer: str):
    await _document(ctx, document_id)
    if "application/x-ndjson" in request.headers.get("accept", ""):
        def lines():
            for record in ctx.storage.iter_records(document_id, layer):
                yield dumps(_annotation_json(record)) + "\n"
        return StreamingResponse(lines(), media_type="application/x-ndjson")
    page = await run_in_threadpool(ctx.storage.list_records, document_id, layer, 0,
                                   MAX_LISTED_ANNOTATIONS, False)
    return {"data": {"annotations": [_annotation_json(r) for r in page.records],
                     "truncated": page.has_more}}


async def _create_annotation(request: Request, ctx: AppContext, document_id: str, layer: str):
    await _document(ctx, document_id)
    body = await _json_body(request, ctx)
    content = _annotation_content(body, None)
    user_id = body.get("user_id") if isinstance(body, dict) and isinstance(body.get("user_id"), str) else None

    def work(writer):
        if writer.get_record(content["id"]) is not None:
            raise ApiError(409, "annotation_exists", f"annotation {content['id']!r} exists")
        writer.put_record(content["id"], content, user_id)
        return writer.get_record(content["id"])

    _, record = await commit(ctx, document_id, layer, work)
    return {"data": _annotation_json(record)}


async def _get_annotation(ctx: AppContext, document_id: str, layer: str, annotation_id: str):
    _check_annotation_id(annotation_id)
    await _document(ctx, document_id)
    record = await run_in_threadpool(ctx.storage.get_record, document_id, layer, annotation_id)
    if record is None or record.deleted:
        raise not_found(f"no annotation {annotation_id!r}")
    return {"data": _annotation_json(record)}


async def _update_annotation(request: Request, ctx: AppContext, document_id: str, layer: str,
                             annotation_id: str):
    _check_annotation_id(annotation_id)
    await _document(ctx, document_id)
    body = await _json_body(request, ctx)
    content = _annotation_content(body, annotation_id)
    content["id"] = annotation_id
    user_id = body.get("user_id") if isinstance(body, dict) and isinstance(body.get("user_id"), str) else None

    def work(writer):
        current = writer.get_record(annotation_id)
        if current is None or current.deleted:
            raise not_found(f"no annotation {annotation_id!r}")
        writer.put_record(annotation_id, content, user_id)
        return writer.get_record(annotation_id)

    _, record = await commit(ctx, document_id, layer, work)
    return {"data": _annotation_json(record)}


async def _delete_annotation(ctx: AppContext, document_id: str, layer: str, annotation_id: str):
    _check_annotation_id(annotation_id)
    await _document(ctx, document_id)

    def work(writer):
        current = writer.get_record(annotation_id)
        if current is None or current.deleted:
            raise not_found(f"no annotation {annotation_id!r}")
        return delete_record(writer, annotation_id, None)

    _, revision = await commit(ctx, document_id, layer, work)
    return {"data": {"id": annotation_id, "deleted": True, "revision": revision}}


_DOC = "/documents/{document_id}"
_LAYER = "/documents/{document_id}/layers/{layer}"
_ANNOTATIONS_DOC = ("Live records, at most 1000 with `truncated`; `Accept: application/x-ndjson` "
                    "streams every record, one JSON object per line.")


@router.get(_DOC + "/annotations", summary="List annotations of the default layer",
            description=_ANNOTATIONS_DOC, responses=bodies.ANNOTATION_LIST)
async def default_layer_annotations(document_id: str, request: Request,
                                    ctx: AppContext = Depends(require_admin)):
    return await _list_annotations(request, ctx, document_id, "")


@router.get(_LAYER + "/annotations", summary="List annotations of a layer", description=_ANNOTATIONS_DOC,
            responses=bodies.ANNOTATION_LIST)
async def layer_annotations(document_id: str, layer: str, request: Request,
                            ctx: AppContext = Depends(require_admin)):
    return await _list_annotations(request, ctx, document_id, layer_from_segment(layer))


@router.post(_DOC + "/annotations", summary="Create an annotation in the default layer",
             responses={**ok(bodies.AnnotationOut, "the new annotation"), **error_responses(409)},
             openapi_extra=bodies.ANNOTATION)
async def create_default_annotation(document_id: str, request: Request,
                                    ctx: AppContext = Depends(require_admin)) -> dict:
    """Body: an Instant JSON annotation, or ``{"id"?, "content": {...}, "user_id"?}``.
    409 ``annotation_exists`` when the id is taken (also by a deleted record)."""
    return await _create_annotation(request, ctx, document_id, "")


@router.post(_LAYER + "/annotations", summary="Create an annotation in a layer",
             responses={**ok(bodies.AnnotationOut, "the new annotation"), **error_responses(409)},
             openapi_extra=bodies.ANNOTATION)
async def create_layer_annotation(document_id: str, layer: str, request: Request,
                                  ctx: AppContext = Depends(require_admin)) -> dict:
    """As for the default layer."""
    return await _create_annotation(request, ctx, document_id, layer_from_segment(layer))


@router.get(_DOC + "/annotations/{annotation_id}", summary="Get an annotation of the default layer",
            responses=ok(bodies.AnnotationOut, "the annotation"))
async def get_default_annotation(document_id: str, annotation_id: str,
                                 ctx: AppContext = Depends(require_admin)) -> dict:
    return await _get_annotation(ctx, document_id, "", annotation_id)


@router.get(_LAYER + "/annotations/{annotation_id}", summary="Get an annotation of a layer",
            responses=ok(bodies.AnnotationOut, "the annotation"))
async def get_layer_annotation(document_id: str, layer: str, annotation_id: str,
                               ctx: AppContext = Depends(require_admin)) -> dict:
    return await _get_annotation(ctx, document_id, layer_from_segment(layer), annotation_id)


@router.put(_DOC + "/annotations/{annotation_id}", summary="Replace an annotation of the default layer",
            openapi_extra=bodies.ANNOTATION, responses=ok(bodies.AnnotationOut, "the annotation"))
async def update_default_annotation(document_id: str, annotation_id: str, request: Request,
                                    ctx: AppContext = Depends(require_admin)) -> dict:
    """Body as for create; the path id wins. 404 when missing or deleted."""
    return await _update_annotation(request, ctx, document_id, "", annotation_id)


@router.put(_LAYER + "/annotations/{annotation_id}", summary="Replace an annotation of a layer",
            openapi_extra=bodies.ANNOTATION, responses=ok(bodies.AnnotationOut, "the annotation"))
async def update_layer_annotation(document_id: str, layer: str, annotation_id: str, request: Request,
                                  ctx: AppContext = Depends(require_admin)) -> dict:
    return await _update_annotation(request, ctx, document_id, layer_from_segment(layer), annotation_id)


@router.delete(_DOC + "/annotations/{annotation_id}", summary="Delete an annotation of the default layer",
               responses=ok(bodies.AnnotationDeletedOut, "deleted (with its replies)"))
async def delete_default_annotation(document_id: str, annotation_id: str,
                                    ctx: AppContext = Depends(require_admin)) -> dict:
    """Tombstones it and its replies (``rootId``). 404 when missing or already deleted."""
    return await _delete_annotation(ctx, document_id, "", annotation_id)


@router.delete(_LAYER + "/annotations/{annotation_id}", summary="Delete an annotation of a layer",
               responses=ok(bodies.AnnotationDeletedOut, "deleted (with its replies)"))
async def delete_layer_annotation(document_id: str, layer: str, annotation_id: str,
                                  ctx: AppContext = Depends(require_admin)) -> dict:
    return await _delete_annotation(ctx, document_id, layer_from_segment(layer), annotation_id)


# -- Instant JSON and PDF ---------------------------------------------------------------------

def _layer_query(layer: str) -> str:
    name = "" if layer == "~" else layer
    if not is_valid_layer_name(name):
        raise invalid_request("layer must be a layer name ('' or '~' = default layer)")
    return name


async def _live_records(ctx: AppContext, document_id: str, layer: str) -> list[StoredRecord]:
    await _document(ctx, document_id)
    return await run_in_threadpool(lambda: list(ctx.storage.iter_records(document_id, layer)))


async def _instant_json(ctx: AppContext, document_id: str, layer: str) -> dict:
    contents = [r.content for r in await _live_records(ctx, document_id, layer)]
    values = {}
    for c in contents:
        if c.get("type") == "pspdfkit/widget" and "value" in c and c.get("formFieldName"):
            values.setdefault(c["formFieldName"], c["value"])
    return {"format": INSTANT_JSON_FORMAT,
            "annotations": [c for c in contents if c.get("type") != "pspdfkit/comment"],
            "comments": [c for c in contents if c.get("type") == "pspdfkit/comment"],
            "formFieldValues": [{"v": 1, "type": "pspdfkit/form-field-value", "name": name,
                                 "value": value} for name, value in values.items()]}


@router.get(_DOC + "/document.json", summary="Instant JSON export of a layer (?layer=)",
            responses=ok(bodies.InstantJsonOut, "Instant JSON"))
async def instant_json(document_id: str, layer: str = Query("", max_length=128),
                       ctx: AppContext = Depends(require_admin)) -> dict:
    """``pspdfkit/comment`` records go to ``comments``, the rest to ``annotations``."""
    return await _instant_json(ctx, document_id, _layer_query(layer))


@router.get(_LAYER + "/document.json", summary="Instant JSON export of a layer",
            responses=ok(bodies.InstantJsonOut, "Instant JSON"))
async def layer_instant_json(document_id: str, layer: str, ctx: AppContext = Depends(require_admin)) -> dict:
    return await _instant_json(ctx, document_id, layer_from_segment(layer))


def _form_field_values(body: object) -> dict[str, object]:
    items = body.get("formFieldValues", []) if isinstance(body, dict) else []
    if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("name"), str)
                                              for i in items):
        raise invalid_request("formFieldValues must be an array of {name, value} objects")
    return {i["name"]: i.get("value") for i in items}


async def _apply_instant_json(request: Request, ctx: AppContext, document_id: str, layer: str) -> dict:
    await _document(ctx, document_id)
    body = await _json_body(request, ctx)
    entries = _instant_json_entries(body)
    values = _form_field_values(body)
    if values:  # form field values land on the widget records of those fields
        widgets = await run_in_threadpool(lambda: [r.content for r in ctx.storage.iter_records(document_id, layer)
                                                   if r.content.get("type") == "pspdfkit/widget"])
        entries += [dict(w, value=values[w["formFieldName"]]) for w in widgets
                    if w.get("formFieldName") in values and w.get("value") != values[w["formFieldName"]]]

    def work(writer):
        created = updated = 0
        for content in entries:
            current = writer.get_record(content["id"])
            if current is not None and not current.deleted and current.content == content:
                continue
            writer.put_record(content["id"], content, None)
            if current is None or current.deleted:
                created += 1
            else:
                updated += 1
        return created, updated

    state, (created, updated) = await commit(ctx, document_id, layer, work)
    return {"data": {"created": created, "updated": updated,
                     "unchanged": len(entries) - created - updated, "revision": state.revision}}


@router.post(_DOC + "/apply_instant_json", summary="Apply Instant JSON to the default layer",
             openapi_extra=bodies.INSTANT_JSON,
             responses=ok(bodies.ApplyResultOut, "counts of created, updated, unchanged entries"))
async def apply_instant_json(document_id: str, request: Request,
                             ctx: AppContext = Depends(require_admin)) -> dict:
    """Body: Instant JSON (``annotations``, ``comments``). Each entry creates the record
    or replaces the one with its id; identical entries are left alone."""
    return await _apply_instant_json(request, ctx, document_id, "")


@router.post(_LAYER + "/apply_instant_json", summary="Apply Instant JSON to a layer",
             openapi_extra=bodies.INSTANT_JSON,
             responses=ok(bodies.ApplyResultOut, "counts of created, updated, unchanged entries"))
async def apply_layer_instant_json(document_id: str, layer: str, request: Request,
                                   ctx: AppContext = Depends(require_admin)) -> dict:
    return await _apply_instant_json(request, ctx, document_id, layer_from_segment(layer))


async def _pdf(ctx: AppContext, document_id: str, layer: str) -> Response:
    records = await _live_records(ctx, document_id, layer)
    original = await run_in_threadpool(ctx.storage.read_pdf, document_id)

    def stored_attachments():
        found = {}
        for record in records:
            file_id = record.content.get("fileAttachmentId")
            if isinstance(file_id, str) and file_id not in found:
                attachment = ctx.storage.get_attachment(document_id, file_id)
                if attachment is not None:
                    found[file_id] = attachment.data
        return found

    attachments = await run_in_threadpool(stored_attachments)
    result = await run_in_threadpool(export_pdf, original, [r.content for r in records], attachments)
    return Response(result.pdf, media_type="application/pdf", headers={
        "ETag": f'"{hashlib.sha256(result.pdf).hexdigest()}"',
        "LayerSync-Export": f"kept={result.kept}; written={result.written}; "
                            f"removed={result.removed}; skipped={len(result.skipped)}"})


_PDF_RESPONSES = {200: media("application/pdf", "the PDF (header `LayerSync-Export` says what was "
                                                  "kept, written, removed, skipped)")}


@router.get(_DOC + "/pdf", summary="The PDF with a layer's annotations written in (?layer=)",
            response_class=Response, responses=_PDF_RESPONSES)
async def document_pdf(document_id: str, layer: str = Query("", max_length=128),
                       ctx: AppContext = Depends(require_admin)) -> Response:
    return await _pdf(ctx, document_id, _layer_query(layer))


@router.get(_LAYER + "/pdf", summary="The PDF with a layer's annotations written in",
            response_class=Response, responses=_PDF_RESPONSES)
async def layer_pdf(document_id: str, layer: str, ctx: AppContext = Depends(require_admin)) -> Response:
    return await _pdf(ctx, document_id, layer_from_segment(layer))


# -- tokens -----------------------------------------------------------------------------------

@router.post("/tokens/revoke", summary="Revoke client JWTs by jti",
             openapi_extra=bodies.REVOKE, responses=ok(bodies.RevokedOut, "revoked"))
async def revoke_token(request: Request, ctx: AppContext = Depends(require_admin)) -> dict:
    """Body ``{"jti": "..."}``. Every later request with a JWT carrying that ``jti`` gets
    403, on every server process sharing the database."""
    body = await _json_body(request, ctx)
    jti = body.get("jti") if isinstance(body, dict) else None
    if not isinstance(jti, str) or not 0 < len(jti) <= 256:
        raise invalid_request("jti must be a string of 1..256 characters")
    await run_in_threadpool(ctx.storage.revoke_token, jti)
    return {"data": {"jti": jti, "revoked": True}}
