"""Write a layer's records into the document's PDF as PDF annotations (pikepdf).

Algorithm: re-read the original PDF's annotations with
:func:`~layersync_server.pdf.import_.read_annotations` (same stable ids). An original
annotation whose record is still live with the content it was imported with is kept
byte-for-byte (appearance streams, rich text and all) and stamped with ``/NM = id``
so a re-import finds the same id. Every other original annotation (deleted or
changed record, or a layer that never had it) is removed with its Popup. Then every
live record not kept is written as a new annotation from its Instant JSON.

Widgets: a live widget record keeps its original PDF widget even when changed, but a
changed ``value`` is written into the form field (``/V``; ``/AS`` for buttons). New
widgets are skipped. ``pspdfkit/file`` records get their file from the original PDF
or from the document's uploaded attachments (embedded as a new ``/Filespec``).
Not written: comments and types without a PDF mapping.

Every new annotation except links gets a normal appearance stream
(:mod:`layersync_server.pdf.appearance`), since most viewers draw nothing else; kept
originals keep their own, and so does a changed stamp or file annotation whose look
did not change (moved, resized, re-noted), as its picture may be an image.
"""

from __future__ import annotations

import hashlib
import io
import math
from dataclasses import dataclass
from typing import Callable

import pikepdf
from pikepdf import Array, Dictionary, Name

from layersync_server.pdf.appearance import write_appearance
from layersync_server.pdf.geometry import PageSpace
from layersync_server.pdf.import_ import (FLAG_BITS, LINE_ENDINGS, MARKUP_TYPES, PRINT_BIT, field_node,
                                         embedded_file_bytes, open_pdf, read_annotations)
from layersync_server.pdf.values import (default_appearance, encode_text, hex_to_rgb,
                                         iso_to_pdf_date)

_MARKUP_SUBTYPES = {v: k for k, v in MARKUP_TYPES.items()}
_LINE_ENDING_NAMES = {v: k for k, v in LINE_ENDINGS.items()}


@dataclass
class ExportResult:
    """The exported PDF bytes and what happened to the annotations."""

    pdf: bytes
    kept: int
    written: int
    removed: int
    skipped: list[str]


def export_pdf(original: bytes, contents: list[dict],
               stored_attachments: dict[str, bytes] | None = None) -> ExportResult:
    """Return ``original`` with the annotations of ``contents`` (live record contents).

    ``stored_attachments`` (SHA-256 hex → bytes) provides the embedded files of new
    ``pspdfkit/file`` records whose ``fileAttachmentId`` is not already in the PDF.

    Raises:
        PdfImportError: ``original`` is not a readable PDF.
    """
    sha256 = hashlib.sha256(original).hexdigest()
    with open_pdf(original) as pdf:
        imported = read_annotations(pdf, sha256)
        live = {c["id"]: c for c in contents}
        # Unchanged records keep their original object; so do live records of types we
        # cannot write (widgets), rather than vanishing from the PDF.
        kept = {a.id for a in imported if a.id in live
                and (live[a.id] == a.content or live[a.id].get("type") not in WRITERS)}
        attachments = _attachments(imported)
        for content in contents:  # uploaded attachments of new file annotations
            file_id = content.get("fileAttachmentId")
            if content.get("type") == "pspdfkit/file" and file_id not in attachments \
                    and file_id in (stored_attachments or {}):
                attachments[file_id] = _embedded_file_spec(
                    pdf, str(content.get("fileName") or "attachment"), stored_attachments[file_id])
        removed = [a for a in imported if a.id not in kept]
        for a in imported:
            if a.id in kept:
                a.obj[Name.NM] = encode_text(a.id)
                if a.content.get("type") == "pspdfkit/widget" \
                        and live[a.id].get("value") != a.content.get("value"):
                    _write_field_value(pdf, a.obj, live[a.id].get("value"))
        _remove(pdf, {(a.page_index, a.annot_index) for a in removed}, [a.obj for a in removed])
        written, skipped = 0, []
        originals = {a.id: a for a in removed}
        for content in contents:
            if content["id"] in kept:
                continue
            if _write(pdf, content, attachments, originals.get(content["id"])):
                written += 1
            else:
                skipped.append(content["id"])
        out = io.BytesIO()
        pdf.save(out)
    return ExportResult(out.getvalue(), len(kept), written, len(removed), skipped)


