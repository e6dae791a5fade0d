"""Local storage, content migration, comments, search, server history, attachments and
per-document observers: the real library against the real server on loopback."""
from __future__ import annotations

import asyncio
import glob
import hashlib
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import layersync
import layersync.aio
from layersync import DocumentState

from conftest import WAIT_S

TEXT = "Zebra crossing — élan 你好 👋"


def note(text: str = TEXT, page: int = 0) -> dict[str, Any]:
    return {"type": "pspdfkit/note", "pageIndex": page, "bbox": [10, 10, 24, 24], "creatorName": "tester", "icon": "comment",
            "text": {"format": "plain", "value": text}}


# -- local storage --------------------------------------------------------------------------


def test_local_documents_counts_pending_changes(downloaded):
    client, doc = downloaded()
    layers = client.local_documents()[doc.id]
    assert len(layers) == 1
    before = layers[0]
    assert before["layer_name"] == "" and before["downloaded"] is True and before["locked"] is False
    assert before["pending_changes"] == 0 and before["has_unsynced_changes"] is False
    doc.create_annotation(note("one"))
    doc.create_annotation(note("two"))
    after = client.local_documents()[doc.id][0]
    assert after["pending_changes"] == 2 and after["has_unsynced_changes"] is True
    assert after["record_count"] == before["record_count"] + 2
    doc.sync(wait=True, timeout=WAIT_S)
    assert client.local_documents()[doc.id][0]["pending_changes"] == 0


def test_cache_entries_and_removing_unreferenced_ones(downloaded):
    client, doc = downloaded()
    kinds = {e["kind"] for e in client.cache_entries() if e["document_id"] == doc.id}
    assert kinds == {"pdf", "layer"}
    assert all(e["referenced"] and Path(e["path"]).exists() for e in client.cache_entries())
    att_id = doc.add_attachment(b"nobody refers to me", "text/plain")
    doc.sync(wait=True, timeout=WAIT_S)  # uploaded: no longer needed locally
    entry = next(e for e in client.cache_entries() if e.get("attachment_id") == att_id)
    assert entry["kind"] == "attachment" and entry["referenced"] is False and entry["size_bytes"] == 19
    assert Path(entry["path"]).read_bytes() == b"nobody refers to me"
    client.remove_unreferenced_cache_entries()
    assert not any(e.get("attachment_id") == att_id for e in client.cache_entries())
    assert {e["kind"] for e in client.cache_entries()} == {"pdf", "layer"}
    assert not Path(entry["path"]).exists()
    doc.sync(wait=True, timeout=WAIT_S)


def test_unreferenced_cleanup_keeps_attachments_waiting_for_upload(downloaded):
    client, doc = downloaded()
    att_id = doc.add_attachment(b"queued for upload", "text/plain")
    client.remove_unreferenced_cache_entries()  # e.g. a cleanup thread, before the record is created
    doc.create_annotation({"type": "pspdfkit/image", "pageIndex": 0, "bbox": [1, 1, 5, 5],
                           "imageAttachmentId": att_id})  # an image record's contentType is image/*
    assert doc.attachment_data(att_id) == b"queued for upload"
    doc.sync(wait=True, timeout=WAIT_S)


def test_document_remove_local_storage(downloaded, server):
    client, doc = downloaded()
    pdf = Path(doc.pdf_path)
    states: list[Any] = []
    observed_invalid = threading.Event()

    def on_state(_doc: Any, state: DocumentState) -> None:
        states.append(state)
        if state == DocumentState.INVALID:
            observed_invalid.set()

    doc.observe({"did_change_sync_state": on_state})
    doc.create_annotation(note("lost"))
    since = client.mark()
    doc.remove_local_storage()
    assert doc.state == DocumentState.INVALID and not pdf.exists()
    with pytest.raises(layersync.InvalidStateError):
        doc.list_annotations()
    client.wait_for("did_change_sync_state", since=since, document=doc, timeout=WAIT_S,
                    predicate=lambda e: e.args[0] == DocumentState.INVALID)
    # Observers run right after the client's handlers (which wait_for sees), so maybe later.
    assert observed_invalid.wait(WAIT_S)
    assert states.count(DocumentState.INVALID) == 1
    assert client.local_documents() == {}
    fresh = client.document_for_jwt(server.mint_token(doc.id, user_id="alice"))
    assert fresh is not doc and not fresh.is_downloaded


