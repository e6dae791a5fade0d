"""The record schema through the Python package (docs/protocol.md, "Record schema"): the
invalid records of the cases both sides share (api/record-schema-cases.json) raise
InvalidJSONStructureError naming the field, with nothing stored or queued; the valid ones
are stored as given; a synced valid record reaches the server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import layersync

CASES = json.loads((Path(__file__).resolve().parents[3] / "api" / "record-schema-cases.json").read_text())


def test_invalid_records_are_refused_naming_the_field_and_nothing_is_queued(downloaded):
    client, doc = downloaded()
    before = doc.list_annotations()
    for case in CASES["invalid"]:
        with pytest.raises(layersync.InvalidJSONStructureError) as raised:
            doc.create_annotation(case["record"])
        assert f'"{case["field"]}"' in str(raised.value), case["name"]
    assert doc.list_annotations() == before
    assert not doc.has_unsynced_changes
    assert client.local_documents()[doc.id][0]["pending_changes"] == 0


def test_an_ill_typed_update_or_comment_leaves_the_layer_as_it_was(downloaded):
    _, doc = downloaded()
    root = doc.create_annotation({"type": "pspdfkit/note", "pageIndex": 2, "bbox": [1, 2, 3, 4], "icon": "key",
                                  "text": {"format": "plain", "value": "root"}})
    with pytest.raises(layersync.InvalidJSONStructureError, match='"bbox"'):
        doc.update_annotation({**root, "bbox": "1,2,3,4"})
    assert doc.get_annotation(root["id"]) == root
    with pytest.raises(layersync.InvalidJSONStructureError, match='"text"'):
        doc.create_comment(root["id"], {"text": "a plain string is v1, not v2"})
    assert doc.list_comments(root["id"]) == []
    comment = doc.create_comment(root["id"], "a reply")  # pageIndex defaults to the root's
    assert comment["pageIndex"] == 2


def test_valid_records_are_stored_as_given_and_sync(downloaded, server):
    _, doc = downloaded()
    ids = []
    for i, case in enumerate(CASES["valid"]):
        record = {**case["record"], "id": f"valid-{i}"}
        stored = doc.create_annotation(record)
        assert layersync.record_content(stored) == {"v": 2, **record}, case["name"]
        ids.append(record["id"])
    doc.sync()
    assert not doc.has_unsynced_changes  # none rejected by the server
    assert set(ids) <= set(server.annotations(doc.id))