def _attachments(imported) -> dict[str, pikepdf.Object]:
    found = {}
    for a in imported:
        file_id = a.content.get("fileAttachmentId")
        spec = a.obj.get("/FS")
        if file_id and embedded_file_bytes(spec) is not None:
            found[file_id] = spec
    return found


def _objgen(obj) -> tuple[int, int] | None:
    gen = getattr(obj, "objgen", (0, 0))
    return gen if gen != (0, 0) else None


def _remove(pdf: pikepdf.Pdf, positions: set[tuple[int, int]], objects: list) -> None:
    """Drop annotations at ``(page_index, annot_index)`` and their Popups; unlink
    removed widgets from the AcroForm field tree."""
    removed_ids = {g for g in map(_objgen, objects) if g}
    popup_ids = {g for o in objects if (g := _objgen(o.get("/Popup")))}
    for page_index, page in enumerate(pdf.pages):
        annots = page.obj.get("/Annots")
        if not isinstance(annots, Array):
            continue
        survivors = []
        for annot_index, annot in enumerate(annots):
            if (page_index, annot_index) in positions or _objgen(annot) in popup_ids:
                continue
            if isinstance(annot, Dictionary) and _objgen(annot.get("/Parent")) in removed_ids \
                    and str(annot.get("/Subtype")) == "/Popup":
                continue
            survivors.append(annot)
        page.obj[Name.Annots] = Array(survivors)
    acroform = pdf.Root.get("/AcroForm")
    if removed_ids and isinstance(acroform, Dictionary):
        _prune_fields(acroform, "/Fields", removed_ids)


def _prune_fields(node: Dictionary, key: str, removed_ids: set, depth: int = 0) -> None:
    kids = node.get(key)
    if not isinstance(kids, Array) or depth > 32:
        return
    keep = [k for k in kids if _objgen(k) not in removed_ids]
    for kid in keep:
        if isinstance(kid, Dictionary):
            _prune_fields(kid, "/Kids", removed_ids, depth + 1)
    if len(keep) != len(kids):
        node[Name(key)] = Array(keep)


def _flags(content: dict) -> int:
    names = set(content.get("flags") or [])
    value = 0 if "noPrint" in names else PRINT_BIT
    for name, bit in FLAG_BITS.items():
        if name in names:
            value |= bit
    return value


def _rgb(color) -> Array | None:
    rgb = hex_to_rgb(color)
    return Array(rgb) if rgb else None


def _border(width) -> Dictionary:
    return Dictionary(W=float(width if width is not None else 1.0), S=Name.S)


def _text_value(content: dict) -> str | None:
    text = content.get("text")
    if isinstance(text, dict):
        return text.get("value")
    return text if isinstance(text, str) else None


def _set(annot: Dictionary, key: str, value) -> None:
    if value is not None:
        annot[Name(key)] = value


def _write(pdf: pikepdf.Pdf, content: dict, attachments: dict, original=None) -> bool:
    """Append one record as an annotation; False when it cannot be written.

    ``original`` is the imported annotation the record changed, if any: see
    :func:`_original_appearance`."""
    writer = WRITERS.get(content.get("type", ""))
    page_index = content.get("pageIndex")
    if isinstance(page_index, float) and page_index.is_integer():
        page_index = int(page_index)  # 0.0 is an integer to the record schema
    if writer is None or not isinstance(page_index, int) or not 0 <= page_index < len(pdf.pages) \
            or not isinstance(content.get("bbox"), list) or len(content["bbox"]) != 4:
        return False
    page = pdf.pages[page_index]
    space = PageSpace.of(page)
    annot = Dictionary(Type=Name.Annot, Rect=Array(space.bbox_to_rect(content["bbox"])),
                       NM=encode_text(content["id"]), F=_flags(content), P=page.obj)
    _set(annot, "/M", iso_to_pdf_date(content.get("updatedAt")))
    _set(annot, "/CreationDate", iso_to_pdf_date(content.get("createdAt")))
    if content.get("creatorName"):
        annot.T = encode_text(content["creatorName"])
    opacity = content.get("opacity")
    if isinstance(opacity, (int, float)) and opacity != 1 and math.isfinite(opacity):
        annot.CA = min(1.0, max(0.0, float(opacity)))
    if content.get("note"):
        annot.Contents = encode_text(content["note"])
    try:
        if writer(annot, content, space, attachments) is False:
            return False
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError):
        return False  # a field of the wrong shape (e.g. "lines" not an object)
    reused = _original_appearance(original, content)
    if reused is not None:
        annot.AP = Dictionary(N=reused)
    else:
        try:
            write_appearance(pdf, annot, content)
        except (TypeError, ValueError, OverflowError, ZeroDivisionError):
            pass  # a value the appearance cannot use: the annotation is still written, without /AP
    annots = page.obj.get("/Annots")
    if not isinstance(annots, Array):
        annots = Array()
    annots.append(pdf.make_indirect(annot))
    page.obj[Name.Annots] = annots
    return True


