"""Findings of a review of issue 15 (round trips between PDF, XFDF, Instant JSON and the
Document Engine routes). Each test fails on the code as reviewed and passes once the
finding is fixed; the docstring of each says what is wrong in one line."""

from __future__ import annotations

import io
import uuid

import pikepdf

from conftest import CORPUS

XFDF = {"Content-Type": "application/vnd.adobe.xfdf"}
TIMES = {"createdAt": "2024-01-01T00:00:00Z", "updatedAt": "2024-01-02T00:00:00Z", "opacity": 1}


def _empty_document(server, name: str = "pypdf-example.pdf") -> str:
    document_id = server.new_document(name)
    response = server.http.request("DELETE", f"/api/documents/{document_id}/annotations",
                                   json={"annotationIds": "all"}, headers=server.admin())
    assert response.status_code == 200, response.text
    return document_id


def _apply(server, document_id: str, instant_json: dict) -> None:
    response = server.http.post(f"/api/documents/{document_id}/apply_instant_json",
                                json=instant_json, headers=server.admin())
    assert response.status_code == 200, response.text


def _document_json(server, document_id: str) -> dict:
    response = server.http.get(f"/api/documents/{document_id}/document.json", headers=server.admin())
    assert response.status_code == 200, response.text
    return response.json()


def _pdf(server, document_id: str) -> bytes:
    response = server.http.get(f"/api/documents/{document_id}/pdf", headers=server.admin())
    assert response.status_code == 200, response.text
    return response.content


def _reimported(server, document_id: str) -> dict:
    """document.json of the layer's PDF export uploaded as a new document."""
    copy_id = "doc-" + uuid.uuid4().hex
    response = server.upload(_pdf(server, document_id), copy_id)
    assert response.status_code == 200, response.text
    return _document_json(server, copy_id)


def _by_id(entries: list[dict]) -> dict[str, dict]:
    return {entry["id"]: entry for entry in entries}


def test_pdf_export_keeps_stroke_dash_array(server):
    """PDF export never writes /BS /D (it writes /BS /S /S, solid) and import never reads it,
    so a dashed line/shape comes back solid after export -> re-import."""
    document_id = _empty_document(server)
    line = {"v": 2, "type": "pspdfkit/shape/line", "id": "dashed-line", "pageIndex": 0,
            "bbox": [10, 400, 100, 100], "startPoint": [10, 400], "endPoint": [110, 500],
            "strokeColor": "#00FFFF", "strokeWidth": 2, "strokeDashArray": [3, 3], **TIMES}
    rectangle = {"v": 2, "type": "pspdfkit/shape/rectangle", "id": "dashed-rect", "pageIndex": 0,
                 "bbox": [200, 200, 50, 50], "strokeColor": "#000000", "strokeWidth": 1,
                 "strokeDashArray": [4, 2], **TIMES}
    _apply(server, document_id, {"annotations": [line, rectangle]})
    back = _by_id(_reimported(server, document_id)["annotations"])
    assert back["dashed-line"].get("strokeDashArray") == [3, 3]
    assert back["dashed-rect"].get("strokeDashArray") == [4, 2]


def test_pdf_export_keeps_free_text_font_color_when_rich_text_has_an_inner_span(server):
    """Free text with xhtml '<p>Free <span style="color:#FF0000">red</span></p>' and fontColor
    #00A000: export writes /DS and the /RC body style green, but import takes the first <p>'s
    first <span> colour, so the re-imported record's fontColor is #FF0000."""
    document_id = _empty_document(server)
    free_text = {"v": 2, "type": "pspdfkit/text", "id": "ft-inner-span", "pageIndex": 0,
                 "bbox": [100, 200, 200, 50],
                 "text": {"format": "xhtml", "value": '<p>Free <span style="color:#FF0000">red</span></p>'},
                 "font": "Helvetica", "fontSize": 14, "fontColor": "#00A000", "horizontalAlign": "left",
                 "verticalAlign": "top", **TIMES}
    _apply(server, document_id, {"annotations": [free_text]})
    back = _by_id(_reimported(server, document_id)["annotations"])["ft-inner-span"]
    assert back["text"] == free_text["text"]
    assert back["fontColor"] == "#00A000"


def test_pdf_export_keeps_checkbox_group_value_of_f1040(server):
    """Setting the f1040 field c1_04 (5 widgets S/MJ/MS/HoH/QW) to 'MJ' sets the parent /V and
    the MJ widget's /AS, but leaves the kids' own stale /V /Off, so re-import (and viewers that
    inherit /V from the widget) read 'Off': the filled value is lost."""
    document_id = server.new_document("pdfjs-prefilled_f1040.pdf")
    field = "topmostSubform[0].Page1[0].c1_04"
    response = server.http.post(f"/api/documents/{document_id}/form-field-values",
                                json={"formFieldValues": [{"name": field, "value": "MJ"}]},
                                headers=server.admin())
    assert response.status_code == 200, response.text
    values = {v["name"]: v["value"] for v in _document_json(server, document_id)["formFieldValues"]}
    assert values[field] == "MJ"
    back = {v["name"]: v["value"] for v in _reimported(server, document_id)["formFieldValues"]}
    assert back[field] == "MJ"


