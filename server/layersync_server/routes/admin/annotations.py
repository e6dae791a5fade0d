"""Admin API: annotations of a layer (list, create one or many, get, replace one or many,
delete one or many), on the default layer (``/documents/{id}/annotations``) and on a named
one (``.../layers/{layer}/...``), in Document Engine's shapes (``AnnotationRecord``,
``AnnotationCreateSingle`` / ``AnnotationCreateMultiple``, ``AnnotationUpdateMultiple``,
``DeleteAnnotations``, ``AnnotationMultipleResponse``)."""

from __future__ import annotations

import hashlib

from fastapi import Depends, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from layersync_server import openapi_bodies as bodies
from layersync_server.changes import delete_record
from layersync_server.context import AppContext, commit, layer_from_segment
from layersync_server.errors import ApiError, not_found
from layersync_server.errors_http import error_responses
from layersync_server.openapi_bodies import ok
from layersync_server.record_kinds import is_annotation
from layersync_server.routes.admin.common import (DOC, LAYER, admin_router, annotation_record,
                                                  annotation_write, bulk_result,
                                                  check_annotation_id, data_envelope, find_document,
                                                  json_part, form_body, require_admin, required_json_body,
                                                  unprocessable)
from layersync_server.wire_json import dumps


router = admin_router()

#: Largest ``annotations`` list in a JSON answer; ``Accept: application/x-ndjson`` streams all.
MAX_LISTED_ANNOTATIONS = 1000
#: Most annotations one bulk request may write or name.
MAX_BULK_ANNOTATIONS = 10_000


async def annotation_listing(request: Request, ctx: AppContext, document_id: str, layer: str,
                             keep=is_annotation):
    """Document Engine's annotation listing of a layer (the document was checked): the
    live records whose content ``keep`` accepts (the annotations, widgets included:
    :func:`~layersync_server.record_kinds.is_annotation`; not comments, bookmarks or form
    records) as ``{"data": {"annotations": [AnnotationRecord], "truncated"}}``, the first
    :data:`MAX_LISTED_ANNOTATIONS`, or every one streamed as NDJSON when the request
    accepts ``application/x-ndjson``. ``.../annotations`` and ``.../pages/{i}/annotations``
    answer with it."""

    def kept():
        for record in ctx.storage.iter_records(document_id, layer):
            if keep(record.content):
                yield record

    if "application/x-ndjson" in request.headers.get("accept", ""):
        # the layer before the stream starts (404 if it was deleted, not mid-stream)
        await run_in_threadpool(ctx.storage.list_records, document_id, layer, 0, 1, False)
        return StreamingResponse((dumps(annotation_record(r)) + "\n" for r in kept()),
                                 media_type="application/x-ndjson")

    def first() -> tuple[list, bool]:
        found = []
        for record in kept():
            if len(found) == MAX_LISTED_ANNOTATIONS:
                return found, True
            found.append(record)
        return found, False

    records, truncated = await run_in_threadpool(first)
    return data_envelope({"annotations": [annotation_record(r) for r in records], "truncated": truncated})


async def _list_annotations(request: Request, ctx: AppContext, document_id: str, layer: str):
    await find_document(ctx, document_id)
    return await annotation_listing(request, ctx, document_id, layer)


async def _json_write_body(request: Request, ctx: AppContext) -> object:
    return await required_json_body(request, ctx, '{"content": {...}} or {"annotations": [...]}')


async def _write_body(request: Request, ctx: AppContext) -> object:
    """A JSON body, or the JSON ``annotation`` / ``annotations`` part of a multipart
    body (Document Engine's ``...WithAttachment`` forms; the other parts, named by the
    SHA-256 of their bytes, are stored as the document's attachments)."""
    form = await form_body(request, ctx)
    if form is None:
        return await _json_write_body(request, ctx)
    body = None
    for name in ("annotation", "annotations"):
        value = await json_part(form, name)
        if value is not None:
            body = value
    if body is None:
        raise unprocessable("multipart body needs an 'annotation' or 'annotations' part")
    return body, form


