"""Admin API: form fields and form field values, as Document Engine's ``Forms`` and
``Form Filling`` routes define them, on the default layer and on a named one.

A form field is a ``pspdfkit/form-field/...`` record of the layer (Instant JSON's
``FormField``: ``name``, ``label``, ``annotationIds``...); its widgets are the
``pspdfkit/widget`` records named in ``annotationIds`` or whose ``formFieldName`` is the
field's name. A value lives on the widgets (``value``), as ``apply_instant_json`` and the
PDF import keep it.

- ``GET .../form-fields`` → ``{"data": [FormFieldWithWidgets]}``; ``GET
  .../form-fields/{formFieldId}`` → one ``FormFieldWithWidgets`` (no envelope, as the
  spec has it).
- ``POST`` / ``PUT .../form-fields`` body ``{"formFields": [{id?, user_id?, group?,
  content}]}`` (``id`` required for ``PUT``) → ``BatchOperationResult`` with
  ``data: [{id}]``; an item that breaks the record schema, or names a taken (POST) or
  missing (PUT) id, is left out and listed in ``failingPaths`` (``$.formFields[i]``).
  The widgets in ``content.annotationIds`` get the field's ``formFieldName``.
- ``DELETE .../form-fields`` body ``{"formFieldIds": [...] | "all", "user_id"?}``: the
  fields and their widgets; 422 for another body.
- ``GET .../form-field-values`` → ``{"data": {"formFieldValues": [FormFieldValueRecord]}}``;
  ``POST .../form-field-values`` body ``{"formFieldValues": [{name, value}]}`` sets the
  values through ``apply_instant_json``'s path (one set of layer revisions); 422 when
  an entry is not ``{name, value}``.
"""

from __future__ import annotations

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from layersync_server.changes import delete_record, normalize_content
from layersync_server.context import AppContext, commit, layer_from_segment, replayed_request
from layersync_server.errors import ApiError, invalid_request, not_found
from layersync_server.errors_http import error_responses
from layersync_server.ids import is_valid_record_id, new_ulid
from layersync_server.openapi_bodies import json_body as body_doc
from layersync_server.openapi_bodies import media
from layersync_server.record_kinds import FORM_FIELD, FORM_FIELD_PREFIX, WIDGET_TYPE, kind_of
from layersync_formats.record_schema import record_schema_problem
from layersync_server.routes.admin import exports
from layersync_server.routes.admin.acroform import form_field_values
from layersync_server.routes.admin.common import (DOC, LAYER, admin_router, annotation_record,
                                                  as_unprocessable, data_envelope, find_document,
                                                  json_body, record_authors, require_admin, required_json_body,
                                                  unprocessable)
from layersync_server.storage import StoredRecord
from layersync_server.wire_json import MAX_JSON_DEPTH, dumps, json_problem


router = admin_router()

def is_form_field(content: dict | None) -> bool:
    return kind_of(content) == FORM_FIELD


def _widgets_of(field: dict, widgets: list[StoredRecord]) -> list[StoredRecord]:
    ids = field.get("annotationIds") if isinstance(field.get("annotationIds"), list) else []
    return [w for w in widgets if w.id in ids or (field.get("name") is not None
                                                   and w.content.get("formFieldName") == field.get("name"))]


def _with_widgets(record: StoredRecord, widgets: list[StoredRecord]) -> dict:
    """Document Engine's ``FormFieldWithWidgets``."""
    return {**annotation_record(record),
            "widgetAnnotations": [annotation_record(w) for w in _widgets_of(record.content, widgets)]}


async def _fields_and_widgets(ctx: AppContext, document_id: str, layer: str):
    await find_document(ctx, document_id)
    records = await run_in_threadpool(lambda: list(ctx.storage.iter_records(document_id, layer)))
    return ([r for r in records if is_form_field(r.content)],
            [r for r in records if r.content.get("type") == WIDGET_TYPE])


async def _list_fields(ctx: AppContext, document_id: str, layer: str) -> dict:
    fields, widgets = await _fields_and_widgets(ctx, document_id, layer)
    return data_envelope([_with_widgets(f, widgets) for f in fields])


