"""PDF fidelity: import → export (every annotation re-written) → re-import → compare.

For every corpus PDF, a layer holds copies of all imported annotations under new ids
(widgets keep theirs: they belong to the form), so the export removes the originals
and writes every annotation anew; the exported PDF is uploaded again and its records
must match: same count, types, pages, text (exact), rectangles within 0.01 pt and
embedded file bytes. A synthetic PDF adds what the corpus lacks: a MediaBox that does
not start at 0,0, a page rotated by 90, emoji and several scripts, an uploaded
attachment embedded on export. Broken and encrypted PDFs get 400 and store nothing.
"""

from __future__ import annotations

import hashlib
import io
import uuid

import pikepdf
import pytest

from conftest import CORPUS, synthetic_pdf

TEXT_KEYS = ("text", "note", "description", "fileName", "creatorName", "value", "formFieldName")
TEXTS = ["👋 Hello 🌍 — ✓", "你好世界", "مرحبا بالعالم", "ᱡᱚᱦᱟᱨ ᱡᱮᱜᱮᱛ", "Ĉu vi? «ça» ﬁ", "plain"]


def _api(server, method, path, **kwargs):
    return server.http.request(method, path, headers={**server.admin(), **kwargs.pop("headers", {})},
                               **kwargs)


def _records(server, doc, layer="~"):
    response = _api(server, "GET", f"/api/documents/{doc}/layers/{layer}/annotations",
                    headers={"Accept": "application/x-ndjson"})
    assert response.status_code == 200, response.text
    import json
    return [json.loads(line)["content"] for line in response.text.splitlines()]


def _copy(record: dict) -> dict:
    if record["type"] == "pspdfkit/widget":
        return dict(record)
    copy = dict(record, id="rt-" + record["id"])
    copy.pop("name", None)
    for key in ("rootId", "inReplyTo"):
        if isinstance(copy.get(key), str):
            copy[key] = "rt-" + copy[key]
    return copy


def _round_trip(server, doc) -> tuple[list[dict], list[dict]]:
    """Make layer 'rt' of copies, export it, re-upload; return (copies, re-imported)."""
    originals = _records(server, doc)
    copies = [_copy(r) for r in originals]
    created = _api(server, "POST", f"/api/documents/{doc}/layers",
                   json={"name": "rt", "source_layer_name": ""})
    assert created.status_code == 200, created.text
    for record in originals:
        if record["type"] != "pspdfkit/widget":
            assert _api(server, "DELETE", f"/api/documents/{doc}/layers/rt/annotations/{record['id']}"
                        ).status_code in (200, 404)  # 404: already gone with its root
    for start in range(0, len(copies), 50):
        applied = _api(server, "POST", f"/api/documents/{doc}/layers/rt/apply_instant_json",
                       json={"annotations": copies[start:start + 50]})
        assert applied.status_code == 200, applied.text
    exported = _api(server, "GET", f"/api/documents/{doc}/layers/rt/pdf")
    assert exported.status_code == 200, exported.text
    skipped = exported.headers["LayerSync-Export"].split("skipped=")[1]
    assert skipped == "0", exported.headers["LayerSync-Export"]
    again = "rt-" + uuid.uuid4().hex
    assert server.upload(exported.content, again).status_code == 200
    return copies, _records(server, again)


def _compare(expected: list[dict], actual: list[dict]) -> None:
    assert len(actual) == len(expected)
    by_id = {r["id"]: r for r in actual}
    assert set(by_id) == {r["id"] for r in expected}
    for want in expected:
        got = by_id[want["id"]]
        assert got["type"] == want["type"] and got["pageIndex"] == want["pageIndex"], want["id"]
        for a, b in zip(got["bbox"], want["bbox"]):
            assert abs(a - b) <= 0.01, (want["id"], got["bbox"], want["bbox"])
        for key in TEXT_KEYS:
            assert got.get(key) == want.get(key), (want["id"], key, got.get(key), want.get(key))
        assert got.get("fileAttachmentId") == want.get("fileAttachmentId")


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.pdf")))
def test_corpus_pdf_round_trips(server, name):
    doc = "c-" + uuid.uuid4().hex
    assert server.upload((CORPUS / name).read_bytes(), doc).status_code == 200
    copies, reimported = _round_trip(server, doc)
    _compare(copies, reimported)


#: (MediaBox, /Rotate) of the synthetic PDF's pages
SYNTHETIC_PAGES = [([100, 200, 712, 992], 90), ([-50, -60, 562, 732], 0), ([0, 0, 300, 400], 270)]


