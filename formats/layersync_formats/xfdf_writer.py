"""Instant JSON records → XFDF: :func:`write_xfdf` (the mapping: docs/protocol.md, "XFDF
and Instant JSON"). Each element is read back (:func:`~layersync_formats.xfdf_reader.record_of`)
and what differs from the record goes into ``<ls:instant-json>``, so nothing is lost."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any, Iterable, Mapping

from layersync_formats.richtext import css_style, rich_body, rich_text_plain
from layersync_formats.safexml import XmlRefused, parse_untrusted
from layersync_formats.values import (LINE_CAPS, PageBox, PageBoxes, color_of, default_appearance,
                                      iso_to_pdf_date, number_text)
from layersync_formats.xfdf import (ELEMENTS, EXTENSION_TYPES, FLAGS, FLAG_ORDER, JUSTIFICATION, LS_NS,
                                    XFDF_NS, strip_xfdf_namespace)
from layersync_formats.xfdf_reader import THREAD_ROOT_KEY, record_of, thread_roots


def write_xfdf(records: Iterable[Mapping[str, Any]], *, pages: PageBoxes = None,
               form_field_values: Mapping[str, Any] | None = None,
               attachments: Mapping[str, bytes] | None = None) -> str:
    """An XFDF document of ``records`` (Instant JSON v2 annotations and comments).

    Args:
        records: record contents; bookmarks and form field definitions travel in the
            document's ``<ls:instant-json>``; those of a type XFDF cannot express (links,
            widgets, images, redactions, an application's own types) are left out, see
            :func:`unwritable`.
        pages: each page's CropBox ``(left, bottom, right, top)`` by page index
            (sequence or mapping); Letter for pages not given.
        form_field_values: ``<fields>``: field name → str, None or list of str.
        attachments: ``fileAttachmentId`` → bytes, embedded in ``<fileattachment>``.

    Returns:
        The document as text (UTF-8 XML declaration; encode as UTF-8 to send).
    """
    records = [dict(r) for r in records]
    by_id = {r.get("id"): r for r in records if r.get("id")}
    root = ET.Element("xfdf", {"xmlns": XFDF_NS, "xml:space": "preserve"})
    annots = ET.SubElement(root, "annots")
    # the roots the reader will mark isCommentThreadRoot from this document's replies
    replied = thread_roots([r for r in records if _writable(r)])
    for record in records:
        annots.extend(annotation_elements(record, pages, attachments or {}, by_id,
                                          replied=record.get("id") in replied))
    if form_field_values:
        root.append(fields_element(form_field_values))
    carried = [r for r in records if _carried(r)]
    if carried:  # what XFDF has no element for, for LayerSync readers (others ignore it)
        ext = ET.SubElement(root, "ls:instant-json", {"xmlns:ls": LS_NS})
        ext.text = json.dumps({"records": carried}, ensure_ascii=False, sort_keys=True)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def unwritable(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """Ids of the records :func:`write_xfdf` leaves out (no XFDF element for their type,
    and not carried in the document's ``<ls:instant-json>``)."""
    return [str(r.get("id")) for r in records if not _writable(r) and not _carried(r)]


def _carried(record: Mapping[str, Any]) -> bool:
    """A record of :data:`~layersync_formats.xfdf.EXTENSION_TYPES` (bookmarks, form field
    definitions): written in the document's ``<ls:instant-json>``."""
    return isinstance(record.get("type"), str) and record["type"].startswith(EXTENSION_TYPES)


def _writable(record: Mapping[str, Any]) -> bool:
    kind = record.get("type")
    return kind in ELEMENTS or kind == "pspdfkit/comment" or (
        isinstance(kind, str) and kind.startswith("xfdf/") and isinstance(record.get("xfdf"), str))


def annotation_elements(record: Mapping[str, Any], pages: PageBoxes = None,
                        attachments: Mapping[str, bytes] | None = None,
                        by_id: Mapping[str, Mapping] | None = None, *,
                        replied: bool = False) -> list[ET.Element]:
    """One record as its XFDF elements (none when XFDF cannot express its type): one
    element, or for a strikeout with ``replaceTextCaret`` Acrobat's "replace text" pair
    (``<caret>``, then the ``<strikeout inreplyto=caret replyType="group">``). The
    annotation element gets an ``<ls:instant-json>`` child for whatever the elements cannot
    carry, so that :func:`record_of` gives ``record`` back; ``replied`` says that the
    document holds replies to the record (the reader then marks it ``isCommentThreadRoot``,
    :func:`~layersync_formats.xfdf_reader.thread_roots`), so a record without that field
    (a root made through the API) gets it unset and one with ``false`` gets it set: an
    exported XFDF read again gives the stored record, whatever its thread flag."""
    if not _writable(record):
        return []
    kind = record["type"]
    caret = None
    if kind.startswith("xfdf/"):
        element = _raw_element(record)
        if element is None:
            return []
    else:
        element = _mapped_element(record, pages, attachments or {}, by_id or {})
        caret = _caret_element(record, element, pages)
    back = record_of(element, pages, caret=caret)
    if replied:
        back[THREAD_ROOT_KEY] = True  # what the reader's _thread_comments adds
    extra = {k: v for k, v in record.items() if k not in back or back[k] != v}
    unset = sorted(k for k in back if k not in record)
    if extra or unset:
        ext = ET.SubElement(element, "ls:instant-json", {"xmlns:ls": LS_NS})
        ext.text = json.dumps({"set": extra, "unset": unset} if unset else {"set": extra},
                              ensure_ascii=False, sort_keys=True)
    return [element] if caret is None else [caret, element]


def _caret_element(record: Mapping[str, Any], strikeout: ET.Element, pages: PageBoxes) -> ET.Element | None:
    """The ``<caret>`` of a "replace text" strikeout (named ``<id>-caret`` as the PDF
    export names the Caret; page, flags, author and dates the strikeout's), which the
    strikeout element is made to answer (``inreplyto``, ``replyType="group"``); None
    for any other record."""
    caret = record.get("replaceTextCaret")
    if record.get("type") != "pspdfkit/markup/strikeout" or not isinstance(caret, dict):
        return None
    space = PageBox.at(pages, int(strikeout.get("page", "0")))
    attrs = {"name": f"{record.get('id', '')}-caret"}
    attrs.update({k: strikeout.get(k) for k in ("page", "flags", "title", "creationdate", "date")
                  if strikeout.get(k) is not None})
    bbox = caret.get("bbox")
    attrs["rect"] = ",".join(number_text(v) for v in space.bbox_to_rect(bbox)) if _is_bbox(bbox) else "0,0,0,0"
    _set_color(attrs, "color", caret.get("color"))
    element = ET.Element("caret", attrs)
    text = caret.get("text")
    if isinstance(text, dict) and isinstance(text.get("value"), str):
        element.extend(_text_children(text, ""))
    elif isinstance(text, str):
        element.append(_text_element("contents", text))
    strikeout.set("inreplyto", attrs["name"])
    strikeout.set("replyType", "group")
    return element  # what it cannot say goes into the strikeout's <ls:instant-json>


def _raw_element(record: Mapping[str, Any]) -> ET.Element | None:
    try:
        element = parse_untrusted(record["xfdf"])
    except XmlRefused:
        return None
    strip_xfdf_namespace(element)
    return element


def _mapped_element(record: Mapping[str, Any], pages: PageBoxes, attachments: Mapping[str, bytes],
                    by_id: Mapping[str, Mapping]) -> ET.Element:
    kind = record["type"]
    page_index = record.get("pageIndex") if isinstance(record.get("pageIndex"), int) else 0
    space = PageBox.at(pages, page_index)
    attrs: dict[str, str] = {}
    if record.get("id") is not None:
        attrs["name"] = str(record["id"])
    attrs["page"] = str(page_index)
    bbox = record.get("bbox")
    if kind == "pspdfkit/comment":
        root = by_id.get(record.get("rootId"), {})
        bbox = root.get("bbox")
        attrs["inreplyto"] = str(record.get("rootId", ""))
        attrs["replyType"] = "reply"
    attrs["rect"] = ",".join(number_text(v) for v in space.bbox_to_rect(bbox)) if _is_bbox(bbox) else "0,0,0,0"
    flags = record.get("flags") if isinstance(record.get("flags"), list) else []
    words = ([] if "noPrint" in flags else ["print"]) + [FLAGS[f] for f in FLAG_ORDER if f in flags and f in FLAGS]
    attrs["flags"] = ",".join(words)
    if isinstance(record.get("creatorName"), str):
        attrs["title"] = record["creatorName"]
    for key, attr in (("createdAt", "creationdate"), ("updatedAt", "date")):
        if isinstance(record.get(key), str) and iso_to_pdf_date(record[key]):
            attrs[attr] = iso_to_pdf_date(record[key])
    if isinstance(record.get("opacity"), (int, float)) and not isinstance(record.get("opacity"), bool):
        attrs["opacity"] = number_text(record["opacity"])
    children: list[ET.Element] = []
    text = record.get("text") if kind in ("pspdfkit/note", "pspdfkit/text", "pspdfkit/comment") else None
    if isinstance(text, dict) and isinstance(text.get("value"), str):
        children += _text_children(text, _style(record)[0] if kind == "pspdfkit/text" else "")
    elif kind not in ("pspdfkit/note", "pspdfkit/text", "pspdfkit/comment"):
        note = record.get("description") if kind == "pspdfkit/file" else record.get("note")
        if isinstance(note, str):
            children.append(_text_element("contents", note))
    tag = "text" if kind == "pspdfkit/comment" else ELEMENTS[kind]
    extra_children = _TYPE_WRITERS.get(kind, lambda *a: [])(record, attrs, space, attachments)
    element = ET.Element(tag, attrs)
    element.extend(children + extra_children)
    return element


def _is_bbox(value: object) -> bool:
    return (isinstance(value, list) and len(value) == 4
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))


