"""Record ids and ULID-shaped ids.

Record ids are strings of 1..128 characters without control characters (U+0000..U+001F,
U+007F) or lone surrogates (docs/protocol.md, Conventions); document ids and layer
names add to that. Every id the server takes is checked here. Clients use ULIDs: 26
Crockford base32 characters.
"""

from __future__ import annotations

import hashlib
import os
import re
import time

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
MAX_ID_CHARS = 128
#: Control characters, and lone surrogates (from ``\\uD800`` escapes; not UTF-8 text).
_CONTROL = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
#: Ids taken from a PDF's /NM: conservative, no spaces (UUIDs, ULIDs, Acrobat ids).
_PDF_NAME_ID = re.compile(r"^[0-9A-Za-z_.:{}-]{1,128}$")


def is_valid_record_id(value: object) -> bool:
    """True when ``value`` is a str of 1..128 characters with no control characters
    (U+0000..U+001F, U+007F) and no lone surrogates."""
    if type(value) is str and 0 < len(value) <= MAX_ID_CHARS:
        # printable text has no control character (Cc) and no surrogate (Cs): a third of
        # the regex's cost; other text (e.g. with U+00A0, U+200F) goes to the regex
        return value.isprintable() or not _CONTROL.search(value)
    return (isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS
            and not _CONTROL.search(value))


def all_valid_record_ids(values: list) -> bool:
    """True when every item of ``values`` passes :func:`is_valid_record_id` (an empty
    list too), checked in a few C-level passes over all of them instead of a call per
    item; False when at least one does not (the caller then checks one by one)."""
    try:
        joined = "".join(values)  # TypeError: not all str
    except TypeError:
        return False
    if not values:
        return True
    lengths = list(map(len, values))
    if min(lengths) < 1 or max(lengths) > MAX_ID_CHARS:
        return False
    return joined.isprintable() or not _CONTROL.search(joined)


def is_valid_document_id(value: object) -> bool:
    """Document ids: a record id that is also a safe path segment (no ``/``, ``\\``,
    ``.``/``..`` and not ``~``)."""
    return (is_valid_record_id(value) and "/" not in value and "\\" not in value
            and value not in (".", "..", "~"))


#: Longest layer name, characters.
MAX_LAYER_CHARS = 128


def is_valid_layer_name(value: object) -> bool:
    """Layer names: ``""`` (default layer) or 1..128 characters without control
    characters, ``/`` or ``\\``, not ``.``, ``..`` or ``~``."""
    return isinstance(value, str) and (value == "" or (
        len(value) <= MAX_LAYER_CHARS and not _CONTROL.search(value) and "/" not in value
        and "\\" not in value and value not in (".", "..", "~")))


_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def is_sha256_hex(value: object) -> bool:
    """64 lower-case hex digits."""
    return isinstance(value, str) and bool(_SHA256_HEX.match(value))


def is_valid_pdf_name_id(value: str) -> bool:
    """True when a PDF ``/NM`` value can be used as a record id as-is."""
    return bool(_PDF_NAME_ID.match(value))


def crockford_128(value: int) -> str:
    """Format a 128-bit integer as 26 Crockford base32 characters (ULID layout)."""
    return "".join(CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def derived_ulid(*parts: str) -> str:
    """A stable ULID-shaped id: the first 128 bits of SHA-256 of the joined ``parts``."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()
    return crockford_128(int.from_bytes(digest[:16], "big"))


def new_ulid() -> str:
    """A fresh ULID: 48-bit millisecond time + 80 random bits."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    return crockford_128(value)