def test_client_remove_local_storage(downloaded, server, uploaded):
    client, first = downloaded()
    second = client.document_for_jwt(server.mint_token(uploaded(), user_id="alice"))
    second.download(wait=True, timeout=WAIT_S)
    assert set(client.local_documents()) == {first.id, second.id}
    client.remove_local_storage_for_document(first.id)
    assert set(client.local_documents()) == {second.id}
    assert first.state == DocumentState.INVALID and second.state == DocumentState.CLEAN
    client.remove_local_storage_for_document(first.id)  # again: it has a handle, not an error
    with pytest.raises(layersync.errors.UnmanagedDocumentError):
        client.remove_local_storage_for_document("never-stored")
    client.remove_local_storage()
    assert client.local_documents() == {} and client.cache_entries() == []
    assert second.state == DocumentState.INVALID
    with pytest.raises(layersync.InvalidArgumentError):
        client.remove_local_storage_for_document("nul\x00")


def test_attempt_content_migration(make_client, server, uploaded, tmp_path):
    doc_id = uploaded()
    storage = tmp_path / "migrate"
    jwt = server.mint_token(doc_id, user_id="alice")
    with make_client(storage_path=storage) as client:
        client.wait_validated(timeout=WAIT_S)
        client.document_for_jwt(jwt).download(wait=True, timeout=WAIT_S)
    (store,) = glob.glob(f"{storage}/*/{doc_id}/layers/~/layer.sqlite")
    v1 = '{"id":"old-1","v":1,"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"icon":"comment","text":"written by v1 ünïcode"}'
    with sqlite3.connect(store) as db:  # what an older library wrote (Instant JSON v1)
        db.execute("INSERT INTO records(id, content) VALUES ('old-1', ?)", (v1,))
        db.execute("INSERT INTO pending_changes(change_id, record_id, op, content) VALUES ('c-old', 'old-1', 'create', ?)", (v1,))
        db.execute("INSERT INTO meta(key, value) VALUES ('content_version', '1')")
    db.close()
    client = make_client(storage_path=storage)
    doc = client.document_for_jwt(jwt)
    assert doc.state == DocumentState.NEEDS_CONTENT_MIGRATION
    with pytest.raises(layersync.ContentMigrationNeededError):
        doc.list_annotations()
    doc.attempt_content_migration()
    assert doc.state == DocumentState.DIRTY
    record = doc.get_annotation("old-1")
    assert record["v"] == 2 and record["text"]["value"] == "written by v1 ünïcode"
    doc.attempt_content_migration()  # nothing left to do
    client.wait_validated(timeout=WAIT_S)
    doc.sync(wait=True, timeout=WAIT_S)
    assert server.annotations(doc_id)["old-1"]["text"]["value"] == "written by v1 ünïcode"


# -- comments and search --------------------------------------------------------------------


def test_comments(downloaded, server):
    client, doc = downloaded()
    root = doc.create_annotation(note("root"))
    first = doc.create_comment(root["id"], "first — 你好", creator_name="bob")
    second = doc.create_comment(root["id"], {"text": {"format": "plain", "value": "second"}, "creatorName": "carol",
                                             "createdAt": "2099-01-01T00:00:00Z"})
    assert first["type"] == "pspdfkit/comment" and first["rootId"] == root["id"] and first["creatorName"] == "bob"
    assert [c["id"] for c in doc.list_comments(root["id"])] == [first["id"], second["id"]]
    assert doc.list_comments(doc.create_annotation(note("lonely"))["id"]) == []
    with pytest.raises(layersync.NoSuchAnnotationError):
        doc.create_comment("no-such-root", "x")
    with pytest.raises(layersync.NoSuchAnnotationError):
        doc.list_comments("no-such-root")
    with pytest.raises(layersync.InvalidJSONStructureError):
        doc.create_comment(root["id"], {"type": "pspdfkit/note", "text": {"format": "plain", "value": "x"}})
    with pytest.raises(layersync.InvalidArgumentError):
        doc.create_comment(root["id"], {"rootId": "someone-else", "text": {"format": "plain", "value": "x"}})
    doc.sync(wait=True, timeout=WAIT_S)
    on_server = server.annotations(doc.id)
    assert on_server[first["id"]]["rootId"] == root["id"]
    assert on_server[first["id"]]["text"]["value"] == "first — 你好"
    doc.delete_annotation(root["id"])
    with pytest.raises(layersync.NoSuchAnnotationError):
        doc.get_annotation(first["id"])
    doc.sync(wait=True, timeout=WAIT_S)
    assert first["id"] not in server.annotations(doc.id)


