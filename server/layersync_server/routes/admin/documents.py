"""Admin API: documents (upload, list, info, delete)."""

from __future__ import annotations

from fastapi import Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from layersync_server import openapi_bodies as bodies
from layersync_server.context import (AppContext, check_document_id, no_document, read_body,
                                      replayed_request)
from layersync_server.errors import ApiError, invalid_request
from layersync_server.errors_http import error_responses
from layersync_server.ids import is_valid_document_id, new_ulid
from layersync_server.openapi_bodies import ok
from layersync_server.pdf.import_ import PdfImportError, import_pdf
from layersync_server.routes.admin.common import admin_router, find_document, require_admin
from layersync_server.routes.admin.xfdf import is_true, upload_attachment_records
from layersync_server.storage import DocumentExists, DocumentInfo, NewDocument


router = admin_router()

def _document_json(info: DocumentInfo) -> dict:
    return {"document_id": info.document_id, "title": info.title, "sha256": info.sha256,
            "page_count": info.page_count, "annotation_count": info.annotation_count,
            "size_bytes": info.size_bytes, "created_at": info.created_at}


async def _upload_parts(request: Request, max_bytes: int) -> tuple[bytes, dict[str, str], bytes | None]:
    """The PDF bytes, form fields and ``attachment`` part (XFDF or Instant JSON, or None)
    of a raw ``application/pdf`` or multipart body."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        body = await read_body(request, max_bytes)  # bounded, chunked uploads included
        form = await replayed_request(request, body).form()
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise invalid_request("multipart body needs a 'file' part with the PDF")
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not fields.get("title") and getattr(upload, "filename", None):
            fields["filename"] = upload.filename
        attachment = form.get("attachment")
        if isinstance(attachment, str):
            attachment = fields.pop("attachment").encode("utf-8")
        elif attachment is not None:
            attachment = await attachment.read()
        return await upload.read(), fields, attachment
    if content_type in ("application/pdf", "application/octet-stream", ""):
        return await read_body(request, max_bytes), {}, None
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
    data, fields, attachment = await _upload_parts(request, ctx.settings.max_upload_bytes)
    document_id = document_id or fields.get("document_id") or new_ulid()
    if not is_valid_document_id(document_id):
        raise invalid_request("document_id must be 1..128 characters without control characters, "
                              "'/' or '\\', and not '.', '..' or '~'")
    try:
        imported = await run_in_threadpool(import_pdf, data)
    except PdfImportError as exc:
        raise invalid_request(str(exc)) from None
    title = title or fields.get("title") or imported.title or fields.get("filename") or document_id
    records, files = imported.records, imported.attachments or {}
    if attachment is not None:  # XFDF or Instant JSON replacing (or kept over) the PDF's annotations
        records, attached_files = await run_in_threadpool(
            upload_attachment_records, attachment, data, records, is_true(fields.get("keep_current_annotations")))
        files = {**files, **attached_files}
    new = NewDocument(document_id, title, data, imported.sha256, imported.page_count, records, files)
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


@router.get("/documents/{document_id}", summary="Document info",
            responses=ok(bodies.DocumentInfoOut, "the document and its layers"))
@router.get("/documents/{document_id}/document_info", summary="Document info (Document Engine path)",
            responses=ok(bodies.DocumentInfoOut, "the document and its layers"))
async def document_info(document_id: str, ctx: AppContext = Depends(require_admin)) -> dict:
    """The document's metadata and its layers."""
    info = await find_document(ctx, document_id)
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
