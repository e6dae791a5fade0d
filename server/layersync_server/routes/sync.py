"""Client sync API under ``/sync/v1`` — the contract in docs/protocol.md.

The FastAPI routes; the two requests on the propagation path, ``POST .../sync`` and the
long-poll ``GET .../changes``, are plain ASGI endpoints (:mod:`.propagation`). All
storage calls are blocking and run in worker threads.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from layersync_server import SERVER_NAME, __version__
from layersync_server import openapi_bodies as bodies
from layersync_server.auth import Grant
from layersync_server.changes import content_problem, forbidden_update, is_revision
from layersync_server.context import (AppContext, commit, get_context, layer_from_segment,
                                      no_document, read_body, read_json_object)
from layersync_server.errors import ApiError, forbidden, invalid_request, not_found
from layersync_server.errors_http import COMMON_ERROR_RESPONSES, error_responses
from layersync_server.ids import is_sha256_hex, is_valid_record_id
from layersync_server.json_http import WireJSONResponse, WireRoute
from layersync_server.openapi_bodies import media, ok
from layersync_server.routes.access import grant, list_page, page_json
from layersync_server.permissions import ClaimError, may, parse_claim, regranted_records, sent_as_delta
from layersync_server.storage import DocumentNotFound
from layersync_server.stream import STREAM_PATH, wire_seconds
from layersync_server.wire_json import MAX_JSON_DEPTH, MAX_NUMBER_CHARS, MAX_REVISION, parse_json

router = APIRouter(prefix="/sync/v1", tags=["sync"], responses=COMMON_ERROR_RESPONSES,
                   route_class=WireRoute, default_response_class=WireJSONResponse)
CAPABILITIES = ["long-poll", "snapshot-paging", "attachments", "history", "rollback",
                "deleted-restore", "stream"]
_LAYER_PATH = "/documents/{document_id}/layers/{layer:path}"  # (propagation.LAYER_PATH)


async def _grant(request: Request, ctx: AppContext, document_id: str, layer: str | None,
                 permission: str) -> Grant:
    """:func:`~layersync_server.routes.access.grant` of the request's JWT."""
    return await grant(request.headers.get("authorization"), ctx, document_id, layer,
                       permission)


@router.get("/info", responses=ok(bodies.InfoOut, "server identity, limits, capabilities"))
async def info(ctx: AppContext = Depends(get_context)) -> dict:
    """Server identity, protocol range, limits and capabilities. No auth."""
    s = ctx.settings
    return {"server": SERVER_NAME, "server_version": __version__,
            "protocol": {"min": s.protocol_min, "max": s.protocol_max},
            "limits": {"max_request_bytes": s.max_request_bytes,
                       "max_page_records": s.max_page_records, "max_wait_s": s.max_wait_s,
                       "max_upload_bytes": s.max_upload_bytes,
                       "history_versions": s.history_versions,
                       "max_json_depth": MAX_JSON_DEPTH, "max_number_chars": MAX_NUMBER_CHARS},
            "capabilities": CAPABILITIES,
            "stream": {"path": STREAM_PATH, "heartbeat_s": wire_seconds(s.stream_heartbeat_s),
                       "max_subscriptions": s.max_stream_subscriptions}}


@router.get("/documents/{document_id}/pdf", response_class=Response,
            responses={200: media("application/pdf", "the PDF"),
                       206: media("application/pdf", "a byte range (`Content-Range`)"),
                       304: {"description": "not modified"}, **error_responses(416)})
