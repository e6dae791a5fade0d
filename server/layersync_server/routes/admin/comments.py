"""Admin API: comment threads, as Document Engine's ``Comments`` routes define them.

A comment is a ``pspdfkit/comment`` record of the layer whose ``rootId`` is its root
annotation's id (docs/protocol.md, "Comments"): sync clients receive it like any record,
and deleting the root deletes its comments. The root must be a markup annotation or a
comment marker (``pspdfkit/comment-marker``); it is marked ``isCommentThreadRoot``.

- ``GET .../annotations/{annotationId}/comments`` → ``CommentsList``
  ``{"data": {"comments": [{id, content, createdBy, updatedBy, group}]}}``, oldest first.
- ``POST .../annotations/{annotationId}/comments`` body ``CommentsCreate``
  ``{"comments": [{id?, user_id?, group?, content: {text, createdAt?, updatedAt?,
  customData?, creatorName?}}]}`` → ``CommentsCreated`` ``{"data": {"comments": [{id}]}}``.
- ``POST .../comments`` body ``CommentsCreateWithRoot`` (``annotation`` + ``comments``):
  the root and its comments at once → ``{"data": {"annotation": {id}, "comments": [{id}]}}``.

Each route exists on the default layer (``/documents/{id}/...``) and on a named one
(``.../layers/{layerName}/...``). One write transaction per request (the admin write
path, :func:`~layersync_server.context.commit`): root and comments are one set of
layer revisions. 400 when the root cannot hold comments, 404 when it is missing,
422 (nothing stored) when a comment lacks ``content.text`` or breaks the record schema.
"""

from __future__ import annotations

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from layersync_server.context import AppContext, commit, layer_from_segment
from layersync_server.errors import ApiError, invalid_request, not_found
from layersync_server.errors_http import error_responses
from layersync_server.ids import is_valid_record_id, new_ulid
from layersync_server.openapi_bodies import json_body as body_doc
from layersync_server.openapi_bodies import media
from layersync_server.record_kinds import ANNOTATION, COMMENT_TYPE, kind_of
from layersync_formats.record_schema import record_schema_problem
from layersync_server.routes.admin.common import (DOC, LAYER, admin_router, annotation_content,
                                                  annotation_record, as_unprocessable,
                                                  check_annotation_id, data_envelope,
                                                  find_document, require_admin, required_json_body,
                                                  unprocessable)
from layersync_server.storage import StoredRecord
from layersync_server.wire_json import MAX_JSON_DEPTH, json_problem


router = admin_router()

def can_hold_comments(content: dict) -> bool:
    """Whether a record may be a comment thread's root: a ``pspdfkit/`` annotation
    (:mod:`~layersync_server.record_kinds`: not a widget, comment, bookmark or form record)
    that is a markup annotation or a comment marker, so not a link (Document Engine
    answers 400 for the others)."""
    kind = content.get("type")
    return kind_of(content) == ANNOTATION and isinstance(kind, str) and kind.startswith("pspdfkit/") \
        and kind != "pspdfkit/link"


def _comment_content(item: object, index: int, root: dict) -> tuple[str, dict, str | None]:
    """``(id, record content, user_id)`` of one ``CommentCreate``; raises 422 naming
    the comment's index and field. The text becomes Instant JSON v2's
    ``{"format", "value"}`` (``xhtml`` when it starts with ``<``, else ``plain``)."""
    where = f"comments[{index}]"
    if not isinstance(item, dict) or not isinstance(item.get("content"), dict):
        raise unprocessable(f"{where}.content is required", comments={str(index): {"content": ["is required"]}})
    given = item["content"]
    text = given.get("text")
    if "text" not in given or not (text is None or isinstance(text, str)):
        raise unprocessable(f"{where}.content.text is required (a string or null)",
                            comments={str(index): {"content": {"text": ["is required"]}}})
    record_id = item.get("id") or new_ulid()
    if not is_valid_record_id(record_id):
        raise unprocessable(f"{where}.id must be 1..128 characters without control characters")
    user_id = item.get("user_id")
    if user_id is not None and not isinstance(user_id, str):
        raise unprocessable(f"{where}.user_id must be a string or null")
    value = text or ""
    content = {"v": 2, "type": COMMENT_TYPE, "id": record_id, "rootId": root["id"],
               "pageIndex": root.get("pageIndex", 0),
               "text": {"format": "xhtml" if value.lstrip().startswith("<") else "plain", "value": value}}
    for key in ("createdAt", "updatedAt", "creatorName", "customData"):
        if key in given:
            content[key] = given[key]
    problem = json_problem(content, MAX_JSON_DEPTH) or record_schema_problem(content)
    if problem:
        raise unprocessable(f"{where}: {problem}")
    return record_id, content, user_id


