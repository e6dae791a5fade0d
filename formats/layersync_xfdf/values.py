"""What the XFDF reader and writer share: namespaces, the type and flag tables, page
boxes, the result type, and small value conversions (numbers, dates, colours, rich text).

XFDF (ISO 19444-1) ↔ Instant JSON records, both directions.

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

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, Sequence

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
DA_FONT = re.compile(r"/?([^\s/]+)\s+([\d.]+)\s+Tf")
DA_RGB = re.compile(r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+rg")
DA_GRAY = re.compile(r"([\d.]+)\s+g(?:\s|$)")


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
        return round4(float(point[0]) + self.x0), round4(self.y1 - float(point[1]))

    def point_to_instant(self, x: float, y: float) -> list[float]:
        return [round4(x - self.x0), round4(self.y1 - y)]

    def bbox_to_rect(self, bbox: Sequence[float]) -> list[float]:
        left, top, width, height = (float(v) for v in bbox)
        x, y_top = left + self.x0, self.y1 - top
        return [round4(x), round4(y_top - height), round4(x + width), round4(y_top)]

    def rect_to_bbox(self, rect: Sequence[float]) -> list[float]:
        x1, y1, x2, y2 = rect
        left, right, bottom, top = min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)
        return [round4(left - self.x0), round4(self.y1 - top), round4(right - left), round4(top - bottom)]


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


# -- small values ----------------------------------------------------------------------------

def round4(value: float) -> float:
    return round(float(value), 4)


def number_text(value: float) -> str:
    r = round4(value)
    return str(int(r)) if r.is_integer() else repr(r)


def numbers_of(text: str | None) -> list[float]:
    if not text:
        return []
    try:
        return [round4(float(v)) for v in re.split(r"[\s,;]+", text.strip()) if v]
    except ValueError:
        raise XfdfError(f"not a list of numbers: {text[:60]!r}") from None


def maybe_int(value: float) -> float | int:
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


def color_of(value: str | None) -> str | None:
    return value.upper() if isinstance(value, str) and _COLOR.fullmatch(value) else None


def rgb_of(color: str) -> list[float]:
    return [round(int(color[i:i + 2], 16) / 255, 4) for i in (1, 3, 5)]


def local_name(tag: str) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def namespace_of(tag: str) -> str:
    return tag[1:].split("}", 1)[0] if isinstance(tag, str) and tag.startswith("{") else ""


# -- rich text -------------------------------------------------------------------------------

def _escape(text: str, attribute: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace('"', "&quot;") if attribute else text


def xhtml_inner(element: ET.Element) -> str:
    """The content of ``element`` as XHTML text: local tag names, attributes in document
    order with double quotes (the form :func:`rich_body` reads back unchanged)."""
    parts = [_escape(element.text or "")]
    for child in element:
        attrs = "".join(f' {local_name(k)}="{_escape(v, True)}"' for k, v in child.attrib.items()
                        if namespace_of(k) in ("", XHTML_NS))
        inner = xhtml_inner(child)
        name = local_name(child.tag)
        parts.append(f"<{name}{attrs}>{inner}</{name}>" if inner or len(child) else f"<{name}{attrs}/>")
        parts.append(_escape(child.tail or ""))
    return "".join(parts)


def rich_body(value: str) -> ET.Element | None:
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
        copy = ET.SubElement(target, local_name(child.tag),
                             {local_name(k): v for k, v in child.attrib.items() if namespace_of(k) in ("", XHTML_NS)})
        _copy_children(child, copy)
        copy.tail = child.tail


def strip_xfdf_namespace(element: ET.Element) -> None:
    for node in element.iter():
        if namespace_of(node.tag) == XFDF_NS:
            node.tag = local_name(node.tag)
