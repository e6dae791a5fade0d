"""Per-application objects shared by the routes, and small request helpers."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from layersync_server.auth import JwtVerifier
from layersync_server.errors import invalid_request, payload_too_large
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
    return "" if segment == DEFAULT_LAYER_SEGMENT else segment


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
