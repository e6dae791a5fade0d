"""Export → re-import gives back the records (issue 15), as properties.

1. Random records of every type the server writes as PDF annotations (note, free text,
   the four markups, ink, rectangle, ellipse, line, polygon, polyline, stamp, file, link)
   and random comment threads on notes and markups: :func:`export_pdf` into a blank
   PDF, :func:`import_pdf` again, and every field of every record is back — text and
   rich text exactly, bbox, rects and points within 0.01 pt, colours, customData, and
   the thread (rootId, isCommentThreadRoot, order).
2. Every record of each imported corpus PDF (and the Acrobat-style fixture) under a new
   id, so export writes each annotation anew instead of keeping the original: the
   re-import is the same records, field for field.

Hypothesis runs ``max_examples`` = 50 with no deadline (a few seconds in ``make test``).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pikepdf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS
from layersync_server.pdf.export import export_pdf
from layersync_server.pdf.import_ import LINE_ENDINGS, NOTE_ICONS, STAMP_TYPES, import_pdf

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: Page size of the blank PDF the random records are exported into (a MediaBox that
#: does not start at 0,0, to catch origin mistakes).
MEDIA_BOX = [-20, 30, 592, 822]
PAGES = 2
GEOMETRY = ("bbox", "rects", "startPoint", "endPoint", "points", "lines")
TOLERANCE = 0.01
ATTACHMENT = b"attachment bytes \x00\xff" * 3
ATTACHMENT_ID = hashlib.sha256(ATTACHMENT).hexdigest()


def _blank_pdf() -> bytes:
    pdf = pikepdf.new()
    for _ in range(PAGES):
        pdf.add_blank_page(page_size=(612, 792))
        pdf.pages[-1].obj.MediaBox = pikepdf.Array(MEDIA_BOX)
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


BLANK = _blank_pdf()


# --- comparison ----------------------------------------------------------------------------

def _close(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) \
            and not isinstance(a, bool) and not isinstance(b, bool):
        return abs(a - b) <= TOLERANCE
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def assert_same_records(expected: list[dict], actual: list[dict]) -> None:
    """Same ids, and each record field for field: geometry within 0.01 pt, ``flags`` as a
    set, ``name`` ignored (export writes ``/NM`` = id), everything else exactly."""
    got = {r["id"]: r for r in actual}
    assert sorted(got) == sorted(r["id"] for r in expected)
    for want in expected:
        have = got[want["id"]]
        keys = (want.keys() | have.keys()) - {"name"}
        for key in sorted(keys):
            a, b = have.get(key), want.get(key)
            if key in GEOMETRY:
                assert _close(a, b), (want["id"], key, a, b)
            elif key == "flags":
                assert set(a or []) == set(b or []), (want["id"], key, a, b)
            else:
                assert a == b, (want["id"], key, a, b)
    assert _threads(actual) == _threads(expected)


def _threads(records: list[dict]) -> dict[str, list[str]]:
    """root id → the ids of its comments, in order (threads of different pages may
    come in another order: import reads page by page)."""
    threads: dict[str, list[str]] = {}
    for r in records:
        if r.get("type") == "pspdfkit/comment":
            threads.setdefault(r["rootId"], []).append(r["id"])
    return threads


# --- random records ------------------------------------------------------------------------

coordinate = st.integers(min_value=0, max_value=50000).map(lambda v: v / 100)  # 0..500 pt, 2 decimals
point = st.tuples(coordinate, coordinate).map(list)
size = st.integers(min_value=100, max_value=20000).map(lambda v: v / 100)
bbox = st.tuples(coordinate, coordinate, size, size).map(list)
color = st.integers(min_value=0, max_value=0xFFFFFF).map(lambda v: f"#{v:06X}")
iso = st.integers(min_value=0, max_value=4_000_000_000).map(
    lambda s: __import__("datetime").datetime.fromtimestamp(s, __import__("datetime").timezone.utc)
    .strftime("%Y-%m-%dT%H:%M:%SZ"))
#: Any text but surrogates and control characters other than newline and tab.
words = st.text(st.characters(blacklist_categories=("Cs", "Cc"), whitelist_characters="\n\t"), max_size=40)
nonempty_words = words.filter(lambda s: s.strip() != "")
xml_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20).map(
    lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
run = st.one_of(xml_text, xml_text.map(lambda s: f"<b>{s}</b>"), xml_text.map(lambda s: f"<i>{s}</i>"),
                xml_text.map(lambda s: f'<span style="font-weight:bold">{s}</span>'), st.just("<br/>"))
xhtml = st.lists(st.lists(run, max_size=4).map("".join), min_size=1, max_size=3).map(
    lambda ps: "".join(f'<p dir="ltr">{p}</p>' for p in ps))
text_value = st.one_of(words.map(lambda v: {"format": "plain", "value": v}),
                       xhtml.map(lambda v: {"format": "xhtml", "value": v}))
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**9, 10**9), words)
custom_data = st.dictionaries(words, st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(words, inner, max_size=3)), max_leaves=8), max_size=4)
flag_names = st.lists(st.sampled_from(["hidden", "noZoom", "noRotate", "readOnly", "locked",
                                       "lockedContents", "noPrint", "invisible", "noView"]), unique=True)


@st.composite
def common(draw, kind: str, page: int, record_id: str) -> dict:
    created = draw(iso)
    record = {"v": 2, "id": record_id, "type": kind, "pageIndex": page, "bbox": draw(bbox),
              "opacity": draw(st.integers(0, 100)) / 100, "createdAt": created,
              "updatedAt": draw(st.one_of(st.just(created), iso))}
    if draw(st.booleans()):
        record["creatorName"] = draw(nonempty_words)
    if flags := draw(flag_names):
        record["flags"] = flags
    if draw(st.booleans()):
        record["customData"] = draw(custom_data)
    return record


def _lines(draw):
    points = draw(st.lists(st.lists(point, min_size=1, max_size=5), min_size=1, max_size=3))
    return {"points": points, "intensities": [[1.0] * len(p) for p in points]}


@st.composite
def annotation(draw, record_id: str) -> dict:
    kind = draw(st.sampled_from(KINDS))
    record = draw(common(kind, draw(st.integers(0, PAGES - 1)), record_id))
    note = {} if kind in ("pspdfkit/note", "pspdfkit/text", "pspdfkit/link", "pspdfkit/file") \
        else draw(st.one_of(st.just({}), nonempty_words.map(lambda n: {"note": n})))
    record.update(note)
    if kind == "pspdfkit/note":
        record.update(text=draw(text_value), icon=draw(st.sampled_from(NOTE_ICONS)))
        if draw(st.booleans()):
            record["color"] = draw(color)
    elif kind == "pspdfkit/text":
        record.update(text=draw(text_value), font=draw(st.sampled_from(["Helvetica", "Courier", "TimesRoman"])),
                      fontSize=draw(st.integers(4, 72)), fontColor=draw(color),
                      horizontalAlign=draw(st.sampled_from(["left", "center", "right"])),
                      verticalAlign="top", rotation=draw(st.sampled_from([0, 90, 180, 270])))
        if draw(st.booleans()):
            record["backgroundColor"] = draw(color)
    elif kind.startswith("pspdfkit/markup/"):
        record.update(rects=draw(st.lists(bbox, min_size=1, max_size=3)), color=draw(color))
    elif kind == "pspdfkit/ink":
        record.update(lines=_lines(draw), lineWidth=draw(st.integers(1, 2000)) / 100, strokeColor=draw(color),
                      isDrawnNaturally=False, isSignature=False)
    elif kind in ("pspdfkit/shape/rectangle", "pspdfkit/shape/ellipse", "pspdfkit/shape/line",
                  "pspdfkit/shape/polygon", "pspdfkit/shape/polyline"):
        record.update(strokeColor=draw(color), strokeWidth=draw(st.integers(0, 2000)) / 100)
        if draw(st.booleans()):
            record["fillColor"] = draw(color)
        if kind == "pspdfkit/shape/line":
            record.update(startPoint=draw(point), endPoint=draw(point), lineCaps=draw(st.fixed_dictionaries(
                {}, optional={"start": st.sampled_from(CAPS), "end": st.sampled_from(CAPS)})))
        elif kind in ("pspdfkit/shape/polygon", "pspdfkit/shape/polyline"):
            record["points"] = draw(st.lists(point, min_size=2, max_size=6))
    elif kind == "pspdfkit/stamp":
        record["stampType"] = draw(st.sampled_from(STAMP_TYPES))
        if draw(st.booleans()):
            record["color"] = draw(color)
    elif kind == "pspdfkit/file":
        description = draw(nonempty_words)
        record.update(fileAttachmentId=ATTACHMENT_ID, fileName=draw(nonempty_words), description=description,
                      note=description, iconName=draw(st.sampled_from(["PushPin", "Paperclip", "Graph", "Tag"])))
    elif kind == "pspdfkit/link":
        record["action"] = {"type": "uri", "uri": "https://example.com/" + draw(st.text("abcxyz019/-_", max_size=12))}
    return record


@st.composite
def comment(draw, root: dict, record_id: str) -> dict:
    created = draw(iso)
    record = {"v": 2, "id": record_id, "type": "pspdfkit/comment", "rootId": root["id"],
              "pageIndex": root["pageIndex"], "text": draw(text_value), "createdAt": created,
              "updatedAt": draw(st.one_of(st.just(created), iso))}
    if draw(st.booleans()):
        record["creatorName"] = draw(nonempty_words)
    if draw(st.booleans()):
        record["customData"] = draw(custom_data)
    return record


@st.composite
def layer(draw) -> list[dict]:
    roots = [draw(annotation(f"r{i:02d}")) for i in range(draw(st.integers(1, 8)))]
    comments = []
    for root in roots:
        if root["type"] == "pspdfkit/note" or root["type"].startswith("pspdfkit/markup/"):
            for j in range(draw(st.integers(0, 3))):
                comments.append(draw(comment(root, f"{root['id']}c{j}")))
            if any(c["rootId"] == root["id"] for c in comments):
                root["isCommentThreadRoot"] = True
    return roots + comments


KINDS = ["pspdfkit/note", "pspdfkit/text", "pspdfkit/markup/highlight", "pspdfkit/markup/underline",
         "pspdfkit/markup/strikeout", "pspdfkit/markup/squiggly", "pspdfkit/ink",
         "pspdfkit/shape/rectangle", "pspdfkit/shape/ellipse", "pspdfkit/shape/line",
         "pspdfkit/shape/polygon", "pspdfkit/shape/polyline", "pspdfkit/stamp", "pspdfkit/file",
         "pspdfkit/link"]
CAPS = sorted(v for v in LINE_ENDINGS.values() if v != "none")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layer())
def test_random_records_export_and_import_unchanged(records):
    result = export_pdf(BLANK, records, {ATTACHMENT_ID: ATTACHMENT})
    assert result.skipped == [] and result.written == len(records)
    again = import_pdf(result.pdf)
    assert_same_records(records, again.records)
    if any(r["type"] == "pspdfkit/file" for r in records):
        assert again.attachments == {ATTACHMENT_ID: ATTACHMENT}


# --- every record of an imported layer rewritten -----------------------------------------

def _renamed(records: list[dict]) -> list[dict]:
    """Records under new ids (widgets keep theirs: export keeps, never writes, them)."""
    out = []
    for r in records:
        if r["type"] == "pspdfkit/widget":
            out.append(r)
            continue
        copy = dict(r, id="rw" + r["id"][2:] if len(r["id"]) == 26 else "rw-" + r["id"])
        copy.pop("name", None)
        if isinstance(copy.get("rootId"), str):
            root = copy["rootId"]
            copy["rootId"] = "rw" + root[2:] if len(root) == 26 else "rw-" + root
        out.append(copy)
    return out


REWRITE_FILES = sorted([*(p for p in CORPUS.glob("*.pdf")), FIXTURES / "acrobat-style-review.pdf"])


@pytest.mark.parametrize("path", REWRITE_FILES, ids=[p.name for p in REWRITE_FILES])
def test_every_record_of_an_imported_layer_rewritten_comes_back(path):
    source = path.read_bytes()
    imported = import_pdf(source)
    copies = _renamed(imported.records)
    result = export_pdf(source, copies, imported.attachments)
    assert result.skipped == []
    assert result.written == sum(r["type"] != "pspdfkit/widget" for r in copies)
    assert_same_records(copies, import_pdf(result.pdf).records)
