"""Admin API: a layer as Instant JSON (export and apply) and as a PDF with its
annotations written in."""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from typing import Literal

import pikepdf

from fastapi import Depends, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from layersync_server import openapi_bodies as bodies
from layersync_server.context import AppContext, commit, layer_from_segment
from layersync_server.errors import invalid_request
from layersync_server.ids import is_valid_layer_name
from layersync_server.openapi_bodies import media, ok
from layersync_server.pdf.export import export_pdf
from layersync_formats.record_schema import record_schema_problem
from layersync_server.record_kinds import COMMENT, INSTANT_JSON_KEYS, WIDGET, WIDGET_TYPE, kind_of
from layersync_server.routes.admin.acroform import form_field_values, form_fields, with_field_values
from layersync_server.routes.admin.common import (DOC, LAYER, admin_router, find_document,
                                                  instant_json_body, instant_json_entries,
                                                  require_admin)
from layersync_server.storage import StoredRecord
from layersync_formats.values import same_json
from layersync_server.wire_json import MAX_JSON_DEPTH, json_problem


router = admin_router()

INSTANT_JSON_FORMAT = "https://pspdfkit.com/instant-json/v1"


def _layer_query(layer: str) -> str:
    name = "" if layer == "~" else layer
    if not is_valid_layer_name(name):
        raise invalid_request("layer must be a layer name ('' or '~' = default layer)")
    return name


async def _live_records(ctx: AppContext, document_id: str, layer: str) -> list[StoredRecord]:
    await find_document(ctx, document_id)
    return await run_in_threadpool(lambda: list(ctx.storage.iter_records(document_id, layer)))


async def layer_instant_json_document(ctx: AppContext, document_id: str, layer: str) -> dict:
    """The layer's live records as an Instant JSON document (``document.json``'s body,
    Document Engine's ``InstantJson``), each filed under the key of its kind
    (:mod:`layersync_server.record_kinds`): ``annotations`` (widgets included),
    ``comments``, ``bookmarks``, ``formFields`` (the stored form field records, then one
    per other field of the widgets, described by the stored PDF's AcroForm) and
    ``formFieldValues`` (:func:`~layersync_server.routes.admin.acroform.form_field_values`);
    the admin routes, the XFDF export and the dashboard all answer with it."""
    records = await _live_records(ctx, document_id, layer)
    filed: dict[str, list[dict]] = {key: [] for key in INSTANT_JSON_KEYS.values()}
    for record in records:
        filed[INSTANT_JSON_KEYS[kind_of(record.content)]].append(record.content)
    defined = {f.get("name") for f in filed["formFields"]}
    widgets = [c for c in filed["annotations"] if c.get("type") == WIDGET_TYPE
               and c.get("formFieldName") not in defined]
    pdf = await run_in_threadpool(ctx.storage.read_pdf, document_id) if widgets else None
    derived = await run_in_threadpool(form_fields, widgets, pdf) if widgets else []
    return {"format": INSTANT_JSON_FORMAT, "annotations": filed["annotations"],
            "comments": filed["comments"], "bookmarks": filed["bookmarks"],
            "formFields": filed["formFields"] + derived,
            "formFieldValues": [value for value, _ in form_field_values(records)]}


@router.get(DOC + "/document.json", summary="Instant JSON export of a layer (?layer=)",
            responses=ok(bodies.InstantJsonOut, "Instant JSON"))
async def instant_json(document_id: str, layer: str = Query("", max_length=128),
                       annotation_version: int = Query(2, ge=1, le=2),
                       ctx: AppContext = Depends(require_admin)) -> dict:
    """Each record under the key of its kind (:mod:`layersync_server.record_kinds`).
    ``annotation_version=1``: annotations as Instant JSON v1 (``v`` 1, ``text`` a string)."""
    return _as_version(await layer_instant_json_document(ctx, document_id, _layer_query(layer)),
                       annotation_version)


@router.get(LAYER + "/document.json", summary="Instant JSON export of a layer",
            responses=ok(bodies.InstantJsonOut, "Instant JSON"))
async def layer_instant_json(document_id: str, layer: str, annotation_version: int = Query(2, ge=1, le=2),
                             ctx: AppContext = Depends(require_admin)) -> dict:
    return _as_version(await layer_instant_json_document(ctx, document_id, layer_from_segment(layer)),
                       annotation_version)


def _as_version(document: dict, annotation_version: int) -> dict:
    """``document`` with its annotations as Instant JSON ``annotation_version``: records
    are v2; v1 differs in ``v`` and in ``text`` being the plain string (rich text's
    markup is kept as the string Document Engine's v1 has)."""
    if annotation_version == 2:
        return document
    downgraded = []
    for annotation in document["annotations"]:
        annotation = dict(annotation, v=1)
        if isinstance(annotation.get("text"), dict):
            annotation["text"] = annotation["text"].get("value", "")
        downgraded.append(annotation)
    return {**document, "annotations": downgraded}


