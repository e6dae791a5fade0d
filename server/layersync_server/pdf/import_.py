"""Read a PDF's annotations as Instant JSON v2 records (pikepdf).

Ids are stable: a PDF's ``/NM`` is used when it is a valid, unused id; otherwise the
id is derived from the SHA-256 of the PDF bytes, the page index and the annotation's
index in ``/Annots`` and formatted like a ULID, so importing the same bytes twice
gives the same ids. Popups are not records (their parent carries the text);
subtypes without an Instant type (Caret, Sound, …) are skipped and left in the PDF.

Mapping (PDF ``/Subtype`` → Instant ``type``): Text → pspdfkit/note,
FreeText → pspdfkit/text, Highlight/Underline/StrikeOut/Squiggly →
pspdfkit/markup/{highlight,underline,strikeout,squiggly}, Ink → pspdfkit/ink,
Square → pspdfkit/shape/rectangle, Circle → pspdfkit/shape/ellipse,
Line → pspdfkit/shape/line, Polygon/PolyLine → pspdfkit/shape/{polygon,polyline},
Stamp → pspdfkit/stamp, FileAttachment → pspdfkit/file, Link → pspdfkit/link,
Widget → pspdfkit/widget. Coordinates: :mod:`layersync_server.pdf.geometry`. The
outline (``/Outlines``) gives ``pspdfkit/bookmark`` records: :mod:`~layersync_server.pdf.outlines`.

Rich text (``/RC``) becomes ``{"format": "xhtml"}`` text, free-text style is resolved
from ``/RC`` and ``/DS`` over ``/DA``, ``customData`` comes from ``/LSYN_CustomData``,
``/IRT`` replies become ``pspdfkit/comment`` records of their root's thread and an
Acrobat "replace text" group (StrikeOut + Caret, ``/RT /Group``) is one strikeout
record with ``replaceTextCaret``: docs/protocol.md, "PDF annotation fields and Instant JSON".
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from typing import Callable

import pikepdf

from layersync_server.ids import derived_ulid, is_valid_pdf_name_id
from layersync_server.pdf.geometry import PageSpace
from layersync_server.pdf.outlines import read_bookmarks
from layersync_formats.richtext import free_text_style as resolve_free_text_style
from layersync_formats.richtext import parse_rich_text, rich_text_to_instant
from layersync_formats.threads import thread_root
from layersync_formats.values import LINE_CAPS, NOTE_ICONS, STAMP_TYPES

from layersync_server.pdf.values import (CUSTOM_DATA_KEY, color_to_hex, custom_data_from_pdf,
                                         decode_text, iso_date)

#: Instant ``flags`` ↔ PDF annotation flag bits (PDF 32000-1 Table 165).
FLAG_BITS = {"invisible": 1, "hidden": 2, "noZoom": 8, "noRotate": 16, "noView": 32,
             "readOnly": 64, "locked": 128, "lockedContents": 512}
PRINT_BIT = 4
MARKUP_TYPES = {"/Highlight": "highlight", "/Underline": "underline",
                "/StrikeOut": "strikeout", "/Squiggly": "squiggly"}
#: PDF line ending name (``/LE``) → Instant line cap (:data:`layersync_formats.values.LINE_CAPS`).
LINE_ENDINGS = {"/" + name: cap for cap, name in LINE_CAPS.items()}
EPOCH_ISO = "1970-01-01T00:00:00Z"
# Instant JSON's note icons and stamp types (NOTE_ICONS, STAMP_TYPES: layersync_formats.values);
# another /Name imports as "comment" / "Custom".


class PdfImportError(ValueError):
    """The bytes are not a PDF pikepdf/qpdf can open."""


@dataclass
class ImportedAnnotation:
    """One imported annotation: its record ``content`` and where it sits in the PDF."""

    id: str
    page_index: int
    annot_index: int
    content: dict
    obj: pikepdf.Dictionary
    #: The other annotation of an Acrobat "replace text" group (``/RT /Group``: the Caret
    #: this StrikeOut is ``/IRT`` to), which is part of this record.
    group_partner: pikepdf.Dictionary | None = None


@dataclass
class ImportedDocument:
    """Result of :func:`import_pdf`."""

    sha256: str
    page_count: int
    title: str | None
    annotations: list[ImportedAnnotation]
    #: Embedded files of file annotations: SHA-256 hex → bytes (``fileAttachmentId``).
    attachments: dict[str, bytes] = None
    #: ``pspdfkit/bookmark`` records of the outline (:mod:`layersync_server.pdf.outlines`).
    bookmarks: list[dict] = None

    @property
    def records(self) -> list[dict]:
        """The annotation (and comment) record contents, in page and ``/Annots`` order."""
        return [a.content for a in self.annotations]

    @property
    def layer_records(self) -> list[dict]:
        """Every record a layer made from the PDF holds: :attr:`records`, then the bookmarks."""
        return self.records + list(self.bookmarks or [])


def open_pdf(data: bytes) -> pikepdf.Pdf:
    """Open PDF bytes. Raises :class:`PdfImportError` with qpdf's reason."""
    if not data.lstrip()[:1024].find(b"%PDF-") >= 0:
        raise PdfImportError("not a PDF: no %PDF- header")
    try:
        pdf = pikepdf.open(io.BytesIO(data))
        len(pdf.pages)  # forces the page tree to load
        return pdf
    except pikepdf.PasswordError:
        raise PdfImportError("PDF is encrypted and needs a password; upload it decrypted") from None
    except (pikepdf.PdfError, ValueError, RuntimeError) as exc:
        raise PdfImportError(f"cannot read PDF: {exc}") from None


