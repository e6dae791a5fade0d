"""Client and Document against the real library and the real server on loopback."""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

import layersync
from layersync import DocumentState

from conftest import WAIT_S, corpus_pdf

TEXT = "Привет, мир — مرحبا بالعالم — 你好，世界 — नमस्ते — 👩‍👩‍👧‍👦 🎉 e\u0301"


def note(text: str, page: int = 0) -> dict:
    return {"v": 2, "type": "pspdfkit/note", "pageIndex": page, "bbox": [20, 20, 24, 24],
            "opacity": 1, "creatorName": "tester", "icon": "comment",
            "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z",
            "text": {"format": "plain", "value": text}}


def test_validation_reports_server_info(make_client):
    client = make_client()
    info = client.wait_validated(timeout=WAIT_S)
    assert info["protocol"]["min"] <= 1 <= info["protocol"]["max"]
    assert client.server_url.startswith("http://127.0.0.1:")


def test_document_identity_and_claims(make_client, server, uploaded):
    doc_id = uploaded()
    client = make_client()
    a = client.document_for_jwt(server.mint_token(doc_id, user_id="ü-alice"))
    b = client.document_for_jwt(server.mint_token(doc_id, user_id="ü-alice"))
    assert a is b
    assert (a.id, a.layer_name, a.user_id) == (doc_id, "", "ü-alice")
    other = client.document_for_jwt(server.mint_token(doc_id, layer="review", user_id="ü-alice"))
    assert other is not a and other.layer_name == "review"
    assert not a.is_downloaded and a.state == DocumentState.UNKNOWN
    with pytest.raises(layersync.NotDownloadedError):
        a.pdf_path


def test_download_with_progress(make_client, server, uploaded):
    pdf = corpus_pdf("pdfjs-prefilled_f1040.pdf")
    doc_id = uploaded(pdf.name)
    client = make_client()
    doc = client.document_for_jwt(server.mint_token(doc_id))
    seen: list[tuple[int, int]] = []
    doc.download(wait=True, timeout=WAIT_S, progress=lambda done, total: seen.append((done, total)))
    assert seen, "no download_progress callback"
    assert seen[-1][0] == pdf.stat().st_size
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    assert doc.is_downloaded and doc.state == DocumentState.CLEAN
    assert hashlib.sha256(Path(doc.pdf_path).read_bytes()).digest() == hashlib.sha256(pdf.read_bytes()).digest()
    imported = doc.list_annotations()
    assert len(imported) == len(server.annotations(doc_id)) > 200
    with pytest.raises(layersync.AlreadyDownloadedError):
        doc.download(wait=False)


def test_crud_round_trip_byte_exact(downloaded, server):
    client, doc = downloaded()
    created = doc.create_annotation(note(TEXT))
    ann_id = created["id"]
    assert len(ann_id) >= 1 and created["text"]["value"] == TEXT
    assert doc.has_unsynced_changes
    got = doc.get_annotation(ann_id)
    assert got["text"]["value"].encode("utf-8") == TEXT.encode("utf-8")
    assert any(a["id"] == ann_id for a in doc.list_annotations(page_index=0, type="pspdfkit/note"))
    assert doc.list_annotations(creator_name="nobody-has-this-name") == []

    doc.sync(wait=True, timeout=WAIT_S)
    assert not doc.has_unsynced_changes and doc.state == DocumentState.CLEAN
    on_server = server.annotations(doc.id)[ann_id]
    assert on_server["text"]["value"].encode("utf-8") == TEXT.encode("utf-8")

    updated = dict(got, text={"format": "plain", "value": TEXT + " ✏️"})
    doc.update_annotation(updated)
    assert doc.get_annotation(ann_id)["text"]["value"] == TEXT + " ✏️"
    doc.sync(wait=True, timeout=WAIT_S)
    assert server.annotations(doc.id)[ann_id]["text"]["value"] == TEXT + " ✏️"

    doc.delete_annotation(ann_id)
    with pytest.raises(layersync.NoSuchAnnotationError):
        doc.get_annotation(ann_id)
    doc.sync(wait=True, timeout=WAIT_S)
    assert ann_id not in server.annotations(doc.id)


def test_invalid_annotation_input(downloaded):
    _, doc = downloaded()
    with pytest.raises(layersync.InvalidArgumentError):
        doc.create_annotation(note("bad \udcff surrogate"))
    with pytest.raises((layersync.InvalidJSONStructureError, layersync.InvalidArgumentError)):
        doc.create_annotation({"no": "type"})
    with pytest.raises(layersync.NoSuchAnnotationError):
        doc.delete_annotation("01JNOSUCHRECORD0000000000X")


def test_two_clients_converge(downloaded, server, uploaded):
    doc_id = uploaded()
    a_client, a = downloaded(doc_id, user_id="alice")
    b_client, b = downloaded(doc_id, user_id="bob")
    since = b_client.mark()
    b.start_listening()
    created = a.create_annotation(note("from A 🅰️"))
    a.sync(wait=True, timeout=WAIT_S)
    b_client.wait_for("did_receive_changes", since=since, document=b, timeout=WAIT_S,
                      predicate=lambda e: created["id"] in (e.args[0].get("created", []) + e.args[0].get("updated", [])))
    assert b.get_annotation(created["id"])["text"]["value"] == "from A 🅰️"

    bc = b.create_annotation(note("from B 🅱️"))
    a.start_listening()
    b.sync(wait=True, timeout=WAIT_S)
    a.sync(wait=True, timeout=WAIT_S)
    assert a.get_annotation(bc["id"])["text"]["value"] == "from B 🅱️"
    def by_id(doc):
        return {x["id"]: x for x in doc.list_annotations()}
    assert by_id(a) == by_id(b)
    assert set(by_id(a)) == set(server.annotations(doc_id))