def test_search_annotations(downloaded):
    client, doc = downloaded()
    hit = doc.create_annotation(note("Zebra crossing near the élan café"))
    doc.create_annotation(note("something else entirely"))
    comment = doc.create_comment(hit["id"], "Ünïcode zebras too")
    assert [a["id"] for a in doc.search_annotations("zeb cross")] == [hit["id"]]
    assert hit["id"] in [a["id"] for a in doc.search_annotations("ELAN")]  # case- and diacritics-insensitive
    assert {a["id"] for a in doc.search_annotations("zebra")} == {hit["id"], comment["id"]}
    assert len(doc.search_annotations("zebra", limit=1)) == 1
    assert doc.search_annotations('zebra" OR *') == []  # FTS syntax is taken literally
    assert doc.search_annotations("nothingmatchesthis") == []
    for bad in ("", "   ", "!!!"):  # no letters or digits: no words (header: INVALID_ARGUMENT)
        with pytest.raises(layersync.InvalidArgumentError):
            doc.search_annotations(bad)
    with pytest.raises(layersync.InvalidArgumentError):
        doc.search_annotations("zebra", limit=-1)
    with pytest.raises(layersync.InvalidArgumentError):
        doc.search_annotations("zebra", limit=1 << 40)


# -- server history -------------------------------------------------------------------------


def test_history_and_rollback(downloaded, server):
    client, doc = downloaded()
    created = doc.create_annotation(note("version one"))
    doc.sync(wait=True, timeout=WAIT_S)
    doc.update_annotation({**created, "text": {"format": "plain", "value": "version two"}})
    doc.sync(wait=True, timeout=WAIT_S)
    versions = doc.annotation_history(created["id"], timeout=WAIT_S)
    assert [v["content"]["text"]["value"] for v in versions] == ["version two", "version one"]
    assert versions[0]["revision"] > versions[1]["revision"] and not any(v["deleted"] for v in versions)
    since = client.mark()
    restored = doc.rollback_annotation(created["id"], versions[1]["revision"], timeout=WAIT_S)
    assert restored["text"]["value"] == "version one"
    assert doc.get_annotation(created["id"])["text"]["value"] == "version one"  # applied locally first
    assert client.events(since, "did_receive_changes", doc)
    assert server.annotations(doc.id)[created["id"]]["text"]["value"] == "version one"
    with pytest.raises(layersync.NoSuchAnnotationError):
        doc.rollback_annotation(created["id"], 999_999, timeout=WAIT_S)
    with pytest.raises(layersync.NoSuchAnnotationError):
        doc.annotation_history("never-existed", timeout=WAIT_S)
    with pytest.raises(layersync.InvalidArgumentError):
        doc.rollback_annotation(created["id"], 1 << 70)


def test_rollback_conflict_when_the_server_moved_on(downloaded, server):
    client, doc = downloaded()
    created = doc.create_annotation(note("mine"))
    doc.sync(wait=True, timeout=WAIT_S)
    revision = doc.annotation_history(created["id"], timeout=WAIT_S)[0]["revision"]
    _, other = downloaded(doc.id, user_id="bob")
    other.update_annotation({**other.get_annotation(created["id"]), "text": {"format": "plain", "value": "bob's"}})
    other.sync(wait=True, timeout=WAIT_S)
    with pytest.raises(layersync.ConflictError):
        doc.rollback_annotation(created["id"], revision, timeout=WAIT_S)


