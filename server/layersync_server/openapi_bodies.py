"""Request- and response-body schemas for the OpenAPI document.

The routes read their bodies themselves (to bound their size before parsing and to
keep string values byte-exact), so FastAPI cannot infer the bodies; these
``openapi_extra`` fragments describe them (docs/protocol.md is the prose version).

Responses are encoded by :class:`~layersync_server.json_http.WireJSONResponse`
(stdlib encoder, no pydantic pass), so the routes declare no ``response_model``;
the pydantic models below are documentation only, attached with
``responses={status: {"model": ...}}`` (:func:`ok`), which FastAPI puts in
``/openapi.json`` without validating or serialising anything at run time.
``tests/test_openapi.py`` checks every success response has a schema, and
schemathesis checks the server's answers conform to them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

_ANNOTATION = {"type": "object", "description": "an Instant JSON v2 object (annotation or comment)",
               "additionalProperties": True}
_INSTANT_JSON = {"type": "object", "properties": {
    "format": {"type": "string"}, "annotations": {"type": "array", "items": _ANNOTATION},
    "comments": {"type": "array", "items": _ANNOTATION},
    "formFieldValues": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "value": {}}}}}}


def json_body(schema: dict, required: bool = True) -> dict:
    """``openapi_extra`` declaring an ``application/json`` body with ``schema``."""
    return {"requestBody": {"required": required,
                            "content": {"application/json": {"schema": schema}}}}


SYNC = json_body({"type": "object", "properties": {
    "client_id": {"type": "string"}, "epoch": {"type": ["string", "null"]},
    "since": {"type": "integer", "minimum": 0},
    "changes": {"type": "array", "items": {"type": "object", "required": ["change_id", "op", "id"],
                                           "properties": {
        "change_id": {"type": "string", "minLength": 1, "maxLength": 128},
        "op": {"type": "string", "enum": ["create", "update", "delete"]},
        "id": {"type": "string", "minLength": 1, "maxLength": 128},
        "base_revision": {"type": "integer", "minimum": 0}, "content": _ANNOTATION}}}}})
ROLLBACK = json_body({"type": "object", "required": ["revision"], "properties": {
    "revision": {"type": "integer", "minimum": 1}, "base_revision": {"type": "integer"}}})
RESTORE = json_body({"type": "object", "properties": {"base_revision": {"type": "integer"}}},
                    required=False)
ATTACHMENT = {"requestBody": {"required": True, "content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}
UPLOAD = {"requestBody": {"required": True, "content": {
    "application/pdf": {"schema": {"type": "string", "format": "binary"}},
    "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {
        "file": {"type": "string", "format": "binary"}, "document_id": {"type": "string"},
        "title": {"type": "string"},
        "attachment": {"type": "string", "format": "binary",
                       "description": "XFDF or Instant JSON replacing the PDF's annotations"},
        "keep_current_annotations": {"type": "boolean",
                                     "description": "apply the attachment over the PDF's annotations"}}}}}}}
CREATE_LAYER = json_body({"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "maxLength": 128, "description": "\"\" is the default layer"},
    "source_layer_name": {"type": "string", "maxLength": 128},
    "instant_json": _INSTANT_JSON, "user_id": {"type": "string"}}})
ANNOTATION = json_body({
    "type": "object", "additionalProperties": True,
    "description": "an Instant JSON annotation (with `type`), or a wrapper "
                   "`{\"id\"?, \"content\": {...}, \"user_id\"?}`",
    "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 128},
                   "content": _ANNOTATION, "user_id": {"type": "string"},
                   "type": {"type": "string"}}})
INSTANT_JSON = json_body(_INSTANT_JSON)
REVOKE = json_body({"type": "object", "required": ["jti"], "properties": {
    "jti": {"type": "string", "minLength": 1, "maxLength": 256}}})


# -- responses ----------------------------------------------------------------------------------
# Documentation only (see module docs). Keep in step with docs/protocol.md.

_Content = dict[str, Any]


def ok(model: type[BaseModel], description: str = "success", status: int = 200, **more) -> dict:
    """``responses`` entry documenting ``model`` as the JSON body of ``status``."""
    return {status: {"model": model, "description": description}, **more}


def media(media_type: str, description: str, schema: dict | None = None) -> dict:
    """A ``responses`` value with one non-JSON media type (binary unless ``schema``)."""
    return {"description": description, "content": {
        media_type: {"schema": schema or {"type": "string", "format": "binary"}}}}


class Record(BaseModel):
    """The protocol's record shape; a tombstone has ``deleted: true``, ``content: null``."""

    id: str
    revision: int
    deleted: bool
    content: _Content | None = Field(description="Instant JSON v2 object; null for a tombstone")


