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

from typing import Any, Literal, Union

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
                       "description": "XFDF or Instant JSON whose annotations replace the PDF's own"},
        "keep_current_annotations": {"type": "boolean", "default": False,
                                     "description": "apply the attachment over the PDF's annotations"},
        "overwrite_existing_document": {"type": "boolean", "default": False}}}}}}}
_LAYER_FIELDS = {"name": {"type": "string", "maxLength": 128, "description": "\"\" is the default layer"},
                 "source_layer_name": {"type": "string", "maxLength": 128,
                                       "description": "missing or unknown: the base layer"}}
CREATE_LAYER = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"type": "object", "required": ["name"], "properties": {
        **_LAYER_FIELDS, "instant_json": _INSTANT_JSON, "user_id": {"type": "string"}}}},
    "multipart/form-data": {"schema": {"type": "object", "required": ["name"], "properties": {
        **_LAYER_FIELDS, "instant.json": _INSTANT_JSON}},
        "encoding": {"instant.json": {"contentType": "application/json"}}}}}}
_WRITE = {"type": "object", "required": ["content"], "properties": {
    "content": _ANNOTATION, "id": {"type": "string", "minLength": 1, "maxLength": 128},
    "user_id": {"type": ["string", "null"]}, "group": {"type": ["string", "null"]}}}
ANNOTATION_CREATE = json_body({"oneOf": [_WRITE, {
    "type": "object", "required": ["annotations"],
    "properties": {"annotations": {"type": "array", "items": _WRITE}}}]})
ANNOTATION_UPDATE = json_body(_WRITE)
ANNOTATION_UPDATE_MANY = json_body({"type": "object", "required": ["annotations"], "properties": {
    "annotations": {"type": "array", "items": {**_WRITE, "required": ["id", "content"]}}}})
ANNOTATION_DELETE_MANY = json_body({"type": "object", "required": ["annotationIds"], "properties": {
    "annotationIds": {"oneOf": [{"type": "string", "enum": ["all"]},
                                {"type": "array", "items": {"type": "string"}}]}}})
INSTANT_JSON = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": _INSTANT_JSON},
    "multipart/form-data": {"schema": {"type": "object", "properties": {"instant.json": _INSTANT_JSON}},
                            "encoding": {"instant.json": {"contentType": "application/json"}}}}}}
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


class StreamInfo(BaseModel):
    """Where the change stream (protocol version 2) is served."""

    path: str = Field(description="POST here to open the stream")
    heartbeat_s: float = Field(description="a silent stream gets a heartbeat this often")
    max_subscriptions: int = Field(description="subscriptions one stream may hold")


class InfoOut(BaseModel):
    server: str
    server_version: str
    protocol: ProtocolRange
    limits: Limits
    capabilities: list[str]
    stream: StreamInfo


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
    """Document Engine's ``DocumentProperties`` plus LayerSync's ``document_id``,
    ``pageCount`` and ``annotationCount``."""

    document_id: str
    title: str | None
    sourcePdfSha256: str
    byteSize: int
    createdAt: str
    passwordProtected: bool
    storage: dict[str, str]
    pageCount: int
    annotationCount: int


class DocumentCreated(Document):
    """Document Engine's ``DocumentCreated``."""

    errors: list[dict]
    password_protected: bool


class DocumentOut(BaseModel):
    data: DocumentCreated


class DocumentListOut(BaseModel):
    data: list[Document]
    document_count: int = Field(description="documents matching the filter")
    next_cursor: str | None
    prev_cursor: str | None
    prev_document_count: int | None = Field(None, description="with count_remaining=true")
    next_document_count: int | None = Field(None, description="with count_remaining=true")


class Page(BaseModel):
    pageIndex: int
    pageLabel: str
    width: float
    height: float
    rotation: Literal[0, 90, 180, 270]
    rawPdfBoxes: dict[str, list[float]]


class LayerCounters(BaseModel):
    name: str
    epoch: str
    revision: int
    recordCount: int


class DocumentInfo(Document):
    """Document Engine's ``DocumentInfo`` plus the document's properties and layers."""

    pages: list[Page]
    hasXFA: bool
    permissions: dict[str, bool]
    layers: list[str]
    layer: LayerCounters | None = Field(None, description="on .../layers/{layer}/document_info")


class DocumentInfoOut(BaseModel):
    data: DocumentInfo


class DocumentDeleted(BaseModel):
    document_id: str
    deleted: bool


class DocumentDeletedOut(BaseModel):
    data: DocumentDeleted


class LayerListOut(BaseModel):
    data: list[str] = Field(description="layer names; the default layer is \"\"")


class Layer(LayerCounters):
    """Document Engine's ``LayerCreated`` plus the layer's counters."""

    errors: list[dict]


class LayerOut(BaseModel):
    data: Layer


class LayerDeleted(BaseModel):
    name: str
    deleted: bool


class LayerDeletedOut(BaseModel):
    data: LayerDeleted


class Annotation(BaseModel):
    """A live record as Document Engine's ``AnnotationRecord`` (``group`` is null until
    collaboration permissions exist) plus LayerSync's ``revision`` and times."""

    id: str
    content: _Content
    createdBy: str | None
    updatedBy: str | None
    group: str | None
    revision: int
    createdAt: str | None
    updatedAt: str | None


class AnnotationList(BaseModel):
    annotations: list[Annotation]
    truncated: bool = Field(description="true when there are more than 1000 live records")


class AnnotationListOut(BaseModel):
    data: AnnotationList


class AnnotationOut(BaseModel):
    data: Annotation


class AnnotationCreated(Annotation):
    annotation_id: str


class AnnotationCreatedOut(BaseModel):
    data: AnnotationCreated


class AnnotationWritten(BaseModel):
    id: str
    content: _Content
    user_id: str | None
    group: str | None
    updatedBy: str | None
    revision: int


class FailingPath(BaseModel):
    path: str
    error: str
    details: str


class AnnotationMultipleOut(BaseModel):
    """Document Engine's ``AnnotationMultipleResponse``."""

    data: list[AnnotationWritten]
    result: Literal["success", "partial_failure", "failure"]
    status: Literal[200]
    failing_paths: list[FailingPath]


class AnnotationCreateOut(BaseModel):
    """The single form's answer (``data``: the annotation with ``annotation_id``), or the
    bulk form's ``AnnotationMultipleResponse`` (``data``: a list, with ``result``,
    ``status``, ``failing_paths``)."""

    data: Union[AnnotationCreated, list[AnnotationWritten]]
    result: Literal["success", "partial_failure", "failure"] | None = None
    status: Literal[200] | None = None
    failing_paths: list[FailingPath] | None = None


class AnnotationDeleted(BaseModel):
    id: str
    deleted: bool
    revision: int


class AnnotationDeletedOut(BaseModel):
    data: AnnotationDeleted


class AnnotationsDeleted(BaseModel):
    deleted: list[str]
    revision: int


class AnnotationsDeletedOut(BaseModel):
    data: AnnotationsDeleted


class FormFieldValue(BaseModel):
    v: int
    type: Literal["pspdfkit/form-field-value"]
    name: str
    value: Any = None


class InstantJsonOut(BaseModel):
    format: str
    annotations: list[_Content]
    comments: list[_Content]
    bookmarks: list[_Content]
    formFields: list[_Content]
    formFieldValues: list[FormFieldValue]


class ApplyResult(BaseModel):
    created: int
    updated: int
    unchanged: int
    revision: int
    #: names of form field values left out: the layer has no field of that name
    skippedFormFieldValues: list[str] | None = None


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
