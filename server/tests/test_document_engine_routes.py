"""The Document Engine routes added beside the admin API (comments, form fields and
values, page annotations and images, attachments, bookmarks, Instant JSON copies,
``copy_document``, ``/api/revoke``), each checked against the vendor's own OpenAPI
description (``../shared/vendor/document-engine/document-engine-api.yml``): the
happy path's body validates against the response schema the spec gives its route and
status, and the documented error statuses are answered. Real server on loopback,
real PDFs from the shared corpus.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import uuid
from pathlib import Path

import jsonschema_rs
import pytest
import yaml
from PIL import Image

from conftest import CORPUS, note, synthetic_pdf

VENDOR_SPEC = CORPUS.parent.parent / "vendor" / "document-engine" / "document-engine-api.yml"


@pytest.fixture(scope="module")
def vendor() -> dict:
    return yaml.safe_load(VENDOR_SPEC.read_text())


def conforms(vendor: dict, template: str, method: str, response, status: int = 200):
    """Assert ``response`` has ``status`` and, when the vendor documents a JSON schema
    for it, that its body validates against that schema (with the vendor's components)."""
    assert response.status_code == status, response.text
    operation = vendor["paths"][template][method]
    assert str(status) in operation["responses"], f"{method} {template}: vendor has no {status}"
    content = operation["responses"][str(status)].get("content", {})
    schema = content.get("application/json", {}).get("schema")
    if schema is not None and response.headers.get("content-type", "").startswith("application/json"):
        validator = jsonschema_rs.Draft202012Validator({**schema, "components": vendor["components"]})
        errors = [e.message for e in validator.iter_errors(response.json())]
        assert not errors, f"{method} {template} {status}: {errors[:3]} in {response.text[:400]}"
    return response


D = "/api/documents/{documentId}"
L = "/api/documents/{documentId}/layers/{layerName}"


def highlight(**extra) -> dict:
    return {"v": 2, "type": "pspdfkit/markup/highlight", "pageIndex": 0, "bbox": [10, 10, 100, 20],
            "rects": [[10, 10, 100, 20]], "color": "#fcee7c", **extra}


def test_comments_on_a_root_annotation(server, vendor):
    doc = server.new_document()
    admin = server.admin()
    root = server.http.post(f"/api/documents/{doc}/annotations", headers=admin,
                            json={"id": "root-1", "content": highlight()})
    assert root.status_code == 200, root.text
    body = {"comments": [{"id": "c-1", "user_id": "alice", "content": {
        "text": "What a wonderful idea!", "createdAt": "2019-11-14T15:05:03.089Z", "creatorName": "John Doe",
        "customData": {"k": 1}}}, {"content": {"text": "second"}}]}
    added = conforms(vendor, D + "/annotations/{annotationId}/comments", "post",
                     server.http.post(f"/api/documents/{doc}/annotations/root-1/comments", headers=admin, json=body))
    ids = [c["id"] for c in added.json()["data"]["comments"]]
    assert ids[0] == "c-1" and len(ids) == 2 and ids[1]
    listed = conforms(vendor, D + "/annotations/{annotationId}/comments", "get",
                      server.http.get(f"/api/documents/{doc}/annotations/root-1/comments", headers=admin))
    comments = listed.json()["data"]["comments"]
    assert [c["id"] for c in comments] == ids
    first = comments[0]
    assert first["createdBy"] == "alice" and first["content"]["rootId"] == "root-1"
    assert first["content"]["text"] == {"format": "plain", "value": "What a wonderful idea!"}
    assert first["content"]["customData"] == {"k": 1} and first["content"]["creatorName"] == "John Doe"
    # the root is now a thread root; a sync client sees root and comments as layer revisions
    records = {r["id"]: r for r in server.records(doc)["records"]}
    assert records["root-1"]["content"]["isCommentThreadRoot"] is True
    assert records["c-1"]["content"]["type"] == "pspdfkit/comment"
    assert records["c-1"]["revision"] > records["root-1"]["revision"] - 1
    # deleting the root deletes its comments (the rootId cascade)
    assert server.http.delete(f"/api/documents/{doc}/annotations/root-1", headers=admin).status_code == 200
    assert server.http.get(f"/api/documents/{doc}/annotations/root-1/comments", headers=admin).status_code == 404


def test_comment_errors(server, vendor):
    doc = server.new_document()
    admin = server.admin()
    url = f"/api/documents/{doc}/annotations/%s/comments"
    link = {"v": 2, "type": "pspdfkit/link", "pageIndex": 0, "bbox": [1, 1, 5, 5],
            "action": {"type": "uri", "uri": "https://example.com"}}
    assert server.http.post(f"/api/documents/{doc}/annotations", headers=admin,
                            json={"id": "link-1", "content": link}).status_code == 200
    server.http.post(f"/api/documents/{doc}/annotations", headers=admin, json={"id": "h", "content": highlight()})
    t = D + "/annotations/{annotationId}/comments"
    conforms(vendor, t, "get", server.http.get(url % "nope", headers=admin), 404)
    conforms(vendor, t, "post", server.http.post(url % "nope", headers=admin,
                                                 json={"comments": [{"content": {"text": "x"}}]}), 404)
    conforms(vendor, t, "post", server.http.post(url % "link-1", headers=admin,
                                                 json={"comments": [{"content": {"text": "x"}}]}), 400)
    conforms(vendor, t, "get", server.http.get(url % "link-1", headers=admin), 400)
    for bad in ({}, {"comments": [{"content": {}}]}, {"comments": [{"id": "x"}]}):
        conforms(vendor, t, "post", server.http.post(url % "h", headers=admin, json=bad), 422)
    assert server.records(doc)["revision"] == server.records(doc)["revision"]  # nothing stored by the 422s
    assert not [r for r in server.records(doc)["records"] if r["content"] and
                r["content"].get("type") == "pspdfkit/comment"]
    wrong = {"Authorization": 'Token token="wrong"'}
    response = server.http.get(url % "h", headers=wrong)
    assert response.status_code in (401, 403)  # 401 once the admin routes conform (de-conform)


def test_root_with_comments_in_a_layer(server, vendor):
    doc = server.new_document()
    admin = server.admin()
    assert server.http.post(f"/api/documents/{doc}/layers", headers=admin, json={"name": "review"}).status_code == 200
    body = {"annotation": {"id": "r2", "user_id": "bob", "content": highlight()},
            "comments": [{"content": {"text": "<p>rich</p>"}}]}
    created = conforms(vendor, L + "/comments", "post",
                       server.http.post(f"/api/documents/{doc}/layers/review/comments", headers=admin, json=body))
    data = created.json()["data"]
    assert data["annotation"]["id"] == "r2"
    records = {r["id"]: r["content"] for r in server.records(doc, layer="review")["records"]}
    comment = records[data["comments"][0]["id"]]
    assert comment["rootId"] == "r2" and comment["text"] == {"format": "xhtml", "value": "<p>rich</p>"}
    assert records["r2"]["isCommentThreadRoot"] is True
    conforms(vendor, D + "/comments", "post",
             server.http.post(f"/api/documents/{doc}/comments", headers=admin, json={"comments": []}), 422)


def test_form_fields_and_values(server, vendor):
    doc = server.new_document("pdfjs-prefilled_f1040.pdf")
    admin = server.admin()
    widgets = [r for r in server.records(doc)["records"] if r["content"]["type"] == "pspdfkit/widget"]
    widget = next(w for w in widgets if w["content"].get("formFieldType") == "text")
    name = widget["content"]["formFieldName"]
    field = {"v": 1, "type": "pspdfkit/form-field/text", "name": name, "label": "Name",
             "annotationIds": [widget["id"]], "doNotSpellCheck": False, "doNotScroll": False,
             "multiLine": False, "comb": False, "defaultValue": ""}
    created = conforms(vendor, D + "/form-fields", "post", server.http.post(
        f"/api/documents/{doc}/form-fields", headers=admin,
        json={"formFields": [{"id": "ff-1", "content": field}, {"content": {"type": "pspdfkit/form-field/text"}}]}))
    result = created.json()
    assert result["data"] == [{"id": "ff-1"}], result["failingPaths"]
    assert result["data"] == [{"id": "ff-1"}] and result["result"] == "partial_failure"
    assert result["failingPaths"][0]["path"] == "$.formFields[1]"
    listed = conforms(vendor, D + "/form-fields", "get", server.http.get(f"/api/documents/{doc}/form-fields",
                                                                        headers=admin))
    [entry] = listed.json()["data"]
    assert entry["id"] == "ff-1" and [w["id"] for w in entry["widgetAnnotations"]] == [widget["id"]]
    conforms(vendor, D + "/form-fields/{formFieldId}", "get",
             server.http.get(f"/api/documents/{doc}/form-fields/ff-1", headers=admin))
    conforms(vendor, D + "/form-fields/{formFieldId}", "get",
             server.http.get(f"/api/documents/{doc}/form-fields/nope", headers=admin), 404)
    updated = conforms(vendor, D + "/form-fields", "put", server.http.put(
        f"/api/documents/{doc}/form-fields", headers=admin,
        json={"formFields": [{"id": "ff-1", "content": {**field, "label": "Full name"}}]}))
    assert updated.json()["result"] == "success"
    # values: set through the admin write path, read back as FormFieldValueRecord
    conforms(vendor, D + "/form-field-values", "post", server.http.post(
        f"/api/documents/{doc}/form-field-values", headers=admin,
        json={"formFieldValues": [{"name": name, "value": "Ada Lovelace"}]}))
    values = conforms(vendor, D + "/form-field-values", "get",
                      server.http.get(f"/api/documents/{doc}/form-field-values", headers=admin))
    assert {"name": name, "value": "Ada Lovelace"}.items() <= next(
        v for v in values.json()["data"]["formFieldValues"] if v["name"] == name).items()
    conforms(vendor, D + "/form-field-values", "post", server.http.post(
        f"/api/documents/{doc}/form-field-values", headers=admin, json={"formFieldValues": [{"value": "x"}]}), 422)
    # delete cascades to the field's widgets
    deleted = conforms(vendor, D + "/form-fields", "delete", server.http.request(
        "DELETE", f"/api/documents/{doc}/form-fields", headers=admin, json={"formFieldIds": ["ff-1"]}))
    assert deleted.json()["data"] == [{"id": "ff-1"}]
    live = {r["id"] for r in server.records(doc)["records"] if not r["deleted"]}
    assert "ff-1" not in live and widget["id"] not in live
    conforms(vendor, D + "/form-fields", "delete", server.http.request(
        "DELETE", f"/api/documents/{doc}/form-fields", headers=admin, json={"formFieldIds": 7}), 422)
    conforms(vendor, L + "/form-fields", "get",
             server.http.get(f"/api/documents/{doc}/layers/~/form-fields", headers=admin))


def test_page_annotations(server, vendor):
    doc = server.new_document()
    admin = server.admin()
    server.http.post(f"/api/documents/{doc}/annotations", headers=admin,
                     json={"id": "p0", "content": note("on page 0")})
    page = conforms(vendor, D + "/pages/{pageIndex}/annotations", "get",
                    server.http.get(f"/api/documents/{doc}/pages/0/annotations", headers=admin))
    found = page.json()["data"]["annotations"]
    assert "p0" in [a["id"] for a in found] and all(a["content"]["pageIndex"] == 0 for a in found)
    assert page.json()["data"]["truncated"] is False
    streamed = server.http.get(f"/api/documents/{doc}/layers/~/pages/0/annotations",
                               headers={**admin, "Accept": "application/x-ndjson"})
    assert streamed.status_code == 200
    assert [json.loads(line)["id"] for line in streamed.text.splitlines()] == [a["id"] for a in found]
    conforms(vendor, D + "/pages/{pageIndex}/annotations", "get",
             server.http.get(f"/api/documents/{doc}/pages/999/annotations", headers=admin), 404)


def test_page_image_is_a_png_of_the_size_asked(server, vendor):
    doc = server.new_document()
    admin = server.admin()
    t = D + "/pages/{pageIndex}/image"
    by_width = conforms(vendor, t, "get", server.http.get(f"/api/documents/{doc}/pages/0/image",
                                                         params={"width": 300}, headers=admin))
    assert by_width.headers["content-type"] == "image/png"
    image = Image.open(io.BytesIO(by_width.content))
    assert image.format == "PNG" and image.size[0] == 300
    by_height = server.http.get(f"/api/documents/{doc}/layers/~/pages/0/image", params={"height": 200},
                                headers=admin)
    assert Image.open(io.BytesIO(by_height.content)).size[1] == 200
    ratio = image.size[1] / image.size[0]
    assert abs(Image.open(io.BytesIO(by_height.content)).size[0] - 200 / ratio) <= 1.5
    conforms(vendor, t, "get", server.http.get(f"/api/documents/{doc}/pages/0/image", headers=admin), 400)
    conforms(vendor, t, "get", server.http.get(f"/api/documents/{doc}/pages/0/image",
                                               params={"width": 10, "height": 10}, headers=admin), 400)
    conforms(vendor, t, "get", server.http.get(f"/api/documents/{doc}/pages/99/image",
                                               params={"width": 10}, headers=admin), 404)


def test_page_image_of_a_narrow_page_is_refused_not_rendered_gigapixel(server, vendor):
    """width=8000 of a 3 × 14400 pt page (PDF's limits) would make the other side 38 million
    pixels (a bitmap of terabytes for PDFium): 400, and the server renders the next page."""
    document_id = "doc-" + uuid.uuid4().hex
    assert server.upload(synthetic_pdf([([0, 0, 3, 14400], 0)]), document_id).status_code == 200
    t = D + "/pages/{pageIndex}/image"
    for params in ({"width": 8000}, {"height": 4000}):
        answer = server.http.get(f"/api/documents/{document_id}/pages/0/image", params=params,
                                 headers=server.admin())
        if "height" in params:  # the long side asked: the short one is small, rendered
            assert answer.status_code == 200 and Image.open(io.BytesIO(answer.content)).size[1] == 4000
        else:
            conforms(vendor, t, "get", answer, 400)
            assert "8000" in answer.json()["error"]["message"]


def test_attachment_bytes(server, vendor):
    doc = server.new_document("pdfjs-annotation-fileattachment.pdf")
    admin = server.admin()
    files = [r["content"] for r in server.records(doc)["records"] if r["content"].get("fileAttachmentId")]
    assert files, "the corpus file has a file attachment"
    sha = files[0]["fileAttachmentId"]
    got = server.http.get(f"/api/documents/{doc}/attachments/{sha}", headers=admin)
    assert got.status_code == 200 and hashlib.sha256(got.content).hexdigest() == sha
    assert server.http.get(f"/api/documents/{doc}/attachments/{'0' * 64}", headers=admin).status_code == 404
    assert server.http.get(f"/api/documents/{doc}/attachments/nope", headers=admin).status_code == 404


def test_bookmarks(server, vendor):
    doc = server.new_document()
    admin = server.admin()
    bookmark = {"type": "pspdfkit/bookmark", "v": 1, "name": "Intro", "action": {"type": "goTo", "pageIndex": 0}}
    created = conforms(vendor, D + "/bookmarks", "post", server.http.post(
        f"/api/documents/{doc}/bookmarks", headers=admin, json={"id": "bm-1", "content": bookmark}))
    assert created.json()["data"]["id"] == "bm-1"
    bare = server.http.post(f"/api/documents/{doc}/bookmarks", headers=admin, json=bookmark)
    assert bare.status_code == 200 and bare.json()["data"]["id"] != "bm-1"
    listed = conforms(vendor, D + "/bookmarks", "get", server.http.get(f"/api/documents/{doc}/bookmarks",
                                                                      headers=admin))
    assert {b["id"] for b in listed.json()["data"]["bookmarks"]} == {"bm-1", bare.json()["data"]["id"]}
    conforms(vendor, D + "/bookmarks/{bookmarkId}", "put", server.http.put(
        f"/api/documents/{doc}/bookmarks/bm-1", headers=admin, json={"id": "bm-1", "content": {**bookmark, "name": "X"}}))
    assert server.records(doc)["records"][-1]["content"]["name"] == "X"  # a layer revision
    conforms(vendor, D + "/bookmarks", "post", server.http.post(
        f"/api/documents/{doc}/bookmarks", headers=admin, json={"content": {"type": "pspdfkit/bookmark"}}), 400)
    conforms(vendor, D + "/bookmarks/{bookmarkId}", "delete",
             server.http.delete(f"/api/documents/{doc}/bookmarks/bm-1", headers=admin))
    # the spec documents no 404 here: a delete again is done (200), an id without a bookmark 400
    again = conforms(vendor, D + "/bookmarks/{bookmarkId}", "delete",
                     server.http.delete(f"/api/documents/{doc}/bookmarks/bm-1", headers=admin))
    assert again.json() == {"data": {"id": "bm-1"}}
    server.http.post(f"/api/documents/{doc}/annotations", headers=admin, json={"id": "n-1", "content": note("x")})
    for missing in ("never-there", "n-1"):  # no such record; a record that is no bookmark
        refused = conforms(vendor, D + "/bookmarks/{bookmarkId}", "delete",
                           server.http.delete(f"/api/documents/{doc}/bookmarks/{missing}", headers=admin), 400)
        assert refused.json()["error"]["code"] == "invalid_request" and missing in refused.text
        conforms(vendor, D + "/bookmarks/{bookmarkId}", "put", server.http.put(
            f"/api/documents/{doc}/bookmarks/{missing}", headers=admin, json={"content": bookmark}), 400)
    assert "n-1" in {r["id"] for r in server.records(doc)["records"] if not r["deleted"]}
    conforms(vendor, D + "/bookmarks/{bookmarkId}", "put", server.http.put(
        f"/api/documents/{doc}/bookmarks/bm-1", headers=admin, json={"content": bookmark}), 400)
    conforms(vendor, L + "/bookmarks", "get", server.http.get(f"/api/documents/{doc}/layers/~/bookmarks",
                                                             headers=admin))


def _instant_json(*annotations) -> dict:
    return {"format": "https://pspdfkit.com/instant-json/v1", "annotations": list(annotations)}


def test_pdf_with_instant_json_stores_nothing(server, vendor):
    doc = server.new_document()
    admin = server.admin()
    before = server.records(doc)["revision"]
    part = json.dumps(_instant_json({**note("from instant json"), "id": "ij-1"}))
    response = conforms(vendor, D + "/pdf_with_instant_json", "post", server.http.post(
        f"/api/documents/{doc}/pdf_with_instant_json", headers=admin,
        files={"instant.json": ("instant.json", part, "application/json")}))
    assert response.headers["content-type"] == "application/pdf" and response.content.startswith(b"%PDF")
    assert b"from instant json" in response.content or b"ij-1" in response.content
    assert server.records(doc)["revision"] == before
    conforms(vendor, D + "/pdf_with_instant_json", "post", server.http.post(
        f"/api/documents/{doc}/pdf_with_instant_json", headers=admin,
        files={"other": ("x.json", "{}", "application/json")}), 400)
    conforms(vendor, D + "/pdf_with_instant_json", "post", server.http.post(
        f"/api/documents/nope-{uuid.uuid4().hex}/pdf_with_instant_json", headers=admin,
        files={"instant.json": ("instant.json", part, "application/json")}), 404)


def test_copy_with_instant_json_is_an_independent_document(server, vendor):
    doc = server.new_document()
    admin = server.admin()
    part = json.dumps(_instant_json({**note("only in the copy", customData={"x": [1, 2]}), "id": "ij-2"}))
    copied = conforms(vendor, D + "/copy_with_instant_json", "post", server.http.post(
        f"/api/documents/{doc}/copy_with_instant_json", headers=admin,
        files={"instant.json": ("instant.json", part, "application/json")}))
    new_id = copied.json()["documentId"]
    assert new_id != doc
    copy_records = {r["id"]: r["content"] for r in server.records(new_id)["records"]}
    source_records = {r["id"]: r["content"] for r in server.records(doc)["records"]}
    assert copy_records["ij-2"]["customData"] == {"x": [1, 2]} and "ij-2" not in source_records
    assert set(source_records) <= set(copy_records)
    # independent: a write to the copy does not reach the source, and the other way round
    server.http.delete(f"/api/documents/{new_id}/annotations/ij-2", headers=admin)
    some = next(iter(source_records))
    server.http.delete(f"/api/documents/{doc}/annotations/{some}", headers=admin)
    assert some in {r["id"] for r in server.records(new_id)["records"] if not r["deleted"]}
    # a JSON body is ignored: the layer is copied as is
    plain = conforms(vendor, L + "/copy_with_instant_json", "post", server.http.post(
        f"/api/documents/{doc}/layers/~/copy_with_instant_json", headers=admin, json={"ignored": True}))
    assert "ij-2" not in {r["id"] for r in server.records(plain.json()["documentId"])["records"]}


def test_copy_document_copies_every_layer(server, vendor):
    doc = server.new_document()
    admin = server.admin()
    server.http.post(f"/api/documents/{doc}/layers", headers=admin, json={"name": "alice"})
    server.http.post(f"/api/documents/{doc}/layers/alice/annotations", headers=admin,
                     json={"id": "a-1", "content": note("alice's")})
    new_id = "copy-" + uuid.uuid4().hex
    copied = conforms(vendor, "/api/copy_document", "post", server.http.post(
        "/api/copy_document", headers=admin, json={"document_id": doc, "new_document_id": new_id}))
    assert copied.json() == {"data": {"document_id": new_id}}
    alice = {r["id"]: r["content"] for r in server.records(doc, layer="alice")["records"]}
    assert "a-1" in alice
    assert {r["id"]: r["content"] for r in server.records(new_id, layer="alice")["records"]} == alice
    assert server.records(new_id)["epoch"] != server.records(doc)["epoch"]
    assert server.http.get(f"/api/documents/{new_id}/pdf", headers=admin).content == \
        server.http.get(f"/api/documents/{doc}/pdf", headers=admin).content
    server.http.delete(f"/api/documents/{doc}/layers/alice/annotations/a-1", headers=admin)
    assert "a-1" in {r["id"] for r in server.records(new_id, layer="alice")["records"] if not r["deleted"]}
    conforms(vendor, "/api/copy_document", "post", server.http.post(
        "/api/copy_document", headers=admin, json={"document_id": "nope-" + uuid.uuid4().hex}), 404)
    conforms(vendor, "/api/copy_document", "post", server.http.post("/api/copy_document", headers=admin, json={}), 400)
    assert server.http.post("/api/copy_document", headers=admin,
                            json={"document_id": doc, "new_document_id": new_id}).status_code == 409


def test_revoke_by_jwt_and_the_old_path(server, vendor):
    doc = server.new_document()
    jti = "jti-" + uuid.uuid4().hex
    token = server.token(doc, jti=jti)
    assert server.records(doc)  # the token works
    revoked = conforms(vendor, "/api/revoke", "post", server.http.post(
        "/api/revoke", headers=server.admin(), json={"jwts": [token, "not-a-jwt"]}))
    assert revoked.json()["data"] == [token] and revoked.json()["result"] == "partial_failure"
    response = server.http.get(server.layer_url(doc) + "/records", params={"since": 0},
                               headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 403
    old = server.http.post("/api/tokens/revoke", headers=server.admin(), json={"jti": "x-" + uuid.uuid4().hex})
    assert old.status_code == 200 and old.json()["data"]["revoked"] is True
    conforms(vendor, "/api/revoke", "post", server.http.post("/api/revoke", headers=server.admin(),
                                                             json={"jwts": 3}), 400)


def test_records_are_listed_and_exported_under_their_kind(server, vendor):
    """One rule (layersync_server.record_kinds) says where a record goes: a bookmark, a form
    field, a form field value and a comment are not annotations (``.../annotations``,
    ``.../pages/{i}/annotations``); document.json files them under ``bookmarks``,
    ``formFields``, ``formFieldValues`` and ``comments``, and applying that document.json
    to another layer gives them all back where they were."""
    doc = "kinds-" + uuid.uuid4().hex
    assert server.upload(synthetic_pdf([([0, 0, 612, 792], 0)]), doc).status_code == 200
    admin = server.admin()
    bookmark = {"type": "pspdfkit/bookmark", "v": 1, "name": "Intro", "action": {"type": "goTo", "pageIndex": 0}}
    field = {"v": 1, "type": "pspdfkit/form-field/text", "name": "kinds-field", "label": "F", "pageIndex": 0,
             "annotationIds": [], "doNotSpellCheck": False, "doNotScroll": False, "multiLine": False,
             "comb": False, "defaultValue": ""}
    value = {"v": 1, "type": "pspdfkit/form-field-value", "name": "kinds-value", "value": "filled", "pageIndex": 0}
    assert server.http.post(f"/api/documents/{doc}/annotations", headers=admin,
                            json={"id": "hl", "content": highlight()}).status_code == 200
    assert server.http.post(f"/api/documents/{doc}/bookmarks", headers=admin,
                            json={"id": "bm", "content": bookmark}).status_code == 200
    assert server.http.post(f"/api/documents/{doc}/form-fields", headers=admin,
                            json={"formFields": [{"id": "ff", "content": field}]}).json()["data"] == [{"id": "ff"}]
    assert server.http.post(f"/api/documents/{doc}/annotations/hl/comments", headers=admin,
                            json={"comments": [{"id": "cm", "content": {"text": "why?"}}]}).status_code == 200
    synced = server.sync(doc, [{"change_id": uuid.uuid4().hex, "op": "create", "id": "fv", "content": value}])
    assert [a["id"] for a in synced.json()["accepted"]] == ["fv"], synced.text
    not_annotations = {"bm", "ff", "cm", "fv"}

    for layer in (D, L):
        path = (D if layer == D else D + "/layers/~").replace("{documentId}", doc)
        listed = conforms(vendor, layer + "/annotations", "get", server.http.get(path + "/annotations", headers=admin))
        assert [a["id"] for a in listed.json()["data"]["annotations"]] == ["hl"]
        streamed = server.http.get(path + "/annotations", headers={**admin, "Accept": "application/x-ndjson"})
        assert [json.loads(line)["id"] for line in streamed.text.splitlines()] == ["hl"]
        page = conforms(vendor, layer + "/pages/{pageIndex}/annotations", "get",
                        server.http.get(path + "/pages/0/annotations", headers=admin))
        assert [a["id"] for a in page.json()["data"]["annotations"]] == ["hl"]
        exported = conforms(vendor, layer + "/document.json", "get",
                            server.http.get(path + "/document.json", headers=admin)).json()
        assert [a["id"] for a in exported["annotations"]] == ["hl"]
        assert [c["id"] for c in exported["comments"]] == ["cm"]
        assert exported["bookmarks"] == [{**bookmark, "id": "bm"}]
        assert exported["formFields"] == [{**field, "id": "ff"}]
        assert exported["formFieldValues"] == [{**value, "id": "fv"}]
    values = conforms(vendor, D + "/form-field-values", "get",
                      server.http.get(f"/api/documents/{doc}/form-field-values", headers=admin))
    [listed_value] = values.json()["data"]["formFieldValues"]
    assert listed_value["name"] == "kinds-value" and listed_value["value"] == "filled"
    assert listed_value["createdBy"] == "alice"

    # document.json applied to a new layer: every record comes back under its own key
    assert server.http.post(f"/api/documents/{doc}/layers", headers=admin, json={"name": "copy"}).status_code == 200
    applied = server.http.post(f"/api/documents/{doc}/layers/copy/apply_instant_json", headers=admin, json=exported)
    assert applied.status_code == 200, applied.text
    again = server.http.get(f"/api/documents/{doc}/layers/copy/document.json", headers=admin).json()
    for key in ("annotations", "comments", "bookmarks", "formFields", "formFieldValues"):
        assert again[key] == exported[key], key
    copied = {r["id"] for r in server.records(doc, layer="copy")["records"] if not r["deleted"]}
    assert not_annotations | {"hl"} <= copied


# -- review findings of issue 15 --------------------------------------------------------------

def test_create_annotation_without_type_is_422(server):
    """POST .../annotations {"content": {}} (no type, no pageIndex, no bbox): the vendor's
    AnnotationContent is one of its annotation types, so Document Engine answers 422 and
    stores nothing."""
    document_id = server.new_document()
    before = server.document_json(document_id)["annotations"]
    for body in ({"content": {}}, {"annotations": [{"content": {"pageIndex": 0}}]}):
        response = server.http.post(f"/api/documents/{document_id}/annotations",
                                    json=body, headers=server.admin())
        assert response.status_code == 422, response.text
    assert server.document_json(document_id)["annotations"] == before


def test_form_field_values_for_unknown_field_is_not_reported_as_set(server):
    """POST .../form-field-values for a field the layer has no widget (or form field) of is
    answered 422 ("One or more of the request parameters were invalid", the vendor's spec)
    and nothing is set. apply_instant_json and apply_xfdf (whose vendor answers are 200,
    401, 404 only) apply the rest and name the unknown fields in skippedFormFieldValues."""
    document_id = server.new_document("pdfjs-prefilled_f1040.pdf")
    known = "topmostSubform[0].Page1[0].c1_04"
    response = server.http.post(f"/api/documents/{document_id}/form-field-values",
                                json={"formFieldValues": [{"name": "no.such.field", "value": "x"},
                                                          {"name": known, "value": "MJ"}]},
                                headers=server.admin())
    values = {v["name"]: v["value"] for v in server.document_json(document_id)["formFieldValues"]}
    assert response.status_code == 422, response.text
    assert "no.such.field" in response.json()["error"]["message"]
    assert "no.such.field" not in values and values.get(known) != "MJ"  # nothing applied
    response = server.http.post(f"/api/documents/{document_id}/apply_instant_json", headers=server.admin(),
                                json={"formFieldValues": [{"name": "no.such.field", "value": "x"},
                                                          {"name": known, "value": "MJ"}]})
    assert response.status_code == 200, response.text
    assert response.json()["data"]["skippedFormFieldValues"] == ["no.such.field"]
    values = {v["name"]: v["value"] for v in server.document_json(document_id)["formFieldValues"]}
    assert values[known] == "MJ" and "no.such.field" not in values
    xfdf = ('<xfdf xmlns="http://ns.adobe.com/xfdf/"><fields><field name="no.such.field"><value>x</value>'
            '</field></fields></xfdf>')
    response = server.http.post(f"/api/documents/{document_id}/apply_xfdf", content=xfdf.encode(),
                                headers={**server.admin(), "Content-Type": "application/vnd.adobe.xfdf"})
    assert response.status_code == 200, response.text
    assert response.json()["data"]["skippedFormFieldValues"] == ["no.such.field"]


def test_form_field_values_of_a_field_without_widgets_are_stored(server):
    """A field made through .../form-fields without widgets takes a value: it is stored as
    the field's form-field-value record, not dropped."""
    document_id = server.empty_document()
    field = {"v": 1, "type": "pspdfkit/form-field/text", "id": "ff-1", "name": "lonely",
             "label": "Lonely", "annotationIds": [], "doNotSpellCheck": False, "doNotScroll": False,
             "multiLine": False, "comb": False, "defaultValue": ""}
    response = server.http.post(f"/api/documents/{document_id}/form-fields",
                                json={"formFields": [{"content": field}]}, headers=server.admin())
    assert response.status_code == 200 and response.json()["failingPaths"] == [], response.text
    response = server.http.post(f"/api/documents/{document_id}/form-field-values",
                                json={"formFieldValues": [{"name": "lonely", "value": "hi"}]},
                                headers=server.admin())
    assert response.status_code == 200, response.text
    values = {v["name"]: v["value"] for v in server.document_json(document_id)["formFieldValues"]}
    assert values["lonely"] == "hi"


def test_instant_json_refuses_page_past_last_page_as_xfdf_does(server):
    """apply_instant_json refuses an annotation with pageIndex 50 on a 1-page document with
    400, as XFDF apply does (one rule, page_past_last): the PDF export could not place it
    and no pages/{i}/annotations would list it."""
    document_id = server.new_document("pypdf-example.pdf")
    note_record = {"v": 2, "type": "pspdfkit/note", "id": "far-page", "pageIndex": 50,
                   "bbox": [1, 1, 20, 20], "icon": "comment", "text": {"format": "plain", "value": "x"},
                   "createdAt": "2024-01-01T00:00:00Z", "updatedAt": "2024-01-02T00:00:00Z", "opacity": 1}
    response = server.http.post(f"/api/documents/{document_id}/apply_instant_json",
                                json={"annotations": [note_record]}, headers=server.admin())
    assert response.status_code == 400, response.text
    xfdf = ('<xfdf xmlns="http://ns.adobe.com/xfdf/"><annots><text name="far-page" page="50" '
            'rect="1,1,21,21"/></annots></xfdf>')
    response = server.http.post(f"/api/documents/{document_id}/apply_xfdf", content=xfdf.encode(),
                                headers={**server.admin(), "Content-Type": "application/vnd.adobe.xfdf"})
    assert response.status_code == 400, response.text
    assert "far-page" not in {a["id"] for a in server.document_json(document_id)["annotations"]}
