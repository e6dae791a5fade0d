"""Admin API: a layer as XFDF (ISO 19444-1), export and apply, as Document Engine's
``document.xfdf`` routes; and the XFDF (or Instant JSON) ``attachment`` of an upload.

The codec is :mod:`layersync_formats` (formats/, shared with the Python bindings); the
mapping is in docs/protocol.md ("XFDF and Instant JSON"). XFDF positions are in PDF
user space, so both directions read the document's page boxes (CropBox) from its PDF.

Apply writes through the admin write path of Instant JSON apply
(:func:`~layersync_server.routes.admin.exports.put_entries` in one :func:`commit`):
an XFDF command document (``<add>``, ``<modify>``, ``<delete>``) applies as one set of
layer revisions, or not at all.
"""

from __future__ import annotations

from fastapi import Depends, Query, Request, Response
from layersync_formats import MEDIA_TYPE, XfdfChanges, XfdfError, read_xfdf, write_xfdf
from starlette.concurrency import run_in_threadpool

from layersync_server import openapi_bodies as bodies
from layersync_server.changes import delete_record
from layersync_server.context import AppContext, commit, layer_from_segment, read_body, replayed_request
from layersync_server.errors import ApiError, invalid_request
from layersync_server.errors_http import error_responses
from layersync_server.openapi_bodies import media, ok
from layersync_server.pdf.import_ import PdfImportError, open_pdf
from layersync_server.record_kinds import COMMENT, FORM_FIELD, kind_of
from layersync_server.routes.admin.common import (DOC, LAYER, admin_router, annotation_content,
                                                  find_document, instant_json_entries, require_admin)
from layersync_server.routes.admin.exports import (_layer_query, attachment_bytes,
                                                   layer_instant_json_document, put_entries,
                                                   stored_attachments, widget_value_entries)
from layersync_server.wire_json import json_problem, parse_json


router = admin_router()

#: Content types an XFDF body may be sent with (besides multipart/form-data).
XFDF_CONTENT_TYPES = (MEDIA_TYPE, "application/xml", "text/xml", "application/octet-stream", "")
#: Multipart parts that may hold the XFDF of ``apply_xfdf`` (the first present wins).
XFDF_PARTS = ("xfdf", "file", "document.xfdf", "attachment")


def page_boxes(pdf: bytes) -> list[tuple[float, ...]]:
    """Each page's CropBox (MediaBox when none) ``(left, bottom, right, top)``, the frame
    XFDF coordinates are converted in (as :mod:`layersync_server.pdf.geometry`)."""
    try:
        with open_pdf(pdf) as document:
            return [tuple(float(v) for v in page.cropbox) for page in document.pages]
    except PdfImportError:
        return []  # the stored PDF was read on upload; if it cannot be now, Letter


def read_xfdf_body(data: bytes, pages) -> XfdfChanges:
    """Parse untrusted XFDF; 400 ``invalid_request`` naming the problem (not XML, a DTD or
    entities: external entities and entity expansion are refused, not ``<xfdf>``)."""
    try:
        return read_xfdf(data, pages=pages)
    except XfdfError as exc:
        raise invalid_request(f"XFDF: {exc}") from None


def checked_entries(records: list[dict]) -> list[dict]:
    """XFDF records as record contents, checked like Instant JSON entries (the record schema)."""
    return [annotation_content(record, None) for record in records]


async def layer_xfdf(ctx: AppContext, document_id: str, layer: str) -> Response:
    """The layer's live records (annotations, comments as replies, form field values in
    ``<fields>``, embedded files) as an XFDF document."""
    document = await layer_instant_json_document(ctx, document_id, layer)
    # bookmarks and the stored form field definitions (not those derived from the PDF's
    # AcroForm, which an apply would make records of) travel in <ls:instant-json>
    stored_fields = await run_in_threadpool(lambda: [
        r.content for r in ctx.storage.iter_records(document_id, layer) if kind_of(r.content) == FORM_FIELD])
    records = document["annotations"] + document["comments"] + document["bookmarks"] + stored_fields
    pdf = await run_in_threadpool(ctx.storage.read_pdf, document_id)
    pages = await run_in_threadpool(page_boxes, pdf)
    attachments = attachment_bytes(await run_in_threadpool(stored_attachments, ctx, document_id, records))
    values = {v["name"]: v.get("value") for v in document["formFieldValues"]}
    text = await run_in_threadpool(lambda: write_xfdf(records, pages=pages, form_field_values=values,
                                                      attachments=attachments))
    return Response(text.encode("utf-8"), media_type=MEDIA_TYPE)