def import_pdf(data: bytes) -> ImportedDocument:
    """Parse ``data`` and convert its annotations. Raises :class:`PdfImportError`."""
    sha256 = hashlib.sha256(data).hexdigest()
    with open_pdf(data) as pdf:
        try:
            annotations = read_annotations(pdf, sha256)
        except (pikepdf.PdfError, KeyError, TypeError, ValueError, AttributeError, IndexError,
                RecursionError) as exc:
            raise PdfImportError(f"cannot read the PDF's annotations: {exc}") from None
        try:
            bookmarks = [content for content, _ in read_bookmarks(pdf, sha256)]
        except (pikepdf.PdfError, KeyError, TypeError, ValueError, AttributeError, IndexError,
                RecursionError):
            bookmarks = []  # a broken outline: the annotations still import
        attachments = {}
        for a in annotations:
            if a.content.get("fileAttachmentId"):
                data_bytes = embedded_file_bytes(a.obj.get("/FS"))
                if data_bytes is not None:
                    attachments[a.content["fileAttachmentId"]] = data_bytes
            a.obj = None  # the Pdf closes; keep only plain data
        title = decode_text(pdf.docinfo.get("/Title")) if pdf.trailer.get("/Info") is not None else None
        return ImportedDocument(sha256, len(pdf.pages), title or None, annotations, attachments, bookmarks)


def read_annotations(pdf: pikepdf.Pdf, sha256: str) -> list[ImportedAnnotation]:
    """Convert every mappable annotation of ``pdf`` (see module docs for the mapping).

    ``sha256`` is the hex digest of the PDF bytes; it seeds the derived ids.
    """
    fallback_date = _document_date(pdf)
    used_ids: set[str] = set()
    result: list[ImportedAnnotation] = []
    for page_index, page in enumerate(pdf.pages):
        annots = page.obj.get("/Annots")
        if not isinstance(annots, pikepdf.Array):
            continue
        space = PageSpace.of(page)
        for annot_index, annot in enumerate(annots):
            if not isinstance(annot, pikepdf.Dictionary):
                continue
            converter = CONVERTERS.get(str(annot.get("/Subtype", "")))
            if converter is None:
                continue
            record_id = _record_id(annot, sha256, page_index, annot_index, used_ids)
            used_ids.add(record_id)
            instant_type, extra = converter(annot, space)
            content = _common(annot, space, record_id, page_index, fallback_date)
            content["type"] = instant_type
            if instant_type not in ("pspdfkit/note", "pspdfkit/text"):
                # Instant's note is plain: /Contents, else the plain text of /RC
                # (Acrobat may write only /RC).
                note = decode_text(annot.get("/Contents")) or ("/RC" in annot and _rich_plain(annot))
                if note:
                    content["note"] = note
            content.update({k: v for k, v in extra.items() if v is not None})
            custom = custom_data_from_pdf(annot.get(CUSTOM_DATA_KEY))
            if custom is not None:
                content["customData"] = custom
            result.append(ImportedAnnotation(record_id, page_index, annot_index, content, annot))
    _threads_and_groups(result, space_of={i: PageSpace.of(p) for i, p in enumerate(pdf.pages)})
    return result


