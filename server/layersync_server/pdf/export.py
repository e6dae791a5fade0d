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
Comments (``pspdfkit/comment``) are written as PDF replies to their root's annotation
(``/IRT``, ``/RT /R``, a ``/Popup``); a strikeout with ``replaceTextCaret`` as Acrobat's
"replace text" pair (``/RT /Group``). Rich text (``{"format": "xhtml"}``) goes to ``/RC``
with its plain text in ``/Contents``; ``customData`` to ``/LSYN_CustomData``.
Bookmarks (``pspdfkit/bookmark``) are the outline (``/Outlines``):
:func:`~layersync_server.pdf.outlines.write_bookmarks`. Not written: types without a PDF
mapping.

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
from layersync_server.pdf.outlines import BOOKMARK_TYPE, write_bookmarks
from layersync_server.pdf.import_ import (FLAG_BITS, LINE_ENDINGS, MARKUP_TYPES, PRINT_BIT, field_node,
                                         embedded_file_bytes, indirect_key, open_pdf,
                                         read_annotations)
from layersync_formats.richtext import css_style, instant_to_rich_text, strip_markup
from layersync_formats.values import default_appearance, hex_to_rgb

from layersync_server.pdf.values import (CUSTOM_DATA_KEY, custom_data_to_pdf, decode_text, encode_text,
                                         pdf_date)
from layersync_formats.values import same_json

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
                and (same_json(live[a.id], a.content) or live[a.id].get("type") not in WRITABLE)}
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
                        and not same_json(live[a.id].get("value"), a.content.get("value")):
                    _write_field_value(pdf, a.obj, live[a.id].get("value"))
        _remove(pdf, {(a.page_index, a.annot_index) for a in removed}, [a.obj for a in removed],
                [a.group_partner for a in removed if a.group_partner is not None])
        written, skipped = 0, []
        originals = {a.id: a for a in removed}
        objects = {a.id: a.obj for a in imported if a.id in kept}  # record id → annotation
        comments = []
        skipped += write_bookmarks(pdf, sha256, contents)
        for content in contents:
            if content["id"] in kept or content.get("type") == BOOKMARK_TYPE:
                continue
            if content.get("type") == "pspdfkit/comment":
                comments.append(content)  # after every root has its annotation
                continue
            annot = _write(pdf, content, attachments, originals.get(content["id"]))
            if annot is not None:
                objects[content["id"]] = annot
                written += 1
            else:
                skipped.append(content["id"])
        for content in comments:
            if _write_reply(pdf, content, objects):
                written += 1
            else:
                skipped.append(content["id"])
        _relink_kept_replies(imported, kept, live, objects)
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


_objgen = indirect_key


def _remove(pdf: pikepdf.Pdf, positions: set[tuple[int, int]], objects: list,
            partners: list = ()) -> None:
    """Drop annotations at ``(page_index, annot_index)``, the ``partners`` (the Caret of a
    removed "replace text" group) and the Popups of both; unlink removed widgets from
    the AcroForm field tree."""
    partner_ids = {g for g in map(_objgen, partners) if g}
    objects = [*objects, *partners]
    removed_ids = {g for g in map(_objgen, objects) if g}
    popup_ids = {g for o in objects if (g := _objgen(o.get("/Popup")))}
    for page_index, page in enumerate(pdf.pages):
        annots = page.obj.get("/Annots")
        if not isinstance(annots, Array):
            continue
        survivors = []
        for annot_index, annot in enumerate(annots):
            if (page_index, annot_index) in positions or _objgen(annot) in popup_ids \
                    or _objgen(annot) in partner_ids:
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


def _border(width, dashes=None) -> Dictionary:
    """``/BS``: the width, solid (``/S /S``) or, for a ``strokeDashArray``, dashed
    (``/S /D`` with the pattern in ``/D``, PDF 32000-1 Table 166)."""
    border = Dictionary(W=float(width if width is not None else 1.0), S=Name.S)
    if isinstance(dashes, list) and dashes and all(
            isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d) and d >= 0
            for d in dashes):
        border.S = Name.D
        border.D = Array([float(d) for d in dashes])
    return border