def test_deleted_and_restore(downloaded, server):
    client, doc = downloaded()
    created = doc.create_annotation(note("delete me"))
    doc.sync(wait=True, timeout=WAIT_S)
    with pytest.raises(layersync.ConflictError):
        doc.restore_annotation(created["id"], timeout=WAIT_S)  # still live
    doc.delete_annotation(created["id"])
    doc.sync(wait=True, timeout=WAIT_S)
    deleted = doc.list_deleted_annotations(timeout=WAIT_S)
    entry = next(d for d in deleted if d["id"] == created["id"])
    assert entry["last_content"]["text"]["value"] == "delete me" and isinstance(entry["revision"], int)
    back = doc.restore_annotation(created["id"], timeout=WAIT_S)
    assert back["text"]["value"] == "delete me"
    assert doc.get_annotation(created["id"])["text"]["value"] == "delete me"
    assert created["id"] in server.annotations(doc.id)
    assert created["id"] not in [d["id"] for d in doc.list_deleted_annotations(timeout=WAIT_S)]
    with pytest.raises(layersync.NoSuchAnnotationError):
        doc.restore_annotation("never-existed", timeout=WAIT_S)


def test_server_requests_offline_and_on_the_callback_thread(downloaded):
    client, doc = downloaded()
    client.set_network_available(False)
    with pytest.raises(layersync.RequestFailedError):
        doc.list_deleted_annotations(timeout=WAIT_S)
    client.set_network_available(True)
    caught: list[BaseException] = []

    def handler(d: layersync.Document) -> None:
        try:
            d.annotation_history("x", timeout=WAIT_S)
        except BaseException as exc:
            caught.append(exc)
    client.on("did_begin_sync", handler)
    doc.sync(wait=True, timeout=WAIT_S)
    assert len(caught) == 1 and isinstance(caught[0], layersync.InvalidStateError)
    doc.remove_local_storage()
    with pytest.raises(layersync.InvalidStateError):
        doc.annotation_history("x")
    with pytest.raises(layersync.InvalidStateError):
        doc.add_attachment(b"x", "text/plain")


def test_pending_request_fails_when_the_client_closes(downloaded):
    client, doc = downloaded()
    future = doc._begin_deleted()
    client.close()
    assert future.done()  # never left hanging: answered, cancelled by the close, or failed by the bindings
    if future.exception() is not None:
        assert isinstance(future.exception(), (layersync.CancelledError, layersync.InvalidStateError))


# -- attachments ----------------------------------------------------------------------------


def test_attachments_round_trip(downloaded, server):
    client, doc = downloaded()
    data = os.urandom(300_000) + b"\x00\x00end"
    att_id = doc.add_attachment(data, "image/png")
    assert att_id == hashlib.sha256(data).hexdigest()
    assert doc.add_attachment(bytearray(data), "image/png") == att_id  # same bytes, same id
    att = doc.attachment(att_id)
    assert att.data == data and att.content_type == "image/png" and att.id == att_id
    assert doc.attachment_data(att_id) == data
    empty = doc.add_attachment(b"", "application/octet-stream")
    assert doc.attachment_data(empty) == b"" and empty == hashlib.sha256(b"").hexdigest()
    image = doc.create_annotation({"type": "pspdfkit/image", "pageIndex": 0, "bbox": [1, 1, 50, 50],
                                   "imageAttachmentId": att_id, "contentType": "image/png"})
    doc.sync(wait=True, timeout=WAIT_S)

    _, other = downloaded(doc.id, user_id="bob")
    assert other.get_annotation(image["id"])["imageAttachmentId"] == att_id
    with pytest.raises(layersync.AttachmentNotLoadedError):
        other.attachment_data(att_id)
    info = other.download_attachment(att_id, timeout=WAIT_S)
    assert info == {"attachment_id": att_id, "size_bytes": len(data), "content_type": "image/png"}
    assert other.attachment_data(att_id) == data
    with pytest.raises(layersync.NoSuchAttachmentError):
        other.attachment_data("0" * 64)
    with pytest.raises(layersync.NoSuchAttachmentError):
        other.download_attachment("0" * 64, timeout=WAIT_S)
    for bad in ("", "bad\ntype", "x" * 300):
        with pytest.raises(layersync.InvalidArgumentError):
            doc.add_attachment(b"abc", bad)
    with pytest.raises(layersync.InvalidArgumentError):
        doc.add_attachment("text is not bytes", "text/plain")  # type: ignore[arg-type]