def _threads_and_groups(result: list[ImportedAnnotation], space_of: dict) -> None:
    """Turn replies into comments of their root's thread, and fold each "replace text"
    group's Caret into its StrikeOut record (docs/protocol.md, "PDF annotation fields").

    A reply is a ``/Text`` annotation with ``/IRT`` and ``/RT /R`` (or no ``/RT``, its
    default) whose ``/IRT`` chain reaches an imported annotation that is not a reply:
    it becomes ``pspdfkit/comment`` with ``rootId`` = that root's id, and the root gets
    ``isCommentThreadRoot: true``."""
    by_obj = {g: a for a in result if (g := indirect_key(a.obj))}

    def is_reply(a: ImportedAnnotation) -> bool:
        irt = a.obj.get("/IRT")
        return (str(a.obj.get("/Subtype")) == "/Text" and isinstance(irt, pikepdf.Dictionary)
                and str(a.obj.get("/RT", "/R")) == "/R" and indirect_key(irt) in by_obj)

    def answers(a: ImportedAnnotation) -> ImportedAnnotation | None:
        return by_obj[indirect_key(a.obj.IRT)] if is_reply(a) else None

    for a in result:
        if not is_reply(a):
            continue
        node = thread_root(a, answers)
        if node is None:
            continue  # a cycle of replies (or one too long): leave them notes
        node.content["isCommentThreadRoot"] = True
        c = a.content
        comment = {"v": 2, "id": c["id"], "type": "pspdfkit/comment", "rootId": node.id,
                   "pageIndex": c["pageIndex"], "text": c["text"]}
        # a comment's dates are optional: only the reply's own (/CreationDate, /M), never
        # the document's, so a comment written without them comes back without them
        modified = iso_date(a.obj.get("/M"))
        created = iso_date(a.obj.get("/CreationDate")) or modified
        if created:
            comment.update(createdAt=created, updatedAt=modified or created)
        for key in ("creatorName", "customData"):
            if key in c:
                comment[key] = c[key]
        a.content = comment
    for a in result:
        irt = a.obj.get("/IRT")
        if str(a.obj.get("/RT")) == "/Group" and str(a.obj.get("/Subtype")) == "/StrikeOut" \
                and isinstance(irt, pikepdf.Dictionary) and str(irt.get("/Subtype")) == "/Caret":
            a.group_partner = irt
            space = space_of.get(a.page_index)
            caret = {"bbox": space.rect_to_bbox(irt.get("/Rect", [0, 0, 0, 0])),
                     "text": _rich_text(irt), "color": color_to_hex(irt.get("/C"))}
            a.content["replaceTextCaret"] = {k: v for k, v in caret.items() if v is not None}


def indirect_key(obj) -> tuple[int, int] | None:
    """``(object number, generation)`` of an indirect object; None for a direct one."""
    gen = getattr(obj, "objgen", (0, 0))
    return gen if gen != (0, 0) else None


def _record_id(annot, sha256: str, page_index: int, annot_index: int, used: set[str]) -> str:
    name = decode_text(annot.get("/NM"))
    if name and is_valid_pdf_name_id(name) and name not in used:
        return name
    return derived_ulid("pdf-annotation", sha256, str(page_index), str(annot_index))


def _document_date(pdf: pikepdf.Pdf) -> str:
    if pdf.trailer.get("/Info") is None:
        return EPOCH_ISO
    info = pdf.docinfo
    return (iso_date(info.get("/ModDate")) or iso_date(info.get("/CreationDate"))
            or EPOCH_ISO)


