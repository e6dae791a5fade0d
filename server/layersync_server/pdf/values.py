"""Conversions between PDF values and Instant JSON values, both directions.

* Text strings (PDF 32000-1 §7.9.2.2): UTF-16BE with BOM, UTF-8 with BOM (PDF 2.0)
  or PDFDocEncoding. Written back as PDFDocEncoding only when the text is plain
  ASCII, else as UTF-16BE with BOM, so any script round-trips exactly.
* Dates (§7.9.4) ``D:YYYYMMDDHHmmSSOHH'mm`` ↔ ISO 8601 UTC ``YYYY-MM-DDTHH:MM:SSZ``.
* Colours: ``/C`` arrays (gray, RGB, CMYK, components 0..1) ↔ ``"#RRGGBB"``.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pikepdf

_DATE = re.compile(r"^D?:?(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?\s*([Zz+\-])?\s*(\d{2})?'?(\d{2})?'?")
_DA_FONT = re.compile(r"/?([^\s/]+)\s+([\d.]+)\s+Tf")
_DA_RGB = re.compile(r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+rg")
_DA_GRAY = re.compile(r"([\d.]+)\s+g(?:\s|$)")


def decode_text(value) -> str | None:
    """Decode a PDF text string (``pikepdf.String`` or bytes); None for None/non-strings."""
    if value is None:
        return None
    if isinstance(value, pikepdf.String):
        raw = bytes(value)
    elif isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
    else:
        return None
    if raw.startswith(b"\xfe\xff"):
        return raw[2:].decode("utf-16-be", errors="replace")
    if raw.startswith(b"\xef\xbb\xbf"):
        return raw[3:].decode("utf-8", errors="replace")
    return raw.decode("pdfdoc", errors="replace")


def encode_text(text: str) -> pikepdf.String:
    """Encode ``text`` as a PDF text string: ASCII as-is, else UTF-16BE with BOM."""
    if text.isascii():
        return pikepdf.String(text.encode("ascii"))
    return pikepdf.String(b"\xfe\xff" + text.encode("utf-16-be"))


def pdf_date_to_iso(value) -> str | None:
    """``D:20251214212208+01'00'`` → ``2025-12-14T20:22:08Z``; None when unparsable."""
    text = decode_text(value)
    match = _DATE.match(text.strip()) if text else None
    if not match:
        return None
    year, month, day, hour, minute, second, sign, off_h, off_m = match.groups()
    try:
        moment = datetime(int(year), int(month or 1), int(day or 1), int(hour or 0),
                          int(minute or 0), int(second or 0), tzinfo=timezone.utc)
    except ValueError:
        return None
    if sign in ("+", "-"):
        offset = timedelta(hours=int(off_h or 0), minutes=int(off_m or 0))
        moment = moment - offset if sign == "+" else moment + offset
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_to_pdf_date(iso: str | None) -> pikepdf.String | None:
    """``2025-12-14T20:22:08Z`` (any ISO 8601 with offset) → ``D:20251214202208Z``."""
    if not iso:
        return None
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return pikepdf.String(moment.strftime("D:%Y%m%d%H%M%SZ"))


def _hex(components: list[float]) -> str:
    return "#" + "".join(f"{round(max(0.0, min(1.0, c)) * 255):02X}" for c in components)


def color_to_hex(value) -> str | None:
    """A ``/C``-style array (1, 3 or 4 numbers) → ``"#RRGGBB"``; None when absent/empty."""
    if not isinstance(value, pikepdf.Array):
        return None
    try:
        parts = [float(x) for x in value]
    except (TypeError, ValueError):
        return None
    if len(parts) == 1:
        return _hex(parts * 3)
    if len(parts) == 3:
        return _hex(parts)
    if len(parts) == 4:
        c, m, y, k = parts
        return _hex([(1 - c) * (1 - k), (1 - m) * (1 - k), (1 - y) * (1 - k)])
    return None


def hex_to_rgb(color: str | None) -> list[float] | None:
    """``"#RRGGBB"`` → ``[r, g, b]`` in 0..1 (4 decimals); None when not a colour."""
    if not isinstance(color, str) or not re.fullmatch(r"#[0-9A-Fa-f]{6}", color):
        return None
    return [round(int(color[i:i + 2], 16) / 255, 4) for i in (1, 3, 5)]


def parse_default_appearance(value) -> dict:
    """``/DA`` like ``/Helv 38 Tf 0.83 0.2 0.19 rg`` → ``{"font", "fontSize", "fontColor"}``."""
    text = decode_text(value) or ""
    out: dict = {}
    if m := _DA_FONT.search(text):
        out["font"] = m.group(1)
        out["fontSize"] = float(m.group(2))
    if m := _DA_RGB.search(text):
        out["fontColor"] = _hex([float(m.group(i)) for i in (1, 2, 3)])
    elif m := _DA_GRAY.search(text):
        out["fontColor"] = _hex([float(m.group(1))] * 3)
    return out


def default_appearance(font: str | None, size: float | None, color: str | None) -> pikepdf.String:
    """Inverse of :func:`parse_default_appearance` (Helvetica 12 pt black by default)."""
    rgb = hex_to_rgb(color) or [0.0, 0.0, 0.0]
    font_name = font if font and re.fullmatch(r"[A-Za-z0-9_.+-]+", font) else "Helv"
    return pikepdf.String(f"/{font_name} {float(size or 12):g} Tf "
                          f"{rgb[0]:g} {rgb[1]:g} {rgb[2]:g} rg")


# --- rich text (/RC, PDF 32000-1 §12.7.3.4) and default style (/DS) ------------------------

#: The ``<body>`` that wraps exported rich text: Acrobat's own namespaces and version marks,
#: so Acrobat, pdf.js, Foxit and PDFium accept it. The record's value is the body's content.
RICH_TEXT_BODY = ('<?xml version="1.0"?><body xmlns="http://www.w3.org/1999/xhtml" '
                  'xmlns:xfa="http://www.xfa.org/schema/xfa-data/1.0/" '
                  'xfa:APIVersion="Acrobat:11.0.0" xfa:spec="2.0.2"{style}>{content}</body>')
#: /RC longer than this is not parsed (the plain /Contents is used instead).
RICH_TEXT_MAX_CHARS = 1 << 20
_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>\s*")
_BODY_OPEN = re.compile(r"<(?:[A-Za-z_][\w.-]*:)?body\b(?:[^>\"']|\"[^\"]*\"|'[^']*')*>")
_BODY_CLOSE = re.compile(r"</(?:[A-Za-z_][\w.-]*:)?body\s*>\s*$")
_BLOCKS = {"p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6"}


def _xml_parser():
    from lxml import etree
    # Outside XML is untrusted: no DTD loading, no entity expansion, no network, no huge trees.
    return etree.XMLParser(resolve_entities=False, load_dtd=False, no_network=True,
                           huge_tree=False, dtd_validation=False, remove_comments=True)


def parse_rich_text(text: str | None):
    """Parse rich text (an XHTML ``/RC`` string, or a record's fragment wrapped in a body)
    safely: None when it is missing, too long, has a DTD or entities, or is not well formed."""
    if not text or len(text) > RICH_TEXT_MAX_CHARS or "<!" in text.replace("<![CDATA[", ""):
        return None
    from lxml import etree
    try:
        root = etree.fromstring(text.encode("utf-8"), _xml_parser())
    except (etree.XMLSyntaxError, ValueError):
        return None
    return root


def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def rich_text_plain(root) -> str:
    """The plain text of a parsed rich text tree: block elements (``p``, ``div``) are lines,
    ``<br/>`` is a line break (what /Contents holds beside /RC)."""
    lines: list[str] = []
    current: list[str] = []

    def walk(node, depth=0):
        if depth > 64:
            return
        block = _local(node.tag) in _BLOCKS
        if block and current:
            lines.append("".join(current))
            current.clear()
        if node.text:
            current.append(node.text)
        for child in node:
            if not isinstance(child.tag, str):  # a comment or processing instruction
                if child.tail:
                    current.append(child.tail)
                continue
            if _local(child.tag) == "br":
                lines.append("".join(current))
                current.clear()
            else:
                walk(child, depth + 1)
            if child.tail:
                current.append(child.tail)
        if block:
            lines.append("".join(current))
            current.clear()

    walk(root)
    if current:
        lines.append("".join(current))
    return "\n".join(lines)


def rich_text_to_instant(rc) -> tuple[str, str, str] | None:
    """An ``/RC`` value → ``(fragment, plain text, body style)``: the XHTML inside ``<body>``
    exactly as the PDF has it (Instant JSON's ``{"format": "xhtml"}`` value), its plain
    text and the body's ``style`` attribute. None when ``/RC`` is missing or unusable."""
    text = decode_text(rc) if not isinstance(rc, str) else rc
    root = parse_rich_text(text)
    if root is None:
        return None
    text = _XML_DECL.sub("", text)
    style = ""
    if _local(root.tag) == "body":
        opened, closed = _BODY_OPEN.search(text), _BODY_CLOSE.search(text)
        if not opened or not closed or opened.end() > closed.start():
            return None
        fragment = text[opened.end():closed.start()]
        style = root.get("style") or ""
    else:
        fragment = text.strip()
    return fragment, rich_text_plain(root), style


def instant_to_rich_text(fragment: str, body_style: str = "") -> tuple[str, str] | None:
    """A record's XHTML fragment → ``(/RC string, plain text for /Contents)``; None when
    the fragment is not well formed XHTML (then only plain text can be written)."""
    style = f' style="{escape_attribute(body_style)}"' if body_style else ""
    rc = RICH_TEXT_BODY.format(style=style, content=fragment)
    root = parse_rich_text(rc)
    if root is None:
        return None
    return rc, rich_text_plain(root)


def escape_attribute(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def strip_markup(text: str) -> str:
    """Text of XHTML that does not parse: tags removed (used only for /Contents)."""
    return re.sub(r"<[^>]*>", "", text)


_CSS_DECL = re.compile(r"([A-Za-z-]+)\s*:\s*([^;]*)")
_CSS_SIZE = re.compile(r"([\d.]+)\s*(pt|px)?", re.I)
_CSS_HEX = re.compile(r"#([0-9A-Fa-f]{6}|[0-9A-Fa-f]{3})\b")
_CSS_RGB = re.compile(r"rgb\(\s*([\d.]+)\s*,\s*([\d.]+)\s*,\s*([\d.]+)\s*\)", re.I)
_CSS_FONT_KEYWORDS = {"normal", "italic", "oblique", "bold", "bolder", "lighter", "small-caps"}


def _css_color(value: str) -> str | None:
    if m := _CSS_HEX.search(value):
        digits = m.group(1)
        if len(digits) == 3:
            digits = "".join(d * 2 for d in digits)
        return "#" + digits.upper()
    if m := _CSS_RGB.search(value):
        return _hex([min(255.0, float(m.group(i))) / 255 for i in (1, 2, 3)])
    return None


def _css_family(value: str) -> str | None:
    first = value.split(",")[0].strip().strip("'\"").strip()
    return first or None


def parse_css_style(text: str | None) -> dict:
    """A CSS declaration list (``/DS`` or a ``style`` attribute of rich text) →
    ``{"font", "fontSize", "fontColor"}`` where it says so. Understands ``color``,
    ``font-size``, ``font-family`` and the ``font`` shorthand (``font: 12pt Helvetica``,
    Acrobat's ``font: Helvetica,sans-serif 12.0pt``)."""
    out: dict = {}
    for name, value in _CSS_DECL.findall(text or ""):
        name, value = name.lower(), value.strip()
        if name == "color" and (color := _css_color(value)):
            out["fontColor"] = color
        elif name == "font-size" and (m := _CSS_SIZE.match(value)):
            out["fontSize"] = float(m.group(1)) * (0.75 if (m.group(2) or "").lower() == "px" else 1)
        elif name == "font-family" and (family := _css_family(value)):
            out["font"] = family
        elif name == "font":
            family_parts = []
            for word in re.split(r"\s+(?=(?:[^'\"]|'[^']*'|\"[^\"]*\")*$)", value):
                if (m := re.fullmatch(r"([\d.]+)(pt|px)(?:/[\d.]+\w*)?", word, re.I)):
                    out["fontSize"] = float(m.group(1)) * (0.75 if m.group(2).lower() == "px" else 1)
                elif word.lower() not in _CSS_FONT_KEYWORDS and not re.fullmatch(r"\d+", word):
                    family_parts.append(word)
            if family := _css_family(" ".join(family_parts)):
                out["font"] = family
    return out


def rich_text_style(fragment_root) -> dict:
    """The style the first characters of parsed rich text are drawn in, as Acrobat and
    pdf.js resolve it: the body's ``style``, then the first ``p``'s, then its first
    ``span``'s (each overriding the one before)."""
    out: dict = {}
    node, depth = fragment_root, 0
    while node is not None and depth < 8:
        if _local(node.tag) in ("body", "p", "span", "div"):
            out.update(parse_css_style(node.get("style")))
        node = next((c for c in node if isinstance(c.tag, str)), None)
        depth += 1
    return out


def default_style(font: str | None, size: float | None, color: str | None) -> pikepdf.String:
    """A ``/DS`` string (CSS, Acrobat's form) for the record's font, size and colour."""
    family = font if font and re.fullmatch(r"[A-Za-z0-9 _.+-]+", font) else "Helvetica"
    return pikepdf.String(f"font: {family} {float(size or 12):g}pt; color: {color_to_css(color)}")


def color_to_css(color: str | None) -> str:
    return color.upper() if hex_to_rgb(color) else "#000000"


# --- customData (a private key of the annotation dictionary) -------------------------------

#: Where customData lives in a PDF annotation dictionary: a second-class name (PDF 32000-1
#: Annex E style: a prefix, an underscore, the key) holding the JSON text as a text string.
CUSTOM_DATA_KEY = "/LSYN_CustomData"
#: Larger JSON text in that key is ignored on import.
CUSTOM_DATA_MAX_CHARS = 1 << 20


def custom_data_to_pdf(value) -> pikepdf.String | None:
    """``customData`` (a JSON object) → the text string for :data:`CUSTOM_DATA_KEY`;
    None when there is nothing to write (missing, null or not an object)."""
    import json
    if not isinstance(value, dict):
        return None
    try:
        return encode_text(json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                                      allow_nan=False))
    except (TypeError, ValueError):
        return None


def custom_data_from_pdf(value) -> dict | None:
    """The ``customData`` object in :data:`CUSTOM_DATA_KEY`; None for anything else
    (missing, not a string, too long, not JSON, not an object, NaN/Infinity)."""
    import json
    text = decode_text(value)
    if not text or len(text) > CUSTOM_DATA_MAX_CHARS:
        return None

    def no_constants(name):
        raise ValueError(name)
    try:
        data = json.loads(text, parse_constant=no_constants)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