def _is_point(value: object) -> bool:
    return (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))


def _text_element(tag: str, text: str) -> ET.Element:
    element = ET.Element(tag)
    element.text = text
    return element


def _text_children(text: Mapping[str, Any], body_style: str) -> list[ET.Element]:
    """``<contents>`` (plain text, as ``/Contents``) and, for xhtml, ``<contents-richtext>``
    (as ``/RC``: the fragment in a ``<body>`` styled ``body_style``)."""
    value = text["value"]
    if text.get("format") == "xhtml":
        body = rich_body(value, body_style)
        if body is not None:
            rich = ET.Element("contents-richtext")
            rich.append(body)
            return [_text_element("contents", rich_text_plain(body)), rich]
    return [_text_element("contents", value)]


def _set_color(attrs: dict, attr: str, value: object) -> None:
    if color_of(value):
        attrs[attr] = color_of(value)


def _write_note(record, attrs, space, attachments):
    icon = record.get("icon")
    if isinstance(icon, str) and icon:
        attrs["icon"] = icon[:1].upper() + icon[1:]
    _set_color(attrs, "color", record.get("color"))
    return []


def _style(record: Mapping[str, Any]) -> tuple[str, str]:
    """The free text's ``defaultstyle`` (CSS, what viewers draw) and
    ``defaultappearance`` (``/DA``, the same font, size and colour), as PDF export writes
    ``/DS`` and ``/DA`` (with the style and alignment XFDF reads back too)."""
    font = record.get("font") if isinstance(record.get("font"), str) else None
    size = record.get("fontSize") if isinstance(record.get("fontSize"), (int, float)) else None
    color = color_of(record.get("fontColor"))
    styles = record.get("fontStyle") if isinstance(record.get("fontStyle"), list) else []
    align = record.get("horizontalAlign") if record.get("horizontalAlign") in JUSTIFICATION else None
    return css_style(font, size, color, styles, align), default_appearance(font, size, color)


