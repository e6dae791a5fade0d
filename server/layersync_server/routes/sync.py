"""Client sync API under ``/sync/v1`` — the contract in docs/protocol.md.

All storage calls are blocking and run in Starlette's threadpool; long-polls wait on
:class:`~layersync_server.notify.LayerNotifier` without holding a thread.
"""

from __future__ import annotations

import asyncio
import hashlib

from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from layersync_server import SERVER_NAME, __version__
from layersync_server import openapi_bodies as bodies
from layersync_server.auth import Grant
from layersync_server.changes import apply_changes
from layersync_server.context import (INLINE_MAX_RECORDS, AppContext, check_document_id, commit,
                                      get_context, layer_from_segment, no_document,
                                      read_body, read_inline_first, run_in_worker)
from layersync_server.errors import (COMMON_ERROR_RESPONSES, ApiError, access_denied,
                                     error_responses, invalid_request, not_found)
from layersync_server.openapi_bodies import media, ok
from layersync_server.ids import all_valid_record_ids, is_sha256_hex, is_valid_record_id
from layersync_server.wire_json import (MAX_JSON_DEPTH, MAX_NUMBER_CHARS, MAX_REVISION,
                                        WireJSONResponse, WireRoute, parse_json,
                                        parse_sync_json)
from layersync_server.storage import DocumentNotFound, RecordPage
from layersync_server.storage.base import WriteWouldWait

router = APIRouter(prefix="/sync/v1", tags=["sync"], responses=COMMON_ERROR_RESPONSES,
                   route_class=WireRoute, default_response_class=WireJSONResponse)
CAPABILITIES = ["long-poll", "snapshot-paging", "attachments", "history", "rollback",
                "deleted-restore"]
_LAYER_PATH = "/documents/{document_id}/layers/{layer:path}"


def _wire(body: dict) -> WireJSONResponse:
    """The response for ``body``, encoded once by the stdlib encoder. Returning it
    directly skips FastAPI's ``jsonable_encoder`` walk over every value (a route with
    no response model still gets one), which cost about 40% of the server's CPU under
    bench scenario 6 and a large share of a big push's response."""
    return WireJSONResponse(body)


def page_json(page: RecordPage) -> dict:
    """``{"epoch", "revision", "records", "has_more", "next_since"}`` of a page."""
    return {"epoch": page.layer.epoch, "revision": page.layer.revision,
            "records": [r.to_wire() for r in page.records],
            "has_more": page.has_more, "next_since": page.next_since}


async def _grant(request: Request, ctx: AppContext, document_id: str, layer: str | None,
                 permission: str, check_revoked: bool = True) -> Grant:
    """Verify the JWT and check it grants ``document_id``/``layer``/``permission`` and
    is not revoked. 401 without a token, 403 otherwise, 400 on a malformed id.

    ``check_revoked=False`` leaves the revocation check (a storage read) to the caller,
    which then makes it in its own worker-thread hop (:func:`_list`'s ``revoked_jti``).
    """
    check_document_id(document_id)
    grant = ctx.verifier.verify(request.headers.get("authorization"))
    grant.require(document_id, layer, permission)
    if check_revoked and grant.jti is not None and await run_in_worker(ctx.storage.is_token_revoked,
                                                                       grant.jti):
        raise access_denied("token revoked")
    return grant


def _page_size(ctx: AppContext, limit: int | None) -> int:
    return min(limit or ctx.settings.max_page_records, ctx.settings.max_page_records)