async def _get_field(ctx: AppContext, document_id: str, layer: str, field_id: str) -> dict:
    fields, widgets = await _fields_and_widgets(ctx, document_id, layer)
    for field in fields:
        if field.id == field_id:
            return _with_widgets(field, widgets)
    raise not_found(f"no form field {field_id!r}")


def batch_result(done: list[str], failing: list[dict]) -> dict:
    """Document Engine's ``BatchOperationResult`` with ``data: [{id}]``."""
    result = "success" if not failing else "partial_failure" if done else "failure"
    return {"data": [{"id": i} for i in done], "result": result, "status": 200,
            "details": f"{len(done)} done, {len(failing)} failed", "failingPaths": failing}


def _field_item(item: object, index: int, update: bool) -> tuple[str, dict, str | None]:
    """``(id, content, user_id)`` of one ``FormFieldCreate``/``FormFieldUpdate``;
    raises ValueError with what is wrong."""
    if not isinstance(item, dict) or not isinstance(item.get("content"), dict):
        raise ValueError("content is required")
    content = item["content"]
    if update and not isinstance(item.get("id"), str):
        raise ValueError("id is required")
    record_id = item.get("id") or content.get("id") or new_ulid()
    if not is_valid_record_id(record_id):
        raise ValueError("id must be 1..128 characters without control characters")
    if not is_form_field(content):
        raise ValueError(f"content.type must start with {FORM_FIELD_PREFIX!r}")
    problem = json_problem(content, MAX_JSON_DEPTH) or record_schema_problem(content)
    if problem:
        raise ValueError(problem)
    user_id = item.get("user_id") if isinstance(item.get("user_id"), str) else None
    return record_id, normalize_content(record_id, content), user_id


async def _write_fields(request: Request, ctx: AppContext, document_id: str, layer: str,
                        update: bool) -> dict:
    await find_document(ctx, document_id)
    body = await json_body(request, ctx)
    items = body.get("formFields") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise invalid_request("formFields is required (an array)")
    parsed, failing = [], []
    for index, item in enumerate(items):
        try:
            parsed.append((index, *_field_item(item, index, update)))
        except ValueError as exc:
            failing.append({"path": f"$.formFields[{index}]", "details": str(exc)})

    def work(writer):
        done, refused = [], []
        for index, record_id, content, user_id in parsed:
            current = writer.get_record(record_id)
            exists = current is not None and not current.deleted
            if update != exists or (current is not None and not update):
                refused.append({"path": f"$.formFields[{index}]",
                                "details": f"no form field {record_id!r}" if update
                                else f"record {record_id!r} exists"})
                continue
            if exists and not is_form_field(current.content):
                refused.append({"path": f"$.formFields[{index}]",
                                "details": f"record {record_id!r} is not a form field"})
                continue
            writer.put_record(record_id, content, user_id)
            for widget_id in content.get("annotationIds") or []:
                widget = writer.get_record(widget_id) if isinstance(widget_id, str) else None
                if widget is not None and not widget.deleted and widget.content.get("type") == WIDGET_TYPE \
                        and widget.content.get("formFieldName") != content.get("name"):
                    writer.put_record(widget_id, {**widget.content, "formFieldName": content.get("name")},
                                      user_id)
            done.append(record_id)
        return done, refused

    _, (done, refused) = await commit(ctx, document_id, layer, work)
    return batch_result(done, sorted(failing + refused, key=lambda f: f["path"]))


async def _delete_fields(request: Request, ctx: AppContext, document_id: str, layer: str) -> dict:
    await find_document(ctx, document_id)
    body = await json_body(request, ctx)
    ids = body.get("formFieldIds") if isinstance(body, dict) else None
    if not (ids == "all" or (isinstance(ids, list) and all(isinstance(i, str) for i in ids))):
        raise unprocessable('formFieldIds must be an array of ids or "all"')
    user_id = body.get("user_id") if isinstance(body.get("user_id"), str) else None
    fields, widgets = await _fields_and_widgets(ctx, document_id, layer)
    wanted = [f.id for f in fields] if ids == "all" else ids

    def work(writer):
        done, failing = [], []
        for index, field_id in enumerate(wanted):
            current = writer.get_record(field_id) if is_valid_record_id(field_id) else None
            if current is None or current.deleted or not is_form_field(current.content):
                failing.append({"path": f"$.formFieldIds[{index}]", "details": f"no form field {field_id!r}"})
                continue
            delete_record(writer, field_id, user_id)
            for widget in _widgets_of(current.content, widgets):  # the field's widgets go with it
                live = writer.get_record(widget.id)
                if live is not None and not live.deleted:
                    delete_record(writer, widget.id, user_id)
            done.append(field_id)
        return done, failing

    _, (done, failing) = await commit(ctx, document_id, layer, work)
    return batch_result(done, failing)


