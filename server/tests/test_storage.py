"""Conformance tests of the Storage interface, run against every backend.

A new backend (PostgreSQL) is added to ``BACKENDS`` and must pass unchanged.
"""

from __future__ import annotations

import threading

import pytest

from layersync_server.changes import apply_changes
from layersync_server.storage import DocumentExists, DocumentNotFound, NewDocument
from layersync_server.storage.sqlite import SqliteStorage

BACKENDS = {"sqlite": lambda tmp_path: SqliteStorage(tmp_path / "store.sqlite")}


@pytest.fixture(params=sorted(BACKENDS))
def storage(request, tmp_path):
    backend = BACKENDS[request.param](tmp_path)
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


def test_layers_epochs_and_missing_documents(storage):
    first = storage.ensure_layer("d", "x")
    assert first.revision == 0 and storage.ensure_layer("d", "x").epoch == first.epoch
    assert first.epoch != storage.ensure_layer("d", "").epoch
    with pytest.raises(DocumentNotFound):
        storage.ensure_layer("nope", "")
    with pytest.raises(DocumentNotFound):
        storage.list_records("nope", "", 0, 10, True)


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
