"""Exported annotations are visible: every new annotation carries an appearance stream.

Most viewers (pdf.js, Preview, Chrome, mutool) draw markup annotations only from their
``/AP /N`` stream. These tests export PDFs through the real server, render the pages
with PDFium (Chrome's renderer, via pypdfium2), and compare pixels with the same page
exported from an empty layer: inside each new annotation's rectangle the page changed
and shows roughly the annotation's colour; outside every rectangle nothing changed.
Pages include a ``/Rotate 90`` page whose MediaBox does not start at 0,0.

Drawing costs time and bytes in proportion to the record, never to a coordinate's
value or to the square of a text's length: records a writer could use to make every
export hang (a 100,000-character word, a 10^12 pt wide squiggly) are drawn at once.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import signal
import uuid

import pikepdf
import pypdfium2
import pytest

from conftest import CORPUS, synthetic_pdf

INSTANT_JSON = CORPUS.parent / "instant-json"
from layersync_server.pdf.appearance import write_appearance
from layersync_server.pdf.values import decode_text

SCALE = 2  # pixels per point
#: (MediaBox, /Rotate) of the synthetic pages
PAGES = [([0, 0, 612, 792], 0), ([100, 200, 712, 992], 90)]
DATE = "2025-01-01T00:00:00Z"


def _record(record_id: str, kind: str, page: int, bbox: list[float], **extra) -> dict:
    return {"v": 2, "id": record_id, "type": kind, "pageIndex": page, "bbox": bbox,
            "opacity": 1, "createdAt": DATE, "updatedAt": DATE, **extra}


def _box(bbox):
    left, top, width, height = bbox
    return [[left, top], [left + width, top + height]]


#: One record of each written type, none overlapping, each with (colour it must show,
#: minimum share of its rectangle's pixels that must change).
RECORDS = [
    (_record("ink", "pspdfkit/ink", 0, [40, 40, 100, 60], strokeColor="#1E5AFF", lineWidth=4,
             lines={"points": [[[45, 45], [80, 95], [135, 50]], [[50, 90], [130, 90]]],
                    "intensities": [[1, 1, 1], [1, 1]]}, isDrawnNaturally=False), "#1E5AFF", 0.05),
    (_record("highlight", "pspdfkit/markup/highlight", 0, [180, 40, 160, 34], color="#FCEE7C",
             blendMode="multiply", rects=[[180, 40, 160, 16], [180, 58, 90, 16]]), "#FCEE7C", 0.6),
    (_record("underline", "pspdfkit/markup/underline", 0, [380, 40, 150, 20], color="#00A000",
             rects=[[380, 40, 150, 20]]), "#00A000", 0.04),
    (_record("strikeout", "pspdfkit/markup/strikeout", 0, [380, 80, 150, 20], color="#D00000",
             rects=[[380, 80, 150, 20]]), "#D00000", 0.04),
    (_record("squiggly", "pspdfkit/markup/squiggly", 0, [180, 90, 150, 20], color="#A000C0",
             rects=[[180, 90, 150, 20]]), "#A000C0", 0.04),
    (_record("rectangle", "pspdfkit/shape/rectangle", 0, [40, 140, 100, 70], strokeColor="#0000FF",
             fillColor="#FFC0C0", strokeWidth=3), "#FFC0C0", 0.5),
    (_record("ellipse", "pspdfkit/shape/ellipse", 0, [180, 140, 120, 80], strokeColor="#2293FB",
             strokeWidth=5), "#2293FB", 0.08),
    (_record("line", "pspdfkit/shape/line", 0, [340, 140, 200, 40], strokeColor="#FF6600",
             strokeWidth=3, startPoint=[350, 170], endPoint=[530, 150],
             lineCaps={"start": "circle", "end": "closedArrow"}), "#FF6600", 0.04),
    (_record("polygon", "pspdfkit/shape/polygon", 0, [40, 260, 120, 100], strokeColor="#008080",
             fillColor="#008080", strokeWidth=2, points=[[45, 350], [100, 265], [155, 350]]),
     "#008080", 0.3),
    (_record("polyline", "pspdfkit/shape/polyline", 0, [200, 260, 120, 100], strokeColor="#804000",
             strokeWidth=4, points=[[205, 355], [240, 265], [280, 355], [315, 265]]), "#804000", 0.05),
    (_record("note", "pspdfkit/note", 0, [360, 260, 24, 24], color="#FFD83F", icon="comment",
             text={"format": "plain", "value": "An example for a Note Annotation"}), "#FFD83F", 0.3),
    (_record("freetext", "pspdfkit/text", 0, [40, 420, 220, 90], backgroundColor="#2293FB",
             fontColor="#FFFFFF", font="Helvetica", fontSize=18, fontStyle=["bold"],
             horizontalAlign="center", verticalAlign="center", lineHeightFactor=1.19,
             text={"format": "plain", "value": "Welcome to\nLayerSync ✓ café"}), "#2293FB", 0.5),
    (_record("stamp", "pspdfkit/stamp", 0, [300, 420, 200, 60], stampType="Approved",
             color="#2E7D32"), "#2E7D32", 0.04),
    (_record("half", "pspdfkit/shape/rectangle", 0, [40, 560, 100, 60], fillColor="#0000FF",
             strokeWidth=0, opacity=0.5), "#8080FF", 0.9),
    # the rotated page with an offset MediaBox
    (_record("r-rect", "pspdfkit/shape/rectangle", 1, [50, 60, 120, 40], fillColor="#00C000",
             strokeColor="#004000", strokeWidth=2), "#00C000", 0.5),
    (_record("r-ink", "pspdfkit/ink", 1, [300, 100, 80, 200], strokeColor="#FF00FF", lineWidth=6,
             lines={"points": [[[310, 110], [370, 290]]], "intensities": [[1, 1]]}), "#FF00FF", 0.03),
    (_record("r-text", "pspdfkit/text", 1, [60, 400, 200, 50], backgroundColor="#FFFF00",
             fontColor="#000000", fontSize=14, horizontalAlign="left", verticalAlign="top",
             text={"format": "plain", "value": "rotated page"}),
     "#FFFF00", 0.5),
]


def _get(server, path: str, **params) -> bytes:
    response = server.http.get(path, params=params, headers=server.admin())
    assert response.status_code == 200, response.text
    return response.content


def _render(data: bytes) -> list:
    document = pypdfium2.PdfDocument(data)
    try:
        return [document[i].render(scale=SCALE, draw_annots=True).to_pil().convert("RGB")
                for i in range(len(document))]
    finally:
        document.close()


def _device_box(page_index: int, bbox: list[float], outset: float) -> tuple[int, int, int, int]:
    """Instant ``bbox`` (unrotated page, top-left origin) → pixel box of the rendered
    (rotated) page, grown by ``outset`` points on each side."""
    box, rotate = PAGES[page_index]
    width, height = box[2] - box[0], box[3] - box[1]
    left, top, w, h = bbox
    corners = [(left, top), (left + w, top + h)]
    turn = {0: lambda u, v: (u, v), 90: lambda u, v: (height - v, u),
            180: lambda u, v: (width - u, height - v), 270: lambda u, v: (v, width - u)}[rotate]
    xs, ys = zip(*(turn(u, v) for u, v in corners))
    return (int((min(xs) - outset) * SCALE), int((min(ys) - outset) * SCALE),
            int((max(xs) + outset) * SCALE), int((max(ys) + outset) * SCALE))


def _rgb(color: str) -> tuple[int, int, int]:
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def _changed(before, after, box) -> list[tuple[int, int, int]]:
    """The pixels of ``after`` inside ``box`` that differ from ``before``."""
    a, b = before.crop(box).tobytes(), after.crop(box).tobytes()
    return [tuple(b[i:i + 3]) for i in range(0, len(b), 3)
            if max(abs(a[i + k] - b[i + k]) for k in range(3)) > 24]


def _close(color, want, tolerance=48) -> bool:
    return max(abs(x - y) for x, y in zip(color, want)) <= tolerance


@pytest.fixture(scope="module")
def exported(server):
    """(pages rendered without the layer, pages rendered with it, exported pikepdf.Pdf)."""
    doc = "ap-" + uuid.uuid4().hex
    assert server.upload(synthetic_pdf(PAGES), doc).status_code == 200
    applied = server.http.post(f"/api/documents/{doc}/apply_instant_json", headers=server.admin(),
                               json={"annotations": [r for r, _, _ in RECORDS]})
    assert applied.status_code == 200, applied.text
    with_layer = _get(server, f"/api/documents/{doc}/pdf", layer="")
    without = _get(server, f"/api/documents/{doc}/pdf", layer="empty")
    return _render(without), _render(with_layer), pikepdf.open(io.BytesIO(with_layer))


def test_every_new_annotation_has_a_form_xobject_appearance(exported):
    _, _, pdf = exported
    annots = {decode_text(a.NM): a for page in pdf.pages for a in page.obj.get("/Annots", [])}
    assert set(annots) == {r["id"] for r, _, _ in RECORDS}
    for record_id, annot in annots.items():
        assert "/AP" in annot, record_id
        normal = annot.AP.N
        assert isinstance(normal, pikepdf.Stream) and normal.Subtype == pikepdf.Name.Form, record_id
        assert len(normal.BBox) == 4 and normal.read_bytes().strip(), record_id


@pytest.mark.parametrize("record,color,share", RECORDS, ids=[r["id"] for r, _, _ in RECORDS])
def test_annotation_is_drawn_inside_its_rect_in_its_colour(exported, record, color, share):
    before, after, _ = exported
    page = record["pageIndex"]
    box = _device_box(page, record["bbox"], outset=0)
    changed = _changed(before[page], after[page], box)
    area = (box[2] - box[0]) * (box[3] - box[1])
    assert len(changed) >= share * area, (record["id"], len(changed), area)
    want = _rgb(color)
    matching = sum(1 for p in changed if _close(p, want))
    assert matching >= 0.5 * share * area, (record["id"], matching, want,
                                            sorted(set(changed), key=changed.count)[-3:])


def test_free_text_draws_its_text(exported):
    before, after, _ = exported
    for record, _, _ in RECORDS:
        if record["type"] == "pspdfkit/text":
            page = record["pageIndex"]
            box = _device_box(page, record["bbox"], outset=0)
            text_pixels = sum(1 for p in _changed(before[page], after[page], box)
                              if _close(p, _rgb(record["fontColor"]), 60))
            assert text_pixels >= 200, (record["id"], text_pixels)


@pytest.mark.parametrize("page", range(len(PAGES)))
def test_nothing_changes_outside_the_annotations(exported, page):
    before, after, _ = exported
    mask = before[page].copy()
    other = after[page].copy()
    for record, _, _ in RECORDS:
        if record["pageIndex"] == page:
            box = _device_box(page, record["bbox"], outset=1.5)
            mask.paste((0, 0, 0), box)
            other.paste((0, 0, 0), box)
    assert mask.tobytes() == other.tobytes()
    assert after[page].size == before[page].size


def _gray_pdf(pages: int) -> bytes:
    """Letter pages painted mid-gray, so white annotations show too."""
    pdf = pikepdf.new()
    for _ in range(pages):
        pdf.add_blank_page(page_size=(612, 792))
        pdf.pages[-1].obj.Contents = pdf.make_stream(b"0.5 g 0 0 612 792 re f")
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def test_real_instant_json_export_is_visible(server):
    """The corpus's real Instant JSON export (text, ink on page 2, ellipse, note,
    highlight; its widget has no PDF field to attach to and is skipped) shows up."""
    sample = json.loads((INSTANT_JSON / "nutrient-dws-client-ruby-annotations.json").read_text())
    doc = "ap-real-" + uuid.uuid4().hex
    assert server.upload(_gray_pdf(2), doc).status_code == 200
    applied = server.http.post(f"/api/documents/{doc}/apply_instant_json", headers=server.admin(),
                               json={"annotations": sample["annotations"]})
    assert applied.status_code == 200, applied.text
    response = server.http.get(f"/api/documents/{doc}/pdf", headers=server.admin())
    visible = [a for a in sample["annotations"] if a["type"] != "pspdfkit/widget"]
    assert response.headers["LayerSync-Export"] == f"kept=0; written={len(visible)}; removed=0; skipped=1"
    before, after = _render(_get(server, f"/api/documents/{doc}/pdf", layer="empty")), _render(response.content)
    for record in visible:
        page = record["pageIndex"]
        left, top, width, height = record["bbox"]
        box = tuple(int(v * SCALE) for v in (left, top, left + width, top + height))
        changed = _changed(before[page], after[page], box)
        assert len(changed) >= 0.02 * (box[2] - box[0]) * (box[3] - box[1]), record["id"]
        color = record.get("strokeColor") or record.get("backgroundColor") or record.get("color")
        expected = _rgb(color)
        if record.get("blendMode") == "multiply":  # on 50 % gray
            expected = tuple(round(c * 128 / 255) for c in expected)
        assert sum(1 for p in changed if _close(p, expected)) >= 0.5 * len(changed), record["id"]


def test_kept_annotations_keep_their_original_appearance(server):
    """An imported annotation whose record did not change keeps its own /AP stream; a
    changed one is rewritten with a new appearance."""
    name = "pdfjs-inks.pdf"
    doc = server.new_document(name)
    records = server.http.get(f"/api/documents/{doc}/annotations", headers=server.admin()).json()
    inks = [a["content"] for a in records["data"]["annotations"]]
    changed = dict(inks[0], strokeColor="#00FF00")
    response = server.http.put(f"/api/documents/{doc}/annotations/{changed['id']}",
                               headers=server.admin(), json={"content": changed})
    assert response.status_code == 200, response.text
    original = pikepdf.open(CORPUS / name)
    original_ap = {i: bytes(a.AP.N.read_bytes()) for i, a in enumerate(original.pages[0].Annots)
                   if str(a.Subtype) == "/Ink"}
    exported = pikepdf.open(io.BytesIO(_get(server, f"/api/documents/{doc}/pdf")))
    streams = {decode_text(a.NM): a.AP.N.read_bytes() for a in exported.pages[0].Annots
               if str(a.Subtype) == "/Ink"}
    assert len(streams) == len(inks)
    unchanged = [r["id"] for r in inks[1:]]
    assert all(streams[i] in original_ap.values() for i in unchanged)
    assert streams[changed["id"]] not in original_ap.values()
    assert b"0 1 0 RG" in streams[changed["id"]]


def test_moved_stamp_keeps_its_picture_and_a_restyled_one_is_redrawn(server):
    """A stamp's imported appearance may be an image: moving it keeps that appearance
    (viewers scale it into the new /Rect); changing its colour draws a new one."""
    name = "pypdf-example.pdf"
    doc = server.new_document(name)
    listed = server.http.get(f"/api/documents/{doc}/annotations", headers=server.admin()).json()
    records = {a["content"]["type"]: a["content"] for a in listed["data"]["annotations"]}
    stamp, attachment = records["pspdfkit/stamp"], records["pspdfkit/file"]
    original = pikepdf.open(CORPUS / name)
    pictures = {str(a.Subtype): a.AP.N.read_bytes() for a in original.pages[0].Annots
                if str(a.Subtype) in ("/Stamp", "/FileAttachment")}
    stamp_rect = [[float(v) for v in a.Rect] for a in original.pages[0].Annots
                  if str(a.Subtype) == "/Stamp"][0]

    def export_after(changed: dict) -> dict:
        response = server.http.put(f"/api/documents/{doc}/annotations/{changed['id']}",
                                   headers=server.admin(), json={"content": changed})
        assert response.status_code == 200, response.text
        pdf = pikepdf.open(io.BytesIO(_get(server, f"/api/documents/{doc}/pdf")))
        opened.append(pdf)  # its objects live as long as the Pdf
        return {decode_text(a.NM): a for a in pdf.pages[0].Annots if "/NM" in a}

    opened: list[pikepdf.Pdf] = []

    moved = export_after(dict(stamp, bbox=[100, 100, 165.4, 133.7]))
    assert [float(v) for v in moved[stamp["id"]].Rect] != stamp_rect
    assert moved[stamp["id"]].AP.N.read_bytes() == pictures["/Stamp"]
    renoted = export_after(dict(attachment, note="a new note"))
    assert renoted[attachment["id"]].AP.N.read_bytes() == pictures["/FileAttachment"]
    restyled = export_after(dict(stamp, bbox=[100, 100, 165.4, 133.7], color="#0000FF"))
    drawn = restyled[stamp["id"]].AP.N.read_bytes()
    assert drawn != pictures["/Stamp"] and b"0 0 1 RG" in drawn


@contextlib.contextmanager
def _deadline(seconds: float):
    """Raise TimeoutError inside the body once it has run ``seconds``, so that drawing
    whose work grows without bound fails the test quickly instead of hanging it."""
    def expire(signum, frame):
        raise TimeoutError(f"still drawing after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _appearance(subtype: str, rect: list[float], content: dict, page_box=(0, 0, 612, 792),
                **entries) -> bytes:
    """The ``/AP /N`` content stream drawn (within 2 s) for a ``subtype`` annotation with
    ``rect`` and dictionary ``entries`` on a page whose MediaBox is ``page_box``."""
    pdf = pikepdf.new()
    pdf.add_blank_page()
    page = pdf.pages[0].obj
    page.MediaBox = pikepdf.Array(page_box)
    annot = pikepdf.Dictionary(Type=pikepdf.Name.Annot, Subtype=pikepdf.Name(subtype),
                               Rect=pikepdf.Array(rect), P=page, **entries)
    with _deadline(2.0):
        assert write_appearance(pdf, annot, content)
    return annot.AP.N.read_bytes()


def _shown_text(stream: bytes) -> list[bytes]:
    return re.findall(rb"\((.*?)\) Tj", stream)


def _free_text(value: str) -> dict:
    return {"type": "pspdfkit/text", "fontSize": 12, "text": {"format": "plain", "value": value}}


def test_a_100k_character_word_wraps_in_linear_time_and_only_fills_its_box():
    """Breaking a word wider than its box used to re-measure every prefix of it for each
    line (hours for 32k characters); lines below the box were all drawn, clipped."""
    stream = _appearance("/FreeText", [10, 10, 200, 110], _free_text("W" * 100_000))
    lines = _shown_text(stream)
    # 190 pt wide, 100 pt high: 16 "W"s (11.3 pt each at 12 pt) on each of 7 visible lines
    assert 5 <= len(lines) <= 8 and all(0 < len(line) <= 16 for line in lines), lines
    assert b"".join(lines) == b"W" * sum(map(len, lines))
    assert len(stream) < 2_000


def test_many_words_on_one_wide_line_wrap_in_linear_time():
    """Each word added to a line used to re-measure the whole line: quadratic in a
    line's length when the box is wide."""
    text = "ab " * 50_000
    stream = _appearance("/FreeText", [0, 0, 1e7, 100], _free_text(text))
    assert _shown_text(stream) == [text.rstrip().encode()]
    assert len(stream) < len(text) + 1_000