async def _list_values(ctx: AppContext, document_id: str, layer: str) -> dict:
    await find_document(ctx, document_id)
    records = await run_in_threadpool(lambda: list(ctx.storage.iter_records(document_id, layer)))
    # as document.json's formFieldValues, each with the authors of the record it comes from
    return data_envelope({"formFieldValues": [{**value, **record_authors(record)}
                                              for value, record in form_field_values(records)]})


async def _set_values(request: Request, ctx: AppContext, document_id: str, layer: str) -> dict:
    body = await required_json_body(request, ctx, '{"formFieldValues": [...]}')
    items = body.get("formFieldValues") if isinstance(body, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) and "name" in i and "value" in i
                                              for i in items):
        raise unprocessable("formFieldValues must be an array of {name, value} objects")
    # the body again for apply_instant_json's path (read once above, bounded)
    replay = replayed_request(request, dumps({"formFieldValues": items}).encode())
    try:
        result = await exports._apply_instant_json(replay, ctx, document_id, layer, refuse_unknown_fields=True)
    except ApiError as exc:
        raise as_unprocessable(exc) from None
    return data_envelope({"formFieldValues": [{"name": i["name"], "value": i["value"]} for i in items],
                          "revision": result["data"]["revision"]})


# -- OpenAPI --------------------------------------------------------------------------------

_RECORD = {"type": "object", "required": ["id", "content"], "properties": {
    "id": {"type": "string"}, "content": {"type": "object"}, "createdBy": {"type": ["string", "null"]},
    "updatedBy": {"type": ["string", "null"]}, "group": {"type": ["string", "null"]}}}
_FIELD = {"type": "object", "required": ["id", "content", "widgetAnnotations"], "properties": {
    **_RECORD["properties"], "widgetAnnotations": {"type": "array", "items": _RECORD}}}
_BATCH = media("application/json", "BatchOperationResult with the ids done", {
    "type": "object", "required": ["data", "result", "status", "failingPaths"], "properties": {
        "data": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "string"}}}},
        "result": {"type": "string", "enum": ["success", "partial_failure", "failure"]},
        "status": {"type": "integer"}, "details": {"type": "string"},
        "failingPaths": {"type": "array", "items": {"type": "object", "properties": {
            "path": {"type": "string"}, "details": {"type": "string"}}}}}})
_FIELDS_BODY = body_doc({"type": "object", "required": ["formFields"], "properties": {
    "formFields": {"type": "array", "items": {"type": "object", "required": ["content"], "properties": {
        "id": {"type": "string"}, "user_id": {"type": ["string", "null"]},
        "group": {"type": ["string", "null"]}, "content": {"type": "object"}}}}}})
_DELETE_BODY = body_doc({"type": "object", "required": ["formFieldIds"], "properties": {
    "formFieldIds": {"oneOf": [{"type": "array", "items": {"type": "string"}},
                               {"type": "string", "enum": ["all"]}]},
    "user_id": {"type": ["string", "null"]}}})
_VALUES_BODY = body_doc({"type": "object", "required": ["formFieldValues"], "properties": {
    "formFieldValues": {"type": "array", "items": {"type": "object", "required": ["name", "value"],
                                                   "properties": {"name": {"type": "string"}, "value": {}}}}}})
_LISTED = {200: media("application/json", "the form fields with their widgets", {
    "type": "object", "required": ["data"], "properties": {"data": {"type": "array", "items": _FIELD}}})}