async def _store_form_attachments(ctx: AppContext, document_id: str, form) -> None:
    for name, part in form.multi_items():
        if name in ("annotation", "annotations") or isinstance(part, str):
            continue
        data = await part.read()
        sha = hashlib.sha256(data).hexdigest()
        if name.lower() != sha:
            raise unprocessable(f"attachment part {name!r}: its name must be the SHA-256 of its bytes")
        content_type = part.content_type or "application/octet-stream"
        await run_in_threadpool(ctx.storage.put_attachment, document_id, sha, content_type, data)


async def _body_and_attachments(request: Request, ctx: AppContext, document_id: str) -> object:
    body = await _write_body(request, ctx)
    if isinstance(body, tuple):
        body, form = body
        await _store_form_attachments(ctx, document_id, form)
    return body


def _bulk_items(body: object, key: str) -> list:
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise unprocessable(f"'{key}' (an array) is required")
    if len(items) > MAX_BULK_ANNOTATIONS:
        raise unprocessable(f"at most {MAX_BULK_ANNOTATIONS} entries in '{key}'")
    return items


async def _create_annotations(request: Request, ctx: AppContext, document_id: str, layer: str):
    await find_document(ctx, document_id)
    body = await _body_and_attachments(request, ctx, document_id)
    bulk = isinstance(body, dict) and "annotations" in body and "content" not in body
    items = _bulk_items(body, "annotations") if bulk else [body]
    writes = [annotation_write(item, None, f"$.annotations[{i}]" if bulk else "body")
              for i, item in enumerate(items)]
    ids = [content["id"] for content, _, _ in writes]
    if len(set(ids)) != len(ids):
        raise unprocessable("two annotations of the request have the same id")

    def work(writer):
        for content, _, _ in writes:
            if writer.get_record(content["id"]) is not None:
                raise ApiError(409, "annotation_exists", f"annotation {content['id']!r} exists")
        for content, user_id, group in writes:
            writer.put_record(content["id"], content, user_id, group=group)
        return [writer.get_record(record_id) for record_id in ids]

    _, records = await commit(ctx, document_id, layer, work)
    if bulk:
        return bulk_result(records)
    return {"data": {"annotation_id": records[0].id, **annotation_record(records[0])}}


async def _get_annotation(ctx: AppContext, document_id: str, layer: str, annotation_id: str):
    check_annotation_id(annotation_id)
    await find_document(ctx, document_id)
    record = await run_in_threadpool(ctx.storage.get_record, document_id, layer, annotation_id)
    if record is None or record.deleted:
        raise not_found(f"no annotation {annotation_id!r}")
    return annotation_record(record)


async def _update_annotation(request: Request, ctx: AppContext, document_id: str, layer: str,
                             annotation_id: str):
    check_annotation_id(annotation_id)
    await find_document(ctx, document_id)
    content, user_id, group = annotation_write(await _json_write_body(request, ctx), annotation_id)

    def work(writer):
        current = writer.get_record(annotation_id)
        if current is None or current.deleted:
            raise not_found(f"no annotation {annotation_id!r}")
        writer.put_record(annotation_id, content, user_id, group=group)
        return writer.get_record(annotation_id)

    _, record = await commit(ctx, document_id, layer, work)
    return {"data": annotation_record(record)}


