"""Admin REST API (Document Engine shaped): documents, layers, annotation CRUD,
Instant JSON, PDF per layer; admin writes reach long-polling clients."""

from __future__ import annotations

import asyncio
import io
import json
import uuid

import httpx
import pikepdf

from conftest import CORPUS, note

SAMPLE = "sample-files-024-annotated_pdf.pdf"


def _api(server, method, path, **kwargs):
    headers = {**server.admin(), **kwargs.pop("headers", {})}
    return server.http.request(method, path, headers=headers, **kwargs)


def test_documents_info_paging_and_delete(server):
    doc = server.new_document()
    info = _api(server, "GET", f"/api/documents/{doc}")
    assert info.status_code == 200 and info.json()["data"]["layers"] == [""]
    document_info = _api(server, "GET", f"/api/documents/{doc}/document_info").json()["data"]
    assert document_info["document_id"] == doc and document_info["pageCount"] >= 1
    assert [p["pageIndex"] for p in document_info["pages"]] == list(range(document_info["pageCount"]))
    listed = _api(server, "GET", "/api/documents", params={"page_size": 1}).json()
    assert len(listed["data"]) == 1 and listed["document_count"] >= 1
    assert _api(server, "DELETE", f"/api/documents/{doc}").status_code == 200
    assert _api(server, "GET", f"/api/documents/{doc}").status_code == 404
    assert _api(server, "DELETE", f"/api/documents/{doc}").status_code == 404
    assert server.http.get(server.layer_url(doc) + "/records", headers=server.auth(doc)).status_code == 404


def test_layers_from_base_other_layer_and_instant_json(server):
    doc = server.new_document()
    base_ids = {a["id"] for a in _api(server, "GET", f"/api/documents/{doc}/annotations")
                .json()["data"]["annotations"]}
    _api(server, "POST", f"/api/documents/{doc}/annotations", json={"id": "extra", "content": note("only in default")})
    created = _api(server, "POST", f"/api/documents/{doc}/layers",
                   json={"name": "review", "instant_json": {"annotations": [note("added", id="n1")]}})
    assert created.status_code == 200, created.text
    review = {a["id"] for a in _api(server, "GET", f"/api/documents/{doc}/layers/review/annotations")
              .json()["data"]["annotations"]}
    assert review == base_ids | {"n1"}
    copy = _api(server, "POST", f"/api/documents/{doc}/layers", json={"name": "copy", "source_layer_name": ""})
    assert copy.status_code == 200 and copy.json()["data"]["recordCount"] == len(base_ids) + 1
    assert copy.json()["data"]["name"] == "copy" and copy.json()["data"]["errors"] == []
    assert _api(server, "POST", f"/api/documents/{doc}/layers", json={"name": "review"}).status_code == 409
    assert _api(server, "POST", f"/api/documents/{doc}/layers", json={"name": "../x"}).status_code == 400
    # an unknown source layer: the base layer (Document Engine's rule), not the default layer's copy
    from_missing = _api(server, "POST", f"/api/documents/{doc}/layers",
                        json={"name": "z", "source_layer_name": "missing"})
    assert from_missing.status_code == 200 and from_missing.json()["data"]["recordCount"] == len(base_ids)
    names = _api(server, "GET", f"/api/documents/{doc}/layers").json()["data"]
    assert names == ["", "copy", "review", "z"]
    epoch = server.records(doc, layer="review")["epoch"]
    assert _api(server, "DELETE", f"/api/documents/{doc}/layers/review").status_code == 200
    assert _api(server, "DELETE", f"/api/documents/{doc}/layers/review").status_code == 404
    # deleted: a client request gets 404 and does not bring it back; the admin create does
    deleted = server.http.get(server.layer_url(doc, "review") + "/records",
                              headers=server.auth(doc, "review"))
    assert deleted.status_code == 404 and deleted.json()["error"]["code"] == "not_found"
    assert _api(server, "POST", f"/api/documents/{doc}/layers", json={"name": "review"}).status_code == 200
    assert server.records(doc, layer="review")["epoch"] != epoch


