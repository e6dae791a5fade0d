"""Admin API: bookmarks, as Document Engine's ``Bookmarks`` routes define them, on the
default layer and on a named one.

A bookmark is a ``pspdfkit/bookmark`` record of the layer (Instant JSON's ``Bookmark``:
``v`` 1, ``action``, ``name``?), so sync clients receive it like any record.

- ``GET .../bookmarks`` → ``{"data": {"bookmarks": [BookmarkRecord]}}`` (``{id, content,
  createdBy, updatedBy}``).
- ``POST .../bookmarks`` body ``BookmarkRecord`` (``{id?, content}``, or the bare bookmark)
  → ``{"data": {"id"}}``; 400 when it breaks the record schema or the id is taken.
- ``PUT`` / ``DELETE .../bookmarks/{bookmarkId}`` → ``{"data": {"id"}}``.

The spec documents 200, 400 and 401 for ``PUT`` and ``DELETE`` (no 404), so: a ``DELETE``
of a bookmark that is already deleted answers 200 and writes nothing (a delete is
idempotent, RFC 9110 §9.2.2: a retry after a lost answer finds what it asked for); an id
the layer has no bookmark of (never used, or a live record of another kind) answers 400
``invalid_request`` saying so, as does a ``PUT`` of such an id or of a deleted bookmark.
"""

from __future__ import annotations

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from layersync_server.changes import delete_record, normalize_content
from layersync_server.context import AppContext, commit, layer_from_segment
from layersync_server.errors import invalid_request
from layersync_server.ids import new_ulid
from layersync_server.openapi_bodies import json_body as body_doc
from layersync_server.openapi_bodies import media
from layersync_server.record_kinds import BOOKMARK, BOOKMARK_TYPE, kind_of
from layersync_formats.record_schema import record_schema_problem
from layersync_server.routes.admin.common import (DOC, LAYER, admin_router, annotation_record,
                                                  check_annotation_id, data_envelope,
                                                  find_document, json_body, require_admin)
from layersync_server.wire_json import MAX_JSON_DEPTH, json_problem


router = admin_router()



def _bookmark(body: object, record_id: str | None) -> tuple[str, dict, str | None]:
    """``(id, content, user_id)`` of a ``BookmarkRecord`` body; 400 when invalid."""
    if not isinstance(body, dict):
        raise invalid_request("bookmark must be a JSON object")
    wrapped = isinstance(body.get("content"), dict)
    content = dict(body["content"] if wrapped else body)
    content.setdefault("type", BOOKMARK_TYPE)
    content.setdefault("v", 1)
    if content["type"] != BOOKMARK_TYPE:
        raise invalid_request(f'bookmark content "type" must be {BOOKMARK_TYPE!r}')
    record_id = record_id or (body.get("id") if wrapped else None) or content.get("id") or new_ulid()
    check_annotation_id(record_id)
    problem = json_problem(content, MAX_JSON_DEPTH) or record_schema_problem(content)
    if problem:
        raise invalid_request(f"bookmark: {problem}")
    user_id = body.get("user_id") if isinstance(body.get("user_id"), str) else None
    return record_id, normalize_content(record_id, content), user_id


async def _list(ctx: AppContext, document_id: str, layer: str) -> dict:
    await find_document(ctx, document_id)
    records = await run_in_threadpool(lambda: [r for r in ctx.storage.iter_records(document_id, layer)
                                               if kind_of(r.content) == BOOKMARK])
    return data_envelope({"bookmarks": [annotation_record(r) for r in records]})


async def _write(request: Request, ctx: AppContext, document_id: str, layer: str,
                 bookmark_id: str | None) -> dict:
    """Create (``bookmark_id`` None) or replace a bookmark."""
    await find_document(ctx, document_id)
    record_id, content, user_id = _bookmark(await json_body(request, ctx), bookmark_id)

    def work(writer):
        current = writer.get_record(record_id)
        if bookmark_id is None and current is not None:
            raise invalid_request(f"record {record_id!r} exists")
        if bookmark_id is not None and (current is None or current.deleted
                                        or kind_of(current.content) != BOOKMARK):
            raise invalid_request(f"no bookmark {record_id!r} in this layer")
        writer.put_record(record_id, content, user_id)

    await commit(ctx, document_id, layer, work, changes=1)
    return data_envelope({"id": record_id})


