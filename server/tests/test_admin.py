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
