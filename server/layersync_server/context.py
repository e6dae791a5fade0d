"""Per-application objects shared by the routes, and small request helpers."""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from fastapi import Request

from layersync_server.auth import AdminSecretGuard, JwtVerifier
from layersync_server.errors import invalid_request, not_found, payload_too_large
from layersync_server.ids import is_valid_document_id, is_valid_layer_name
from layersync_server.notify import LayerNotifier
from layersync_server.settings import Settings
from layersync_server.storage import DocumentNotFound, LayerDeleted, Storage
from layersync_server.storage.base import WriteWouldWait
from layersync_server.wire_json import parse_json

#: The default layer (name "") is written "~" in paths (docs/protocol.md, Conventions).
DEFAULT_LAYER_SEGMENT = "~"


@dataclass
class AppContext:
    """Everything a route needs; one per app, stored in ``app.state.ctx``."""

    settings: Settings
    storage: Storage
    verifier: JwtVerifier
    notifier: LayerNotifier
    #: failed admin secrets per client address (None: built from ``settings``)
    admin_guard: AdminSecretGuard | None = None

    def __post_init__(self) -> None:
        if self.admin_guard is None:
            self.admin_guard = AdminSecretGuard(self.settings.admin_max_failures,
                                                self.settings.admin_failure_window_s)


def get_context(request: Request) -> AppContext:
    """FastAPI dependency returning the app's :class:`AppContext`."""
    return request.app.state.ctx


def client_address(request: Request) -> str:
    """The request's client address (host only; behind a trusted proxy, uvicorn's proxy
    headers made it the ``X-Forwarded-For`` one), "" when unknown: what the admin-secret
    limit counts by (so every request without one shares a count: an in-process ASGI
    client; the server itself listens on TCP, where uvicorn always knows the peer)."""
    return request.client.host if request.client is not None else ""


#: Worker threads for blocking storage calls (as many as Starlette's thread pool allows).
WORKER_THREADS = 40
_workers: ThreadPoolExecutor | None = None


def run_in_worker(fn, *args):
    """Run the blocking ``fn(*args)`` in a worker thread; await the result.

    A plain executor hop: about a third cheaper than Starlette's ``run_in_threadpool``
    (anyio's capacity limiter and cancel scopes), and storage calls need neither. A
    cancelled caller stops waiting; the call itself runs to its end.
    """
    global _workers
    if _workers is None:
        _workers = ThreadPoolExecutor(WORKER_THREADS, thread_name_prefix="layersync-worker")
    return asyncio.get_running_loop().run_in_executor(_workers, fn, *args)


def layer_from_segment(segment: str) -> str:
    """Decode a ``{layer}`` path segment: ``~`` is the default layer ``""``.

    Raises:
        ApiError: 400 when the segment is empty.
    """
    if segment == "":
        raise invalid_request("layer segment is empty; the default layer is written '~'")
    name = "" if segment == DEFAULT_LAYER_SEGMENT else segment
    if not is_valid_layer_name(name):
        raise invalid_request("layer name must be 1..128 characters without control characters, "
                              "'/' or '\\', and not '.', '..' or '~'")
    return name


def check_document_id(document_id: str) -> str:
    """Validate a ``{document_id}`` path segment.

    Raises:
        ApiError: 400 when it is not 1..128 characters, or holds ``/``, ``\\``, control
            characters, or is ``.``, ``..`` or ``~``.
    """
    if not is_valid_document_id(document_id):
        raise invalid_request("document id must be 1..128 characters without control characters, "
                              "'/' or '\\', and not '.', '..' or '~'")
    return document_id


def no_document(document_id: str):
    """404 ``not_found`` for a missing document."""
    return not_found(f"no document {document_id!r}")


def deleted_layer(document_id: str, layer: str):
    """404 ``not_found`` for a layer that was deleted (``LayerDeleted``): no request
    brings it back by itself; the admin API's ``POST /api/documents/{id}/layers`` does."""
    return not_found(f"layer {layer!r} of document {document_id!r} was deleted")


#: Largest batch :func:`commit` may write on the event loop thread.
INLINE_MAX_CHANGES = 16
#: Largest page :func:`read_inline_first` reads on the event loop thread.
INLINE_MAX_RECORDS = 16