def _text_value(content: dict) -> str | None:
    text = content.get("text")
    if isinstance(text, dict):
        return text.get("value")
    return text if isinstance(text, str) else None


def _write_text(annot: Dictionary, text, body_style: str = "") -> None:
    """A record's ``text`` into ``/Contents`` (plain) and, for ``{"format": "xhtml"}``,
    ``/RC`` (the fragment in Acrobat's ``<body>``, with ``body_style``) whose plain text
    is ``/Contents``. XHTML that is not well formed is written as plain text only."""
    value = text.get("value") if isinstance(text, dict) else text
    value = value if isinstance(value, str) else ""
    if isinstance(text, dict) and text.get("format") == "xhtml":
        rich = instant_to_rich_text(value, body_style)
        if rich is not None:
            annot.RC = encode_text(rich[0])
            annot.Contents = encode_text(rich[1])
            return
        value = strip_markup(value)
    annot.Contents = encode_text(value)


def _set(annot: Dictionary, key: str, value) -> None:
    if value is not None:
        annot[Name(key)] = value


def _write(pdf: pikepdf.Pdf, content: dict, attachments: dict, original=None):
    """Append one record as an annotation; returns it (indirect), None when it cannot be
    written.

    ``original`` is the imported annotation the record changed, if any: see
    :func:`_original_appearance`."""
    writer = WRITERS.get(content.get("type", ""))
    page_index = content.get("pageIndex")
    if isinstance(page_index, float) and page_index.is_integer():
        page_index = int(page_index)  # 0.0 is an integer to the record schema
    if writer is None or not isinstance(page_index, int) or not 0 <= page_index < len(pdf.pages) \
            or not isinstance(content.get("bbox"), list) or len(content["bbox"]) != 4:
        return None
    page = pdf.pages[page_index]
    space = PageSpace.of(page)
    annot = Dictionary(Type=Name.Annot, Rect=Array(space.bbox_to_rect(content["bbox"])),
                       NM=encode_text(content["id"]), F=_flags(content), P=page.obj)
    _set(annot, "/M", pdf_date(content.get("updatedAt")))
    _set(annot, "/CreationDate", pdf_date(content.get("createdAt")))
    if content.get("creatorName"):
        annot.T = encode_text(content["creatorName"])
    opacity = content.get("opacity")
    if isinstance(opacity, (int, float)) and opacity != 1 and math.isfinite(opacity):
        annot.CA = min(1.0, max(0.0, float(opacity)))
    if content.get("note"):
        annot.Contents = encode_text(content["note"])
    _set(annot, CUSTOM_DATA_KEY, custom_data_to_pdf(content.get("customData")))
    try:
        if writer(annot, content, space, attachments) is False:
            return None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError):
        return None  # a field of the wrong shape (e.g. "lines" not an object)
    reused = _original_appearance(original, content)
    if reused is not None:
        annot.AP = Dictionary(N=reused)
    else:
        try:
            write_appearance(pdf, annot, content)
        except (TypeError, ValueError, OverflowError, ZeroDivisionError):
            pass  # a value the appearance cannot use: the annotation is still written, without /AP
    annot = _append(pdf, page, annot)
    caret = content.get("replaceTextCaret")
    if content.get("type") == "pspdfkit/markup/strikeout" and isinstance(caret, dict):
        _write_replace_caret(pdf, page, space, annot, content, caret)
    return annot


def _append(pdf: pikepdf.Pdf, page, annot: Dictionary):
    """Add ``annot`` to the page's ``/Annots``; returns the indirect object."""
    annots = page.obj.get("/Annots")
    if not isinstance(annots, Array):
        annots = Array()
    annot = pdf.make_indirect(annot)
    annots.append(annot)
    page.obj[Name.Annots] = annots
    return annot


