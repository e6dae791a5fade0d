"""Admin API: documents (upload, list, info, delete), in Document Engine's shapes
(``upload-document``, ``list-documents``, ``fetch-document-info``, ``delete-document``)."""

from __future__ import annotations

import io
from typing import Literal

import pikepdf
from fastapi import Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from layersync_server import openapi_bodies as bodies
from layersync_server.context import (AppContext, check_document_id, layer_from_segment,
                                      no_document, read_body, replayed_request)
from layersync_server.errors import ApiError, invalid_request, not_found
from layersync_server.errors_http import error_responses
from layersync_server.ids import is_valid_document_id, new_ulid
from layersync_server.openapi_bodies import ok
from layersync_server.pdf.import_ import PdfImportError, import_pdf
from layersync_server.routes.admin.common import (DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, admin_router,
                                                  cursor_offset, find_document, page_window, require_admin)
from layersync_server.routes.admin.xfdf import upload_attachment_records
from layersync_server.storage import DocumentExists, DocumentInfo, NewDocument


router = admin_router()

def document_properties(info: DocumentInfo) -> dict:
    """A document as Document Engine's ``DocumentProperties`` (``title``,
    ``sourcePdfSha256``, ``byteSize``, ``createdAt``, ``passwordProtected``, ``storage``)
    plus LayerSync's ``document_id``, ``pageCount`` and ``annotationCount`` (the records
    the upload imported into the default layer)."""
    return {"document_id": info.document_id, "title": info.title, "sourcePdfSha256": info.sha256,
            "byteSize": info.size_bytes, "createdAt": info.created_at, "passwordProtected": False,
            "storage": {"type": "built-in"}, "pageCount": info.page_count,
            "annotationCount": info.annotation_count}


def _document_created(info: DocumentInfo) -> dict:
    """Document Engine's ``DocumentCreated`` (``document_id``, ``errors``,
    ``password_protected``, ``sourcePdfSha256``, ``title``, ``createdAt``) plus the rest of
    :func:`document_properties`."""
    return {**document_properties(info), "errors": [], "password_protected": False}


def _pages(pdf: bytes) -> list[dict]:
    """Document Engine's ``Page`` list: index, label, size in points (after /Rotate),
    rotation and the raw boxes."""
    pages = []
    with pikepdf.open(io.BytesIO(pdf)) as parsed:
        for index, page in enumerate(parsed.pages):
            media = [float(v) for v in page.mediabox]
            crop = [float(v) for v in page.cropbox]
            rotation = int(page.obj.get("/Rotate", 0)) % 360
            rotation = rotation if rotation in (0, 90, 180, 270) else 0
            width, height = abs(crop[2] - crop[0]), abs(crop[3] - crop[1])
            if rotation in (90, 270):
                width, height = height, width
            pages.append({"pageIndex": index, "pageLabel": str(index + 1), "width": width,
                          "height": height, "rotation": rotation,
                          "rawPdfBoxes": {"mediaBox": media, "cropBox": crop}})
    return pages


async def document_info_json(ctx: AppContext, info: DocumentInfo, layer: str | None = None) -> dict:
    """Document Engine's ``DocumentInfo`` (``pageCount``, ``pages``, ``title``,
    ``permissions``) plus :func:`document_properties` and LayerSync's ``layers`` (names;
    with ``layer``, that layer's ``{name, epoch, revision, recordCount}`` as ``layer``)."""
    pdf = await run_in_threadpool(ctx.storage.read_pdf, info.document_id)
    pages = await run_in_threadpool(_pages, pdf)
    layers = await run_in_threadpool(ctx.storage.list_layers, info.document_id)
    out = {**document_properties(info), "pageCount": max(1, info.page_count), "pages": pages,
           "hasXFA": False, "permissions": dict(_PERMISSIONS),
           "layers": [state.name for state in layers]}
    if layer is not None:
        state = next((s for s in layers if s.name == layer), None)
        if state is None:
            raise not_found(f"no layer {layer!r} in document {info.document_id!r}")
        count = await run_in_threadpool(ctx.storage.count_records, info.document_id, layer)
        out["layer"] = {"name": state.name, "epoch": state.epoch, "revision": state.revision,
                        "recordCount": count}
    return out


#: ``DocumentInfo.permissions``: LayerSync stores unencrypted PDFs and lets the admin do all.
_PERMISSIONS = {"annotationAndForms": True, "assemble": True, "extract": True,
                "extractAccessibility": True, "fillForms": True, "modification": True,
                "print": True, "printHighQuality": True}