def _comments_of(body: object) -> list:
    if not isinstance(body, dict) or not isinstance(body.get("comments"), list):
        raise unprocessable("comments is required (an array)", comments=["is required"])
    return body["comments"]


def _write_thread(writer, root_id: str, comments: list[tuple[str, dict, str | None]]) -> list[dict]:
    """In one write transaction: mark the root a thread root, store the comments."""
    root = writer.get_record(root_id)
    if root is None or root.deleted:
        raise not_found(f"no annotation {root_id!r}")
    if not can_hold_comments(root.content):
        raise invalid_request(f"annotation {root_id!r} ({root.content.get('type')}) is neither a "
                              "markup annotation nor a comment marker")
    for record_id, _, _ in comments:
        if writer.get_record(record_id) is not None:
            raise unprocessable(f"record {record_id!r} exists", comments=[{"id": ["is taken"]}])
    if root.content.get("isCommentThreadRoot") is not True:
        writer.put_record(root_id, {**root.content, "isCommentThreadRoot": True}, root.updated_by)
    for record_id, content, user_id in comments:
        writer.put_record(record_id, {**content, "pageIndex": root.content.get("pageIndex", 0)}, user_id)
    return [{"id": record_id} for record_id, _, _ in comments]


async def _root(ctx: AppContext, document_id: str, layer: str, annotation_id: str) -> StoredRecord:
    check_annotation_id(annotation_id)
    await find_document(ctx, document_id)
    record = await run_in_threadpool(ctx.storage.get_record, document_id, layer, annotation_id)
    if record is None or record.deleted:
        raise not_found(f"no annotation {annotation_id!r}")
    return record


async def _list_comments(ctx: AppContext, document_id: str, layer: str, annotation_id: str) -> dict:
    root = await _root(ctx, document_id, layer, annotation_id)
    if not can_hold_comments(root.content):
        raise invalid_request(f"annotation {annotation_id!r} is neither a markup annotation nor a "
                              "comment marker")
    records = await run_in_threadpool(lambda: [
        r for r in ctx.storage.iter_records(document_id, layer)
        if r.content.get("type") == COMMENT_TYPE and r.content.get("rootId") == annotation_id])
    records.sort(key=lambda r: r.revision)
    return data_envelope({"comments": [annotation_record(r) for r in records]})


async def _add_comments(request: Request, ctx: AppContext, document_id: str, layer: str,
                        annotation_id: str) -> dict:
    root = await _root(ctx, document_id, layer, annotation_id)
    body = await required_json_body(request, ctx, '{"comments": [...]}')
    comments = [_comment_content(item, i, root.content) for i, item in enumerate(_comments_of(body))]
    _, created = await commit(ctx, document_id, layer,
                              lambda writer: _write_thread(writer, annotation_id, comments),
                              changes=len(comments) + 1)
    return data_envelope({"comments": created})


async def _add_thread(request: Request, ctx: AppContext, document_id: str, layer: str) -> dict:
    await find_document(ctx, document_id)
    body = await required_json_body(request, ctx, '{"annotation": {...}, "comments": [...]}')
    item = body.get("annotation") if isinstance(body, dict) else None
    if not isinstance(item, dict) or not isinstance(item.get("content"), dict):
        raise unprocessable("annotation.content is required", annotation={"content": ["is required"]})
    try:
        root = annotation_content(item, None)
    except ApiError as exc:
        raise as_unprocessable(exc) from None
    if not can_hold_comments(root):
        raise unprocessable("annotation must be a markup annotation or a comment marker",
                            annotation={"content": ["is not a markup annotation or comment marker"]})
    root["isCommentThreadRoot"] = True
    comments = [_comment_content(c, i, root) for i, c in enumerate(_comments_of(body))]
    user_id = item.get("user_id") if isinstance(item.get("user_id"), str) else None

    def work(writer):
        if writer.get_record(root["id"]) is not None:
            raise unprocessable(f"annotation {root['id']!r} exists", annotation={"id": ["is taken"]})
        writer.put_record(root["id"], root, user_id)
        return _write_thread(writer, root["id"], comments)

    _, created = await commit(ctx, document_id, layer, work, changes=len(comments) + 1)
    return data_envelope({"annotation": {"id": root["id"]}, "comments": created})


