"""Conformance tests of the Storage interface, run against every backend.

Each test runs once on SQLite and once on PostgreSQL (a throwaway cluster, see
``pgcluster.py``); a new backend is added to ``BACKENDS`` (conftest.py) and must pass unchanged.
"""

from __future__ import annotations

import threading
import time

import pytest

from conftest import BACKENDS, open_backend
from layersync_server.changes import apply_changes
from layersync_server.storage import (DocumentExists, DocumentNotFound, LayerDeleted, LayerExists,
                                      NewDocument)
from layersync_server.storage.sql import SCHEMA_VERSION


@pytest.fixture(params=sorted(BACKENDS))
def storage(request, tmp_path):
    backend = open_backend(request, tmp_path)
    backend.create_document(NewDocument("d", "Doc", b"%PDF-1.4 fake", "00" * 32, 1,
                                        [{"id": "i1", "v": 2}, {"id": "i2", "v": 2}]))
    yield backend
    backend.close()


def test_import_creates_default_layer_records(storage):
    page = storage.list_records("d", "", 0, 10, include_tombstones=False)
    assert [(r.id, r.revision) for r in page.records] == [("i1", 1), ("i2", 2)]
    assert page.layer.revision == 2 and not page.has_more and page.next_since == 2
    with pytest.raises(DocumentExists):
        storage.create_document(NewDocument("d", "x", b"", "", 0))
    assert storage.read_pdf("d") == b"%PDF-1.4 fake"
    assert [d.document_id for d in storage.list_documents()] == ["d"]
    assert storage.count_documents() == 1


def test_layers_epochs_and_missing_documents(storage):
    first = storage.ensure_layer("d", "x")
    assert first.revision == 0 and storage.ensure_layer("d", "x").epoch == first.epoch
    assert first.epoch != storage.ensure_layer("d", "").epoch
    with pytest.raises(DocumentNotFound):
        storage.ensure_layer("nope", "")
    with pytest.raises(DocumentNotFound):
        storage.list_records("nope", "", 0, 10, True)
    assert storage.get_layer("d", "never") is None


def test_writer_revisions_tombstones_and_rollback(storage):
    with storage.write_layer("d", "") as writer:
        assert writer.put_record("n", {"id": "n", "rootId": "i1"}, "u") == 3
        assert writer.put_record("i1", None, "u") == 4
        assert [c.id for c in writer.live_children("i1")] == ["n"]
        writer.record_outcome("c1", {"change_id": "c1", "id": "n", "revision": 3})
    with pytest.raises(RuntimeError):
        with storage.write_layer("d", "") as writer:
            writer.put_record("lost", {"id": "lost"}, None)
            raise RuntimeError("abort")
    with storage.write_layer("d", "") as writer:
        assert writer.get_record("lost") is None
        assert writer.get_record("i1").deleted and writer.get_record("i1").content is None
        assert writer.recorded_outcome("c1")["revision"] == 3
        assert writer.layer.revision == 4
    delta = storage.list_records("d", "", 2, 10, include_tombstones=True, exclude_revisions=frozenset({3}))
    assert [(r.id, r.deleted) for r in delta.records] == [("i1", True)]
    deleted = storage.list_records("d", "", 0, 10, include_tombstones=True, only_tombstones=True)
    assert [r.id for r in deleted.records] == ["i1"]