async def _list(ctx: AppContext, document_id: str, layer: str, since: int, limit: int | None,
                include_tombstones: bool, exclude: frozenset[int] = frozenset(),
                revoked_jti: str | None = None, inline: bool = False) -> RecordPage:
    """A page of records (in a worker thread). With ``revoked_jti``, first refuses a
    revoked token (403, as :func:`_grant` would) in the same hop. ``inline``: first try
    reading at most ``INLINE_MAX_RECORDS`` on the event loop (:func:`read_inline_first`);
    a page that has more than that is read again, whole, in a worker."""
    storage, page_size = ctx.storage, _page_size(ctx, limit)

    def read(size: int = page_size) -> RecordPage:
        if revoked_jti is not None and storage.is_token_revoked(revoked_jti):
            raise access_denied("token revoked")
        return storage.list_records(document_id, layer, since, size, include_tombstones, exclude)

    def read_small() -> RecordPage | None:
        size = min(page_size, INLINE_MAX_RECORDS)
        page = read(size)
        return page if size == page_size or not page.has_more else None

    try:
        if inline:
            return await read_inline_first(storage, read_small, read)
        return await run_in_worker(read)
    except DocumentNotFound:
        raise not_found(f"no document {document_id!r}") from None


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
            "capabilities": CAPABILITIES}


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
                        ctx: AppContext = Depends(get_context)) -> WireJSONResponse:
    """Snapshot (``since=0``: no tombstones) or delta (tombstones included), paged."""
    name = layer_from_segment(layer)
    await _grant(request, ctx, document_id, name, "read-document")
    page = await _list(ctx, document_id, name, since, limit, include_tombstones=since > 0)
    return _wire(page_json(page))


@router.get(_LAYER_PATH + "/changes",
            responses=ok(bodies.RecordPageOut, "a page of records (empty when the wait ended)"))
async def layer_changes(document_id: str, layer: str, request: Request,
                        since: int = Query(0, ge=0, le=MAX_REVISION),
                        wait: float = Query(0, ge=0, allow_inf_nan=False),
                        limit: int | None = Query(None, ge=1),
                        ctx: AppContext = Depends(get_context)) -> WireJSONResponse:
    """Long-poll: answer at once if there are records past ``since``, else hold up to
    ``wait`` seconds (capped at ``max_wait_s``) until a commit to the layer."""
    name = layer_from_segment(layer)
    grant = await _grant(request, ctx, document_id, name, "read-document", check_revoked=False)
    page = await _list(ctx, document_id, name, since, limit, include_tombstones=True,
                       revoked_jti=grant.jti, inline=True)
    wait_s = min(wait, ctx.settings.max_wait_s)
    if page.records or wait_s <= 0:
        return _wire(page_json(page))
    woke, handed = await ctx.notifier.wait_for_change(document_id, name, since, page.layer, wait_s,
                                                      _page_size(ctx, limit))
    if handed is not None:  # the page the commit that woke us read for us (notify.py)
        page = handed
    elif woke:
        page = await _list(ctx, document_id, name, since, limit, include_tombstones=True, inline=True)
    return _wire(page_json(page))


def _parse_sync_body(raw: bytes) -> dict:
    """Validate the request envelope; per-change problems (bad numbers, too deep
    content, bad ids...) are left to the rules, which reject that change only.
    ``checked`` says the parse found no bad number or lone surrogate anywhere and no
    nesting past ``MAX_JSON_DEPTH + 3`` (body, ``changes``, change, then the content,
    whose levels count from 1): every content passes ``json_problem`` already.
    ``content_texts``: the stored text of each change's content, or None
    (:func:`~layersync_server.wire_json.parse_sync_json`)."""
    body, checked, texts = parse_sync_json(raw, MAX_JSON_DEPTH)
    if not isinstance(body, dict):
        raise invalid_request("body must be a JSON object")
    epoch, since = body.get("epoch"), body.get("since", 0)
    changes = body.get("changes", [])
    if epoch is not None and not isinstance(epoch, str):
        raise invalid_request("epoch must be a string or null")
    if not _is_revision(since):
        raise invalid_request(f"since must be an integer 0..{MAX_REVISION}")
    if not isinstance(changes, list):
        raise invalid_request("changes must be an array")
    if not (all(type(change) is dict for change in changes)
            and all_valid_record_ids([change.get("change_id") for change in changes])):
        _check_change_ids(changes)  # finds the first bad one
    client_id = body.get("client_id")
    return {"epoch": epoch, "since": since, "changes": changes, "checked": checked,
            "content_texts": texts,
            "client_id": client_id if isinstance(client_id, str) else None}