def test_xfdf_replace_text_group_is_one_edit_and_survives_pdf_export(server):
    """Acrobat's replace text in XFDF (<caret> + <strikeout inreplyto=caret replyType="group">)
    is imported as a separate xfdf/caret record and a plain strikeout (PDF import makes one
    strikeout with replaceTextCaret); the PDF export then skips the caret, so the
    replacement text disappears from the PDF."""
    document_id = _empty_document(server)
    xfdf = """<?xml version="1.0" encoding="UTF-8"?>
<xfdf xmlns="http://ns.adobe.com/xfdf/" xml:space="preserve"><annots>
<caret color="#0000FF" name="caret-1" page="0" rect="150,480,160,492" flags="print" title="Ann"
  creationdate="D:20240101000000Z" date="D:20240101000000Z"><contents>new words</contents></caret>
<strikeout color="#FF0000" name="so-1" page="0" coords="50,492,150,492,50,480,150,480"
  rect="50,480,150,492" flags="print" title="Ann" inreplyto="caret-1" replyType="group"
  creationdate="D:20240101000000Z" date="D:20240101000000Z"/>
</annots></xfdf>"""
    response = server.http.post(f"/api/documents/{document_id}/apply_xfdf", content=xfdf.encode(),
                                headers={**server.admin(), **XFDF})
    assert response.status_code == 200, response.text
    strikeout = _by_id(_document_json(server, document_id)["annotations"])["so-1"]
    assert strikeout.get("replaceTextCaret", {}).get("text", {}).get("value") == "new words"
    with pikepdf.open(io.BytesIO(_pdf(server, document_id))) as pdf:
        subtypes = [str(a.get("/Subtype")) for a in pdf.pages[0].obj.get("/Annots", [])]
    assert "/Caret" in subtypes


def test_pdf_export_keeps_bookmarks(server):
    """A layer's bookmarks are neither written into the exported PDF (no /Outlines, the
    export reports them as skipped) nor read back, so export -> re-import loses them,
    though "Record kinds" says no record a layer holds is left out of an export."""
    document_id = _empty_document(server)
    bookmark = {"v": 1, "type": "pspdfkit/bookmark", "id": "bm-intro", "name": "Intro",
                "action": {"type": "goTo", "pageIndex": 0}}
    _apply(server, document_id, {"bookmarks": [bookmark]})
    assert _document_json(server, document_id)["bookmarks"]
    back = _reimported(server, document_id)["bookmarks"]
    assert [b.get("name") for b in back] == ["Intro"]
    assert [b.get("action") for b in back] == [bookmark["action"]]


def test_create_annotation_without_type_is_422(server):
    """POST .../annotations {"content": {}} is stored (200, a record with no type, no
    pageIndex, no bbox); the vendor's AnnotationContent requires an annotation, so Document
    Engine answers 422 and stores nothing."""
    document_id = server.new_document()
    response = server.http.post(f"/api/documents/{document_id}/annotations",
                                json={"content": {}}, headers=server.admin())
    assert response.status_code == 422, response.text


def test_form_field_values_for_unknown_field_is_not_reported_as_set(server):
    """POST .../form-field-values for a field the layer has no widget (or form field) of
    answers 200 echoing the value as set, but stores nothing: the value silently vanishes."""
    document_id = server.new_document("pdfjs-prefilled_f1040.pdf")
    response = server.http.post(f"/api/documents/{document_id}/form-field-values",
                                json={"formFieldValues": [{"name": "no.such.field", "value": "x"}]},
                                headers=server.admin())
    values = {v["name"] for v in _document_json(server, document_id)["formFieldValues"]}
    assert response.status_code != 200 or "no.such.field" in values, response.text


def test_instant_json_refuses_page_past_last_page_as_xfdf_does(server):
    """apply_instant_json stores an annotation with pageIndex 50 on a 1-page document (XFDF
    apply refuses the same with 400); the PDF export then skips it and no
    pages/{i}/annotations lists it, so it is invisible everywhere but document.json."""
    document_id = server.new_document("pypdf-example.pdf")
    note = {"v": 2, "type": "pspdfkit/note", "id": "far-page", "pageIndex": 50, "bbox": [1, 1, 20, 20],
            "icon": "comment", "text": {"format": "plain", "value": "x"}, **TIMES}
    response = server.http.post(f"/api/documents/{document_id}/apply_instant_json",
                                json={"annotations": [note]}, headers=server.admin())
    assert response.status_code == 400, response.text


def test_pdf_export_does_not_invent_comment_dates(server):
    """A comment made by POST .../comments gets no createdAt/updatedAt (Document Engine's
    comments carry them); the export writes none and the re-import fills in the source PDF's
    /ModDate, so the reply comes back dated to when the PDF was made, a date nobody set."""
    document_id = _empty_document(server)
    root = {"v": 2, "type": "pspdfkit/note", "id": "root-1", "pageIndex": 0, "bbox": [100, 100, 20, 20],
            "icon": "comment", "text": {"format": "plain", "value": "root"}, **TIMES}
    _apply(server, document_id, {"annotations": [root]})
    response = server.http.post(f"/api/documents/{document_id}/annotations/root-1/comments",
                                json={"comments": [{"id": "reply-1", "content": {"text": "a reply"}}]},
                                headers=server.admin())
    assert response.status_code == 200, response.text
    before = _by_id(_document_json(server, document_id)["comments"])["reply-1"]
    after = _by_id(_reimported(server, document_id)["comments"])["reply-1"]
    assert after.get("createdAt") == before.get("createdAt")
    assert after.get("updatedAt") == before.get("updatedAt")