def test_the_default_layer_is_deleted_and_created_again_by_name_empty(server):
    doc = server.new_document()
    epoch = server.records(doc)["epoch"]
    assert _api(server, "POST", f"/api/documents/{doc}/layers", json={"name": ""}).status_code == 409
    assert _api(server, "DELETE", f"/api/documents/{doc}/layers/~").status_code == 200
    gone = server.http.get(server.layer_url(doc) + "/records", headers=server.auth(doc))
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
    again = _api(server, "POST", f"/api/documents/{doc}/layers", json={"name": ""})
    assert again.status_code == 200, again.text
    assert server.records(doc)["epoch"] != epoch
    assert _api(server, "GET", f"/api/documents/{doc}/layers").json()["data"] == [""]


def test_annotation_crud_per_layer(server):
    doc = server.new_document()
    root = f"/api/documents/{doc}/layers/crud/annotations"
    created = _api(server, "POST", root, json={"content": note("a"), "user_id": "bob"})
    assert created.status_code == 200, created.text
    aid = created.json()["data"]["annotation_id"]
    assert created.json()["data"]["id"] == aid and created.json()["data"]["createdBy"] == "bob"
    assert _api(server, "POST", root, json={"id": aid, "content": note("dup")}).status_code == 409
    got = _api(server, "GET", f"{root}/{aid}").json()  # an AnnotationRecord, no envelope
    assert got["content"]["text"]["value"] == "a" and got["id"] == aid
    assert got["createdBy"] == "bob" and got["updatedBy"] == "bob" and got["group"] is None
    updated = _api(server, "PUT", f"{root}/{aid}", json={"content": note("b"), "user_id": "carol"})
    assert updated.status_code == 200 and updated.json()["data"]["content"]["id"] == aid
    assert updated.json()["data"]["createdBy"] == "bob" and updated.json()["data"]["updatedBy"] == "carol"
    assert _api(server, "DELETE", f"{root}/{aid}").status_code == 200
    assert _api(server, "GET", f"{root}/{aid}").status_code == 404
    assert _api(server, "PUT", f"{root}/{aid}", json={"content": note("c")}).status_code == 404
    assert _api(server, "DELETE", f"{root}/{aid}").status_code == 404
    assert _api(server, "POST", root, content=b"[1,", headers={"Content-Type": "application/json"}).status_code == 400


def test_lists_are_capped_and_ndjson_streams_everything(server):
    doc = server.new_document()
    annotations = [note(str(i), id=f"bulk-{i:04d}") for i in range(1001)]
    for start in range(0, 1000, 100):  # bodies stay under the test server's 64 KiB limit
        applied = _api(server, "POST", f"/api/documents/{doc}/layers/bulk/apply_instant_json",
                       json={"format": "https://pspdfkit.com/instant-json/v1",
                             "annotations": annotations[start:start + 100]})
        assert applied.status_code == 200 and applied.json()["data"]["created"] == 100
    applied = _api(server, "POST", f"/api/documents/{doc}/layers/bulk/apply_instant_json",
                   json={"annotations": annotations[950:]})
    assert applied.json()["data"] == {"created": 1, "updated": 0, "unchanged": 50, "revision": 1001}
    listed = _api(server, "GET", f"/api/documents/{doc}/layers/bulk/annotations").json()["data"]
    assert len(listed["annotations"]) == 1000 and listed["truncated"] is True
    streamed = server.http.get(f"/api/documents/{doc}/layers/bulk/annotations",
                               headers={**server.admin(), "Accept": "application/x-ndjson"})
    assert streamed.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in streamed.text.splitlines()]
    assert len(lines) == 1001 and lines[0]["id"] == "bulk-0000"