def _check_change_ids(changes: list) -> None:
    """400 for the first change that is not an object with a valid ``change_id``."""
    for index, change in enumerate(changes):
        if not isinstance(change, dict) or not is_valid_record_id(change.get("change_id")):
            raise invalid_request(f"changes[{index}] needs a string change_id of 1..128 characters "
                                  "without control characters or lone surrogates", index=index)


#: Largest request body whose changes :func:`commit` may write on the event loop thread.
INLINE_MAX_BODY_BYTES = 64 * 1024


def _bounded_size(raw: bytes, changes: list) -> int | None:
    """The number of changes for :func:`commit`, when what they write is known to be small
    (a body of at most :data:`INLINE_MAX_BODY_BYTES`, no delete); else None, which keeps
    the write off the event loop. A delete is unbounded: deleting a root annotation
    deletes all of its comments (ARCHITECTURE.md §4 rule 3), thousands of rows that would
    stall every other request of the process (20,000 comments: ~0.5 s on the loop). A
    pull without changes has no propagation to hurry and may answer a whole page (a new
    client's ``since=0``), so it stays off the loop too."""
    if (not changes or len(raw) > INLINE_MAX_BODY_BYTES
            or any(change.get("op") == "delete" for change in changes)):
        return None
    return len(changes)


def _answer_page(writer, since: int, limit: int, exclude: frozenset[int],
                 maybe_inline: bool) -> RecordPage:
    """The push answer's page: ``writer.changes_since(since, limit, exclude)``. On the
    event loop thread (``maybe_inline``: :func:`commit` may run the push there) it reads
    at most :data:`INLINE_MAX_RECORDS` records: a client that is behind may be owed a
    whole page, which is read in a worker instead (:class:`WriteWouldWait` makes
    :func:`commit` roll back and run the push again there), so the answer is the same
    and the loop never reads a large page."""
    if maybe_inline and limit > INLINE_MAX_RECORDS and _on_event_loop():
        page = writer.changes_since(since, INLINE_MAX_RECORDS, exclude)
        if page.has_more:
            raise WriteWouldWait()
        return page  # all of them: the same page as with ``limit``
    return writer.changes_since(since, limit, exclude)


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # a worker thread
        return False
    return True


