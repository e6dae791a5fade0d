"""Appearance streams (``/AP /N``) for the annotations that export writes.

pdf.js, Preview, Chrome (PDFium) and mutool draw most annotation types only from their
appearance stream, so an annotation written without one is invisible there or drawn
with the viewer's own guess. qpdf/pikepdf generate appearances for form fields only
(``Pdf.generate_appearance_streams``, ``pikepdf.form``), so markup annotations get
theirs here.

Every appearance is a form XObject whose ``/BBox`` is the annotation's ``/Rect`` with
an identity ``/Matrix``: it draws in the page's own user space, from the geometry
already written into the annotation dictionary (``/Rect``, ``/InkList``,
``/QuadPoints``, ``/L``, ``/Vertices``, ``/C``, ``/IC``, ``/BS``), so what a viewer
shows is what the dictionary says. Coordinates are those of the unrotated page
(:mod:`layersync_server.pdf.geometry`); a page's ``/Rotate`` turns the annotation with
the page. Free text draws in its own box (``/BBox [0 0 w h]``) and turns by the
record's ``rotation`` through ``/Matrix``. Opacity (``/CA``) and blend modes go into
an ``/ExtGState``, the way Acrobat, PDFium and pdf.js write their own appearances.

Drawing takes time and space in proportion to the record, never to a coordinate's
value (markup is cut to the page, a squiggly's zigzag has a bounded number of points)
nor to the square of a text's length (wrapping is linear and stops below the box).

Text uses the standard Helvetica fonts (``/Type1``, ``/WinAnsiEncoding``, not
embedded): characters outside Windows-1252 are drawn as ``?``; the annotation's
``/Contents`` keeps the exact text.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from itertools import accumulate
from typing import Callable

import pikepdf
from layersync_formats.values import components_to_rgb, hex_to_rgb, number_text
from pikepdf import Array, Dictionary, Name

from layersync_server.pdf.values import decode_text

#: Advance widths (1/1000 em) of Windows-1252 bytes 32..255 in Helvetica and
#: Helvetica-Bold (Adobe's core-font AFMs; the oblique faces have the same widths).
_WIDTHS = {
    "Helvetica": [int(w) for w in """
        278 278 355 556 556 889 667 191 333 333 389 584 278 333 278 278 556 556 556 556 556 556 556 556
        556 556 278 278 584 584 584 556 1015 667 667 722 722 667 611 778 722 278 500 667 556 833 722 778
        667 778 722 667 611 722 667 944 667 667 611 278 278 278 469 556 333 556 556 500 556 556 278 556
        556 222 222 500 222 833 556 556 556 556 333 500 278 556 500 722 500 500 500 334 260 334 584 0
        556 0 222 556 333 1000 556 556 333 1000 667 333 1000 0 611 0 0 222 222 333 333 350 556 1000 333
        1000 500 333 944 0 500 667 278 333 556 556 556 556 260 556 333 737 370 556 584 333 737 333 400
        584 333 333 333 578 537 278 333 333 365 556 834 834 834 611 667 667 667 667 667 667 1000 722 667
        667 667 667 278 278 278 278 722 722 778 778 778 778 778 584 778 722 722 722 722 667 667 611 556
        556 556 556 556 556 889 500 556 556 556 556 278 278 278 278 556 556 556 556 556 556 556 584 611
        556 556 556 556 500 556 500""".split()],
    "Helvetica-Bold": [int(w) for w in """
        278 333 474 556 556 889 722 238 333 333 389 584 278 333 278 278 556 556 556 556 556 556 556 556
        556 556 333 333 584 584 584 611 975 722 722 722 722 667 611 778 722 278 556 722 611 833 722 778
        667 778 722 667 611 722 667 944 667 667 611 333 278 333 584 556 333 556 611 556 611 556 333 611
        611 278 278 556 278 889 611 611 611 611 389 556 333 611 556 778 556 556 500 389 280 389 584 0
        556 0 278 556 500 1000 556 556 333 1000 667 333 1000 0 611 0 0 278 278 500 500 350 556 1000 333
        1000 556 333 944 0 500 667 278 333 556 556 556 556 280 556 333 737 370 556 584 333 737 333 400
        584 333 333 333 611 556 278 333 333 365 556 834 834 834 611 722 722 722 722 722 722 1000 722 667
        667 667 667 278 278 278 278 722 722 778 778 778 778 778 584 778 722 722 722 722 667 667 611 556
        556 556 556 556 556 889 556 556 556 556 556 278 278 278 278 611 611 611 611 611 611 611 584 611
        611 611 611 611 556 611 556""".split()],
}
_FONT_ASCENT, _FONT_DESCENT = 0.718, 0.207  # Helvetica cap/ascender and descender (em)
#: Instant ``blendMode`` → PDF blend mode name (PDF 32000-1 Table 136).
_BLEND_MODES = {"normal": "/Normal", "multiply": "/Multiply", "screen": "/Screen",
                "overlay": "/Overlay", "darken": "/Darken", "lighten": "/Lighten",
                "colorDodge": "/ColorDodge", "colorBurn": "/ColorBurn", "hardLight": "/HardLight",
                "softLight": "/SoftLight", "difference": "/Difference", "exclusion": "/Exclusion"}
_KAPPA = 0.5523  # Bézier control distance of a quarter circle, in radii
_BLACK, _YELLOW = [0.0, 0.0, 0.0], [1.0, 1.0, 0.0]
_STAMP_BLUE = [0.17, 0.31, 0.66]
#: Bounds that keep an appearance's cost proportional to the record's size, never to a
#: coordinate's value: points of one squiggly zigzag, of all zigzags of an annotation,
#: and characters of a stamp's title or subtitle (a longer one ends in "…").
_ZIGZAG_POINTS, _ZIGZAG_TOTAL_POINTS, _STAMP_CHARS = 2000, 10000, 200


_n = number_text  # a number for a content stream


def _numbers(value) -> list[float]:
    return [float(v) for v in value] if isinstance(value, Array) else []


def _color(value) -> list[float] | None:
    """An annotation colour array (gray, RGB or CMYK) → RGB components, None when absent."""
    return components_to_rgb(_numbers(value))


def _pdf_string(data: bytes) -> str:
    """A literal string operand: parentheses, backslash and bytes outside ASCII escaped."""
    out = []
    for byte in data:
        if byte in b"()\\":
            out.append("\\" + chr(byte))
        elif 32 <= byte < 127:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return "(" + "".join(out) + ")"


def _winansi(text: str) -> bytes:
    """``text`` in Windows-1252 (the fonts' ``/WinAnsiEncoding``); others become ``?``."""
    return bytes(b if b >= 32 else 63 for b in text.replace("\t", " ").encode("cp1252", errors="replace"))


def _text_width(data: bytes, font: str, size: float) -> float:
    """Width in points of Windows-1252 ``data`` set in the standard ``font`` at ``size``."""
    widths = _WIDTHS["Helvetica-Bold" if "Bold" in font else "Helvetica"]
    return sum(widths[b - 32] if b >= 32 else 0 for b in data) * size / 1000


class _Canvas:
    """A content stream being written, and the resources it uses."""

    def __init__(self) -> None:
        self.ops: list[str] = []
        self.ext_gstates: dict[str, Dictionary] = {}
        self.fonts: dict[str, str] = {}

    def op(self, operator: str, *operands) -> "_Canvas":
        self.ops.append(" ".join([*(o if isinstance(o, str) else _n(o) for o in operands), operator]))
        return self

    def stroke_color(self, rgb) -> "_Canvas":
        return self.op("RG", *rgb)

    def fill_color(self, rgb) -> "_Canvas":
        return self.op("rg", *rgb)

    def graphics_state(self, opacity: float, blend_mode: str | None = None) -> "_Canvas":
        """Use an ``/ExtGState`` with stroke and fill ``opacity`` and ``blend_mode``
        (nothing when both are defaults)."""
        if opacity >= 1 and blend_mode in (None, "/Normal"):
            return self
        state = Dictionary(Type=Name.ExtGState, CA=opacity, ca=opacity)
        if blend_mode:
            state.BM = Name(blend_mode)
        name = f"GS{len(self.ext_gstates)}"
        self.ext_gstates[name] = state
        return self.op("gs", "/" + name)

    def font(self, base_font: str, size: float) -> "_Canvas":
        name = {"Helvetica": "Helv", "Helvetica-Bold": "HeBo", "Helvetica-Oblique": "HeOb",
                "Helvetica-BoldOblique": "HeBO"}[base_font]
        self.fonts[name] = base_font
        return self.op("Tf", "/" + name, size)

    def polyline(self, points: list[tuple[float, float]], close: bool = False) -> "_Canvas":
        self.op("m", *points[0])
        for point in points[1:]:
            self.op("l", *point)
        return self.op("h") if close else self

    def ellipse(self, x0: float, y0: float, x1: float, y1: float) -> "_Canvas":
        cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
        kx, ky = rx * _KAPPA, ry * _KAPPA
        self.op("m", cx + rx, cy)
        self.op("c", cx + rx, cy + ky, cx + kx, cy + ry, cx, cy + ry)
        self.op("c", cx - kx, cy + ry, cx - rx, cy + ky, cx - rx, cy)
        self.op("c", cx - rx, cy - ky, cx - kx, cy - ry, cx, cy - ry)
        self.op("c", cx + kx, cy - ry, cx + rx, cy - ky, cx + rx, cy)
        return self.op("h")

    def rounded_rect(self, x0: float, y0: float, x1: float, y1: float, radius: float) -> "_Canvas":
        r = max(0.0, min(radius, (x1 - x0) / 2, (y1 - y0) / 2))
        k = r * (1 - _KAPPA)
        self.op("m", x0 + r, y0).op("l", x1 - r, y0).op("c", x1 - k, y0, x1, y0 + k, x1, y0 + r)
        self.op("l", x1, y1 - r).op("c", x1, y1 - k, x1 - k, y1, x1 - r, y1)
        self.op("l", x0 + r, y1).op("c", x0 + k, y1, x0, y1 - k, x0, y1 - r)
        self.op("l", x0, y0 + r).op("c", x0, y0 + k, x0 + k, y0, x0 + r, y0)
        return self.op("h")

    def paint(self, fill, stroke) -> "_Canvas":
        """End the current path: fill and/or stroke it (``n`` when neither)."""
        return self.op({(True, True): "B", (True, False): "f", (False, True): "S",
                        (False, False): "n"}[(fill is not None, stroke is not None)])

    def text_line(self, data: bytes, x: float, y: float) -> "_Canvas":
        return self.op("Td", x, y).op("Tj", _pdf_string(data)).op("Td", -x, -y)

    def form(self, pdf: pikepdf.Pdf, bbox: list[float], matrix: list[float] | None = None) -> pikepdf.Stream:
        stream = pikepdf.Stream(pdf, ("\n".join(self.ops) + "\n").encode("ascii"))
        stream.Type = Name.XObject
        stream.Subtype = Name.Form
        stream.BBox = Array([float(v) for v in bbox])
        if matrix:
            stream.Matrix = Array([float(v) for v in matrix])
        resources = Dictionary()
        if self.ext_gstates:
            resources.ExtGState = Dictionary({"/" + k: v for k, v in self.ext_gstates.items()})
        if self.fonts:
            resources.Font = Dictionary({"/" + k: Dictionary(Type=Name.Font, Subtype=Name.Type1,
                                                              BaseFont=Name("/" + v),
                                                              Encoding=Name.WinAnsiEncoding)
                                         for k, v in self.fonts.items()})
        stream.Resources = resources
        return stream


def write_appearance(pdf: pikepdf.Pdf, annot: Dictionary, content: dict) -> bool:
    """Give ``annot`` (a dictionary export just wrote from the record ``content``) a
    normal appearance ``/AP << /N form >>``. False when its type has none (links,
    widgets) or its ``/Rect`` is not usable; then ``annot`` is left unchanged.

    Raises:
        ValueError, TypeError: a record value cannot be drawn (e.g. an infinite size);
            ``annot`` is left unchanged.
    """
    painter = _PAINTERS.get(str(annot.get("/Subtype")))
    rect = _numbers(annot.get("/Rect"))
    if painter is None or len(rect) != 4 or not all(map(math.isfinite, rect)):
        return False
    canvas = _Canvas()
    opacity = float(annot.get("/CA", 1.0))
    result = painter(canvas, annot, content, rect, max(0.0, min(1.0, opacity)))
    if result is None:
        stream = canvas.form(pdf, rect)
    else:  # a painter that draws in its own box: (bbox, matrix)
        stream = canvas.form(pdf, *result)
    annot.AP = Dictionary(N=pdf.make_indirect(stream))
    return True


def _stroke_width(annot: Dictionary, default: float = 1.0) -> float:
    bs = annot.get("/BS")
    if isinstance(bs, Dictionary) and "/W" in bs:
        return max(0.0, float(bs.W))
    return default


def _dashes(canvas: _Canvas, content: dict) -> None:
    dashes = content.get("strokeDashArray")
    if isinstance(dashes, list) and dashes and all(isinstance(d, (int, float)) and d >= 0 for d in dashes) \
            and any(dashes):
        canvas.op("d", "[" + " ".join(_n(d) for d in dashes) + "]", 0)


def _stroke_and_fill(canvas: _Canvas, annot: Dictionary, content: dict, opacity: float):
    """Set up stroke/fill colours, width, dashes and opacity; return (fill, stroke, width)
    where fill/stroke are None when not painted. A shape with neither colour is
    stroked black, as viewers draw a dictionary without ``/C``."""
    width = _stroke_width(annot)
    stroke, fill = _color(annot.get("/C")), _color(annot.get("/IC"))
    if stroke is None and fill is None:
        stroke = _BLACK
    if width <= 0:
        stroke = None
    canvas.graphics_state(opacity)
    if stroke is not None:
        canvas.stroke_color(stroke).op("w", width)
        _dashes(canvas, content)
    if fill is not None:
        canvas.fill_color(fill)
    return fill, stroke, width


def _paint_square(canvas, annot, content, rect, opacity):
    fill, stroke, width = _stroke_and_fill(canvas, annot, content, opacity)
    inset = width / 2 if stroke is not None else 0
    x0, y0, x1, y1 = rect[0] + inset, rect[1] + inset, rect[2] - inset, rect[3] - inset
    canvas.op("re", x0, y0, max(0.0, x1 - x0), max(0.0, y1 - y0)).paint(fill, stroke)


def _paint_circle(canvas, annot, content, rect, opacity):
    fill, stroke, width = _stroke_and_fill(canvas, annot, content, opacity)
    inset = width / 2 if stroke is not None else 0
    canvas.ellipse(rect[0] + inset, rect[1] + inset, rect[2] - inset, rect[3] - inset).paint(fill, stroke)


def _pairs(numbers: list[float]) -> list[tuple[float, float]]:
    return [(numbers[i], numbers[i + 1]) for i in range(0, len(numbers) - 1, 2)]


def _line_ending(canvas: _Canvas, kind: str, tip, toward, width: float, fill, stroke) -> None:
    """Draw the ``/LE`` ending ``kind`` at ``tip`` of a segment coming from ``toward``."""
    dx, dy = tip[0] - toward[0], tip[1] - toward[1]
    length = math.hypot(dx, dy)
    if kind == "/None" or length == 0 or stroke is None:
        return
    ux, uy = dx / length, dy / length  # along the line, outwards
    nx, ny = -uy, ux
    size = max(3 * width, 6.0)

    def at(along: float, across: float) -> tuple[float, float]:
        return (tip[0] + ux * along + nx * across, tip[1] + uy * along + ny * across)

    if kind in ("/OpenArrow", "/ClosedArrow", "/ROpenArrow", "/RClosedArrow"):
        back = -size if kind in ("/OpenArrow", "/ClosedArrow") else size
        wing = size * math.tan(math.radians(30))
        points = [at(back, wing), tip, at(back, -wing)]
        closed = kind.endswith("ClosedArrow")
        canvas.polyline(points, close=closed).paint(fill if closed else None, stroke)
    elif kind == "/Square":
        canvas.polyline([at(-size / 2, -size / 2), at(size / 2, -size / 2), at(size / 2, size / 2),
                         at(-size / 2, size / 2)], close=True).paint(fill, stroke)
    elif kind == "/Diamond":
        canvas.polyline([at(-size / 2, 0), at(0, -size / 2), at(size / 2, 0), at(0, size / 2)],
                        close=True).paint(fill, stroke)
    elif kind == "/Circle":
        canvas.ellipse(tip[0] - size / 2, tip[1] - size / 2, tip[0] + size / 2, tip[1] + size / 2)
        canvas.paint(fill, stroke)
    elif kind == "/Butt":
        canvas.polyline([at(0, -size / 2), at(0, size / 2)]).paint(None, stroke)
    elif kind == "/Slash":
        half = size / 2
        canvas.polyline([at(-half * math.cos(math.radians(60)), -half * math.sin(math.radians(60))),
                         at(half * math.cos(math.radians(60)), half * math.sin(math.radians(60)))]
                        ).paint(None, stroke)


def _endings(annot: Dictionary) -> tuple[str, str]:
    ends = annot.get("/LE")
    if isinstance(ends, Array) and len(ends) == 2:
        return str(ends[0]), str(ends[1])
    return "/None", "/None"


def _paint_open_path(canvas, annot, content, points, opacity, close: bool):
    fill, stroke, width = _stroke_and_fill(canvas, annot, content, opacity)
    if len(points) < 2:
        return
    canvas.op("J", 1).op("j", 1)
    canvas.polyline(points, close=close).paint(fill if close else None, stroke)
    if not close:
        start, end = _endings(annot)
        _line_ending(canvas, start, points[0], points[1], width, fill, stroke)
        _line_ending(canvas, end, points[-1], points[-2], width, fill, stroke)


def _paint_line(canvas, annot, content, rect, opacity):
    _paint_open_path(canvas, annot, content, _pairs(_numbers(annot.get("/L"))), opacity, close=False)


def _paint_polygon(canvas, annot, content, rect, opacity):
    _paint_open_path(canvas, annot, content, _pairs(_numbers(annot.get("/Vertices"))), opacity, close=True)


def _paint_polyline(canvas, annot, content, rect, opacity):
    _paint_open_path(canvas, annot, content, _pairs(_numbers(annot.get("/Vertices"))), opacity, close=False)


def _smooth(canvas: _Canvas, points: list[tuple[float, float]]) -> None:
    """A Catmull-Rom curve through ``points`` as cubic Béziers (a dot for one point)."""
    canvas.op("m", *points[0])
    if len(points) == 1:
        canvas.op("l", *points[0])
        return
    for i in range(len(points) - 1):
        p0, p1, p2 = points[max(i - 1, 0)], points[i], points[i + 1]
        p3 = points[min(i + 2, len(points) - 1)]
        canvas.op("c", p1[0] + (p2[0] - p0[0]) / 6, p1[1] + (p2[1] - p0[1]) / 6,
                  p2[0] - (p3[0] - p1[0]) / 6, p2[1] - (p3[1] - p1[1]) / 6, *p2)


def _paint_ink(canvas, annot, content, rect, opacity):
    width = _stroke_width(annot)
    canvas.graphics_state(opacity)
    background = content.get("backgroundColor")
    if (fill := hex_to_rgb(background)) is not None:
        canvas.fill_color(fill)
        canvas.op("re", rect[0], rect[1], rect[2] - rect[0], rect[3] - rect[1]).op("f")
    canvas.stroke_color(_color(annot.get("/C")) or _BLACK).op("w", width).op("J", 1).op("j", 1)
    for path in annot.get("/InkList", []):
        points = _pairs(_numbers(path))
        if points:
            _smooth(canvas, points)
            canvas.op("S")


def _visible_box(annot: Dictionary, rect: list[float]) -> tuple[float, float, float, float] | None:
    """The part of ``rect`` inside the page's MediaBox (inherited or not), where all
    that is ever shown lies. None when they do not overlap."""
    x0, x1 = sorted((rect[0], rect[2]))
    y0, y1 = sorted((rect[1], rect[3]))
    page = annot.get("/P")
    if isinstance(page, Dictionary):
        try:
            box = [float(v) for v in pikepdf.Page(page).mediabox]
        except (TypeError, ValueError, pikepdf.PdfError):
            box = []
        if len(box) == 4 and all(map(math.isfinite, box)):
            x0, y0 = max(x0, min(box[0], box[2])), max(y0, min(box[1], box[3]))
            x1, y1 = min(x1, max(box[0], box[2])), min(y1, max(box[1], box[3]))
    return (x0, y0, x1, y1) if x0 < x1 and y0 < y1 else None


def _quads(annot: Dictionary, rect: list[float]) -> list[tuple[float, float, float, float]]:
    """Each quadrilateral of ``/QuadPoints`` as ``(x0, y0, x1, y1)``, the Rect without
    them; each cut to the visible part of the Rect (:func:`_visible_box`), and left out
    when nothing of it is visible, so that no drawing grows with a coordinate's value."""
    visible = _visible_box(annot, rect)
    if visible is None:
        return []
    numbers = _numbers(annot.get("/QuadPoints"))
    if len(numbers) < 8:
        return [visible]
    boxes = []
    for i in range(0, len(numbers) - 7, 8):
        xs, ys = numbers[i:i + 8:2], numbers[i + 1:i + 8:2]
        x0, y0 = max(min(xs), visible[0]), max(min(ys), visible[1])
        x1, y1 = min(max(xs), visible[2]), min(max(ys), visible[3])
        if x0 < x1 and y0 < y1:
            boxes.append((x0, y0, x1, y1))
    return boxes


def _paint_markup(canvas, annot, content, rect, opacity):
    subtype = str(annot.Subtype)
    color = _color(annot.get("/C")) or (_YELLOW if subtype == "/Highlight" else _BLACK)
    default_blend = "multiply" if subtype == "/Highlight" else "normal"
    canvas.graphics_state(opacity, _BLEND_MODES.get(content.get("blendMode") or default_blend))
    quads = _quads(annot, rect)
    # a zigzag has at most _ZIGZAG_POINTS points, all of them together _ZIGZAG_TOTAL_POINTS
    min_step = sum(x1 - x0 for x0, _, x1, _ in quads) / _ZIGZAG_TOTAL_POINTS
    for x0, y0, x1, y1 in quads:
        height = y1 - y0
        if subtype == "/Highlight":
            canvas.fill_color(color).op("re", x0, y0, x1 - x0, height).op("f")
            continue
        thickness = max(0.5, height / 14)
        canvas.stroke_color(color).op("w", thickness)
        if subtype == "/Underline":
            y = y0 + thickness / 2 + height * 0.04
            canvas.polyline([(x0, y), (x1, y)]).op("S")
        elif subtype == "/StrikeOut":
            y = y0 + height * 0.45
            canvas.polyline([(x0, y), (x1, y)]).op("S")
        else:  # /Squiggly: a zigzag along the bottom
            amplitude = max(1.0, height / 10)
            step = max(amplitude * 1.5, (x1 - x0) / _ZIGZAG_POINTS, min_step)
            base = y0 + thickness / 2
            points = [(x0, base)]
            count = math.ceil((x1 - x0) / step)
            for i in range(1, count + 1):
                points.append((min(x0 + i * step, x1), base + (amplitude if i % 2 else 0)))
            canvas.op("j", 1).polyline(points).op("S")


def _paint_note(canvas, annot, content, rect, opacity):
    """A note icon filling the Rect: a speech bubble for ``comment``, else a sheet with a
    folded corner; lines of text on it."""
    color = _color(annot.get("/C")) or _YELLOW
    x0, y0, x1, y1 = rect
    size = min(x1 - x0, y1 - y0)
    if size <= 0:
        return
    left, top = x0, y1  # the icon keeps its top-left corner, as viewers place note icons
    unit = size / 20

    def p(x, y):
        return (left + x * unit, top - y * unit)

    canvas.graphics_state(opacity)
    canvas.fill_color(color).stroke_color([0.25, 0.25, 0.25]).op("w", max(0.5, unit)).op("j", 1)
    if str(annot.get("/Name", "/Note")) == "/Comment":
        canvas.rounded_rect(*p(1, 15), *p(19, 1), 3 * unit)
        canvas.op("B")
        canvas.polyline([p(5, 14.6), p(4, 19), p(9.5, 14.6)], close=True).op("B")
    else:
        canvas.polyline([p(1.5, 1), p(18.5, 1), p(18.5, 14), p(13.5, 19), p(1.5, 19)], close=True).op("B")
        canvas.polyline([p(18.5, 14), p(13.5, 14), p(13.5, 19)]).op("S")
    canvas.op("w", max(0.4, unit * 0.9))
    for y in (5, 8, 11):
        canvas.polyline([p(5, y), p(15, y)]).op("S")


def _font_for(content: dict) -> str:
    styles = {str(s).lower() for s in content.get("fontStyle") or [] if isinstance(s, str)}
    bold, italic = "bold" in styles, "italic" in styles
    return "Helvetica" + {(False, False): "", (True, False): "-Bold", (False, True): "-Oblique",
                          (True, True): "-BoldOblique"}[(bold, italic)]


def _words(data: bytes):
    """``(start, end without its space, end)`` of each word of ``data``, split after
    every space (a space run gives empty words; one empty word after a final space)."""
    start = 0
    while (space := data.find(b" ", start)) >= 0:
        yield start, space, space + 1
        start = space + 1
    yield start, len(data), len(data)


def _wrap_text(text: str, font: str, size: float, width: float, max_lines: int | None = None) -> list[bytes]:
    """``text`` as Windows-1252 lines no wider than ``width`` points: breaks at newlines
    and spaces, and inside a word only when the word alone is too wide. At most
    ``max_lines`` lines (the first ones). Linear in the length of ``text``: each
    paragraph's widths are summed once, a line's end is found by bisection."""
    widths = _WIDTHS["Helvetica-Bold" if "Bold" in font else "Helvetica"]
    limit = width * 1000 / size  # in 1/1000 em, like the widths
    lines: list[bytes] = []
    for paragraph in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        data = _winansi(paragraph)
        ends = [0, *accumulate(widths[b - 32] for b in data)]  # ends[i]: width of data[:i]
        start = core = 0  # the line so far is data[start:...], data[start:core] without trailing spaces
        for word_start, word_core, word_end in _words(data):
            if max_lines is not None and len(lines) >= max_lines:
                return lines[:max_lines]
            line_core = word_core if word_core > word_start else core  # with this word
            if word_start > start and ends[line_core] - ends[start] > limit:
                lines.append(data[start:core])
                start = core = word_start
                line_core = word_core
            while word_end - start > 1 and ends[line_core] - ends[start] > limit:
                if max_lines is not None and len(lines) >= max_lines:
                    return lines[:max_lines]
                # the longest part that fits (at least one character)
                cut = max(start + 1, bisect_right(ends, ends[start] + limit, start + 1, word_end) - 1)
                lines.append(data[start:cut])
                start = cut
            core = max(line_core, start)
        lines.append(data[start:core])
    return lines if max_lines is None else lines[:max_lines]


def _paint_free_text(canvas, annot, content, rect, opacity):
    """Background (``/C``), border and the text in its box; the box turns by the
    record's ``rotation`` (degrees counter-clockwise, multiples of 90). Text more than
    about twice as long as its box holds starts at the top whatever its
    ``verticalAlign``, and only its first lines, those the box shows, are drawn."""
    rotation = content.get("rotation")
    rotation = int(rotation) // 90 * 90 % 360 if isinstance(rotation, (int, float)) else 0
    width, height = rect[2] - rect[0], rect[3] - rect[1]
    if rotation in (90, 270):
        width, height = height, width
    canvas.graphics_state(opacity)
    background = _color(annot.get("/C"))
    border_width = content.get("borderWidth")
    border_width = float(border_width) if isinstance(border_width, (int, float)) and border_width > 0 else 0.0
    border = hex_to_rgb(content.get("borderColor")) or (_BLACK if border_width else None)
    if background is not None:
        canvas.fill_color(background).op("re", 0, 0, width, height).op("f")
    if border is not None and border_width:
        canvas.stroke_color(border).op("w", border_width)
        if content.get("borderStyle") == "dashed":
            canvas.op("d", f"[{_n(3 * border_width)}]", 0)
        canvas.op("re", border_width / 2, border_width / 2, width - border_width,
                  height - border_width).op("S")
    size = content.get("fontSize")
    size = float(size) if isinstance(size, (int, float)) and size > 0 else 12.0
    text = content.get("text")
    if isinstance(text, dict) and text.get("format") == "xhtml":
        text = decode_text(annot.get("/Contents"))  # the plain text export made of the XHTML
    else:
        text = text.get("value") if isinstance(text, dict) else text
    font = _font_for(content)
    pad = border_width + 2
    factor = content.get("lineHeightFactor")
    leading = size * (float(factor) if isinstance(factor, (int, float)) and factor > 0 else 1.19)
    # lines that can show when the text starts at the top: those below are clipped away.
    # Wrapping stops a little after twice that; text that long starts at the top.
    shown = (height - 1.5 * pad) / leading
    shown = max(0, math.ceil(shown)) if math.isfinite(shown) and shown < 1e9 else None
    wrap_limit = None if shown is None else 2 * shown + 2
    lines = _wrap_text(text if isinstance(text, str) else "", font, size, max(1.0, width - 2 * pad),
                       None if wrap_limit is None else wrap_limit + 1)
    block = (len(lines) - 1) * leading + size * (_FONT_ASCENT + _FONT_DESCENT)
    free = height - 2 * pad - block
    if wrap_limit is not None and len(lines) > wrap_limit:
        lines, free = lines[:shown], 0.0
    top = height - pad - {"center": free / 2, "bottom": free}.get(content.get("verticalAlign"), 0)
    canvas.op("q").op("re", pad / 2, pad / 2, max(0.0, width - pad), max(0.0, height - pad)).op("W").op("n")
    canvas.op("BT").font(font, size).fill_color(hex_to_rgb(content.get("fontColor")) or _BLACK)
    align = content.get("horizontalAlign")
    for i, line in enumerate(lines):
        spare = width - 2 * pad - _text_width(line, font, size)
        x = pad + {"center": spare / 2, "right": spare}.get(align, 0)
        canvas.text_line(line, x, top - size * _FONT_ASCENT - i * leading)
    canvas.op("ET").op("Q")
    matrix = {90: [0, 1, -1, 0, 0, 0], 180: [-1, 0, 0, -1, 0, 0], 270: [0, -1, 1, 0, 0, 0]}.get(rotation)
    return [0, 0, width, height], matrix


def _stamp_label(content: dict) -> str:
    title = content.get("title")
    if isinstance(title, str) and title.strip():
        return title.strip().upper()
    kind = str(content.get("stampType") or "Draft")
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", kind).upper()


def _stamp_row(text: str) -> bytes:
    """One row of a stamp in Windows-1252: at most ``_STAMP_CHARS`` characters, a
    longer text cut and ended with "…" (it shrinks to fit the stamp: more could not be read)."""
    if len(text) > _STAMP_CHARS:
        text = text[:_STAMP_CHARS - 1] + "\u2026"
    return _winansi(text)


def _paint_stamp(canvas, annot, content, rect, opacity):
    """A rounded frame with the stamp's title (or its ``stampType`` in words) and its
    subtitle, in the stamp's colour."""
    color = _color(annot.get("/C")) or _STAMP_BLUE
    x0, y0, x1, y1 = rect
    width, height = x1 - x0, y1 - y0
    if width <= 0 or height <= 0:
        return
    line = max(1.0, min(width, height) * 0.05)
    canvas.graphics_state(opacity)
    canvas.stroke_color(color).fill_color(color).op("w", line)
    canvas.rounded_rect(x0 + line / 2, y0 + line / 2, x1 - line / 2, y1 - line / 2, height * 0.15).op("S")
    subtitle = content.get("subtitle")
    rows = [(_stamp_row(_stamp_label(content)), "Helvetica-Bold")]
    if isinstance(subtitle, str) and subtitle.strip():
        rows.append((_stamp_row(subtitle.strip()), "Helvetica"))
    inner_w, inner_h = width - 4 * line - height * 0.3, height - 4 * line  # clear of the corners
    shares = [0.62, 0.38] if len(rows) == 2 else [1.0]
    baseline = y1 - 2 * line
    canvas.op("BT")
    for (data, font), share in zip(rows, shares):
        size = inner_h * share / (_FONT_ASCENT + _FONT_DESCENT)
        full = _text_width(data, font, 1)
        if full > 0:
            size = min(size, inner_w / full)
        baseline -= size * _FONT_ASCENT + (inner_h * share - size * (_FONT_ASCENT + _FONT_DESCENT)) / 2
        x = x0 + (width - _text_width(data, font, size)) / 2
        canvas.font(font, size).text_line(data, x, baseline)
        baseline -= size * _FONT_DESCENT + (inner_h * share - size * (_FONT_ASCENT + _FONT_DESCENT)) / 2
    canvas.op("ET")


def _paint_file(canvas, annot, content, rect, opacity):
    """A paper-clip icon filling the Rect."""
    x0, y0, x1, y1 = rect
    size = min(x1 - x0, y1 - y0)
    if size <= 0:
        return
    unit = size / 20
    cx = x0 + (x1 - x0) / 2

    def p(x, y):
        return (cx + (x - 10) * unit, y1 - y * unit)

    canvas.graphics_state(opacity)
    canvas.stroke_color(_color(annot.get("/C")) or [0.25, 0.25, 0.3]).op("w", max(0.6, 1.6 * unit))
    canvas.op("J", 1).op("j", 1)
    canvas.polyline([p(12, 6), p(12, 15)])
    canvas.op("c", *p(12, 19), *p(6, 19), *p(6, 15))
    canvas.op("l", *p(6, 4)).op("c", *p(6, 0.5), *p(14.5, 0.5), *p(14.5, 4))
    canvas.op("l", *p(14.5, 16)).op("S")


def _paint_caret(canvas, annot, content, rect, opacity):
    """A filled caret (an inverted V closed at its foot) in ``/C``, filling the Rect."""
    x0, y0, x1, y1 = rect
    if x1 <= x0 or y1 <= y0:
        return
    canvas.graphics_state(opacity)
    canvas.fill_color(_color(annot.get("/C")) or [0.0, 0.0, 1.0])
    mid = (x0 + x1) / 2
    canvas.op("m", x0, y0).op("c", mid, y0, mid, y1 - (y1 - y0) / 3, mid, y1)
    canvas.op("c", mid, y1 - (y1 - y0) / 3, mid, y0, x1, y0).op("h").op("f")


#: Draws one subtype on the canvas (canvas, annotation, record, Rect, opacity). Returns
#: None to draw in page space (``/BBox`` = ``/Rect``) or ``(bbox, matrix)`` of its own box.
Painter = Callable[[_Canvas, Dictionary, dict, list, float], "tuple[list[float], list[float] | None] | None"]
_PAINTERS: dict[str, Painter] = {
    "/Square": _paint_square, "/Circle": _paint_circle, "/Line": _paint_line,
    "/Polygon": _paint_polygon, "/PolyLine": _paint_polyline, "/Ink": _paint_ink,
    "/Highlight": _paint_markup, "/Underline": _paint_markup, "/StrikeOut": _paint_markup,
    "/Squiggly": _paint_markup, "/Text": _paint_note, "/FreeText": _paint_free_text,
    "/Stamp": _paint_stamp, "/FileAttachment": _paint_file, "/Caret": _paint_caret,
}
