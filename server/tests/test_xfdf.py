"""XFDF on the admin API (Document Engine's routes): ``GET .../document.xfdf``, XFDF attached
to the upload, ``POST .../apply_xfdf`` with plain and command documents (one set of layer
revisions, or nothing), untrusted XML refused with nothing stored, and the CLI."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import uuid

import pikepdf
import pytest
from layersync_formats import MEDIA_TYPE, XFDF_NS, read_xfdf
from layersync_server.pdf.values import decode_text

from conftest import ADMIN_TOKEN, CORPUS, note, synthetic_pdf

TEST_PDFS = ["sample-files-024-annotated_pdf.pdf", "pdfjs-comments.pdf", "pdfjs-inks.pdf",
             "pdfjs-annotation-fileattachment.pdf", "pdfjs-issue13447.pdf"]
XXE = ('<?xml version="1.0"?><!DOCTYPE xfdf [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
       f'<xfdf xmlns="{XFDF_NS}"><annots><text name="xxe" page="0" rect="0,0,9,9"><contents>&xxe;'
       '</contents></text></annots></xfdf>')
LAUGHS = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
          + "".join(f'<!ENTITY lol{i} "{("&lol%s;" % (i - 1 if i > 1 else "")) * 10}">' for i in range(1, 10))
          + f']><xfdf xmlns="{XFDF_NS}"><annots><text name="lol" page="0" rect="0,0,9,9">'
            '<contents>&lol9;</contents></text></annots></xfdf>')


def _records(server, doc: str, layer: str = "~") -> list[dict]:
    response = server.http.get(f"/api/documents/{doc}/layers/{layer}/document.json", headers=server.admin())
    assert response.status_code == 200, response.text
    body = response.json()
    return sorted(body["annotations"] + body["comments"], key=lambda r: r["id"])


def _xfdf(server, doc: str, layer: str | None = None):
    path = f"/api/documents/{doc}/document.xfdf" if layer is None else \
        f"/api/documents/{doc}/layers/{layer}/document.xfdf"
    return server.http.get(path, headers=server.admin())


def _apply(server, doc: str, xfdf: str | bytes, layer: str | None = None, **kwargs):
    path = f"/api/documents/{doc}/apply_xfdf" if layer is None else \
        f"/api/documents/{doc}/layers/{layer}/apply_xfdf"
    return server.http.post(path, headers={**server.admin(), "Content-Type": MEDIA_TYPE},
                            content=xfdf if isinstance(xfdf, bytes) else xfdf.encode("utf-8"), **kwargs)


def _upload_with(server, pdf: bytes, attachment: bytes, keep: bool = False, document_id: str | None = None):
    document_id = document_id or "xfdf-" + uuid.uuid4().hex
    data = {"document_id": document_id}
    if keep:
        data["keep_current_annotations"] = "true"
    return document_id, server.http.post("/api/documents", headers=server.admin(), data=data, files={
        "file": ("doc.pdf", pdf, "application/pdf"), "attachment": ("a.xfdf", attachment, MEDIA_TYPE)})


@pytest.mark.parametrize("name", TEST_PDFS)
def test_export_and_upload_with_the_xfdf_give_the_same_layer(server, name):
    """A layer → ``document.xfdf`` → the same PDF uploaded with it attached → the same records."""
    doc = server.new_document(name)
    exported = _xfdf(server, doc)
    assert exported.status_code == 200
    assert exported.headers["content-type"].split(";")[0] == MEDIA_TYPE
    assert read_xfdf(exported.content).records, "the corpus file has annotations"
    assert _xfdf(server, doc, "~").content == exported.content
    pdf = (CORPUS / name).read_bytes()
    copy, response = _upload_with(server, pdf, exported.content)
    assert response.status_code == 200, response.text
    assert _records(server, copy) == _records(server, doc)
    assert _xfdf(server, copy).content == exported.content


def test_upload_attachment_replaces_or_keeps_the_pdfs_annotations(server):
    pdf = (CORPUS / "sample-files-024-annotated_pdf.pdf").read_bytes()
    original = _records(server, server.new_document())
    xfdf = (f'<xfdf xmlns="{XFDF_NS}"><annots><square name="sq" page="0" rect="10,10,50,50" '
            'color="#FF0000" flags="print"/></annots></xfdf>').encode()
    replaced, response = _upload_with(server, pdf, xfdf)
    assert response.status_code == 200, response.text
    assert [(r["id"], r["type"], r["strokeColor"]) for r in _records(server, replaced)] == \
        [("sq", "pspdfkit/shape/rectangle", "#FF0000")]
    kept, response = _upload_with(server, pdf, xfdf, keep=True)
    assert response.status_code == 200, response.text
    assert sorted(r["id"] for r in _records(server, kept)) == sorted([r["id"] for r in original] + ["sq"])


def test_coordinates_use_the_pages_cropbox(server):
    """XFDF is in PDF user space: a page whose MediaBox starts at (100, 200) shifts it."""
    pdf = synthetic_pdf([([100, 200, 712, 992], 0)])
    xfdf = (f'<xfdf xmlns="{XFDF_NS}"><annots><square name="s" page="0" rect="110,902,150,982"/>'
            '</annots></xfdf>').encode()
    doc, response = _upload_with(server, pdf, xfdf)
    assert response.status_code == 200, response.text
    assert _records(server, doc)[0]["bbox"] == [10, 10, 40, 80]
    assert 'rect="110,902,150,982"' in _xfdf(server, doc).text


def test_apply_plain_xfdf_creates_and_replaces(server):
    doc = server.new_document("pdfjs-issue13447.pdf")
    layer = "x-" + uuid.uuid4().hex[:6]
    assert server.http.post(f"/api/documents/{doc}/layers", headers=server.admin(),
                            json={"name": layer}).status_code == 200
    xfdf = (f'<xfdf xmlns="{XFDF_NS}"><annots>'
            '<text name="n1" page="0" rect="10,10,34,34" color="#00FF00" flags="print"><contents>hi</contents></text>'
            '<text name="c1" page="0" inreplyto="n1" rect="10,10,34,34" flags="print"><contents>reply</contents></text>'
            '</annots></xfdf>')
    first = _apply(server, doc, xfdf, layer)
    assert first.status_code == 200, first.text
    assert first.json()["data"] | {"revision": 0} == {"created": 2, "updated": 0, "deleted": 0, "unchanged": 0,
                                                       "revision": 0}
    records = {r["id"]: r for r in _records(server, doc, layer)}
    assert records["n1"]["text"]["value"] == "hi" and records["c1"]["rootId"] == "n1"
    again = _apply(server, doc, xfdf.replace(">hi<", ">edited<"), layer)
    assert again.json()["data"]["updated"] == 1 and again.json()["data"]["unchanged"] == 1
    multipart = server.http.post(f"/api/documents/{doc}/layers/{layer}/apply_xfdf", headers=server.admin(),
                                 files={"xfdf": ("d.xfdf", xfdf.encode(), MEDIA_TYPE)})
    assert multipart.status_code == 200 and multipart.json()["data"]["updated"] == 1


def test_xfdf_as_other_tools_write_it_passes_the_record_schema(server):
    """Minimal elements of every mapped type (only what XFDF requires) make valid records."""
    doc = server.new_document("pdfjs-issue13447.pdf")
    elements = "".join(f'<{tag} name="min-{tag}" page="0" rect="10,10,50,50"{extra}/>' for tag, extra in (
        ("text", ""), ("freetext", ""), ("highlight", ' coords="10,50,50,50,10,10,50,10"'), ("underline", ""),
        ("strikeout", ""), ("squiggly", ""), ("ink", ""), ("square", ""), ("circle", ""),
        ("line", ' start="10,10" end="50,50"'), ("polygon", ""), ("polyline", ""), ("stamp", ""),
        ("fileattachment", ""), ("caret", "")))
    answer = _apply(server, doc, f'<xfdf xmlns="{XFDF_NS}"><annots>{elements}</annots></xfdf>')
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"]["created"] == 15


def test_a_command_document_applies_as_one_set_of_revisions(server):
    doc = server.new_document("pdfjs-issue13447.pdf")
    for record_id in ("keep", "edit", "drop"):
        created = server.http.post(f"/api/documents/{doc}/annotations", headers=server.admin(),
                                   json={"id": record_id, "content": note(record_id)})
        assert created.status_code == 200, created.text
    before = server.records(doc)
    command = (f'<xfdf xmlns="{XFDF_NS}">'
               '<add><square name="new" page="0" rect="1,1,20,20" flags="print"/></add>'
               '<modify><text name="edit" page="0" rect="10,762,20,772" flags="print"><contents>edited</contents></text></modify>'
               '<delete><id page="0">drop</id><id page="0">never-existed</id></delete></xfdf>')
    answer = _apply(server, doc, command)
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"] | {"revision": 0} == {"created": 1, "updated": 1, "deleted": 1, "unchanged": 0,
                                                       "revision": 0}
    after = server.records(doc, since=before["revision"])
    changed = {r["id"]: r for r in after["records"]}
    assert set(changed) == {"new", "edit", "drop"} and changed["drop"]["deleted"]
    assert answer.json()["data"]["revision"] == after["revision"] == before["revision"] + 3
    assert changed["edit"]["content"]["text"]["value"] == "edited"

    # a failing command (modify of a missing annotation) applies nothing
    state = _records(server, doc)
    failing = command.replace('name="edit"', 'name="missing"').replace('name="new"', 'name="new2"')
    refused = _apply(server, doc, failing)
    assert refused.status_code == 409 and "nothing was applied" in refused.json()["error"]["message"]
    assert _records(server, doc) == state
    assert server.records(doc, since=after["revision"])["records"] == []
    duplicate = _apply(server, doc, f'<xfdf xmlns="{XFDF_NS}"><add><square name="keep" page="0" rect="1,1,2,2"/>'
                                    '</add></xfdf>')
    assert duplicate.status_code == 409 and duplicate.json()["error"]["code"] == "annotation_exists"


def test_form_field_values_apply_to_widgets(server):
    doc = server.new_document("pdfjs-prefilled_f1040.pdf")
    widgets = [r for r in _records(server, doc) if r["type"] == "pspdfkit/widget" and r.get("formFieldName")]
    field = next(w for w in widgets if w.get("formFieldType") == "text")
    name = field["formFieldName"]
    parts = name.split(".")
    nested = "".join(f'<field name="{p}">' for p in parts) + "<value>from XFDF</value>" + "</field>" * len(parts)
    answer = _apply(server, doc, f'<xfdf xmlns="{XFDF_NS}"><fields>{nested}</fields></xfdf>')
    assert answer.status_code == 200, answer.text
    assert {r["id"]: r for r in _records(server, doc)}[field["id"]]["value"] == "from XFDF"
    assert "<value>from XFDF</value>" in _xfdf(server, doc).text


DEEP = (f'<xfdf xmlns="{XFDF_NS}"><annots><freetext name="d" page="0" rect="0,0,1,1"><contents-richtext>'
        + "<b>" * 500 + "x" + "</b>" * 500 + "</contents-richtext></freetext></annots></xfdf>")


@pytest.mark.parametrize("bad", [XXE, LAUGHS, "<xfdf><annots>", "<html/>", DEEP,
                                 f'<xfdf xmlns="{XFDF_NS}"><annots><ink name="i" page="-1"/></annots></xfdf>',
                                 '<?xml version="1.0" encoding="x-nonsense"?><xfdf/>',
                                 '<xfdf xmlns="http://example.com/"><annots><square name="s" page="0" '
                                 'rect="0,0,9,9"/></annots></xfdf>',
                                 f'<xfdf xmlns="{XFDF_NS}"><annots><square name="s" page="0" rect="NaN,0,9,9"/>'
                                 '</annots></xfdf>',
                                 f'<xfdf xmlns="{XFDF_NS}"><annots><square name="s" page="7" rect="0,0,9,9"/>'
                                 '</annots></xfdf>'],
                         ids=["external-entity", "billion-laughs", "not-well-formed", "not-xfdf", "deep-nesting",
                              "bad-page", "unknown-encoding (was a 500)", "foreign-namespace (was applied as "
                              "nothing)", "nan-rect (was stored as null)", "page-past-the-last (was stored)"])
def test_untrusted_xml_is_refused_and_nothing_stored(server, bad):
    doc = server.new_document("pdfjs-issue13447.pdf")
    before = server.records(doc)
    refused = _apply(server, doc, bad)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "invalid_request" and "XFDF" in refused.json()["error"]["message"]
    assert server.records(doc) == before
    document_id, upload = _upload_with(server, (CORPUS / "pdfjs-issue13447.pdf").read_bytes(), bad.encode())
    assert upload.status_code == 400, upload.text
    assert server.http.get(f"/api/documents/{document_id}", headers=server.admin()).status_code == 404


def test_a_reply_needs_its_root_in_the_xfdf_or_the_layer(server):
    """``inreplyto`` naming nothing (or another reply) would store a comment no thread shows:
    409 ``conflict``, nothing applied; a reply to an annotation of the layer applies."""
    doc = server.new_document("pdfjs-issue13447.pdf")
    before = server.records(doc)
    root = next(r["id"] for r in _records(server, doc) if r["type"] == "pspdfkit/note")
    reply = ('<text name="{name}" page="0" inreplyto="{to}" rect="0,0,9,9"><contents>re</contents></text>')
    for to in ("no-such-annotation", "other-reply"):
        refused = _apply(server, doc, f'<xfdf xmlns="{XFDF_NS}"><add><square name="sq" page="0" rect="0,0,9,9"/>'
                                      + reply.format(name="other-reply", to=root)
                                      + reply.format(name="orphan", to=to) + "</add></xfdf>")
        if to == "other-reply":  # a reply to a reply joins its root's thread
            assert refused.status_code == 200, refused.text
            break
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "conflict" and "inreplyto" in refused.json()["error"]["message"]
        assert server.records(doc) == before
    by_id = {r["id"]: r for r in _records(server, doc)}
    assert by_id["orphan"]["rootId"] == by_id["other-reply"]["rootId"] == root


def test_status_codes(server):
    doc = server.new_document("pdfjs-issue13447.pdf")
    assert _xfdf(server, "no-such-" + uuid.uuid4().hex).status_code == 404
    assert server.http.get(f"/api/documents/{doc}/document.xfdf").status_code == 401
    assert _apply(server, "no-such-" + uuid.uuid4().hex, f'<xfdf xmlns="{XFDF_NS}"/>').status_code == 404
    wrong_type = server.http.post(f"/api/documents/{doc}/apply_xfdf", headers=server.admin(), json={})
    assert wrong_type.status_code == 400
    schema = server.http.get("/openapi.json").json()["paths"]
    assert MEDIA_TYPE in schema["/api/documents/{document_id}/document.xfdf"]["get"]["responses"]["200"]["content"]
    assert "post" in schema["/api/documents/{document_id}/layers/{layer}/apply_xfdf"]


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "layersync_server", *args], capture_output=True, text=True,
                          timeout=60)


def test_cli_export_xfdf_and_upload_xfdf(server, tmp_path):
    doc = server.new_document("pdfjs-comments.pdf")
    out = tmp_path / "layer.xfdf"
    exported = _cli("export", doc, "--url", server.url, "--admin-token", ADMIN_TOKEN, "--xfdf", "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    assert out.read_bytes() == _xfdf(server, doc).content
    copy = "cli-xfdf-" + uuid.uuid4().hex
    uploaded = _cli("upload", "--url", server.url, "--admin-token", ADMIN_TOKEN, str(CORPUS / "pdfjs-comments.pdf"),
                    "--document-id", copy, "--xfdf", str(out))
    assert uploaded.returncode == 0, uploaded.stderr
    assert _records(server, copy) == _records(server, doc)
    bad = tmp_path / "bad.xfdf"
    bad.write_text(XXE)
    refused = _cli("upload", "--url", server.url, "--admin-token", ADMIN_TOKEN, str(CORPUS / "pdfjs-comments.pdf"),
                   "--xfdf", str(bad))
    assert refused.returncode == 1 and "invalid_request" in refused.stderr


REPLACE_TEXT = """<?xml version="1.0" encoding="UTF-8"?>
<xfdf xmlns="http://ns.adobe.com/xfdf/" xml:space="preserve"><annots>
<caret color="#0000FF" name="caret-1" page="0" rect="150,480,160,492" flags="print" title="Ann"
  creationdate="D:20240101000000Z" date="D:20240101000000Z"><contents>new words</contents></caret>