async def read_inline_first(storage, small, full):
    """``small()`` on the event loop thread when the storage can run it without waiting
    (SQLite's ``without_waiting``: a WAL reader never waits for writers, and a rare
    ``SQLITE_BUSY`` falls back), returning its result unless it is ``None`` ("needs the
    full read"); otherwise ``full()`` in a worker. For the long-poll's read, which is
    nearly always empty or a few records: it saves the worker hop (two thread
    hand-offs), so a long-poll parks — and a commit can hand it its page — sooner.
    """
    without_waiting = getattr(storage, "without_waiting", None)
    if without_waiting is not None:
        try:
            with without_waiting():
                result = small()
        except WriteWouldWait:
            result = None
        if result is not None:
            return result
    return await run_in_worker(full)


async def commit(ctx: "AppContext", document_id: str, layer: str, work,
                 changes: int | None = None):
    """Run ``work(writer)`` in one write transaction on the layer, then wake the layer's
    long-polls if the revision moved (before this coroutine resumes). Returns
    ``(layer_state_after, work_result)``.

    Where it runs: in a worker thread, except a small write (``changes``, the number of
    changes ``work`` writes when the caller knows it, at most
    :data:`INLINE_MAX_CHANGES`) on a storage that can make it without waiting (SQLite's
    ``without_waiting``: the write lock is free and no other process writes), which
    runs on the event loop thread: that saves the worker path's two thread hand-offs
    (~0.1 ms of the server's share of propagation on a 2-core machine). When the
    storage would wait, the worker path runs instead, so ``work`` may run twice (the
    first try rolled back) and must have no effect outside the transaction.

    When long-polls or stream subscriptions wait on the layer, the page they would re-read
    (records past the revision before the commit) is read right after the commit, on the
    same thread, and handed to them through :meth:`LayerNotifier.publish`, so they answer
    without another thread hop (see :mod:`layersync_server.notify`); they answer before
    this coroutine resumes.

    Raises:
        ApiError: 404 when the document does not exist or the layer was deleted; whatever
            ``work`` raises.
    """
    storage, notifier = ctx.storage, ctx.notifier
    loop = asyncio.get_running_loop()

    def run(wake):
        page = None
        with storage.write_layer(document_id, layer) as writer:
            before = writer.layer.revision
            result = work(writer)
            waiters = writer.layer.revision != before and notifier.has_waiters(document_id, layer)
        state = writer.layer
        if state.revision != before:
            if waiters:  # the page they would re-read, as of this commit
                try:
                    page = storage.list_records(document_id, layer, before,
                                                ctx.settings.max_page_records, True)
                except Exception:  # noqa: BLE001 — only an optimisation: the waiters re-read
                    page = None
            wake(notifier.publish, document_id, layer, state.revision, page, before)
        return state, result, waiters

    def wake_from_worker(*args):
        # Wake from the worker rather than after the hop back: the waiters run before
        # this request resumes, and a cancelled request still wakes them.
        with contextlib.suppress(RuntimeError):  # the loop closed (shutting down)
            loop.call_soon_threadsafe(*args)

    def wake_here(publish, *args):
        publish(*args)

    without_waiting = getattr(storage, "without_waiting", None)
    try:
        if without_waiting is not None and changes is not None and changes <= INLINE_MAX_CHANGES:
            try:
                with without_waiting():
                    state, result, waiters = run(wake_here)
            except WriteWouldWait:
                pass
            else:
                if waiters:  # let the woken long-polls answer first, as from the worker
                    await asyncio.sleep(0)
                return state, result
        state, result, _ = await run_in_worker(run, wake_from_worker)
        return state, result
    except DocumentNotFound:
        raise no_document(document_id) from None
    except LayerDeleted:
        raise deleted_layer(document_id, layer) from None


async def read_body(request: Request, max_bytes: int) -> bytes:
    """Read the request body, refusing more than ``max_bytes`` bytes.

    Checks ``Content-Length`` first so an oversized body is refused before it is read,
    then counts streamed bytes (chunked uploads).

    Raises:
        ApiError: 413 ``payload_too_large``; 400 on a malformed Content-Length.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > max_bytes:
                raise payload_too_large(max_bytes)
        except ValueError:
            raise invalid_request("malformed Content-Length") from None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise payload_too_large(max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json_object(request: Request, ctx: "AppContext") -> dict:
    """The request's body as a JSON object (at most ``max_request_bytes``); an empty body is
    ``{}``. Raises 400 ``invalid_request`` for JSON that is not an object."""
    raw = await read_body(request, ctx.settings.max_request_bytes)
    if not raw.strip():
        return {}
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise invalid_request("body must be a JSON object")
    return body


def replayed_request(request: Request, body: bytes) -> Request:
    """``request`` again with ``body`` as its whole body: a body read once (bounded, by
    :func:`read_body`) can then be parsed by Starlette (``.form()``) or handed on."""
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(request.scope, receive)