def _number(value, default=None):
    try:
        return round(float(value), 4)
    except (TypeError, ValueError):
        return default


def _common(annot, space: PageSpace, record_id: str, page_index: int, fallback_date: str) -> dict:
    modified = iso_date(annot.get("/M"))
    created = iso_date(annot.get("/CreationDate")) or modified or fallback_date
    content: dict = {"v": 2, "id": record_id, "name": record_id, "pageIndex": page_index,
                     "bbox": space.rect_to_bbox(annot.get("/Rect", [0, 0, 0, 0])),
                     "opacity": min(1.0, max(0.0, _number(annot.get("/CA"), 1.0))),  # schema: 0..1
                     "createdAt": created, "updatedAt": modified or created}
    author = decode_text(annot.get("/T"))
    if author and str(annot.get("/Subtype")) != "/Widget":
        content["creatorName"] = author
    flags_value = int(annot.get("/F", 0)) if isinstance(annot.get("/F"), (int, pikepdf.Object)) else 0
    flags = [name for name, bit in FLAG_BITS.items() if flags_value & bit]
    if not flags_value & PRINT_BIT:
        flags.append("noPrint")
    if flags:
        content["flags"] = flags
    return content


def _right_angle(value) -> int:
    """A ``/Rotate``-style angle as the record schema's rotation (0, 90, 180 or 270): the
    nearest right angle; 0 when it is not a finite number."""
    try:
        return round(float(value) / 90) % 4 * 90
    except (TypeError, ValueError, OverflowError):
        return 0


def _border_width(annot):
    bs = annot.get("/BS")
    if isinstance(bs, pikepdf.Dictionary) and "/W" in bs:
        return _number(bs.W)
    border = annot.get("/Border")
    if isinstance(border, pikepdf.Array) and len(border) >= 3:
        return _number(border[2])
    return None


def _plain_text(annot) -> dict:
    return {"format": "plain", "value": decode_text(annot.get("/Contents")) or ""}


def _rich_text(annot) -> dict:
    """Instant ``text``: ``{"format": "xhtml"}`` with the content of ``/RC``'s body when
    the annotation has usable rich text, else ``/Contents`` as plain text."""
    rich = rich_text_to_instant(decode_text(annot.get("/RC"))) if "/RC" in annot else None
    if rich is None:
        return _plain_text(annot)
    return {"format": "xhtml", "value": rich[0]}


def _rich_plain(annot) -> str | None:
    rich = rich_text_to_instant(decode_text(annot.get("/RC")))
    return rich[1] if rich else None


def _icon(name) -> str:
    """The Instant icon of a PDF text annotation's /Name; "comment" (its default) when the
    name is missing or not one of Instant's (the record schema requires one of them)."""
    text = str(name).lstrip("/") if name is not None else ""
    icon = text[:1].lower() + text[1:]
    return icon if icon in NOTE_ICONS else "comment"


def _text(annot, space):
    return "pspdfkit/note", {"text": _rich_text(annot), "icon": _icon(annot.get("/Name")),
                             "color": color_to_hex(annot.get("/C"))}


def _free_text(annot, space):
    extra = free_text_style(annot)
    extra.update({"text": _rich_text(annot), "backgroundColor": color_to_hex(annot.get("/C")),
                  "horizontalAlign": {0: "left", 1: "center", 2: "right"}.get(int(annot.get("/Q", 0)), "left"),
                  "verticalAlign": "top",  # required by Instant JSON; PDF free text starts at the top
                  "rotation": _right_angle(annot.get("/Rotate", 0))})
    # the record schema requires an integer fontSize: /DA may give 10.5 or none
    extra["fontSize"] = round(extra["fontSize"]) if "fontSize" in extra else DEFAULT_FONT_SIZE
    extra.setdefault("font", DEFAULT_FONT)  # what viewers draw when no style names one
    extra.setdefault("fontColor", DEFAULT_FONT_COLOR)
    return "pspdfkit/text", extra


