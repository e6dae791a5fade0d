"""XFDF (ISO 19444-1) ↔ Instant JSON records, both directions.

The mapping, field by field, and what XFDF cannot carry are in docs/protocol.md
("XFDF and Instant JSON"). In short:

* Coordinates: XFDF uses PDF user space (origin bottom left), Instant JSON the page's
  CropBox with a top-left origin; :class:`PageBox` converts, given each page's CropBox
  (the PDF knows it, XFDF does not; US Letter when not given).
* Every record field XFDF has a place for is written there; the fields it has no place
  for (``customData``, ink ``intensities``, …) travel in one LayerSync extension element
  ``<ls:instant-json>`` (namespace :data:`LS_NS`) holding a JSON object, which other XFDF
  readers ignore. So records → XFDF → records is lossless, and an XFDF written by
  Acrobat, Apryse or Foxit reads as the records those fields say.
* XML from outside is untrusted: it is parsed by ``defusedxml`` with DTDs forbidden,
  so external entities and entity expansion (billion laughs) are refused with
  :class:`XfdfError` before anything is read.
"""

from __future__ import annotations

import hashlib
from copy import deepcopy
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping, Sequence

import defusedxml
import defusedxml.ElementTree as SafeET

#: The XFDF namespace (ISO 19444-1).
XFDF_NS = "http://ns.adobe.com/xfdf/"
#: XHTML, the namespace of ``<contents-richtext>``'s ``<body>``.
XHTML_NS = "http://www.w3.org/1999/xhtml"
#: LayerSync's extension namespace (``<ls:instant-json>``).
LS_NS = "https://layersync.dev/ns/xfdf/1"
#: The media type of an XFDF document (Document Engine's ``document.xfdf``).
MEDIA_TYPE = "application/vnd.adobe.xfdf"
#: A page's CropBox when the caller gives none: US Letter, in points.
LETTER = (0.0, 0.0, 612.0, 792.0)

#: Instant ``type`` ↔ XFDF element, for the types both can express.
ELEMENTS = {
    "pspdfkit/note": "text", "pspdfkit/text": "freetext",
    "pspdfkit/markup/highlight": "highlight", "pspdfkit/markup/underline": "underline",
    "pspdfkit/markup/strikeout": "strikeout", "pspdfkit/markup/squiggly": "squiggly",
    "pspdfkit/ink": "ink", "pspdfkit/shape/rectangle": "square",
    "pspdfkit/shape/ellipse": "circle", "pspdfkit/shape/line": "line",
    "pspdfkit/shape/polygon": "polygon", "pspdfkit/shape/polyline": "polyline",
    "pspdfkit/stamp": "stamp", "pspdfkit/file": "fileattachment",
}
TYPES = {element: instant for instant, element in ELEMENTS.items()}
#: XFDF annotation elements Instant JSON has no type for: kept as ``xfdf/<element>``
#: records holding the element (``xfdf`` field), written back unchanged.
RAW_ELEMENTS = ("caret", "sound", "link", "redact", "polygonline", "movie", "widget", "popup")

#: Instant ``flags`` ↔ XFDF ``flags`` words (XFDF has ``print``, Instant ``noPrint``).
FLAGS = {"hidden": "hidden", "invisible": "invisible", "noZoom": "nozoom",
         "noRotate": "norotate", "noView": "noview", "readOnly": "readonly", "locked": "locked",
         "toggleNoView": "togglenoview", "lockedContents": "lockedcontents"}
#: Canonical order of Instant flags as read from XFDF (the record schema's enum order).
FLAG_ORDER = ("noPrint", "noZoom", "noRotate", "noView", "hidden", "invisible", "readOnly",
              "locked", "toggleNoView", "lockedContents")
NOTE_ICONS = ("comment", "rightPointer", "rightArrow", "check", "circle", "cross", "insert",
              "newParagraph", "note", "paragraph", "help", "star", "key")
#: Instant line caps ↔ PDF line ending names (XFDF ``head`` = start, ``tail`` = end).
LINE_CAPS = {"square": "Square", "circle": "Circle", "diamond": "Diamond",
             "openArrow": "OpenArrow", "closedArrow": "ClosedArrow", "butt": "Butt",
             "reverseOpenArrow": "ROpenArrow", "reverseClosedArrow": "RClosedArrow",
             "slash": "Slash"}
JUSTIFICATION = {"left": "left", "center": "centered", "right": "right"}
STAMP_TYPES = ("Accepted", "Approved", "AsIs", "Completed", "Confidential", "Departmental", "Draft",
               "Experimental", "Expired", "Final", "ForComment", "ForPublicRelease", "InformationOnly",
               "InitialHere", "NotApproved", "NotForPublicRelease", "PreliminaryResults", "Rejected",
               "Revised", "SignHere", "Sold", "TopSecret", "Void", "Witness", "Custom")