_XFDF_RESPONSES = {200: media(MEDIA_TYPE, "the layer as XFDF (ISO 19444-1)")}


@router.get(DOC + "/document.xfdf", summary="XFDF export of a layer (?layer=)",
            response_class=Response, responses=_XFDF_RESPONSES)
async def document_xfdf(document_id: str, layer: str = Query("", max_length=128),
                        ctx: AppContext = Depends(require_admin)) -> Response:
    """Document Engine's ``get-document-xfdf``: the default layer unless ``?layer=``."""
    return await layer_xfdf(ctx, document_id, _layer_query(layer))


@router.get(LAYER + "/document.xfdf", summary="XFDF export of a layer",
            response_class=Response, responses=_XFDF_RESPONSES)
async def layer_document_xfdf(document_id: str, layer: str,
                              ctx: AppContext = Depends(require_admin)) -> Response:
    """Document Engine's ``get-document-layer-xfdf``."""
    return await layer_xfdf(ctx, document_id, layer_from_segment(layer))


async def _xfdf_bytes(request: Request, ctx: AppContext) -> bytes:
    """The XFDF of an apply: the raw body, or a multipart part (:data:`XFDF_PARTS`)."""
    body = await read_body(request, ctx.settings.max_request_bytes)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        form = await replayed_request(request, body).form()
        for name in XFDF_PARTS:
            part = form.get(name)
            if part is not None:
                return part.encode("utf-8") if isinstance(part, str) else await part.read()
        raise invalid_request("multipart body needs an 'xfdf' (or 'file') part with the XFDF")
    if content_type not in XFDF_CONTENT_TYPES:
        raise invalid_request(f"unsupported Content-Type {content_type!r}; send {MEDIA_TYPE} "
                              "or multipart/form-data with an 'xfdf' part")
    return body


def _check_reply_roots(writer, entries: list[dict]) -> None:
    """Every reply (``inreplyto``) needs its thread's root: an annotation of the XFDF or a
    live one of the layer, not a comment; else 409 ``conflict`` (a reply to nothing would be
    a comment no thread shows)."""
    here = {e["id"]: e for e in entries}
    for entry in entries:
        if kind_of(entry) != COMMENT:
            continue
        root_id = entry.get("rootId")
        root = here.get(root_id) if isinstance(root_id, str) else None
        if root is None and isinstance(root_id, str):
            stored = writer.get_record(root_id)
            root = stored.content if stored is not None and not stored.deleted else None
        if not isinstance(root, dict) or kind_of(root) == COMMENT:
            raise ApiError(409, "conflict", f"reply {entry['id']!r}: its inreplyto {root_id!r} is not an "
                                            "annotation of the XFDF or the layer; nothing was applied")