async def _update_annotations(request: Request, ctx: AppContext, document_id: str, layer: str):
    await find_document(ctx, document_id)
    body = await _body_and_attachments(request, ctx, document_id)
    items = _bulk_items(body, "annotations")
    writes = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise unprocessable(f"$.annotations[{i}]: 'id' (a string) is required")
        try:
            check_annotation_id(item["id"])
        except ApiError as exc:
            raise unprocessable(f"$.annotations[{i}]: {exc.message}") from None
        writes.append((i, *annotation_write(item, item["id"], f"$.annotations[{i}]")))

    def work(writer):
        updated, failing = [], []
        for i, content, user_id, group in writes:
            current = writer.get_record(content["id"])
            if current is None or current.deleted:
                failing.append({"path": f"$.annotations[{i}]", "error": "Annotation not found.",
                                "details": f"no annotation {content['id']!r} in this layer"})
                continue
            writer.put_record(content["id"], content, user_id, group=group)
            updated.append(content["id"])
        return [writer.get_record(record_id) for record_id in updated], failing

    _, (records, failing) = await commit(ctx, document_id, layer, work)
    return bulk_result(records, failing)


async def _delete_annotation(ctx: AppContext, document_id: str, layer: str, annotation_id: str):
    check_annotation_id(annotation_id)
    await find_document(ctx, document_id)

    def work(writer):
        current = writer.get_record(annotation_id)
        if current is None or current.deleted:
            raise not_found(f"no annotation {annotation_id!r}")
        return delete_record(writer, annotation_id, None)

    _, revision = await commit(ctx, document_id, layer, work)
    return {"data": {"id": annotation_id, "deleted": True, "revision": revision}}


async def _delete_annotations(request: Request, ctx: AppContext, document_id: str, layer: str):
    await find_document(ctx, document_id)
    body = await _json_write_body(request, ctx)
    wanted = body.get("annotationIds") if isinstance(body, dict) else None
    if wanted != "all":
        if not isinstance(wanted, list) or not all(isinstance(i, str) for i in wanted):
            raise unprocessable("'annotationIds' must be \"all\" or an array of annotation ids")
        if len(wanted) > MAX_BULK_ANNOTATIONS:
            raise unprocessable(f"at most {MAX_BULK_ANNOTATIONS} annotation ids")

    live = None
    if wanted == "all":
        live = await run_in_threadpool(lambda: [r.id for r in ctx.storage.iter_records(document_id, layer)])

    def work(writer):
        deleted, revision = [], None
        for record_id in (live if live is not None else wanted):
            current = writer.get_record(record_id)
            if current is None or current.deleted:  # already gone (or a reply of one deleted here)
                continue
            revision = delete_record(writer, record_id, None)
            deleted.append(record_id)
        return deleted, revision

    state, (deleted, revision) = await commit(ctx, document_id, layer, work)
    return {"data": {"deleted": deleted, "revision": state.revision if revision is None else revision}}


_ANNOTATIONS_DOC = ("Live annotations (widgets included; not comments, bookmarks or form records) as "
                    "`AnnotationRecord`s, at most 1000 with `truncated`; "
                    "`Accept: application/x-ndjson` streams every one, one JSON object per line.")
_CREATE_DOC = ("Body `{\"content\": {...}, \"id\"?, \"user_id\"?, \"group\"?}` → "
               "`{\"data\": {\"annotation_id\", ...AnnotationRecord}}`, or `{\"annotations\": [...]}` → "
               "`AnnotationMultipleResponse`; multipart: an `annotation` / `annotations` JSON part and "
               "attachments named by their SHA-256. 422 when `content` is missing or invalid (nothing "
               "stored), 409 `annotation_exists` when an id is taken (also by a deleted record).")
_UPDATE_MANY_DOC = ("Body `{\"annotations\": [{\"id\", \"content\", \"user_id\"?}]}` → "
                    "`AnnotationMultipleResponse`; ids not in the layer are listed in `failing_paths` "
                    "(the others are written). 422 when an entry lacks `id` or `content`.")
_DELETE_MANY_DOC = ("Body `{\"annotationIds\": \"all\" | [ids]}`: tombstones them and their replies; "
                    "ids already gone are skipped. `{\"data\": {\"deleted\": [ids], \"revision\"}}`.")


