"""Admin API: layers of a document (list, create from the base layer, a copy or Instant
JSON, delete)."""

from __future__ import annotations

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from layersync_server import openapi_bodies as bodies
from layersync_server.context import AppContext, layer_from_segment
from layersync_server.errors import ApiError, invalid_request, not_found
from layersync_server.errors_http import error_responses
from layersync_server.ids import is_valid_layer_name
from layersync_server.openapi_bodies import ok
from layersync_server.pdf.import_ import import_pdf
from layersync_server.routes.admin.common import (INSTANT_JSON_PART, admin_router, find_document,
                                                  form_body, instant_json_entries, json_body,
                                                  json_part, require_admin)
from layersync_server.storage import LayerExists, LayerState


router = admin_router()

def _layer_created(state: LayerState, record_count: int) -> dict:
    """Document Engine's ``LayerCreated`` (``name``, ``errors``) plus LayerSync's
    ``epoch``, ``revision`` and ``recordCount``."""
    return {"name": state.name, "errors": [], "epoch": state.epoch, "revision": state.revision,
            "recordCount": record_count}


@router.get("/documents/{document_id}/layers", summary="List layers",
            responses=ok(bodies.LayerListOut, "the layers' names"))
async def list_layers(document_id: str, ctx: AppContext = Depends(require_admin)) -> dict:
    """``{"data": ["", "review", ...]}`` (Document Engine's ``list-layers``): names, the
    default layer is ``""``. A layer's counters: ``.../layers/{layer}/document_info``."""
    await find_document(ctx, document_id)
    layers = await run_in_threadpool(ctx.storage.list_layers, document_id)
    return {"data": [state.name for state in layers]}


async def _layer_request(request: Request, ctx: AppContext) -> dict:
    """The body of a create-layer request: JSON (``LayerCreateWithSourceLayer``, plus
    LayerSync's ``instant_json`` and ``user_id``) or multipart with ``name``,
    ``source_layer_name`` and an ``instant.json`` part
    (``LayerCreateWithSourceLayerAndInstantJson``)."""
    form = await form_body(request, ctx)
    if form is None:
        body = await json_body(request, ctx)
        if not isinstance(body, dict):
            raise invalid_request("body must be a JSON object")
        return body
    body = {key: form.get(key) for key in ("name", "source_layer_name", "user_id")
            if isinstance(form.get(key), str)}
    body["instant_json"] = await json_part(form, INSTANT_JSON_PART)
    return body


@router.post("/documents/{document_id}/layers", summary="Create a layer",
             responses={**ok(bodies.LayerOut, "the new layer"), **error_responses(409)},
             openapi_extra=bodies.CREATE_LAYER)
async def create_layer(document_id: str, request: Request,
                       ctx: AppContext = Depends(require_admin)) -> dict:
    """Body ``{"name": "review", "source_layer_name": "other"?, "instant_json": {...}?}``
    or multipart with ``name``, ``source_layer_name`` and an ``instant.json`` part;
    ``"name": ""`` is the default layer (created with the document; 409 unless deleted).
    Answers ``{"data": {"name", "errors": [], "epoch", "revision", "recordCount"}}``.

    Without ``source_layer_name``, or when no such layer exists (as Document Engine
    does), the layer starts from the base layer (the PDF's own annotations, same ids as
    the import); with an existing one, from a copy of that layer's live records.
    Instant JSON annotations are then applied on top (same id replaces). 409
    ``layer_exists`` when the name is taken. The one way to bring a deleted layer
    back (no client request re-creates it): its tombstone is cleared and it gets a new
    epoch, so clients re-download it.
    """
    info = await find_document(ctx, document_id)
    body = await _layer_request(request, ctx)
    name, source = body.get("name"), body.get("source_layer_name")
    if not is_valid_layer_name(name):
        raise invalid_request("name must be \"\" (the default layer) or 1..128 characters without "
                              "control characters, '/' or '\\\\', and not '.', '..' or '~'")
    if source is not None and (not isinstance(source, str) or not is_valid_layer_name(source)):
        raise invalid_request("source_layer_name must be a layer name")
    extra = instant_json_entries(body["instant_json"], info.page_count) \
        if body.get("instant_json") is not None else []
    if source is not None and await run_in_threadpool(ctx.storage.get_layer, document_id, source) is None:
        source = None  # Document Engine: "the base layer is assumed instead"
    if source is None:
        pdf = await run_in_threadpool(ctx.storage.read_pdf, document_id)
        imported = await run_in_threadpool(import_pdf, pdf)
        records = imported.layer_records
    else:
        records = [r.content for r in
                   await run_in_threadpool(lambda: list(ctx.storage.iter_records(document_id, source)))]
    by_id = {c["id"]: c for c in records}
    for content in extra:
        by_id[content["id"]] = content
    user_id = body.get("user_id") if isinstance(body.get("user_id"), str) else None
    try:
        state = await run_in_threadpool(ctx.storage.create_layer, document_id, name,
                                        list(by_id.values()), user_id)
    except LayerExists:
        raise ApiError(409, "layer_exists", f"layer {name!r} exists") from None
    ctx.notifier.forget(document_id, name)  # a new epoch: no revision of a deleted one counts
    await ctx.notifier.published(document_id, name, state.revision)
    return {"data": _layer_created(state, len(by_id))}


@router.delete("/documents/{document_id}/layers/{layer}", summary="Delete a layer",
               responses=ok(bodies.LayerDeletedOut, "deleted"))
async def delete_layer(document_id: str, layer: str, ctx: AppContext = Depends(require_admin)) -> dict:
    """Deletes the layer's records and history and leaves a tombstone: from then on
    client requests on it (sync, records, a parked or new long-poll) answer 404
    ``not_found`` instead of re-creating it, until ``POST .../layers`` creates it again
    (a new epoch, so clients re-download). 404 when it does not exist."""
    name = layer_from_segment(layer)
    await find_document(ctx, document_id)
    state = await run_in_threadpool(ctx.storage.get_layer, document_id, name)
    if state is None or not await run_in_threadpool(ctx.storage.delete_layer, document_id, name):
        raise not_found(f"no layer {name!r}")
    # wake its long-polls (they re-read and get 404) and forget its revision: a layer
    # created again counts from 0
    ctx.notifier.forget(document_id, name)
    return {"data": {"name": name, "deleted": True}}
