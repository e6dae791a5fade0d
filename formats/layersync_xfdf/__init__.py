"""XFDF (ISO 19444-1) ↔ Instant JSON records: the one codec of LayerSync.

The server (``GET .../document.xfdf``, ``POST .../apply_xfdf``, XFDF on upload, the
``layersync-server`` CLI) and the Python bindings (``Document.export_xfdf`` /
``import_xfdf``, the ``layersync`` CLI) both use it. Standard library and defusedxml
only. The mapping is documented in docs/protocol.md ("XFDF and Instant JSON").

* :func:`write_xfdf` — records (+ form field values, attachments) → XFDF text
  (:mod:`.writer`).
* :func:`read_xfdf` — XFDF bytes/text (plain or command document) → :class:`XfdfChanges`
  (:mod:`.reader`).
* :class:`XfdfError` — untrusted input refused (not XML, a DTD/entities, too deep, not
  ``<xfdf>``).
* :mod:`.values` — what both share: tables, :class:`PageBox`, dates, colours, rich text.
"""

from layersync_xfdf.reader import read_xfdf
from layersync_xfdf.values import (ELEMENTS, LETTER, LS_NS, MEDIA_TYPE, XFDF_NS, PageBox, XfdfChanges,
                                   XfdfError)
from layersync_xfdf.writer import unwritable, write_xfdf

__all__ = ["ELEMENTS", "LETTER", "LS_NS", "MEDIA_TYPE", "XFDF_NS", "PageBox", "XfdfChanges",
           "XfdfError", "read_xfdf", "unwritable", "write_xfdf"]
