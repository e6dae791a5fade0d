"""``LayerWriter.written_page``: the page a commit hands to waiting long-polls is the
page ``list_records`` gives right after that commit, byte for byte on the wire.

``context.commit`` builds the page for the layer's waiting long-polls from what the
writer wrote (no query); a waiter answers from it instead of re-reading storage. These
tests write batches of every kind (fast-path creates, updates, deletes with their
``rootId`` cascade, a record written twice, rejected and replayed changes, admin
writes) on every backend and compare ``written_page`` with ``list_records(since=<the
revision before the transaction>)`` read after the commit, for limits that cut the
page and limits that do not.
"""

from __future__ import annotations

import pytest

from layersync_server.changes import apply_changes, delete_record
from layersync_server.routes.access import page_json
from layersync_server.json_http import WireJSONResponse
from layersync_server.wire_json import parse_sync_json


def _create(cid: str, rid: str, extra: str = "") -> str:
    return (f'{{"change_id":"{cid}","op":"create","id":"{rid}","content":{{"v":2,'
            f'"id":"{rid}","type":"pspdfkit/note","text":"é😀"{extra}}}}}')


def _update(cid: str, rid: str, base: int) -> str:
    return (f'{{"change_id":"{cid}","op":"update","id":"{rid}","base_revision":{base},'
            f'"content":{{"v":2,"id":"{rid}","x":{base}}}}}')


def _delete(cid: str, rid: str, base: int) -> str:
    return f'{{"change_id":"{cid}","op":"delete","id":"{rid}","base_revision":{base}}}'


def _check(storage, layer: str, changes: list[str], limits=(1, 3, 1000)):
    """Push ``changes``; for each limit, written_page == list_records after commit."""
    body, checked, texts = parse_sync_json(
        ('{"since":0,"changes":[' + ",".join(changes) + "]}").encode())
    pages = {}
    with storage.write_layer("d", layer) as writer:
        before = writer.layer.revision
        apply_changes(writer, body["changes"], "alice", checked, texts)
        for limit in limits:
            pages[limit] = writer.written_page(limit)
    for limit in limits:
        expected = storage.list_records("d", layer, before, limit, True)
        got = pages[limit]
        assert got is not None
        assert got == expected, (layer, limit)
        assert WireJSONResponse(page_json(got)).body == WireJSONResponse(page_json(expected)).body
    return before


def test_written_page_is_the_page_after_commit(storage):
    storage.ensure_layer("d", "L")
    # fast-path creates (new records, new change ids), with a rootId family
    _check(storage, "L", [_create(f"c{i}", f"r{i}") for i in range(5)]
           + [_create("k1", "kid1", ',"rootId":"r0"'), _create("k2", "kid2", ',"rootId":"r0"')])
    # updates, a record written twice, a delete cascading to children, rejects, replays
    _check(storage, "L", [
        _update("u1", "r1", 2), _update("u1b", "r1", 8),  # second update on the first's revision
        _delete("del0", "r0", 1),  # tombstones r0, kid1, kid2
        _create("c2", "r2"),  # replayed change id: no write
        _create("dup", "r3"),  # exists: rejected
        _update("stale", "r4", 1),  # conflict
        _create("n1", "new1"), _create("n2", "new1"),  # created then rejected
        _delete("del-missing", "nope", 1),
    ])
    # a batch that writes nothing: an empty page at the unchanged revision
    _check(storage, "L", [_create("c1", "r1"), _update("stale2", "r4", 1)])
    # delete of a tombstone (no new revision), then writes to records of earlier batches
    _check(storage, "L", [_delete("del0-again", "r0", 1), _update("u4", "r4", 5),
                          _create("late", "late1")])


def test_written_page_of_admin_writes(storage):
    """Writes through put_record (admin API) and delete_record, on a layer created by
    the transaction itself."""
    with storage.write_layer("d", "A") as writer:
        before = writer.layer.revision
        for i in range(4):
            writer.put_record(f"a{i}", {"id": f"a{i}", "v": 2, "n": i}, None)
        writer.put_record("a1", {"id": "a1", "v": 2, "n": 9}, "bob")
        delete_record(writer, "a2", "bob")
        page = writer.written_page(1000)
        cut = writer.written_page(2)
    assert page == storage.list_records("d", "A", before, 1000, True)
    assert cut == storage.list_records("d", "A", before, 2, True)
    assert cut.has_more and cut.next_since == cut.records[-1].revision