<strikeout color="#FF0000" name="so-1" page="0" coords="50,492,150,492,50,480,150,480"
  rect="50,480,150,492" flags="print" title="Ann" inreplyto="caret-1" replyType="group"
  creationdate="D:20240101000000Z" date="D:20240101000000Z"/>
</annots></xfdf>"""


def test_xfdf_replace_text_group_is_one_edit_and_survives_pdf_export(server):
    """Acrobat's replace text in XFDF (<caret> + <strikeout inreplyto=caret replyType="group">)
    is one strikeout record with replaceTextCaret (as the PDF import makes it), not an
    xfdf/caret record beside a plain strikeout; the PDF export writes the Caret with the
    replacement text, and the XFDF export writes the pair again as Acrobat does."""
    doc = server.empty_document()
    response = _apply(server, doc, REPLACE_TEXT)
    assert response.status_code == 200, response.text
    records = {r["id"]: r for r in _records(server, doc)}
    assert set(records) == {"so-1"}
    assert records["so-1"]["replaceTextCaret"] == {
        "bbox": [150.0, 350.0, 10.0, 12.0], "text": {"format": "plain", "value": "new words"}, "color": "#0000FF"}
    with pikepdf.open(io.BytesIO(server.exported_pdf(doc))) as pdf:
        annots = {str(a.get("/Subtype")): a for a in pdf.pages[0].obj.get("/Annots", [])}
        assert "/Caret" in annots and decode_text(annots["/Caret"].Contents) == "new words"
        assert str(annots["/StrikeOut"].RT) == "/Group"
    # the XFDF export: the caret and the strikeout answering it, no extension for the caret
    exported = _xfdf(server, doc).text
    assert '<caret name="so-1-caret"' in exported and 'replyType="group"' in exported
    assert "replaceTextCaret" not in exported
    again = server.empty_document()
    assert _apply(server, again, exported).status_code == 200
    assert _records(server, again) == [records["so-1"]]


@pytest.mark.parametrize("field", ["type", "id", "pageIndex", "bbox"])
def test_xfdf_extension_may_not_unset_what_makes_an_annotation(server, field):
    """<ls:instant-json> "unset" (or "set" to null) of type, id, pageIndex or bbox would store
    a record that is no annotation (Document Engine answers 422 for such content): 400."""
    doc = server.empty_document()
    for ext in ({"unset": [field]}, {"set": {field: None}}):
        xfdf = (f'<xfdf xmlns="{XFDF_NS}"><annots><square name="sq-1" page="0" rect="10,10,50,50">'
                f'<ls:instant-json xmlns:ls="https://layersync.dev/ns/xfdf/1">{json.dumps(ext)}'
                '</ls:instant-json></square></annots></xfdf>')
        response = _apply(server, doc, xfdf)
        assert response.status_code == 400, response.text
    assert _records(server, doc) == []


def test_xfdf_carries_bookmarks_and_form_field_definitions(server):
    """XFDF has no outline and no field definitions: a layer's bookmarks and stored form
    fields travel in the document's <ls:instant-json> and come back on apply, so
    layer -> document.xfdf -> apply on another document loses neither."""
    doc = server.empty_document()
    bookmark = {"v": 1, "type": "pspdfkit/bookmark", "id": "bm-x", "name": "Intro",
                "action": {"type": "goTo", "pageIndex": 0}}
    field = {"v": 1, "type": "pspdfkit/form-field/text", "id": "ff-x", "name": "lonely", "label": "L",
             "annotationIds": [], "doNotSpellCheck": False, "doNotScroll": False, "multiLine": False,
             "comb": False, "defaultValue": ""}
    server.apply_instant_json(doc, {"bookmarks": [bookmark], "formFields": [field]})
    exported = _xfdf(server, doc)
    assert exported.status_code == 200
    again = server.empty_document()
    response = _apply(server, again, exported.content)
    assert response.status_code == 200, response.text
    back = server.document_json(again)
    assert back["bookmarks"] == server.document_json(doc)["bookmarks"]
    assert [f for f in back["formFields"] if f["id"] == "ff-x"] == \
        [f for f in server.document_json(doc)["formFields"] if f["id"] == "ff-x"]
    # only bookmarks and form fields may travel there (an annotation has its element)
    bad = (f'<xfdf xmlns="{XFDF_NS}"><ls:instant-json xmlns:ls="https://layersync.dev/ns/xfdf/1">'
           '{"records": [{"type": "pspdfkit/note", "id": "n"}]}</ls:instant-json></xfdf>')
    assert _apply(server, again, bad).status_code == 400


def test_upload_with_an_xfdf_attachment_keeps_the_pdfs_bookmarks(server):
    """The attachment replaces the PDF's annotations; the outline is none, so its bookmarks
    stay."""
    pdf = pikepdf.new()
    pdf.add_blank_page()
    with pdf.open_outline() as outline:
        outline.root.append(pikepdf.OutlineItem("Start", 0))
    out = io.BytesIO()
    pdf.save(out)
    xfdf = f'<xfdf xmlns="{XFDF_NS}"><annots/></xfdf>'.encode()
    document_id, response = _upload_with(server, out.getvalue(), xfdf)
    assert response.status_code == 200, response.text
    assert [b["name"] for b in server.document_json(document_id)["bookmarks"]] == ["Start"]


def test_apply_xfdf_never_takes_ownership_or_group_from_the_file(server):
    """XFDF carries content only: ``group``, ``createdBy`` and the permission flags an
    ``<ls:instant-json>`` says (an annotation's or the document's records) do not become
    the record's ownership or group, nor part of its content."""
    doc = server.empty_document()
    base = f"/api/documents/{doc}/layers/~/annotations"
    created = server.http.post(base, json={"id": "n1", "content": note("draft"), "user_id": "lead",
                                           "group": "private"}, headers=server.admin())
    assert created.status_code == 200, created.text
    handed_out = {"createdBy": "mallory", "updatedBy": "mallory", "group": "public", "isEditable": True,
                  "canSetGroup": True}
    field = {"v": 1, "type": "pspdfkit/form-field/text", "id": "f1", "name": "f1", "label": "L",
             "annotationIds": [], "doNotSpellCheck": False, "doNotScroll": False, "multiLine": False,
             "comb": False, "defaultValue": "", **handed_out}
    xfdf = (f'<xfdf xmlns="{XFDF_NS}"><annots><text name="n1" page="0" rect="10,10,34,34" flags="print">'
            f'<contents>edited</contents><ls:instant-json xmlns:ls="https://layersync.dev/ns/xfdf/1">'
            f'{json.dumps({"set": handed_out})}</ls:instant-json></text></annots>'
            f'<ls:instant-json xmlns:ls="https://layersync.dev/ns/xfdf/1">{json.dumps({"records": [field]})}'
            '</ls:instant-json></xfdf>')
    response = _apply(server, doc, xfdf)
    assert response.status_code == 200, response.text
    stored = server.http.get(f"{base}/n1", headers=server.admin()).json()
    assert (stored["group"], stored["createdBy"]) == ("private", "lead")
    assert stored["content"]["text"]["value"] == "edited"
    document = server.document_json(doc)
    assert [f["id"] for f in document["formFields"]] == ["f1"]
    for record in document["annotations"] + document["formFields"] + [stored["content"]]:
        assert not set(handed_out) & set(record), record
    exported = _xfdf(server, doc).text
    assert "mallory" not in exported and "isEditable" not in exported


