"""XFDF for a local layer: ``Document.export_xfdf`` / ``import_xfdf`` (the server's codec,
layersync-formats) and ``layersync xfdf export|import``, against the real server."""
from __future__ import annotations

import json

import layersync_formats
import pytest
from layersync_formats import XFDF_NS, read_xfdf

import layersync
from layersync import InvalidArgumentError, NoSuchAnnotationError, record_content

from conftest import WAIT_S
from test_cli import cli_env, run  # noqa: F401 (cli_env: a fixture)

NOTE = ('<text name="xfdf-note" page="0" rect="10,700,34,724" color="#00FF00" flags="print" title="ann" '
        'creationdate="D:20250101000000Z" date="D:20250102000000Z"><contents>from Acrobat</contents></text>')
REPLY = ('<text name="xfdf-reply" page="0" inreplyto="xfdf-note" rect="10,700,34,724" flags="print" title="bob">'
         '<contents>agreed</contents></text>')
XXE = ('<?xml version="1.0"?><!DOCTYPE xfdf [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
       f'<xfdf xmlns="{XFDF_NS}"><annots><text name="x" page="0" rect="0,0,9,9"><contents>&xxe;</contents>'
       '</text></annots></xfdf>')


def _by_id(records):
    return {r["id"]: r for r in records}


def test_export_gives_the_local_layer_as_the_server_does(downloaded, server, uploaded):
    doc_id = uploaded("pdfjs-comments.pdf")
    _, doc = downloaded(doc_id)
    local = doc.export_xfdf()
    server_xfdf = server.admin_request(f"/api/documents/{doc_id}/document.xfdf")
    mine, theirs = read_xfdf(local), read_xfdf(server_xfdf)
    assert mine.records and _by_id(mine.records) == _by_id(theirs.records)
    assert _by_id(mine.records) == _by_id(record_content(r) for r in doc.list_annotations()
                                  if r.get("type") != "pspdfkit/widget")


def test_import_applies_as_local_edits_and_syncs(downloaded, server):
    client, doc = downloaded()
    counts = doc.import_xfdf(f'<xfdf xmlns="{XFDF_NS}"><annots>{NOTE}{REPLY}</annots></xfdf>')
    assert counts == {"created": 2, "updated": 0, "deleted": 0}
    note = doc.get_annotation("xfdf-note")
    assert (note["type"], note["color"], note["text"]["value"], note["creatorName"]) == \
        ("pspdfkit/note", "#00FF00", "from Acrobat", "ann")
    assert [c["id"] for c in doc.list_comments("xfdf-note")] == ["xfdf-reply"]
    assert doc.has_unsynced_changes
    doc.sync(timeout=WAIT_S)
    on_server = server.annotations(doc.id)
    assert on_server["xfdf-note"]["text"]["value"] == "from Acrobat" and on_server["xfdf-reply"]["rootId"] == "xfdf-note"
    # a command document: modify + delete
    counts = doc.import_xfdf(f'<xfdf xmlns="{XFDF_NS}"><modify>{NOTE.replace("from Acrobat", "edited")}</modify>'
                             '<delete><id page="0">xfdf-reply</id></delete></xfdf>')
    assert counts == {"created": 0, "updated": 1, "deleted": 1}
    assert doc.get_annotation("xfdf-note")["text"]["value"] == "edited"
    with pytest.raises(NoSuchAnnotationError):
        doc.get_annotation("xfdf-reply")


def test_refused_documents_change_nothing(downloaded):
    _, doc = downloaded()
    before = doc.list_annotations()
    with pytest.raises(NoSuchAnnotationError, match="nothing was applied"):
        doc.import_xfdf(f'<xfdf xmlns="{XFDF_NS}"><add>{NOTE}</add>'
                        f'<modify>{NOTE.replace("xfdf-note", "missing")}</modify></xfdf>')
    with pytest.raises(InvalidArgumentError, match="DTD"):
        doc.import_xfdf(XXE)
    assert doc.list_annotations() == before and not doc.has_unsynced_changes


