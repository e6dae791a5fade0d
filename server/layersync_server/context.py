"""Per-application objects shared by the routes, and small request helpers."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from layersync_server.auth import JwtVerifier
from layersync_server.errors import invalid_request, not_found, payload_too_large
from layersync_server.ids import is_valid_document_id, is_valid_layer_name
from layersync_server.notify import LayerNotifier
from layersync_server.settings import Settings
from layersync_server.storage import Storage

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
    then wake the layer's long-polls if the revision moved. Returns
    ``(layer_state_after, work_result)``.

    Raises:
        ApiError: 404 when the document does not exist; whatever ``work`` raises.
    """
    from starlette.concurrency import run_in_threadpool

    from layersync_server.storage import DocumentNotFound

    def run():
        with ctx.storage.write_layer(document_id, layer) as writer:
            before = writer.layer.revision
            result = work(writer)
            return writer.layer, before, result

    try:
        state, before, result = await run_in_threadpool(run)
    except DocumentNotFound:
        raise no_document(document_id) from None
    if state.revision != before:
        await ctx.notifier.published(document_id, layer, state.revision)
    return state, result


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
