"""Admin API: PDF import with stable ids, and export of a layer back into the PDF."""

from __future__ import annotations

import collections
import io
import uuid

import pikepdf
import pytest

from conftest import CORPUS, change, note
from layersync_server.pdf.values import decode_text

#: Expected imported records per corpus file (SOURCES.md counts minus Popup and Caret).
EXPECTED_COUNTS = {
    "pdfjs-annotation-fileattachment.pdf": 1, "pdfjs-comments.pdf": 18, "pdfjs-inks.pdf": 15,
    "pdfjs-issue13447.pdf": 16, "pdfjs-issue20504.pdf": 5, "pdfjs-pr20043.pdf": 2,
    "pdfjs-prefilled_f1040.pdf": 242, "pypdf-commented.pdf": 3, "pypdf-example.pdf": 4,
    "sample-files-024-annotated_pdf.pdf": 3,
}
SCRIPTS = ["ᱡᱚᱦᱟᱨ ᱡᱮᱜᱮᱛ", "你好世界", "مرحبا بالعالم", "ꯍꯦꯂꯣ ꯋꯥꯔꯜꯗ꯫", "Hello World"]


def _annotations(server, doc, layer=None) -> list[dict]:
    path = f"/api/documents/{doc}/annotations" if layer is None \
        else f"/api/documents/{doc}/layers/{layer}/annotations"
    response = server.http.get(path, headers=server.admin())
    assert response.status_code == 200, response.text
    return [a["content"] for a in response.json()["data"]["annotations"]]


def _export(server, doc, layer="") -> pikepdf.Pdf:
    response = server.http.get(f"/api/documents/{doc}/pdf", params={"layer": layer},
                               headers=server.admin())
    assert response.status_code == 200, response.text
    return pikepdf.open(io.BytesIO(response.content))


def _pdf_annots(pdf: pikepdf.Pdf) -> list[pikepdf.Dictionary]:
    return [a for page in pdf.pages for a in page.obj.get("/Annots", [])
            if str(a.get("/Subtype")) not in ("/Popup", "/Caret")]


@pytest.mark.parametrize("name", sorted(EXPECTED_COUNTS))
def test_import_is_stable_and_export_unchanged_keeps_everything(server, name):
    data = (CORPUS / name).read_bytes()
    first, second = "a-" + uuid.uuid4().hex, "b-" + uuid.uuid4().hex
    response = server.upload(data, first)
    assert response.status_code == 200, response.text
    assert response.json()["data"]["annotationCount"] == EXPECTED_COUNTS[name]
    assert server.upload(data, second).status_code == 200
    records_a, records_b = _annotations(server, first), _annotations(server, second)
    assert [r["id"] for r in records_a] == [r["id"] for r in records_b]
    assert records_a == records_b
    assert len({r["id"] for r in records_a}) == EXPECTED_COUNTS[name]
    for record in records_a:
        assert record["v"] == 2 and record["type"].startswith("pspdfkit/")
        assert len(record["bbox"]) == 4 and isinstance(record["pageIndex"], int)
    original = pikepdf.open(io.BytesIO(data))
    exported = _export(server, first)
    count = lambda pdf: collections.Counter(str(a.Subtype) for a in _pdf_annots(pdf))
    assert count(exported) == count(original)
    assert sum(count(exported).values()) >= EXPECTED_COUNTS[name]


def test_same_pdf_same_id_is_idempotent_other_bytes_conflict(server):
    doc = "same-" + uuid.uuid4().hex
    data = (CORPUS / "pypdf-commented.pdf").read_bytes()
    assert server.upload(data, doc).status_code == 200
    assert server.upload(data, doc).status_code == 200
    assert len(_annotations(server, doc)) == 3
    other = server.upload((CORPUS / "pdfjs-inks.pdf").read_bytes(), doc)
    assert other.status_code == 409 and other.json()["error"]["code"] == "document_exists"


def test_non_latin_text_imports_exactly(server):
    doc = server.new_document("pdfjs-issue20504.pdf")
    records = _annotations(server, doc)
    assert [r["text"] for r in records] == [{"format": "plain", "value": s} for s in SCRIPTS]
    assert all(r["type"] == "pspdfkit/text" for r in records)
    assert records[1]["fontColor"].startswith("#") and len(records[1]["fontColor"]) == 7
    commented = _annotations(server, server.new_document("pypdf-commented.pdf"))
    assert any("äöüß" in (r.get("text") or {}).get("value", "") for r in commented)