def _was_bookmark(writer, record_id: str) -> bool:
    """Whether a deleted record was a bookmark (its newest kept live version is one; a
    tombstone whose live versions are no longer kept counts as one: it is deleted either way)."""
    live = [v for v in writer.history(record_id) if not v.deleted]
    return not live or kind_of(live[0].content) == BOOKMARK


async def _delete(ctx: AppContext, document_id: str, layer: str, bookmark_id: str) -> dict:
    check_annotation_id(bookmark_id)
    await find_document(ctx, document_id)

    def work(writer):
        current = writer.get_record(bookmark_id)
        if current is not None and current.deleted and _was_bookmark(writer, bookmark_id):
            return  # deleted already: done (idempotent), nothing written
        if current is None or current.deleted or kind_of(current.content) != BOOKMARK:
            raise invalid_request(f"no bookmark {bookmark_id!r} in this layer")
        delete_record(writer, bookmark_id, None)

    await commit(ctx, document_id, layer, work, changes=1)
    return data_envelope({"id": bookmark_id})


_BODY = body_doc({"type": "object", "properties": {
    "id": {"type": "string"}, "content": {"type": "object", "required": ["action"], "properties": {
        "type": {"type": "string", "enum": [BOOKMARK_TYPE]}, "v": {"type": "integer", "enum": [1]},
        "name": {"type": "string"}, "action": {"type": "object"}}}}})
_LISTED = {200: media("application/json", "the layer's bookmarks", {
    "type": "object", "required": ["data"], "properties": {"data": {"type": "object", "properties": {
        "bookmarks": {"type": "array", "items": {"type": "object", "required": ["id", "content"]}}}}}})}
_ID = {200: media("application/json", "the bookmark's id", {
    "type": "object", "required": ["data"], "properties": {"data": {
        "type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}}})}


@router.get(DOC + "/bookmarks", summary="Bookmarks of the default layer", responses=_LISTED)
async def default_layer_bookmarks(document_id: str, ctx: AppContext = Depends(require_admin)) -> dict:
    return await _list(ctx, document_id, "")


@router.get(LAYER + "/bookmarks", summary="Bookmarks of a layer", responses=_LISTED)
async def layer_bookmarks(document_id: str, layer: str, ctx: AppContext = Depends(require_admin)) -> dict:
    return await _list(ctx, document_id, layer_from_segment(layer))


@router.post(DOC + "/bookmarks", summary="Create a bookmark in the default layer", responses=_ID,
             openapi_extra=_BODY)
async def create_default_layer_bookmark(document_id: str, request: Request,
                                        ctx: AppContext = Depends(require_admin)) -> dict:
    return await _write(request, ctx, document_id, "", None)


@router.post(LAYER + "/bookmarks", summary="Create a bookmark in a layer", responses=_ID, openapi_extra=_BODY)
async def create_layer_bookmark(document_id: str, layer: str, request: Request,
                                ctx: AppContext = Depends(require_admin)) -> dict:
    return await _write(request, ctx, document_id, layer_from_segment(layer), None)


@router.put(DOC + "/bookmarks/{bookmark_id}", summary="Replace a bookmark of the default layer",
            responses=_ID, openapi_extra=_BODY)
async def update_default_layer_bookmark(document_id: str, bookmark_id: str, request: Request,
                                        ctx: AppContext = Depends(require_admin)) -> dict:
    check_annotation_id(bookmark_id)
    return await _write(request, ctx, document_id, "", bookmark_id)


@router.put(LAYER + "/bookmarks/{bookmark_id}", summary="Replace a bookmark of a layer",
            responses=_ID, openapi_extra=_BODY)
async def update_layer_bookmark(document_id: str, layer: str, bookmark_id: str, request: Request,
                                ctx: AppContext = Depends(require_admin)) -> dict:
    check_annotation_id(bookmark_id)
    return await _write(request, ctx, document_id, layer_from_segment(layer), bookmark_id)


@router.delete(DOC + "/bookmarks/{bookmark_id}", summary="Delete a bookmark of the default layer", responses=_ID)
async def delete_default_layer_bookmark(document_id: str, bookmark_id: str,
                                        ctx: AppContext = Depends(require_admin)) -> dict:
    return await _delete(ctx, document_id, "", bookmark_id)


@router.delete(LAYER + "/bookmarks/{bookmark_id}", summary="Delete a bookmark of a layer", responses=_ID)
async def delete_layer_bookmark(document_id: str, layer: str, bookmark_id: str,
                                ctx: AppContext = Depends(require_admin)) -> dict:
    return await _delete(ctx, document_id, layer_from_segment(layer), bookmark_id)