def test_document_json_and_layer_pdf(server):
    doc = server.new_document()
    _api(server, "POST", f"/api/documents/{doc}/layers/p/annotations",
         json={"id": "pdfnote", "content": note("in pdf")})
    exported = _api(server, "GET", f"/api/documents/{doc}/layers/p/document.json").json()
    assert "pdfnote" in [a["id"] for a in exported["annotations"]]
    pdf = _api(server, "GET", f"/api/documents/{doc}/layers/p/pdf")
    assert pdf.status_code == 200 and pdf.headers["content-type"] == "application/pdf"
    with pikepdf.open(io.BytesIO(pdf.content)) as parsed:
        names = [str(a.get("/NM")) for page in parsed.pages for a in page.obj.get("/Annots", [])]
    assert "pdfnote" in names


def test_admin_changes_reach_long_polls(server):
    doc = server.new_document()
    since = server.records(doc)["revision"]

    async def scenario():
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            poll = asyncio.create_task(client.get(server.layer_url(doc) + "/changes",
                                                  params={"since": since, "wait": 8}, headers=server.auth(doc)))
            await asyncio.sleep(0.3)
            assert not poll.done()
            made = await client.post(f"/api/documents/{doc}/annotations",
                                     json={"id": "adm", "content": note("admin")}, headers=server.admin())
            assert made.status_code == 200
            return await poll

    response = asyncio.run(scenario())
    assert [r["id"] for r in response.json()["records"]] == ["adm"]


def test_openapi_describes_the_apis(server):
    spec = server.http.get("/openapi.json").json()
    paths = spec["paths"]
    for path in ["/api/documents", "/api/documents/{document_id}", "/api/documents/{document_id}/layers",
                 "/api/documents/{document_id}/layers/{layer}/annotations/{annotation_id}",
                 "/api/documents/{document_id}/apply_instant_json", "/api/documents/{document_id}/pdf",
                 "/sync/v1/info", "/sync/v1/documents/{document_id}/attachments/{sha256}"]:
        assert path in paths, path
    assert "delete" in paths["/api/documents/{document_id}"]


INSTANT_JSON_FORMAT = "https://pspdfkit.com/instant-json/v1"


def test_document_list_pages_by_cursor_filters_by_title_and_orders(server):
    tag = uuid.uuid4().hex[:10]
    pdf = (CORPUS / SAMPLE).read_bytes()
    made = []
    for title in ("b", "A", "c"):
        response = server.http.post("/api/documents", headers=server.admin(),
                                    files={"file": ("x.pdf", pdf, "application/pdf")},
                                    data={"title": f"{tag}-{title}"})
        assert response.status_code == 200, response.text
        made.append(response.json()["data"]["document_id"])
    listed = _api(server, "GET", "/api/documents", params={"title": tag.upper(), "page_size": 2,
                                                            "order_by": "title", "order_direction": "asc",
                                                            "count_remaining": "true"}).json()
    assert [d["title"] for d in listed["data"]] == [f"{tag}-A", f"{tag}-b"]
    assert listed["document_count"] == 3 and listed["prev_cursor"] is None
    assert listed["prev_document_count"] == 0 and listed["next_document_count"] == 1
    rest = _api(server, "GET", "/api/documents", params={"title": tag, "page_size": 2, "order_by": "title",
                                                          "order_direction": "asc",
                                                          "cursor": listed["next_cursor"]}).json()
    assert [d["title"] for d in rest["data"]] == [f"{tag}-c"] and rest["next_cursor"] is None
    newest_first = _api(server, "GET", "/api/documents", params={"title": tag}).json()["data"]
    assert [d["document_id"] for d in newest_first] == made[::-1]  # created_at, desc by default
    assert {"sourcePdfSha256", "byteSize", "createdAt", "passwordProtected", "title"} <= set(newest_first[0])
    assert _api(server, "GET", "/api/documents", params={"cursor": "not-ours"}).status_code == 400


