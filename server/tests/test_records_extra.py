"""History, rollback, deleted list, restore and attachments (docs/protocol.md)."""

from __future__ import annotations

import hashlib

from conftest import CORPUS, change, note, start_server, stop_server


def _rid(server, doc):
    response = server.sync(doc, [change("create", "h1", note("v1"))])
    assert response.status_code == 200
    return response.json()["accepted"][0]["revision"]


def test_history_and_rollback(server):
    doc = server.new_document()
    r1 = _rid(server, doc)
    r2 = server.sync(doc, [change("update", "h1", note("v2"), base=r1)]).json()["accepted"][0]["revision"]
    base = server.layer_url(doc) + "/records/h1"
    history = server.http.get(base + "/history", headers=server.auth(doc))
    assert history.status_code == 200
    assert [v["revision"] for v in history.json()["versions"]] == [r2, r1]
    stale = server.http.post(base + "/rollback", json={"revision": r1, "base_revision": r1},
                             headers=server.auth(doc))
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "conflict"
    assert stale.json()["error"]["details"]["server_record"]["revision"] == r2
    rolled = server.http.post(base + "/rollback", json={"revision": r1, "base_revision": r2},
                              headers=server.auth(doc))
    assert rolled.status_code == 200, rolled.text
    record = rolled.json()["record"]
    assert record["revision"] == r2 + 1 and record["content"]["text"]["value"] == "v1"
    assert server.http.post(base + "/rollback", json={"revision": 999},
                            headers=server.auth(doc)).status_code == 404
    assert server.http.post(base + "/rollback", json={"revision": "x"},
                            headers=server.auth(doc)).status_code == 400
    assert server.http.get(server.layer_url(doc) + "/records/nope/history",
                           headers=server.auth(doc)).status_code == 404
    read_only = server.auth(doc, permissions=["read-document"])
    assert server.http.post(base + "/rollback", json={"revision": r1}, headers=read_only).status_code == 403


def test_deleted_list_and_restore(server):
    doc = server.new_document()
    r1 = _rid(server, doc)
    base = server.layer_url(doc) + "/records/h1"
    assert server.http.post(base + "/restore", headers=server.auth(doc)).status_code == 409
    deleted_at = server.sync(doc, [change("delete", "h1", base=r1)]).json()["accepted"][0]["revision"]
    listed = server.http.get(server.layer_url(doc) + "/deleted", headers=server.auth(doc)).json()
    assert [(r["id"], r["deleted"]) for r in listed["records"]] == [("h1", True)]
    assert listed["records"][0]["last_content"]["text"]["value"] == "v1"
    restored = server.http.post(base + "/restore", json={"base_revision": deleted_at},
                                headers=server.auth(doc))
    assert restored.status_code == 200, restored.text
    assert restored.json()["record"]["deleted"] is False
    assert restored.json()["record"]["content"]["text"]["value"] == "v1"
    assert server.http.post(server.layer_url(doc) + "/records/nope/restore",
                            headers=server.auth(doc)).status_code == 404


def test_attachments_are_verified_against_their_hash(server):
    doc = server.new_document()
    data = b"\x89PNG\r\n\x1a\n fake image"
    sha = hashlib.sha256(data).hexdigest()
    url = f"/sync/v1/documents/{doc}/attachments/{sha}"
    headers = {**server.auth(doc), "Content-Type": "image/png"}
    assert server.http.get(url, headers=server.auth(doc)).status_code == 404
    created = server.http.put(url, content=data, headers=headers)
    assert created.status_code == 201 and created.json()["size_bytes"] == len(data)
    assert server.http.put(url, content=data, headers=headers).status_code == 200
    fetched = server.http.get(url, headers=server.auth(doc))
    assert fetched.status_code == 200 and fetched.content == data
    assert fetched.headers["content-type"] == "image/png"
    wrong = server.http.put(f"/sync/v1/documents/{doc}/attachments/{'0' * 64}", content=data, headers=headers)
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "hash_mismatch"
    bad_id = server.http.put(f"/sync/v1/documents/{doc}/attachments/XYZ", content=data, headers=headers)
    assert bad_id.status_code == 400
    no_write = server.http.put(url, content=data, headers={**server.auth(doc, permissions=["read-document"])})
    assert no_write.status_code == 403


def test_rollback_and_restore_check_the_version_like_a_sync_change(tmp_path, keys):
    """A kept version that breaks the record schema (stored before the check, or by an
    older server) is not written back by rollback or restore: 400 naming the field, the
    record as it was. A version that passes is written back as before."""
    from layersync_server.storage import NewDocument, open_storage
    db = tmp_path / "legacy.sqlite"
    storage = open_storage(db)
    doc = "doc-legacy-versions"
    storage.create_document(NewDocument(doc, "t", (CORPUS / "sample-files-024-annotated_pdf.pdf").read_bytes(),
                                        "0" * 64, 1))
    broken = {"v": 2, "type": "pspdfkit/note", "id": "kept", "pageIndex": 0}  # no bbox, text, icon...
    revisions = {}
    for record_id, content in (("kept", broken), ("kept", {**note("fine"), "id": "kept"}),
                               ("gone", {**broken, "id": "gone"}), ("gone", None)):
        with storage.write_layer(doc, "") as writer:
            revisions.setdefault(record_id, []).append(writer.put_record(record_id, content, None))
    storage.close()
    process, srv = start_server(tmp_path, str(db), *keys)
    try:
        base = srv.layer_url(doc) + "/records/"
        refused = srv.http.post(base + "kept/rollback", json={"revision": revisions["kept"][0]},
                                headers=srv.auth(doc))
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "invalid_request"
        assert "is required for pspdfkit/note records" in refused.json()["error"]["message"]
        restored = srv.http.post(base + "gone/restore", headers=srv.auth(doc))
        assert restored.status_code == 400 and "is required" in restored.json()["error"]["message"]
        records = {r["id"]: r for r in srv.records(doc)["records"]}
        assert records["kept"]["content"]["text"]["value"] == "fine" and "gone" not in records
        deleted = srv.http.get(srv.layer_url(doc) + "/deleted", headers=srv.auth(doc)).json()["records"]
        assert [r["id"] for r in deleted] == ["gone"]
        assert records["kept"]["revision"] == revisions["kept"][1]
        # a version that passes is written back as before
        rolled = srv.http.post(base + "kept/rollback", json={"revision": revisions["kept"][1]},
                               headers=srv.auth(doc))
        assert rolled.status_code == 200, rolled.text
    finally:
        stop_server(process, srv)
