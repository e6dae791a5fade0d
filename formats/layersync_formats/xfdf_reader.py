"""XFDF → Instant JSON records: :func:`parse` (untrusted XML: no DTD, bounded depth) and
:func:`read_xfdf` (plain and command documents); the mapping: docs/protocol.md, "XFDF and
Instant JSON"."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import xml.etree.ElementTree as ET
from copy import deepcopy
from typing import Any, Mapping

from layersync_formats.richtext import free_text_style, parse_css_style, xhtml_inner
from layersync_formats.safexml import XmlRefused, local_name, namespace_of, parse_untrusted
from layersync_formats.threads import MAX_REPLY_DEPTH, thread_root
from layersync_formats.values import (LINE_CAPS, NOTE_ICONS, STAMP_TYPES, PageBox, PageBoxes, color_of,
                                      maybe_int, page_past_last, pdf_date_to_iso)
from layersync_formats.xfdf import (EXTENSION_TYPES, FLAGS, FLAG_ORDER, HANDOUT_KEYS, JUSTIFICATION, LS_NS,
                                    RAW_ELEMENTS, TYPES, XFDF_NS, XfdfChanges, XfdfError, numbers_of,
                                    strip_xfdf_namespace)


def parse(data: bytes | str) -> ET.Element:
    """Parse untrusted XFDF (:func:`~layersync_formats.safexml.parse_untrusted`: no DTD, so
    no external or expanding entities; bounded depth); the root must be ``<xfdf>``.
    Raises :class:`XfdfError`."""
    try:
        root = parse_untrusted(data)
    except XmlRefused as exc:
        raise XfdfError(f"XFDF {exc}") from None
    if local_name(root.tag) != "xfdf":
        raise XfdfError(f"the root element must be <xfdf>, not <{local_name(root.tag)}>")
    if namespace_of(root.tag) not in ("", XFDF_NS):
        raise XfdfError(f"<xfdf> must be in the XFDF namespace {XFDF_NS} (or none), "
                        f"not {namespace_of(root.tag)[:100]}")
    return root


def read_xfdf(data: bytes | str, *, pages: PageBoxes = None) -> XfdfChanges:
    """Read an XFDF document (plain or command) as records. Raises :class:`XfdfError`
    when it is not a readable XFDF document; annotations are not checked against the
    record schema here (the caller does, as for Instant JSON)."""
    root = parse(data)
    changes = XfdfChanges()
    stated: set[str] = set()  # ids whose <ls:instant-json> says isCommentThreadRoot (_thread_comments)
    for child in root:
        name = local_name(child.tag)
        if name == "annots":
            changes.added += _records(child, pages, changes.attachments, stated)
        elif name in ("add", "modify"):
            changes.is_command = True
            target = changes.added if name == "add" else changes.modified
            target += _records(child, pages, changes.attachments, stated)
        elif name == "delete":
            changes.is_command = True
            changes.deleted += [(i.text or "").strip() for i in child if local_name(i.tag) == "id"
                                and (i.text or "").strip()]
        elif name == "fields":
            _read_fields(child, (), changes.form_field_values)
        elif name == "instant-json" and namespace_of(child.tag) == LS_NS:
            changes.extension_records += _extension_records(child)
    seen: set[str] = set()
    for record in changes.added + changes.modified:
        _page_index_in_range(record, pages)
        if isinstance(record.get("id"), str):
            if record["id"] in seen:  # which one would win is a guess: refused
                raise XfdfError(f"annotation name {record['id'][:128]!r} is used twice")
            seen.add(record["id"])
    _thread_comments(changes.records, stated)
    return changes


def _extension_records(element: ET.Element) -> list[dict]:
    """The records of the document's ``<ls:instant-json>`` (``{"records": [...]}``): only
    those of :data:`~layersync_formats.xfdf.EXTENSION_TYPES` (what XFDF has no element for;
    an annotation there would bypass its element). Raises :class:`XfdfError`."""
    records = _extension_json(element).get("records", [])
    if not isinstance(records, list) or not all(
            isinstance(r, dict) and isinstance(r.get("type"), str) and r["type"].startswith(EXTENSION_TYPES)
            for r in records):
        raise XfdfError('the document\'s <ls:instant-json> must be {"records": [bookmarks and form fields]}')
    return [_content_only(r) for r in records]


def _content_only(fields: dict) -> dict:
    """``fields`` without :data:`~layersync_formats.xfdf.HANDOUT_KEYS` (ownership and
    permission flags are no content: an XFDF file never sets them)."""
    return {k: v for k, v in fields.items() if k not in HANDOUT_KEYS}


def _page_index_in_range(record: dict, pages: PageBoxes) -> None:
    """:func:`~layersync_formats.values.page_past_last`, when the pages are known as a list."""
    problem = page_past_last(record, len(pages)) if isinstance(pages, (list, tuple)) else None
    if problem:
        raise XfdfError(problem)


def _records(container: ET.Element, pages: PageBoxes, attachments: dict, stated: set[str]) -> list[dict]:
    """The records of ``container``'s annotation elements; adds to ``stated`` the id of each
    whose ``<ls:instant-json>`` sets or unsets ``isCommentThreadRoot``."""
    elements = [e for e in container if namespace_of(e.tag) in ("", XFDF_NS)]
    partners = replace_text_groups(elements)
    folded = {id(caret) for caret in partners.values()}
    out = []
    for element in elements:
        if id(element) in folded:
            continue  # part of its strikeout's record (replaceTextCaret)
        record = record_of(element, pages, attachments, partners.get(id(element)))
        if record is not None:
            out.append(record)
            if isinstance(record.get("id"), str) and THREAD_ROOT_KEY in _extension_keys(element):
                stated.add(record["id"])
    return out


def _extension_keys(element: ET.Element) -> set[str]:
    """The fields an annotation element's ``<ls:instant-json>`` sets or unsets (none without
    one; :func:`record_of` has refused a malformed one already)."""
    found = _extension(element)
    return set() if found is None else set(found[0]) | {k for k in found[1] if isinstance(k, str)}


def _extension(element: ET.Element) -> tuple[dict, list] | None:
    """An annotation element's ``<ls:instant-json>`` (its last, as a writer appends): its
    ``set`` object and its ``unset`` list (``[]`` when not a list); None without one. The
    one reading of it, for :func:`record_of` and :func:`_extension_keys`.

    Raises:
        XfdfError: ``set`` is not a JSON object.
    """
    extension = None
    for child in element:
        if namespace_of(child.tag) == LS_NS and local_name(child.tag) == "instant-json":
            extension = child
    if extension is None:
        return None
    ext = _extension_json(extension)
    if not isinstance(ext.get("set", {}), dict):
        raise XfdfError("<ls:instant-json> must hold a JSON object")
    unset = ext.get("unset", [])
    return ext.get("set", {}), unset if isinstance(unset, list) else []


def replace_text_groups(elements: list[ET.Element]) -> dict[int, ET.Element]:
    """Acrobat's "replace text" pairs among ``elements``: ``id(strikeout)`` → its
    ``<caret>``, for each ``<strikeout inreplyto=caret replyType="group">`` whose caret is
    in the same list (as PDF's StrikeOut ``/IRT`` Caret with ``/RT /Group``). Such a
    pair is one record, the strikeout with ``replaceTextCaret``, as the PDF import makes it."""
    carets = {e.get("name"): e for e in elements if local_name(e.tag) == "caret" and e.get("name")}
    return {id(e): carets[e.get("inreplyto")] for e in elements
            if local_name(e.tag) == "strikeout" and e.get("replyType") == "group"
            and e.get("inreplyto") in carets}


def replace_text_caret(caret: ET.Element, space: PageBox) -> dict:
    """``replaceTextCaret`` of a "replace text" strikeout from its ``<caret>``: ``bbox``,
    ``text`` (the replacement, as a note's text) and ``color`` (what the PDF import reads
    from the Caret annotation)."""
    out: dict[str, Any] = {"text": _text_of(caret)}
    rect = numbers_of(caret.get("rect"))
    if len(rect) == 4:
        out["bbox"] = space.rect_to_bbox(rect)
    if color_of(caret.get("color")):
        out["color"] = color_of(caret.get("color"))
    return out


def _contents(element: ET.Element) -> tuple[str | None, str | None]:
    """``(<contents> text, <contents-richtext> body as an Instant fragment)``; None for absent."""
    contents = rich = None
    for child in element:
        name = local_name(child.tag)
        if name == "contents":
            contents = child.text or ""
        elif name == "contents-richtext":
            body = next((c for c in child if local_name(c.tag) == "body"), None)
            rich = xhtml_inner(body) if body is not None else None
    return contents, rich


def _text_of(element: ET.Element) -> dict:
    """Instant ``text`` of an element: its rich text as xhtml, else ``<contents>`` plain."""
    contents, rich = _contents(element)
    return {"format": "xhtml", "value": rich} if rich is not None else {"format": "plain", "value": contents or ""}


#: The field a thread's root carries in Instant JSON (``true``).
THREAD_ROOT_KEY = "isCommentThreadRoot"


def _thread_comments(records: list[dict], stated: set[str]) -> None:
    """A reply to a reply (Acrobat threads that way) joins its thread's root
    (:func:`~layersync_formats.threads.thread_root`); a root in the same document is marked
    ``isCommentThreadRoot`` (:func:`thread_roots`) unless its ``<ls:instant-json>`` says
    what the record holds (``stated``: LayerSync's writer says it whenever the record
    differs from what the replies imply, so a record without the field reads back without it)."""
    parent = {r["id"]: r.get("rootId") for r in records if r.get("type") == "pspdfkit/comment" and "id" in r}
    by_id = {r["id"]: r for r in records if "id" in r}
    for record in records:
        if record.get("type") != "pspdfkit/comment":
            continue
        root = thread_root(record.get("rootId"), parent.get)
        if root is None:
            raise XfdfError(f"reply {record.get('id')!r} is in a cycle of replies (inreplyto) "
                            f"or more than {MAX_REPLY_DEPTH} deep")
        record["rootId"] = root
    for root in thread_roots(records) - stated:
        by_id[root][THREAD_ROOT_KEY] = True


def thread_roots(records: list[Mapping[str, Any]]) -> set[str]:
    """Ids of the records of one XFDF document that the reader marks ``isCommentThreadRoot``
    when their element does not say otherwise: each record, not a comment, that a
    comment's thread (``rootId``, followed through replies to replies) leads to. The
    writer (:func:`~layersync_formats.xfdf_writer.write_xfdf`) uses it to know what the
    reader will give back."""
    kinds = {r["id"]: r.get("type") for r in records if isinstance(r.get("id"), str)}
    parent = {i: r.get("rootId") for r in records if r.get("type") == "pspdfkit/comment"
              and isinstance(i := r.get("id"), str) and isinstance(r.get("rootId"), str)}
    roots = set()
    for record in records:
        if record.get("type") == "pspdfkit/comment" and isinstance(record.get("rootId"), str):
            root = thread_root(record["rootId"], parent.get)
            if root is not None and root in kinds and kinds[root] != "pspdfkit/comment":
                roots.add(root)
    return roots


def _read_fields(element: ET.Element, path: tuple[str, ...], out: dict) -> None:
    for child in element:
        if local_name(child.tag) != "field":
            continue
        here = path + (child.get("name", ""),)
        values = [v.text or "" for v in child if local_name(v.tag) == "value"]
        subfields = [c for c in child if local_name(c.tag) == "field"]
        if values or not subfields:
            out[".".join(here)] = values[0] if len(values) == 1 else (values or None)
        _read_fields(child, here, out)


def record_of(element: ET.Element, pages: PageBoxes = None, attachments: dict | None = None,
              caret: ET.Element | None = None) -> dict | None:
    """The record an XFDF annotation element says (with its ``<ls:instant-json>`` applied,
    but never its :data:`~layersync_formats.xfdf.HANDOUT_KEYS`); None for elements that are
    not annotations. Embedded files go to ``attachments``;
    ``caret`` is the ``<caret>`` of a "replace text" strikeout (:func:`replace_text_groups`)."""
    tag = local_name(element.tag)
    if tag in TYPES or (tag == "text" and element.get("inreplyto")):
        record = _mapped_record(element, tag, pages, attachments if attachments is not None else {})
        if caret is not None and tag == "strikeout":
            record["replaceTextCaret"] = replace_text_caret(caret, PageBox.at(pages, record["pageIndex"]))
    elif tag in RAW_ELEMENTS or (tag and tag not in ("annots", "fields", "f", "ids")):
        record = _raw_record(element, tag, pages)
    else:
        return None
    found = _extension(element)
    if found is not None:
        sets, unset = _content_only(found[0]), found[1]
        kept = KEPT_FIELDS if sets.get("type", record.get("type")) != "pspdfkit/comment" else ("type", "id")
        if removed := [k for k in kept if k in record and (k in unset or (k in sets and sets[k] is None))]:
            raise XfdfError(f"<ls:instant-json> must not unset {', '.join(removed)}: an annotation has them")
        record.update(sets)
        for key in unset:
            record.pop(key, None)
    return record


#: Fields an annotation element says (what and where it is; a comment: the first two), which
#: the extension may change but not remove: a record without them is no annotation
#: (Document Engine answers 422 for such an ``AnnotationContent``).
KEPT_FIELDS = ("type", "id", "pageIndex", "bbox")


def _extension_json(element: ET.Element) -> dict:
    """The JSON object an ``<ls:instant-json>`` holds (finite numbers only). Raises
    :class:`XfdfError`."""
    try:
        ext = json.loads(element.text or "{}", parse_constant=_no_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):
        raise XfdfError("<ls:instant-json> must hold a JSON object") from None
    if not isinstance(ext, dict):
        raise XfdfError("<ls:instant-json> must hold a JSON object")
    return ext


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is out of the range of a double")
    return value


def _page_index(element: ET.Element) -> int:
    try:
        page = int(element.get("page", "0"))
    except ValueError:
        raise XfdfError(f"page must be an integer, not {element.get('page')!r}") from None
    if page < 0:
        raise XfdfError("page must not be negative")
    return page


def _raw_record(element: ET.Element, tag: str, pages: PageBoxes) -> dict:
    copy = deepcopy(element)
    strip_xfdf_namespace(copy)
    for child in list(copy):
        if namespace_of(child.tag) == LS_NS:
            copy.remove(child)
    page = _page_index(element)
    record: dict[str, Any] = {"type": f"xfdf/{tag}", "pageIndex": page}
    if element.get("name"):
        record["id"] = element.get("name")
    rect = numbers_of(element.get("rect"))
    if len(rect) == 4:
        record["bbox"] = PageBox.at(pages, page).rect_to_bbox(rect)
    copy.tail = None
    record["xfdf"] = ET.tostring(copy, encoding="unicode")
    return record


def _mapped_record(element: ET.Element, tag: str, pages: PageBoxes, attachments: dict) -> dict:
    page = _page_index(element)
    space = PageBox.at(pages, page)
    is_comment = tag == "text" and bool(element.get("inreplyto")) and element.get("replyType", "reply") != "group"
    kind = "pspdfkit/comment" if is_comment else TYPES[tag]
    record: dict[str, Any] = {"v": 2, "type": kind}
    if element.get("name"):
        record["id"] = element.get("name")
        if not is_comment:
            record["name"] = element.get("name")
    record["pageIndex"] = page
    if is_comment:
        record["rootId"] = element.get("inreplyto")
    else:
        rect = numbers_of(element.get("rect"))
        if len(rect) == 4:
            record["bbox"] = space.rect_to_bbox(rect)
    if element.get("opacity") is not None:
        record["opacity"] = maybe_int(min(1.0, max(0.0, (numbers_of(element.get("opacity")) or [1.0])[0])))
    words = [w.strip().lower() for w in (element.get("flags") or "").split(",") if w.strip()]
    flags = [] if "print" in words else ["noPrint"]
    flags += [f for f in FLAG_ORDER if f in FLAGS and FLAGS[f] in words]
    if flags and not is_comment:
        record["flags"] = flags
    if element.get("title") is not None:
        record["creatorName"] = element.get("title")
    created = pdf_date_to_iso(element.get("creationdate"))
    modified = pdf_date_to_iso(element.get("date"))
    if created or modified:
        record["createdAt"] = created or modified
        record["updatedAt"] = modified or created
    contents, _ = _contents(element)
    if kind in ("pspdfkit/note", "pspdfkit/text", "pspdfkit/comment"):
        record["text"] = _text_of(element)
    elif contents is not None:
        record["description" if kind == "pspdfkit/file" else "note"] = contents
    _TYPE_READERS.get(kind, lambda *a: None)(element, record, space, attachments)
    return record


def _read_note(element, record, space, attachments):
    icon = element.get("icon") or "Comment"
    icon = icon[:1].lower() + icon[1:]
    record["icon"] = icon if icon in NOTE_ICONS else "comment"
    if color_of(element.get("color")):
        record["color"] = color_of(element.get("color"))


def _read_free_text(element, record, space, attachments):
    # what viewers draw: defaultstyle (/DS) over defaultappearance (/DA); the rich text's own
    # styles stay in its XHTML (the record's font fields are the annotation's, see docs/protocol.md)
    record.update(free_text_style(element.get("defaultappearance"), element.get("defaultstyle")))
    css = parse_css_style(element.get("defaultstyle"))
    if css.get("fontStyle"):
        record["fontStyle"] = css["fontStyle"]
    record["fontSize"] = round(record.get("fontSize", 12))  # the record schema: an integer
    align = {v: k for k, v in JUSTIFICATION.items()}.get(element.get("justification") or "")
    record["horizontalAlign"] = align or css.get("horizontalAlign") or "left"
    record["verticalAlign"] = "top"  # required by Instant JSON; XFDF free text starts at the top
    record.setdefault("opacity", 1)  # required by Instant JSON for free text; XFDF's default
    if color_of(element.get("color")):
        record["backgroundColor"] = color_of(element.get("color"))
    if element.get("rotation") is not None:
        try:
            record["rotation"] = round(float(element.get("rotation")) / 90) % 4 * 90
        except ValueError:
            raise XfdfError("rotation must be a number") from None


def _read_markup(element, record, space, attachments):
    rects = space.quads_to_rects(numbers_of(element.get("coords")))
    record["rects"] = rects or ([record["bbox"]] if "bbox" in record else [])
    record["color"] = color_of(element.get("color")) or "#000000"  # required by Instant JSON


def _read_points(text: str | None, space: PageBox) -> list[list[float]]:
    numbers = numbers_of(text)
    return [space.point_to_instant(numbers[i], numbers[i + 1]) for i in range(0, len(numbers) - 1, 2)]


def _read_ink(element, record, space, attachments):
    lines = []
    for child in element:
        if local_name(child.tag) == "inklist":
            lines += [_read_points(g.text, space) for g in child if local_name(g.tag) == "gesture"]
    record["lines"] = {"points": lines, "intensities": [[1.0] * len(p) for p in lines]}
    record["lineWidth"] = maybe_int((numbers_of(element.get("width")) or [1])[0])
    if color_of(element.get("color")):
        record["strokeColor"] = color_of(element.get("color"))


def _read_stroke(element, record):
    if color_of(element.get("color")):
        record["strokeColor"] = color_of(element.get("color"))
    if color_of(element.get("interior-color")):
        record["fillColor"] = color_of(element.get("interior-color"))
    if element.get("width") is not None:
        record["strokeWidth"] = maybe_int((numbers_of(element.get("width")) or [1])[0])
    dashes = numbers_of(element.get("dashes"))
    if dashes and (element.get("style") or "dash") == "dash":
        record["strokeDashArray"] = [maybe_int(d) for d in dashes]


def _read_caps(element, record):
    names = {v: k for k, v in LINE_CAPS.items()}
    caps = {key: names[element.get(attr)] for key, attr in (("start", "head"), ("end", "tail"))
            if element.get(attr) in names}
    if caps:
        record["lineCaps"] = caps


def _read_shape(element, record, space, attachments):
    _read_stroke(element, record)


def _read_line(element, record, space, attachments):
    _read_stroke(element, record)
    for key, attr in (("startPoint", "start"), ("endPoint", "end")):
        numbers = numbers_of(element.get(attr))
        record[key] = space.point_to_instant(*numbers[:2]) if len(numbers) >= 2 else [0, 0]
    _read_caps(element, record)


def _read_vertices(element, record, space, attachments):
    _read_stroke(element, record)
    if record["type"] == "pspdfkit/shape/polyline":
        _read_caps(element, record)
    text = next((c.text for c in element if local_name(c.tag) == "vertices"), None)
    record["points"] = _read_points(text, space)


def _read_stamp(element, record, space, attachments):
    icon = (element.get("icon") or "Custom").lstrip("#")
    record["stampType"] = icon if icon in STAMP_TYPES else "Custom"
    if color_of(element.get("color")):
        record["color"] = color_of(element.get("color"))
    if element.get("rotation") is not None:
        try:
            record["rotation"] = round(float(element.get("rotation")) / 90) % 4 * 90
        except ValueError:
            raise XfdfError("rotation must be a number") from None


def _read_file(element, record, space, attachments):
    if element.get("file") is not None:
        record["fileName"] = element.get("file")
    if element.get("icon") is not None:
        record["iconName"] = element.get("icon")
    data = next((c for c in element if local_name(c.tag) == "data"), None)
    if data is None:
        return
    raw = re.sub(r"\s+", "", data.text or "")
    try:
        content = bytes.fromhex(raw) if (data.get("encoding") or "hex") == "hex" else None
    except ValueError:
        raise XfdfError("<data> of a file attachment must be hex") from None
    if content is None:  # ascii85 (XFDF's other encoding)
        try:
            content = base64.a85decode(raw.removesuffix("~>").encode("ascii"), adobe=False)
        except ValueError:
            raise XfdfError("<data> of a file attachment is not ascii85") from None
    sha = hashlib.sha256(content).hexdigest()
    attachments[sha] = content
    record["fileAttachmentId"] = sha


_TYPE_READERS = {
    "pspdfkit/note": _read_note, "pspdfkit/text": _read_free_text,
    "pspdfkit/markup/highlight": _read_markup, "pspdfkit/markup/underline": _read_markup,
    "pspdfkit/markup/strikeout": _read_markup, "pspdfkit/markup/squiggly": _read_markup,
    "pspdfkit/ink": _read_ink, "pspdfkit/shape/rectangle": _read_shape,
    "pspdfkit/shape/ellipse": _read_shape, "pspdfkit/shape/line": _read_line,
    "pspdfkit/shape/polygon": _read_vertices, "pspdfkit/shape/polyline": _read_vertices,
    "pspdfkit/stamp": _read_stamp, "pspdfkit/file": _read_file,
}