def test_cli_xfdf_export_and_import(cli_env, tmp_path):
    out = tmp_path / "layer.xfdf"
    exported = run("xfdf", "export", "-o", str(out), env=cli_env)
    assert exported.returncode == 0, exported.stderr
    assert read_xfdf(out.read_bytes()).records
    review = tmp_path / "review.xfdf"
    review.write_text(f'<xfdf xmlns="{XFDF_NS}"><annots>{NOTE}</annots></xfdf>')
    imported = run("xfdf", "import", str(review), "--json", env=cli_env)
    assert imported.returncode == 0, imported.stderr
    assert '"created": 1' in imported.stdout
    got = run("annotations", "get", "xfdf-note", "--json", env=cli_env)
    assert got.returncode == 0 and "from Acrobat" in got.stdout
    bad = tmp_path / "bad.xfdf"
    bad.write_text(XXE)
    refused = run("xfdf", "import", str(bad), env=cli_env)
    assert refused.returncode != 0 and "DTD" in refused.stderr


def test_cli_xfdf_import_tells_what_the_server_rejected(server, uploaded, tmp_path):
    """A user limited to group team-b imports the server's full XFDF export: every record is
    new to its local layer (it may view none of them) and taken on the server. The import
    says so: the rejected count and reason ("exists"), exit status 6 (EXIT_REJECTED), in
    --json too; before, it printed "created" and exited 0. --no-sync says "queued".
    ``layersync rejected`` lists the reports and --ack-all clears them."""
    from layersync import cli
    doc_id = uploaded("pdfjs-comments.pdf")
    full = tmp_path / "full.xfdf"
    full.write_bytes(server.admin_request(f"/api/documents/{doc_id}/document.xfdf"))
    records = read_xfdf(full.read_bytes()).records
    assert records
    token = tmp_path / "team-b.jwt"
    token.write_text(server.mint_token(doc_id, user_id="tb", default_group="team-b",
                                       collaboration_permissions=["annotations:*:group=team-b",
                                                                  "comments:*:group=team-b"]))
    env = {"LAYERSYNC_SERVER": server.url, "LAYERSYNC_JWT": f"@{token}", "LAYERSYNC_STORAGE": str(tmp_path / "s")}
    human = run("xfdf", "import", str(full), env=env)
    assert human.returncode == cli.EXIT_REJECTED, (human.stdout, human.stderr)
    assert f"the server rejected {len(records)} changes ({len(records)} exists)" in human.stderr
    assert "synced" not in human.stdout and f"rejected {len(records)} of the {len(records)}" in human.stdout
    again = run("xfdf", "import", str(full), "--json", env=env)
    assert again.returncode == cli.EXIT_REJECTED, again.stderr
    body = json.loads(again.stdout)
    assert body["synced"] is True and len(body["rejected"]) == len(records)
    assert {r["reason"] for r in body["rejected"]} == {"exists"}
    queued = run("xfdf", "import", str(full), "--no-sync", env=env)
    assert queued.returncode == cli.EXIT_OK and queued.stdout.startswith("queued ") and "pending" in queued.stdout
    listed = run("rejected", "--json", env=env)
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 2 * len(records)
    acked = run("rejected", "--ack-all", "--json", env=env)
    assert acked.returncode == 0 and len(json.loads(acked.stdout)["acknowledged"]) == 2 * len(records)
    assert json.loads(run("rejected", "--json", env=env).stdout) == []


LEAD = ["annotations:*:all", "comments:*:all", "form-fields:*:all"]


def _lead_doc(make_client, server, doc_id):
    client = make_client()
    client.wait_validated(timeout=WAIT_S)
    doc = client.document_for_jwt(server.mint_token(doc_id, user_id="lead", collaboration_permissions=LEAD))
    doc.download(wait=True, timeout=WAIT_S)
    return doc


