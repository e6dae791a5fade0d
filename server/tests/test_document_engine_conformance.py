"""Conformance with Nutrient Document Engine's published OpenAPI description
(``../shared/vendor/document-engine/document-engine-api.yml``, MIT, see its SOURCES.md).

Every operation of the vendor's spec that our server also offers (same method, same path
once the parameter names are mapped) is called on the real server on loopback, with
schemathesis checking each answer against the vendor's spec: a documented status code,
a documented content type, a body valid against the vendor's response schema, never a
5xx. Requests come from

- the vendor's own request examples: one request per example the spec gives for the
  body (each branch of a ``oneOf``/``anyOf`` and each media type, the ``example`` values
  of its properties), for a query (every documented parameter with its example or
  default) and a bare one;
- a few generated ones (hypothesis through schemathesis, ``max_examples`` small,
  derandomized), for operations whose body is JSON or absent.

Path parameters are real: a fresh document per operation (the corpus' annotated sample),
a layer ``conformance`` and an annotation ``conformance-note`` in both layers.

Operations of the vendor's spec our server does not offer are skipped (listed by
``test_skipped_vendor_operations_are_listed``); nothing in this file fails on them.

One defect of the vendor's spec is patched before use (:func:`_vendor_spec`), and said
here: ``CommentMarkerAnnotation`` does not constrain ``type``, so every ``pspdfkit/note``
matches both it and ``NoteAnnotation`` and fails the ``oneOf`` of ``Annotation``; the
patch gives it ``type: pspdfkit/comment-marker``, what Instant JSON names it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import urllib.parse
import uuid
from functools import lru_cache
from pathlib import Path

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance,
                                               response_schema_conformance,
                                               status_code_conformance)

from conftest import CORPUS, note

SHARED = Path(os.environ.get("LAYERSYNC_SHARED_DIR", Path(__file__).resolve().parents[2].parent / "shared"))
VENDOR_SPEC = SHARED / "vendor" / "document-engine" / "document-engine-api.yml"
SAMPLE = "sample-files-024-annotated_pdf.pdf"
LAYER = "conformance"
ANNOTATION = "conformance-note"
BOOKMARK = "conformance-bookmark"
FORM_FIELD = "conformance-field"
#: The vendor's path parameter names → ours.
PARAMETER_NAMES = {"documentId": "document_id", "layerName": "layer", "annotationId": "annotation_id",
                   "pageIndex": "page_index", "bookmarkId": "bookmark_id", "formFieldId": "form_field_id",
                   "attachmentId": "attachment_id"}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]
#: Generated requests per operation (on top of the vendor's examples).
GENERATED_PER_OPERATION = 3
#: Example requests per operation at most (the vendor's unions give dozens).
EXAMPLES_PER_OPERATION = 8
METHODS = ("get", "put", "post", "delete", "patch")
#: Request forms of offered operations that LayerSync does not implement (listed in
#: server/README.md): an upload built from Build API ``instructions`` or fetched from a
#: ``url`` (LayerSync stores the PDF it is sent). Their examples are skipped, printed.
NOT_OFFERED_FORMS = {("POST", "/api/documents"): ("instructions", "url")}

@schemathesis.serializer("application/pdf")
def _pdf_body(ctx, value) -> bytes:
    """The upload's raw ``application/pdf`` body: the PDF's bytes as they are."""
    return value if isinstance(value, bytes) else str(value).encode()


pytestmark = pytest.mark.skipif(not VENDOR_SPEC.is_file(), reason=f"no vendor spec at {VENDOR_SPEC}")


@lru_cache(maxsize=1)
def _vendor_spec() -> dict:
    spec = yaml.safe_load(VENDOR_SPEC.read_text())
    marker = spec["components"]["schemas"]["CommentMarkerAnnotation"]["allOf"][1]
    marker["properties"]["type"] = {"type": "string", "enum": ["pspdfkit/comment-marker"]}
    return spec


@lru_cache(maxsize=1)
def _schema():
    return schemathesis.openapi.from_dict(_vendor_spec())


def _vendor_operations() -> list[tuple[str, str]]:
    if not VENDOR_SPEC.is_file():
        return []
    return [(method.upper(), path) for path, item in _vendor_spec()["paths"].items()
            for method in item if method in METHODS]


def _our_template(vendor_path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: "{" + PARAMETER_NAMES.get(m.group(1), m.group(1)) + "}",
                  vendor_path)


@pytest.fixture(scope="module")
def our_operations(server) -> set[tuple[str, str]]:
    spec = server.http.get("/openapi.json").json()
    return {(method.upper(), path) for path, item in spec["paths"].items() for method in item
            if method in METHODS}


def test_skipped_vendor_operations_are_listed(our_operations, capsys):
    offered = [op for op in _vendor_operations() if (op[0], _our_template(op[1])) in our_operations]
    skipped = [op for op in _vendor_operations() if op not in offered]
    with capsys.disabled():
        print(f"\nDocument Engine conformance: {len(offered)} vendor operations offered and checked, "
              f"{len(skipped)} not offered (skipped):")
        for method, path in skipped:
            print(f"  skipped {method} {path}")
    # the admin routes LayerSync has always offered are among the checked ones
    for must in [("GET", "/api/documents"), ("POST", "/api/documents"),
                 ("GET", "/api/documents/{documentId}/document_info"),
                 ("POST", "/api/documents/{documentId}/layers"),
                 ("POST", "/api/documents/{documentId}/annotations"),
                 ("PUT", "/api/documents/{documentId}/annotations"),
                 ("DELETE", "/api/documents/{documentId}/layers/{layerName}/annotations"),
                 ("GET", "/api/documents/{documentId}/document.json"),
                 ("POST", "/api/documents/{documentId}/apply_instant_json"),
                 ("GET", "/api/documents/{documentId}/layers/{layerName}/pdf")]:
        assert must in offered, must


# --- the vendor's examples -----------------------------------------------------------

def _resolve(spec: dict, node: dict) -> dict:
    seen = 0
    while isinstance(node, dict) and "$ref" in node and seen < 32:
        target = spec
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node, seen = target, seen + 1
    return node


def _example(spec: dict, node: dict, depth: int = 0, branch: int = 0):
    """A value for ``node`` made of the spec's own ``example`` values: a node's example,
    else its enum's first value or default, else for an object its properties'
    examples, for an array one item, for ``oneOf``/``anyOf`` the ``branch``-th branch."""
    node = _resolve(spec, node)
    if not isinstance(node, dict) or depth > 12:
        return None
    if "example" in node:
        return copy.deepcopy(node["example"])
    if node.get("examples"):
        examples = node["examples"]
        return copy.deepcopy(examples[0] if isinstance(examples, list) else
                             next(iter(examples.values())).get("value"))
    if "const" in node:
        return node["const"]
    if node.get("format") == "binary":
        return None  # a file part without an example: left out
    if node.get("enum"):
        return node["enum"][0]
    if "default" in node:
        return copy.deepcopy(node["default"])
    for key in ("oneOf", "anyOf"):
        if node.get(key):
            options = node[key]
            return _example(spec, options[min(branch, len(options) - 1)], depth + 1)
    if node.get("allOf"):
        merged = {}
        for part in node["allOf"]:
            value = _example(spec, part, depth + 1)
            if isinstance(value, dict):
                merged.update(value)
        return merged
    kind = node.get("type")
    kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
    if kind == "object" or "properties" in node:
        out = {}
        for name, sub in node.get("properties", {}).items():
            value = _example(spec, sub, depth + 1)
            if value is not None or name in node.get("required", []):
                out[name] = value
        return out
    if kind == "array":
        item = _example(spec, node.get("items", {}), depth + 1)
        return [] if item is None else [item]
    return {"string": "example", "integer": 0, "number": 0, "boolean": False}.get(kind)


def _branches(spec: dict, node: dict) -> int:
    node = _resolve(spec, node)
    for key in ("oneOf", "anyOf"):
        if isinstance(node, dict) and node.get(key):
            return len(node[key])
    return 1


def _example_requests(method: str, path: str, pdf: bytes) -> list[dict]:
    """Requests built from the vendor's examples: ``{"media_type", "body", "query"}``."""
    spec = _vendor_spec()
    operation = spec["paths"][path][method.lower()]
    parameters = [_resolve(spec, p) for p in spec["paths"][path].get("parameters", []) +
                  operation.get("parameters", [])]
    query = {}
    for parameter in parameters:
        if parameter.get("in") == "query" and parameter["schema"].get("type") != "object":
            value = _example(spec, parameter.get("schema", {}))
            if parameter.get("example") is not None:
                value = parameter["example"]
            if value is not None:
                query[parameter["name"]] = json.dumps(value) if isinstance(value, bool) else value
    if "source" in query:  # the vendor's own rule: source excludes the other options
        query = {k: v for k, v in query.items() if k not in ("flatten", "annotations", "comments")}
    body = _resolve(spec, operation.get("requestBody", {}))
    # a bare request (no body) where the body is optional or absent; a required body's
    # absence is a request the vendor's spec does not define an answer for
    requests = [] if body.get("required") else [{"media_type": None, "body": None, "query": {}}]
    if query and not body.get("required"):
        requests.append({"media_type": None, "body": None, "query": query})
    for media_type, content in body.get("content", {}).items():
        schema = content.get("schema", {})
        if media_type in ("application/pdf", "application/octet-stream"):
            requests.append({"media_type": media_type, "body": pdf, "query": {}})
            continue
        if media_type not in ("application/json", "multipart/form-data"):
            continue
        for branch in range(_branches(spec, schema)):
            value = _example(spec, schema, branch=branch)
            if media_type == "multipart/form-data" and isinstance(value, dict):
                if "file" in value:
                    value["file"] = pdf
                value = {k: v for k, v in value.items() if v is not None and v != "<binary data>"}
            chosen = _resolve(spec, schema)
            for key in ("oneOf", "anyOf"):
                if chosen.get(key):
                    chosen = _resolve(spec, chosen[key][min(branch, len(chosen[key]) - 1)])
            missing = [k for k in chosen.get("required", []) if not isinstance(value, dict) or k not in value]
            if missing:  # the spec gives no example for a required part (a file, a URL)
                print(f"{method} {path}: no example for {missing} of {chosen.get('title', media_type)}")
                continue
            requests.append({"media_type": media_type, "body": value, "query": {}})
    if query and body.get("required") and requests:
        requests[0]["query"] = query
    return requests[:EXAMPLES_PER_OPERATION]


