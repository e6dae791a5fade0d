"""Sync API behaviour against a real server: docs/protocol.md, endpoint by endpoint."""

from __future__ import annotations

import hashlib
import uuid

from conftest import CORPUS, MAX_REQUEST_BYTES, change, note


def test_info_advertises_protocol_and_limits(server):
    response = server.http.get("/sync/v1/info")
    assert response.status_code == 200
    assert response.headers["LayerSync-Protocol"] == "2"
    body = response.json()
    assert body["server"] == "layersync-server"
    assert body["protocol"] == {"min": 1, "max": 2}  # 2: the change stream (test_stream.py)
    assert body["limits"] == {"max_request_bytes": MAX_REQUEST_BYTES, "max_page_records": 1000,
                              "max_wait_s": 10, "max_upload_bytes": 256 * 1024 * 1024,
                              "history_versions": 20, "max_json_depth": 64,
                              "max_number_chars": 100}
    assert {"long-poll", "snapshot-paging", "attachments", "history", "rollback",
            "deleted-restore"} <= set(body["capabilities"])


def test_old_client_gets_426(server):
    response = server.http.get("/sync/v1/info", headers={"LayerSync-Protocol": "0"})
    assert response.status_code == 426
    assert response.json()["error"]["code"] == "old_client"
    assert response.headers["LayerSync-Protocol"] == "2"


def test_unknown_route_and_bad_parameter_use_the_envelope(server):
    response = server.http.get("/sync/v1/nope")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    doc = server.new_document()
    response = server.http.get(server.layer_url(doc) + "/records", params={"since": -1},
                               headers=server.auth(doc))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    response = server.http.post(server.layer_url(doc) + "/sync", content=b"{not json",
                                headers=server.auth(doc))
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"code", "message", "details"}


def test_unknown_document_is_404(server):
    doc = "missing-" + uuid.uuid4().hex
    response = server.http.get(server.layer_url(doc) + "/records", headers=server.auth(doc))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_pdf_download_etag_and_range(server):
    doc = server.new_document("pdfjs-issue20504.pdf")
    data = (CORPUS / "pdfjs-issue20504.pdf").read_bytes()
    full = server.http.get(f"/sync/v1/documents/{doc}/pdf", headers=server.auth(doc))
    assert full.status_code == 200
    assert full.content == data
    assert full.headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    assert full.headers["Accept-Ranges"] == "bytes"
    assert full.headers["Content-Type"] == "application/pdf"
    rest = server.http.get(f"/sync/v1/documents/{doc}/pdf",
                           headers={**server.auth(doc), "Range": "bytes=1000-"})
    assert rest.status_code == 206
    assert rest.content == data[1000:]
    assert rest.headers["Content-Range"] == f"bytes 1000-{len(data) - 1}/{len(data)}"
    bad = server.http.get(f"/sync/v1/documents/{doc}/pdf",
                          headers={**server.auth(doc), "Range": f"bytes={len(data)}-"})
    assert bad.status_code == 416
    assert bad.json()["error"]["code"] == "range_not_satisfiable"


def test_layer_is_created_on_first_access_with_an_epoch(server):
    doc = server.new_document()
    imported = server.records(doc)
    named = server.records(doc, layer="review")
    assert imported["revision"] == 3 and len(imported["records"]) == 3
    assert named["revision"] == 0 and named["records"] == [] and named["has_more"] is False
    assert named["epoch"] and named["epoch"] != imported["epoch"]
    assert server.records(doc, layer="review")["epoch"] == named["epoch"]


def test_create_update_delete_and_metadata(server):
    doc = server.new_document()
    created = server.sync(doc, [change("create", "n1", note("héllo 🌍 مرحبا"))], since=3).json()
    assert created["accepted"][0]["revision"] == 4 and created["revision"] == 4
    assert created["changes"] == []  # the request's own revision is not echoed
    snapshot = {r["id"]: r for r in server.records(doc)["records"]}
    assert snapshot["n1"]["content"]["text"]["value"] == "héllo 🌍 مرحبا"
    assert snapshot["n1"]["content"]["id"] == "n1" and snapshot["n1"]["content"]["v"] == 2
    assert "alice" not in str(snapshot["n1"]["content"])
    updated = server.sync(doc, [change("update", "n1", note("v2"), base=4)], since=4,
                          user_id="bob").json()
    assert updated["accepted"][0]["revision"] == 5
    deleted = server.sync(doc, [change("delete", "n1", base=5)], since=5).json()
    assert deleted["accepted"][0]["revision"] == 6
    delta = server.records(doc, since=4)["records"]
    assert delta == [{"id": "n1", "revision": 6, "deleted": True, "content": None}]
    assert "n1" not in {r["id"] for r in server.records(doc)["records"]}
    annotations = server.http.get(f"/api/documents/{doc}/annotations", headers=server.admin()).json()
    assert "n1" not in {a["id"] for a in annotations["data"]["annotations"]}