def test_import_never_takes_ownership_or_group_from_the_file(make_client, server, uploaded, monkeypatch):
    """XFDF is untrusted and carries content only: an ``<ls:instant-json>`` that says
    ``group``/``createdBy``/flags does not move a private note to another group (the codec
    drops them), and neither does a record with them that reaches ``import_xfdf`` (it strips
    them itself, with :func:`layersync.record_content`)."""
    doc_id = uploaded()
    doc = _lead_doc(make_client, server, doc_id)
    assert layersync_formats.HANDOUT_KEYS == layersync.HANDOUT_KEYS  # one list, two packages
    rec = doc.create_annotation({"type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 24, 24], "icon": "comment",
                                 "color": "#ffd600", "text": {"format": "plain", "value": "private draft"},
                                 "group": "private"})
    doc.sync(wait=True, timeout=WAIT_S)
    handed_out = dict(createdBy="mallory", updatedBy="mallory", group="public", isEditable=True)
    evil = layersync_formats.write_xfdf([dict(record_content(rec), **handed_out,
                                              text={"format": "plain", "value": "edited"})])
    assert doc.import_xfdf(evil) == {"created": 0, "updated": 1, "deleted": 0}
    doc.sync(wait=True, timeout=WAIT_S)
    stored = server.admin_json(f"/api/documents/{doc_id}/annotations/{rec['id']}")
    assert (stored["group"], stored["createdBy"]) == ("private", "lead")
    assert stored["content"]["text"]["value"] == "edited"  # the content did change
    assert doc.get_annotation(rec["id"])["group"] == "private"
    # a codec that let them through: import_xfdf's own strip holds
    read = layersync_formats.read_xfdf

    def leaky(data, **kw):
        changes = read(data, **kw)
        changes.added = [dict(r, **handed_out) for r in changes.added]
        return changes

    monkeypatch.setattr(layersync_formats, "read_xfdf", leaky)
    doc.import_xfdf(layersync_formats.write_xfdf([dict(record_content(doc.get_annotation(rec["id"])),
                                                       text={"format": "plain", "value": "again"})]))
    assert doc.get_annotation(rec["id"])["group"] == "private"
    doc.sync(wait=True, timeout=WAIT_S)
    stored = server.admin_json(f"/api/documents/{doc_id}/annotations/{rec['id']}")
    assert (stored["group"], stored["content"]["text"]["value"]) == ("private", "again")


def test_import_tells_false_from_zero(downloaded):
    """A record is unchanged only if its JSON is the same (``same_json``): an XFDF that
    says ``false`` where the layer holds ``0`` updates it; Python's ``==`` would call them
    equal and skip the edit. (Numbers compare by value: XFDF's have no type.)"""
    _, doc = downloaded()
    rec = doc.create_annotation({"type": "pspdfkit/note", "pageIndex": 0, "bbox": [10.0, 10.0, 24.0, 24.0],
                                 "icon": "comment", "text": {"format": "plain", "value": "n"},
                                 "customData": {"done": 0, "score": 1}})
    same = layersync_formats.write_xfdf([record_content(rec)])
    assert doc.import_xfdf(same) == {"created": 0, "updated": 0, "deleted": 0}
    changed = layersync_formats.write_xfdf([dict(record_content(rec), customData={"done": False, "score": 1.0})])
    assert doc.import_xfdf(changed) == {"created": 0, "updated": 1, "deleted": 0}
    stored = doc.get_annotation(rec["id"])["customData"]
    assert stored["done"] is False and type(stored["score"]) is float



def test_an_exported_then_imported_xfdf_changes_no_record(downloaded):
    """XFDF numbers have no type (written without ``.0``, through the page's coordinate
    transform, read back as floats): records holding integers (as hosts write them) or
    integral floats are unchanged by their own export imported again: no local edit."""
    _, doc = downloaded()
    made = [doc.create_annotation({"type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 24, 24],
                                   "icon": "comment", "text": {"format": "plain", "value": "ints"}}),
            doc.create_annotation({"type": "pspdfkit/ink", "pageIndex": 0, "bbox": [10, 40, 20, 20],
                                   "lines": {"points": [[[10, 40], [30, 60]]], "intensities": [[1, 1]]},
                                   "lineWidth": 3}),
            doc.create_annotation({"type": "pspdfkit/shape/rectangle", "pageIndex": 0,
                                   "bbox": [10.0, 70.5, 20.0, 20.0], "strokeWidth": 2.0, "opacity": 1.0,
                                   "strokeColor": "#ff0000"})]
    doc.sync(wait=True, timeout=WAIT_S)
    before = doc.list_annotations()
    assert doc.import_xfdf(doc.export_xfdf()) == {"created": 0, "updated": 0, "deleted": 0}
    assert not doc.has_unsynced_changes and doc.list_annotations() == before
    assert doc.get_annotation(made[0]["id"])["bbox"] == [10, 10, 24, 24]


