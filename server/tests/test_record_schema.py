"""The record schema on the server (docs/protocol.md, "Record schema"): the checker over the
cases the engine's tests share (api/record-schema-cases.json), the sync route rejecting an
ill-typed change alone as ``invalid``, the admin API answering 400 naming the field, and
every record the PDF importer makes from the corpus passing the schema."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from conftest import CORPUS, change, note
from layersync_server.changes import normalize_content
from layersync_server.pdf.import_ import import_pdf
from layersync_formats.record_schema import record_schema_problem
from layersync_formats.record_schema_generated import NODES, RECORDS

ROOT = Path(__file__).resolve().parents[2]
CASES = json.loads((ROOT / "api" / "record-schema-cases.json").read_text())
INSTANT_JSON = CORPUS.parent / "instant-json"


@pytest.mark.parametrize("case", CASES["valid"], ids=lambda c: c["name"])
def test_valid_cases_pass(case):
    assert record_schema_problem(case["record"]) is None


@pytest.mark.parametrize("case", CASES["invalid"], ids=lambda c: c["name"])
def test_invalid_cases_name_the_field(case):
    problem = record_schema_problem(case["record"])
    assert problem == case["message"]
    assert f'"{case["field"]}"' in problem


def test_an_item_refused_names_its_first_position():
    # the same object twice in an array (a client's JSON never makes one, Python code
    # may): the message names the first, as the walk does
    bad = "12"
    content = note("n", bbox=[0, bad, 2, bad])
    assert record_schema_problem(content) == '"bbox[1]" must be a number'
    lines = {"points": [[[0, 0], [1, bad]], [[2, bad]]], "intensities": [[0.5, 0.5], [0.5]]}
    ink = {"v": 2, "type": "pspdfkit/ink", "pageIndex": 0, "bbox": [0, 0, 1, 1],
           "lines": lines, "lineWidth": 1, "isDrawnNaturally": False, "isSignature": False}
    assert record_schema_problem(ink) == '"lines.points[0][1][1]" must be a number'


def test_the_generated_tables_are_closed_and_cover_every_annotation_type():
    for versions in RECORDS.values():
        assert all(0 <= i < len(NODES) for i in versions.values())
    for node in NODES:
        children = [c for _, c in node[8]] + list(node[10]) + ([node[7]] if node[7] is not None else [])
        assert all(0 <= c < len(NODES) for c in children)
    assert {"pspdfkit/note", "pspdfkit/ink", "pspdfkit/text", "pspdfkit/comment", "pspdfkit/widget",
            "pspdfkit/file", "pspdfkit/markup/highlight", "pspdfkit/shape/line"} <= set(RECORDS)


def test_records_without_a_string_type_are_not_checked():
    assert record_schema_problem({"n": 1}) is None  # the engine's own store tests sync such content


def test_every_imported_corpus_record_passes():
    checked = 0
    for pdf in sorted(CORPUS.glob("*.pdf")):
        for annotation in import_pdf(pdf.read_bytes()).annotations:
            assert record_schema_problem(normalize_content("x", annotation.content)) is None, \
                (pdf.name, annotation.content)
            checked += 1
    assert checked > 100


def _instant_records(value):
    if isinstance(value, dict):
        if isinstance(value.get("type"), str) and value["type"].startswith("pspdfkit/"):
            yield value
        else:
            for item in value.values():
                yield from _instant_records(item)
    elif isinstance(value, list):
        for item in value:
            yield from _instant_records(item)


def test_the_vendor_instant_json_samples_pass():
    records = [r for path in sorted(INSTANT_JSON.glob("*.json"))
               for r in _instant_records(json.loads(path.read_text()))]
    assert len(records) >= 10
    for record in records:
        assert record_schema_problem(record) is None, record


def test_sync_rejects_an_ill_typed_change_alone(server):
    doc = server.new_document()
    good, bad_page, bad_bbox, after = (f"r-{uuid.uuid4().hex[:8]}" for _ in range(4))
    response = server.sync(doc, [change("create", good, note("good")),
                                 change("create", bad_page, note("bad", pageIndex="zero")),
                                 change("create", bad_bbox, note("bad", bbox="1,2,3,4")),
                                 change("create", after, note("after"))])
    assert response.status_code == 200, response.text
    body = response.json()
    assert sorted(a["id"] for a in body["accepted"]) == sorted([good, after])
    rejected = {r["id"]: r for r in body["rejected"]}
    assert set(rejected) == {bad_page, bad_bbox}
    assert all(r["reason"] == "invalid" and r["server_record"] is None for r in rejected.values())
    assert '"pageIndex"' in rejected[bad_page]["message"]
    assert '"bbox"' in rejected[bad_bbox]["message"]
    ids = {r["id"] for r in server.records(doc)["records"]}
    assert good in ids and after in ids and bad_page not in ids and bad_bbox not in ids
    # An update that breaks the schema is rejected too; the stored record stays.
    base = body["accepted"][0]["revision"] if body["accepted"][0]["id"] == good else body["accepted"][1]["revision"]
    response = server.sync(doc, [change("update", good, note("edited", opacity=2), base=base)])
    assert response.status_code == 200
    assert [(r["id"], r["reason"]) for r in response.json()["rejected"]] == [(good, "invalid")]
    assert '"opacity"' in response.json()["rejected"][0]["message"]
    stored = {r["id"]: r for r in server.records(doc)["records"]}[good]
    assert stored["content"]["text"]["value"] == "good"


def test_unknown_fields_and_custom_data_are_kept(server):
    doc = server.new_document()
    content = note("kept", appField={"any": [1, "two", None]}, customData={"deep": {"x": [True]}})
    response = server.sync(doc, [change("create", "kept-1", content)])
    assert response.status_code == 200 and response.json()["rejected"] == []
    stored = {r["id"]: r for r in server.records(doc)["records"]}["kept-1"]["content"]
    assert stored["appField"] == content["appField"] and stored["customData"] == content["customData"]


def test_admin_api_refuses_ill_typed_annotations_naming_the_field(server):
    doc = server.new_document()
    base = f"/api/documents/{doc}"
    # an annotation write answers 422 (Document Engine's answer to an invalid field)
    response = server.http.post(base + "/annotations", headers=server.admin(),
                                json={"id": "adm-bad", "content": note("x", pageIndex="zero")})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert '"pageIndex"' in response.json()["error"]["message"]
    response = server.http.post(base + "/annotations", headers=server.admin(),
                                json={"id": "adm-ok", "content": note("ok")})
    assert response.status_code == 200, response.text
    response = server.http.put(base + "/annotations/adm-ok", headers=server.admin(),
                               json={"content": note("x", bbox="1,2,3,4")})
    assert response.status_code == 422 and '"bbox"' in response.json()["error"]["message"]
    response = server.http.post(base + "/apply_instant_json", headers=server.admin(),
                                json={"annotations": [{"id": "adm-new", **note("fine")}],
                                      "comments": [{"id": "adm-c", "type": "pspdfkit/comment", "v": 2,
                                                    "rootId": "adm-ok", "pageIndex": 0}]})
    assert response.status_code == 400 and '"text"' in response.json()["error"]["message"]
    got = server.http.get(base + "/annotations/adm-ok", headers=server.admin()).json()
    assert got["content"]["text"]["value"] == "ok"
    assert server.http.get(base + "/annotations/adm-new", headers=server.admin()).status_code == 404
    assert server.http.get(base + "/annotations/adm-bad", headers=server.admin()).status_code == 404


@pytest.mark.parametrize("value", [5, True, {"a": 1}, [1, 2], [[["nested"]]]])
def test_admin_api_refuses_ill_typed_form_field_values(server, value):
    """``formFieldValues`` of ``apply_instant_json`` are ``pspdfkit/form-field-value``
    records (a string, null or an array of strings); their value lands on the widget
    records of that field, so an ill-typed one is refused like an ill-typed annotation
    (before, any JSON was written onto the widgets, however deep)."""
    doc = "ffv-" + uuid.uuid4().hex
    assert server.upload((CORPUS / "pdfjs-prefilled_f1040.pdf").read_bytes(), doc).status_code == 200
    base = f"/api/documents/{doc}"
    widgets = [w for w in server.http.get(base + "/document.json", headers=server.admin()).json()["annotations"]
               if w.get("formFieldType") == "text"]
    name = widgets[0]["formFieldName"]
    revision = server.records(doc)["revision"]
    response = server.http.post(base + "/apply_instant_json", headers=server.admin(), json={
        "formFieldValues": [{"v": 1, "type": "pspdfkit/form-field-value", "name": name, "value": value}]})
    assert response.status_code == 400, response.text
    assert '"value"' in response.json()["error"]["message"]
    assert server.records(doc)["revision"] == revision  # nothing written
    response = server.http.post(base + "/apply_instant_json", headers=server.admin(), json={
        "formFieldValues": [{"v": 1, "type": "pspdfkit/form-field-value", "name": name, "value": "ok"}]})
    assert response.status_code == 200 and response.json()["data"]["updated"] >= 1, response.text


@pytest.mark.parametrize("page_index", [0, 0.0])
def test_the_exporter_writes_a_record_whose_integral_page_index_is_written_as_a_float(page_index):
    """``"pageIndex": 0.0`` is an integer to the schema (JSON Schema counts integral
    numbers), so it passes both sides; the exporter must then write it, not skip it."""
    from layersync_server.pdf.export import export_pdf

    record = {"id": "float-page", "v": 2, "type": "pspdfkit/shape/rectangle", "pageIndex": page_index,
              "bbox": [10, 10, 50, 50], "strokeWidth": 1}
    assert record_schema_problem(record) is None
    result = export_pdf((CORPUS / "pdfjs-inks.pdf").read_bytes(), [record])
    assert (result.written, result.skipped) == (1, [])


def test_imported_records_of_odd_annotations_pass():
    """A PDF's annotations with values the record schema has no room for (opacity 1.7, a
    free text rotated 45° with a 10.5 pt font, a highlight without /C, a widget rotated
    -90°) import as records that pass it: clamped, snapped to a right angle, rounded, or
    given the default the schema needs."""
    import io

    import pikepdf

    seen = set()
    for name in ("pdfjs-issue20504.pdf", "pypdf-commented.pdf", "pdfjs-prefilled_f1040.pdf"):
        pdf = pikepdf.open(CORPUS / name)
        for page in pdf.pages:
            for annot in page.get("/Annots", []):
                subtype = str(annot.get("/Subtype"))
                annot.CA = 1.7
                if subtype == "/FreeText":
                    annot.Rotate, annot.DA = 45, pikepdf.String("/Helv 10.5 Tf 0 g")
                elif subtype == "/Highlight" and "/C" in annot:
                    del annot["/C"]
                elif subtype == "/Widget":
                    annot.MK = pikepdf.Dictionary(R=-90)
                seen.add(subtype)
        out = io.BytesIO()
        pdf.save(out)
        for annotation in import_pdf(out.getvalue()).annotations:
            assert record_schema_problem(normalize_content("x", annotation.content)) is None, \
                (name, annotation.content)
    assert {"/FreeText", "/Highlight", "/Widget"} <= seen
