"""What the XFDF reader and writer share: namespaces, the type and flag tables, the error
and result types. Numbers, page boxes, dates and colours are in
:mod:`.values`, rich text and CSS in :mod:`.richtext`, the untrusted XML parser in
:mod:`.safexml`: the same rules the server's PDF import/export uses.

XFDF (ISO 19444-1) ↔ Instant JSON records, both directions.

The mapping, field by field, and what XFDF cannot carry are in docs/protocol.md
("XFDF and Instant JSON"). In short:

* Coordinates: XFDF uses PDF user space (origin bottom left), Instant JSON the page's
  CropBox with a top-left origin; :class:`~.values.PageBox` converts, given each page's CropBox
  (the PDF knows it, XFDF does not; US Letter when not given).
* Every record field XFDF has a place for is written there; the fields it has no place
  for (``customData``, ink ``intensities``, …) travel in one LayerSync extension element
  ``<ls:instant-json>`` (namespace :data:`LS_NS`) holding a JSON object, which other XFDF
  readers ignore. So records → XFDF → records is lossless, and an XFDF written by
  Acrobat, Apryse or Foxit reads as the records those fields say.
* XML from outside is untrusted: it is parsed by :func:`.safexml.parse_untrusted`
  (defusedxml, DTDs forbidden), so external entities and entity expansion (billion
  laughs) are refused with :class:`XfdfError` before anything is read.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from layersync_formats.safexml import local_name, namespace_of
from layersync_formats.values import round4

#: The XFDF namespace (ISO 19444-1).
XFDF_NS = "http://ns.adobe.com/xfdf/"
#: LayerSync's extension namespace (``<ls:instant-json>``).
LS_NS = "https://layersync.dev/ns/xfdf/1"
#: The media type of an XFDF document (Document Engine's ``document.xfdf``).
MEDIA_TYPE = "application/vnd.adobe.xfdf"

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

#: Record types with no XFDF element that travel in the document's ``<ls:instant-json>``
#: (``{"records": [...]}``, a child of ``<xfdf>``): bookmarks and form field definitions.
EXTENSION_TYPES = ("pspdfkit/bookmark", "pspdfkit/form-field/")

#: Keys a LayerSync record carries besides its Instant JSON: its ownership and what the
#: user may do with it (the bindings' ``layersync.HANDOUT_KEYS``; the server keeps them
#: beside the content). XFDF carries content only: the reader drops them from every
#: ``<ls:instant-json>``, so a file can not change who owns a record or its group.
HANDOUT_KEYS = ("createdBy", "updatedBy", "group",
                "isEditable", "isDeletable", "canReply", "isFillable", "canSetGroup")

#: Instant ``flags`` ↔ XFDF ``flags`` words (XFDF has ``print``, Instant ``noPrint``).
FLAGS = {"hidden": "hidden", "invisible": "invisible", "noZoom": "nozoom",
         "noRotate": "norotate", "noView": "noview", "readOnly": "readonly", "locked": "locked",
         "toggleNoView": "togglenoview", "lockedContents": "lockedcontents"}
#: Canonical order of Instant flags as read from XFDF (the record schema's enum order).
FLAG_ORDER = ("noPrint", "noZoom", "noRotate", "noView", "hidden", "invisible", "readOnly",
              "locked", "toggleNoView", "lockedContents")
JUSTIFICATION = {"left": "left", "center": "centered", "right": "right"}


class XfdfError(ValueError):
    """The bytes are not an XFDF document this codec reads: not well-formed XML, a DTD
    or entity (refused: external entities, entity expansion), or not ``<xfdf>``."""


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
    #: Records XFDF has no element for (bookmarks, form field definitions), from the
    #: document's ``<ls:instant-json>``: each creates its record or replaces the one with
    #: its id, in a command document too.
    extension_records: list[dict] = field(default_factory=list)
    is_command: bool = False

    @property
    def records(self) -> list[dict]:
        """``added``, ``modified`` and ``extension_records`` (every record the document carries)."""
        return self.added + self.modified + self.extension_records


# -- values only XFDF has ---------------------------------------------------------------

#: The largest magnitude of a number read (PDF's own limit for reals, PDF 32000-1 Annex C):
#: so coordinates stay finite after conversion (a width of 1e308 - -1e308 would not).
MAX_NUMBER = 3.403e38


def numbers_of(text: str | None) -> list[float]:
    """The numbers of an XFDF list attribute (``rect``, ``coords``, ``width``, …). Raises
    :class:`XfdfError` for anything that is not a finite number within :data:`MAX_NUMBER`
    (``NaN``, ``inf``, ``1e400``): no record may hold a number JSON cannot carry."""
    if not text:
        return []
    try:
        numbers = [float(v) for v in re.split(r"[\s,;]+", text.strip()) if v]
    except ValueError:
        raise XfdfError(f"not a list of numbers: {text[:60]!r}") from None
    if not all(abs(v) <= MAX_NUMBER for v in numbers):  # False for NaN too
        raise XfdfError(f"numbers must be finite, at most {MAX_NUMBER:g} in magnitude: {text[:60]!r}")
    return [round4(v) for v in numbers]


def strip_xfdf_namespace(element: ET.Element) -> None:
    for node in element.iter():
        if namespace_of(node.tag) == XFDF_NS:
            node.tag = local_name(node.tag)