async def apply_xfdf(ctx: AppContext, document_id: str, layer: str, data: bytes) -> dict:
    """Apply XFDF to a layer in one transaction. A plain XFDF creates or replaces each
    annotation by its ``name``; a command document's ``<add>`` must be new (409
    ``annotation_exists``), ``<modify>`` must exist (409 ``conflict``), ``<delete>`` tombstones
    (with replies; a missing id is already deleted). ``<fields>`` set form field values."""
    await find_document(ctx, document_id)
    pdf = await run_in_threadpool(ctx.storage.read_pdf, document_id)
    changes = read_xfdf_body(data, await run_in_threadpool(page_boxes, pdf))
    added, modified = checked_entries(changes.added), checked_entries(changes.modified)
    carried = checked_entries(changes.extension_records)  # bookmarks, form fields: create or replace
    values, unknown = await widget_value_entries(ctx, document_id, layer, changes.form_field_values,
                                                 added + modified + carried)
    for sha, content in changes.attachments.items():  # content-addressed: safe to keep on failure
        await run_in_threadpool(ctx.storage.put_attachment, document_id, sha, "application/octet-stream",
                                content)

    def work(writer):
        if changes.is_command:
            for content in added:
                current = writer.get_record(content["id"])
                if current is not None and not current.deleted:
                    raise ApiError(409, "annotation_exists",
                                   f"<add>: annotation {content['id']!r} exists; nothing was applied")
            for content in modified:
                current = writer.get_record(content["id"])
                if current is None or current.deleted:
                    raise ApiError(409, "conflict",
                                   f"<modify>: no annotation {content['id']!r}; nothing was applied")
        _check_reply_roots(writer, added + modified)
        # XFDF numbers have no type: an integral bbox read back as floats is not a change
        created, updated = put_entries(writer, added + modified + carried + values, typed_numbers=False)
        deleted = 0
        for record_id in changes.deleted:
            current = writer.get_record(record_id)
            if current is not None and not current.deleted:
                delete_record(writer, record_id, None)
                deleted += 1
        return created, updated, deleted

    entries = len(added) + len(modified) + len(carried) + len(values)
    state, (created, updated, deleted) = await commit(ctx, document_id, layer, work)
    return {"data": {"created": created, "updated": updated, "deleted": deleted,
                     "unchanged": entries - created - updated, "revision": state.revision,
                     **({"skippedFormFieldValues": unknown} if unknown else {})}}


_APPLY_BODY = {"requestBody": {"required": True, "content": {
    MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
    "multipart/form-data": {"schema": {"type": "object", "properties": {
        "xfdf": {"type": "string", "format": "binary"}}}}}}}
_APPLY_RESPONSES = {**ok(bodies.ApplyResultOut, "counts of created, updated, deleted, unchanged "
                                                 "annotations"), **error_responses(409)}


@router.post(DOC + "/apply_xfdf", summary="Apply XFDF (plain or command document) to the default layer",
             openapi_extra=_APPLY_BODY, responses=_APPLY_RESPONSES)
async def apply_document_xfdf(document_id: str, request: Request,
                              ctx: AppContext = Depends(require_admin)) -> dict:
    return await apply_xfdf(ctx, document_id, "", await _xfdf_bytes(request, ctx))


@router.post(LAYER + "/apply_xfdf", summary="Apply XFDF (plain or command document) to a layer",
             openapi_extra=_APPLY_BODY, responses=_APPLY_RESPONSES)
async def apply_layer_xfdf(document_id: str, layer: str, request: Request,
                           ctx: AppContext = Depends(require_admin)) -> dict:
    return await apply_xfdf(ctx, document_id, layer_from_segment(layer), await _xfdf_bytes(request, ctx))


def upload_attachment_records(attachment: bytes, pdf: bytes, pdf_records: list[dict],
                              keep_current_annotations: bool) -> tuple[list[dict], dict[str, bytes]]:
    """The default layer of an upload with an ``attachment`` (Document Engine's
    ``CreateDocumentAttachment``): XFDF, or Instant JSON when it starts with ``{``. It
    replaces the PDF's annotations, or with ``keep_current_annotations`` is applied over
    them (a command document's ``<delete>`` then removes PDF annotations). Returns the
    records and the attachment's embedded files. Raises ApiError 400 for a bad attachment.
    """
    if attachment.lstrip()[:1] == b"{":
        try:
            body = parse_json(attachment)
        except ApiError:
            raise invalid_request("attachment must be an XFDF or Instant JSON document") from None
        problem = json_problem(body, None)
        if problem:
            raise invalid_request(f"attachment: {problem}")
        entries, files = instant_json_entries(body, len(page_boxes(pdf))), {}
        deleted: list[str] = []
    else:
        changes = read_xfdf_body(attachment, page_boxes(pdf))
        entries, files, deleted = checked_entries(changes.records), changes.attachments, changes.deleted
    records = {r["id"]: r for r in pdf_records} if keep_current_annotations else {}
    for record_id in deleted:
        records.pop(record_id, None)
    records.update((e["id"], e) for e in entries)
    return list(records.values()), files