def _write_free_text(record, attrs, space, attachments):
    css, da = _style(record)
    attrs["defaultstyle"] = css
    attrs["defaultappearance"] = da
    if record.get("horizontalAlign") in JUSTIFICATION:
        attrs["justification"] = JUSTIFICATION[record["horizontalAlign"]]
    _set_color(attrs, "color", record.get("backgroundColor"))
    if isinstance(record.get("rotation"), int) and not isinstance(record.get("rotation"), bool):
        attrs["rotation"] = str(record["rotation"])
    return []


def _write_markup(record, attrs, space, attachments):
    _set_color(attrs, "color", record.get("color"))
    rects = record.get("rects") if isinstance(record.get("rects"), list) else []
    attrs["coords"] = ",".join(number_text(v) for v in space.rects_to_quads([b for b in rects if _is_bbox(b)]))
    return []


def _points(points: object, space: PageBox) -> str:
    if not isinstance(points, list):
        return ""
    return ";".join(",".join(number_text(v) for v in space.point_to_pdf(p)) for p in points if _is_point(p))


def _write_ink(record, attrs, space, attachments):
    _set_color(attrs, "color", record.get("strokeColor"))
    if isinstance(record.get("lineWidth"), (int, float)):
        attrs["width"] = number_text(record["lineWidth"])
    lines = record.get("lines") if isinstance(record.get("lines"), dict) else {}
    inklist = ET.Element("inklist")
    for path in lines.get("points") or []:
        inklist.append(_text_element("gesture", _points(path, space)))
    return [inklist]


