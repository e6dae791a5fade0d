"""Parsing XML from outside (XFDF documents, ``/RC`` rich text of PDF annotations): the one
way LayerSync reads untrusted XML. ``defusedxml`` over the standard library's
``xml.etree``: a DTD is refused (so no external entities and no entity expansion, "billion
laughs"), and so is nesting deeper than a bound (the readers recurse over the tree)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import defusedxml
import defusedxml.ElementTree as SafeET

#: Deepest element nesting read (XFDF needs about 8; rich text a few more).
MAX_DEPTH = 64


class XmlRefused(ValueError):
    """Untrusted XML that is not read: not well formed, a DTD or entity declaration, or
    nested deeper than :data:`MAX_DEPTH`. The message says which, as a predicate
    ("must not have a DTD …") the caller prefixes with what it read."""


def parse_untrusted(data: bytes | str, max_depth: int = MAX_DEPTH) -> ET.Element:
    """The root element of ``data``; raises :class:`XmlRefused`. Comments and processing
    instructions are dropped (their tails kept)."""
    try:
        root = SafeET.fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except defusedxml.DTDForbidden:
        raise XmlRefused("must not have a DTD (external entities and entity expansion "
                         "are refused)") from None
    except defusedxml.DefusedXmlException as exc:
        raise XmlRefused(f"refused: {exc}") from None
    except ET.ParseError as exc:
        raise XmlRefused(f"is not well-formed XML: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise XmlRefused(f"is not XML text: {exc}") from None
    except LookupError as exc:  # an encoding declaration Python has no codec for
        raise XmlRefused(f"declares an encoding that is not known: {exc}") from None
    stack = [(root, 1)]  # iteratively: the readers of the tree recurse
    while stack:
        element, depth = stack.pop()
        if depth > max_depth:
            raise XmlRefused(f"nests deeper than {max_depth} elements")
        stack.extend((child, depth + 1) for child in element)
    return root


def local_name(tag: object) -> str:
    """``{namespace}name`` → ``name``."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def namespace_of(tag: object) -> str:
    """``{namespace}name`` → ``namespace`` (``""`` for none)."""
    return tag[1:].split("}", 1)[0] if isinstance(tag, str) and tag.startswith("{") else ""
