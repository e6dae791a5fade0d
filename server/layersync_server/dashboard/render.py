"""Page images: a layer's exported PDF rendered by PDFium (pypdfium2, the renderer
Chrome uses and Document Engine's ``/pages/{pageIndex}/image`` route is built on).

Images are cached by ``(document id, layer, epoch, revision)`` — the layer's state
they show — with the exported PDF they come from: a page view asks for every page of
one revision, and a layer's next revision is a new key. Both caches are bounded (by
entries and bytes). PDFium is not thread-safe, so every call into it holds
:data:`_PDFIUM`; callers run these functions in worker threads.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from dataclasses import dataclass

import pikepdf
import pypdfium2

#: Pixels per PDF point of the page images (1.5: a Letter page is 918 px wide).
SCALE = 1.5
#: Longest side of a page image, pixels (huge pages are drawn smaller).
MAX_SIDE_PX = 2400
_PDFIUM = threading.Lock()


#: Largest side of an image asked for by size (``width_px``/``height_px``): the other side
#: follows the page's aspect ratio, so without this bound a narrow page would ask PDFium for
#: a bitmap of gigabytes.
MAX_ASKED_SIDE_PX = 8000


class ImageTooLarge(ValueError):
    """The asked size makes the page's other side larger than :data:`MAX_ASKED_SIDE_PX`."""


@dataclass(frozen=True)
class PageBox:
    """A page as shown: ``width`` x ``height`` points after ``rotation`` (0/90/180/270)."""

    width: float
    height: float
    rotation: int

    def overlay(self, bbox) -> tuple[float, float, float, float] | None:
        """Instant ``bbox`` ``[left, top, width, height]`` (unrotated page, top-left
        origin, points; see ``pdf_geometry``) → ``(left, top, width, height)`` in percent
        of the shown page, cut to the page; None when it is not four numbers or lies
        wholly off the page."""
        try:
            left, top, w, h = (float(v) for v in bbox)
        except (TypeError, ValueError):
            return None
        if self.width <= 0 or self.height <= 0:
            return None
        # unrotated size, then the same turn PDFium applies
        width, height = (self.height, self.width) if self.rotation in (90, 270) else (self.width, self.height)
        turn = {0: lambda u, v: (u, v), 90: lambda u, v: (height - v, u),
                180: lambda u, v: (width - u, height - v),
                270: lambda u, v: (v, width - u)}.get(self.rotation, lambda u, v: (u, v))
        xs, ys = zip(*(turn(u, v) for u, v in ((left, top), (left + w, top + h))))
        x0, x1 = max(0.0, min(xs)), min(self.width, max(xs))  # the part on the page
        y0, y1 = max(0.0, min(ys)), min(self.height, max(ys))
        if x1 < x0 or y1 < y0:
            return None  # wholly off the page
        return (round(100 * x0 / self.width, 3), round(100 * y0 / self.height, 3),
                round(100 * (x1 - x0) / self.width, 3), round(100 * (y1 - y0) / self.height, 3))


class _Bounded:
    """A least-recently-used dict bounded by entries and by the sum of ``len(value)``."""

    def __init__(self, max_entries: int, max_bytes: int):
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key, value, size: int) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, size)
            self._bytes += size
            while len(self._items) > self.max_entries or (self._bytes > self.max_bytes
                                                          and len(self._items) > 1):
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped


class PageImages:
    """The per-app caches of exported PDFs, page images and page geometry."""

    def __init__(self):
        self._pdfs = _Bounded(8, 128 * 1024 * 1024)
        self._pngs = _Bounded(512, 96 * 1024 * 1024)
        self._boxes = _Bounded(256, 1 << 62)

    def exported(self, key) -> bytes | None:
        """The exported PDF cached under ``key``, or None."""
        found = self._pdfs.get(key)
        return None if found is None else found[0]

    def keep_exported(self, key, pdf: bytes) -> None:
        self._pdfs.put(key, pdf, len(pdf))

    def cached_png(self, key, page_index: int) -> bytes | None:
        found = self._pngs.get((key, page_index))
        return None if found is None else found[0]

    def png(self, key, pdf: bytes, page_index: int, width_px: int | None = None,
            height_px: int | None = None) -> bytes | None:
        """Page ``page_index`` of ``pdf`` as PNG (None when there is no such page),
        cached under ``(key, page_index)`` (and the size asked for). Drawn at
        :data:`SCALE` (at most :data:`MAX_SIDE_PX` on the longer side) unless
        ``width_px`` or ``height_px`` is given: then that side has exactly that many
        pixels and the other keeps the page's aspect ratio (Document Engine's
        ``/pages/{pageIndex}/image?width=``). Blocking."""
        cache_key = (key, page_index) if width_px is None and height_px is None \
            else (key, page_index, width_px, height_px)
        found = self._pngs.get(cache_key)
        if found is not None:
            return found[0]
        with _PDFIUM:
            document = _open(pdf)
            if document is None:
                return None
            try:
                if not 0 <= page_index < len(document):
                    return None
                page = document[page_index]
                width, height = page.get_size()  # as shown (rotation applied)
                if width_px is not None:
                    scale, size = width_px / max(width, 1), (width_px, max(1, round(height * width_px / max(width, 1))))
                elif height_px is not None:
                    scale, size = height_px / max(height, 1), (max(1, round(width * height_px / max(height, 1))), height_px)
                else:
                    size = None
                if size is not None and max(size) > MAX_ASKED_SIDE_PX:  # a 3 × 14400 pt page at width=8000
                    page.close()
                    raise ImageTooLarge(f"page {page_index} at {size[0]}×{size[1]} pixels: no side may "
                                        f"exceed {MAX_ASKED_SIDE_PX}")
                if size is None:
                    scale, size = min(SCALE, MAX_SIDE_PX / max(width, height, 1)), None
                image = page.render(scale=scale, draw_annots=True).to_pil()
                page.close()
            finally:
                document.close()
        if size is not None and image.size != size:  # PDFium rounds the bitmap size up
            image = image.resize(size)
        out = io.BytesIO()
        image.convert("RGB").save(out, "PNG", compress_level=1)
        png = out.getvalue()
        self._pngs.put(cache_key, png, len(png))
        return png

    def boxes(self, sha256: str, pdf_bytes) -> list[PageBox]:
        """The shown size and rotation of each page of the PDF whose SHA-256 is
        ``sha256``; ``pdf_bytes()`` reads it when not cached. Blocking."""
        found = self._boxes.get(sha256)
        if found is not None:
            return found[0]
        data = pdf_bytes()
        boxes = _measure(data)
        if boxes is None:
            boxes = _measure(_rewritten(data)) or []
        self._boxes.put(sha256, boxes, len(boxes))
        return boxes


def app_page_images(app) -> PageImages:
    """The app's one :class:`PageImages` (in ``app.state``), made on first use: the
    dashboard's page view and the admin API's ``/pages/{pageIndex}/image`` share it."""
    images = getattr(app.state, "page_images", None)
    if images is None:
        images = app.state.page_images = PageImages()
    return images


def _open(data: bytes | None) -> pypdfium2.PdfDocument | None:
    """PDFium's document of ``data``, None when PDFium cannot read it. Hold :data:`_PDFIUM`."""
    if data is None:
        return None
    try:
        return pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError:
        return None


def _measure(data: bytes | None) -> list[PageBox] | None:
    """The shown size and rotation of each page of ``data``, None when PDFium cannot read it."""
    with _PDFIUM:
        document = _open(data)
        if document is None:
            return None
        try:
            boxes = []
            for index in range(len(document)):
                page = document[index]
                width, height = page.get_size()
                boxes.append(PageBox(width, height, page.get_rotation() % 360))
                page.close()
        finally:
            document.close()
    return boxes


def _rewritten(data: bytes) -> bytes | None:
    """qpdf's rewrite of ``data`` (what the upload read), None when qpdf cannot read it."""
    try:
        with pikepdf.open(io.BytesIO(data)) as pdf:
            out = io.BytesIO()
            pdf.save(out)
            return out.getvalue()
    except pikepdf.PdfError:
        return None
