"""Admin API: one page of a document (its annotations, its rendering) and a
document's attachments, as Document Engine's routes define them.

- ``GET .../pages/{pageIndex}/annotations`` (default layer and ``.../layers/{layerName}``):
  ``{"data": {"annotations": [AnnotationRecord], "truncated"}}``, the first 1000 live
  annotations of the page (``content.pageIndex``; comments, bookmarks and form field
  records are not annotations); ``Accept: application/x-ndjson`` streams them all, one
  per line. 404 when the page does not exist.
- ``GET .../pages/{pageIndex}/image?width=|height=``: the page of the layer's exported
  PDF (annotations drawn) rendered by PDFium as PNG, exactly ``width`` or ``height``
  pixels (one of them, else 400), the other side keeping the page's aspect ratio.
  Shares the dashboard's renderer and caches (:mod:`layersync_server.dashboard.render`).
- ``GET /documents/{id}/attachments/{attachmentId}``: an attachment's bytes (the
  SHA-256 hex is its id), with the media type it was stored with.
"""

from __future__ import annotations

from fastapi import Depends, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from layersync_server.context import AppContext, layer_from_segment
from layersync_server.dashboard.render import ImageTooLarge, app_page_images
from layersync_server.errors import invalid_request, not_found
from layersync_server.openapi_bodies import media
from layersync_server.record_kinds import is_annotation
from layersync_server.routes.admin import exports
from layersync_server.routes.admin.annotations import annotation_listing
from layersync_server.routes.admin.common import DOC, LAYER, admin_router, find_document, require_admin


router = admin_router()

#: Largest side of a rendered page, pixels.
MAX_IMAGE_SIDE_PX = 8000
def is_page_annotation(content: dict, page_index: int) -> bool:
    """An annotation (:func:`~layersync_server.record_kinds.is_annotation`) on the page."""
    return content.get("pageIndex") == page_index and is_annotation(content)


async def _check_page(ctx: AppContext, document_id: str, page_index: int) -> None:
    info = await find_document(ctx, document_id)
    if not 0 <= page_index < info.page_count:
        raise not_found(f"page {page_index} is out of bounds (the document has {info.page_count} pages)")


async def _page_annotations(request: Request, ctx: AppContext, document_id: str, layer: str,
                            page_index: int):
    await _check_page(ctx, document_id, page_index)
    return await annotation_listing(request, ctx, document_id, layer,
                                    lambda content: is_page_annotation(content, page_index))


def _image_size(width: float | None, height: float | None) -> tuple[int | None, int | None]:
    if (width is None) == (height is None):
        raise invalid_request("give exactly one of the query parameters width and height")
    value = width if width is not None else height
    if not 1 <= value <= MAX_IMAGE_SIDE_PX:
        raise invalid_request(f"width and height must be 1..{MAX_IMAGE_SIDE_PX} pixels")
    return (round(width), None) if width is not None else (None, round(height))


async def _page_image(request: Request, ctx: AppContext, document_id: str, layer: str, page_index: int,
                      width: float | None, height: float | None) -> Response:
    width_px, height_px = _image_size(width, height)
    await _check_page(ctx, document_id, page_index)
    state = await run_in_threadpool(ctx.storage.get_layer, document_id, layer)
    if state is None:
        raise not_found(f"no layer {layer!r}")
    images = app_page_images(request.app)
    key = (document_id, layer, state.epoch, state.revision)
    pdf = images.exported(key)
    if pdf is None:
        pdf = (await exports.layer_pdf_response(ctx, document_id, layer)).body
        if await run_in_threadpool(ctx.storage.get_layer, document_id, layer) == state:
            images.keep_exported(key, pdf)  # nothing was written meanwhile: it shows ``state``
    try:
        png = await run_in_threadpool(images.png, key, pdf, page_index, width_px, height_px)
    except ImageTooLarge as exc:
        raise invalid_request(str(exc)) from None
    if png is None:
        raise not_found(f"page {page_index} could not be rendered")
    return Response(png, media_type="image/png",
                    headers={"LayerSync-Layer-Revision": str(state.revision)})


async def _attachment(ctx: AppContext, document_id: str, attachment_id: str) -> Response:
    await find_document(ctx, document_id)
    attachment = None
    if len(attachment_id) == 64 and all(c in "0123456789abcdef" for c in attachment_id.lower()):
        attachment = await run_in_threadpool(ctx.storage.get_attachment, document_id, attachment_id.lower())
    if attachment is None:
        raise not_found(f"no attachment {attachment_id!r}")
    return Response(attachment.data, media_type=attachment.content_type or "application/octet-stream",
                    headers={"ETag": f'"{attachment.sha256}"'})


_PAGE_ANNOTATIONS = {200: {"description": "the page's annotations (first 1000, or all as NDJSON)", "content": {
    "application/json": {"schema": {"type": "object", "required": ["data"], "properties": {"data": {
        "type": "object", "required": ["annotations", "truncated"], "properties": {
            "annotations": {"type": "array", "items": {"type": "object", "required": ["createdBy", "updatedBy"]}},
            "truncated": {"type": "boolean"}}}}}},
    "application/x-ndjson": {"schema": {"type": "object", "required": ["id", "content", "createdBy", "updatedBy"]}}}}}
_IMAGE = {200: media("image/png", "the rendered page")}


@router.get(DOC + "/pages/{page_index}/annotations", summary="Annotations of a page (default layer)",
            responses=_PAGE_ANNOTATIONS)
async def default_layer_page_annotations(document_id: str, page_index: int, request: Request,
                                         ctx: AppContext = Depends(require_admin)):
    return await _page_annotations(request, ctx, document_id, "", page_index)


@router.get(LAYER + "/pages/{page_index}/annotations", summary="Annotations of a page in a layer",
            responses=_PAGE_ANNOTATIONS)
async def layer_page_annotations(document_id: str, layer: str, page_index: int, request: Request,
                                 ctx: AppContext = Depends(require_admin)):
    return await _page_annotations(request, ctx, document_id, layer_from_segment(layer), page_index)


@router.get(DOC + "/pages/{page_index}/image", summary="A page rendered as PNG (default layer)",
            response_class=Response, responses=_IMAGE)
async def default_layer_page_image(document_id: str, page_index: int, request: Request,
                                   width: float | None = Query(None), height: float | None = Query(None),
                                   render_ap_streams: bool = Query(False),
                                   ctx: AppContext = Depends(require_admin)) -> Response:
    """``render_ap_streams`` is accepted; annotations are always drawn (from the
    appearance streams the export writes)."""
    return await _page_image(request, ctx, document_id, "", page_index, width, height)


@router.get(LAYER + "/pages/{page_index}/image", summary="A page rendered as PNG (a layer)",
            response_class=Response, responses=_IMAGE)
async def layer_page_image(document_id: str, layer: str, page_index: int, request: Request,
                           width: float | None = Query(None), height: float | None = Query(None),
                           render_ap_streams: bool = Query(False),
                           ctx: AppContext = Depends(require_admin)) -> Response:
    return await _page_image(request, ctx, document_id, layer_from_segment(layer), page_index, width, height)


@router.get(DOC + "/attachments/{attachment_id}", summary="An attachment's bytes",
            response_class=Response, responses={200: media("*/*", "the attachment, with the media type it was stored with")})
async def attachment(document_id: str, attachment_id: str, ctx: AppContext = Depends(require_admin)) -> Response:
    return await _attachment(ctx, document_id, attachment_id)