def _unique(body, method: str, path: str):
    """Example bodies reuse the vendor's fixed ids and names: give each request its own
    (a second create of one id is a conflict, a case the vendor's spec does not list)."""
    if not isinstance(body, dict):
        return body
    body = copy.deepcopy(body)
    suffix = uuid.uuid4().hex[:8]
    if path.endswith("/layers") and method == "POST" and isinstance(body.get("name"), str):
        body["name"] = f"{body['name']}-{suffix}"
    if method == "POST" and path.endswith("/annotations"):
        items = [body] if "content" in body else body.get("annotations") or []
        if isinstance(body.get("annotation"), dict):  # the multipart form's part
            items = [body["annotation"]]
        if isinstance(body.get("annotations"), dict):
            items = body["annotations"].get("annotations") or []
        for item in items:
            for holder in (item, item.get("content") if isinstance(item, dict) else None):
                if isinstance(holder, dict) and isinstance(holder.get("id"), str):
                    holder["id"] = f"{holder['id']}-{suffix}"
    if path == "/api/documents" and method == "POST" and "document_id" in body:
        body["document_id"] = f"{body['document_id']}-{suffix}"
    return body


@pytest.fixture
def fixtures(server) -> dict:
    """Path parameters of real resources: a new document, a layer, page 0, and an
    annotation, a bookmark and a form field in both the default layer and the layer,
    and a stored attachment."""
    doc = server.new_document(SAMPLE)
    admin = server.admin()
    made = server.http.post(f"/api/documents/{doc}/layers", headers=admin, json={"name": LAYER})
    assert made.status_code == 200, made.text
    bookmark = {"type": "pspdfkit/bookmark", "v": 1, "action": {"type": "goTo", "pageIndex": 0}}
    field = {"v": 1, "type": "pspdfkit/form-field/text", "name": "conformance-field", "label": "F",
             "annotationIds": [], "doNotSpellCheck": False, "doNotScroll": False, "multiLine": False,
             "comb": False, "defaultValue": ""}
    for prefix in (f"/api/documents/{doc}", f"/api/documents/{doc}/layers/{LAYER}"):
        for path, body in (("/annotations", {"id": ANNOTATION, "content": note("conformance")}),
                           ("/bookmarks", {"id": BOOKMARK, "content": bookmark}),
                           ("/form-fields", {"formFields": [{"id": FORM_FIELD, "content": field}]})):
            made = server.http.post(prefix + path, headers=admin, json=body)
            assert made.status_code == 200, made.text
    data = b"\x89PNG conformance attachment"
    sha = hashlib.sha256(data).hexdigest()
    stored = server.http.put(f"/sync/v1/documents/{doc}/attachments/{sha}", content=data,
                             headers={"Authorization": f"Bearer {server.token(doc)}", "Content-Type": "image/png"})
    assert stored.status_code in (200, 201), stored.text
    return {"documentId": doc, "layerName": LAYER, "annotationId": ANNOTATION, "pageIndex": "0",
            "bookmarkId": BOOKMARK, "formFieldId": FORM_FIELD, "attachmentId": sha}