def _write_replace_caret(pdf, page, space: PageSpace, strikeout, content: dict, caret: dict) -> None:
    """Write Acrobat's "replace text" pair: the Caret with the replacement text, and the
    StrikeOut ``/IRT`` to it with ``/RT /Group`` (PDF 32000-1 §12.5.6.2: one unit)."""
    try:
        rect = Array(space.bbox_to_rect(caret["bbox"]))
    except (KeyError, TypeError, ValueError, IndexError):
        return
    mark = Dictionary(Type=Name.Annot, Subtype=Name.Caret, Rect=rect, F=_flags(content),
                      P=page.obj, IT=Name.Replace, NM=encode_text(content["id"] + "-caret"))
    _write_text(mark, caret.get("text") or "")
    _set(mark, "/C", _rgb(caret.get("color")))
    for key in ("/T", "/M", "/CreationDate"):
        _set(mark, key, strikeout.get(key))
    try:
        write_appearance(pdf, mark, {"type": "pdf/caret", "color": caret.get("color")})
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        pass
    mark = _append(pdf, page, mark)
    strikeout.IRT = mark
    strikeout.RT = Name.Group
    strikeout.IT = Name.StrikeOutTextEdit


#: A reply's icon: its size in points, put at the top-left corner of its root.
REPLY_ICON_SIZE = 20.0
#: Annotation flags of a reply, as Acrobat writes them: Print, NoZoom, NoRotate.
REPLY_FLAGS = 28


def _write_reply(pdf: pikepdf.Pdf, content: dict, objects: dict) -> bool:
    """Write a ``pspdfkit/comment`` as a PDF reply: a Text annotation ``/IRT`` to its
    root's annotation with ``/RT /R`` and a ``/Popup``, on the root's page (PDF 32000-1
    §12.5.6.4/§12.5.6.10). False when the root has no annotation in the export."""
    root = objects.get(content.get("rootId"))
    if root is None:
        return False
    page = _page_of(pdf, root)
    if page is None:
        return False
    try:
        x0, x1 = sorted(float(v) for v in root.Rect[0::2])
        _, y1 = sorted(float(v) for v in root.Rect[1::2])
    except (AttributeError, TypeError, ValueError):
        return False
    rect = Array([x0, y1 - REPLY_ICON_SIZE, x0 + REPLY_ICON_SIZE, y1])
    reply = Dictionary(Type=Name.Annot, Subtype=Name.Text, Rect=rect, F=REPLY_FLAGS, P=page.obj,
                       NM=encode_text(content["id"]), IRT=root, RT=Name.R, Name=Name.Comment,
                       Open=False)
    _set(reply, "/M", pdf_date(content.get("updatedAt")))
    _set(reply, "/CreationDate", pdf_date(content.get("createdAt")))
    if isinstance(content.get("creatorName"), str) and content["creatorName"]:
        reply.T = encode_text(content["creatorName"])
    _set(reply, CUSTOM_DATA_KEY, custom_data_to_pdf(content.get("customData")))
    _write_text(reply, content.get("text"))
    reply = _append(pdf, page, reply)
    popup = Dictionary(Type=Name.Annot, Subtype=Name.Popup, Parent=reply, Open=False, F=REPLY_FLAGS,
                       P=page.obj, Rect=Array([x1, y1 - 120, x1 + 180, y1]))
    reply.Popup = _append(pdf, page, popup)
    return True


def _page_of(pdf: pikepdf.Pdf, annot):
    """The page whose ``/Annots`` holds ``annot`` (its ``/P`` when that is one of them)."""
    wanted, hinted = _objgen(annot), _objgen(annot.get("/P"))
    pages = sorted(pdf.pages, key=lambda p: _objgen(p.obj) != hinted)  # /P's page first
    for page in pages:
        annots = page.obj.get("/Annots")
        if isinstance(annots, Array) and any(_objgen(a) == wanted for a in annots):
            return page
    return None


