"""Record history kept as "current row + superseded versions" (schema migration 3), and
the sync answer's page read inside the write transaction, on both backends."""

from __future__ import annotations

import pytest

from layersync_server.changes import apply_changes
from layersync_server.storage import NewDocument, open_storage
from layersync_server.storage.sql import SCHEMA_VERSION


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request, tmp_path):
    target = (tmp_path / "store.sqlite" if request.param == "sqlite"
              else request.getfixturevalue("pg_url"))
    backend = open_storage(target, history_versions=3)
    backend.create_document(NewDocument("d", "Doc", b"%PDF-1.4 fake", "00" * 32, 1, [{"id": "i1", "v": 2}]))
    yield backend
    backend.close()


def _version_rows(storage, record_id: str) -> list[int]:
    with storage.transaction(write=False) as conn:
        rows = storage.execute(conn, "SELECT revision FROM record_versions WHERE id=? ORDER BY revision",
                               (record_id,)).fetchall()
    return [row["revision"] for row in rows]


def test_a_create_writes_no_version_row_and_history_still_shows_it(storage):
    with storage.write_layer("d", "") as writer:
        result = apply_changes(writer, [{"change_id": "c1", "op": "create", "id": "n1",
                                         "content": {"text": "a"}}], "u")
    revision = result.accepted[0]["revision"]
    assert _version_rows(storage, "n1") == []
    history = storage.record_history("d", "", "n1")
    assert [(v.revision, v.content["text"], v.updated_by) for v in history] == [(revision, "a", "u")]
    assert [v.revision for v in storage.record_history("d", "", "i1")] == [1]  # imported


def test_updates_and_delete_keep_the_last_n_versions_across_transactions(storage):
    with storage.write_layer("d", "") as writer:
        first = writer.put_record("n2", {"text": "a"}, "u")
        writer.put_record("n2", {"text": "b"}, "u")  # two writes of one record in one transaction
    for text in ("c", "d"):
        with storage.write_layer("d", "") as writer:
            writer.put_record("n2", {"text": text}, "v")
    with storage.write_layer("d", "") as writer:
        last = writer.put_record("n2", None, "w")
        inside = writer.history("n2")
    history = storage.record_history("d", "", "n2")
    assert [v.revision for v in history] == [v.revision for v in inside] == [last, last - 1, last - 2]
    assert history[0].deleted and history[0].content is None and history[0].updated_by == "w"
    assert [v.content["text"] for v in history[1:]] == ["d", "c"]
    assert _version_rows(storage, "n2") == [last - 2, last - 1]  # superseded ones only, n - 1
    record = storage.get_record("d", "", "n2")
    assert record.created_by == "u" and record.updated_by == "w" and record.revision == last > first


def test_rollback_restore_and_cascade_use_the_kept_versions(storage):
    with storage.write_layer("d", "") as writer:
        writer.put_record("root", {"text": "r1"}, "u")
        writer.put_record("kid", {"text": "k", "rootId": "root"}, "u")
    with storage.write_layer("d", "") as writer:
        root = writer.get_record("root")
        result = apply_changes(writer, [{"change_id": "del", "op": "delete", "id": "root",
                                         "base_revision": root.revision}], "u")
    assert result.accepted and storage.get_record("d", "", "kid").deleted
    kid_history = storage.record_history("d", "", "kid")
    assert [v.deleted for v in kid_history] == [True, False] and kid_history[1].content["text"] == "k"
    with storage.write_layer("d", "") as writer:  # restore: newest live version
        live = [v for v in writer.history("root") if not v.deleted][0]
        writer.put_record("root", live.content, "u")
    assert storage.get_record("d", "", "root").content == {"text": "r1"}
    assert [v.deleted for v in storage.record_history("d", "", "root")] == [False, True, False]


def test_migration_3_drops_the_current_version_rows_older_servers_kept(storage):
    with storage.write_layer("d", "") as writer:
        for text in ("a", "b"):
            writer.put_record("old", {"text": text}, "u")
    current = storage.get_record("d", "", "old")
    with storage.transaction(write=True) as conn:  # what schema 2 stored: every version
        storage.execute(conn, "INSERT INTO record_versions (document_id, layer, id, revision, deleted,"
                        " content, updated_by, updated_at) VALUES (?,?,?,?,?,?,?,?)",
                        ("d", "", "old", current.revision, 0, '{"text":"b"}', "u", current.updated_at))
        storage.execute(conn, "INSERT INTO record_versions (document_id, layer, id, revision, deleted,"
                        " content, updated_by, updated_at) VALUES (?,?,?,?,?,?,?,?)",
                        ("d", "", "i1", 1, 0, '{"id":"i1","v":2}', None, current.updated_at))
        if hasattr(storage, "path"):
            storage.execute(conn, "PRAGMA user_version=2")
        else:
            storage.execute(conn, "DELETE FROM layersync_schema WHERE version > 2")
    storage.migrate()
    with storage.transaction(write=False) as conn:
        assert storage.schema_version(conn) == SCHEMA_VERSION
    assert _version_rows(storage, "old") == [current.revision - 1]
    assert _version_rows(storage, "i1") == []
    assert [v.content["text"] for v in storage.record_history("d", "", "old")] == ["b", "a"]


def test_history_versions_0_and_1_keep_no_superseded_rows(tmp_path):
    for keep in (0, 1):
        storage = open_storage(tmp_path / f"keep{keep}.sqlite", history_versions=keep)
        try:
            storage.create_document(NewDocument("d", "Doc", b"%PDF", "00" * 32, 1))
            for text in ("a", "b"):
                with storage.write_layer("d", "") as writer:
                    writer.put_record("n", {"text": text}, "u")
            assert _version_rows(storage, "n") == []
            assert [v.content["text"] for v in storage.record_history("d", "", "n")] == ["b"][:keep]
        finally:
            storage.close()


def test_changes_since_is_the_page_list_records_gives_after_commit(storage):
    with storage.write_layer("d", "") as writer:
        for index in range(5):
            writer.put_record(f"c{index}", {"text": str(index)}, "u")
    with storage.write_layer("d", "") as writer:
        own = {writer.put_record("c1", None, "u"), writer.put_record("new", {"text": "n"}, "u")}
        inside = [writer.changes_since(since, limit, frozenset(own))
                  for since, limit in ((0, 100), (1, 2), (3, 1), (99, 10))]
    after = [storage.list_records("d", "", since, limit, True, frozenset(own))
             for since, limit in ((0, 100), (1, 2), (3, 1), (99, 10))]
    assert inside == after
    assert [r.id for r in after[0].records] == ["i1", "c0", "c2", "c3", "c4"]
    assert after[1].has_more and after[1].next_since == 4 and not after[3].records
