"""Adobe rich text (PDF 32000-1 §12.7.3.4 rich text strings: ``/RC`` of a PDF annotation,
XFDF's ``<contents-richtext>``, ISO 19444-1) and its CSS (``/DS``, XFDF ``defaultstyle``,
``style`` attributes): the one implementation both the PDF import/export and the XFDF
codec use.

* Instant JSON keeps rich text as ``text: {"format": "xhtml", "value": fragment}``, the
  fragment being the content of the ``<body>``.
* :func:`parse_rich_text` reads untrusted XHTML through :mod:`.safexml` (no DTD, no
  entities, bounded depth); :func:`rich_text_plain` flattens it as ``/Contents`` holds it
  (blocks and ``<br/>`` are lines).
* :func:`parse_css_style` / :func:`css_style`: CSS declarations ↔ Instant font fields;
  :func:`free_text_style`: the font, size and colour a viewer draws free text in
  (``/DA``, overridden by ``/DS``, overridden by the rich text's own style).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Iterable

from layersync_formats.safexml import XmlRefused, local_name, namespace_of, parse_untrusted
from layersync_formats.values import color_of, number_text, parse_default_appearance, rgb_hex

#: XHTML, the namespace of rich text's ``<body>``.
XHTML_NS = "http://www.w3.org/1999/xhtml"
XFA_NS = "http://www.xfa.org/schema/xfa-data/1.0/"
#: The attributes of the ``<body>`` LayerSync writes around rich text: Acrobat's own
#: namespaces and version marks, so Acrobat, pdf.js, Foxit and PDFium accept it.
BODY_ATTRIBUTES = {"xmlns": XHTML_NS, "xmlns:xfa": XFA_NS, "xfa:APIVersion": "Acrobat:11.0.0",
                   "xfa:spec": "2.0.2"}
#: ``/RC`` as written: the record's fragment in that body (``style``: the body's).
RICH_TEXT_BODY = ('<?xml version="1.0"?><body '
                  + " ".join(f'{k}="{v}"' for k, v in BODY_ATTRIBUTES.items())
                  + "{style}>{content}</body>")
#: Rich text longer than this is not parsed (the plain text is used instead).
RICH_TEXT_MAX_CHARS = 1 << 20

_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>\s*")
_BODY_OPEN = re.compile(r"<(?:[A-Za-z_][\w.-]*:)?body\b(?:[^>\"']|\"[^\"]*\"|'[^']*')*>")
_BODY_CLOSE = re.compile(r"</(?:[A-Za-z_][\w.-]*:)?body\s*>\s*$")
_BLOCKS = {"p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6"}


# -- XHTML -----------------------------------------------------------------------------------

def parse_rich_text(text: str | None) -> ET.Element | None:
    """Parse rich text (an XHTML ``/RC`` string, or a fragment wrapped in a body) safely:
    None when it is missing, too long, has a DTD or entities, nests too deep, or is not
    well formed."""
    if not isinstance(text, str) or not text or len(text) > RICH_TEXT_MAX_CHARS:
        return None
    try:  # without the declaration: the text is already decoded, whatever it says
        return parse_untrusted(_XML_DECL.sub("", text))
    except XmlRefused:
        return None


def _tag(node: ET.Element) -> str:
    return local_name(node.tag).lower()


def rich_text_plain(root: ET.Element) -> str:
    """The plain text of parsed rich text: block elements (``p``, ``div``, …) are lines,
    ``<br/>`` is a line break (what ``/Contents`` holds beside ``/RC``)."""
    lines: list[str] = []
    current: list[str] = []

    def walk(node: ET.Element) -> None:
        block = _tag(node) in _BLOCKS
        if block and current:
            lines.append("".join(current))
            current.clear()
        if node.text:
            current.append(node.text)
        for child in node:
            if _tag(child) == "br":
                lines.append("".join(current))
                current.clear()
            elif isinstance(child.tag, str):  # not a comment or processing instruction
                walk(child)
            if child.tail:
                current.append(child.tail)
        if block:
            lines.append("".join(current))
            current.clear()

    walk(root)
    if current:
        lines.append("".join(current))
    return "\n".join(lines)


def rich_text_to_instant(text: str | None) -> tuple[str, str, str] | None:
    """Rich text (``/RC``) → ``(fragment, plain text, body style)``: the XHTML inside
    ``<body>`` exactly as written (Instant JSON's ``{"format": "xhtml"}`` value), its plain
    text and the body's ``style`` attribute. None when missing or unusable."""
    root = parse_rich_text(text)
    if root is None or text is None:
        return None
    text = _XML_DECL.sub("", text)
    style = ""
    if _tag(root) == "body":
        opened, closed = _BODY_OPEN.search(text), _BODY_CLOSE.search(text)
        if not opened or not closed or opened.end() > closed.start():
            return None
        fragment = text[opened.end():closed.start()]
        style = root.get("style") or ""
    else:
        fragment = text.strip()
    return fragment, rich_text_plain(root), style


def instant_to_rich_text(fragment: str, body_style: str = "") -> tuple[str, str] | None:
    """A record's XHTML fragment → ``(rich text string, its plain text)``; None when the
    fragment is not well formed XHTML (then only plain text can be written)."""
    style = f' style="{escape_xml(body_style, attribute=True)}"' if body_style else ""
    rc = RICH_TEXT_BODY.format(style=style, content=fragment)
    root = parse_rich_text(rc)
    if root is None:
        return None
    return rc, rich_text_plain(root)


def rich_body(fragment: str, body_style: str = "") -> ET.Element | None:
    """A record's XHTML fragment as the ``<body>`` element :data:`RICH_TEXT_BODY` writes
    (local tag names, for embedding in another document such as XFDF); None when it is
    not well formed XHTML."""
    root = parse_rich_text(f'<body xmlns="{XHTML_NS}">{fragment}</body>')
    if root is None:
        return None
    body = ET.Element("body", dict(BODY_ATTRIBUTES, **({"style": body_style} if body_style else {})))
    _copy_children(root, body)
    return body


def _xhtml_attributes(element: ET.Element) -> dict[str, str]:
    return {local_name(k): v for k, v in element.attrib.items() if namespace_of(k) in ("", XHTML_NS)}


def _copy_children(source: ET.Element, target: ET.Element) -> None:
    target.text = source.text
    for child in source:
        copy = ET.SubElement(target, local_name(child.tag), _xhtml_attributes(child))
        _copy_children(child, copy)
        copy.tail = child.tail


def xhtml_inner(element: ET.Element) -> str:
    """The content of a parsed ``<body>`` as the Instant fragment: local tag names,
    attributes in document order with double quotes (what :func:`rich_body` reads back
    unchanged)."""
    parts = [escape_xml(element.text or "")]
    for child in element:
        attrs = "".join(f' {k}="{escape_xml(v, attribute=True)}"' for k, v in _xhtml_attributes(child).items())
        inner = xhtml_inner(child)
        name = local_name(child.tag)
        parts.append(f"<{name}{attrs}>{inner}</{name}>" if inner or len(child) else f"<{name}{attrs}/>")
        parts.append(escape_xml(child.tail or ""))
    return "".join(parts)


def escape_xml(text: str, attribute: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace('"', "&quot;") if attribute else text


def strip_markup(text: str) -> str:
    """Text of XHTML that does not parse: tags removed (for the plain text only)."""
    return re.sub(r"<[^>]*>", "", text)


# -- CSS (the style of rich text, /DS, XFDF defaultstyle) ------------------------------------

_CSS_DECL = re.compile(r"([A-Za-z-]+)\s*:\s*([^;]*)")
_CSS_SIZE = re.compile(r"([\d.]+)\s*(pt|px)?", re.I)
_CSS_HEX = re.compile(r"#([0-9A-Fa-f]{6}|[0-9A-Fa-f]{3})\b")
_CSS_RGB = re.compile(r"rgb\(\s*([\d.]+)\s*,\s*([\d.]+)\s*,\s*([\d.]+)\s*\)", re.I)
_CSS_BOLD = {"bold", "bolder", "600", "700", "800", "900"}
_CSS_ITALIC = {"italic", "oblique"}
_CSS_FONT_KEYWORDS = {"normal", "lighter", "small-caps"} | _CSS_BOLD | _CSS_ITALIC
_CSS_ALIGN = {"left": "left", "center": "center", "right": "right"}
#: A font family written as it is; other names are quoted when they can be.
_PLAIN_FAMILY = re.compile(r"[A-Za-z0-9_.+-]+")
_QUOTABLE_FAMILY = re.compile(r"[^'\"\\;{}<>\x00-\x1f\x7f]+")
#: The instant fields rich text and ``/DS`` style say, in :func:`free_text_style`.
FONT_FIELDS = ("font", "fontSize", "fontColor")


def _css_color(value: str) -> str | None:
    if m := _CSS_HEX.search(value):
        digits = m.group(1)
        if len(digits) == 3:
            digits = "".join(d * 2 for d in digits)
        return "#" + digits.upper()
    if m := _CSS_RGB.search(value):
        return rgb_hex([min(255.0, float(m.group(i))) / 255 for i in (1, 2, 3)])
    return None


def _css_family(value: str) -> str | None:
    value = value.strip()
    if value[:1] in ("'", '"') and (end := value.find(value[0], 1)) > 1:
        return value[1:end].strip() or None
    first = value.split(",")[0].strip().strip("'\"").strip()
    return first or None


def _css_points(number: str, unit: str | None) -> float:
    return float(number) * (0.75 if (unit or "").lower() == "px" else 1)


def parse_css_style(text: str | None) -> dict:
    """A CSS declaration list (``/DS``, XFDF ``defaultstyle``, a ``style`` attribute of rich
    text) → the Instant fields it says: ``font``, ``fontSize`` (points), ``fontColor``,
    ``fontStyle`` (``["bold", "italic"]``, either or both; absent for neither) and
    ``horizontalAlign``.
    Declarations apply in order (a later one wins). Understands ``color`` (hex, ``rgb()``),
    ``font-size`` (pt, px), ``font-family``, ``font-weight``, ``font-style``, ``text-align``
    and the ``font`` shorthand (``font: 12pt Helvetica``, Acrobat's
    ``font: Helvetica,sans-serif 12.0pt``)."""
    out: dict = {}
    bold = italic = False
    for name, value in _CSS_DECL.findall(text or ""):
        name, value = name.lower(), value.strip()
        if name == "color" and (color := _css_color(value)):
            out["fontColor"] = color
        elif name == "font-size" and (m := _CSS_SIZE.match(value)):
            out["fontSize"] = _css_points(m.group(1), m.group(2))
        elif name == "font-family" and (family := _css_family(value)):
            out["font"] = family
        elif name == "font-weight":
            bold = value.lower() in _CSS_BOLD
        elif name == "font-style":
            italic = value.lower() in _CSS_ITALIC
        elif name == "text-align" and value.lower() in _CSS_ALIGN:
            out["horizontalAlign"] = _CSS_ALIGN[value.lower()]
        elif name == "font":
            family_parts = []
            bold = italic = False  # the shorthand resets both
            for word in re.split(r"\s+(?=(?:[^'\"]|'[^']*'|\"[^\"]*\")*$)", value):
                lower = word.lower()
                if m := re.fullmatch(r"([\d.]+)(pt|px)(?:/[\d.]+\w*)?", word, re.I):
                    out["fontSize"] = _css_points(m.group(1), m.group(2))
                elif lower in _CSS_FONT_KEYWORDS:
                    bold, italic = bold or lower in _CSS_BOLD, italic or lower in _CSS_ITALIC
                elif not re.fullmatch(r"\d+", word):
                    family_parts.append(word)
            if family := _css_family(" ".join(family_parts)):
                out["font"] = family
    if bold or italic:
        out["fontStyle"] = (["bold"] if bold else []) + (["italic"] if italic else [])
    return out


def css_style(font: str | None, size: float | None, color: str | None,
              font_style: Iterable[str] = (), align: str | None = None) -> str:
    """The CSS LayerSync writes as ``/DS`` and XFDF ``defaultstyle`` (Acrobat's form:
    ``font: Helvetica 12pt; color: #000000``, then ``font-weight``, ``font-style`` and
    ``text-align`` when given). Helvetica 12 pt black where the record says nothing; a
    family that is not one plain word (or reads as a size or keyword) is quoted, one that
    cannot be is Helvetica."""
    if isinstance(font, str) and _PLAIN_FAMILY.fullmatch(font) and font.lower() not in _CSS_FONT_KEYWORDS \
            and not re.fullmatch(r"[\d.]+(?:pt|px)?", font, re.I):
        family = font
    elif isinstance(font, str) and _QUOTABLE_FAMILY.fullmatch(font) and font.strip():
        family = f"'{font}'"
    else:
        family = "Helvetica"
    size = 12 if size is None else size
    css = [f"font: {family} {number_text(size)}pt", f"color: {color_of(color) or '#000000'}"]
    styles = set(font_style)
    if "bold" in styles:
        css.append("font-weight: bold")
    if "italic" in styles:
        css.append("font-style: italic")
    if align in _CSS_ALIGN:
        css.append(f"text-align: {align}")
    return "; ".join(css)


def rich_text_style(root: ET.Element) -> dict:
    """The default style of parsed rich text (what the record's font fields say), as
    Acrobat and pdf.js resolve it: the body's ``style``, then the first block's (``p`` or
    ``div``), then that of a ``span`` that wraps the block's whole text (Acrobat writes
    ``<p><span style=...>text</span></p>``), each overriding the one before. A span
    around only part of the text styles that part; it stays in the XHTML and is not the
    default."""
    out: dict = {}
    node: ET.Element | None = root
    depth = 0
    while node is not None and depth < 8:
        tag = _tag(node)
        if tag in ("body", "p", "div", "span"):
            out.update(parse_css_style(node.get("style")))
        children = [c for c in node if isinstance(c.tag, str)]
        if tag == "body":
            node = children[0] if children else None
        else:  # descend only into a span that is the block's whole content
            whole = (len(children) == 1 and _tag(children[0]) == "span" and not (node.text or "").strip()
                     and not (children[0].tail or "").strip())
            node = children[0] if whole else None
        depth += 1
    return out


def free_text_style(da: str | None, ds: str | None, rich: ET.Element | None = None) -> dict:
    """``font``, ``fontSize`` and ``fontColor`` of free text the way Acrobat and pdf.js
    draw it: ``/DA`` (``defaultappearance``), overridden by the CSS of ``/DS``
    (``defaultstyle``), overridden by the default style of the parsed rich text ``rich``
    (:func:`rich_text_style`) when given."""
    style = parse_default_appearance(da)
    style.update(parse_css_style(ds))
    if rich is not None:
        style.update(rich_text_style(rich))
    return {k: style[k] for k in FONT_FIELDS if k in style}