def _form_field_values(body: object) -> dict[str, object]:
    items = body.get("formFieldValues", []) if isinstance(body, dict) else []
    if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("name"), str)
                                              for i in items):
        raise invalid_request("formFieldValues must be an array of {name, value} objects")
    for item in items:  # each is a pspdfkit/form-field-value record (v 1) as Instant JSON defines it
        problem = json_problem(item, MAX_JSON_DEPTH) or record_schema_problem(
            {"v": 1, **item, "type": "pspdfkit/form-field-value"})
        if problem:
            raise invalid_request(f"formFieldValues: {problem}")
    return {i["name"]: i.get("value") for i in items}


async def widget_value_entries(ctx: AppContext, document_id: str, layer: str,
                               values: dict[str, object], applied: list[dict] = ()) -> tuple[list[dict], list[str]]:
    """Form field values as entries and the names of unknown fields
    (:func:`~.acroform.with_field_values`), on the layer as it is with the ``applied``
    entries of the same request over it (a form field or value record the request brings
    is a field too). Instant JSON and XFDF apply and ``/form-field-values`` use it."""
    if not values:
        return [], []
    contents = await run_in_threadpool(lambda: {r.id: r.content for r in ctx.storage.iter_records(document_id, layer)})
    contents.update((entry["id"], entry) for entry in applied)
    return with_field_values(contents.values(), values)