class DeletedRecord(Record):
    last_content: _Content | None = Field(
        description="content of the newest kept live version (null when none is kept)")


class RecordPageOut(BaseModel):
    """A page of ``records`` / ``changes``."""

    epoch: str
    revision: int = Field(description="the layer's current revision")
    records: list[Record]
    has_more: bool
    next_since: int


class DeletedPageOut(RecordPageOut):
    records: list[DeletedRecord]


class AcceptedChange(BaseModel):
    change_id: str
    id: str
    revision: int


class RejectedChange(BaseModel):
    change_id: str
    id: str | None = Field(description="null when the change's id is not a valid record id")
    reason: Literal["exists", "conflict", "not_found", "invalid"]
    message: str
    server_record: Record | None


class SyncOut(BaseModel):
    epoch: str
    revision: int
    accepted: list[AcceptedChange]
    rejected: list[RejectedChange]
    changes: list[Record]
    has_more: bool
    next_since: int
    epoch_changed: bool


class ProtocolRange(BaseModel):
    min: int
    max: int


class Limits(BaseModel):
    """Clients must ignore unknown keys."""

    max_request_bytes: int
    max_page_records: int
    max_wait_s: int
    max_upload_bytes: int
    history_versions: int
    max_json_depth: int
    max_number_chars: int


class InfoOut(BaseModel):
    server: str
    server_version: str
    protocol: ProtocolRange
    limits: Limits
    capabilities: list[str]


class AttachmentOut(BaseModel):
    sha256: str
    size_bytes: int
    content_type: str


class HistoryOut(BaseModel):
    epoch: str
    revision: int
    id: str
    versions: list[Record] = Field(description="kept versions, newest first")


class RecordWriteOut(BaseModel):
    """Answer of rollback and restore."""

    epoch: str
    revision: int
    record: Record


class Document(BaseModel):
    document_id: str
    title: str
    sha256: str
    page_count: int
    annotation_count: int
    size_bytes: int
    created_at: str


class DocumentWithLayers(Document):
    layers: list[str]


class DocumentOut(BaseModel):
    data: Document


class PageMeta(BaseModel):
    page: int
    per_page: int
    total: int


class DocumentListOut(BaseModel):
    data: list[Document]
    meta: PageMeta


class DocumentInfoOut(BaseModel):
    data: DocumentWithLayers


class DocumentDeleted(BaseModel):
    document_id: str
    deleted: bool


class DocumentDeletedOut(BaseModel):
    data: DocumentDeleted


class Layer(BaseModel):
    name: str
    epoch: str
    revision: int
    record_count: int


class LayerListOut(BaseModel):
    data: list[Layer]


class LayerOut(BaseModel):
    data: Layer


class LayerDeleted(BaseModel):
    name: str
    deleted: bool


class LayerDeletedOut(BaseModel):
    data: LayerDeleted


class Annotation(BaseModel):
    """A live record as the admin API shows it (``createdBy`` etc. are metadata)."""

    id: str
    content: _Content
    revision: int
    createdBy: str | None
    updatedBy: str | None
    createdAt: str | None
    updatedAt: str | None


class AnnotationList(BaseModel):
    annotations: list[Annotation]
    truncated: bool = Field(description="true when there are more than 1000 live records")


class AnnotationListOut(BaseModel):
    data: AnnotationList


class AnnotationOut(BaseModel):
    data: Annotation


class AnnotationDeleted(BaseModel):
    id: str
    deleted: bool
    revision: int


class AnnotationDeletedOut(BaseModel):
    data: AnnotationDeleted


class FormFieldValue(BaseModel):
    v: int
    type: Literal["pspdfkit/form-field-value"]
    name: str
    value: Any = None


class InstantJsonOut(BaseModel):
    format: str
    annotations: list[_Content]
    comments: list[_Content]
    formFieldValues: list[FormFieldValue]


class ApplyResult(BaseModel):
    created: int
    updated: int
    unchanged: int
    revision: int


class ApplyResultOut(BaseModel):
    data: ApplyResult


class Revoked(BaseModel):
    jti: str
    revoked: bool


class RevokedOut(BaseModel):
    data: Revoked


class HealthOut(BaseModel):
    status: Literal["ok"]


#: ``GET .../annotations``: JSON, or NDJSON with ``Accept: application/x-ndjson`` (the
#: schema of a sequential media type describes one item, as before OpenAPI 3.2).
ANNOTATION_LIST = {200: {
    "model": AnnotationListOut,
    "description": "live annotations (JSON, at most 1000); with `Accept: application/x-ndjson`, "
                   "every live annotation, one JSON object per line",
    "content": {"application/x-ndjson": {"schema": {
        "$ref": "#/components/schemas/Annotation",
        "description": "newline-delimited JSON: each line is one Annotation object"}}}}}