def _is_revision(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REVISION


@router.post(_LAYER_PATH + "/sync", openapi_extra=bodies.SYNC,
             responses=ok(bodies.SyncOut, "outcomes of the pushed changes, and server changes"))
async def layer_sync(document_id: str, layer: str, request: Request,
                     ctx: AppContext = Depends(get_context)) -> WireJSONResponse:
    """Push changes and pull server changes in one round trip (see module docs)."""
    name = layer_from_segment(layer)
    grant = await _grant(request, ctx, document_id, name, "read-document")
    raw = await read_body(request, ctx.settings.max_request_bytes)
    body = _parse_sync_body(raw)
    if body["changes"]:
        grant.require(document_id, name, "write")

    bounded = _bounded_size(raw, body["changes"])

    def push(writer):
        if body["epoch"] is not None and body["epoch"] != writer.layer.epoch:
            return None
        result = apply_changes(writer, body["changes"], grant.user_id, body["checked"],
                               body["content_texts"])
        # the answer's page, read in the same transaction (no second worker hop/query)
        return result, _answer_page(writer, body["since"], _page_size(ctx, None),
                                    frozenset(result.own_revisions), bounded is not None)

    layer_state, pushed = await commit(ctx, document_id, name, push, bounded)
    if pushed is None:
        return _wire({"epoch": layer_state.epoch, "revision": layer_state.revision, "accepted": [],
                      "rejected": [], "changes": [], "has_more": False, "next_since": 0,
                      "epoch_changed": True})
    result, page = pushed
    return _wire({"epoch": page.layer.epoch, "revision": page.layer.revision,
                  "accepted": result.accepted, "rejected": result.rejected,
                  "changes": [r.to_wire() for r in page.records],
                  "has_more": page.has_more, "next_since": page.next_since, "epoch_changed": False})


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
    await _grant(request, ctx, document_id, None, "read-document")
    found = await run_in_threadpool(ctx.storage.get_attachment, document_id, sha256)
    if found is None:
        raise not_found(f"no attachment {sha256} in document {document_id!r}")
    return Response(found.data, media_type=found.content_type, headers={"ETag": f'"{sha256}"'})


# -- history, rollback, deleted list, restore ------------------------------------------------

async def _json_body(request: Request, ctx: AppContext) -> dict:
    raw = await read_body(request, ctx.settings.max_request_bytes)
    if not raw.strip():
        return {}
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise invalid_request("body must be a JSON object")
    return body


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
    await _grant(request, ctx, document_id, name, "read-document")
    state = await run_in_threadpool(ctx.storage.get_layer, document_id, name)
    versions = await run_in_threadpool(ctx.storage.record_history, document_id, name, record_id)
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
    await _grant(request, ctx, document_id, name, "read-document")
    page_size = min(limit or ctx.settings.max_page_records, ctx.settings.max_page_records)
    try:
        page = await run_in_threadpool(ctx.storage.list_records, document_id, name, since,
                                       page_size, True, frozenset(), True)
    except DocumentNotFound:
        raise no_document(document_id) from None
    body = page_json(page)

    def last_contents():
        out = []
        for record in page.records:
            live = [v for v in ctx.storage.record_history(document_id, name, record.id) if not v.deleted]
            out.append(live[0].content if live else None)
        return out

    for entry, content in zip(body["records"], await run_in_threadpool(last_contents)):
        entry["last_content"] = content
    return body


def _conflict(message: str, server_record) -> ApiError:
    return ApiError(409, "conflict", message,
                    {"server_record": server_record.to_wire() if server_record else None})


async def _write_version(ctx: AppContext, document_id: str, layer: str, record_id: str,
                         grant: Grant, body: dict, pick) -> dict:
    """Shared part of rollback and restore: check ``base_revision``, pick the version
    with ``pick(current, history)``, write its content as a new revision."""
    base = body.get("base_revision")
    if base is not None and not _is_revision(base):
        raise invalid_request(f"base_revision must be an integer 0..{MAX_REVISION}")

    def work(writer):
        current = writer.get_record(record_id)
        if current is None:
            raise not_found(f"no record {record_id!r}")
        if base is not None and current.revision != base:
            raise _conflict(f"record changed at revision {current.revision}", current)
        content = pick(current, writer.history(record_id))
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
    version R is a deletion. Needs ``write``."""
    name = layer_from_segment(layer)
    _check_record_id(record_id)
    grant = await _grant(request, ctx, document_id, name, "write")
    body = await _json_body(request, ctx)
    target = body.get("revision")
    if not _is_revision(target) or target < 1:
        raise invalid_request(f"revision must be an integer 1..{MAX_REVISION}")

    def pick(_current, history):
        for version in history:
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
    the record is not deleted; 404 when it never existed or no live version is kept.
    Needs ``write``."""
    name = layer_from_segment(layer)
    _check_record_id(record_id)
    grant = await _grant(request, ctx, document_id, name, "write")
    body = await _json_body(request, ctx)

    def pick(current, history):
        if not current.deleted:
            raise _conflict("record is not deleted", current)
        for version in history:
            if not version.deleted:
                return version.content
        raise not_found(f"no live version of record {record_id!r} is kept")

    return await _write_version(ctx, document_id, name, record_id, grant, body, pick)