def unknown_fields_refused(unknown: list[str]) -> None:
    """``/form-field-values``: 400 ``invalid_request`` (422 there) naming the unknown
    fields, before anything is stored."""
    if unknown:
        shown = ", ".join(repr(n[:128]) for n in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise invalid_request(f"formFieldValues: no form field named {shown} in this layer")


def put_entries(writer, entries: list[dict], typed_numbers: bool = True) -> tuple[int, int]:
    """Inside a :func:`commit`: create each entry's record or replace the one with its id
    (identical ones, :func:`~layersync_formats.values.same_json`, are left alone; with
    ``typed_numbers`` False, as for XFDF, whose numbers have no type, ``10.0`` read over a
    stored ``10`` is identical). Returns ``(created, updated)``; the admin write path of
    Instant JSON and XFDF apply."""
    created = updated = 0
    for content in entries:
        current = writer.get_record(content["id"])
        if current is not None and not current.deleted and same_json(current.content, content,
                                                                     typed_numbers):
            continue
        writer.put_record(content["id"], content, None)
        if current is None or current.deleted:
            created += 1
        else:
            updated += 1
    return created, updated


async def _apply_instant_json(request: Request, ctx: AppContext, document_id: str, layer: str,
                              refuse_unknown_fields: bool = False) -> dict:
    """Apply Instant JSON; form field values of fields the layer does not have are left
    out and named in ``skippedFormFieldValues`` (or, with ``refuse_unknown_fields``, 400
    and nothing is applied)."""
    info = await find_document(ctx, document_id)
    body = await instant_json_body(request, ctx)
    entries = instant_json_entries(body, info.page_count)
    # form field values land on the widget records of those fields
    values, unknown = await widget_value_entries(ctx, document_id, layer, _form_field_values(body), entries)
    if refuse_unknown_fields:
        unknown_fields_refused(unknown)
    entries += values
    state, (created, updated) = await commit(ctx, document_id, layer, lambda writer: put_entries(writer, entries))
    return {"data": {"created": created, "updated": updated,
                     "unchanged": len(entries) - created - updated, "revision": state.revision,
                     **({"skippedFormFieldValues": unknown} if unknown else {})}}


@router.post(DOC + "/apply_instant_json", summary="Apply Instant JSON to the default layer",
             openapi_extra=bodies.INSTANT_JSON,
             responses=ok(bodies.ApplyResultOut, "counts of created, updated, unchanged entries"))
async def apply_instant_json(document_id: str, request: Request,
                             ctx: AppContext = Depends(require_admin)) -> dict:
    """Body: Instant JSON (``annotations``, ``comments``, ``bookmarks``, ``formFields``,
    ``formFieldValues``) as
    ``application/json`` or as the ``instant.json`` part of a multipart body (Document
    Engine's form). Each entry creates the record or replaces the one with its id;
    identical entries are left alone."""
    return await _apply_instant_json(request, ctx, document_id, "")


@router.post(LAYER + "/apply_instant_json", summary="Apply Instant JSON to a layer",
             openapi_extra=bodies.INSTANT_JSON,
             responses=ok(bodies.ApplyResultOut, "counts of created, updated, unchanged entries"))
async def apply_layer_instant_json(document_id: str, layer: str, request: Request,
                                   ctx: AppContext = Depends(require_admin)) -> dict:
    return await _apply_instant_json(request, ctx, document_id, layer_from_segment(layer))


#: Record fields that name a stored attachment (SHA-256 hex).
ATTACHMENT_FIELDS = ("fileAttachmentId", "imageAttachmentId")


def attachment_ids(contents: list[dict]) -> set[str]:
    """The attachments (SHA-256 hex) the record contents name in :data:`ATTACHMENT_FIELDS`."""
    return {c[f] for c in contents for f in ATTACHMENT_FIELDS if isinstance(c.get(f), str)}


def stored_attachments(ctx: AppContext, document_id: str, contents: list[dict],
                       known=()) -> dict[str, tuple[str, bytes]]:
    """The stored attachments the records name (:func:`attachment_ids`) as ``{sha256:
    (content type, bytes)}``, but those in ``known`` (blocking: run in a worker thread).
    The PDF and XFDF exports embed them; the copies store them with the new document."""
    found = {}
    for sha256 in sorted(attachment_ids(contents) - set(known)):
        attachment = ctx.storage.get_attachment(document_id, sha256)
        if attachment is not None:
            found[sha256] = (attachment.content_type, attachment.data)
    return found


def attachment_bytes(attachments: dict[str, tuple[str, bytes]]) -> dict[str, bytes]:
    """``{sha256: bytes}`` of :func:`stored_attachments`' answer (what the PDF and XFDF
    writers take)."""
    return {sha256: data for sha256, (_, data) in attachments.items()}


async def layer_pdf_response(ctx: AppContext, document_id: str, layer: str,
                             options: PdfOptions | None = None) -> Response:
    """The document's PDF with the layer's annotations written in, with the
    ``LayerSync-Export`` report header; the admin routes and the dashboard both use it.
    ``options`` (Document Engine's query): ``source`` answers the PDF as uploaded,
    ``flatten`` burns the annotations into the pages, ``annotations=false`` /
    ``comments=false`` leave those records out."""
    options = options or PdfOptions()
    records = await _live_records(ctx, document_id, layer)
    original = await run_in_threadpool(ctx.storage.read_pdf, document_id)
    if options.source:
        return Response(original, media_type="application/pdf", headers={
            "ETag": f'"{hashlib.sha256(original).hexdigest()}"'})
    if not options.annotations:
        records = [r for r in records if kind_of(r.content) in (COMMENT, WIDGET)]
    if not options.comments:
        records = [r for r in records if kind_of(r.content) != COMMENT]
    contents = [r.content for r in records]
    attachments = await run_in_threadpool(stored_attachments, ctx, document_id, contents)
    result = await run_in_threadpool(export_pdf, original, contents, attachment_bytes(attachments))
    pdf = await run_in_threadpool(_flattened, result.pdf) if options.flatten else result.pdf
    return Response(pdf, media_type="application/pdf", headers={
        "ETag": f'"{hashlib.sha256(pdf).hexdigest()}"',
        "LayerSync-Export": f"kept={result.kept}; written={result.written}; "
                            f"removed={result.removed}; skipped={len(result.skipped)}"})


@dataclass(frozen=True)
class PdfOptions:
    """Document Engine's ``download-document-pdf`` query (the options LayerSync honours)."""

    source: bool = False
    flatten: bool = False
    annotations: bool = True
    comments: bool = True


def pdf_options(source: bool | None = Query(None, description="the PDF as uploaded"),
                flatten: bool | None = Query(None, description="annotations burned into the pages"),
                annotations: bool | None = Query(None, description="false: leave annotations out"),
                comments: bool | None = Query(None, description="false: leave comments out"),
                pdf_type: Literal["pdf", "pdfa"] = Query("pdf", alias="type",
                                                         description="only pdf is produced")) -> PdfOptions:
    """The PDF routes' query; 400 when ``source`` is combined with another option (as
    Document Engine answers) or ``type=pdfa`` is asked."""
    if source and (flatten is not None or annotations is not None or comments is not None):
        raise invalid_request("source cannot be combined with flatten, annotations or comments")
    if pdf_type != "pdf":
        raise invalid_request("type=pdfa is not produced; ask for type=pdf")
    return PdfOptions(bool(source), bool(flatten), annotations is not False, comments is not False)


def _flattened(pdf: bytes) -> bytes:
    """``pdf`` with every annotation's appearance drawn into its page and the
    annotations removed (qpdf's flattening, through pikepdf)."""
    with pikepdf.open(io.BytesIO(pdf)) as parsed:
        parsed.flatten_annotations("all")
        for page in parsed.pages:
            if "/Annots" in page.obj:
                del page.obj["/Annots"]
        if "/AcroForm" in parsed.Root:
            del parsed.Root["/AcroForm"]
        out = io.BytesIO()
        parsed.save(out)
        return out.getvalue()


_PDF_RESPONSES = {200: media("application/pdf", "the PDF (header `LayerSync-Export` says what was "
                                                  "kept, written, removed, skipped)")}


@router.get(DOC + "/pdf", summary="The PDF with a layer's annotations written in (?layer=)",
            response_class=Response, responses=_PDF_RESPONSES)
async def document_pdf(document_id: str, layer: str = Query("", max_length=128),
                       options: PdfOptions = Depends(pdf_options),
                       ctx: AppContext = Depends(require_admin)) -> Response:
    return await layer_pdf_response(ctx, document_id, _layer_query(layer), options)


@router.get(LAYER + "/pdf", summary="The PDF with a layer's annotations written in",
            response_class=Response, responses=_PDF_RESPONSES)
async def layer_pdf(document_id: str, layer: str, options: PdfOptions = Depends(pdf_options),
                    ctx: AppContext = Depends(require_admin)) -> Response:
    return await layer_pdf_response(ctx, document_id, layer_from_segment(layer), options)