def _check(case, server) -> None:
    case.call_and_validate(base_url=server.url, headers=server.admin(), checks=CHECKS)


@pytest.mark.parametrize("method,path", _vendor_operations(), ids=lambda v: v)
def test_vendor_operation(method, path, server, our_operations, request):
    if (method, _our_template(path)) not in our_operations:
        pytest.skip(f"not offered by LayerSync: {method} {path}")
    ids = request.getfixturevalue("fixtures")
    operation = _schema()[path][method]
    path_parameters = {name: ids[name] for name in re.findall(r"\{(\w+)\}", path)}
    # a wrong admin token: 401 on every operation (the spec's ApiAuthToken scheme), before
    # anything else is looked at
    url = path.format(**{name: urllib.parse.quote(value, safe="") for name, value in path_parameters.items()})
    wrong = server.http.request(method, url, headers={"Authorization": 'Token token="wrong"'})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized", wrong.text
    pdf = (CORPUS / SAMPLE).read_bytes()
    for example in _example_requests(method, path, pdf):
        unsupported = [key for key in NOT_OFFERED_FORMS.get((method, path), ())
                       if isinstance(example["body"], dict) and key in example["body"]]
        if unsupported:
            print(f"{method} {path}: skipped the example with {unsupported} (not offered)")
            continue
        kwargs = {"path_parameters": path_parameters, "query": example["query"]}
        if example["media_type"] is not None:
            kwargs.update(media_type=example["media_type"], body=_unique(example["body"], method, path))
        _check(operation.Case(**kwargs), server)

    body = _resolve(_vendor_spec(), _vendor_spec()["paths"][path][method.lower()].get("requestBody", {}))
    media_types = list(body.get("content", {}))
    if media_types and ("application/json" not in media_types
                        or {"application/pdf", "application/octet-stream"} & set(media_types)):
        # generated multipart and binary bodies (random bytes are no PDF, and the spec
        # documents no answer for that): the examples above cover them
        print(f"{method} {path}: no generated requests (binary or multipart body)")
        return
    strategy = operation.as_strategy(path_parameters=path_parameters,
                                     media_type="application/json" if media_types else None)

    @settings(max_examples=GENERATED_PER_OPERATION, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def generated(case):
        if isinstance(case.body, dict):
            case.body = _unique(case.body, method, path)
        _check(case, server)

    try:
        generated()
    except ValueError as exc:  # schemathesis cannot generate this body (binary parts in its schema)
        if "Unsupported type" not in str(exc):
            raise
        print(f"{method} {path}: no generated requests ({exc.args[0]}); the vendor's examples ran")


#: Instant JSON types LayerSync keeps that the vendor's ``Annotation`` union does not
#: list (Nutrient's Instant JSON has them; the published spec leaves them out): kept,
#: so nothing a user made disappears, and checked here by type only.
TYPES_OUTSIDE_THE_VENDOR_UNION = {"pspdfkit/file"}


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.pdf")))
def test_document_json_of_every_corpus_file_meets_the_vendor_schema(server, name):
    import jsonschema_rs

    spec = _vendor_spec()
    validator = jsonschema_rs.Draft202012Validator(
        {"$ref": "#/components/schemas/InstantJson", "components": spec["components"]})
    doc = server.new_document(name)
    exported = server.http.get(f"/api/documents/{doc}/document.json", headers=server.admin()).json()
    assert exported["format"] == "https://pspdfkit.com/instant-json/v1"
    outside = [a for a in exported["annotations"] if a.get("type") in TYPES_OUTSIDE_THE_VENDOR_UNION]
    checked = {**exported, "annotations": [a for a in exported["annotations"] if a not in outside]}
    errors = [f"{list(e.instance_path)}: {e.message[:200]}" for e in validator.iter_errors(checked)]
    assert not errors, errors[:5]
    for annotation in checked["annotations"]:  # one by one, so a failure names the record
        single = {"format": exported["format"], "annotations": [annotation]}
        assert validator.is_valid(single), annotation
    widgets = [a for a in exported["annotations"] if a["type"] == "pspdfkit/widget"]
    fields = exported["formFields"]
    assert sorted(i for f in fields for i in f["annotationIds"]) == sorted(w["id"] for w in widgets)
    assert {f["name"] for f in fields} == {w["formFieldName"] for w in widgets}