async def _upload_parts(request: Request, max_bytes: int) -> tuple[bytes, dict[str, str], bytes | None]:
    """The PDF bytes, form fields and ``attachment`` part (XFDF or Instant JSON, or None) of a raw
    ``application/pdf`` or multipart body (Document Engine's ``CreateDocumentUpload``)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        body = await read_body(request, max_bytes)  # bounded, chunked uploads included
        form = await replayed_request(request, body).form()
        upload = form.get("file")
        if upload is None:
            raise invalid_request("multipart body needs a 'file' part with the PDF")
        fields = {k: v for k, v in form.items() if isinstance(v, str) and k not in ("file", "attachment")}
        if not fields.get("title") and getattr(upload, "filename", None):
            fields["filename"] = upload.filename
        attachment = form.get("attachment")
        if attachment is not None:
            attachment = await _part_bytes(attachment)
        return await _part_bytes(upload), fields, attachment
    if content_type in ("application/pdf", "application/octet-stream", ""):
        return await read_body(request, max_bytes), {}, None
    raise invalid_request(f"unsupported Content-Type {content_type!r}; "
                          "send application/pdf or multipart/form-data with a 'file' part")


async def _part_bytes(part) -> bytes:
    """A multipart part's bytes. A part sent without a filename (as generated clients
    send ``format: binary``) reaches us as Starlette's text: UTF-8 when the bytes were
    valid UTF-8, else Latin-1 (``_user_safe_decode``); both are undone here."""
    if not isinstance(part, str):
        return await part.read()
    try:
        raw = part.encode("latin-1")
    except UnicodeEncodeError:
        return part.encode("utf-8")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw  # not UTF-8, so Starlette decoded it as Latin-1
    return part.encode("utf-8")


def _flag(fields: dict[str, str], name: str) -> bool:
    value = fields.get(name, "false").strip().lower()
    if value not in ("true", "false", "1", "0"):
        raise invalid_request(f"{name} must be true or false")
    return value in ("true", "1")


@router.post("/documents", summary="Upload a PDF (raw body or multipart 'file' part)",
             responses={**ok(bodies.DocumentOut, "the stored document"), **error_responses(409)},
             openapi_extra=bodies.UPLOAD)
async def upload_document(request: Request, document_id: str | None = Query(None),
                          title: str | None = Query(None),
                          ctx: AppContext = Depends(require_admin)) -> dict:
    """Store a PDF and import its annotations into the default layer (Document Engine's
    ``upload-document``): ``{"data": DocumentCreated}``.

    Multipart fields as Document Engine's ``CreateDocumentUpload``: ``file``,
    ``document_id``, ``title``, ``attachment`` (Instant JSON whose annotations replace the
    PDF's own), ``overwrite_existing_document`` (replace a document stored under the id).
    Re-uploading the same bytes under the same id answers the existing document;
    other bytes under a taken id → 409 ``document_exists``. A PDF that cannot be read
    → 400 ``invalid_request`` and nothing is stored.
    """
    data, fields, attachment = await _upload_parts(request, ctx.settings.max_upload_bytes)
    document_id = document_id or fields.get("document_id") or new_ulid()
    if not is_valid_document_id(document_id):
        raise invalid_request("document_id must be 1..128 characters without control characters, "
                              "'/' or '\\', and not '.', '..' or '~'")
    overwrite = _flag(fields, "overwrite_existing_document")
    try:
        imported = await run_in_threadpool(import_pdf, data)
    except PdfImportError as exc:
        raise invalid_request(str(exc)) from None
    title = title or fields.get("title") or imported.title or fields.get("filename") or document_id
    records, files = imported.layer_records, imported.attachments or {}
    if attachment is not None:  # XFDF or Instant JSON replacing (or kept over) the PDF's annotations
        records, attached_files = await run_in_threadpool(
            upload_attachment_records, attachment, data, imported.records,
            _flag(fields, "keep_current_annotations"))
        files = {**files, **attached_files}
        ids = {r["id"] for r in records}  # the outline is no annotation: its bookmarks stay
        records += [b for b in imported.bookmarks or [] if b["id"] not in ids]
    new = NewDocument(document_id, title, data, imported.sha256, imported.page_count, records, files)
    if overwrite:
        await _delete_document(ctx, document_id, missing_ok=True)
    revision = len(records)  # each imported record is one revision of the new layer
    try:
        info = await run_in_threadpool(ctx.storage.create_document, new)
    except DocumentExists:
        info = await run_in_threadpool(ctx.storage.get_document, document_id)
        if info is None or info.sha256 != imported.sha256:
            raise ApiError(409, "document_exists",
                           f"document {document_id!r} exists with different content") from None
        revision = info.annotation_count  # at most its revision (the notifier keeps the highest)
    else:  # a new default layer (new epoch): drop any revision left from a deleted one
        ctx.notifier.forget(document_id, "")
    if info.document_id == document_id:
        await ctx.notifier.published(document_id, "", revision)
    return {"data": _document_created(info)}


_ORDER_KEYS = {"created_at": lambda d: (d.created_at, d.document_id),
               "title": lambda d: ((d.title or "").casefold(), d.created_at, d.document_id)}


@router.get("/documents", summary="List documents (Document Engine's cursor paging and filters)",
            responses=ok(bodies.DocumentListOut, "a page of documents"))
async def list_documents(page_size: int = Query(DEFAULT_PAGE_SIZE, ge=1),
                         cursor: str | None = Query(None, max_length=512),
                         title: str | None = Query(None, max_length=1024),
                         order_by: Literal["title", "created_at"] = Query("created_at"),
                         order_direction: Literal["asc", "desc"] = Query("desc"),
                         count_remaining: bool = Query(False),
                         ctx: AppContext = Depends(require_admin)) -> dict:
    """``{"data": [DocumentProperties...], "document_count", "next_cursor", "prev_cursor"}``
    (with ``count_remaining=true`` also ``prev_document_count``, ``next_document_count``).

    ``title`` keeps documents whose title contains it (case-insensitive); ``page_size``
    above 1000 is answered as 1000; ``document_count`` counts the documents matching the
    filter. A cursor is opaque and valid for the same filter and order."""
    offset = cursor_offset(cursor)
    docs = await run_in_threadpool(ctx.storage.list_documents, 0, None)
    if title:
        wanted = title.casefold()
        docs = [d for d in docs if wanted in (d.title or "").casefold()]
    docs.sort(key=_ORDER_KEYS[order_by], reverse=order_direction == "desc")
    size = min(page_size, MAX_PAGE_SIZE)
    window = page_window(len(docs), offset, size)
    out = {"data": [document_properties(d) for d in docs[offset:offset + size]],
           "document_count": len(docs), "next_cursor": window["next_cursor"],
           "prev_cursor": window["prev_cursor"]}
    if count_remaining:
        out["prev_document_count"] = window["prev_document_count"]
        out["next_document_count"] = window["next_document_count"]
    return out


@router.get("/documents/{document_id}", summary="Document info (LayerSync; as document_info)",
            responses=ok(bodies.DocumentInfoOut, "the document and its layers"))
@router.get("/documents/{document_id}/document_info", summary="Document info",
            responses=ok(bodies.DocumentInfoOut, "the document and its layers"))
async def document_info(document_id: str, ctx: AppContext = Depends(require_admin)) -> dict:
    """``{"data": DocumentInfo}``: page count and sizes, title, permissions, plus the
    document's properties and its layers' names."""
    info = await find_document(ctx, document_id)
    return {"data": await document_info_json(ctx, info)}


@router.get("/documents/{document_id}/layers/{layer}/document_info", summary="Layer document info",
            responses=ok(bodies.DocumentInfoOut, "the document, with the layer's counters"))
async def layer_document_info(document_id: str, layer: str,
                              ctx: AppContext = Depends(require_admin)) -> dict:
    """As ``document_info``, with ``layer``: ``{name, epoch, revision, recordCount}``.
    404 when the layer does not exist."""
    info = await find_document(ctx, document_id)
    return {"data": await document_info_json(ctx, info, layer_from_segment(layer))}


async def _delete_document(ctx: AppContext, document_id: str, missing_ok: bool = False) -> None:
    check_document_id(document_id)
    layers = await run_in_threadpool(ctx.storage.list_layers, document_id)
    if not await run_in_threadpool(ctx.storage.delete_document, document_id):
        if missing_ok:
            return
        raise no_document(document_id)
    for layer in layers:
        ctx.notifier.forget(document_id, layer.name)


@router.delete("/documents/{document_id}", summary="Delete a document with all its layers",
               responses=ok(bodies.DocumentDeletedOut, "deleted"))
async def delete_document(document_id: str, ctx: AppContext = Depends(require_admin)) -> dict:
    """Deletes the PDF, layers, records, history and attachments. 404 when unknown.
    Long-polls on its layers are woken (they then get 404), and their revisions
    forgotten (a document re-uploaded under the id counts again from 0)."""
    await _delete_document(ctx, document_id)
    return {"data": {"document_id": document_id, "deleted": True}}