def test_an_exported_then_reapplied_xfdf_changes_no_record(server):
    """XFDF numbers have no type (written without ``.0``, through the page's coordinate
    transform): a record whose numbers are integers (as clients send them) or integral floats
    (as the PDF import makes them) is unchanged by its own export applied again: no revision."""
    doc = server.new_document("pdfjs-issue13447.pdf")
    layer = "n-" + uuid.uuid4().hex[:6]
    ink = {"v": 2, "type": "pspdfkit/ink", "pageIndex": 0, "bbox": [10, 10, 20, 20],
           "lines": {"points": [[[10, 10], [20, 20]]], "intensities": [[1, 1]]}, "lineWidth": 3,
           "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z"}
    square = {"v": 2, "type": "pspdfkit/shape/rectangle", "pageIndex": 0, "bbox": [10, 30, 20, 20],
              "strokeWidth": 2.0, "strokeColor": "#ff0000", "opacity": 1.0,
              "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z"}
    exported = _reapplied_unchanged(server, doc, layer, {
        "ints": note("ints"), "floats": note("floats", bbox=[10.0, 40.5, 20.0, 20.0]), "ink": ink, "square": square})
    changed = _apply(server, doc, exported.replace(b">ints<", b">edited<"), layer)
    assert changed.json()["data"]["updated"] == 1 and changed.json()["data"]["unchanged"] == 3


