"""Client sync API under ``/sync/v1`` — the contract in docs/protocol.md.

All storage calls are blocking and run in Starlette's threadpool; long-polls wait on
:class:`~layersync_server.notify.LayerNotifier` without holding a thread.
"""

from __future__ import annotations

import hashlib
import json

from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from layersync_server import SERVER_NAME, __version__
from layersync_server.auth import Grant
from layersync_server.changes import apply_changes
from layersync_server.context import AppContext, get_context, layer_from_segment, read_body
from layersync_server.errors import ApiError, invalid_request, not_found
from layersync_server.ids import is_valid_record_id
from layersync_server.storage import DocumentNotFound, RecordPage

router = APIRouter(prefix="/sync/v1")
CAPABILITIES = ["long-poll", "snapshot-paging"]
_LAYER_PATH = "/documents/{document_id}/layers/{layer:path}"


def page_json(page: RecordPage) -> dict:
    """``{"epoch", "revision", "records", "has_more", "next_since"}`` of a page."""
    return {"epoch": page.layer.epoch, "revision": page.layer.revision,
            "records": [r.to_wire() for r in page.records],
            "has_more": page.has_more, "next_since": page.next_since}


def _grant(request: Request, ctx: AppContext, document_id: str, layer: str | None,
           permission: str) -> Grant:
    grant = ctx.verifier.verify(request.headers.get("authorization"))
    grant.require(document_id, layer, permission)
    return grant


async def _list(ctx: AppContext, document_id: str, layer: str, since: int, limit: int | None,
                include_tombstones: bool, exclude: frozenset[int] = frozenset()) -> RecordPage:
    page_size = min(limit or ctx.settings.max_page_records, ctx.settings.max_page_records)
    try:
        return await run_in_threadpool(ctx.storage.list_records, document_id, layer, since,
                                       page_size, include_tombstones, exclude)
    except DocumentNotFound:
        raise not_found(f"no document {document_id!r}") from None


@router.get("/info")
async def info(ctx: AppContext = Depends(get_context)) -> dict:
    """Server identity, protocol range, limits and capabilities. No auth."""
    s = ctx.settings
    return {"server": SERVER_NAME, "server_version": __version__,
            "protocol": {"min": s.protocol_min, "max": s.protocol_max},
            "limits": {"max_request_bytes": s.max_request_bytes,
                       "max_page_records": s.max_page_records, "max_wait_s": s.max_wait_s},
            "capabilities": CAPABILITIES}


@router.get("/documents/{document_id}/pdf")
async def document_pdf(document_id: str, request: Request,
                       ctx: AppContext = Depends(get_context)) -> Response:
    """The PDF bytes with a strong ETag (quoted SHA-256 hex); ``Range`` gives 206.

    Supports ``bytes=N-``, ``bytes=N-M`` and ``bytes=-N``, ``If-Range`` and
    ``If-None-Match`` (304). Needs the ``download`` permission (any layer).
    """
    _grant(request, ctx, document_id, None, "download")
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


@router.get(_LAYER_PATH + "/records")
async def layer_records(document_id: str, layer: str, request: Request,
                        since: int = Query(0, ge=0), limit: int | None = Query(None, ge=1),
                        ctx: AppContext = Depends(get_context)) -> dict:
    """Snapshot (``since=0``: no tombstones) or delta (tombstones included), paged."""
    name = layer_from_segment(layer)
    _grant(request, ctx, document_id, name, "read-document")
    page = await _list(ctx, document_id, name, since, limit, include_tombstones=since > 0)
    return page_json(page)


@router.get(_LAYER_PATH + "/changes")
async def layer_changes(document_id: str, layer: str, request: Request,
                        since: int = Query(0, ge=0), wait: float = Query(0, ge=0),
                        limit: int | None = Query(None, ge=1),
                        ctx: AppContext = Depends(get_context)) -> dict:
    """Long-poll: answer at once if there are records past ``since``, else hold up to
    ``wait`` seconds (capped at ``max_wait_s``) until a commit to the layer."""
    name = layer_from_segment(layer)
    _grant(request, ctx, document_id, name, "read-document")
    page = await _list(ctx, document_id, name, since, limit, include_tombstones=True)
    wait_s = min(wait, ctx.settings.max_wait_s)
    if page.records or wait_s <= 0:
        return page_json(page)
    woke = await ctx.notifier.wait_past(document_id, name, since, page.layer.revision, wait_s)
    if woke:
        page = await _list(ctx, document_id, name, since, limit, include_tombstones=True)
    return page_json(page)


def _parse_sync_body(raw: bytes) -> dict:
    """Validate the request envelope; per-change problems are left to the rules."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_request(f"body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise invalid_request("body must be a JSON object")
    epoch, since = body.get("epoch"), body.get("since", 0)
    changes = body.get("changes", [])
    if epoch is not None and not isinstance(epoch, str):
        raise invalid_request("epoch must be a string or null")
    if not isinstance(since, int) or isinstance(since, bool) or since < 0:
        raise invalid_request("since must be a non-negative integer")
    if not isinstance(changes, list):
        raise invalid_request("changes must be an array")
    for index, change in enumerate(changes):
        if not isinstance(change, dict) or not is_valid_record_id(change.get("change_id")):
            raise invalid_request(f"changes[{index}] needs a string change_id of 1..128 characters",
                                  index=index)
    return {"epoch": epoch, "since": since, "changes": changes,
            "client_id": body.get("client_id")}


@router.post(_LAYER_PATH + "/sync")
async def layer_sync(document_id: str, layer: str, request: Request,
                     ctx: AppContext = Depends(get_context)) -> dict:
    """Push changes and pull server changes in one round trip (see module docs)."""
    name = layer_from_segment(layer)
    grant = _grant(request, ctx, document_id, name, "read-document")
    body = _parse_sync_body(await read_body(request, ctx.settings.max_request_bytes))
    if body["changes"]:
        grant.require(document_id, name, "write")

    def push():
        with ctx.storage.write_layer(document_id, name) as writer:
            if body["epoch"] is not None and body["epoch"] != writer.layer.epoch:
                return writer.layer, None
            result = apply_changes(writer, body["changes"], grant.user_id)
            return writer.layer, result  # the layer as of after the writes

    try:
        layer_state, result = await run_in_threadpool(push)
    except DocumentNotFound:
        raise not_found(f"no document {document_id!r}") from None
    if result is None:
        return {"epoch": layer_state.epoch, "revision": layer_state.revision, "accepted": [],
                "rejected": [], "changes": [], "has_more": False, "next_since": 0,
                "epoch_changed": True}
    if result.wrote:
        await ctx.notifier.published(document_id, name, layer_state.revision)
    page = await _list(ctx, document_id, name, body["since"], None, include_tombstones=True,
                       exclude=frozenset(result.own_revisions))
    return {"epoch": page.layer.epoch, "revision": page.layer.revision,
            "accepted": result.accepted, "rejected": result.rejected,
            "changes": [r.to_wire() for r in page.records],
            "has_more": page.has_more, "next_since": page.next_since, "epoch_changed": False}