def test_a_reply_threads_root_is_unchanged_by_its_own_export(downloaded, server):
    """A root made through the API has no ``isCommentThreadRoot``; its export (with the reply)
    imported again, by another user of the document, changes no record: before, the reader
    marked the root from the reply and the import made a revision of alice's note by bob."""
    _, alice = downloaded()
    note = alice.create_annotation({"type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 24, 24],
                                    "icon": "comment", "text": {"format": "plain", "value": "alice's note"}})
    alice.create_comment(note["id"], "a reply", creator_name="alice")
    alice.sync(wait=True, timeout=WAIT_S)
    assert "isCommentThreadRoot" not in alice.get_annotation(note["id"])
    _, bob = downloaded(alice.id, user_id="bob")
    before = bob.list_annotations()
    assert bob.import_xfdf(alice.export_xfdf()) == {"created": 0, "updated": 0, "deleted": 0}
    assert bob.import_xfdf(bob.export_xfdf()) == {"created": 0, "updated": 0, "deleted": 0}
    assert not bob.has_unsynced_changes and bob.list_annotations() == before
    stored = server.admin_json(f"/api/documents/{alice.id}/annotations/{note['id']}")
    assert stored["updatedBy"] == "alice" and "isCommentThreadRoot" not in stored["content"]


def test_a_file_whose_later_annotation_is_invalid_applies_nothing(downloaded):
    """import_xfdf checks every record it would write before the first write: a file whose
    second annotation breaks the record schema (here a three-number bbox, in the extension
    element) is refused whole, naming that annotation and the field; nothing is created,
    updated, deleted or queued."""
    _, doc = downloaded()
    kept = doc.create_annotation({"type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 24, 24],
                                  "icon": "comment", "text": {"format": "plain", "value": "kept"}})
    doc.sync(wait=True, timeout=WAIT_S)
    before = doc.list_annotations()
    first = {"id": "first-ok", "v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 40, 24, 24],
             "icon": "comment", "text": {"format": "plain", "value": "fine"}}
    edited = dict(record_content(kept), text={"format": "plain", "value": "edited"})
    bad = dict(first, id="second-bad", bbox=[1, 2, 3])
    xfdf = layersync_formats.write_xfdf([first, edited, bad])
    with pytest.raises(layersync.InvalidJSONStructureError, match="second-bad.*bbox.*nothing was applied"):
        doc.import_xfdf(xfdf)
    assert doc.list_annotations() == before and not doc.has_unsynced_changes
    with pytest.raises(NoSuchAnnotationError):
        doc.get_annotation("first-ok")


def test_an_engine_refusal_mid_import_applies_nothing_or_says_what_it_applied(downloaded):
    _, doc = downloaded()
    first = {"id": "first-ok", "v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 40, 24, 24],
             "icon": "comment", "text": {"format": "plain", "value": "fine"}}
    xfdf = layersync_formats.write_xfdf([first, dict(first, id="x" * 200)])
    with pytest.raises(layersync.InvalidJSONStructureError) as refused:  # the engine's class and code
        doc.import_xfdf(xfdf)
    message = refused.value.message
    assert doc.get_annotation("first-ok")["text"]["value"] == "fine"  # applied before the refusal
    assert "created 'first-ok'" in message and "stay applied" in message, message
    assert "'xxxx" in message and "nothing was applied" not in message, message
    assert '"id" must be' in message, message  # the engine's reason, kept