_ONE = {200: media("application/json", "the form field with its widgets", _FIELD)}
_VALUES = {200: media("application/json", "the form field values", {
    "type": "object", "required": ["data"], "properties": {"data": {
        "type": "object", "required": ["formFieldValues"], "properties": {"formFieldValues": {
            "type": "array", "items": {"type": "object", "required": ["v", "type", "name", "createdBy", "updatedBy"],
                                       "properties": {"name": {"type": "string"}, "value": {},
                                                      "createdBy": {"type": ["string", "null"]},
                                                      "updatedBy": {"type": ["string", "null"]}}}}}}}})}
_VALUES_SET = {200: media("application/json", "the values set and the layer revision", {
    "type": "object", "required": ["data"], "properties": {"data": {"type": "object", "properties": {
        "formFieldValues": {"type": "array"}, "revision": {"type": "integer"}}}}}), **error_responses(422)}


def _routes(prefix: str):
    """Register the routes under ``prefix`` (``DOC``, the default layer, or ``LAYER``, whose
    ``{layer}`` path segment names the layer)."""
    where = "the default layer" if prefix == DOC else "a layer"
    tag = "default" if prefix == DOC else "layer"

    def layer_of(request: Request) -> str:
        return "" if prefix == DOC else layer_from_segment(request.path_params["layer"])

    extra = {} if prefix == DOC else {"parameters": [
        {"name": "layer", "in": "path", "required": True, "schema": {"type": "string"}}]}

    def doc(more: dict | None = None) -> dict:
        found = {**(more or {})}
        if extra:
            found["parameters"] = extra["parameters"]
        return found

    @router.get(prefix + "/form-fields", summary=f"Form fields of {where}", responses=_LISTED,
                name=f"list_form_fields_{tag}", openapi_extra=doc())
    async def list_form_fields(request: Request, document_id: str, ctx: AppContext = Depends(require_admin)):
        return await _list_fields(ctx, document_id, layer_of(request))

    @router.post(prefix + "/form-fields", summary=f"Create form fields in {where}",
                 responses={200: _BATCH}, openapi_extra=doc(_FIELDS_BODY), name=f"create_form_fields_{tag}")
    async def create_form_fields(request: Request, document_id: str, ctx: AppContext = Depends(require_admin)):
        return await _write_fields(request, ctx, document_id, layer_of(request), update=False)

    @router.put(prefix + "/form-fields", summary=f"Update form fields of {where}",
                responses={200: _BATCH}, openapi_extra=doc(_FIELDS_BODY), name=f"update_form_fields_{tag}")
    async def update_form_fields(request: Request, document_id: str, ctx: AppContext = Depends(require_admin)):
        return await _write_fields(request, ctx, document_id, layer_of(request), update=True)

    @router.delete(prefix + "/form-fields", summary=f"Delete form fields of {where} (with their widgets)",
                   responses={200: _BATCH, **error_responses(422)}, openapi_extra=doc(_DELETE_BODY),
                   name=f"delete_form_fields_{tag}")
    async def delete_form_fields(request: Request, document_id: str, ctx: AppContext = Depends(require_admin)):
        return await _delete_fields(request, ctx, document_id, layer_of(request))

    @router.get(prefix + "/form-fields/{form_field_id}", summary=f"A form field of {where}", responses=_ONE,
                name=f"get_form_field_{tag}", openapi_extra=doc())
    async def get_form_field(request: Request, document_id: str, form_field_id: str,
                             ctx: AppContext = Depends(require_admin)):
        return await _get_field(ctx, document_id, layer_of(request), form_field_id)

    @router.get(prefix + "/form-field-values", summary=f"Form field values of {where}", responses=_VALUES,
                name=f"list_form_field_values_{tag}", openapi_extra=doc())
    async def list_form_field_values(request: Request, document_id: str, ctx: AppContext = Depends(require_admin)):
        return await _list_values(ctx, document_id, layer_of(request))

    @router.post(prefix + "/form-field-values", summary=f"Set form field values of {where}",
                 responses=_VALUES_SET, openapi_extra=doc(_VALUES_BODY), name=f"set_form_field_values_{tag}")
    async def set_form_field_values(request: Request, document_id: str, ctx: AppContext = Depends(require_admin)):
        return await _set_values(request, ctx, document_id, layer_of(request))


_routes(DOC)
_routes(LAYER)
