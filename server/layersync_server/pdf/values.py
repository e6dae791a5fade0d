"""PDF objects ↔ Instant JSON values: what needs pikepdf. The value rules themselves
(dates, colours, ``/DA``, rich text, CSS) are :mod:`layersync_formats` (formats/), the
one implementation the XFDF codec uses too; this module only turns PDF objects into
their Python values and back.

* Text strings (PDF 32000-1 §7.9.2.2): UTF-16BE with BOM, UTF-8 with BOM (PDF 2.0)
  or PDFDocEncoding. Written back as PDFDocEncoding only when the text is plain
  ASCII, else as UTF-16BE with BOM, so any script round-trips exactly.
* Dates and colours as PDF objects, through :mod:`layersync_formats.values`.
* ``customData`` in a private key of the annotation dictionary.
"""

from __future__ import annotations

import pikepdf
from layersync_formats.values import components_to_hex, iso_to_pdf_date, pdf_date_to_iso


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


def iso_date(value) -> str | None:
    """A PDF date (``/M``, ``/CreationDate``) → ISO 8601 UTC; None when unparsable."""
    return pdf_date_to_iso(decode_text(value))


def pdf_date(iso: str | None) -> pikepdf.String | None:
    """ISO 8601 → a PDF date string; None when missing or not ISO 8601."""
    date = iso_to_pdf_date(iso)
    return pikepdf.String(date) if date else None


def color_to_hex(value) -> str | None:
    """A ``/C``-style array (1, 3 or 4 numbers) → ``"#RRGGBB"``; None when absent/empty."""
    if not isinstance(value, pikepdf.Array):
        return None
    try:
        parts = [float(x) for x in value]
    except (TypeError, ValueError):
        return None
    return components_to_hex(parts)


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
    (missing, not a string, too long, not JSON, not an object, or a value no record may
    hold: NaN/Infinity, a number out of a double's range, a lone surrogate, nesting
    past ``max_json_depth`` once in the record, as the wire rules say)."""
    from layersync_server.errors import ApiError
    from layersync_server.wire_json import MAX_JSON_DEPTH, json_problem, parse_json
    text = decode_text(value)
    if not text or len(text) > CUSTOM_DATA_MAX_CHARS:
        return None
    try:
        data = parse_json(text)
    except ApiError:
        return None
    if not isinstance(data, dict) or json_problem(data, MAX_JSON_DEPTH - 1):  # the record is level 1
        return None
    return data
