"""Request-body schemas for the OpenAPI document.

The routes read their bodies themselves (to bound their size before parsing and to
keep string values byte-exact), so FastAPI cannot infer the bodies; these
``openapi_extra`` fragments describe them (docs/protocol.md is the prose version).
"""

from __future__ import annotations

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
        "title": {"type": "string"}}}}}}}
CREATE_LAYER = json_body({"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 128},
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
