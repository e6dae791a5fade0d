"""Admin API: annotations of a layer (list, create, get, replace, delete), on the default
layer (``/documents/{id}/annotations``) and on a named one (``.../layers/{layer}/...``)."""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from layersync_server import openapi_bodies as bodies
from layersync_server.changes import delete_record
from layersync_server.context import AppContext, commit, layer_from_segment
from layersync_server.errors import ApiError, not_found
from layersync_server.errors_http import error_responses
from layersync_server.openapi_bodies import ok
from layersync_server.routes.admin.common import (DOC, LAYER, admin_router, annotation_content,
                                                  check_annotation_id, find_document, json_body,
                                                  require_admin)
from layersync_server.storage import StoredRecord
from layersync_server.wire_json import dumps


router = admin_router()

#: Largest ``annotations`` list in a JSON answer; ``Accept: application/x-ndjson`` streams all.
MAX_LISTED_ANNOTATIONS = 1000


def _annotation_json(record: StoredRecord) -> dict:
    return {"id": record.id, "content": record.content, "revision": record.revision,
            "createdBy": record.created_by, "updatedBy": record.updated_by,
            "createdAt": record.created_at, "updatedAt": record.updated_at}


async def _list_annotations(request: Request, ctx: AppContext, document_id: str, layer: str):
    await find_document(ctx, document_id)
    if "application/x-ndjson" in request.headers.get("accept", ""):
        # the layer before the stream starts (404 if it was deleted, not mid-stream)
        await run_in_threadpool(ctx.storage.list_records, document_id, layer, 0, 1, False)

        def lines():
            for record in ctx.storage.iter_records(document_id, layer):
                yield dumps(_annotation_json(record)) + "\n"
        return StreamingResponse(lines(), media_type="application/x-ndjson")
    page = await run_in_threadpool(ctx.storage.list_records, document_id, layer, 0,
                                   MAX_LISTED_ANNOTATIONS, False)
    return {"data": {"annotations": [_annotation_json(r) for r in page.records],
                     "truncated": page.has_more}}


async def _create_annotation(request: Request, ctx: AppContext, document_id: str, layer: str):
    await find_document(ctx, document_id)
    body = await json_body(request, ctx)
    content = annotation_content(body, None)
    user_id = body.get("user_id") if isinstance(body, dict) and isinstance(body.get("user_id"), str) else None

    def work(writer):
        if writer.get_record(content["id"]) is not None:
            raise ApiError(409, "annotation_exists", f"annotation {content['id']!r} exists")
        writer.put_record(content["id"], content, user_id)
        return writer.get_record(content["id"])

    _, record = await commit(ctx, document_id, layer, work)
    return {"data": _annotation_json(record)}


async def _get_annotation(ctx: AppContext, document_id: str, layer: str, annotation_id: str):
    check_annotation_id(annotation_id)
    await find_document(ctx, document_id)
    record = await run_in_threadpool(ctx.storage.get_record, document_id, layer, annotation_id)
    if record is None or record.deleted:
        raise not_found(f"no annotation {annotation_id!r}")
    return {"data": _annotation_json(record)}


async def _update_annotation(request: Request, ctx: AppContext, document_id: str, layer: str,
                             annotation_id: str):
    check_annotation_id(annotation_id)
    await find_document(ctx, document_id)
    body = await json_body(request, ctx)
    content = annotation_content(body, annotation_id)
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
    check_annotation_id(annotation_id)
    await find_document(ctx, document_id)

    def work(writer):
        current = writer.get_record(annotation_id)
        if current is None or current.deleted:
            raise not_found(f"no annotation {annotation_id!r}")
        return delete_record(writer, annotation_id, None)

    _, revision = await commit(ctx, document_id, layer, work)
    return {"data": {"id": annotation_id, "deleted": True, "revision": revision}}


_ANNOTATIONS_DOC = ("Live records, at most 1000 with `truncated`; `Accept: application/x-ndjson` "
                    "streams every record, one JSON object per line.")


@router.get(DOC + "/annotations", summary="List annotations of the default layer",
            description=_ANNOTATIONS_DOC, responses=bodies.ANNOTATION_LIST)