def test_download_attachment_without_waiting(downloaded):
    client, doc = downloaded()
    att_id = doc.add_attachment(b"lazy bytes", "text/plain")
    doc.create_annotation({"type": "pspdfkit/image", "pageIndex": 0, "bbox": [1, 1, 5, 5],
                           "imageAttachmentId": att_id})  # an image record's contentType is image/*
    doc.sync(wait=True, timeout=WAIT_S)
    other_client, other = downloaded(doc.id, user_id="bob")
    assert other.download_attachment(att_id, wait=False) is None
    # The background download's answer is ordered before this one's.
    assert other.download_attachment(att_id, timeout=WAIT_S)["size_bytes"] == 10
    assert other.attachment_data(att_id) == b"lazy bytes"


# -- observers ------------------------------------------------------------------------------


def test_observer_sees_only_its_document(downloaded, uploaded, server):
    client, doc = downloaded()
    other = client.document_for_jwt(server.mint_token(uploaded(), user_id="alice"))
    seen: list[layersync.Event] = []
    with doc.observe(seen.append) as observer:
        assert observer.active and observer.document is doc
        other.download(wait=True, timeout=WAIT_S)
        doc.create_annotation(note("x"))
        doc.sync(wait=True, timeout=WAIT_S)
        other.create_annotation(note("y"))
        other.sync(wait=True, timeout=WAIT_S)
    assert observer.released.is_set() and not observer.active
    names = [e.name for e in seen]
    assert "did_begin_sync" in names and "did_finish_sync" in names and "did_finish_download" not in names
    assert all(e.document is doc for e in seen)
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    count = len(seen)
    doc.create_annotation(note("after removal"))
    doc.sync(wait=True, timeout=WAIT_S)
    assert len(seen) == count
    observer.remove()  # idempotent


def test_observer_mapping_order_and_errors(downloaded):
    client, doc = downloaded()
    order: list[str] = []
    done = threading.Event()
    client.on("did_finish_sync", lambda d: order.append("delegate"))
    first = doc.observe({"did_finish_sync": lambda d: order.append("first")})
    second = doc.observe({"did_finish_sync": lambda d: (order.append("second"), done.set()),
                          "did_change_sync_state": lambda d, state: order.append(f"state {state.name}")})
    doc.create_annotation(note("x"))
    doc.sync(wait=True, timeout=WAIT_S)
    assert done.wait(WAIT_S)  # observers run right after the delegate, so maybe after sync() returned
    assert [o for o in order if not o.startswith("state")][-3:] == ["delegate", "first", "second"]
    assert "state SENDING_CHANGES" in order and "state CLEAN" in order
    first.remove()
    second.remove()
    with pytest.raises(layersync.InvalidArgumentError):
        doc.observe({"did_frobnicate": print})
    with pytest.raises(layersync.InvalidArgumentError):
        doc.observe(42)  # type: ignore[arg-type]

    def boom(event: layersync.Event) -> None:
        if event.name == "did_finish_sync":
            raise KeyError("from the observer")
    bad = doc.observe(boom)
    doc.create_annotation(note("y"))
    doc.sync(wait=False)
    with pytest.raises(KeyError, match="from the observer"):
        for _ in range(10):  # the next blocking call re-raises it
            doc.sync(wait=True, timeout=WAIT_S)
    bad.remove()