def test_a_reply_threads_root_is_unchanged_by_its_reapplied_export(server):
    """A root pushed without ``isCommentThreadRoot`` (as clients' ``create_comment`` leaves it)
    and its reply: the layer's XFDF applied again changes neither (before, the reader marked
    the root from the reply: one update, one revision). A root with ``false`` keeps it."""
    doc = server.new_document("pdfjs-issue13447.pdf")
    layer = "t-" + uuid.uuid4().hex[:6]
    reply = {"v": 2, "type": "pspdfkit/comment", "rootId": "root", "pageIndex": 0,
             "text": {"format": "plain", "value": "a reply"}, "createdAt": "2025-01-01T00:00:00Z"}
    _reapplied_unchanged(server, doc, layer, {
        "root": note("root"), "reply": reply,
        "unmarked": dict(note("x"), isCommentThreadRoot=False), "reply2": dict(reply, rootId="unmarked")})


def _reapplied_unchanged(server, doc: str, layer: str, contents: dict[str, dict]) -> bytes:
    """Pushes ``contents`` (id → content) as creates, applies the layer's XFDF export to it
    and checks that nothing changed: every record "unchanged", no revision, the same records.
    Returns the export."""
    created = server.http.post(server.layer_url(doc, layer) + "/sync", headers=server.auth(doc, layer), json={
        "epoch": None, "since": 0, "changes": [{"change_id": f"c{i}", "op": "create", "id": record_id,
                                                "content": content}
                                               for i, (record_id, content) in enumerate(contents.items())]})
    assert created.status_code == 200 and len(created.json()["accepted"]) == len(contents), created.text
    before = server.records(doc, layer=layer)
    exported = _xfdf(server, doc, layer)
    assert exported.status_code == 200, exported.text
    again = _apply(server, doc, exported.content, layer)
    assert again.status_code == 200, again.text
    assert again.json()["data"] | {"revision": 0} == {"created": 0, "updated": 0, "deleted": 0,
                                                       "unchanged": len(contents), "revision": 0}
    assert again.json()["data"]["revision"] == before["revision"]
    assert server.records(doc, layer=layer)["records"] == before["records"]  # ints stay ints
    return exported.content