def test_layers_accept_an_instant_json_part_and_apply_instant_json_too(server):
    doc = server.new_document()
    part = json.dumps({"format": INSTANT_JSON_FORMAT, "annotations": [note("from part", id="mp-1")]})
    made = _api(server, "POST", f"/api/documents/{doc}/layers",
                files={"instant.json": ("instant.json", part, "application/json")}, data={"name": "mp"})
    assert made.status_code == 200, made.text
    assert made.json()["data"]["name"] == "mp"
    got = _api(server, "GET", f"/api/documents/{doc}/layers/mp/annotations/mp-1")
    assert got.status_code == 200 and got.json()["content"]["text"]["value"] == "from part"
    part = json.dumps({"format": INSTANT_JSON_FORMAT, "annotations": [note("applied", id="mp-2")]})
    applied = _api(server, "POST", f"/api/documents/{doc}/layers/mp/apply_instant_json",
                   files={"instant.json": ("instant.json", part, "application/json")})
    assert applied.status_code == 200 and applied.json()["data"]["created"] == 1, applied.text
    missing = _api(server, "POST", f"/api/documents/{doc}/apply_instant_json",
                   files={"other": ("x.json", part, "application/json")})
    assert missing.status_code == 400 and "instant.json" in missing.json()["error"]["message"]


def test_upload_attachment_replaces_the_pdf_annotations_and_overwrite_replaces_the_document(server):
    doc = "att-" + uuid.uuid4().hex
    pdf = (CORPUS / SAMPLE).read_bytes()
    attachment = json.dumps({"format": INSTANT_JSON_FORMAT, "annotations": [note("attached", id="att-1")]})
    response = server.http.post("/api/documents", headers=server.admin(),
                                files={"file": ("s.pdf", pdf, "application/pdf"),
                                       "attachment": ("a.json", attachment, "application/json")},
                                data={"document_id": doc})
    assert response.status_code == 200, response.text
    assert response.json()["data"]["errors"] == [] and response.json()["data"]["annotationCount"] == 1
    ids = [a["id"] for a in _api(server, "GET", f"/api/documents/{doc}/annotations").json()["data"]["annotations"]]
    assert ids == ["att-1"]
    other = (CORPUS / "pypdf-example.pdf").read_bytes()
    assert server.upload(other, doc).status_code == 409
    replaced = server.http.post("/api/documents", headers=server.admin(),
                                files={"file": ("o.pdf", other, "application/pdf")},
                                data={"document_id": doc, "overwrite_existing_document": "true"})
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["data"]["sourcePdfSha256"] != response.json()["data"]["sourcePdfSha256"]