def test_free_text_draws_no_lines_below_its_box():
    text = "word " * 20_000  # 20,000 lines in a box 50 pt wide
    stream = _appearance("/FreeText", [10, 10, 60, 110], _free_text(text))
    lines = _shown_text(stream)
    assert 5 <= len(lines) <= 8 and set(lines) == {b"word"}
    assert len(stream) < 1_000


def _zigzag(stream: bytes) -> list[tuple[float, float]]:
    return [tuple(map(float, m)) for m in re.findall(rb"([-\d.]+) ([-\d.]+) [ml]\n", stream)]


@pytest.mark.parametrize("width", [1e7, 1e12])
def test_squiggly_on_a_huge_rect_is_drawn_on_the_page_only(width):
    """The zigzag's length used to follow the rect: 18 s and 16 MB at 10^7 pt, out of
    memory at 10^12. What lies outside the page is never shown."""
    stream = _appearance("/Squiggly", [0, 100, width, 120], {},
                         QuadPoints=pikepdf.Array([0, 120, width, 120, 0, 100, width, 100]))
    points = _zigzag(stream)
    assert 150 <= len(points) <= 250  # 612 pt in steps of 3 pt (1.5 times the 2 pt amplitude)
    assert all(0 <= x <= 612 and 100 <= y <= 120 for x, y in points)
    assert max(x for x, _ in points) == 612
    assert len(stream) < 10_000


def test_squiggly_zigzag_is_capped_on_a_huge_page_and_over_many_quads():
    huge = _appearance("/Squiggly", [0, 0, 1e12, 20], {}, page_box=(0, 0, 1e12, 100),
                       QuadPoints=pikepdf.Array([0, 20, 1e12, 20, 0, 0, 1e12, 0]))
    assert len(_zigzag(huge)) <= 2_001
    quads = [v for i in range(3_000) for v in (0, 120, 600, 120, 0, 100, 600, 100)]
    many = _appearance("/Squiggly", [0, 100, 600, 120], {}, QuadPoints=pikepdf.Array(quads))
    points = _zigzag(many)
    assert len(points) <= 10_000 + 2 * 3_000  # not 400 for each of the 3,000 quads
    assert sum(1 for x, y in points if x == 0) == 3_000  # every quad is still drawn


def test_a_long_stamp_title_is_cut():
    stream = _appearance("/Stamp", [10, 10, 210, 70], {"title": "W" * 100_000,
                                                       "subtitle": "long " * 20_000})
    rows = _shown_text(stream)
    assert len(rows) == 2 and all(row.endswith(b"\\205") for row in rows)  # "…" in WinAnsi
    assert len(stream) < 2_000