def test_concurrent_writers_get_unique_revisions(storage):
    def push(n):
        for i in range(20):
            with storage.write_layer("d", "") as writer:
                apply_changes(writer, [{"change_id": f"{n}-{i}", "op": "create", "id": f"{n}-{i}",
                                        "content": {}}], None)
    threads = [threading.Thread(target=push, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    revisions = [r.revision for r in storage.iter_records("d", "")]
    assert len(revisions) == len(set(revisions)) == 82 and max(revisions) == 82


def test_history_keeps_the_last_n_versions(storage):
    for text in ("a", "b", "c", "d"):
        with storage.write_layer("d", "") as writer:
            writer.put_record("i1", {"id": "i1", "text": text}, "u")
    with storage.write_layer("d", "") as writer:
        writer.put_record("i1", None, "u")
        history = writer.history("i1")
    assert [h.revision for h in history] == [7, 6, 5]  # history_versions=3
    assert history[0].deleted and history[1].content["text"] == "d"


def test_layer_create_list_delete(storage):
    created = storage.create_layer("d", "review", [{"id": "r1", "v": 2}], "u")
    assert created.revision == 1
    with pytest.raises(LayerExists):
        storage.create_layer("d", "review", [])
    assert [layer.name for layer in storage.list_layers("d")] == ["", "review"]
    assert storage.count_records("d", "review") == 1
    assert storage.delete_layer("d", "review") and not storage.delete_layer("d", "review")
    again = storage.create_layer("d", "review", [])  # (deleted: only create_layer brings it back)
    assert again.revision == 0 and again.epoch != created.epoch


def _refuses_to_bring_back(storage, document_id: str, layer: str) -> None:
    """Every call that creates a layer on first use refuses a deleted one, and leaves it
    deleted (nothing listed, no epoch)."""
    with pytest.raises(LayerDeleted):
        storage.ensure_layer(document_id, layer)
    for include_tombstones in (False, True):
        with pytest.raises(LayerDeleted):
            storage.list_records(document_id, layer, 0, 10, include_tombstones)
    with pytest.raises(LayerDeleted):
        with storage.write_layer(document_id, layer) as writer:
            writer.put_record("sneaky", {"id": "sneaky"}, None)
    assert storage.get_layer(document_id, layer) is None
    assert layer not in [state.name for state in storage.list_layers(document_id)]
    assert storage.is_layer_deleted(document_id, layer)


def test_a_deleted_layer_stays_deleted_until_created_again(storage):
    """Tombstone per deleted layer: reads and writes that create a layer on first use
    (a JWT naming a new layer) refuse it with LayerDeleted; create_layer (the admin API's
    create / restore from a copy) brings it back with a new epoch and clears it."""
    with storage.write_layer("d", "gone") as writer:  # never existed: created on first use
        writer.put_record("g1", {"id": "g1"}, "u")
    first = storage.get_layer("d", "gone")
    assert not storage.is_layer_deleted("d", "gone")
    assert storage.delete_layer("d", "gone")
    _refuses_to_bring_back(storage, "d", "gone")
    assert not storage.delete_layer("d", "gone")  # already gone: still a tombstone
    assert storage.is_layer_deleted("d", "gone")

    restored = storage.create_layer("d", "gone", [{"id": "c1", "v": 2}, {"id": "c2", "v": 2}], "u")
    assert restored.revision == 2 and restored.epoch != first.epoch
    assert not storage.is_layer_deleted("d", "gone")
    assert [r.id for r in storage.list_records("d", "gone", 0, 10, False).records] == ["c1", "c2"]
    with storage.write_layer("d", "gone") as writer:
        assert writer.put_record("c3", {"id": "c3"}, "u") == 3
    with pytest.raises(LayerExists):
        storage.create_layer("d", "gone", [])
    assert storage.get_layer("d", "gone").epoch == restored.epoch

    assert storage.ensure_layer("d", "fresh").revision == 0  # never existed: still created
    assert storage.list_records("d", "other", 0, 10, True).layer.revision == 0
    assert not storage.is_layer_deleted("d", "never")


def test_deleting_a_document_leaves_its_layers_deleted(storage):
    """A document deleted and uploaded again gets its default layer back (the upload
    creates it); its other layers stay deleted until create_layer."""
    storage.create_layer("d", "side", [{"id": "s1", "v": 2}])
    assert storage.delete_document("d")
    for layer in ("", "side"):
        with pytest.raises(DocumentNotFound):
            storage.list_records("d", layer, 0, 10, True)
        assert storage.is_layer_deleted("d", layer)
    storage.create_document(NewDocument("d", "again", b"x", "11" * 32, 1, [{"id": "n1", "v": 2}]))
    assert not storage.is_layer_deleted("d", "")
    assert [r.id for r in storage.list_records("d", "", 0, 10, False).records] == ["n1"]
    _refuses_to_bring_back(storage, "d", "side")
    assert storage.create_layer("d", "side", []).revision == 0
    assert storage.list_records("d", "side", 0, 10, True).records == []


def test_writers_racing_a_layer_delete_never_bring_it_back(storage):
    """Writers keep writing a layer while it is deleted: each ends with LayerDeleted, and
    the layer is not re-created by the writes that lost the race (the PostgreSQL path of
    a writer queued on the layer lock while the delete commits)."""
    storage.create_layer("d", "busy", [])
    started = threading.Barrier(5)
    outcomes = []

    def write(n):
        started.wait()
        for i in range(10_000):
            try:
                with storage.write_layer("d", "busy") as writer:
                    writer.put_record(f"{n}-{i}", {"id": f"{n}-{i}"}, None)
            except LayerDeleted:
                outcomes.append("deleted")
                return
        outcomes.append("never deleted")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    started.wait()
    deadline = time.monotonic() + 30
    while storage.get_layer("d", "busy").revision < 8:  # the writers are under way
        assert time.monotonic() < deadline and len(outcomes) == 0, outcomes
        time.sleep(0.001)
    assert storage.delete_layer("d", "busy")
    for t in threads:
        t.join()
    assert outcomes == ["deleted"] * 4
    _refuses_to_bring_back(storage, "d", "busy")


def test_attachments_revocation_and_document_delete(storage):
    assert storage.put_attachment("d", "ab" * 32, "image/png", b"\x89PNG")
    assert not storage.put_attachment("d", "ab" * 32, "image/png", b"\x89PNG")
    assert storage.get_attachment("d", "ab" * 32).data == b"\x89PNG"
    assert storage.get_attachment("d", "cd" * 32) is None
    with pytest.raises(DocumentNotFound):
        storage.put_attachment("nope", "ab" * 32, "image/png", b"")
    assert not storage.is_token_revoked("j1")
    storage.revoke_token("j1")
    storage.revoke_token("j1")
    assert storage.is_token_revoked("j1")
    assert storage.delete_document("d") and not storage.delete_document("d")
    assert storage.get_document("d") is None and storage.get_attachment("d", "ab" * 32) is None
    storage.create_document(NewDocument("d", "again", b"x", "11" * 32, 1))
    assert storage.list_records("d", "", 0, 10, True).records == []


def test_schema_is_versioned(storage):
    with storage.transaction(write=False) as conn:
        assert storage.schema_version(conn) == SCHEMA_VERSION
    storage.migrate()  # idempotent


def test_one_batch_applies_changes_in_order(storage):
    """A batch is applied change by change even though the SQL backend prefetches and
    buffers its writes: duplicate change ids replay, a create then update/delete of the
    same record sees the earlier change, the rootId cascade reaches children created in
    the same batch, and history is trimmed for records first written in the batch."""
    changes = [  # the layer is at revision 2 (i1, i2)
        {"change_id": "c1", "op": "create", "id": "p", "content": {"text": "p"}},  # 3
        {"change_id": "c2", "op": "create", "id": "k", "content": {"rootId": "p"}},  # 4
        {"change_id": "c1", "op": "create", "id": "p", "content": {"text": "again"}},  # replay
        {"change_id": "c3", "op": "create", "id": "p", "content": {"text": "twice"}},  # exists
        {"change_id": "c4", "op": "update", "id": "p", "base_revision": 3, "content": {"text": "u"}},  # 5
        {"change_id": "c5", "op": "update", "id": "p", "base_revision": 3, "content": {"text": "x"}},
        {"change_id": "c6", "op": "delete", "id": "i1", "base_revision": 1},  # 6
        {"change_id": "c7", "op": "update", "id": "gone", "base_revision": 1, "content": {}},
        {"change_id": "c8", "op": "delete", "id": "p", "base_revision": 5},  # 7, k: 8
    ] + [{"change_id": f"h{n}", "op": "update", "id": "i2", "base_revision": 2 + n,
          "content": {"n": n}} for n in range(3)]  # h0: 9, h1/h2 conflict
    with storage.write_layer("d", "") as writer:
        result = apply_changes(writer, changes, "u")
    assert [(o["change_id"], o["revision"]) for o in result.accepted] == [
        ("c1", 3), ("c2", 4), ("c1", 3), ("c4", 5), ("c6", 6), ("c8", 7), ("h0", 9)]
    assert [(o["change_id"], o["reason"]) for o in result.rejected] == [
        ("c3", "exists"), ("c5", "conflict"), ("c7", "not_found"), ("h1", "conflict"),
        ("h2", "conflict")]
    assert result.rejected[0]["server_record"]["content"] == {"id": "p", "v": 2, "text": "p"}
    p, k = storage.get_record("d", "", "p"), storage.get_record("d", "", "k")
    assert (p.deleted, p.revision, k.deleted, k.revision) == (True, 7, True, 8)
    assert storage.get_record("d", "", "i1").deleted
    assert storage.get_record("d", "", "i2").content == {"id": "i2", "v": 2, "n": 0}
    assert storage.get_layer("d", "").revision == 9
    with storage.write_layer("d", "") as writer:
        replay = apply_changes(writer, changes, "u")
        assert writer.layer.revision == 9
    assert replay.accepted == result.accepted and replay.rejected == result.rejected
    many = [{"change_id": f"m{n}", "op": "create" if n == 0 else "update", "id": "m",
             "base_revision": 9 + n, "content": {"n": n}} for n in range(6)]  # 10..15
    with storage.write_layer("d", "") as writer:
        assert len(apply_changes(writer, many, "u").accepted) == 6
    assert [v.revision for v in storage.record_history("d", "", "m")] == [15, 14, 13]