#: Record keys that decide how a stamp or file icon looks. Their appearance can be an
#: image or a custom icon we cannot redraw, so a moved or re-noted one keeps it.
_LOOK_KEYS = {"pspdfkit/stamp": ("stampType", "title", "subtitle", "color", "imageAttachmentId"),
              "pspdfkit/file": ("iconName", "color")}


def _original_appearance(original, content: dict):
    """The imported ``/AP /N`` of a changed stamp or file annotation whose look did not
    change (viewers scale it into the new ``/Rect``), else None."""
    keys = _LOOK_KEYS.get(str(content.get("type")))
    if original is None or keys is None or original.content.get("type") != content.get("type") \
            or any(original.content.get(k) != content.get(k) for k in keys):
        return None
    appearance = original.obj.get("/AP")
    normal = appearance.get("/N") if isinstance(appearance, Dictionary) else None
    return normal if isinstance(normal, pikepdf.Stream) else None


def _w_note(annot, c, space, _):
    annot.Subtype = Name.Text
    annot.Contents = encode_text(_text_value(c) or "")
    if c.get("icon"):
        icon = str(c["icon"])  # Instant's lower camel case ("newParagraph"); older imports: NEW_PARAGRAPH
        annot.Name = Name("/" + ("".join(p.capitalize() for p in icon.split("_")) if "_" in icon or icon.isupper()
                                 else icon[:1].upper() + icon[1:]))
    _set(annot, "/C", _rgb(c.get("color")))
    annot.Open = False


def _w_text(annot, c, space, _):
    annot.Subtype = Name.FreeText
    annot.Contents = encode_text(_text_value(c) or "")
    annot.DA = default_appearance(c.get("font"), c.get("fontSize"), c.get("fontColor"))
    annot.Q = {"left": 0, "center": 1, "right": 2}.get(c.get("horizontalAlign"), 0)
    _set(annot, "/C", _rgb(c.get("backgroundColor")))
    if c.get("rotation"):
        annot.Rotate = int(c["rotation"])


def _w_markup(annot, c, space, _):
    annot.Subtype = Name(_MARKUP_SUBTYPES[c["type"].rsplit("/", 1)[1]])
    annot.QuadPoints = Array(space.rects_to_quads(c.get("rects") or [c["bbox"]]))
    _set(annot, "/C", _rgb(c.get("color")))


def _w_ink(annot, c, space, _):
    annot.Subtype = Name.Ink
    lines = (c.get("lines") or {}).get("points") or []
    annot.InkList = Array([Array([v for p in line for v in space.point_to_pdf(p)]) for line in lines])
    annot.BS = _border(c.get("lineWidth"))
    _set(annot, "/C", _rgb(c.get("strokeColor")))


def _w_stroke(annot, c):
    annot.BS = _border(c.get("strokeWidth"))
    _set(annot, "/C", _rgb(c.get("strokeColor")))
    _set(annot, "/IC", _rgb(c.get("fillColor")))


def _w_rectangle(annot, c, space, _):
    annot.Subtype = Name.Square
    _w_stroke(annot, c)


def _w_ellipse(annot, c, space, _):
    annot.Subtype = Name.Circle
    _w_stroke(annot, c)