def test_created_by_and_updated_by_are_recorded_outside_content(server):
    doc = server.new_document()
    server.sync(doc, [change("create", "m1", note())], user_id="alice")
    server.sync(doc, [change("update", "m1", note("x"), base=4)], user_id="bob")
    annotations = server.http.get(f"/api/documents/{doc}/annotations", headers=server.admin()).json()
    entry = next(a for a in annotations["data"]["annotations"] if a["id"] == "m1")
    assert (entry["createdBy"], entry["updatedBy"]) == ("alice", "bob")
    assert "createdBy" not in entry["content"]


def _one(response):
    body = response.json()
    assert response.status_code == 200, body
    return body


def test_conflict_table(server):
    doc = server.new_document()
    s = server.sync
    assert _one(s(doc, [change("create", "a", note()), change("create", "b", note()),
                        change("create", "t", note())]))["revision"] == 6
    assert _one(s(doc, [change("delete", "t", base=6)]))["revision"] == 7
    rows = _one(s(doc, [
        change("create", "a", note("dup")),                      # create exists (live)
        change("create", "t", note("dup")),                      # create exists (tombstone)
        change("update", "a", note("a2"), base=4),               # update live, base matches
        change("update", "b", note("b2"), base=99),              # update live, base differs
        change("update", "t", note("t2"), base=7),               # update tombstone
        change("update", "zz", note(), base=1),                  # update absent
        change("delete", "zz", base=1),                          # delete absent
        change("delete", "b", base=3),                           # delete live, base differs
        change("delete", "t", base=7),                           # delete tombstone
        change("delete", "b", base=5),                           # delete live, base matches
        {"change_id": uuid.uuid4().hex, "op": "create", "id": "c", "content": "not an object"},
        {"change_id": uuid.uuid4().hex, "op": "create", "id": "", "content": {}},
        {"change_id": uuid.uuid4().hex, "op": "frobnicate", "id": "c"},
    ], since=7))
    rejected = {(r["id"], r["reason"]): r for r in rows["rejected"]}
    accepted = {a["id"]: a["revision"] for a in rows["accepted"]}
    assert rejected[("a", "exists")]["server_record"]["revision"] == 4
    assert rejected[("t", "exists")]["server_record"] == {"id": "t", "revision": 7, "deleted": True,
                                                          "content": None}
    assert accepted["a"] == 8
    assert rejected[("b", "conflict")]["server_record"]["revision"] == 5
    conflicts = [r for r in rows["rejected"] if r["reason"] == "conflict"]
    assert [r["id"] for r in conflicts] == ["b", "t", "b"]
    assert conflicts[1]["server_record"]["deleted"] is True
    assert [r["server_record"] for r in rows["rejected"] if r["reason"] == "not_found"] == [None, None]
    assert accepted["t"] == 7  # idempotent delete of a tombstone: no new revision
    assert accepted["b"] == 9
    assert [r["reason"] for r in rows["rejected"]].count("invalid") == 3
    assert rows["revision"] == 9


def test_change_id_is_applied_at_most_once(server):
    doc = server.new_document()
    first = _one(server.sync(doc, [change("create", "r1", note("one"), change_id="cid-1"),
                                   change("update", "nope", note(), base=1, change_id="cid-2")]))
    again = _one(server.sync(doc, [change("create", "r1", note("other"), change_id="cid-1"),
                                   change("update", "nope", note(), base=1, change_id="cid-2")]))
    assert again["accepted"] == first["accepted"]
    assert again["rejected"] == first["rejected"]
    assert again["revision"] == first["revision"] == 4
    record = next(r for r in server.records(doc)["records"] if r["id"] == "r1")
    assert record["content"]["text"]["value"] == "one"
    # the same change id twice in one request is applied once as well
    twice = _one(server.sync(doc, [change("update", "r1", note("x"), base=4, change_id="cid-3"),
                                   change("update", "r1", note("y"), base=4, change_id="cid-3")]))
    assert [a["revision"] for a in twice["accepted"]] == [5, 5] and twice["revision"] == 5


