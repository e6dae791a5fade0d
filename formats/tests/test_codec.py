"""The XFDF codec: Instant JSON records → XFDF → records give the same records, each field
in its XFDF place (not smuggled in the extension element), for every type both express;
XFDF written by other tools reads as the records it says; untrusted XML is refused."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layersync_formats import HANDOUT_KEYS, LS_NS, XFDF_NS, XfdfError, read_xfdf, unwritable, write_xfdf
from layersync_formats.values import LINE_CAPS, NOTE_ICONS, STAMP_TYPES, same_json
from layersync_formats.xfdf import ELEMENTS, FLAG_ORDER

#: Fields XFDF has no place for: they may (only they) travel in <ls:instant-json>.
NOT_IN_XFDF = {"customData", "isDrawnNaturally", "isSignature", "blendMode", "title", "subtitle",
               "pdfObjectId", "callout", "isFitting", "intensities",
               # implied by replies in XFDF; kept in the extension for a root written without them
               "isCommentThreadRoot"}

# numbers with at most 2 decimals (what PDF import writes has 4; the codec keeps 4)
coord = st.integers(0, 60000).map(lambda n: n / 100)
size = st.integers(1, 30000).map(lambda n: n / 100)
point = st.lists(coord, min_size=2, max_size=2)
bbox = st.tuples(coord, coord, size, size).map(list)
color = st.integers(0, 0xFFFFFF).map(lambda n: f"#{n:06X}")
text = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\r"), max_size=40)
word = st.text("abcdefghijklmnopqrstuvwxyz ÄéΩ漢", min_size=1, max_size=12)
date = st.datetimes(min_value=__import__("datetime").datetime(1990, 1, 1)).map(
    lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ"))
flags = st.sets(st.sampled_from(FLAG_ORDER), min_size=1).map(lambda s: [f for f in FLAG_ORDER if f in s])
ident = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)


@st.composite
def rich_text(draw) -> str:
    """XHTML in the canonical form the codec writes back (double-quoted attributes)."""
    parts = draw(st.lists(st.tuples(st.sampled_from(["", "b", "i", "span"]), word), min_size=1, max_size=4))
    inner = "".join(w if not tag else f'<{tag} style="color:#FF0000">{w}</{tag}>' if tag == "span"
                    else f"<{tag}>{w}</{tag}>" for tag, w in parts)
    return f"<p>{inner.replace('&', '&amp;')}</p>"


@st.composite
def common(draw, kind: str) -> dict:
    record_id = draw(ident)
    record = {"v": 2, "type": kind, "id": record_id, "name": record_id, "pageIndex": draw(st.integers(0, 3)),
              "bbox": draw(bbox), "opacity": draw(st.integers(0, 100)) / 100,
              "createdAt": draw(date), "updatedAt": draw(date)}
    for key, value in (("flags", flags), ("creatorName", word),
                       ("customData", st.dictionaries(word, st.integers() | word, max_size=3))):
        if draw(st.booleans()):
            record[key] = draw(value)
    return record


@st.composite
def records(draw) -> dict:
    kind = draw(st.sampled_from(sorted(ELEMENTS)))
    record = draw(common(kind))
    maybe = lambda key, value: record.update({key: draw(value)}) if draw(st.booleans()) else None  # noqa: E731
    if kind == "pspdfkit/note":
        record.update(text={"format": "plain", "value": draw(text)}, icon=draw(st.sampled_from(NOTE_ICONS)))
        maybe("color", color)
    elif kind == "pspdfkit/text":
        rich = draw(st.booleans())
        record.update(text={"format": "xhtml", "value": draw(rich_text())} if rich
                      else {"format": "plain", "value": draw(text)},
                      fontSize=draw(st.integers(4, 72)), font=draw(st.sampled_from(["Helvetica", "Times New Roman", "Helv"])),
                      fontColor=draw(color), horizontalAlign=draw(st.sampled_from(["left", "center", "right"])),
                      verticalAlign="top", rotation=draw(st.sampled_from([0, 90, 180, 270])))
        maybe("backgroundColor", color)
        maybe("fontStyle", st.sampled_from([["bold"], ["italic"], ["bold", "italic"]]))
    elif kind.startswith("pspdfkit/markup/"):
        record.update(rects=draw(st.lists(bbox, min_size=1, max_size=3)), color=draw(color))
        maybe("note", text)
    elif kind == "pspdfkit/ink":
        lines = draw(st.lists(st.lists(point, min_size=1, max_size=5), min_size=1, max_size=3))
        record.update(lines={"points": lines, "intensities": [[1.0] * len(p) for p in lines]},
                      lineWidth=draw(st.integers(1, 20)), strokeColor=draw(color))
        maybe("isDrawnNaturally", st.booleans())
        maybe("note", text)
    elif kind.startswith("pspdfkit/shape/"):
        maybe("strokeColor", color)
        maybe("fillColor", color)
        maybe("strokeWidth", st.integers(0, 10))
        maybe("strokeDashArray", st.lists(st.integers(1, 9), min_size=2, max_size=2))
        maybe("note", text)
        caps = st.fixed_dictionaries({}, optional={"start": st.sampled_from(sorted(LINE_CAPS)),
                                                   "end": st.sampled_from(sorted(LINE_CAPS))}).filter(bool)
        if kind == "pspdfkit/shape/line":
            record.update(startPoint=draw(point), endPoint=draw(point))
            maybe("lineCaps", caps)
        elif kind in ("pspdfkit/shape/polygon", "pspdfkit/shape/polyline"):
            record["points"] = draw(st.lists(point, min_size=2, max_size=6))
            if kind.endswith("polyline"):
                maybe("lineCaps", caps)
    elif kind == "pspdfkit/stamp":
        record.update(stampType=draw(st.sampled_from(STAMP_TYPES)), rotation=draw(st.sampled_from([0, 90])))
        maybe("color", color)
        maybe("title", word)
    elif kind == "pspdfkit/file":
        record.update(fileName=draw(word) + ".txt", iconName=draw(st.sampled_from(["PushPin", "Paperclip"])))
        maybe("description", text)
    return record


PAGES = [(0, 0, 612, 792), (10, 20, 605, 862), (0, 0, 842, 595), (-50, -50, 550, 750)]


def extension_keys(xfdf: str) -> dict[str, set[str]]:
    """Record id → the keys its <ls:instant-json> carries."""
    root = ET.fromstring(xfdf)
    found = {}
    for element in root.iter():
        ext = element.find(f"{{{LS_NS}}}instant-json")
        if ext is not None:
            carried = json.loads(ext.text)
            found[element.get("name")] = set(carried.get("set", {})) | set(carried.get("unset", []))
    return found


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records(), min_size=1, max_size=6, unique_by=lambda r: r["id"]))
def test_records_round_trip_through_xfdf_each_field_in_its_place(items):
    xfdf = write_xfdf(items, pages=PAGES)
    back = read_xfdf(xfdf.encode("utf-8"), pages=PAGES)
    assert back.records == items
    assert not back.is_command
    carried = extension_keys(xfdf)
    for record_id, keys in carried.items():
        assert keys <= NOT_IN_XFDF, (record_id, keys - NOT_IN_XFDF)


def _integral_to_int(value):
    """``value`` with every integral float an int (as a host writes ``"bbox": [10, 20, ...]``)."""
    if isinstance(value, dict):
        return {key: _integral_to_int(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integral_to_int(item) for item in value]
    return int(value) if type(value) is float and value.is_integer() else value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records(), min_size=1, max_size=6, unique_by=lambda r: r["id"]))
def test_integers_and_integral_floats_come_back_as_the_same_json_untyped(items):
    """XFDF numbers have no type: a record read back is the same as the one written under
    ``same_json(..., typed_numbers=False)``, the comparison both XFDF imports use, whether
    its integral numbers were ints or floats (no guess of the reader could give both back)."""
    for written in (items, _integral_to_int(items)):
        back = read_xfdf(write_xfdf(written, pages=PAGES).encode("utf-8"), pages=PAGES).records
        assert same_json(back, written, typed_numbers=False), (written, back)
    as_ints = _integral_to_int(items)
    if not same_json(as_ints, items):  # (some integral number): typed, one of the two differs
        back = read_xfdf(write_xfdf(as_ints, pages=PAGES).encode("utf-8"), pages=PAGES).records
        floats = read_xfdf(write_xfdf(items, pages=PAGES).encode("utf-8"), pages=PAGES).records
        assert not (same_json(back, as_ints) and same_json(floats, items))


@settings(max_examples=100, deadline=None)
@given(st.lists(records(), min_size=1, max_size=3, unique_by=lambda r: r["id"]),
       st.lists(st.tuples(ident, st.sampled_from([None, "one"]) | st.lists(word, min_size=2, max_size=3)),
                max_size=3, unique_by=lambda t: t[0]))
def test_comments_threads_and_form_field_values_round_trip(roots, fields):
    # an annotation with replies is its thread's root (Instant's isCommentThreadRoot; the
    # reader marks it from the replies, as the PDF import does)
    roots = [dict(r, isCommentThreadRoot=True) for r in roots]
    comments = [{"v": 2, "type": "pspdfkit/comment", "id": f"c{i}-{r['id']}", "rootId": r["id"],
                 "pageIndex": r["pageIndex"], "text": {"format": "plain", "value": f"reply {i}"},
                 "creatorName": "bob", "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-02T00:00:00Z"}
                for i, r in enumerate(roots)]
    values = {f"form.{name}": value for name, value in fields}
    xfdf = write_xfdf(roots + comments, pages=PAGES, form_field_values=values)
    back = read_xfdf(xfdf, pages=PAGES)
    assert back.records == roots + comments and back.form_field_values == values
    assert not any(k for k in extension_keys(xfdf).values() if k - NOT_IN_XFDF)


@pytest.mark.parametrize("flag", [None, False, True])
def test_a_roots_thread_flag_reads_back_as_stored(flag):
    """A root with replies reads back with the ``isCommentThreadRoot`` it was written with:
    absent (a root made through the API, ``create_comment``), ``false`` or ``true``. The
    reader marks a root from its replies (Acrobat's XFDF says nothing else) unless the
    element's ``<ls:instant-json>`` says otherwise; the writer says so whenever the record
    differs from what the replies imply (an exported XFDF applied again changes nothing)."""
    root = {"v": 2, "type": "pspdfkit/note", "id": "root", "name": "root", "pageIndex": 0, "bbox": [10, 10, 24, 24],
            "icon": "comment", "text": {"format": "plain", "value": "root"}}
    if flag is not None:
        root["isCommentThreadRoot"] = flag
    reply = {"v": 2, "type": "pspdfkit/comment", "id": "reply", "rootId": "root", "pageIndex": 0,
             "text": {"format": "plain", "value": "a reply"}}
    lone = {"v": 2, "type": "pspdfkit/note", "id": "lone", "name": "lone", "pageIndex": 0, "bbox": [40, 10, 24, 24],
            "icon": "comment", "text": {"format": "plain", "value": "no replies"}}
    xfdf = write_xfdf([root, reply, lone], pages=PAGES)
    back = read_xfdf(xfdf, pages=PAGES).records
    assert same_json(back, [root, reply, lone], typed_numbers=False), back
    assert extension_keys(xfdf).get("root", set()) == (set() if flag is True else {"isCommentThreadRoot"})
    # the same root without its reply in the file: no reply implies nothing, the record says it
    assert same_json(read_xfdf(write_xfdf([root], pages=PAGES), pages=PAGES).records, [root], typed_numbers=False)


def test_file_attachment_carries_its_bytes():
    data = b"\x00binary\xffdata"
    sha = __import__("hashlib").sha256(data).hexdigest()
    record = {"v": 2, "type": "pspdfkit/file", "id": "f1", "name": "f1", "pageIndex": 0, "bbox": [1, 2, 3, 4],
              "fileAttachmentId": sha, "fileName": "a.bin", "iconName": "PushPin"}
    xfdf = write_xfdf([record], attachments={sha: data})
    back = read_xfdf(xfdf)
    assert back.records == [record] and back.attachments == {sha: data}
    assert not extension_keys(xfdf)


def test_unmappable_types_are_left_out_and_named():
    link = {"v": 2, "type": "pspdfkit/link", "id": "l", "pageIndex": 0, "bbox": [0, 0, 1, 1],
            "action": {"type": "uri", "uri": "https://example.com"}}
    own = {"type": "myapp/pin", "id": "p"}
    assert unwritable([link, own]) == ["l", "p"]
    assert read_xfdf(write_xfdf([link, own])).records == []


ACROBAT = f"""<?xml version="1.0" encoding="UTF-8"?>
<xfdf xmlns="{XFDF_NS}" xml:space="preserve">
<annots>
<freetext color="#FFFFFF" creationdate="D:20240102030405+01'00'" date="D:20240102040506Z" flags="print"
  name="ft1" page="0" rect="100,600,300,650" subject="Text Box" title="Ann" width="0"
  defaultappearance="0 0 0 rg /Helv 12 Tf" justification="centered"
  defaultstyle="font: Helvetica,sans-serif 14.0pt; text-align:center; color:#00AA00">
<contents>Hello world</contents>
<contents-richtext><body xmlns="http://www.w3.org/1999/xhtml" xmlns:xfa="http://www.xfa.org/schema/xfa-data/1.0/" xfa:APIVersion="Acrobat:21.0.0" xfa:spec="2.0.2"><p dir="ltr">Hello <span style="font-weight:bold">world</span></p></body></contents-richtext>
</freetext>
<highlight color="#FFFF00" flags="print" name="hl1" page="0" rect="10,700,110,712" coords="10,712,110,712,10,700,110,700" title="Ann"><contents>look</contents></highlight>
<text name="r1" page="0" inreplyto="hl1" rect="10,700,110,712" title="Bob" flags="print"><contents>agreed</contents></text>
<text name="r2" page="0" inreplyto="r1" rect="10,700,110,712" title="Ann" flags="print"><contents>thanks</contents></text>
<caret name="ca1" page="0" rect="1,2,3,4" flags="print" inreplyto="hl1" replyType="group"/>
<ink color="#FF0000" flags="print" name="ink1" page="0" rect="0,0,100,100" width="2"><inklist><gesture>10,782;20,772</gesture></inklist></ink>
</annots>
<fields><field name="name"><value>Ann</value></field><field name="addr"><field name="city"><value>Bern</value></field></field></fields>
</xfdf>"""


def test_acrobat_style_xfdf_reads_as_the_records_it_says():
    changes = read_xfdf(ACROBAT.encode("utf-8"))
    by_id = {r["id"]: r for r in changes.records}
    ft = by_id["ft1"]
    assert ft["type"] == "pspdfkit/text" and ft["bbox"] == [100, 142, 200, 50]
    # /DS (what viewers draw) over /DA: green 14 pt, not /DA's black 12 pt
    assert (ft["font"], ft["fontSize"], ft["fontColor"]) == ("Helvetica", 14, "#00AA00")
    assert ft["text"] == {"format": "xhtml",
                          "value": '<p dir="ltr">Hello <span style="font-weight:bold">world</span></p>'}
    assert ft["horizontalAlign"] == "center" and ft["backgroundColor"] == "#FFFFFF"
    assert ft["createdAt"] == "2024-01-02T02:04:05Z" and ft["creatorName"] == "Ann"
    assert by_id["hl1"]["rects"] == [[10, 80, 100, 12]] and by_id["hl1"]["note"] == "look"
    # replies are comments of the thread's root, a reply to a reply included
    assert [(by_id[c]["type"], by_id[c]["rootId"]) for c in ("r1", "r2")] == [("pspdfkit/comment", "hl1")] * 2
    assert by_id["hl1"]["isCommentThreadRoot"] is True and "isCommentThreadRoot" not in by_id["ink1"]
    # a caret (no Instant type) is kept as the element itself and written back unchanged
    assert by_id["ca1"]["type"] == "xfdf/caret"
    again = read_xfdf(write_xfdf([by_id["ca1"]]))
    assert again.records == [by_id["ca1"]]
    assert by_id["ink1"]["lines"]["points"] == [[[10, 10], [20, 20]]]
    assert changes.form_field_values == {"name": "Ann", "addr.city": "Bern"}


def test_command_document():
    changes = read_xfdf(f"""<xfdf xmlns="{XFDF_NS}"><add><square name="s1" page="0" rect="0,0,10,10"/></add>
        <modify><circle name="c1" page="1" rect="0,0,10,10" color="#112233"/></modify>
        <delete><id page="0">gone1</id><id page="2">gone2</id></delete></xfdf>""")
    assert changes.is_command
    assert [r["id"] for r in changes.added] == ["s1"] and [r["id"] for r in changes.modified] == ["c1"]
    assert changes.modified[0]["strokeColor"] == "#112233" and changes.deleted == ["gone1", "gone2"]


def test_ownership_and_permission_flags_never_come_from_a_file():
    """XFDF carries content only: ``group``, ``createdBy``, ``updatedBy`` and the permission
    flags in an ``<ls:instant-json>`` (an annotation's or the document's records) are dropped,
    whoever wrote the file (here: the writer itself, given a record that carries them)."""
    handed_out = {"createdBy": "lead", "updatedBy": "lead", "group": "public", "isEditable": True,
                  "isDeletable": True, "canReply": True, "isFillable": True, "canSetGroup": True}
    assert set(handed_out) == set(HANDOUT_KEYS)
    note = {"v": 2, "type": "pspdfkit/note", "id": "n1", "name": "n1", "pageIndex": 0, "bbox": [10, 10, 24, 24],
            "icon": "comment", "text": {"format": "plain", "value": "draft"}, "customData": {"k": 1}}
    field = {"v": 1, "type": "pspdfkit/form-field/text", "id": "f1", "name": "f1", "annotationIds": ["w1"]}
    written = write_xfdf([dict(note, **handed_out), dict(field, **handed_out)])
    assert '"group"' in written  # the file does carry them ...
    records = {r["id"]: r for r in read_xfdf(written).records}
    assert not set(HANDOUT_KEYS) & set(records["n1"]), records["n1"]  # ... the reader drops them
    assert not set(HANDOUT_KEYS) & set(records["f1"]), records["f1"]
    assert records["n1"]["customData"] == {"k": 1} and records["f1"]["name"] == "f1"  # content stays
    crafted = _annots(f'<square name="s" page="0" rect="0,0,1,1"><ls:instant-json xmlns:ls="{LS_NS}">'
                      '{"set": {"group": "public", "createdBy": "x", "isEditable": true}, "unset": ["group"]}'
                      '</ls:instant-json></square>')
    assert not set(HANDOUT_KEYS) & set(read_xfdf(crafted).records[0])


XXE = """<?xml version="1.0"?>
<!DOCTYPE xfdf [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<xfdf xmlns="http://ns.adobe.com/xfdf/"><annots><text name="x" page="0" rect="0,0,1,1"><contents>&xxe;</contents></text></annots></xfdf>"""
LAUGHS = ('<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
          + "".join(f'<!ENTITY lol{i} "{("&lol%s;" % (i - 1 if i > 1 else "")) * 10}">' for i in range(1, 10))
          + ']>\n<xfdf xmlns="http://ns.adobe.com/xfdf/"><annots><text name="x" page="0" rect="0,0,1,1">'
            '<contents>&lol9;</contents></text></annots></xfdf>')


DEEP = (f'<xfdf xmlns="{XFDF_NS}"><annots><freetext name="d" page="0" rect="0,0,1,1"><contents-richtext><body>'
        + "<b>" * 100000 + "x" + "</b>" * 100000 + "</body></contents-richtext></freetext></annots></xfdf>")
DEEP_JSON = (f'<xfdf xmlns="{XFDF_NS}"><annots><square name="s" page="0" rect="0,0,1,1">'
             f'<ls:instant-json xmlns:ls="{LS_NS}">' + "[" * 100000 + "]" * 100000 + "</ls:instant-json>"
             "</square></annots></xfdf>")


@pytest.mark.parametrize("document", [XXE, LAUGHS, "<xfdf><annots>", "<pdf/>", "\x00\x01", "", DEEP, DEEP_JSON],
                         ids=["external-entity", "billion-laughs", "not-well-formed", "not-xfdf", "binary", "empty",
                              "deep-nesting", "deep-json"])
def test_untrusted_xml_is_refused(document):
    with pytest.raises(XfdfError):
        read_xfdf(document.encode("utf-8"))


def _annots(inner: str) -> str:
    return f'<xfdf xmlns="{XFDF_NS}"><annots>{inner}</annots></xfdf>'


HOSTILE = {  # found by trying the server as an attacker would; each was stored or a 500 before
    "unknown-encoding": ('<?xml version="1.0" encoding="x-nonsense"?>'
                         + _annots('<square name="s" page="0" rect="0,0,1,1"/>')),
    "foreign-namespace": '<xfdf xmlns="http://example.com/"><annots><square name="s" page="0" rect="0,0,1,1"/>'
                         "</annots></xfdf>",
    "nan-rect": _annots('<square name="s" page="0" rect="NaN,0,1,1"/>'),
    "inf-rect": _annots('<square name="s" page="0" rect="0,0,inf,1"/>'),
    "rect-overflowing-a-width": _annots('<square name="s" page="0" rect="-1e308,0,1e308,1"/>'),
    "huge-width": _annots('<square name="s" page="0" rect="0,0,1,1" width="1e400"/>'),
    "nan-coords": _annots('<highlight name="h" page="0" rect="0,0,9,9" coords="NaN,1,2,3,4,5,6,7"/>'),
    "nan-in-extension": _annots(f'<square name="s" page="0" rect="0,0,1,1"><ls:instant-json xmlns:ls="{LS_NS}">'
                                '{"set": {"opacity": NaN}}</ls:instant-json></square>'),
    "infinity-in-extension": _annots(f'<square name="s" page="0" rect="0,0,1,1"><ls:instant-json '
                                     f'xmlns:ls="{LS_NS}">{{"set": {{"strokeWidth": 1e999}}}}</ls:instant-json>'
                                     "</square>"),
    "page-past-the-last": _annots('<square name="s" page="3" rect="0,0,1,1"/>'),
    "page-past-int64": _annots('<square name="s" page="99999999999999999999" rect="0,0,1,1"/>'),
    "duplicate-names": _annots('<square name="s" page="0" rect="0,0,1,1"/><circle name="s" page="0" rect="0,0,1,1"/>'),
    "reply-cycle": f'<xfdf xmlns="{XFDF_NS}"><add><text name="a" page="0" inreplyto="b" rect="0,0,1,1"/>'
                   '<text name="b" page="0" inreplyto="a" rect="0,0,1,1"/></add></xfdf>',
    "reply-to-itself": _annots('<text name="a" page="0" inreplyto="a" rect="0,0,1,1"/>'),
}


@pytest.mark.parametrize("document", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_values_are_refused_not_stored(document):
    with pytest.raises(XfdfError):
        read_xfdf(document.encode("utf-8"), pages=[(0, 0, 612, 792)])


def test_pages_bound_only_when_known_and_an_xfdf_without_namespace_reads():
    document = _annots('<square name="s" page="3" rect="0,0,1,1"/>').replace(f' xmlns="{XFDF_NS}"', "")
    assert read_xfdf(document).records[0]["pageIndex"] == 3  # no PDF at hand: Letter, no bound
    assert read_xfdf(document, pages=[(0, 0, 612, 792)] * 4).records[0]["pageIndex"] == 3


def test_refusal_says_why():
    with pytest.raises(XfdfError, match="DTD"):
        read_xfdf(XXE)