# -- OpenAPI --------------------------------------------------------------------------------

_COMMENT_CREATE = {"type": "object", "required": ["content"], "properties": {
    "id": {"type": "string"}, "user_id": {"type": ["string", "null"]}, "group": {"type": ["string", "null"]},
    "content": {"type": "object", "required": ["text"], "properties": {
        "text": {"type": ["string", "null"]}, "createdAt": {"type": "string"},
        "updatedAt": {"type": "string"}, "customData": {"type": ["object", "null"]},
        "creatorName": {"type": "string"}}}}}
_COMMENTS_BODY = body_doc({"type": "object", "required": ["comments"], "properties": {
    "comments": {"type": "array", "items": _COMMENT_CREATE}}})
_THREAD_BODY = body_doc({"type": "object", "required": ["annotation", "comments"], "properties": {
    "annotation": {"type": "object", "required": ["content"], "properties": {
        "id": {"type": "string"}, "user_id": {"type": ["string", "null"]},
        "group": {"type": ["string", "null"]}, "content": {"type": "object"}}},
    "comments": {"type": "array", "items": _COMMENT_CREATE}}})
_IDS = {"type": "array", "items": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}}
_RECORD = {"type": "object", "required": ["id", "content", "createdBy", "updatedBy", "group"], "properties": {
    "id": {"type": "string"}, "content": {"type": "object"}, "createdBy": {"type": ["string", "null"]},
    "updatedBy": {"type": ["string", "null"]}, "group": {"type": ["string", "null"]}}}


def _data(properties: dict, description: str) -> dict:
    return {200: media("application/json", description, {
        "type": "object", "required": ["data"], "properties": {"data": {
            "type": "object", "required": list(properties), "properties": properties}}})}


_LISTED = _data({"comments": {"type": "array", "items": _RECORD}}, "the comments of the thread, oldest first")
_ADDED = {**_data({"comments": _IDS}, "ids of the added comments"), **error_responses(422)}
_THREAD = {**_data({"annotation": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
                    "comments": _IDS}, "ids of the root annotation and its comments"), **error_responses(422)}


@router.get(DOC + "/annotations/{annotation_id}/comments", summary="Comments of a root annotation",
            responses=_LISTED)
async def default_layer_comments(document_id: str, annotation_id: str,
                                 ctx: AppContext = Depends(require_admin)) -> dict:
    return await _list_comments(ctx, document_id, "", annotation_id)


@router.get(LAYER + "/annotations/{annotation_id}/comments", summary="Comments of a root annotation in a layer",
            responses=_LISTED)
async def layer_comments(document_id: str, layer: str, annotation_id: str,
                         ctx: AppContext = Depends(require_admin)) -> dict:
    return await _list_comments(ctx, document_id, layer_from_segment(layer), annotation_id)


@router.post(DOC + "/annotations/{annotation_id}/comments", summary="Add comments to a root annotation",
             responses=_ADDED, openapi_extra=_COMMENTS_BODY)
async def add_default_layer_comments(document_id: str, annotation_id: str, request: Request,
                                     ctx: AppContext = Depends(require_admin)) -> dict:
    return await _add_comments(request, ctx, document_id, "", annotation_id)


@router.post(LAYER + "/annotations/{annotation_id}/comments",
             summary="Add comments to a root annotation in a layer", responses=_ADDED,
             openapi_extra=_COMMENTS_BODY)
async def add_layer_comments(document_id: str, layer: str, annotation_id: str, request: Request,
                             ctx: AppContext = Depends(require_admin)) -> dict:
    return await _add_comments(request, ctx, document_id, layer_from_segment(layer), annotation_id)


@router.post(DOC + "/comments", summary="Add a root annotation with its comments",
             responses=_THREAD, openapi_extra=_THREAD_BODY)
async def add_default_layer_thread(document_id: str, request: Request,
                                   ctx: AppContext = Depends(require_admin)) -> dict:
    return await _add_thread(request, ctx, document_id, "")


@router.post(LAYER + "/comments", summary="Add a root annotation with its comments in a layer",
             responses=_THREAD, openapi_extra=_THREAD_BODY)
async def add_layer_thread(document_id: str, layer: str, request: Request,
                           ctx: AppContext = Depends(require_admin)) -> dict:
    return await _add_thread(request, ctx, document_id, layer_from_segment(layer))