def _w_line(annot, c, space, _):
    annot.Subtype = Name.Line
    annot.L = Array(space.point_to_pdf(c["startPoint"]) + space.point_to_pdf(c["endPoint"]))
    caps = c.get("lineCaps") or {}
    if caps:
        annot.LE = Array([Name(_LINE_ENDING_NAMES.get(caps.get(k, "none"), "/None"))
                          for k in ("start", "end")])
    _w_stroke(annot, c)


def _w_vertices(annot, c, space, subtype):
    annot.Subtype = Name(subtype)
    annot.Vertices = Array([v for p in c.get("points") or [] for v in space.point_to_pdf(p)])
    _w_stroke(annot, c)


def _w_stamp(annot, c, space, _):
    annot.Subtype = Name.Stamp
    annot.Name = Name("/" + str(c.get("stampType") or "Draft"))
    _set(annot, "/C", _rgb(c.get("color")))


def _w_file(annot, c, space, attachments):
    spec = attachments.get(c.get("fileAttachmentId"))
    if spec is None:
        return False
    annot.Subtype = Name.FileAttachment
    annot.FS = spec
    if c.get("description"):
        annot.Contents = encode_text(c["description"])
    if c.get("iconName"):
        annot.Name = Name("/" + c["iconName"])
    return True


def _write_field_value(pdf: pikepdf.Pdf, widget: Dictionary, value) -> None:
    """Set a widget's form field value (``/V`` on the field that has the name).

    Buttons get a name value and the widget's ``/AS`` follows (``/Off`` when the value
    is not one of its appearance states); text and choice fields get text, and the
    form asks viewers to rebuild appearances (``/NeedAppearances``).
    """
    field = field_node(widget, "/T") or widget
    type_node = field_node(widget, "/FT")
    is_button = type_node is not None and str(type_node.FT) == "/Btn"
    if value is None:
        if "/V" in field:
            del field["/V"]
    elif is_button:
        field.V = Name("/" + str(value))
        states = widget.get("/AP", {}).get("/N") if isinstance(widget.get("/AP"), Dictionary) else None
        if isinstance(states, Dictionary):
            widget.AS = Name("/" + str(value)) if ("/" + str(value)) in states else Name.Off
    elif isinstance(value, list):
        field.V = Array([encode_text(str(v)) for v in value])
    else:
        field.V = encode_text(str(value))
    acroform = pdf.Root.get("/AcroForm")
    if isinstance(acroform, Dictionary) and not is_button:
        acroform.NeedAppearances = True


def _embedded_file_spec(pdf: pikepdf.Pdf, name: str, data: bytes) -> pikepdf.Object:
    """An indirect ``/Filespec`` embedding ``data`` under ``name`` (``/F`` and ``/UF``)."""
    stream = pikepdf.Stream(pdf, data)
    stream[Name.Type] = Name.EmbeddedFile
    stream[Name.Params] = Dictionary(Size=len(data))
    return pdf.make_indirect(Dictionary(Type=Name.Filespec, F=encode_text(name), UF=encode_text(name),
                                        EF=Dictionary(F=pdf.make_indirect(stream),
                                                      UF=pdf.make_indirect(stream))))


def _w_link(annot, c, space, _):
    annot.Subtype = Name.Link
    annot.Border = Array([0, 0, 0])
    action = c.get("action") or {}
    if action.get("type") == "uri":
        annot.A = Dictionary(S=Name.URI, URI=pikepdf.String(str(action.get("uri", ""))))


Writer = Callable[[Dictionary, dict, PageSpace, dict], object]
WRITERS: dict[str, Writer] = {
    "pspdfkit/note": _w_note, "pspdfkit/text": _w_text,
    **{f"pspdfkit/markup/{kind}": _w_markup for kind in _MARKUP_SUBTYPES},
    "pspdfkit/ink": _w_ink, "pspdfkit/shape/rectangle": _w_rectangle,
    "pspdfkit/shape/ellipse": _w_ellipse, "pspdfkit/shape/line": _w_line,
    "pspdfkit/shape/polygon": lambda a, c, s, x: _w_vertices(a, c, s, "/Polygon"),
    "pspdfkit/shape/polyline": lambda a, c, s, x: _w_vertices(a, c, s, "/PolyLine"),
    "pspdfkit/stamp": _w_stamp, "pspdfkit/file": _w_file, "pspdfkit/link": _w_link,
}
