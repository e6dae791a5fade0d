"""PDF ↔ Instant JSON fidelity (issue 15): rich text, free-text style, customData, reply
threads and "replace text" groups, each on the PDF that shows it.

Corpus files (LAYERSYNC_CORPUS) and the fixture tests/fixtures/acrobat-style-review.pdf
(an Acrobat-style review; tests/fixtures/SOURCES.md says why it is built): what each test
reads is named in it. Import and export run through the server's own functions
(:func:`import_pdf`, :func:`export_pdf`); the thread test also goes through the admin API.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from pathlib import Path

import pikepdf
import pypdfium2
import pytest

from conftest import CORPUS
from layersync_server.pdf.export import export_pdf
from layersync_server.pdf.import_ import import_pdf
from layersync_server.pdf.values import CUSTOM_DATA_KEY, decode_text

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REVIEW = FIXTURES / "acrobat-style-review.pdf"


def _read(path: Path) -> bytes:
    return path.read_bytes()


def _by_id(records: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in records}


def _rewritten(records: list[dict], prefix: str = "rw-") -> list[dict]:
    """Every record under a new id (roots and comments together), so export must write
    each one anew instead of keeping the original annotation."""
    out = []
    for r in records:
        copy = dict(r, id=prefix + r["id"])
        copy.pop("name", None)
        if isinstance(copy.get("rootId"), str):
            copy["rootId"] = prefix + copy["rootId"]
        out.append(copy)
    return out


#: PDFs opened by _annots, kept open while the test reads their objects
_OPENED: list[pikepdf.Pdf] = []


def _annots(data: bytes) -> list[pikepdf.Dictionary]:
    pdf = pikepdf.open(io.BytesIO(data))
    _OPENED[:] = [*_OPENED[-3:], pdf]
    return [a for page in pdf.pages for a in page.obj.get("/Annots", [])]


def _same(expected: list[dict], actual: list[dict]) -> None:
    """Records equal except ``name`` (export writes ``/NM`` = id) and bbox/rects within 0.01."""
    got = _by_id(actual)
    assert set(got) == {r["id"] for r in expected}
    for want in expected:
        have = dict(got[want["id"]])
        want = dict(want)
        for record in (have, want):
            record.pop("name", None)
        for key in ("bbox",):
            if key in want:
                assert all(abs(a - b) <= 0.01 for a, b in zip(have.pop(key), want.pop(key))), want["id"]
        assert have == want, want["id"]


# --- 1. rich text --------------------------------------------------------------------------

def test_rc_imports_as_xhtml_and_plain_contents_stays_plain():
    # pdfjs-issue13447.pdf: Acrobat 9 notes with /RC only; pdfjs-pr20043.pdf: an Acrobat
    # note with /RC and /Contents; pdfjs-issue20504.pdf: pdf.js free texts without /RC.
    acrobat9 = import_pdf(_read(CORPUS / "pdfjs-issue13447.pdf")).records
    note = next(r for r in acrobat9 if r["type"] == "pspdfkit/note")
    assert note["text"] == {"format": "xhtml", "value": "<p>19</p>"}
    circle = next(r for r in acrobat9 if r["type"] == "pspdfkit/shape/ellipse")
    assert circle["note"] == "1"  # /RC without /Contents: its plain text is the note
    acrobat20 = import_pdf(_read(CORPUS / "pdfjs-pr20043.pdf")).records
    rich = next(r for r in acrobat20 if r["text"]["format"] == "xhtml")
    assert rich["text"]["value"].startswith('<p dir="ltr"><span dir="ltr" style="font-size:9.9pt;')
    plain = next(r for r in acrobat20 if r["text"]["format"] == "plain")
    assert plain["text"]["value"].startswith("This comment was created through importing XFDF")
    assert all(r["text"]["format"] == "plain" for r in import_pdf(_read(CORPUS / "pdfjs-issue20504.pdf")).records)


def test_xhtml_text_exports_as_rc_with_its_plain_text_in_contents():
    source = _read(CORPUS / "pdfjs-pr20043.pdf")
    records = import_pdf(source).records
    rich = next(r for r in records if r["text"]["format"] == "xhtml")
    edited = dict(rich, text={"format": "xhtml", "value": "<p>Zoë <b>bold</b> ✓</p><p>line 2</p>"})
    out = export_pdf(source, [edited if r["id"] == rich["id"] else r for r in records]).pdf
    annot = next(a for a in _annots(out) if decode_text(a.get("/NM")) == rich["id"])
    assert "<p>Zoë <b>bold</b> ✓</p><p>line 2</p></body>" in decode_text(annot.RC)
    assert decode_text(annot.Contents) == "Zoë bold ✓\nline 2"
    assert _by_id(import_pdf(out).records)[rich["id"]]["text"] == edited["text"]


def test_rich_text_with_entities_or_a_dtd_is_not_expanded():
    bomb = ('<?xml version="1.0"?><!DOCTYPE b [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;'
            '&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]><body><p>&c;&c;&c;</p></body>')
    external = '<?xml version="1.0"?><!DOCTYPE b [<!ENTITY x SYSTEM "file:///etc/passwd">]><body>&x;</body>'
    pdf = pikepdf.new()
    pdf.add_blank_page()
    pdf.pages[0].obj.Annots = pikepdf.Array([pdf.make_indirect(pikepdf.Dictionary(
        Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Text, Rect=[10, 10, 30, 30], RC=pikepdf.String(rc),
        Contents=pikepdf.String(f"plain {i}"))) for i, rc in enumerate([bomb, external, "<body><p>unclosed"])])
    data = io.BytesIO()
    pdf.save(data)
    started = time.monotonic()
    records = import_pdf(data.getvalue()).records
    assert time.monotonic() - started < 2
    assert [r["text"] for r in records] == [{"format": "plain", "value": f"plain {i}"} for i in range(3)]


# --- 2. free-text style --------------------------------------------------------------------

def _render_rgb(data: bytes):
    document = pypdfium2.PdfDocument(data)
    try:
        return document[0].render(scale=2, draw_annots=True).to_pil().convert("RGB")
    finally:
        document.close()


def _colours(image, bbox) -> set[tuple[int, int, int]]:
    left, top, width, height = bbox
    crop = image.crop((int(left * 2), int(top * 2), int((left + width) * 2), int((top + height) * 2)))
    data = crop.tobytes()
    pixels = (tuple(data[i:i + 3]) for i in range(0, len(data), 3))
    return {p for p in pixels if max(p) - min(p) > 60}  # the coloured (not gray) pixels


def test_free_text_style_comes_from_rc_and_ds_over_da_and_export_writes_all_three():
    # the fixture's free text: /DA "1 0 0 rg /Helv 12 Tf", /DS and /RC green 14 pt Helvetica
    source = _read(REVIEW)
    records = import_pdf(source).records
    text = next(r for r in records if r["type"] == "pspdfkit/text")
    assert (text["fontColor"], text["fontSize"], text["font"]) == ("#00A000", 14, "Helvetica")
    moved = dict(text, bbox=[310, 262, 180, 30])  # a trivial edit: the annotation is rewritten
    out = export_pdf(source, [moved if r["id"] == text["id"] else r for r in records]).pdf
    annot = next(a for a in _annots(out) if decode_text(a.get("/NM")) == text["id"])
    assert decode_text(annot.DA) == "/Helvetica 14 Tf 0 0.6275 0 rg"
    assert decode_text(annot.DS) == "font: Helvetica 14pt; color: #00A000"
    assert 'style="font: Helvetica 14pt; color: #00A000"' in decode_text(annot.RC)
    assert decode_text(annot.Contents) == "Green words"
    again = _by_id(import_pdf(out).records)[text["id"]]
    assert (again["fontColor"], again["fontSize"], again["font"], again["text"]) == \
        ("#00A000", 14, "Helvetica", text["text"])
    drawn = _colours(_render_rgb(out), moved["bbox"])
    assert drawn and all(g > r + 40 and g > b + 40 for r, g, b in drawn), sorted(drawn)[:5]


# --- 3. customData -------------------------------------------------------------------------

def test_custom_data_survives_export_and_garbage_is_ignored():
    source = _read(CORPUS / "sample-files-024-annotated_pdf.pdf")
    records = import_pdf(source).records
    custom = {"name": "Grill House", "locations": ["Vienna", "Paris"], "rating": 5, "ok": True,
              "nested": {"ü": None, "n": 1.5}}
    edited = [dict(r, customData=custom) for r in records]
    out = export_pdf(source, edited).pdf
    assert all(json.loads(decode_text(a[CUSTOM_DATA_KEY])) == custom for a in _annots(out)
               if str(a.get("/Subtype")) != "/Popup")
    assert [r.get("customData") for r in import_pdf(out).records] == [custom] * len(records)
    pdf = pikepdf.open(io.BytesIO(out))
    garbage = ["not json", "[1, 2]", '{"a": NaN}', "[" * 100_000, 7, '"text"']
    annots = [a for a in pdf.pages[0].Annots if str(a.get("/Subtype")) != "/Popup"]
    for annot, value in zip(annots, garbage):
        annot[CUSTOM_DATA_KEY] = pikepdf.String(value) if isinstance(value, str) else value
    data = io.BytesIO()
    pdf.save(data)
    assert all("customData" not in r for r in import_pdf(data.getvalue()).records)


def test_custom_data_no_record_may_hold_is_ignored_and_the_upload_stored(server):
    """``/LSYN_CustomData`` is untrusted JSON: a lone surrogate (the upload answered 500 and
    stored nothing), a number out of a double's range, or nesting past ``max_json_depth`` in the
    record is ignored as other garbage is, by the wire rules; the rest of the annotation imports."""
    values = ['{"a": "\\ud800"}', '{"a": 1e999}', '{"a": ' + "[" * 63 + "]" * 63 + "}", '{"ok": [1]}']
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=(612, 792))
    pdf.pages[0].Annots = pdf.make_indirect(pikepdf.Array([pdf.make_indirect(pikepdf.Dictionary(
        Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Text, Rect=[10, 10, 30, 30], NM=f"cd{i}", Contents="x",
        LSYN_CustomData=pikepdf.String(value))) for i, value in enumerate(values)]))
    data = io.BytesIO()
    pdf.save(data)
    assert [r.get("customData") for r in import_pdf(data.getvalue()).records] == [None, None, None, {"ok": [1]}]
    uploaded = server.http.post("/api/documents", headers={**server.admin(), "Content-Type": "application/pdf"},
                                content=data.getvalue())
    assert uploaded.status_code == 200, uploaded.text
    assert uploaded.json()["data"]["annotationCount"] == 4


# --- 4. replies and replace-text groups -----------------------------------------------------

def _thread(records: list[dict]) -> dict[str, list[tuple]]:
    """root id → its comments as (creatorName, text, createdAt, updatedAt), in order."""
    threads: dict[str, list[tuple]] = {}
    for r in records:
        if r["type"] == "pspdfkit/comment":
            threads.setdefault(r["rootId"], []).append(
                (r.get("creatorName"), r["text"], r["createdAt"], r["updatedAt"]))
    return threads


def test_irt_replies_import_as_one_thread_and_export_as_replies_acrobat_shows(server):
    source = _read(REVIEW)
    records = import_pdf(source).records
    root = next(r for r in records if r["type"] == "pspdfkit/markup/highlight")
    assert root["isCommentThreadRoot"] is True
    threads = _thread(records)
    assert list(threads) == [root["id"]]  # the reply to a reply joins the root's thread
    assert [(c[0], c[1]["value"].count("Fixed") + c[1]["value"].count("Thanks") + c[1]["value"].count("Agreed"))
            for c in threads[root["id"]]] == [("Bo Author", 1), ("Ada Reviewer", 1), ("Cy Editor", 1)]
    # through the server: upload, rewrite every record, export, re-import
    doc = "thread-" + uuid.uuid4().hex
    assert server.upload(source, doc).status_code == 200
    copies = _rewritten(records)
    admin = server.admin()
    for r in records:
        if r["type"] != "pspdfkit/comment":
            server.http.delete(f"/api/documents/{doc}/annotations/{r['id']}", headers=admin)
    applied = server.http.post(f"/api/documents/{doc}/apply_instant_json", headers=admin,
                               json={"annotations": [c for c in copies if c["type"] != "pspdfkit/comment"],
                                     "comments": [c for c in copies if c["type"] == "pspdfkit/comment"]})
    assert applied.status_code == 200, applied.text
    exported = server.http.get(f"/api/documents/{doc}/pdf", headers=admin)
    assert exported.status_code == 200 and exported.headers["LayerSync-Export"].endswith("skipped=0"), \
        exported.headers.get("LayerSync-Export")
    annots = _annots(exported.content)
    by_nm = {decode_text(a.get("/NM")): a for a in annots if "/NM" in a}
    new_root = by_nm["rw-" + root["id"]]
    replies = [a for a in annots if str(a.get("/Subtype")) == "/Text" and "/IRT" in a]
    assert len(replies) == 3
    for reply in replies:
        assert reply.IRT.objgen == new_root.objgen and str(reply.RT) == "/R"
        assert str(reply.Popup.Subtype) == "/Popup" and reply.Popup.Parent.objgen == reply.objgen
        assert "<body" in decode_text(reply.RC) and decode_text(reply.Contents)
    again = import_pdf(exported.content).records
    assert _thread(again) == {"rw-" + root["id"]: threads[root["id"]]}
    _same([c for c in copies], again)


def test_replace_text_group_stays_one_record_and_exports_as_a_group_pair():
    # pdfjs-issue13447.pdf: a StrikeOut /IRT to a Caret with /RT /Group (Acrobat "replace text")
    source = _read(CORPUS / "pdfjs-issue13447.pdf")
    records = import_pdf(source).records
    group = next(r for r in records if "replaceTextCaret" in r)
    assert group["type"] == "pspdfkit/markup/strikeout"
    assert group["replaceTextCaret"]["text"] == {"format": "xhtml", "value": "<p>el leo&#46; Ut ni14</p>"}
    assert group["replaceTextCaret"]["color"] == "#0000FF"
    before = sum(str(a.get("/Subtype")) == "/Caret" for a in _annots(source))
    copies = _rewritten(records)
    out = export_pdf(source, copies).pdf
    annots = _annots(out)
    carets = [a for a in annots if str(a.get("/Subtype")) == "/Caret"]
    assert len(carets) == before  # the original pair's Caret went with its StrikeOut
    strike = next(a for a in annots if decode_text(a.get("/NM")) == "rw-" + group["id"])
    assert str(strike.RT) == "/Group" and str(strike.IRT.Subtype) == "/Caret"
    assert decode_text(strike.IRT.Contents) == "el leo. Ut ni14" and str(strike.IRT.IT) == "/Replace"
    _same(copies, import_pdf(out).records)
    gone = export_pdf(source, [r for r in records if r["id"] != group["id"]]).pdf
    assert sum(str(a.get("/Subtype")) == "/Caret" for a in _annots(gone)) == before - 1


# -- review findings of issue 15: export -> re-import through the admin API -----------------

TIMES = {"createdAt": "2024-01-01T00:00:00Z", "updatedAt": "2024-01-02T00:00:00Z", "opacity": 1}


def test_pdf_export_keeps_stroke_dash_array(server):
    """PDF export writes a dash pattern as /BS << /S /D /D [...] >> and import reads it
    back, so a dashed line/shape does not come back solid after export -> re-import."""
    document_id = server.empty_document()
    line = {"v": 2, "type": "pspdfkit/shape/line", "id": "dashed-line", "pageIndex": 0,
            "bbox": [10, 400, 100, 100], "startPoint": [10, 400], "endPoint": [110, 500],
            "strokeColor": "#00FFFF", "strokeWidth": 2, "strokeDashArray": [3, 3], **TIMES}
    rectangle = {"v": 2, "type": "pspdfkit/shape/rectangle", "id": "dashed-rect", "pageIndex": 0,
                 "bbox": [200, 200, 50, 50], "strokeColor": "#000000", "strokeWidth": 1,
                 "strokeDashArray": [4, 2], **TIMES}
    server.apply_instant_json(document_id, {"annotations": [line, rectangle]})
    with pikepdf.open(io.BytesIO(server.exported_pdf(document_id))) as pdf:
        borders = {decode_text(a.NM): a.BS for a in pdf.pages[0].obj.Annots if "/NM" in a}
        assert str(borders["dashed-line"].S) == "/D" and list(borders["dashed-line"].D) == [3, 3]
    back = _by_id(server.reimported(document_id)["annotations"])
    assert back["dashed-line"].get("strokeDashArray") == [3, 3]
    assert back["dashed-rect"].get("strokeDashArray") == [4, 2]


def test_pdf_export_keeps_free_text_font_color_when_rich_text_has_an_inner_span(server):
    """Free text with xhtml '<p>Free <span style="color:#FF0000">red</span></p>' and fontColor
    #00A000: the inner span styles only "red", so the re-imported record's fontColor is the
    body's (#00A000), not the first span's."""
    document_id = server.empty_document()
    free_text = {"v": 2, "type": "pspdfkit/text", "id": "ft-inner-span", "pageIndex": 0,
                 "bbox": [100, 200, 200, 50],
                 "text": {"format": "xhtml", "value": '<p>Free <span style="color:#FF0000">red</span></p>'},
                 "font": "Helvetica", "fontSize": 14, "fontColor": "#00A000", "horizontalAlign": "left",
                 "verticalAlign": "top", **TIMES}
    server.apply_instant_json(document_id, {"annotations": [free_text]})
    back = _by_id(server.reimported(document_id)["annotations"])["ft-inner-span"]
    assert back["text"] == free_text["text"]
    assert back["fontColor"] == "#00A000"


def test_pdf_export_keeps_checkbox_group_value_of_f1040(server):
    """Setting the f1040 field c1_04 (5 widgets S/MJ/MS/HoH/QW) to 'MJ' sets the parent /V
    and the widgets' /AS and drops the kids' own stale /V /Off, so re-import (and viewers
    that read /V from the widget) read 'MJ'."""
    document_id = server.new_document("pdfjs-prefilled_f1040.pdf")
    field = "topmostSubform[0].Page1[0].c1_04"
    response = server.http.post(f"/api/documents/{document_id}/form-field-values",
                                json={"formFieldValues": [{"name": field, "value": "MJ"}]},
                                headers=server.admin())
    assert response.status_code == 200, response.text
    values = {v["name"]: v["value"] for v in server.document_json(document_id)["formFieldValues"]}
    assert values[field] == "MJ"
    back = {v["name"]: v["value"] for v in server.reimported(document_id)["formFieldValues"]}
    assert back[field] == "MJ"


def test_pdf_export_keeps_bookmarks(server):
    """A layer's bookmarks are written as the PDF's /Outlines and read back as bookmark
    records (with the same ids), so export -> re-import keeps them ("Record kinds": no
    record a layer holds is left out of an export)."""
    document_id = server.empty_document()
    bookmark = {"v": 1, "type": "pspdfkit/bookmark", "id": "bm-intro", "name": "Intro",
                "action": {"type": "goTo", "pageIndex": 0}}
    server.apply_instant_json(document_id, {"bookmarks": [bookmark]})
    assert server.document_json(document_id)["bookmarks"]
    back = server.reimported(document_id)["bookmarks"]
    assert [b.get("name") for b in back] == ["Intro"]
    assert [b.get("action") for b in back] == [bookmark["action"]]
    assert [b.get("id") for b in back] == ["bm-intro"]


def test_copy_with_instant_json_keeps_bookmarks(server):
    """copy_with_instant_json's copy is an export -> import: its bookmarks are the layer's."""
    document_id = server.empty_document()
    bookmark = {"v": 1, "type": "pspdfkit/bookmark", "id": "bm-copy", "name": "Copied",
                "action": {"type": "goTo", "pageIndex": 0}}
    server.apply_instant_json(document_id, {"bookmarks": [bookmark]})
    response = server.http.post(f"/api/documents/{document_id}/copy_with_instant_json",
                                json={}, headers=server.admin())
    assert response.status_code == 200, response.text
    copy_id = response.json()["documentId"]
    assert [b["name"] for b in server.document_json(copy_id)["bookmarks"]] == ["Copied"]


def test_pdf_import_reads_a_nested_outline_depth_first_with_stable_ids():
    """Every outline item that goes to a page is a bookmark, children after their parent;
    importing the same bytes twice gives the same ids."""
    pdf = pikepdf.new()
    for _ in range(3):
        pdf.add_blank_page()
    with pdf.open_outline() as outline:
        parent = pikepdf.OutlineItem("Part", 0)
        parent.children.append(pikepdf.OutlineItem("Chapter", 2))
        outline.root.extend([parent, pikepdf.OutlineItem("End", 1)])
    out = io.BytesIO()
    pdf.save(out)
    first, second = import_pdf(out.getvalue()), import_pdf(out.getvalue())
    assert [(b["name"], b["action"]) for b in first.bookmarks] == [
        ("Part", {"type": "goTo", "pageIndex": 0}), ("Chapter", {"type": "goTo", "pageIndex": 2}),
        ("End", {"type": "goTo", "pageIndex": 1})]
    assert [b["id"] for b in first.bookmarks] == [b["id"] for b in second.bookmarks]
    # unchanged bookmarks keep the original (nested) outline
    exported = export_pdf(out.getvalue(), first.layer_records).pdf
    with pikepdf.open(io.BytesIO(exported)) as back:
        with back.open_outline() as outline:
            assert [i.title for i in outline.root] == ["Part", "End"]
            assert [i.title for i in outline.root[0].children] == ["Chapter"]
    assert import_pdf(exported).bookmarks == first.bookmarks


def test_pdf_export_does_not_invent_comment_dates(server):
    """A comment made by POST .../comments without createdAt/updatedAt is exported without
    /M and /CreationDate and re-imported without dates: not with the source PDF's
    /ModDate, a date nobody set."""
    document_id = server.empty_document()
    root = {"v": 2, "type": "pspdfkit/note", "id": "root-1", "pageIndex": 0, "bbox": [100, 100, 20, 20],
            "icon": "comment", "text": {"format": "plain", "value": "root"}, **TIMES}
    server.apply_instant_json(document_id, {"annotations": [root]})
    response = server.http.post(f"/api/documents/{document_id}/annotations/root-1/comments",
                                json={"comments": [{"id": "reply-1", "content": {"text": "a reply"}}]},
                                headers=server.admin())
    assert response.status_code == 200, response.text
    before = _by_id(server.document_json(document_id)["comments"])["reply-1"]
    after = _by_id(server.reimported(document_id)["comments"])["reply-1"]
    assert after.get("createdAt") == before.get("createdAt")
    assert after.get("updatedAt") == before.get("updatedAt")