def test_sync_returns_other_writers_changes_but_not_its_own(server):
    doc = server.new_document()
    _one(server.sync(doc, [change("create", "from-b", note())], user_id="bob"))
    mine = _one(server.sync(doc, [change("create", "from-a", note())], since=3))
    assert [r["id"] for r in mine["changes"]] == ["from-b"]
    assert mine["next_since"] == 5 and mine["has_more"] is False


def test_snapshot_paging(server):
    doc = server.new_document()
    _one(server.sync(doc, [change("create", f"p{i:02}", note(str(i))) for i in range(25)]))
    _one(server.sync(doc, [change("delete", "p00", base=4)]))
    seen, tombstones, since, pages = [], [], 0, 0
    while True:
        page = server.records(doc, since=since, limit=10)
        seen += [r["id"] for r in page["records"] if not r["deleted"]]
        tombstones += [r["id"] for r in page["records"] if r["deleted"]]
        pages += 1
        if not page["has_more"]:
            assert page["next_since"] == page["revision"] == 29
            break
        assert page["next_since"] == page["records"][-1]["revision"]
        since = page["next_since"]
    assert pages == 3 and len(seen) == len(set(seen)) == 27  # 3 imported + 24 live
    # continuation pages are deltas: the later deletion of p00 arrives as a tombstone
    assert "p00" not in seen and tombstones == ["p00"]
    first = server.records(doc, since=0)["records"]
    assert all(not r["deleted"] for r in first) and "p00" not in {r["id"] for r in first}
    delta = server.records(doc, since=28)["records"]
    assert delta == [{"id": "p00", "revision": 29, "deleted": True, "content": None}]


def test_root_id_cascade(server):
    doc = server.new_document()
    comment = {"type": "pspdfkit/comment", "pageIndex": 0, "text": {"format": "plain", "value": ""}}
    _one(server.sync(doc, [change("create", "root", note()),
                           change("create", "c1", {**comment, "rootId": "root"}),
                           change("create", "c2", {**comment, "rootId": "root"}),
                           change("create", "other", {**comment, "rootId": "x"})]))
    result = _one(server.sync(doc, [change("delete", "root", base=4)], since=7))
    assert result["accepted"][0]["revision"] == 8
    assert {(r["id"], r["deleted"]) for r in result["changes"]} == {("c1", True), ("c2", True)}
    live = {r["id"] for r in server.records(doc)["records"]}
    assert {"root", "c1", "c2"}.isdisjoint(live) and "other" in live


def test_payload_too_large_applies_nothing(server):
    doc = server.new_document()
    big = note("x" * MAX_REQUEST_BYTES)
    response = server.sync(doc, [change("create", "big", big)])
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert server.records(doc)["revision"] == 3


def test_epoch_changed(server):
    doc = server.new_document()
    result = _one(server.sync(doc, [change("create", "e1", note())], epoch="not-the-epoch"))
    assert result["epoch_changed"] is True
    assert result["accepted"] == [] and result["rejected"] == []
    assert result["epoch"] == server.records(doc)["epoch"]
    assert server.records(doc)["revision"] == 3
    epoch = server.records(doc)["epoch"]
    assert _one(server.sync(doc, [change("create", "e1", note())], epoch=epoch))["epoch_changed"] is False


def test_permissions(server):
    doc = server.new_document()
    read_only = {"Authorization": "Bearer " + server.token(doc, permissions=["read-document"])}
    response = server.http.post(server.layer_url(doc) + "/sync", headers=read_only,
                                json={"since": 0, "changes": [change("create", "w", note())]})
    assert response.status_code == 403
    assert server.http.get(f"/sync/v1/documents/{doc}/pdf", headers=read_only).status_code == 403
    assert server.http.get(server.layer_url(doc) + "/records", headers=read_only).status_code == 200
