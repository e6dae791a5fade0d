"""Conflict reports that survive a crash (docs/durability.md "Conflict reports", docs/rules.md
rule 3): ``did_reject_changes`` carries stable report ids, ``Document.rejected_changes()`` lists
the reports until ``acknowledge_rejected_changes`` deletes them, and a host killed (SIGKILL)
inside its ``did_reject_changes`` callback gets the same report again when it opens the layer
in a fresh process."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import layersync

from conftest import WAIT_S


def note(text: str) -> dict:
    return {"v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [20, 20, 24, 24], "opacity": 1,
            "creatorName": "tester", "icon": "comment", "createdAt": "2025-01-01T00:00:00Z",
            "updatedAt": "2025-01-01T00:00:00Z", "text": {"format": "plain", "value": text}}


def with_text(record: dict, text: str) -> dict:
    return dict(record, text={"format": "plain", "value": text})


def wait_until_delivered(doc: layersync.Document) -> list[dict]:
    """The stored reports once every one is marked delivered (its callback returned)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        reports = doc.rejected_changes()
        if all(r["delivered"] for r in reports) or time.monotonic() > deadline:
            return reports
        time.sleep(0.02)


def test_reports_carry_ids_and_stay_listed_until_acknowledged(downloaded, uploaded):
    doc_id = uploaded()
    _, a = downloaded(doc_id, user_id="alice")
    b_client, b = downloaded(doc_id, user_id="bob")
    target = a.create_annotation(note("original"))
    a.sync(wait=True, timeout=WAIT_S)
    b.sync(wait=True, timeout=WAIT_S)
    base = b.get_annotation(target["id"])
    since = b_client.mark()
    a.update_annotation(with_text(base, "A wins"))
    b.update_annotation(with_text(base, "B loses"))
    a.sync(wait=True, timeout=WAIT_S)
    b.sync(wait=True, timeout=WAIT_S)
    event = b_client.wait_for("did_reject_changes", since=since, document=b, timeout=WAIT_S)
    [report] = event.args[0]
    assert report["id"] == target["id"]
    assert len(report["report_id"]) == 26 and len(report["change_id"]) == 26
    listed = wait_until_delivered(b)
    assert [r["report_id"] for r in listed] == [report["report_id"]]
    assert listed[0]["delivered"] is True
    assert listed[0]["local"]["text"]["value"] == "B loses"
    assert listed[0]["server"]["text"]["value"] == "A wins"
    # Delivered once: the next cycle does not send it again.
    again = b_client.mark()
    b.sync(wait=True, timeout=WAIT_S)
    assert b_client.events(since=again, name="did_reject_changes") == []

    with pytest.raises(layersync.InvalidArgumentError):
        b.acknowledge_rejected_changes(report["report_id"])  # a single str, not a list
    with pytest.raises(layersync.InvalidArgumentError):
        b.acknowledge_rejected_changes([""])
    b.acknowledge_rejected_changes([report["report_id"], "01JUNKNOWNUNKNOWNUNKNOWN00"])
    assert b.rejected_changes() == []
    b.acknowledge_rejected_changes([report["report_id"]])  # already gone: ignored
    assert b.rejected_changes() == []


#: The host process that loses the conflict and dies (SIGKILL) inside did_reject_changes, after
#: writing the payload it got to a file.
CHILD = textwrap.dedent("""
    import json, os, signal, sys
    import layersync
    url, storage, jwt, payload_path = sys.argv[1:5]
    client = layersync.Client(url, storage, sync_delay_s=None)
    client.wait_validated(timeout=30)
    doc = client.document_for_jwt(jwt)
    doc.download(wait=True, timeout=30)
    target = json.loads(sys.stdin.readline())
    doc.update_annotation(dict(doc.get_annotation(target), text={"format": "plain", "value": "B loses"}))
    print("edited", flush=True)
    sys.stdin.readline()  # the other writer synced first

    def die(document, reports):
        with open(payload_path, "w") as f:
            json.dump(reports, f)
            f.flush()
            os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

    client.on("did_reject_changes", die)
    doc.sync(wait=True, timeout=30)
    print("survived", flush=True)
""")


def test_a_host_killed_inside_did_reject_changes_gets_the_report_again_at_the_next_open(
        downloaded, make_client, server, uploaded, tmp_path: Path):
    doc_id = uploaded()
    _, a = downloaded(doc_id, user_id="alice")
    target = a.create_annotation(note("original"))
    a.sync(wait=True, timeout=WAIT_S)
    storage = tmp_path / "killed-host"
    payload_path = tmp_path / "payload.json"
    jwt = server.mint_token(doc_id, user_id="bob")
    child = subprocess.Popen([sys.executable, "-c", CHILD, server.url, str(storage), jwt, str(payload_path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps(target["id"]) + "\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "edited"
        a.update_annotation(with_text(a.get_annotation(target["id"]), "A wins"))
        a.sync(wait=True, timeout=WAIT_S)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.wait(timeout=WAIT_S) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    [delivered] = json.loads(payload_path.read_text())
    assert delivered["id"] == target["id"]

    # A fresh process (this one) opens the layer: the report comes again, same id, and the
    # server version the killed process adopted is there.
    client = make_client(storage_path=storage)
    client.wait_validated(timeout=WAIT_S)
    doc = client.document_for_jwt(jwt)
    event = client.wait_for("did_reject_changes", document=doc, timeout=WAIT_S)
    assert [r["report_id"] for r in event.args[0]] == [delivered["report_id"]]
    assert event.args[0][0]["local"]["text"]["value"] == "B loses"
    assert doc.get_annotation(target["id"])["text"]["value"] == "A wins"
    assert not doc.has_unsynced_changes
    assert [(r["report_id"], r["delivered"]) for r in wait_until_delivered(doc)] == [(delivered["report_id"], True)]
    doc.acknowledge_rejected_changes([delivered["report_id"]])
    assert doc.rejected_changes() == []
