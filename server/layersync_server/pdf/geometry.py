"""Page coordinate conversion between PDF user space and Instant JSON.

Instant JSON places annotations with a top-left origin in PDF points: ``bbox`` is
``[left, top, width, height]`` measured from the top-left corner of the page's
CropBox (MediaBox when there is no CropBox), y growing downwards. Coordinates are in
the *unrotated* page: ``/Rotate`` is a display property and is not applied, so values
map 1:1 onto the PDF's own and export → re-import round-trips exactly on rotated
pages too. Numbers are rounded to 4 decimals so repeated imports are identical.

The conversion is :class:`layersync_formats.values.PageBox` (XFDF uses the same);
:class:`PageSpace` only finds a pikepdf page's box.
"""

from __future__ import annotations

import pikepdf
from layersync_formats.values import PageBox


class PageSpace(PageBox):
    """Converter for one page. Construct with :meth:`of`."""

    @classmethod
    def of(cls, page: pikepdf.Page) -> "PageSpace":
        """Use the page's CropBox, else its MediaBox (inherited values included)."""
        return cls([float(v) for v in page.cropbox])  # pikepdf falls back to MediaBox