async def default_layer_annotations(document_id: str, request: Request,
                                    ctx: AppContext = Depends(require_admin)):
    return await _list_annotations(request, ctx, document_id, "")


@router.get(LAYER + "/annotations", summary="List annotations of a layer", description=_ANNOTATIONS_DOC,
            responses=bodies.ANNOTATION_LIST)
async def layer_annotations(document_id: str, layer: str, request: Request,
                            ctx: AppContext = Depends(require_admin)):
    return await _list_annotations(request, ctx, document_id, layer_from_segment(layer))


@router.post(DOC + "/annotations", summary="Create an annotation in the default layer",
             responses={**ok(bodies.AnnotationOut, "the new annotation"), **error_responses(409)},
             openapi_extra=bodies.ANNOTATION)
async def create_default_annotation(document_id: str, request: Request,
                                    ctx: AppContext = Depends(require_admin)) -> dict:
    """Body: an Instant JSON annotation, or ``{"id"?, "content": {...}, "user_id"?}``.
    409 ``annotation_exists`` when the id is taken (also by a deleted record)."""
    return await _create_annotation(request, ctx, document_id, "")


@router.post(LAYER + "/annotations", summary="Create an annotation in a layer",
             responses={**ok(bodies.AnnotationOut, "the new annotation"), **error_responses(409)},
             openapi_extra=bodies.ANNOTATION)
async def create_layer_annotation(document_id: str, layer: str, request: Request,
                                  ctx: AppContext = Depends(require_admin)) -> dict:
    """As for the default layer."""
    return await _create_annotation(request, ctx, document_id, layer_from_segment(layer))


@router.get(DOC + "/annotations/{annotation_id}", summary="Get an annotation of the default layer",
            responses=ok(bodies.AnnotationOut, "the annotation"))
async def get_default_annotation(document_id: str, annotation_id: str,
                                 ctx: AppContext = Depends(require_admin)) -> dict:
    return await _get_annotation(ctx, document_id, "", annotation_id)


@router.get(LAYER + "/annotations/{annotation_id}", summary="Get an annotation of a layer",
            responses=ok(bodies.AnnotationOut, "the annotation"))
async def get_layer_annotation(document_id: str, layer: str, annotation_id: str,
                               ctx: AppContext = Depends(require_admin)) -> dict:
    return await _get_annotation(ctx, document_id, layer_from_segment(layer), annotation_id)


@router.put(DOC + "/annotations/{annotation_id}", summary="Replace an annotation of the default layer",
            openapi_extra=bodies.ANNOTATION, responses=ok(bodies.AnnotationOut, "the annotation"))
async def update_default_annotation(document_id: str, annotation_id: str, request: Request,
                                    ctx: AppContext = Depends(require_admin)) -> dict:
    """Body as for create; the path id wins. 404 when missing or deleted."""
    return await _update_annotation(request, ctx, document_id, "", annotation_id)


@router.put(LAYER + "/annotations/{annotation_id}", summary="Replace an annotation of a layer",
            openapi_extra=bodies.ANNOTATION, responses=ok(bodies.AnnotationOut, "the annotation"))
async def update_layer_annotation(document_id: str, layer: str, annotation_id: str, request: Request,
                                  ctx: AppContext = Depends(require_admin)) -> dict:
    return await _update_annotation(request, ctx, document_id, layer_from_segment(layer), annotation_id)


@router.delete(DOC + "/annotations/{annotation_id}", summary="Delete an annotation of the default layer",
               responses=ok(bodies.AnnotationDeletedOut, "deleted (with its replies)"))
async def delete_default_annotation(document_id: str, annotation_id: str,
                                    ctx: AppContext = Depends(require_admin)) -> dict:
    """Tombstones it and its replies (``rootId``). 404 when missing or already deleted."""
    return await _delete_annotation(ctx, document_id, "", annotation_id)


@router.delete(LAYER + "/annotations/{annotation_id}", summary="Delete an annotation of a layer",
               responses=ok(bodies.AnnotationDeletedOut, "deleted (with its replies)"))
async def delete_layer_annotation(document_id: str, layer: str, annotation_id: str,
                                  ctx: AppContext = Depends(require_admin)) -> dict:
    return await _delete_annotation(ctx, document_id, layer_from_segment(layer), annotation_id)
