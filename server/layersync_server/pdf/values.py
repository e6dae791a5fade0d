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