def _relink_kept_replies(imported, kept: set, live: dict, objects: dict) -> None:
    """A kept reply whose root was rewritten points (``/IRT``) at the root's new annotation."""
    for a in imported:
        root_id = live.get(a.id, {}).get("rootId")
        if a.id in kept and a.content.get("type") == "pspdfkit/comment" and root_id in objects:
            a.obj[Name.IRT] = objects[root_id]


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
    _write_text(annot, c.get("text"))
    if c.get("icon"):
        icon = str(c["icon"])  # Instant's lower camel case ("newParagraph"); older imports: NEW_PARAGRAPH
        annot.Name = Name("/" + ("".join(p.capitalize() for p in icon.split("_")) if "_" in icon or icon.isupper()
                                 else icon[:1].upper() + icon[1:]))
    _set(annot, "/C", _rgb(c.get("color")))
    annot.Open = False


def _w_text(annot, c, space, _):
    annot.Subtype = Name.FreeText
    # /DA, /DS and /RC's body all say the record's font, size and colour
    annot.DA = encode_text(default_appearance(c.get("font"), c.get("fontSize"), c.get("fontColor")))
    annot.DS = encode_text(css_style(c.get("font"), c.get("fontSize"), c.get("fontColor")))
    _write_text(annot, c.get("text"), str(annot.DS))
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
    annot.BS = _border(c.get("strokeWidth"), c.get("strokeDashArray"))
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
    caps = c.get("lineCaps")
    if isinstance(caps, dict):  # {} too: /LE [/None /None] imports as {} again
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
    name = c.get("fileName")
    if isinstance(name, str) and name and isinstance(spec, Dictionary) \
            and decode_text(spec.get("/UF")) != name and isinstance(spec.get("/EF"), Dictionary):
        # the same bytes under another name: a file specification of its own, same stream
        spec = Dictionary(Type=Name.Filespec, F=encode_text(name), UF=encode_text(name), EF=spec.EF)
    annot.FS = spec
    if c.get("description"):
        annot.Contents = encode_text(c["description"])
    if c.get("iconName"):
        annot.Name = Name("/" + c["iconName"])
    return True


def _write_field_value(pdf: pikepdf.Pdf, widget: Dictionary, value) -> None:
    """Set a widget's form field value (``/V`` on the field that has the name).

    The field's widgets (its ``/Kids`` without a ``/T``) lose a ``/V`` of their own, a
    stale one PDF writers leave (f1040's checkboxes carry ``/V /Off``) which importers and
    viewers would read before the field's. Buttons get a name value and each widget's
    ``/AS`` follows (``/Off`` when the value is not one of its appearance states); text and
    choice fields get text, and the form asks viewers to rebuild appearances
    (``/NeedAppearances``).
    """
    field = field_node(widget, "/T") or widget
    type_node = field_node(widget, "/FT")
    is_button = type_node is not None and str(type_node.FT) == "/Btn"
    kids = [k for k in field.get("/Kids", []) if isinstance(k, Dictionary) and "/T" not in k] \
        if isinstance(field.get("/Kids"), Array) else []
    for kid in kids:
        if "/V" in kid:
            del kid["/V"]
    if value is None:
        if "/V" in field:
            del field["/V"]
    elif is_button:
        field.V = Name("/" + str(value))
        for kid in kids if any(_objgen(k) == _objgen(widget) for k in kids) else [widget]:
            states = kid.get("/AP", {}).get("/N") if isinstance(kid.get("/AP"), Dictionary) else None
            if isinstance(states, Dictionary):
                kid.AS = Name("/" + str(value)) if ("/" + str(value)) in states else Name.Off
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
#: Types a changed record of is written anew (comments as replies, :func:`_write_reply`).
WRITABLE = {*WRITERS, "pspdfkit/comment"}
