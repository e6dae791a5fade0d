"""Annotation formats LayerSync reads and writes besides its own records: the rules the
server's PDF import/export and the XFDF codec share, and the XFDF codec itself. Standard
library and defusedxml only (no pikepdf), so the Python bindings can use it too.

* :mod:`.values` — numbers, page boxes (:class:`PageBox`), PDF dates ↔ ISO 8601,
  colours ↔ ``"#RRGGBB"``, ``/DA`` text, Instant enums PDF and XFDF name.
* :mod:`.richtext` — Adobe rich text (``/RC``, ``<contents-richtext>``) ↔ Instant
  ``xhtml``, its plain text, CSS (``/DS``, ``defaultstyle``), free-text style.
* :mod:`.threads` — a reply's thread root (a reply to a reply joins its root's thread),
  for ``/IRT`` and ``inreplyto``.
* :mod:`.safexml` — the one parser of untrusted XML (defusedxml: no DTD, no entities,
  bounded depth).
* XFDF (ISO 19444-1) ↔ Instant JSON records, for the server (``GET .../document.xfdf``,
  ``POST .../apply_xfdf``, XFDF on upload, the ``layersync-server`` CLI) and the Python
  bindings (``Document.export_xfdf`` / ``import_xfdf``, the ``layersync`` CLI); the
  mapping is in docs/protocol.md ("XFDF and Instant JSON"):

  * :func:`write_xfdf` — records (+ form field values, attachments) → XFDF text
    (:mod:`.xfdf_writer`).
  * :func:`read_xfdf` — XFDF bytes/text (plain or command document) →
    :class:`XfdfChanges` (:mod:`.xfdf_reader`).
  * :class:`XfdfError` — untrusted input refused (not XML, a DTD/entities, too deep, not
    ``<xfdf>``).
  * :mod:`.xfdf` — what reader and writer share: namespaces, type and flag tables.
"""

from layersync_formats.values import LETTER, PageBox
from layersync_formats.xfdf import ELEMENTS, HANDOUT_KEYS, LS_NS, MEDIA_TYPE, XFDF_NS, XfdfChanges, XfdfError
from layersync_formats.xfdf_reader import read_xfdf
from layersync_formats.xfdf_writer import unwritable, write_xfdf

__all__ = ["ELEMENTS", "HANDOUT_KEYS", "LETTER", "LS_NS", "MEDIA_TYPE", "XFDF_NS", "PageBox", "XfdfChanges",
           "XfdfError", "read_xfdf", "unwritable", "write_xfdf"]
