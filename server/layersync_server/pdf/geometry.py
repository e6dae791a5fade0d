"""Page coordinate conversion between PDF user space and Instant JSON.

Instant JSON places annotations with a top-left origin in PDF points: ``bbox`` is
``[left, top, width, height]`` measured from the top-left corner of the page's
CropBox (MediaBox when there is no CropBox), y growing downwards. Coordinates are in
the *unrotated* page: ``/Rotate`` is a display property and is not applied, so values
map 1:1 onto the PDF's own and export → re-import round-trips exactly on rotated
pages too. Numbers are rounded to 4 decimals so repeated imports are identical.
"""

from __future__ import annotations

import pikepdf


def _r(value: float) -> float:
    return round(float(value), 4)


class PageSpace:
    """Converter for one page. Construct with :meth:`of`."""

    def __init__(self, left: float, bottom: float, right: float, top: float):
        self.x0 = min(left, right)
        self.y1 = max(bottom, top)

    @classmethod
    def of(cls, page: pikepdf.Page) -> "PageSpace":
        """Use the page's CropBox, else its MediaBox (inherited values included)."""
        return cls(*[float(v) for v in page.cropbox])  # pikepdf falls back to MediaBox

    def point_to_instant(self, x, y) -> list[float]:
        """PDF user-space point → ``[x, y]`` top-left origin."""
        return [_r(float(x) - self.x0), _r(self.y1 - float(y))]

    def point_to_pdf(self, point) -> list[float]:
        """``[x, y]`` top-left origin → PDF user-space point."""
        return [_r(float(point[0]) + self.x0), _r(self.y1 - float(point[1]))]

    def rect_to_bbox(self, rect) -> list[float]:
        """PDF ``[llx lly urx ury]`` (any corner order) → ``[left, top, width, height]``."""
        x1, y1, x2, y2 = [float(v) for v in rect]
        left, right, bottom, top = min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)
        return [_r(left - self.x0), _r(self.y1 - top), _r(right - left), _r(top - bottom)]

    def bbox_to_rect(self, bbox) -> list[float]:
        """``[left, top, width, height]`` → PDF ``[llx lly urx ury]``."""
        left, top, width, height = [float(v) for v in bbox]
        x = left + self.x0
        y_top = self.y1 - top
        return [_r(x), _r(y_top - height), _r(x + width), _r(y_top)]

    def quads_to_rects(self, quads) -> list[list[float]]:
        """``/QuadPoints`` (8 numbers per quad) → one bbox per quad."""
        numbers = [float(v) for v in quads]
        rects = []
        for i in range(0, len(numbers) - 7, 8):
            xs, ys = numbers[i:i + 8:2], numbers[i + 1:i + 8:2]
            rects.append(self.rect_to_bbox([min(xs), min(ys), max(xs), max(ys)]))
        return rects

    def rects_to_quads(self, rects) -> list[float]:
        """Inverse of :meth:`quads_to_rects` (Acrobat order: TL, TR, BL, BR)."""
        quads: list[float] = []
        for bbox in rects:
            llx, lly, urx, ury = self.bbox_to_rect(bbox)
            quads += [llx, ury, urx, ury, llx, lly, urx, lly]
        return quads