def _write_stroke(record, attrs, space):
    _set_color(attrs, "color", record.get("strokeColor"))
    _set_color(attrs, "interior-color", record.get("fillColor"))
    if isinstance(record.get("strokeWidth"), (int, float)):
        attrs["width"] = number_text(record["strokeWidth"])
    dashes = record.get("strokeDashArray")
    if isinstance(dashes, list) and dashes and all(isinstance(d, (int, float)) for d in dashes):
        attrs["style"] = "dash"
        attrs["dashes"] = ",".join(number_text(d) for d in dashes)


def _write_caps(record, attrs):
    caps = record.get("lineCaps") if isinstance(record.get("lineCaps"), dict) else {}
    if caps.get("start") in LINE_CAPS:
        attrs["head"] = LINE_CAPS[caps["start"]]
    if caps.get("end") in LINE_CAPS:
        attrs["tail"] = LINE_CAPS[caps["end"]]


def _write_shape(record, attrs, space, attachments):
    _write_stroke(record, attrs, space)
    return []


def _write_line(record, attrs, space, attachments):
    _write_stroke(record, attrs, space)
    for key, attr in (("startPoint", "start"), ("endPoint", "end")):
        if _is_point(record.get(key)):
            attrs[attr] = ",".join(number_text(v) for v in space.point_to_pdf(record[key]))
    _write_caps(record, attrs)
    return []


def _write_vertices(record, attrs, space, attachments):
    _write_stroke(record, attrs, space)
    if record.get("type") == "pspdfkit/shape/polyline":
        _write_caps(record, attrs)
    return [_text_element("vertices", _points(record.get("points"), space))]


def _write_stamp(record, attrs, space, attachments):
    if isinstance(record.get("stampType"), str):
        attrs["icon"] = record["stampType"]
    _set_color(attrs, "color", record.get("color"))
    if isinstance(record.get("rotation"), int) and not isinstance(record.get("rotation"), bool):
        attrs["rotation"] = str(record["rotation"])
    return []


def _write_file(record, attrs, space, attachments):
    if isinstance(record.get("fileName"), str):
        attrs["file"] = record["fileName"]
    if isinstance(record.get("iconName"), str):
        attrs["icon"] = record["iconName"]
    data = attachments.get(record.get("fileAttachmentId")) if record.get("fileAttachmentId") else None
    if data is None:
        return []
    element = ET.Element("data", {"MIMEType": "application/octet-stream", "length": str(len(data)),
                                  "encoding": "hex", "mode": "raw"})
    element.text = data.hex().upper()
    return [element]


_TYPE_WRITERS = {
    "pspdfkit/note": _write_note, "pspdfkit/text": _write_free_text,
    "pspdfkit/markup/highlight": _write_markup, "pspdfkit/markup/underline": _write_markup,
    "pspdfkit/markup/strikeout": _write_markup, "pspdfkit/markup/squiggly": _write_markup,
    "pspdfkit/ink": _write_ink, "pspdfkit/shape/rectangle": _write_shape,
    "pspdfkit/shape/ellipse": _write_shape, "pspdfkit/shape/line": _write_line,
    "pspdfkit/shape/polygon": _write_vertices, "pspdfkit/shape/polyline": _write_vertices,
    "pspdfkit/stamp": _write_stamp, "pspdfkit/file": _write_file,
}


def fields_element(values: Mapping[str, Any]) -> ET.Element:
    """``<fields>`` of form field values; a name ``a.b`` nests ``b`` in ``a``."""
    root = ET.Element("fields")
    nodes: dict[tuple[str, ...], ET.Element] = {}
    for name, value in values.items():
        parent, path = root, ()
        for part in str(name).split("."):
            path += (part,)
            if path not in nodes:
                nodes[path] = ET.SubElement(parent, "field", {"name": part})
            parent = nodes[path]
        for item in (value if isinstance(value, list) else [] if value is None else [value]):
            parent.append(_text_element("value", str(item)))
    return root

