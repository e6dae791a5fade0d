"""Per-application objects shared by the routes, and small request helpers."""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from fastapi import Request

from layersync_server.auth import JwtVerifier
from layersync_server.errors import invalid_request, not_found, payload_too_large
from layersync_server.ids import is_valid_document_id, is_valid_layer_name
from layersync_server.notify import LayerNotifier
from layersync_server.settings import Settings
from layersync_server.storage import DocumentNotFound, Storage

#: The default layer (name "") is written "~" in paths (docs/protocol.md, Conventions).
DEFAULT_LAYER_SEGMENT = "~"


@dataclass
class AppContext:
    """Everything a route needs; one per app, stored in ``app.state.ctx``."""

    settings: Settings
    storage: Storage
    verifier: JwtVerifier
    notifier: LayerNotifier


def get_context(request: Request) -> AppContext:
    """FastAPI dependency returning the app's :class:`AppContext`."""
    return request.app.state.ctx


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


async def commit(ctx: "AppContext", document_id: str, layer: str, work):
    """Run ``work(writer)`` in one write transaction on the layer (in a worker thread),
    then wake the layer's long-polls if the revision moved (before this coroutine
    resumes). Returns ``(layer_state_after, work_result)``.

    When long-polls wait on the layer, the same worker thread also reads the page they
    would re-read (records past the revision before the commit) and hands it to them
    through :meth:`LayerNotifier.published`, so they answer without another thread hop
    and query (see :mod:`layersync_server.notify`).

    Raises:
        ApiError: 404 when the document does not exist; whatever ``work`` raises.
    """
    storage, notifier = ctx.storage, ctx.notifier
    loop = asyncio.get_running_loop()

    def run():
        with storage.write_layer(document_id, layer) as writer:
            before = writer.layer.revision
            result = work(writer)
        state = writer.layer
        if state.revision != before:
            page = None
            if notifier.has_waiters(document_id, layer):
                try:
                    page = storage.list_records(document_id, layer, before,
                                                ctx.settings.max_page_records, True)
                except Exception:  # noqa: BLE001 — only an optimisation: the waiters re-read
                    page = None
            # Wake from here rather than after the hop back: the waiters run before this
            # request resumes, and a cancelled request still wakes them.
            with contextlib.suppress(RuntimeError):  # the loop closed (shutting down)
                loop.call_soon_threadsafe(notifier.publish, document_id, layer, state.revision,
                                          page, before)
        return state, result

    try:
        return await run_in_worker(run)
    except DocumentNotFound:
        raise no_document(document_id) from None


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