def test_a_write_without_content_is_422_and_nothing_is_stored(server):
    doc = server.new_document()
    root = f"/api/documents/{doc}/annotations"
    before = server.records(doc)["revision"]
    for body in (note("bare", id="bare"), {"id": "x"}, {"content": "text"}, {"annotations": [{"id": "y"}]},
                 {"annotations": [{"content": note("ok"), "id": "fine"}, {"id": "no-content"}]}):
        response = _api(server, "POST", root, json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"]["code"] == "invalid_request"
    assert _api(server, "POST", root).status_code == 422  # no body at all
    assert server.records(doc)["revision"] == before
    assert _api(server, "GET", root + "/fine").status_code == 404


def test_bulk_create_update_and_delete(server):
    doc = server.new_document()
    root = f"/api/documents/{doc}/layers/bulk/annotations"
    made = _api(server, "POST", root, json={"annotations": [
        {"content": note("one"), "user_id": "ann"}, {"id": "b-2", "content": note("two")}]})
    assert made.status_code == 200, made.text
    body = made.json()
    assert body["result"] == "success" and body["status"] == 200 and body["failing_paths"] == []
    ids = [a["id"] for a in body["data"]]
    assert len(ids) == 2 and ids[1] == "b-2" and body["data"][0]["user_id"] == "ann"
    assert body["data"][0]["revision"] + 1 == body["data"][1]["revision"]
    listed = _api(server, "GET", root).json()["data"]["annotations"]
    assert sorted(a["id"] for a in listed) == sorted(ids)  # two records, not one
    updated = _api(server, "PUT", root, json={"annotations": [
        {"id": "b-2", "content": note("two bis"), "user_id": "bob"}, {"id": "gone", "content": note()}]}).json()
    assert [a["id"] for a in updated["data"]] == ["b-2"] and updated["result"] == "partial_failure"
    assert updated["failing_paths"][0]["path"] == "$.annotations[1]"
    got = _api(server, "GET", f"{root}/b-2").json()
    assert got["content"]["text"]["value"] == "two bis" and got["updatedBy"] == "bob"
    deleted = _api(server, "DELETE", root, json={"annotationIds": ["b-2", "never"]})
    assert deleted.status_code == 200 and deleted.json()["data"]["deleted"] == ["b-2"]
    everything = _api(server, "DELETE", root, json={"annotationIds": "all"})
    assert everything.json()["data"]["deleted"] == [ids[0]]
    assert _api(server, "GET", root).json()["data"]["annotations"] == []
    assert _api(server, "DELETE", root, json={"annotationIds": "some"}).status_code == 422


def test_pdf_source_and_flatten(server):
    doc = server.new_document()
    _api(server, "POST", f"/api/documents/{doc}/annotations", json={"id": "flat", "content": note("flat")})
    source = _api(server, "GET", f"/api/documents/{doc}/pdf", params={"source": "true"})
    assert source.status_code == 200 and source.content == (CORPUS / SAMPLE).read_bytes()
    flat = _api(server, "GET", f"/api/documents/{doc}/pdf", params={"flatten": "true"})
    assert flat.status_code == 200 and flat.headers["content-type"] == "application/pdf"
    with pikepdf.open(io.BytesIO(flat.content)) as parsed:
        assert all(len(page.obj.get("/Annots", [])) == 0 for page in parsed.pages)
    written = _api(server, "GET", f"/api/documents/{doc}/pdf")
    assert len(flat.content) != len(written.content)
    assert _api(server, "GET", f"/api/documents/{doc}/pdf",
                params={"source": "true", "flatten": "true"}).status_code == 400
    no_comments = _api(server, "GET", f"/api/documents/{doc}/layers/~/pdf", params={"annotations": "false"})
    with pikepdf.open(io.BytesIO(no_comments.content)) as parsed:
        assert "flat" not in [str(a.get("/NM")) for page in parsed.pages for a in page.obj.get("/Annots", [])]


def test_document_json_has_form_fields_and_a_v1_export(server):
    doc = "ff-" + uuid.uuid4().hex
    assert server.upload((CORPUS / "pdfjs-prefilled_f1040.pdf").read_bytes(), doc).status_code == 200
    exported = _api(server, "GET", f"/api/documents/{doc}/document.json").json()
    fields = {f["name"]: f for f in exported["formFields"]}
    widgets = [a for a in exported["annotations"] if a["type"] == "pspdfkit/widget"]
    assert len(fields) == len({w["formFieldName"] for w in widgets})
    kinds = {f["type"] for f in fields.values()}
    assert "pspdfkit/form-field/text" in kinds and kinds & {"pspdfkit/form-field/checkbox",
                                                             "pspdfkit/form-field/radio"}
    for field in fields.values():
        assert field["v"] == 1 and field["annotationIds"]
        if field["type"] in ("pspdfkit/form-field/checkbox", "pspdfkit/form-field/radio"):
            assert len(field["options"]) == len(field["annotationIds"])
    v1 = _api(server, "GET", f"/api/documents/{doc}/document.json", params={"annotation_version": 1}).json()
    assert {a["v"] for a in v1["annotations"]} == {1}
    sample = server.new_document()
    notes = [a for a in _api(server, "GET", f"/api/documents/{sample}/document.json",
                             params={"annotation_version": 1}).json()["annotations"] if "text" in a]
    assert notes and all(isinstance(a["text"], str) for a in notes)