def free_text_style(annot) -> dict:
    """``font``, ``fontSize`` and ``fontColor`` of a free text annotation the way Acrobat
    and pdf.js draw it: ``/DA``, overridden by the CSS of ``/DS``, overridden by the
    default style of ``/RC`` (:func:`~layersync_formats.richtext.rich_text_style`)."""
    return resolve_free_text_style(decode_text(annot.get("/DA")), decode_text(annot.get("/DS")),
                                   parse_rich_text(decode_text(annot.get("/RC"))))


#: A markup annotation without a usable /C (the record schema requires a color).
MARKUP_DEFAULT_COLOR = "#000000"
#: A free text annotation whose /DA gives no font size (the record schema requires one).
DEFAULT_FONT_SIZE = 12
#: ... and no font or colour (viewers draw Helvetica, black).
DEFAULT_FONT, DEFAULT_FONT_COLOR = "Helvetica", "#000000"


def _markup(annot, space):
    quads = annot.get("/QuadPoints")
    rects = space.quads_to_rects(quads) if isinstance(quads, pikepdf.Array) and len(quads) >= 8 \
        else [space.rect_to_bbox(annot.Rect)]
    return ("pspdfkit/markup/" + MARKUP_TYPES[str(annot.Subtype)],
            {"rects": rects, "color": color_to_hex(annot.get("/C")) or MARKUP_DEFAULT_COLOR})  # required


def _dash_array(annot) -> list | None:
    """``strokeDashArray`` of a dashed border: ``/BS /S /D`` with its ``/D`` (default
    ``[3]``, PDF 32000-1 Table 166); None when solid or the pattern is unusable."""
    bs = annot.get("/BS")
    if not isinstance(bs, pikepdf.Dictionary) or str(bs.get("/S", "/S")) != "/D":
        return None
    pattern = bs.get("/D", pikepdf.Array([3]))
    if not isinstance(pattern, pikepdf.Array):
        return None
    dashes = [_number(d) for d in pattern]
    if not dashes or any(d is None or d < 0 for d in dashes) or not any(dashes):
        return None
    return [int(d) if float(d).is_integer() else d for d in dashes]


def _stroke(annot) -> dict:
    return {"strokeColor": color_to_hex(annot.get("/C")),
            "fillColor": color_to_hex(annot.get("/IC")),
            "strokeWidth": _border_width(annot), "strokeDashArray": _dash_array(annot)}


def _ink(annot, space):
    lines = []
    for path in annot.get("/InkList", []):
        numbers = list(path)
        lines.append([space.point_to_instant(numbers[i], numbers[i + 1])
                      for i in range(0, len(numbers) - 1, 2)])
    return "pspdfkit/ink", {"lines": {"points": lines,
                                      "intensities": [[1.0] * len(p) for p in lines]},
                            "lineWidth": _border_width(annot) or 1.0,
                            "strokeColor": color_to_hex(annot.get("/C")),
                            "isDrawnNaturally": False, "isSignature": False}


def _square(annot, space):
    return "pspdfkit/shape/rectangle", _stroke(annot)


def _circle(annot, space):
    return "pspdfkit/shape/ellipse", _stroke(annot)


def _line(annot, space):
    coords = [float(v) for v in annot.get("/L", [0, 0, 0, 0])]
    extra = _stroke(annot)
    extra["startPoint"] = space.point_to_instant(coords[0], coords[1])
    extra["endPoint"] = space.point_to_instant(coords[2], coords[3])
    endings = annot.get("/LE")
    if isinstance(endings, pikepdf.Array) and len(endings) == 2:
        caps = {"start": LINE_ENDINGS.get(str(endings[0]), "none"),
                "end": LINE_ENDINGS.get(str(endings[1]), "none")}
        extra["lineCaps"] = {k: v for k, v in caps.items() if v != "none"}  # Instant has no "none"
    return "pspdfkit/shape/line", extra


def _vertices(annot, space) -> dict:
    numbers = [float(v) for v in annot.get("/Vertices", [])]
    extra = _stroke(annot)
    extra["points"] = [space.point_to_instant(numbers[i], numbers[i + 1])
                       for i in range(0, len(numbers) - 1, 2)]
    return extra


def _polygon(annot, space):
    return "pspdfkit/shape/polygon", _vertices(annot, space)


def _polyline(annot, space):
    return "pspdfkit/shape/polyline", _vertices(annot, space)