_COLOR = re.compile(r"#[0-9A-Fa-f]{6}")
_DATE = re.compile(r"^D?:?(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?\s*([Zz+\-])?\s*(\d{2})?'?(\d{2})?'?")
_DA_FONT = re.compile(r"/?([^\s/]+)\s+([\d.]+)\s+Tf")
_DA_RGB = re.compile(r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+rg")
_DA_GRAY = re.compile(r"([\d.]+)\s+g(?:\s|$)")


#: Deepest element nesting read (XFDF needs about 8; rich text a few more).
MAX_DEPTH = 64


class XfdfError(ValueError):
    """The bytes are not an XFDF document this codec reads: not well-formed XML, a DTD
    or entity (refused: external entities, entity expansion), or not ``<xfdf>``."""


PageBoxes = Mapping[int, Sequence[float]] | Sequence[Sequence[float]] | None


class PageBox:
    """One page's CropBox ``(left, bottom, right, top)`` in PDF points; converts between
    PDF user space and Instant JSON's top-left-origin coordinates (4 decimals)."""

    def __init__(self, box: Sequence[float] = LETTER):
        left, bottom, right, top = (float(v) for v in box)
        self.x0, self.y1 = min(left, right), max(bottom, top)

    @staticmethod
    def of(pages: PageBoxes, page_index: int) -> "PageBox":
        """The box of ``page_index`` in ``pages`` (mapping or sequence); Letter when absent."""
        box = None
        if isinstance(pages, Mapping):
            box = pages.get(page_index)
        elif pages is not None and 0 <= page_index < len(pages):
            box = pages[page_index]
        return PageBox(box if box is not None else LETTER)

    def point_to_pdf(self, point: Sequence[float]) -> tuple[float, float]:
        return _r(float(point[0]) + self.x0), _r(self.y1 - float(point[1]))

    def point_to_instant(self, x: float, y: float) -> list[float]:
        return [_r(x - self.x0), _r(self.y1 - y)]

    def bbox_to_rect(self, bbox: Sequence[float]) -> list[float]:
        left, top, width, height = (float(v) for v in bbox)
        x, y_top = left + self.x0, self.y1 - top
        return [_r(x), _r(y_top - height), _r(x + width), _r(y_top)]

    def rect_to_bbox(self, rect: Sequence[float]) -> list[float]:
        x1, y1, x2, y2 = rect
        left, right, bottom, top = min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)
        return [_r(left - self.x0), _r(self.y1 - top), _r(right - left), _r(top - bottom)]


@dataclass
class XfdfChanges:
    """What an XFDF document says (:func:`read_xfdf`).

    A plain XFDF (``<annots>``) puts every annotation in ``added``, and ``is_command``
    is False: each creates the record or replaces the one with its id. A command
    document (``<add>``, ``<modify>``, ``<delete>``) sets ``is_command``; ``added`` must
    be new, ``modified`` must exist, ``deleted`` are record ids.
    """

    added: list[dict] = field(default_factory=list)
    modified: list[dict] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    #: ``<fields>``: fully qualified field name → value (str, None, or list of str).
    form_field_values: dict[str, Any] = field(default_factory=dict)
    #: Embedded files of ``<fileattachment><data>``: SHA-256 hex (``fileAttachmentId``) → bytes.
    attachments: dict[str, bytes] = field(default_factory=dict)
    is_command: bool = False

    @property
    def records(self) -> list[dict]:
        """``added`` then ``modified`` (every record the document carries)."""
        return self.added + self.modified


# ---------------------------------------------------------------- small values

def _r(value: float) -> float:
    return round(float(value), 4)


def _num(value: float) -> str:
    r = _r(value)
    return str(int(r)) if r.is_integer() else repr(r)


def _nums(text: str | None) -> list[float]:
    if not text:
        return []
    try:
        return [_r(float(v)) for v in re.split(r"[\s,;]+", text.strip()) if v]
    except ValueError:
        raise XfdfError(f"not a list of numbers: {text[:60]!r}") from None


