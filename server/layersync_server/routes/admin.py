"""Admin API under ``/api`` (server to server), shaped like Nutrient Document Engine.

Auth: ``Authorization: Token token="<secret>"`` (401 missing, 403 wrong). Responses
wrap their payload in ``{"data": ...}``; errors use the common envelope.
"""

from __future__ import annotations

import hashlib

from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from layersync_server.auth import check_admin_token
from layersync_server.context import AppContext, get_context, layer_from_segment, read_body
from layersync_server.errors import ApiError, invalid_request, not_found
from layersync_server.ids import is_valid_record_id, new_ulid
from layersync_server.pdf_export import export_pdf
from layersync_server.pdf_import import PdfImportError, import_pdf
from layersync_server.storage import DocumentExists, DocumentInfo, NewDocument, StoredRecord


def require_admin(request: Request, ctx: AppContext = Depends(get_context)) -> AppContext:
    """Dependency: check the admin token, return the app context."""
    check_admin_token(request.headers.get("authorization"), ctx.settings.admin_token)
    return ctx


router = APIRouter(prefix="/api")
INSTANT_JSON_FORMAT = "https://pspdfkit.com/instant-json/v1"


def _document_json(info: DocumentInfo) -> dict:
    return {"document_id": info.document_id, "title": info.title, "sha256": info.sha256,
            "page_count": info.page_count, "annotation_count": info.annotation_count,
            "size_bytes": info.size_bytes, "created_at": info.created_at}


async def _upload_parts(request: Request, max_bytes: int) -> tuple[bytes, dict[str, str]]:
    """The PDF bytes and form fields of a raw ``application/pdf`` or multipart body."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        declared = int(request.headers.get("content-length") or 0)
        if declared > max_bytes:
            raise ApiError(413, "payload_too_large", f"upload is larger than {max_bytes} bytes",
                           {"max_upload_bytes": max_bytes})
        form = await request.form()
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


@router.post("/documents")
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
    if not is_valid_record_id(document_id) or "/" in document_id or document_id == "~":
        raise invalid_request("document_id must be 1..128 characters, no '/' or control characters")
    try:
        imported = await run_in_threadpool(import_pdf, data)
    except PdfImportError as exc:
        raise invalid_request(str(exc)) from None
    title = title or fields.get("title") or imported.title or fields.get("filename") or document_id
    new = NewDocument(document_id, title, data, imported.sha256, imported.page_count, imported.records)
    try:
        info = await run_in_threadpool(ctx.storage.create_document, new)
    except DocumentExists:
        info = await run_in_threadpool(ctx.storage.get_document, document_id)
        if info is None or info.sha256 != imported.sha256:
            raise ApiError(409, "document_exists",
                           f"document {document_id!r} exists with different content") from None
    return {"data": _document_json(info)}


@router.get("/documents")
async def list_documents(ctx: AppContext = Depends(require_admin)) -> dict:
    """All documents, oldest first."""
    docs = await run_in_threadpool(ctx.storage.list_documents)
    return {"data": [_document_json(d) for d in docs]}


async def _document(ctx: AppContext, document_id: str) -> DocumentInfo:
    info = await run_in_threadpool(ctx.storage.get_document, document_id)
    if info is None:
        raise not_found(f"no document {document_id!r}")
    return info


async def _live_records(ctx: AppContext, document_id: str, layer: str) -> list[StoredRecord]:
    await _document(ctx, document_id)
    return await run_in_threadpool(lambda: list(ctx.storage.iter_records(document_id, layer)))


def _annotation_json(record: StoredRecord) -> dict:
    return {"id": record.id, "content": record.content, "revision": record.revision,
            "createdBy": record.created_by, "updatedBy": record.updated_by,
            "createdAt": record.created_at, "updatedAt": record.updated_at}


async def _annotations(ctx: AppContext, document_id: str, layer: str) -> dict:
    records = await _live_records(ctx, document_id, layer)
    return {"data": {"annotations": [_annotation_json(r) for r in records], "truncated": False}}


@router.get("/documents/{document_id}/annotations")
async def default_layer_annotations(document_id: str, ctx: AppContext = Depends(require_admin)) -> dict:
    """Live records of the default layer."""
    return await _annotations(ctx, document_id, "")


@router.get("/documents/{document_id}/layers/{layer:path}/annotations")
async def layer_annotations(document_id: str, layer: str,
                            ctx: AppContext = Depends(require_admin)) -> dict:
    """Live records of ``layer`` (``~`` = default layer)."""
    return await _annotations(ctx, document_id, layer_from_segment(layer))


def _layer_query(layer: str) -> str:
    return "" if layer == "~" else layer


@router.get("/documents/{document_id}/document.json")
async def instant_json(document_id: str, layer: str = Query(""),
                       ctx: AppContext = Depends(require_admin)) -> dict:
    """Instant JSON export: annotations, and ``pspdfkit/comment`` records as comments."""
    records = await _live_records(ctx, document_id, _layer_query(layer))
    contents = [r.content for r in records]
    return {"format": INSTANT_JSON_FORMAT,
            "annotations": [c for c in contents if c.get("type") != "pspdfkit/comment"],
            "comments": [c for c in contents if c.get("type") == "pspdfkit/comment"]}


@router.get("/documents/{document_id}/pdf")
async def document_pdf(document_id: str, layer: str = Query(""),
                       ctx: AppContext = Depends(require_admin)) -> Response:
    """The PDF with ``layer``'s live records written in as annotations."""
    records = await _live_records(ctx, document_id, _layer_query(layer))
    original = await run_in_threadpool(ctx.storage.read_pdf, document_id)
    result = await run_in_threadpool(export_pdf, original, [r.content for r in records])
    return Response(result.pdf, media_type="application/pdf", headers={
        "ETag": f'"{hashlib.sha256(result.pdf).hexdigest()}"',
        "LayerSync-Export": f"kept={result.kept}; written={result.written}; "
                            f"removed={result.removed}; skipped={len(result.skipped)}"})