def test_offline_edits_stay_pending(downloaded, server):
    client, doc = downloaded()
    client.set_network_available(False)
    created = doc.create_annotation(note("offline ✈️"))
    with pytest.raises(layersync.RequestFailedError):
        doc.sync(wait=True, timeout=WAIT_S)
    assert doc.has_unsynced_changes and created["id"] not in server.annotations(doc.id)
    client.set_network_available(True)
    doc.sync(wait=True, timeout=WAIT_S)
    assert not doc.has_unsynced_changes and created["id"] in server.annotations(doc.id)


def test_callback_exception_is_logged_and_reraised(downloaded, caplog):
    client, doc = downloaded()
    calls = []

    class Boom(Exception):
        pass

    def handler(d):
        calls.append(d)
        raise Boom("raised in did_finish_sync")

    remove = client.on("did_finish_sync", handler)
    doc.create_annotation(note("x"))
    with caplog.at_level(logging.ERROR, logger="layersync"):
        with pytest.raises(Boom):
            doc.sync(wait=True, timeout=WAIT_S)
    assert calls == [doc]
    assert any("did_finish_sync" in r.getMessage() for r in caplog.records)
    remove()
    doc.create_annotation(note("y"))
    doc.sync(wait=True, timeout=WAIT_S)  # handler removed: no exception, client still works


def test_sync_delay_property(downloaded):
    _, doc = downloaded()
    assert doc.sync_delay is None  # fixture creates clients with sync disabled
    doc.sync_delay = 0.25
    assert doc.sync_delay == pytest.approx(0.25)
    doc.sync_delay = None
    assert doc.sync_delay is None


def test_automatic_sync_after_edit(downloaded, server):
    client, doc = downloaded()
    doc.sync_delay = 0.1
    since = client.mark()
    created = doc.create_annotation(note("auto"))
    client.wait_for("did_finish_sync", since=since, document=doc, timeout=WAIT_S)
    assert created["id"] in server.annotations(doc.id)


def test_close_is_idempotent_and_handles_go_invalid(make_client, server, uploaded):
    client = make_client()
    doc = client.document_for_jwt(server.mint_token(uploaded()))
    client.close()
    client.close()
    assert client.closed
    with pytest.raises(layersync.InvalidStateError):
        doc.state


@pytest.mark.parametrize("b_listens_first", [False, True], ids=["push-before-pull", "pull-before-push"])
def test_conflict_first_writer_wins(downloaded, server, uploaded, b_listens_first):
    doc_id = uploaded()
    a_client, a = downloaded(doc_id, user_id="alice")
    b_client, b = downloaded(doc_id, user_id="bob")
    target = a.create_annotation(note("original"))
    a.sync(wait=True, timeout=WAIT_S)
    b.sync(wait=True, timeout=WAIT_S)
    base = b.get_annotation(target["id"])
    since = b_client.mark()
    if b_listens_first:
        b.start_listening()
    a.update_annotation(dict(base, text={"format": "plain", "value": "A wins 🥇"}))
    b.update_annotation(dict(base, text={"format": "plain", "value": "B loses 🥈"}))
    a.sync(wait=True, timeout=WAIT_S)
    if b_listens_first:  # B's long-poll brings A's version while B's own edit is still pending
        b_client.wait_for("did_receive_changes", since=since, document=b, timeout=WAIT_S,
                          predicate=lambda e: target["id"] in e.args[0].get("updated", []))
    b.sync(wait=True, timeout=WAIT_S)
    ev = b_client.wait_for("did_reject_changes", since=since, document=b, timeout=WAIT_S)
    rejected = {r["id"]: r for r in ev.args[0]}
    assert target["id"] in rejected
    r = rejected[target["id"]]
    assert r["server"]["text"]["value"] == "A wins 🥇"
    assert r["local"]["text"]["value"] == "B loses 🥈"
    assert b.get_annotation(target["id"])["text"]["value"] == "A wins 🥇"
    assert server.annotations(doc_id)[target["id"]]["text"]["value"] == "A wins 🥇"


def test_normal_durability_round_trip(downloaded, server, uploaded):
    """``durability="normal"`` (API writes without fsync): edits still reach the other client
    and the server, both ways, and survive closing and reopening the client."""
    doc_id = uploaded()
    a_client, a = downloaded(doc_id, user_id="alice", durability="normal")
    b_client, b = downloaded(doc_id, user_id="bob")
    created = a.create_annotation(note("normal ✓"))
    a.sync(wait=True, timeout=WAIT_S)
    b.sync(wait=True, timeout=WAIT_S)
    assert b.get_annotation(created["id"])["text"]["value"] == "normal ✓"
    updated = dict(created, text={"format": "plain", "value": "full ✓"})
    b.update_annotation(updated)
    b.sync(wait=True, timeout=WAIT_S)
    a.sync(wait=True, timeout=WAIT_S)
    assert a.get_annotation(created["id"])["text"]["value"] == "full ✓"
    offline = a.create_annotation(note("queued"))
    storage = a_client.storage_path
    a_client.close()
    with layersync.Client(server.url, storage, sync_delay_s=None, durability="normal") as again:
        doc = again.document_for_jwt(server.mint_token(doc_id, user_id="alice"))
        assert doc.has_unsynced_changes
        doc.sync(wait=True, timeout=WAIT_S)
        assert not doc.has_unsynced_changes
    assert server.annotations(doc_id)[offline["id"]]["text"]["value"] == "queued"


@pytest.mark.parametrize("value", ["NORMAL", "off", "", None, 1])
def test_invalid_durability_raises_value_error(make_client, value):
    with pytest.raises(ValueError, match="durability"):
        make_client(durability=value)