def _maybe_int(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def iso_to_pdf_date(iso: str) -> str | None:
    """``2025-12-14T20:22:08Z`` (any ISO 8601 with offset) → ``D:20251214202208Z``."""
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return moment.strftime("D:%Y%m%d%H%M%SZ")


def pdf_date_to_iso(text: str | None) -> str | None:
    """``D:20251214212208+01'00'`` → ``2025-12-14T20:22:08Z``; None when unparsable."""
    match = _DATE.match(text.strip()) if text else None
    if not match:
        return None
    year, month, day, hour, minute, second, sign, off_h, off_m = match.groups()
    try:
        moment = datetime(int(year), int(month or 1), int(day or 1), int(hour or 0),
                          int(minute or 0), int(second or 0), tzinfo=timezone.utc)
    except ValueError:
        return None
    if sign in ("+", "-"):
        offset = timedelta(hours=int(off_h or 0), minutes=int(off_m or 0))
        moment = moment - offset if sign == "+" else moment + offset
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _color(value: str | None) -> str | None:
    return value.upper() if isinstance(value, str) and _COLOR.fullmatch(value) else None


def _rgb(color: str) -> list[float]:
    return [round(int(color[i:i + 2], 16) / 255, 4) for i in (1, 3, 5)]


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _ns(tag: str) -> str:
    return tag[1:].split("}", 1)[0] if isinstance(tag, str) and tag.startswith("{") else ""


# ---------------------------------------------------------------- rich text

def _escape(text: str, attribute: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace('"', "&quot;") if attribute else text


def _serialize_inner(element: ET.Element) -> str:
    """The content of ``element`` as XHTML text: local tag names, attributes in document
    order with double quotes (the form :func:`_rich_body` reads back unchanged)."""
    parts = [_escape(element.text or "")]
    for child in element:
        attrs = "".join(f' {_local(k)}="{_escape(v, True)}"' for k, v in child.attrib.items()
                        if _ns(k) in ("", XHTML_NS))
        inner = _serialize_inner(child)
        name = _local(child.tag)
        parts.append(f"<{name}{attrs}>{inner}</{name}>" if inner or len(child) else f"<{name}{attrs}/>")
        parts.append(_escape(child.tail or ""))
    return "".join(parts)


def _rich_body(value: str) -> ET.Element | None:
    """``value`` (Instant JSON xhtml) as a ``<body>`` element, or None when not well-formed."""
    try:
        parsed = SafeET.fromstring(f'<body xmlns="{XHTML_NS}">{value}</body>', forbid_dtd=True)
    except (ET.ParseError, defusedxml.DefusedXmlException):
        return None
    body = ET.Element("body", {"xmlns": XHTML_NS, "xmlns:xfa": "http://www.xfa.org/schema/xfa-data/1.0/",
                               "xfa:APIVersion": "LayerSync:1.0", "xfa:spec": "2.0.2"})
    _copy_children(parsed, body)
    return body


def _copy_children(source: ET.Element, target: ET.Element) -> None:
    target.text = source.text
    for child in source:
        copy = ET.SubElement(target, _local(child.tag),
                             {_local(k): v for k, v in child.attrib.items() if _ns(k) in ("", XHTML_NS)})
        _copy_children(child, copy)
        copy.tail = child.tail


# ---------------------------------------------------------------- writing

def write_xfdf(records: Iterable[Mapping[str, Any]], *, pages: PageBoxes = None,
               form_field_values: Mapping[str, Any] | None = None,
               attachments: Mapping[str, bytes] | None = None) -> str:
    """An XFDF document of ``records`` (Instant JSON v2 annotations and comments).

    Args:
        records: record contents; those of a type XFDF cannot express (links, widgets,
            images, redactions, an application's own types) are left out, see
            :func:`unwritable`.
        pages: each page's CropBox ``(left, bottom, right, top)`` by page index
            (sequence or mapping); Letter for pages not given.
        form_field_values: ``<fields>``: field name → str, None or list of str.
        attachments: ``fileAttachmentId`` → bytes, embedded in ``<fileattachment>``.

    Returns:
        The document as text (UTF-8 XML declaration; encode as UTF-8 to send).
    """
    records = [dict(r) for r in records]
    by_id = {r.get("id"): r for r in records if r.get("id")}
    root = ET.Element("xfdf", {"xmlns": XFDF_NS, "xml:space": "preserve"})
    annots = ET.SubElement(root, "annots")
    for record in records:
        element = annotation_element(record, pages, attachments or {}, by_id)
        if element is not None:
            annots.append(element)
    if form_field_values:
        root.append(fields_element(form_field_values))
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def unwritable(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """Ids of the records :func:`write_xfdf` leaves out (no XFDF element for their type)."""
    return [str(r.get("id")) for r in records if not _writable(r)]


def _writable(record: Mapping[str, Any]) -> bool:
    kind = record.get("type")
    return kind in ELEMENTS or kind == "pspdfkit/comment" or (
        isinstance(kind, str) and kind.startswith("xfdf/") and isinstance(record.get("xfdf"), str))


def annotation_element(record: Mapping[str, Any], pages: PageBoxes = None,
                       attachments: Mapping[str, bytes] | None = None,
                       by_id: Mapping[str, Mapping] | None = None) -> ET.Element | None:
    """One record as its XFDF element (None when XFDF cannot express its type), with an
    ``<ls:instant-json>`` child for whatever the element cannot carry, so that
    :func:`record_of` gives ``record`` back."""
    if not _writable(record):
        return None
    kind = record["type"]
    if kind.startswith("xfdf/"):
        element = _raw_element(record)
        if element is None:
            return None
    else:
        element = _mapped_element(record, pages, attachments or {}, by_id or {})
    back = record_of(element, pages)
    extra = {k: v for k, v in record.items() if k not in back or back[k] != v}
    unset = sorted(k for k in back if k not in record)
    if extra or unset:
        ext = ET.SubElement(element, "ls:instant-json", {"xmlns:ls": LS_NS})
        ext.text = json.dumps({"set": extra, "unset": unset} if unset else {"set": extra},
                              ensure_ascii=False, sort_keys=True)
    return element


def _raw_element(record: Mapping[str, Any]) -> ET.Element | None:
    try:
        element = SafeET.fromstring(record["xfdf"], forbid_dtd=True)
    except (ET.ParseError, defusedxml.DefusedXmlException):
        return None
    _strip_namespaces(element)
    return element


def _strip_namespaces(element: ET.Element) -> None:
    for node in element.iter():
        if _ns(node.tag) == XFDF_NS:
            node.tag = _local(node.tag)


def _mapped_element(record: Mapping[str, Any], pages: PageBoxes, attachments: Mapping[str, bytes],
                    by_id: Mapping[str, Mapping]) -> ET.Element:
    kind = record["type"]
    page_index = record.get("pageIndex") if isinstance(record.get("pageIndex"), int) else 0
    space = PageBox.of(pages, page_index)
    attrs: dict[str, str] = {}
    if record.get("id") is not None:
        attrs["name"] = str(record["id"])
    attrs["page"] = str(page_index)
    bbox = record.get("bbox")
    if kind == "pspdfkit/comment":
        root = by_id.get(record.get("rootId"), {})
        bbox = root.get("bbox")
        attrs["inreplyto"] = str(record.get("rootId", ""))
        attrs["replyType"] = "reply"
    attrs["rect"] = ",".join(_num(v) for v in space.bbox_to_rect(bbox)) if _is_bbox(bbox) else "0,0,0,0"
    flags = record.get("flags") if isinstance(record.get("flags"), list) else []
    words = ([] if "noPrint" in flags else ["print"]) + [FLAGS[f] for f in FLAG_ORDER if f in flags and f in FLAGS]
    attrs["flags"] = ",".join(words)
    if isinstance(record.get("creatorName"), str):
        attrs["title"] = record["creatorName"]
    for key, attr in (("createdAt", "creationdate"), ("updatedAt", "date")):
        if isinstance(record.get(key), str) and iso_to_pdf_date(record[key]):
            attrs[attr] = iso_to_pdf_date(record[key])
    if isinstance(record.get("opacity"), (int, float)) and not isinstance(record.get("opacity"), bool):
        attrs["opacity"] = _num(record["opacity"])
    children: list[ET.Element] = []
    text = record.get("text") if kind in ("pspdfkit/note", "pspdfkit/text", "pspdfkit/comment") else None
    if isinstance(text, dict) and isinstance(text.get("value"), str):
        children += _text_children(text)
    elif kind not in ("pspdfkit/note", "pspdfkit/text", "pspdfkit/comment"):
        note = record.get("description") if kind == "pspdfkit/file" else record.get("note")
        if isinstance(note, str):
            children.append(_text_element("contents", note))
    tag = "text" if kind == "pspdfkit/comment" else ELEMENTS[kind]
    extra_children = _TYPE_WRITERS.get(kind, lambda *a: [])(record, attrs, space, attachments)
    element = ET.Element(tag, attrs)
    element.extend(children + extra_children)
    return element


def _is_bbox(value: object) -> bool:
    return (isinstance(value, list) and len(value) == 4
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))


def _is_point(value: object) -> bool:
    return (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))


def _text_element(tag: str, text: str) -> ET.Element:
    element = ET.Element(tag)
    element.text = text
    return element


def _text_children(text: Mapping[str, Any]) -> list[ET.Element]:
    value = text["value"]
    if text.get("format") == "xhtml":
        body = _rich_body(value)
        if body is not None:
            rich = ET.Element("contents-richtext")
            rich.append(body)
            plain = "".join(body.itertext())
            return [_text_element("contents", plain), rich]
    return [_text_element("contents", value)]


def _set_color(attrs: dict, attr: str, value: object) -> None:
    if _color(value):
        attrs[attr] = _color(value)


def _write_note(record, attrs, space, attachments):
    icon = record.get("icon")
    if isinstance(icon, str) and icon:
        attrs["icon"] = icon[:1].upper() + icon[1:]
    _set_color(attrs, "color", record.get("color"))
    return []


def _style(record: Mapping[str, Any]) -> tuple[str, str]:
    """The free text's ``defaultstyle`` (CSS, what viewers draw) and
    ``defaultappearance`` (``/DA``, the same font, size and colour)."""
    font = record.get("font") if isinstance(record.get("font"), str) else None
    size = record.get("fontSize") if isinstance(record.get("fontSize"), (int, float)) else None
    color = _color(record.get("fontColor"))
    css = []
    if font:
        css.append(f"font-family: {font}")
    if size is not None:
        css.append(f"font-size: {_num(size)}pt")
    if color:
        css.append(f"color: {color}")
    styles = record.get("fontStyle") if isinstance(record.get("fontStyle"), list) else []
    if "bold" in styles:
        css.append("font-weight: bold")
    if "italic" in styles:
        css.append("font-style: italic")
    if record.get("horizontalAlign") in JUSTIFICATION:
        css.append(f"text-align: {record['horizontalAlign']}")
    da_font = font if font and re.fullmatch(r"[A-Za-z0-9_.+-]+", font) else "Helv"
    r, g, b = _rgb(color) if color else (0.0, 0.0, 0.0)
    da = f"/{da_font} {_num(size if size is not None else 12)} Tf {_num(r)} {_num(g)} {_num(b)} rg"
    return "; ".join(css), da


def _write_free_text(record, attrs, space, attachments):
    css, da = _style(record)
    attrs["defaultstyle"] = css
    attrs["defaultappearance"] = da
    if record.get("horizontalAlign") in JUSTIFICATION:
        attrs["justification"] = JUSTIFICATION[record["horizontalAlign"]]
    _set_color(attrs, "color", record.get("backgroundColor"))
    if isinstance(record.get("rotation"), int) and not isinstance(record.get("rotation"), bool):
        attrs["rotation"] = str(record["rotation"])
    return []


def _write_markup(record, attrs, space, attachments):
    _set_color(attrs, "color", record.get("color"))
    rects = record.get("rects") if isinstance(record.get("rects"), list) else []
    coords: list[float] = []
    for bbox in rects:
        if _is_bbox(bbox):
            llx, lly, urx, ury = space.bbox_to_rect(bbox)
            coords += [llx, ury, urx, ury, llx, lly, urx, lly]  # Acrobat's order: TL, TR, BL, BR
    attrs["coords"] = ",".join(_num(v) for v in coords)
    return []


def _points(points: object, space: PageBox) -> str:
    if not isinstance(points, list):
        return ""
    return ";".join(",".join(_num(v) for v in space.point_to_pdf(p)) for p in points if _is_point(p))


def _write_ink(record, attrs, space, attachments):
    _set_color(attrs, "color", record.get("strokeColor"))
    if isinstance(record.get("lineWidth"), (int, float)):
        attrs["width"] = _num(record["lineWidth"])
    lines = record.get("lines") if isinstance(record.get("lines"), dict) else {}
    inklist = ET.Element("inklist")
    for path in lines.get("points") or []:
        inklist.append(_text_element("gesture", _points(path, space)))
    return [inklist]


def _write_stroke(record, attrs, space):
    _set_color(attrs, "color", record.get("strokeColor"))
    _set_color(attrs, "interior-color", record.get("fillColor"))
    if isinstance(record.get("strokeWidth"), (int, float)):
        attrs["width"] = _num(record["strokeWidth"])
    dashes = record.get("strokeDashArray")
    if isinstance(dashes, list) and dashes and all(isinstance(d, (int, float)) for d in dashes):
        attrs["style"] = "dash"
        attrs["dashes"] = ",".join(_num(d) for d in dashes)


def _write_caps(record, attrs):
    caps = record.get("lineCaps") if isinstance(record.get("lineCaps"), dict) else {}
    if caps.get("start") in LINE_CAPS:
        attrs["head"] = LINE_CAPS[caps["start"]]
    if caps.get("end") in LINE_CAPS:
        attrs["tail"] = LINE_CAPS[caps["end"]]


def _write_shape(record, attrs, space, attachments):
    _write_stroke(record, attrs, space)
    return []


def _write_line(record, attrs, space, attachments):
    _write_stroke(record, attrs, space)
    for key, attr in (("startPoint", "start"), ("endPoint", "end")):
        if _is_point(record.get(key)):
            attrs[attr] = ",".join(_num(v) for v in space.point_to_pdf(record[key]))
    _write_caps(record, attrs)
    return []


def _write_vertices(record, attrs, space, attachments):
    _write_stroke(record, attrs, space)
    if record.get("type") == "pspdfkit/shape/polyline":
        _write_caps(record, attrs)
    return [_text_element("vertices", _points(record.get("points"), space))]


def _write_stamp(record, attrs, space, attachments):
    if isinstance(record.get("stampType"), str):
        attrs["icon"] = record["stampType"]
    _set_color(attrs, "color", record.get("color"))
    if isinstance(record.get("rotation"), int) and not isinstance(record.get("rotation"), bool):
        attrs["rotation"] = str(record["rotation"])
    return []


def _write_file(record, attrs, space, attachments):
    if isinstance(record.get("fileName"), str):
        attrs["file"] = record["fileName"]
    if isinstance(record.get("iconName"), str):
        attrs["icon"] = record["iconName"]
    data = attachments.get(record.get("fileAttachmentId")) if record.get("fileAttachmentId") else None
    if data is None:
        return []
    element = ET.Element("data", {"MIMEType": "application/octet-stream", "length": str(len(data)),
                                  "encoding": "hex", "mode": "raw"})
    element.text = data.hex().upper()
    return [element]


_TYPE_WRITERS = {
    "pspdfkit/note": _write_note, "pspdfkit/text": _write_free_text,
    "pspdfkit/markup/highlight": _write_markup, "pspdfkit/markup/underline": _write_markup,
    "pspdfkit/markup/strikeout": _write_markup, "pspdfkit/markup/squiggly": _write_markup,
    "pspdfkit/ink": _write_ink, "pspdfkit/shape/rectangle": _write_shape,
    "pspdfkit/shape/ellipse": _write_shape, "pspdfkit/shape/line": _write_line,
    "pspdfkit/shape/polygon": _write_vertices, "pspdfkit/shape/polyline": _write_vertices,
    "pspdfkit/stamp": _write_stamp, "pspdfkit/file": _write_file,
}


def fields_element(values: Mapping[str, Any]) -> ET.Element:
    """``<fields>`` of form field values; a name ``a.b`` nests ``b`` in ``a``."""
    root = ET.Element("fields")
    nodes: dict[tuple[str, ...], ET.Element] = {}
    for name, value in values.items():
        parent, path = root, ()
        for part in str(name).split("."):
            path += (part,)
            if path not in nodes:
                nodes[path] = ET.SubElement(parent, "field", {"name": part})
            parent = nodes[path]
        for item in (value if isinstance(value, list) else [] if value is None else [value]):
            parent.append(_text_element("value", str(item)))
    return root


# ---------------------------------------------------------------- reading

def parse(data: bytes | str) -> ET.Element:
    """Parse untrusted XFDF: no DTD (so no external or expanding entities), and the root
    must be ``<xfdf>``. Raises :class:`XfdfError`."""
    try:
        root = SafeET.fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except defusedxml.DTDForbidden:
        raise XfdfError("XFDF must not have a DTD (external entities and entity expansion "
                        "are refused)") from None
    except defusedxml.DefusedXmlException as exc:
        raise XfdfError(f"XFDF refused: {exc}") from None
    except ET.ParseError as exc:
        raise XfdfError(f"not well-formed XML: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise XfdfError(f"not XML text: {exc}") from None
    if _local(root.tag) != "xfdf":
        raise XfdfError(f"the root element must be <xfdf>, not <{_local(root.tag)}>")
    stack = [(root, 1)]  # iteratively: the readers below recurse (rich text, raw elements)
    while stack:
        element, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise XfdfError(f"XFDF nests deeper than {MAX_DEPTH} elements")
        stack.extend((child, depth + 1) for child in element)
    return root


def read_xfdf(data: bytes | str, *, pages: PageBoxes = None) -> XfdfChanges:
    """Read an XFDF document (plain or command) as records. Raises :class:`XfdfError`
    when it is not a readable XFDF document; annotations are not checked against the
    record schema here (the caller does, as for Instant JSON)."""
    root = parse(data)
    changes = XfdfChanges()
    for child in root:
        name = _local(child.tag)
        if name == "annots":
            changes.added += _records(child, pages, changes.attachments)
        elif name in ("add", "modify"):
            changes.is_command = True
            target = changes.added if name == "add" else changes.modified
            target += _records(child, pages, changes.attachments)
        elif name == "delete":
            changes.is_command = True
            changes.deleted += [(i.text or "").strip() for i in child if _local(i.tag) == "id"
                                and (i.text or "").strip()]
        elif name == "fields":
            _read_fields(child, (), changes.form_field_values)
    _thread_comments(changes.records)
    return changes


def _records(container: ET.Element, pages: PageBoxes, attachments: dict) -> list[dict]:
    out = []
    for element in container:
        if _ns(element.tag) not in ("", XFDF_NS):
            continue
        record = record_of(element, pages, attachments)
        if record is not None:
            out.append(record)
    return out


def _thread_comments(records: list[dict]) -> None:
    """A reply to a reply (Acrobat threads that way) joins its thread's root."""
    parent = {r["id"]: r.get("rootId") for r in records if r.get("type") == "pspdfkit/comment" and "id" in r}
    for record in records:
        if record.get("type") != "pspdfkit/comment":
            continue
        root, seen = record.get("rootId"), set()
        while root in parent and root not in seen:
            seen.add(root)
            root = parent[root]
        record["rootId"] = root


def _read_fields(element: ET.Element, path: tuple[str, ...], out: dict) -> None:
    for child in element:
        if _local(child.tag) != "field":
            continue
        here = path + (child.get("name", ""),)
        values = [v.text or "" for v in child if _local(v.tag) == "value"]
        subfields = [c for c in child if _local(c.tag) == "field"]
        if values or not subfields:
            out[".".join(here)] = values[0] if len(values) == 1 else (values or None)
        _read_fields(child, here, out)


def record_of(element: ET.Element, pages: PageBoxes = None,
              attachments: dict | None = None) -> dict | None:
    """The record an XFDF annotation element says (with its ``<ls:instant-json>`` applied);
    None for elements that are not annotations. Embedded files go to ``attachments``."""
    tag = _local(element.tag)
    extension = None
    for child in element:
        if _ns(child.tag) == LS_NS and _local(child.tag) == "instant-json":
            extension = child
    if tag in TYPES or (tag == "text" and element.get("inreplyto")):
        record = _mapped_record(element, tag, pages, attachments if attachments is not None else {})
    elif tag in RAW_ELEMENTS or (tag and tag not in ("annots", "fields", "f", "ids")):
        record = _raw_record(element, tag, pages)
    else:
        return None
    if extension is not None:
        try:
            ext = json.loads(extension.text or "{}")
        except (ValueError, RecursionError):
            raise XfdfError("<ls:instant-json> must hold a JSON object") from None
        if not isinstance(ext, dict) or not isinstance(ext.get("set", {}), dict):
            raise XfdfError("<ls:instant-json> must hold a JSON object")
        record.update(ext.get("set", {}))
        for key in ext.get("unset", []) if isinstance(ext.get("unset", []), list) else []:
            record.pop(key, None)
    return record


def _page_index(element: ET.Element) -> int:
    try:
        page = int(element.get("page", "0"))
    except ValueError:
        raise XfdfError(f"page must be an integer, not {element.get('page')!r}") from None
    if page < 0:
        raise XfdfError("page must not be negative")
    return page


def _raw_record(element: ET.Element, tag: str, pages: PageBoxes) -> dict:
    copy = deepcopy(element)
    _strip_namespaces(copy)
    for child in list(copy):
        if _ns(child.tag) == LS_NS:
            copy.remove(child)
    page = _page_index(element)
    record: dict[str, Any] = {"type": f"xfdf/{tag}", "pageIndex": page}
    if element.get("name"):
        record["id"] = element.get("name")
    rect = _nums(element.get("rect"))
    if len(rect) == 4:
        record["bbox"] = PageBox.of(pages, page).rect_to_bbox(rect)
    copy.tail = None
    record["xfdf"] = ET.tostring(copy, encoding="unicode")
    return record


def _mapped_record(element: ET.Element, tag: str, pages: PageBoxes, attachments: dict) -> dict:
    page = _page_index(element)
    space = PageBox.of(pages, page)
    is_comment = tag == "text" and bool(element.get("inreplyto")) and element.get("replyType", "reply") != "group"
    kind = "pspdfkit/comment" if is_comment else TYPES[tag]
    record: dict[str, Any] = {"v": 2, "type": kind}
    if element.get("name"):
        record["id"] = element.get("name")
        if not is_comment:
            record["name"] = element.get("name")
    record["pageIndex"] = page
    if is_comment:
        record["rootId"] = element.get("inreplyto")
    else:
        rect = _nums(element.get("rect"))
        if len(rect) == 4:
            record["bbox"] = space.rect_to_bbox(rect)
    if element.get("opacity") is not None:
        record["opacity"] = _maybe_int(min(1.0, max(0.0, (_nums(element.get("opacity")) or [1.0])[0])))
    words = [w.strip().lower() for w in (element.get("flags") or "").split(",") if w.strip()]
    flags = [] if "print" in words else ["noPrint"]
    flags += [f for f in FLAG_ORDER if f in FLAGS and FLAGS[f] in words]
    if flags and not is_comment:
        record["flags"] = flags
    if element.get("title") is not None:
        record["creatorName"] = element.get("title")
    created = pdf_date_to_iso(element.get("creationdate"))
    modified = pdf_date_to_iso(element.get("date"))
    if created or modified:
        record["createdAt"] = created or modified
        record["updatedAt"] = modified or created
    contents = rich = None
    for child in element:
        name = _local(child.tag)
        if name == "contents":
            contents = child.text or ""
        elif name == "contents-richtext":
            body = next((c for c in child if _local(c.tag) == "body"), None)
            rich = _serialize_inner(body) if body is not None else None
    if kind in ("pspdfkit/note", "pspdfkit/text", "pspdfkit/comment"):
        record["text"] = ({"format": "xhtml", "value": rich} if rich is not None
                          else {"format": "plain", "value": contents or ""})
    elif contents is not None:
        record["description" if kind == "pspdfkit/file" else "note"] = contents
    _TYPE_READERS.get(kind, lambda *a: None)(element, record, space, attachments)
    return record


def _read_note(element, record, space, attachments):
    icon = element.get("icon") or "Comment"
    icon = icon[:1].lower() + icon[1:]
    record["icon"] = icon if icon in NOTE_ICONS else "comment"
    if _color(element.get("color")):
        record["color"] = _color(element.get("color"))


def _css(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(";"):
        if ":" in part:
            key, value = part.split(":", 1)
            out[key.strip().lower()] = value.strip()
    return out


def _read_free_text(element, record, space, attachments):
    da = element.get("defaultappearance") or ""
    if m := _DA_FONT.search(da):
        record["font"] = m.group(1)
        record["fontSize"] = float(m.group(2))
    if m := _DA_RGB.search(da):
        record["fontColor"] = "#" + "".join(f"{round(float(m.group(i)) * 255):02X}" for i in (1, 2, 3))
    elif m := _DA_GRAY.search(da):
        record["fontColor"] = "#" + f"{round(float(m.group(1)) * 255):02X}" * 3
    css = _css(element.get("defaultstyle") or "")  # what viewers draw wins over /DA
    if "font" in css:  # Acrobat's shorthand: "Helvetica,sans-serif 12.0pt"
        if m := re.search(r"([\d.]+)pt", css["font"]):
            record["fontSize"] = float(m.group(1))
        family = re.sub(r"[\d.]+pt", "", css["font"]).split(",")[0].strip().strip("'\"")
        if family:
            record["font"] = family
    if css.get("font-family"):
        record["font"] = css["font-family"].split(",")[0].strip().strip("'\"")
    if m := re.match(r"([\d.]+)", css.get("font-size", "")):
        record["fontSize"] = float(m.group(1))
    if _color(css.get("color")):
        record["fontColor"] = _color(css["color"])
    styles = (["bold"] if css.get("font-weight") in ("bold", "700") else []) + \
             (["italic"] if css.get("font-style") == "italic" else [])
    if styles:
        record["fontStyle"] = styles
    record["fontSize"] = round(record.get("fontSize", 12))  # the record schema: an integer
    align = {v: k for k, v in JUSTIFICATION.items()}.get(element.get("justification") or "")
    align = align or {"left": "left", "center": "center", "right": "right"}.get(css.get("text-align", ""))
    record["horizontalAlign"] = align or "left"
    record["verticalAlign"] = "top"  # required by Instant JSON; XFDF free text starts at the top
    record.setdefault("opacity", 1)  # required by Instant JSON for free text; XFDF's default
    if _color(element.get("color")):
        record["backgroundColor"] = _color(element.get("color"))
    if element.get("rotation") is not None:
        try:
            record["rotation"] = round(float(element.get("rotation")) / 90) % 4 * 90
        except ValueError:
            raise XfdfError("rotation must be a number") from None


def _read_markup(element, record, space, attachments):
    numbers = _nums(element.get("coords"))
    rects = []
    for i in range(0, len(numbers) - 7, 8):
        xs, ys = numbers[i:i + 8:2], numbers[i + 1:i + 8:2]
        rects.append(space.rect_to_bbox([min(xs), min(ys), max(xs), max(ys)]))
    record["rects"] = rects or ([record["bbox"]] if "bbox" in record else [])
    record["color"] = _color(element.get("color")) or "#000000"  # required by Instant JSON


def _read_points(text: str | None, space: PageBox) -> list[list[float]]:
    numbers = _nums(text)
    return [space.point_to_instant(numbers[i], numbers[i + 1]) for i in range(0, len(numbers) - 1, 2)]


def _read_ink(element, record, space, attachments):
    lines = []
    for child in element:
        if _local(child.tag) == "inklist":
            lines += [_read_points(g.text, space) for g in child if _local(g.tag) == "gesture"]
    record["lines"] = {"points": lines, "intensities": [[1.0] * len(p) for p in lines]}
    record["lineWidth"] = _maybe_int((_nums(element.get("width")) or [1])[0])
    if _color(element.get("color")):
        record["strokeColor"] = _color(element.get("color"))


def _read_stroke(element, record):
    if _color(element.get("color")):
        record["strokeColor"] = _color(element.get("color"))
    if _color(element.get("interior-color")):
        record["fillColor"] = _color(element.get("interior-color"))
    if element.get("width") is not None:
        record["strokeWidth"] = _maybe_int((_nums(element.get("width")) or [1])[0])
    dashes = _nums(element.get("dashes"))
    if dashes and (element.get("style") or "dash") == "dash":
        record["strokeDashArray"] = [_maybe_int(d) for d in dashes]


def _read_caps(element, record):
    names = {v: k for k, v in LINE_CAPS.items()}
    caps = {key: names[element.get(attr)] for key, attr in (("start", "head"), ("end", "tail"))
            if element.get(attr) in names}
    if caps:
        record["lineCaps"] = caps


def _read_shape(element, record, space, attachments):
    _read_stroke(element, record)


def _read_line(element, record, space, attachments):
    _read_stroke(element, record)
    for key, attr in (("startPoint", "start"), ("endPoint", "end")):
        numbers = _nums(element.get(attr))
        record[key] = space.point_to_instant(*numbers[:2]) if len(numbers) >= 2 else [0, 0]
    _read_caps(element, record)


def _read_vertices(element, record, space, attachments):
    _read_stroke(element, record)
    if record["type"] == "pspdfkit/shape/polyline":
        _read_caps(element, record)
    text = next((c.text for c in element if _local(c.tag) == "vertices"), None)
    record["points"] = _read_points(text, space)


def _read_stamp(element, record, space, attachments):
    icon = (element.get("icon") or "Custom").lstrip("#")
    record["stampType"] = icon if icon in STAMP_TYPES else "Custom"
    if _color(element.get("color")):
        record["color"] = _color(element.get("color"))
    if element.get("rotation") is not None:
        try:
            record["rotation"] = round(float(element.get("rotation")) / 90) % 4 * 90
        except ValueError:
            raise XfdfError("rotation must be a number") from None


def _read_file(element, record, space, attachments):
    if element.get("file") is not None:
        record["fileName"] = element.get("file")
    if element.get("icon") is not None:
        record["iconName"] = element.get("icon")
    data = next((c for c in element if _local(c.tag) == "data"), None)
    if data is None:
        return
    raw = re.sub(r"\s+", "", data.text or "")
    try:
        content = bytes.fromhex(raw) if (data.get("encoding") or "hex") == "hex" else None
    except ValueError:
        raise XfdfError("<data> of a file attachment must be hex") from None
    if content is None:  # ascii85 (XFDF's other encoding)
        import base64
        try:
            content = base64.a85decode(raw.removesuffix("~>").encode("ascii"), adobe=False)
        except ValueError:
            raise XfdfError("<data> of a file attachment is not ascii85") from None
    sha = hashlib.sha256(content).hexdigest()
    attachments[sha] = content
    record["fileAttachmentId"] = sha


_TYPE_READERS = {
    "pspdfkit/note": _read_note, "pspdfkit/text": _read_free_text,
    "pspdfkit/markup/highlight": _read_markup, "pspdfkit/markup/underline": _read_markup,
    "pspdfkit/markup/strikeout": _read_markup, "pspdfkit/markup/squiggly": _read_markup,
    "pspdfkit/ink": _read_ink, "pspdfkit/shape/rectangle": _read_shape,
    "pspdfkit/shape/ellipse": _read_shape, "pspdfkit/shape/line": _read_line,
    "pspdfkit/shape/polygon": _read_vertices, "pspdfkit/shape/polyline": _read_vertices,
    "pspdfkit/stamp": _read_stamp, "pspdfkit/file": _read_file,
}