def _routes(prefix: str, where: str, layer_of) -> None:
    """Register the annotation routes under ``prefix`` (``DOC`` or ``LAYER``)."""

    @router.get(prefix + "/annotations", summary=f"List annotations of {where}",
                description=_ANNOTATIONS_DOC, responses=bodies.ANNOTATION_LIST)
    async def list_(request: Request, document_id: str, ctx: AppContext = Depends(require_admin),
                    layer: str = Depends(layer_of)):
        return await _list_annotations(request, ctx, document_id, layer)

    @router.post(prefix + "/annotations", summary=f"Create annotations in {where}",
                 description=_CREATE_DOC, openapi_extra=bodies.ANNOTATION_CREATE,
                 responses={**ok(bodies.AnnotationCreateOut, "the new annotation (or "
                                 "AnnotationMultipleResponse for the bulk form)"),
                            **error_responses(409, 422)})
    async def create(request: Request, document_id: str, ctx: AppContext = Depends(require_admin),
                     layer: str = Depends(layer_of)) -> dict:
        return await _create_annotations(request, ctx, document_id, layer)

    @router.put(prefix + "/annotations", summary=f"Replace many annotations of {where}",
                description=_UPDATE_MANY_DOC, openapi_extra=bodies.ANNOTATION_UPDATE_MANY,
                responses={**ok(bodies.AnnotationMultipleOut, "the written annotations"),
                           **error_responses(422)})
    async def update_many(request: Request, document_id: str, ctx: AppContext = Depends(require_admin),
                          layer: str = Depends(layer_of)) -> dict:
        return await _update_annotations(request, ctx, document_id, layer)

    @router.delete(prefix + "/annotations", summary=f"Delete many annotations of {where}",
                   description=_DELETE_MANY_DOC, openapi_extra=bodies.ANNOTATION_DELETE_MANY,
                   responses={**ok(bodies.AnnotationsDeletedOut, "deleted"), **error_responses(422)})
    async def delete_many(request: Request, document_id: str, ctx: AppContext = Depends(require_admin),
                          layer: str = Depends(layer_of)) -> dict:
        return await _delete_annotations(request, ctx, document_id, layer)

    @router.get(prefix + "/annotations/{annotation_id}", summary=f"Get an annotation of {where}",
                responses=ok(bodies.Annotation, "the annotation (an AnnotationRecord, no envelope)"))
    async def get(document_id: str, annotation_id: str, ctx: AppContext = Depends(require_admin),
                  layer: str = Depends(layer_of)) -> dict:
        return await _get_annotation(ctx, document_id, layer, annotation_id)

    @router.put(prefix + "/annotations/{annotation_id}", summary=f"Replace an annotation of {where}",
                description="Body `{\"content\": {...}, \"user_id\"?}` (`AnnotationUpdate`); the path id "
                            "wins. 404 when missing or deleted, 422 when `content` is missing or invalid.",
                openapi_extra=bodies.ANNOTATION_UPDATE,
                responses={**ok(bodies.AnnotationOut, "the annotation"), **error_responses(422)})
    async def update(document_id: str, annotation_id: str, request: Request,
                     ctx: AppContext = Depends(require_admin),
                     layer: str = Depends(layer_of)) -> dict:
        return await _update_annotation(request, ctx, document_id, layer, annotation_id)

    @router.delete(prefix + "/annotations/{annotation_id}", summary=f"Delete an annotation of {where}",
                   description="Tombstones it and its replies (`rootId`). 404 when missing or "
                               "already deleted.",
                   responses=ok(bodies.AnnotationDeletedOut, "deleted (with its replies)"))
    async def delete(document_id: str, annotation_id: str, ctx: AppContext = Depends(require_admin),
                     layer: str = Depends(layer_of)) -> dict:
        return await _delete_annotation(ctx, document_id, layer, annotation_id)


def _default_layer() -> str:
    return ""


def _named_layer(layer: str) -> str:
    """The ``{layer}`` path segment as a layer name (``~`` = the default layer)."""
    return layer_from_segment(layer)


_routes(DOC, "the default layer", _default_layer)
_routes(LAYER, "a layer", _named_layer)