def test_synthetic_pdf_with_offset_boxes_rotation_scripts_and_attachment(server):
    doc = "syn-" + uuid.uuid4().hex
    assert server.upload(synthetic_pdf(SYNTHETIC_PAGES), doc).status_code == 200
    payload = "attachment ✓ bytes\x00\xff".encode("utf-8") + bytes(range(256))
    sha = hashlib.sha256(payload).hexdigest()
    put = server.http.put(f"/sync/v1/documents/{doc}/attachments/{sha}", content=payload,
                          headers={**server.auth(doc), "Content-Type": "application/octet-stream"})
    assert put.status_code == 201
    records = []
    for page in range(3):
        for i, text in enumerate(TEXTS):
            bbox = [10.5 + 40 * i, 20.25 + 30 * page, 30.125, 18.5]
            records.append({"v": 2, "id": f"n-{page}-{i}", "type": "pspdfkit/note", "pageIndex": page,
                            "bbox": bbox, "text": {"format": "plain", "value": text}, "icon": "comment",
                            "creatorName": text, "opacity": 1.0, "flags": [],
                            "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z"})
        records.append({"v": 2, "id": f"sq-{page}", "type": "pspdfkit/shape/rectangle", "pageIndex": page,
                        "bbox": [50.01, 60.02, 70.03, 80.04], "strokeColor": "#FF0000", "strokeWidth": 2,
                        "note": TEXTS[0], "opacity": 1.0, "flags": [],
                        "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z"})
    records.append({"v": 2, "id": "file-1", "type": "pspdfkit/file", "pageIndex": 1,
                    "bbox": [5, 5, 20, 24], "fileAttachmentId": sha, "fileName": "données ✓.bin",
                    "description": "embedded 📎", "note": "embedded 📎", "iconName": "PushPin", "opacity": 1.0, "flags": [],
                    "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z"})
    applied = _api(server, "POST", f"/api/documents/{doc}/apply_instant_json", json={"annotations": records})
    assert applied.status_code == 200, applied.text
    exported = _api(server, "GET", f"/api/documents/{doc}/pdf")
    assert exported.headers["LayerSync-Export"] == f"kept=0; written={len(records)}; removed=0; skipped=0"
    again = "syn2-" + uuid.uuid4().hex
    assert server.upload(exported.content, again).status_code == 200
    reimported = _records(server, again)
    _compare(records, reimported)
    fetched = server.http.get(f"/sync/v1/documents/{again}/attachments/{sha}", headers=server.auth(again))
    assert fetched.status_code == 200 and fetched.content == payload


def test_encrypted_pdf_gets_a_clear_error_and_nothing_is_stored(server):
    pdf = pikepdf.new()
    pdf.add_blank_page()
    out = io.BytesIO()
    pdf.save(out, encryption=pikepdf.Encryption(owner="owner", user="user"))
    doc = "enc-" + uuid.uuid4().hex
    response = server.upload(out.getvalue(), doc)
    assert response.status_code == 400 and "encrypted" in response.json()["error"]["message"]
    assert _api(server, "GET", f"/api/documents/{doc}").status_code == 404


def test_truncated_pdf_is_rejected_cleanly(server):
    data = (CORPUS / "pdfjs-comments.pdf").read_bytes()
    doc = "cut-" + uuid.uuid4().hex
    response = server.upload(data[: len(data) // 3], doc)
    assert response.status_code in (200, 400)  # qpdf may recover; never a 5xx or half a document
    info = _api(server, "GET", f"/api/documents/{doc}")
    assert (response.status_code == 200) == (info.status_code == 200)


def test_widget_values_import_and_export(server):
    doc = "form-" + uuid.uuid4().hex
    assert server.upload((CORPUS / "pdfjs-prefilled_f1040.pdf").read_bytes(), doc).status_code == 200
    widgets = _records(server, doc)
    prefilled = [w for w in widgets if "value" in w]
    assert prefilled and all(w["type"] == "pspdfkit/widget" for w in widgets)
    text = next(w for w in widgets if w.get("formFieldType") == "text" and "value" not in w)
    button = next(w for w in widgets if w.get("formFieldType") == "button")
    changes = [dict(text, value="Zoë 🧾 数字 1040"), dict(button, value="1")]
    applied = _api(server, "POST", f"/api/documents/{doc}/apply_instant_json", json={"annotations": changes})
    assert applied.json()["data"]["updated"] == 2
    exported = _api(server, "GET", f"/api/documents/{doc}/pdf")
    again = "form2-" + uuid.uuid4().hex
    assert server.upload(exported.content, again).status_code == 200
    by_id = {w["id"]: w for w in _records(server, again)}
    assert len(by_id) == len(widgets)
    assert by_id[text["id"]]["value"] == "Zoë 🧾 数字 1040"
    assert by_id[button["id"]]["value"] == "1"
    for w in prefilled:
        assert by_id[w["id"]]["value"] == w["value"]


def test_form_field_values_in_instant_json(server):
    doc = "ffv-" + uuid.uuid4().hex
    assert server.upload((CORPUS / "pdfjs-prefilled_f1040.pdf").read_bytes(), doc).status_code == 200
    exported = _api(server, "GET", f"/api/documents/{doc}/document.json").json()
    assert exported["formFieldValues"] and all(v["type"] == "pspdfkit/form-field-value"
                                               for v in exported["formFieldValues"])
    name = next(w["formFieldName"] for w in exported["annotations"]
                if w.get("formFieldType") == "text" and "value" not in w)
    applied = _api(server, "POST", f"/api/documents/{doc}/apply_instant_json",
                   json={"formFieldValues": [{"v": 1, "type": "pspdfkit/form-field-value", "name": name,
                                              "value": "filled"}]})
    assert applied.status_code == 200 and applied.json()["data"]["updated"] >= 1
    again = _api(server, "GET", f"/api/documents/{doc}/document.json").json()
    assert {"v": 1, "type": "pspdfkit/form-field-value", "name": name, "value": "filled"} in again["formFieldValues"]