def test_observer_removed_from_its_own_callback_and_by_close(downloaded):
    client, doc = downloaded()
    calls: list[str] = []
    holder: dict[str, layersync.Observer] = {}

    def once(event: layersync.Event) -> None:
        calls.append(event.name)
        holder["o"].remove()
    holder["o"] = doc.observe(once)
    doc.create_annotation(note("x"))
    doc.sync(wait=True, timeout=WAIT_S)
    assert len(calls) == 1 and not holder["o"].active
    kept = doc.observe(lambda e: None)
    client.close()
    assert kept.released.is_set() and not kept.active
    kept.remove()  # no-op after close
    with pytest.raises(layersync.InvalidStateError):
        doc.observe(lambda e: None)


# -- asyncio --------------------------------------------------------------------------------


def test_aio_counterparts(downloaded):
    client, doc = downloaded()

    async def main() -> None:
        created = doc.create_annotation(note("async one"))
        await layersync.aio.sync(doc, timeout=WAIT_S)
        doc.update_annotation({**created, "text": {"format": "plain", "value": "async two"}})
        await layersync.aio.sync(doc, timeout=WAIT_S)
        versions = await layersync.aio.annotation_history(doc, created["id"], timeout=WAIT_S)
        assert [v["content"]["text"]["value"] for v in versions] == ["async two", "async one"]
        back = await layersync.aio.rollback_annotation(doc, created["id"], versions[1]["revision"], timeout=WAIT_S)
        assert back["text"]["value"] == "async one"
        doc.delete_annotation(created["id"])
        await layersync.aio.sync(doc, timeout=WAIT_S)
        assert created["id"] in [d["id"] for d in await layersync.aio.list_deleted_annotations(doc)]
        assert (await layersync.aio.restore_annotation(doc, created["id"]))["id"] == created["id"]
        with pytest.raises(layersync.NoSuchAttachmentError):
            await layersync.aio.download_attachment(doc, "1" * 64, timeout=WAIT_S)
        att_id = doc.add_attachment(b"async bytes", "text/plain")
        doc.create_annotation({"type": "pspdfkit/image", "pageIndex": 0, "bbox": [1, 1, 5, 5],
                               "imageAttachmentId": att_id})  # an image record's contentType is image/*
        await layersync.aio.sync(doc, timeout=WAIT_S)
        info = await layersync.aio.download_attachment(doc, att_id, timeout=WAIT_S)
        assert info["size_bytes"] == len(b"async bytes")
    asyncio.run(main())


def test_unmanaged_annotation_and_last_sync_time(downloaded):
    client, doc = downloaded()
    assert doc.last_sync_time is None
    ann = doc.create_annotation(note("offline only"))
    with pytest.raises(layersync.errors.UnmanagedAnnotationError):
        doc.annotation_history(ann["id"])  # never synced: the server does not manage it yet
    with pytest.raises(layersync.errors.UnmanagedAnnotationError):
        doc.restore_annotation(ann["id"])
    assert doc.last_sync_time is None
    before = time.time()
    doc.sync(wait=True, timeout=WAIT_S)
    assert before - 1 <= doc.last_sync_time <= time.time() + 1
    assert [v["revision"] for v in doc.annotation_history(ann["id"])]


def test_client_on_did_reset_layer(downloaded, server):
    client, doc = downloaded()
    doc.create_annotation(note("synced"))
    doc.sync(wait=True, timeout=WAIT_S)
    resets: list[Any] = []
    client.on("did_reset_layer", lambda d, error: resets.append((d, error)))
    # The layer is recreated on the server: deleted, then created again by the backend
    # (a deleted layer never comes back by a client request).
    server.admin_request(f"/api/documents/{doc.id}/layers/~", method="DELETE")
    server.admin_request(f"/api/documents/{doc.id}/layers", method="POST", json_body={"name": ""})
    kept = doc.create_annotation(note("edited while the layer was recreated"))
    since = client.mark()
    doc.sync(wait=True, timeout=WAIT_S)
    client.wait_for("did_reset_layer", since=since, document=doc, timeout=WAIT_S)
    assert len(resets) == 1 and resets[0][0] is doc
    assert isinstance(resets[0][1], layersync.errors.ServerResetError)
    assert doc.get_annotation(kept["id"])["id"] == kept["id"]
    assert kept["id"] in server.annotations(doc.id)