def test_rotated_page_notes_keep_nm_and_round_trip(server):
    doc = server.new_document("pdfjs-pr20043.pdf")
    records = {r["id"]: r for r in _annotations(server, doc)}
    assert "01JYS36MGS2A3E1H83BK1ZRQVX" in records
    target = records["01JYS36MGS2A3E1H83BK1ZRQVX"]
    assert target["type"] == "pspdfkit/note"
    moved = dict(target, bbox=[100.5, 200.25, 30, 30], text={"format": "plain", "value": "موقع جديد"})
    result = server.sync(doc, [change("update", target["id"], moved, base=2)]).json()
    assert result["accepted"], result
    exported = _export(server, doc)
    reimported = "re-" + uuid.uuid4().hex
    out = io.BytesIO()
    exported.save(out)
    assert server.upload(out.getvalue(), reimported).status_code == 200
    again = {r["id"]: r for r in _annotations(server, reimported)}
    assert set(again) == set(records)
    assert again[target["id"]]["bbox"] == [100.5, 200.25, 30.0, 30.0]
    assert again[target["id"]]["text"]["value"] == "موقع جديد"


def test_export_writes_layer_changes(server):
    doc = server.new_document("sample-files-024-annotated_pdf.pdf")
    records = _annotations(server, doc)
    by_type = {r["type"]: r for r in records}
    highlight, ink = by_type["pspdfkit/markup/highlight"], by_type["pspdfkit/ink"]
    new_ink = {"type": "pspdfkit/ink", "pageIndex": 0, "bbox": [10, 10, 50, 50],
               "lines": {"points": [[[10, 10], [60, 60]]], "intensities": [[1, 1]]},
               "lineWidth": 3, "strokeColor": "#FF0000", "creatorName": "Zoë"}
    result = server.sync(doc, [
        change("delete", highlight["id"], base=2),
        change("update", ink["id"], dict(ink, strokeColor="#00FF00"), base=3),
        change("create", "new-note", note("新しいメモ 🙂", creatorName="Łukasz")),
        change("create", "new-ink", new_ink),
    ]).json()
    assert len(result["accepted"]) == 4, result
    exported = _export(server, doc)
    annots = {decode_text(a.get("/NM")): a for a in _pdf_annots(exported)}
    assert highlight["id"] not in annots
    assert collections.Counter(str(a.Subtype) for a in annots.values()) == \
        {"/Text": 2, "/Ink": 2}
    assert decode_text(annots["new-note"].Contents) == "新しいメモ 🙂"
    assert bytes(annots["new-note"].Contents).startswith(b"\xfe\xff")
    assert decode_text(annots["new-note"].T) == "Łukasz"
    assert [float(v) for v in annots[ink["id"]].C] == [0.0, 1.0, 0.0]
    # a named layer starts empty: none of the imported annotations are exported
    assert _pdf_annots(_export(server, doc, layer="empty")) == []


def test_form_widgets_survive_export(server):
    doc = server.new_document("pdfjs-prefilled_f1040.pdf")
    exported = _export(server, doc)
    widgets = [a for a in _pdf_annots(exported) if str(a.Subtype) == "/Widget"]
    assert len(widgets) == 242
    assert all(decode_text(w.get("/NM")) for w in widgets)


def test_instant_json_export(server):
    doc = server.new_document("pypdf-example.pdf")
    body = server.http.get(f"/api/documents/{doc}/document.json", headers=server.admin()).json()
    assert body["format"] == "https://pspdfkit.com/instant-json/v1"
    assert len(body["annotations"]) == 4
    # The session's shared server holds every test's documents: read all pages by cursor.
    listed, cursor, pages = set(), None, 0
    while True:
        params = {"page_size": 100, **({"cursor": cursor} if cursor else {})}
        answer = server.http.get("/api/documents", params=params, headers=server.admin()).json()
        listed |= {d["document_id"] for d in answer["data"]}
        pages += 1
        cursor = answer["next_cursor"]
        if cursor is None:
            break
    assert doc in listed and len(listed) == answer["document_count"]


@pytest.mark.parametrize("payload", [b"not a pdf at all", b"%PDF-1.7\n%garbage\n" + b"\x00" * 50,
                                     (CORPUS / "pypdf-commented.pdf").read_bytes()[:400]])
def test_broken_pdf_is_rejected_and_nothing_stored(server, payload):
    doc = "broken-" + uuid.uuid4().hex
    response = server.upload(payload, doc)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    # (Not the document list: on the session's shared server a new document is past its first page.)
    assert server.http.get(f"/api/documents/{doc}", headers=server.admin()).status_code == 404


def test_multipart_upload(server):
    doc = "mp-" + uuid.uuid4().hex
    data = (CORPUS / "pdfjs-inks.pdf").read_bytes()
    response = server.http.post("/api/documents", headers=server.admin(),
                                files={"file": ("inks.pdf", data, "application/pdf")},
                                data={"document_id": doc, "title": "Inks"})
    assert response.status_code == 200, response.text
    assert response.json()["data"]["title"] == "Inks"
    assert response.json()["data"]["annotationCount"] == 15
