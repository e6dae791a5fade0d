"""Value rules PDF annotations and XFDF share, as plain Python values (no PDF objects):
the one implementation of each, imported by the XFDF codec here and by the server's
PDF import/export (``layersync_server.pdf.values`` adds only what needs pikepdf).

* Numbers: 4 decimals (:func:`round4`), written without exponent (:func:`number_text`).
* Page boxes: :class:`PageBox`, PDF user space ↔ Instant JSON's top-left-origin
  coordinates of a page's CropBox.
* Dates (PDF 32000-1 §7.9.4, XFDF ``date``/``creationdate``): ``D:YYYYMMDDHHmmSSOHH'mm``
  ↔ ISO 8601 UTC ``YYYY-MM-DDTHH:MM:SSZ``.
* Colours: component lists (gray, RGB, CMYK, 0..1) and ``"#RRGGBB"``.
* Instant JSON enums PDF and XFDF name too: note icons, stamp types, line caps.
* ``/DA`` (XFDF ``defaultappearance``, PDF 32000-1 §12.7.3.3): ``/Helv 12 Tf 0 0 1 rg`` ↔
  ``font``, ``fontSize``, ``fontColor``.
* Sameness of parsed JSON values (:func:`same_json`): whether a record read from a file
  changes the stored one.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from typing import Mapping, Sequence

#: A page's CropBox when the caller gives none: US Letter, in points.
LETTER = (0.0, 0.0, 612.0, 792.0)

# Instant JSON's enums that PDF and XFDF name too.
#: Note icons (the record schema's NoteIcon): PDF ``/Name`` and XFDF ``icon`` in lower camel case.
NOTE_ICONS = ("comment", "rightPointer", "rightArrow", "check", "circle", "cross", "insert",
              "newParagraph", "note", "paragraph", "help", "star", "key")
#: Stamp types: PDF ``/Name`` and XFDF ``icon`` of a stamp, as they are.
STAMP_TYPES = ("Accepted", "Approved", "AsIs", "Completed", "Confidential", "Departmental", "Draft",
               "Experimental", "Expired", "Final", "ForComment", "ForPublicRelease", "InformationOnly",
               "InitialHere", "NotApproved", "NotForPublicRelease", "PreliminaryResults", "Rejected",
               "Revised", "SignHere", "Sold", "TopSecret", "Void", "Witness", "Custom")
#: Instant line caps ↔ PDF line ending names (``/LE``; XFDF ``head`` = start, ``tail`` = end).
LINE_CAPS = {"none": "None", "square": "Square", "circle": "Circle", "diamond": "Diamond",
             "openArrow": "OpenArrow", "closedArrow": "ClosedArrow", "butt": "Butt",
             "reverseOpenArrow": "ROpenArrow", "reverseClosedArrow": "RClosedArrow",
             "slash": "Slash"}

_DATE = re.compile(r"^D?:?(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?\s*([Zz+\-])?\s*(\d{2})?'?(\d{2})?'?")
_HEX_COLOR = re.compile(r"#[0-9A-Fa-f]{6}")
_DA_FONT = re.compile(r"/?([^\s/]+)\s+([\d.]+)\s+Tf")
_DA_RGB = re.compile(r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+rg")
_DA_GRAY = re.compile(r"([\d.]+)\s+g(?:\s|$)")
#: A font name ``/DA`` can hold as a resource name as it is; others are written as Helv.
_DA_FONT_NAME = re.compile(r"[A-Za-z0-9_.+-]+")


# -- numbers ---------------------------------------------------------------------------------

def round4(value: float) -> float:
    return round(float(value), 4)


def number_text(value: float) -> str:
    """A number as PDF (content streams, ``/DA``) and XFDF write it: at most 4 decimals, no
    exponent, no ``.0``, no ``-0``. Raises ValueError for infinities and NaN, which PDF
    has no syntax for."""
    if not math.isfinite(float(value)):
        raise ValueError(f"not a finite number: {value}")
    text = f"{float(value):.4f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def maybe_int(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


# -- page boxes ------------------------------------------------------------------------------

def page_past_last(record: Mapping, page_count: int | None) -> str | None:
    """Why ``record`` cannot be on the document: an integer ``pageIndex`` at or past
    ``page_count`` (its coordinates are in a page box the document does not have, and no
    export could place it); None when it fits or the page count is unknown. The one rule
    Instant JSON and XFDF apply (and upload attachments) refuse such a record by."""
    page = record.get("pageIndex")
    if isinstance(page, float) and page.is_integer():
        page = int(page)
    if page_count and isinstance(page, int) and not isinstance(page, bool) and page >= page_count:
        return f"page {page} is past the document's last page ({page_count - 1})"
    return None


PageBoxes = Mapping[int, Sequence[float]] | Sequence[Sequence[float]] | None


class PageBox:
    """One page's CropBox ``(left, bottom, right, top)`` in PDF points; converts between
    PDF user space and Instant JSON, which places annotations with a top-left origin in
    that box, y growing downwards (``bbox`` = ``[left, top, width, height]``). Numbers
    are rounded to 4 decimals so repeated conversions are identical."""

    def __init__(self, box: Sequence[float] = LETTER):
        left, bottom, right, top = (float(v) for v in box)
        self.x0, self.y1 = min(left, right), max(bottom, top)

    @classmethod
    def at(cls, pages: PageBoxes, page_index: int) -> "PageBox":
        """The box of ``page_index`` in ``pages`` (mapping or sequence); Letter when absent."""
        box = None
        if isinstance(pages, Mapping):
            box = pages.get(page_index)
        elif pages is not None and 0 <= page_index < len(pages):
            box = pages[page_index]
        return cls(box if box is not None else LETTER)

    def point_to_instant(self, x: float, y: float) -> list[float]:
        """PDF user-space point → ``[x, y]`` top-left origin."""
        return [round4(float(x) - self.x0), round4(self.y1 - float(y))]

    def point_to_pdf(self, point: Sequence[float]) -> list[float]:
        """``[x, y]`` top-left origin → PDF user-space point."""
        return [round4(float(point[0]) + self.x0), round4(self.y1 - float(point[1]))]

    def rect_to_bbox(self, rect: Sequence[float]) -> list[float]:
        """PDF ``[llx lly urx ury]`` (any corner order) → ``[left, top, width, height]``."""
        x1, y1, x2, y2 = (float(v) for v in rect)
        left, right, bottom, top = min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)
        return [round4(left - self.x0), round4(self.y1 - top), round4(right - left), round4(top - bottom)]

    def bbox_to_rect(self, bbox: Sequence[float]) -> list[float]:
        """``[left, top, width, height]`` → PDF ``[llx lly urx ury]``."""
        left, top, width, height = (float(v) for v in bbox)
        x, y_top = left + self.x0, self.y1 - top
        return [round4(x), round4(y_top - height), round4(x + width), round4(y_top)]

    def quads_to_rects(self, quads: Sequence[float]) -> list[list[float]]:
        """``/QuadPoints`` (XFDF ``coords``; 8 numbers per quad) → one bbox per quad."""
        numbers = [float(v) for v in quads]
        rects = []
        for i in range(0, len(numbers) - 7, 8):
            xs, ys = numbers[i:i + 8:2], numbers[i + 1:i + 8:2]
            rects.append(self.rect_to_bbox([min(xs), min(ys), max(xs), max(ys)]))
        return rects

    def rects_to_quads(self, rects: Sequence[Sequence[float]]) -> list[float]:
        """Inverse of :meth:`quads_to_rects` (Acrobat's order: TL, TR, BL, BR)."""
        quads: list[float] = []
        for bbox in rects:
            llx, lly, urx, ury = self.bbox_to_rect(bbox)
            quads += [llx, ury, urx, ury, llx, lly, urx, lly]
        return quads


# -- dates -----------------------------------------------------------------------------------

def pdf_date_to_iso(text: str | None) -> str | None:
    """``D:20251214212208+01'00'`` → ``2025-12-14T20:22:08Z``; None when unparsable."""
    match = _DATE.match(text.strip()) if isinstance(text, str) else None
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


def iso_to_pdf_date(iso: str | None) -> str | None:
    """``2025-12-14T20:22:08Z`` (any ISO 8601 with offset) → ``D:20251214202208Z``; None
    when missing or not ISO 8601."""
    if not iso or not isinstance(iso, str):
        return None
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return moment.strftime("D:%Y%m%d%H%M%SZ")


# -- colours ---------------------------------------------------------------------------------

def color_of(value: object) -> str | None:
    """``"#RRGGBB"`` (any case) → upper case; None for anything else."""
    return value.upper() if isinstance(value, str) and _HEX_COLOR.fullmatch(value) else None


def rgb_hex(components: Sequence[float]) -> str:
    """Three RGB components (0..1, clamped) → ``"#RRGGBB"``."""
    return "#" + "".join(f"{round(max(0.0, min(1.0, float(c))) * 255):02X}" for c in components)


def components_to_rgb(parts: Sequence[float]) -> list[float] | None:
    """A colour as PDF gives it (``/C``, ``/IC``: 1 gray, 3 RGB or 4 CMYK components) →
    ``[r, g, b]``; None for any other count (``[]`` is "transparent")."""
    values = [float(v) for v in parts]
    if len(values) == 1:
        return values * 3
    if len(values) == 3:
        return values
    if len(values) == 4:
        c, m, y, k = values
        return [(1 - c) * (1 - k), (1 - m) * (1 - k), (1 - y) * (1 - k)]
    return None


def components_to_hex(parts: Sequence[float]) -> str | None:
    """:func:`components_to_rgb` as ``"#RRGGBB"``."""
    rgb = components_to_rgb(parts)
    return rgb_hex(rgb) if rgb is not None else None


def hex_to_rgb(color: object) -> list[float] | None:
    """``"#RRGGBB"`` → ``[r, g, b]`` in 0..1 (4 decimals); None when not a colour."""
    if not color_of(color):
        return None
    assert isinstance(color, str)
    return [round(int(color[i:i + 2], 16) / 255, 4) for i in (1, 3, 5)]


# -- /DA (defaultappearance) -----------------------------------------------------------------

def parse_default_appearance(text: str | None) -> dict:
    """``/DA`` like ``/Helv 38 Tf 0.83 0.2 0.19 rg`` → ``{"font", "fontSize", "fontColor"}``
    (what it says of them)."""
    text = text or ""
    out: dict = {}
    if m := _DA_FONT.search(text):
        out["font"] = m.group(1)
        out["fontSize"] = float(m.group(2))
    if m := _DA_RGB.search(text):
        out["fontColor"] = rgb_hex([float(m.group(i)) for i in (1, 2, 3)])
    elif m := _DA_GRAY.search(text):
        out["fontColor"] = rgb_hex([float(m.group(1))] * 3)
    return out


def default_appearance(font: str | None, size: float | None, color: str | None) -> str:
    """Inverse of :func:`parse_default_appearance`: Helvetica (``/Helv``) 12 pt black where
    the record says nothing, or a font name that is not a plain resource name."""
    r, g, b = hex_to_rgb(color) or [0.0, 0.0, 0.0]
    font_name = font if isinstance(font, str) and _DA_FONT_NAME.fullmatch(font) else "Helv"
    size = 12 if size is None else size
    return f"/{font_name} {number_text(size)} Tf {number_text(r)} {number_text(g)} {number_text(b)} rg"


def same_json(a: object, b: object, typed_numbers: bool = True) -> bool:
    """Whether two parsed JSON values are the same JSON: THE test of "content unchanged"
    (the server's permission rule that lets a pure group change through, its imports that
    leave identical records alone, its PDF export that keeps unchanged originals, and the
    Python bindings' XFDF import).

    Type-aware, unlike Python's ``==`` (where ``0 == False == 0.0`` and ``1 == True``): a
    boolean, an integer and a float are never the same value, nor are ``0.0`` and ``-0.0``
    (their JSON text differs); object key order does not count, array order does. A NaN
    (only ever in content stored by an older server) is the same as nothing.

    ``typed_numbers=False``: two numbers (integers or floats, never booleans) are the same
    when their values are equal (``10`` and ``10.0``, ``0`` and ``-0.0``). For a record read
    from a format whose numbers have no type, XFDF: its numbers are written without ``.0``
    and pass through the page's coordinate transform, so the reader cannot tell which a
    record held, and comparing typed would call every integral ``bbox`` "changed"."""
    if a is b:
        return not (type(a) is float and a != a)
    if a != b:  # C-level first: most changes differ here; equal under == is necessary
        return False
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            # an int and a float of equal value are the same only untyped
            if typed_numbers or type(x) not in _NUMBER_TYPES or type(y) not in _NUMBER_TYPES \
                    or x != y:
                return False
        elif type(x) is dict:
            if x.keys() != y.keys():
                return False
            stack.extend((value, y[key]) for key, value in x.items())
        elif type(x) is list:
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif type(x) is float:
            if x != y or (typed_numbers and math.copysign(1.0, x) != math.copysign(1.0, y)):
                return False
        elif x != y:
            return False
    return True


#: The types of JSON numbers (``bool`` is a subclass of ``int`` but not one of them).
_NUMBER_TYPES = (int, float)
