"""What the dashboard reuses of the admin API: one module, so that when the admin
routes or the PDF modules move, only these imports change.

Uploads, deletions and exports go through the admin API's own route functions (same
checks, same long-poll wake-ups, same export), called with the dashboard's request
and the app context; reads go to the storage interface directly.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from layersync_server.context import AppContext
from layersync_server.routes.admin import documents, exports


async def upload_document(request: Request, ctx: AppContext) -> dict:
    """``POST /api/documents`` with this multipart ``request`` (``file``, ``title``?,
    ``document_id``?): the stored document as the admin API describes it."""
    return (await documents.upload_document(request, document_id=None, title=None, ctx=ctx))["data"]


async def delete_document(document_id: str, ctx: AppContext) -> None:
    """``DELETE /api/documents/{document_id}`` (404 when unknown)."""
    await documents.delete_document(document_id, ctx=ctx)


async def export_pdf(ctx: AppContext, document_id: str, layer: str) -> Response:
    """``GET /api/documents/{document_id}/layers/{layer}/pdf``: the PDF with the
    layer's annotations written in."""
    return await exports.layer_pdf_response(ctx, document_id, layer)


async def instant_json(ctx: AppContext, document_id: str, layer: str) -> dict:
    """``GET /api/documents/{document_id}/layers/{layer}/document.json``."""
    return await exports.layer_instant_json_document(ctx, document_id, layer)