def _stamp(annot, space):
    name = annot.get("/Name")
    stamp_type = str(name).lstrip("/") if name is not None else "Custom"
    return "pspdfkit/stamp", {"stampType": stamp_type if stamp_type in STAMP_TYPES else "Custom",
                              "color": color_to_hex(annot.get("/C"))}


def embedded_file_bytes(file_spec) -> bytes | None:
    """The bytes of a file specification's embedded file (``/EF /F`` or ``/UF``)."""
    if not isinstance(file_spec, pikepdf.Dictionary):
        return None
    ef = file_spec.get("/EF")
    if not isinstance(ef, pikepdf.Dictionary):
        return None
    stream = ef.get("/F") or ef.get("/UF")
    try:
        return stream.read_bytes() if stream is not None else None
    except pikepdf.PdfError:
        return None


def _file(annot, space):
    spec = annot.get("/FS")
    data = embedded_file_bytes(spec)
    file_name = None
    if isinstance(spec, pikepdf.Dictionary):
        file_name = decode_text(spec.get("/UF")) or decode_text(spec.get("/F"))
    return "pspdfkit/file", {
        "fileAttachmentId": hashlib.sha256(data).hexdigest() if data is not None else None,
        "fileName": file_name, "description": decode_text(annot.get("/Contents")),
        "iconName": str(annot.get("/Name")).lstrip("/") if annot.get("/Name") is not None else None}


def _link(annot, space):
    action = annot.get("/A")
    extra: dict = {}
    if isinstance(action, pikepdf.Dictionary) and str(action.get("/S")) == "/URI":
        extra["action"] = {"type": "uri", "uri": decode_text(action.get("/URI")) or ""}
    return "pspdfkit/link", extra


def _field_name(annot) -> str | None:
    parts, node, seen = [], annot, 0
    while isinstance(node, pikepdf.Dictionary) and seen < 64:
        part = decode_text(node.get("/T"))
        if part:
            parts.append(part)
        node, seen = node.get("/Parent"), seen + 1
    return ".".join(reversed(parts)) or None


def field_node(annot, key: str):
    """The nearest of ``annot`` and its ``/Parent`` chain that holds ``key`` (form
    field attributes are inheritable), or None."""
    node, seen = annot, 0
    while isinstance(node, pikepdf.Dictionary) and seen < 64:
        if key in node:
            return node
        node, seen = node.get("/Parent"), seen + 1
    return None


def _pdf_value(value):
    if isinstance(value, pikepdf.Name):
        return str(value)[1:]
    if isinstance(value, pikepdf.Array):
        return [_pdf_value(v) for v in value]
    if isinstance(value, pikepdf.String):
        return decode_text(value)
    return None


FIELD_TYPES = {"/Tx": "text", "/Btn": "button", "/Ch": "choice", "/Sig": "signature"}


def _widget(annot, space):
    extra = {"formFieldName": _field_name(annot),
             "rotation": _right_angle(annot.get("/MK", {}).get("/R", 0))
             if isinstance(annot.get("/MK"), pikepdf.Dictionary) else 0}
    type_node = field_node(annot, "/FT")
    if type_node is not None and str(type_node.FT) in FIELD_TYPES:
        extra["formFieldType"] = FIELD_TYPES[str(type_node.FT)]
    value_node = field_node(annot, "/V")
    if value_node is not None and _pdf_value(value_node.V) is not None:
        extra["value"] = _pdf_value(value_node.V)  # the form field's value (/V)
    return "pspdfkit/widget", extra


Converter = Callable[[pikepdf.Dictionary, PageSpace], tuple[str, dict]]
CONVERTERS: dict[str, Converter] = {
    "/Text": _text, "/FreeText": _free_text, "/Highlight": _markup, "/Underline": _markup,
    "/StrikeOut": _markup, "/Squiggly": _markup, "/Ink": _ink, "/Square": _square,
    "/Circle": _circle, "/Line": _line, "/Polygon": _polygon, "/PolyLine": _polyline,
    "/Stamp": _stamp, "/FileAttachment": _file, "/Link": _link, "/Widget": _widget,
}
