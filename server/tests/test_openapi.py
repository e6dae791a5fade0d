"""The OpenAPI document describes every endpoint's bodies (docs/protocol.md, Operations).

Walks ``/openapi.json``: every success response has a content schema (binary media
types as ``format: binary``), every documented error status the envelope. Then runs a
real session through the sync and admin APIs and validates each answer against the
schema documented for its operation and status (schemathesis, bounded, mostly reaches
error paths; this reaches the success paths). Response models are documentation only:
the routes keep answering through the stdlib encoder, without a pydantic pass.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid

import jsonschema_rs
import pytest
from fastapi.routing import APIRoute

from conftest import CORPUS, change, note

METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


@pytest.fixture(scope="module")
def spec(server) -> dict:
    response = server.http.get("/openapi.json")
    assert response.status_code == 200
    return response.json()


def _operations(spec: dict):
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield path, method, operation


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or media_type.endswith("+json")


def _resolve(spec: dict, schema: dict) -> dict:
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = spec["components"]["schemas"][name]
    return schema


def test_every_success_response_has_a_content_schema(spec):
    problems = []
    operations = list(_operations(spec))
    assert len(operations) >= 38
    for path, method, operation in operations:
        successes = {s: r for s, r in operation["responses"].items() if s.startswith("2")}
        if not successes:
            problems.append(f"{method.upper()} {path}: no 2xx response")
        for status, response in successes.items():
            content = response.get("content")
            if not content:
                problems.append(f"{method.upper()} {path} {status}: no content")
                continue
            for media_type, entry in content.items():
                schema = entry.get("schema")
                where = f"{method.upper()} {path} {status} {media_type}"
                if not schema:
                    problems.append(f"{where}: no schema")
                elif _is_json(media_type):
                    resolved = _resolve(spec, schema)
                    if resolved.get("type") != "object" or not resolved.get("properties"):
                        problems.append(f"{where}: JSON schema without properties: {resolved}")
                elif media_type not in ("text/plain", "application/x-ndjson") and \
                        schema != {"type": "string", "format": "binary"}:
                    problems.append(f"{where}: binary media type not documented as format: binary")
    assert not problems, "\n".join(problems)


def test_documented_errors_use_the_envelope(spec):
    problems = []
    for path, method, operation in _operations(spec):
        for status, response in operation["responses"].items():
            if status[0] in "45":
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                if schema != {"$ref": "#/components/schemas/ErrorEnvelope"}:
                    problems.append(f"{method.upper()} {path} {status}: {schema}")
    assert not problems, "\n".join(problems)
    # no FastAPI default 422 (validation errors answer 400); the 422s documented are the
    # admin writes' own (Document Engine's answer to a body it refuses: annotations,
    # comments, form fields and values), never a sync route's
    assert "HTTPValidationError" not in str(spec)
    with_422 = {(method, path) for path, method, o in _operations(spec) if "422" in o["responses"]}
    assert with_422 and all(path.startswith("/api/") and method in ("post", "put", "delete")
                            for method, path in with_422), with_422


def test_routes_keep_the_stdlib_encoder():
    """The response models are docs only: no sync/admin route validates or serialises
    its answer with pydantic (that cost was removed on purpose; wire_json.py)."""
    from layersync_server.routes import admin, sync
    from layersync_server.routes.propagation import hot_routes
    routes = [r for router in (sync.router, *admin.ROUTERS) for r in router.routes
              if isinstance(r, APIRoute)]
    hot = hot_routes(None)  # plain ASGI endpoints answering WireJSONResponse themselves
    assert len(hot) == 2 and not any(isinstance(r, APIRoute) for r in hot)
    assert len(routes) + len(hot) >= 36
    assert all(r.response_field is None for r in routes), \
        [r.path for r in routes if r.response_field is not None]


class Checker:
    """Validates answers against the schema ``spec`` documents for them."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.templates = [(re.compile("^" + re.sub(r"\{(\w+)\}", lambda m: "(.+)" if m[1] == "layer"
                                                  else "([^/]+)", path) + "$"), path)
                          for path in spec["paths"]]
        self.checked: set[tuple[str, str, str]] = set()

    def __call__(self, response, expected_status: int | None = None):
        request = response.request
        if expected_status is not None:
            assert response.status_code == expected_status, response.text
        path = request.url.path
        method = request.method.lower()
        matches = [t for regex, t in self.templates if regex.match(path) and method in self.spec["paths"][t]]
        template = max(matches, key=lambda t: len(re.sub(r"\{\w+\}", "", t)))  # most literal wins
        operation = self.spec["paths"][template][method]
        status = str(response.status_code)
        assert status in operation["responses"], f"{method} {template}: undocumented {status}"
        media_type = response.headers.get("content-type", "").split(";")[0].strip()
        content = operation["responses"][status].get("content", {})
        entry = content.get(media_type) or content.get("*/*")
        assert entry is not None, f"{method} {template} {status}: undocumented {media_type}"
        self.checked.add((method, template, status))
        if _is_json(media_type):
            schema = {**entry["schema"], "components": self.spec["components"]}
            errors = [e.message for e in jsonschema_rs.Draft202012Validator(schema).iter_errors(response.json())]
            assert not errors, f"{method} {template} {status}: {errors[:3]} in {response.text[:300]}"
        return response