async def document_pdf(document_id: str, request: Request,
                       ctx: AppContext = Depends(get_context)) -> Response:
    """The PDF bytes with a strong ETag (quoted SHA-256 hex); ``Range`` gives 206.

    Supports ``bytes=N-``, ``bytes=N-M`` and ``bytes=-N``, ``If-Range`` and
    ``If-None-Match`` (304). Needs the ``download`` permission (any layer).
    """
    await _grant(request, ctx, document_id, None, "download")
    try:
        data = await run_in_threadpool(ctx.storage.read_pdf, document_id)
    except DocumentNotFound:
        raise not_found(f"no document {document_id!r}") from None
    etag = f'"{hashlib.sha256(data).hexdigest()}"'
    headers = {"ETag": etag, "Accept-Ranges": "bytes"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    range_header = request.headers.get("range")
    if_range = request.headers.get("if-range")
    if range_header and (if_range is None or if_range == etag):
        start, end = _parse_range(range_header, len(data))
        headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        return Response(data[start:end + 1], status_code=206, media_type="application/pdf",
                        headers=headers)
    return Response(data, media_type="application/pdf", headers=headers)


def _parse_range(header: str, size: int) -> tuple[int, int]:
    """Parse a single-range ``Range`` header into inclusive ``(start, end)``.

    Raises:
        ApiError: 416 ``range_not_satisfiable`` (with ``Content-Range: bytes */size``).
    """
    unit, _, spec = header.partition("=")
    first, dash, last = spec.strip().partition("-")
    try:
        if unit.strip().lower() != "bytes" or not dash or "," in spec:
            raise ValueError
        if first == "":
            start, end = max(size - int(last), 0), size - 1
        else:
            start = int(first)
            end = min(int(last), size - 1) if last else size - 1
        if start < 0 or start > end or start >= size:
            raise ValueError
    except ValueError:
        raise ApiError(416, "range_not_satisfiable", f"cannot serve Range {header!r}",
                       {"size_bytes": size}, headers={"Content-Range": f"bytes */{size}"}) from None
    return start, end


@router.get(_LAYER_PATH + "/records", responses=ok(bodies.RecordPageOut, "a page of records"))
async def layer_records(document_id: str, layer: str, request: Request,
                        since: int = Query(0, ge=0, le=MAX_REVISION), limit: int | None = Query(None, ge=1),
                        previous_permissions: str | None = Query(None),
                        previous_user_id: str | None = Query(None),
                        ctx: AppContext = Depends(get_context)) -> WireJSONResponse:
    """Snapshot (``since=0``: no tombstones) or delta (tombstones included), paged, as the
    token's collaboration permissions let it see them.

    ``previous_permissions`` (after a reauthentication): the previous token's
    ``collaboration_permissions`` as a JSON array, or ``null`` when it had none;
    ``previous_user_id`` its ``user_id`` (default: this token's). The answer then also
    has ``regranted``: the records at revisions up to ``since`` that this token may view
    and the previous one could not (whole), and bare tombstones of those the previous one
    could view and this one cannot (docs/protocol.md, "Reauthentication")."""
    name = layer_from_segment(layer)
    found = await _grant(request, ctx, document_id, name, "read-document")
    previous = None
    if previous_permissions is not None:
        previous = _previous_permissions(previous_permissions)
    page = await list_page(ctx, document_id, name, since, limit, include_tombstones=since > 0)
    body = page_json(page, found, sent_as_delta(since))
    if previous_permissions is not None:
        previous_user = previous_user_id if previous_user_id is not None else found.user_id
        body["regranted"] = await run_in_threadpool(
            regranted_records, ctx.storage, document_id, name, min(since, page.layer.revision),
            found, previous, previous_user)
    return WireJSONResponse(body)


def _previous_permissions(text: str):
    """The ``previous_permissions`` parameter parsed (400 when malformed)."""
    try:
        return parse_claim(parse_json(text))
    except ClaimError as exc:
        raise invalid_request(f"previous_permissions: {exc}") from None
    except ApiError:
        raise invalid_request("previous_permissions must be a JSON array of strings or null") from None


# -- attachments ---------------------------------------------------------------------------

_ATTACHMENT_PATH = "/documents/{document_id}/attachments/{sha256}"


def _check_sha256(sha256: str) -> None:
    if not is_sha256_hex(sha256):
        raise invalid_request("attachment id must be the SHA-256 of its bytes, 64 lower-case hex digits")


@router.put(_ATTACHMENT_PATH, status_code=201, openapi_extra=bodies.ATTACHMENT,
            responses={**ok(bodies.AttachmentOut, "stored", 201),
                       **ok(bodies.AttachmentOut, "already existed")})
async def put_attachment(document_id: str, sha256: str, request: Request, response: Response,
                         ctx: AppContext = Depends(get_context)) -> dict:
    """Store an attachment (image of an image annotation, embedded file) under the
    SHA-256 of its bytes. The hash is verified (400 ``hash_mismatch`` otherwise).
    201 when stored, 200 when it already existed. Needs ``write`` (any layer)."""
    _check_sha256(sha256)
    await _grant(request, ctx, document_id, None, "write")
    data = await read_body(request, ctx.settings.max_upload_bytes)
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise ApiError(400, "hash_mismatch", "body does not hash to the attachment id",
                       {"expected": sha256, "actual": actual})
    content_type = request.headers.get("content-type") or "application/octet-stream"
    try:
        created = await run_in_threadpool(ctx.storage.put_attachment, document_id, sha256,
                                          content_type, data)
    except DocumentNotFound:
        raise no_document(document_id) from None
    response.status_code = 201 if created else 200
    return {"sha256": sha256, "size_bytes": len(data), "content_type": content_type}


@router.get(_ATTACHMENT_PATH, response_class=Response,
            responses={200: media("*/*", "the bytes, with the Content-Type they were stored with")})
async def get_attachment(document_id: str, sha256: str, request: Request,
                         ctx: AppContext = Depends(get_context)) -> Response:
    """The attachment's bytes with its content type and ``ETag`` (quoted SHA-256).
    Needs ``read-document`` (any layer). 404 when unknown."""
    _check_sha256(sha256)
    grant = await _grant(request, ctx, document_id, None, "read-document")
    found = await run_in_threadpool(ctx.storage.get_attachment, document_id, sha256)
    if found is not None and grant.collaboration is not None and not await run_in_threadpool(
            _attachment_visible, ctx, grant, sha256):
        found = None  # as if absent: it belongs to no record this token may view
    if found is None:
        raise not_found(f"no attachment {sha256} in document {document_id!r}")
    return Response(found.data, media_type=found.content_type, headers={"ETag": f'"{sha256}"'})


def _attachment_visible(ctx: AppContext, grant: Grant, sha256: str) -> bool:
    """Whether a live record of the grant's layer that the grant may view names the
    attachment (its content mentions the hash, e.g. ``imageAttachmentId``)."""
    return any(may(grant, "view", record) for record in
               ctx.storage.records_mentioning(grant.document_id, grant.layer, sha256))


# -- history, rollback, deleted list, restore ------------------------------------------------

def _check_record_id(record_id: str) -> None:
    if not is_valid_record_id(record_id):
        raise invalid_request("record id must be 1..128 characters without control characters "
                              "or lone surrogates")


@router.get(_LAYER_PATH + "/records/{record_id}/history",
            responses=ok(bodies.HistoryOut, "kept versions, newest first"))
async def record_history(document_id: str, layer: str, record_id: str, request: Request,
                         ctx: AppContext = Depends(get_context)) -> dict:
    """The kept versions of a record, newest first (the last ``history_versions``).
    Needs ``read-document``. 404 when the record never existed."""
    name = layer_from_segment(layer)
    _check_record_id(record_id)
    grant = await _grant(request, ctx, document_id, name, "read-document")
    state = await run_in_threadpool(ctx.storage.get_layer, document_id, name)
    versions = await run_in_threadpool(ctx.storage.record_history, document_id, name, record_id)
    if versions and grant.collaboration is not None:
        current = await run_in_threadpool(ctx.storage.get_record, document_id, name, record_id)
        if current is None or not _may_view_kept(grant, current, versions):
            versions = []  # as if it never existed
        else:
            versions = visible_versions(grant, versions)  # a private past is left out
    if state is None or not versions:
        raise not_found(f"no history for record {record_id!r}")
    return {"epoch": state.epoch, "revision": state.revision, "id": record_id,
            "versions": [v.to_wire() for v in versions]}


@router.get(_LAYER_PATH + "/deleted", responses=ok(bodies.DeletedPageOut, "a page of tombstones"))
async def deleted_records(document_id: str, layer: str, request: Request,
                          since: int = Query(0, ge=0, le=MAX_REVISION), limit: int | None = Query(None, ge=1),
                          ctx: AppContext = Depends(get_context)) -> dict:
    """Tombstones of the layer (paged like ``records``); each carries ``last_content``,
    the content of its newest kept live version (``null`` when none is kept), which
    ``restore`` brings back. Needs ``read-document``."""
    name = layer_from_segment(layer)
    grant = await _grant(request, ctx, document_id, name, "read-document")
    page_size = min(limit or ctx.settings.max_page_records, ctx.settings.max_page_records)
    try:
        page = await run_in_threadpool(ctx.storage.list_records, document_id, name, since,
                                       page_size, True, frozenset(), True)
    except DocumentNotFound:
        raise no_document(document_id) from None
    body = page_json(page)

    def last_versions():
        return [_newest_live(ctx.storage.record_history(document_id, name, record.id))
                for record in page.records]

    records = []
    for record, entry, last in zip(page.records, body["records"],
                                   await run_in_threadpool(last_versions)):
        content = last.content if last is not None else None
        if grant.collaboration is not None:
            if not may(grant, "view", replace(record, content=content)):
                continue  # classified by its last content; its ownership is kept on the tombstone
            if last is not None and not may(grant, "view", last):
                content = None  # that version is not the user's to see (restore: 404)
        entry["last_content"] = content
        records.append(entry)
    body["records"] = records
    return body


def _newest_live(versions: list):
    """The newest live version of ``versions`` (newest first), or None."""
    return next((v for v in versions if not v.deleted), None)


def visible_versions(grant: Grant, versions: list) -> list:
    """The kept versions (newest first) the grant may view, each judged as it was: its own
    content type, ``createdBy`` and ``group`` (a version kept before schema 6 has group
    None, so only a view grant that needs no group covers it). A deletion is judged with
    the type of the live version before it. Hidden versions are left out, as if not kept."""
    if grant.collaboration is None:
        return versions
    out, older_type = [], None
    for version in reversed(versions):  # oldest first: a deletion takes its predecessor's type
        if version.deleted:
            judged = version if older_type is None else replace(version, content={"type": older_type})
        else:
            judged = version
            older_type = version.content.get("type")
        if may(grant, "view", judged):
            out.append(version)
    out.reverse()
    return out


def _may_view_kept(grant: Grant, current, versions: list) -> bool:
    """View of a record whose current row is ``current`` (a tombstone is classified by
    its newest kept live version)."""
    if current.deleted:
        live = [v for v in versions if not v.deleted]
        current = replace(current, content=live[0].content if live else None)
    return may(grant, "view", current)


def _check_may_write_version(grant: Grant, current, history: list, content: dict, writer) -> None:
    """403 ``forbidden`` unless the grant may write ``content`` over ``current``: a
    deleted record comes back only with ``delete`` on it (it undoes a delete), a live one
    changes only with ``edit`` (``fill`` for a form field value) on it and on what it
    becomes, and with ``reply`` on the thread a version with another ``rootId`` puts it in."""
    if current.deleted:
        live = [v for v in history if not v.deleted]
        was = replace(current, content=live[0].content if live else None)
        if not may(grant, "delete", was):
            raise forbidden("may not bring back this deleted record")
        return
    why = forbidden_update(writer, grant, current, content)
    if why:
        raise forbidden(why)


def _conflict(message: str, server_record) -> ApiError:
    return ApiError(409, "conflict", message,
                    {"server_record": server_record.to_wire() if server_record else None})


async def _write_version(ctx: AppContext, document_id: str, layer: str, record_id: str,
                         grant: Grant, body: dict, pick) -> dict:
    """Shared part of rollback and restore: check ``base_revision``, pick the version
    with ``pick(current, history, visible)`` (``visible``: the kept versions the grant may
    view, :func:`visible_versions`; a hidden one is as if not kept), write its content as
    a new revision."""
    base = body.get("base_revision")
    if base is not None and not is_revision(base):
        raise invalid_request(f"base_revision must be an integer 0..{MAX_REVISION}")

    def work(writer):
        current = writer.get_record(record_id)
        history = writer.history(record_id) if current is not None else []
        if current is None or (grant.collaboration is not None
                               and not _may_view_kept(grant, current, history)):
            raise not_found(f"no record {record_id!r}")
        if base is not None and current.revision != base:
            raise _conflict(f"record changed at revision {current.revision}", current)
        content = pick(current, history, visible_versions(grant, history))
        problem = content_problem(content)  # a kept version may predate today's checks
        if problem:
            raise invalid_request(f"that version cannot be written back: {problem}")
        if grant.collaboration is not None:
            _check_may_write_version(grant, current, history, content, writer)
        revision = writer.put_record(record_id, content, grant.user_id)
        return writer.get_record(record_id) if revision else None

    state, record = await commit(ctx, document_id, layer, work)
    return {"epoch": state.epoch, "revision": state.revision, "record": record.to_wire()}


@router.post(_LAYER_PATH + "/records/{record_id}/rollback",
             responses={**ok(bodies.RecordWriteOut, "the record at its new revision"),
                        **error_responses(409)},
             openapi_extra=bodies.ROLLBACK)
async def rollback_record(document_id: str, layer: str, record_id: str, request: Request,
                          ctx: AppContext = Depends(get_context)) -> dict:
    """Write the content a record had at ``revision`` (a kept version) as a new
    revision. Body ``{"revision": R, "base_revision": B?}``; with ``base_revision`` the
    record must still be at it (409 ``conflict`` otherwise). Works on tombstones too
    (undelete to that version). 404 when the record or version is not kept; 400 when
    version R is a deletion or its content fails the checks a sync change's does
    (:func:`~layersync_server.changes.content_problem`). Needs ``write``."""
    name = layer_from_segment(layer)
    _check_record_id(record_id)
    grant = await _grant(request, ctx, document_id, name, "write")
    body = await read_json_object(request, ctx)
    target = body.get("revision")
    if not is_revision(target) or target < 1:
        raise invalid_request(f"revision must be an integer 1..{MAX_REVISION}")

    def pick(_current, _history, visible):
        for version in visible:
            if version.revision == target:
                if version.deleted:
                    raise invalid_request(f"revision {target} is a deletion; nothing to roll back to")
                return version.content
        raise not_found(f"revision {target} of record {record_id!r} is not kept")

    return await _write_version(ctx, document_id, name, record_id, grant, body, pick)


@router.post(_LAYER_PATH + "/records/{record_id}/restore",
             responses={**ok(bodies.RecordWriteOut, "the record at its new revision"),
                        **error_responses(409)},
             openapi_extra=bodies.RESTORE)
async def restore_record(document_id: str, layer: str, record_id: str, request: Request,
                         ctx: AppContext = Depends(get_context)) -> dict:
    """Bring a deleted record back with the content of its newest kept live version,
    at a new revision. Body optional ``{"base_revision": B}``. 409 ``conflict`` when
    the record is not deleted; 404 when it never existed or no live version is kept;
    400 when that version's content fails the checks a sync change's does. Needs ``write``."""
    name = layer_from_segment(layer)
    _check_record_id(record_id)
    grant = await _grant(request, ctx, document_id, name, "write")
    body = await read_json_object(request, ctx)

    def pick(current, history, visible):
        if not current.deleted:
            raise _conflict("record is not deleted", current)
        last = _newest_live(history)
        if last is None or not any(v is last for v in visible):  # (the deleted list's last_content)
            raise not_found(f"no live version of record {record_id!r} is kept")
        return last.content

    return await _write_version(ctx, document_id, name, record_id, grant, body, pick)