def test_real_answers_conform_to_the_documented_schemas(server, spec):
    check = Checker(spec)
    http, admin = server.http, server.admin()
    doc = server.new_document()
    layer = "review-" + uuid.uuid4().hex[:6]
    auth = server.auth(doc, layer, user_id="alice")
    base = server.layer_url(doc, layer)

    # admin: documents and layers
    pdf = (CORPUS / "sample-files-024-annotated_pdf.pdf").read_bytes()
    check(server.upload(pdf, doc), 200)  # same bytes again: the existing document
    check(server.upload(pdf[:-200] + b"x" * 200, doc), 409)
    check(http.get("/api/documents", headers=admin, params={"page_size": 5}), 200)
    check(http.get(f"/api/documents/{doc}", headers=admin), 200)
    check(http.get(f"/api/documents/{doc}/document_info", headers=admin), 200)
    check(http.post(f"/api/documents/{doc}/layers", headers=admin, json={"name": layer}), 200)
    check(http.post(f"/api/documents/{doc}/layers", headers=admin, json={"name": layer}), 409)
    check(http.get(f"/api/documents/{doc}/layers", headers=admin), 200)
    check(http.get(f"/api/documents/{doc}/layers/{layer}/document_info", headers=admin), 200)
    check(http.get(f"/api/documents/{doc}/layers/never-made/document_info", headers=admin), 404)

    # sync
    check(http.get("/sync/v1/info"), 200)
    check(http.get(base + "/records", headers=auth), 200)
    first = check(http.post(base + "/sync", headers=auth, json={"epoch": None, "since": 0, "changes": [
        change("create", "n1", note("one")), change("create", "n2", note("two")),
        change("update", "nope", note(), base=1), change("delete", "n1", base=99)]}), 200).json()
    assert len(first["accepted"]) == 2 and len(first["rejected"]) == 2
    rev = first["accepted"][0]["revision"]
    check(http.post(base + "/sync", headers=auth, json={"epoch": "stale", "since": 0, "changes": []}), 200)
    check(http.post(base + "/sync", headers=auth, json={"epoch": first["epoch"], "since": 0, "changes": [
        change("update", "n1", note("one bis"), base=rev), change("delete", "n2", base=rev + 1)]}), 200)
    check(http.get(base + "/changes", headers=auth, params={"since": 0, "wait": 0}), 200)
    check(http.get(base + "/records", headers=auth, params={"since": 1, "limit": 1}), 200)
    check(http.get(base + "/records/n1/history", headers=auth), 200)
    check(http.get(base + "/records/zz/history", headers=auth), 404)
    check(http.get(base + "/deleted", headers=auth), 200)
    check(http.post(base + "/records/n1/rollback", headers=auth, json={"revision": rev}), 200)
    check(http.post(base + "/records/n1/restore", headers=auth, json={}), 409)
    check(http.post(base + "/records/n2/restore", headers=auth, json={}), 200)
    check(http.get(f"/sync/v1/documents/{doc}/pdf", headers=auth), 200)
    check(http.get(f"/sync/v1/documents/{doc}/pdf", headers={**auth, "Range": "bytes=0-9"}), 206)
    check(http.get(f"/sync/v1/documents/{doc}/pdf", headers={**auth, "Range": "bytes=9999999999-"}), 416)
    data = b"\x89PNG fake image"
    sha = hashlib.sha256(data).hexdigest()
    attachment = f"/sync/v1/documents/{doc}/attachments/{sha}"
    for status in (201, 200):
        check(http.put(attachment, headers={**auth, "Content-Type": "image/png"}, content=data), status)
    check(http.get(attachment, headers=auth), 200)
    check(http.get(base + "/records", headers={"LayerSync-Protocol": "x"}), 400)
    check(http.get(base + "/records"), 401)

    # admin: annotations, Instant JSON, PDF, tokens
    for prefix in (f"/api/documents/{doc}", f"/api/documents/{doc}/layers/{layer}"):
        aid = "a-" + uuid.uuid4().hex[:8]
        check(http.post(prefix + "/annotations", headers=admin, json={"id": aid, "content": note()}), 200)
        check(http.post(prefix + "/annotations", headers=admin, json={"id": aid, "content": note()}), 409)
        check(http.get(prefix + "/annotations", headers=admin), 200)
        streamed = check(http.get(prefix + "/annotations", headers={**admin, "Accept": "application/x-ndjson"}),
                         200)
        line_schema = {**spec["components"]["schemas"]["Annotation"], "components": spec["components"]}
        for line in streamed.text.splitlines():
            jsonschema_rs.Draft202012Validator(line_schema).validate(json.loads(line))
        check(http.get(prefix + f"/annotations/{aid}", headers=admin), 200)
        check(http.put(prefix + f"/annotations/{aid}", headers=admin, json={"content": note("edited")}), 200)
        check(http.delete(prefix + f"/annotations/{aid}", headers=admin), 200)
        check(http.get(prefix + f"/annotations/{aid}", headers=admin), 404)
        bulk = [{"id": f"{aid}-{i}", "content": note(str(i))} for i in range(2)]
        made = check(http.post(prefix + "/annotations", headers=admin, json={"annotations": bulk}), 200).json()
        assert [a["id"] for a in made["data"]] == [b["id"] for b in bulk] and made["result"] == "success"
        check(http.post(prefix + "/annotations", headers=admin, json={"id": aid}), 422)
        edited = check(http.put(prefix + "/annotations", headers=admin, json={"annotations": [
            {"id": bulk[0]["id"], "content": note("bulk edited")}, {"id": "nope", "content": note()}]}), 200)
        assert edited.json()["result"] == "partial_failure" and len(edited.json()["failing_paths"]) == 1
        check(http.put(prefix + "/annotations", headers=admin, json={"annotations": [{"id": "x"}]}), 422)
        removed = check(http.request("DELETE", prefix + "/annotations", headers=admin,
                                     json={"annotationIds": [b["id"] for b in bulk]}), 200)
        assert removed.json()["data"]["deleted"] == [b["id"] for b in bulk]
        check(http.request("DELETE", prefix + "/annotations", headers=admin, json={"annotationIds": 5}), 422)
        check(http.get(prefix + "/document.json", headers=admin), 200)
        check(http.post(prefix + "/apply_instant_json", headers=admin,
                        json={"annotations": [dict(note("ij"), id="ij-" + aid)],
                              "formFieldValues": [{"name": "nope", "value": "x"}]}), 200)
        check(http.get(prefix + "/pdf", headers=admin), 200)
        xfdf = check(http.get(prefix + "/document.xfdf", headers=admin), 200).content
        check(http.post(prefix + "/apply_xfdf", headers={**admin, "Content-Type": "application/vnd.adobe.xfdf"},
                        content=xfdf), 200)
    # admin: the Document Engine routes beside them (tests/test_document_engine_routes.py
    # checks them against the vendor's schemas too)
    for prefix in (f"/api/documents/{doc}", f"/api/documents/{doc}/layers/{layer}"):
        root = {"v": 2, "type": "pspdfkit/markup/highlight", "pageIndex": 0, "bbox": [1, 1, 9, 9],
                "rects": [[1, 1, 9, 9]], "color": "#fcee7c"}
        rid = "r-" + uuid.uuid4().hex[:8]
        check(http.post(prefix + "/comments", headers=admin,
                        json={"annotation": {"id": rid, "content": root}, "comments": [{"content": {"text": "a"}}]}), 200)
        check(http.post(prefix + f"/annotations/{rid}/comments", headers=admin,
                        json={"comments": [{"content": {"text": "b"}}]}), 200)
        check(http.get(prefix + f"/annotations/{rid}/comments", headers=admin), 200)
        field = {"v": 1, "type": "pspdfkit/form-field/text", "name": "f-" + rid, "label": "F", "annotationIds": [],
                 "doNotSpellCheck": False, "doNotScroll": False, "multiLine": False, "comb": False,
                 "defaultValue": ""}
        check(http.post(prefix + "/form-fields", headers=admin, json={"formFields": [{"id": "f" + rid, "content": field}]}), 200)
        check(http.put(prefix + "/form-fields", headers=admin, json={"formFields": [{"id": "f" + rid, "content": field}]}), 200)
        check(http.get(prefix + "/form-fields", headers=admin), 200)
        check(http.get(prefix + f"/form-fields/f{rid}", headers=admin), 200)
        check(http.post(prefix + "/form-field-values", headers=admin,
                        json={"formFieldValues": [{"name": "f-" + rid, "value": "x"}]}), 200)
        check(http.request("DELETE", prefix + "/form-fields", headers=admin, json={"formFieldIds": "all"}), 200)
        check(http.post(prefix + "/form-field-values", headers=admin,  # no such field: the vendor's 422
                        json={"formFieldValues": [{"name": "nope", "value": "x"}]}), 422)
        check(http.get(prefix + "/form-field-values", headers=admin), 200)
        check(http.get(prefix + "/pages/0/annotations", headers=admin), 200)
        check(http.get(prefix + "/pages/0/image", headers=admin, params={"width": 50}), 200)
        bookmark = {"type": "pspdfkit/bookmark", "v": 1, "action": {"type": "goTo", "pageIndex": 0}}
        check(http.post(prefix + "/bookmarks", headers=admin, json={"id": "b" + rid, "content": bookmark}), 200)
        check(http.get(prefix + "/bookmarks", headers=admin), 200)
        check(http.put(prefix + f"/bookmarks/b{rid}", headers=admin, json={"content": bookmark}), 200)
        check(http.delete(prefix + f"/bookmarks/b{rid}", headers=admin), 200)
        check(http.post(prefix + "/pdf_with_instant_json", headers=admin, json={"annotations": []}), 200)
        copied = check(http.post(prefix + "/copy_with_instant_json", headers=admin, json={}), 200).json()
        check(http.delete(f"/api/documents/{copied['documentId']}", headers=admin), 200)
    check(http.get(f"/api/documents/{doc}/attachments/{sha}", headers=admin), 200)
    copy_id = check(http.post("/api/copy_document", headers=admin, json={"document_id": doc}), 200).json()
    check(http.delete(f"/api/documents/{copy_id['data']['document_id']}", headers=admin), 200)
    check(http.post("/api/revoke", headers=admin, json={"jwts": [server.token(doc, jti=uuid.uuid4().hex)]}), 200)
    check(http.post("/api/tokens/revoke", headers=admin, json={"jti": uuid.uuid4().hex}), 200)
    check(http.delete(f"/api/documents/{doc}/layers/{layer}", headers=admin), 200)
    check(http.delete(f"/api/documents/{doc}", headers=admin), 200)
    check(http.get(f"/api/documents/{doc}", headers=admin), 404)
    check(http.get("/healthz"), 200)
    check(http.get("/metrics"), 200)

    covered = {(m, t) for m, t, s in check.checked if s.startswith("2")}
    missing = [f"{m.upper()} {p}" for p, m, _ in _operations(spec) if (m, p) not in covered]
    assert not missing, missing
