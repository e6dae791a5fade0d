"""JSON in and out of the server: the one place request bodies are parsed and
responses are encoded (docs/protocol.md, Conventions, "JSON values").

Parsing never fails the whole body because of one value: a number that is not a
finite IEEE-754 double or is longer than :data:`MAX_NUMBER_CHARS` characters, and
the non-standard ``NaN``/``Infinity``/``-Infinity`` literals, parse to a
:class:`BadNumber` marker; :func:`json_problem` then says why the value holding it
is refused (a sync change is rejected ``invalid``, an admin body gets 400). Only a
body that is not JSON at all, or nests deeper than the parser can go, is refused
as a whole.

Encoding uses the stdlib encoder (no depth limit of its own below the parser's),
never ``NaN``: a non-finite float already stored is written as ``null``, so a
record stored by an older server can not make a listing fail.
"""

from __future__ import annotations

import json
import math
import typing

from fastapi.datastructures import Default, DefaultPlaceholder
from fastapi.routing import APIRoute
from starlette.responses import JSONResponse

from layersync_server.errors import invalid_request

#: Deepest nesting of record content (an object holding an object ... counts one
#: level per object or array; the content object itself is level 1). Instant JSON
#: records are shallow (about 5 levels).
MAX_JSON_DEPTH = 64
#: Largest revision (and ``since``/``base_revision``): SQL BIGINT, 2**63 - 1.
MAX_REVISION = 2**63 - 1
#: Longest number literal, characters (sign, digits, ``.``, exponent).
MAX_NUMBER_CHARS = 100


class BadNumber:
    """Marker for a number literal the server refuses; ``why`` says what is wrong."""

    __slots__ = ("literal", "why")

    def __init__(self, literal: str, why: str):
        self.literal = literal
        self.why = why

    def __repr__(self) -> str:
        return f"BadNumber({self.literal[:20]!r})"


def _parse_int(text: str):
    if len(text) > MAX_NUMBER_CHARS:
        return BadNumber(text, f"number literal longer than {MAX_NUMBER_CHARS} characters")
    return int(text)


def _parse_float(text: str):
    if len(text) > MAX_NUMBER_CHARS:
        return BadNumber(text, f"number literal longer than {MAX_NUMBER_CHARS} characters")
    value = float(text)
    if not math.isfinite(value):
        return BadNumber(text, f"number {text[:20]} is out of the range of a double")
    return value


def _parse_constant(text: str):
    return BadNumber(text, f"{text} is not a JSON number")


def parse_json(raw: bytes | str) -> object:
    """Parse a request body; bad numbers become :class:`BadNumber` (see module docs).

    Raises:
        ApiError: 400 ``invalid_request`` when the body is not JSON or nests too deeply
            to parse.
    """
    try:
        return json.loads(raw, parse_int=_parse_int, parse_float=_parse_float,
                          parse_constant=_parse_constant)
    except RecursionError:
        raise invalid_request("body nests too deeply to parse") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_request(f"body is not JSON: {exc}") from None


def json_problem(value: object, max_depth: int | None = MAX_JSON_DEPTH) -> str | None:
    """Why ``value`` (a parsed JSON value) may not be stored, or None.

    Checks, iteratively (any depth): nesting deeper than ``max_depth`` (None: no
    limit), :class:`BadNumber` markers, and strings or keys holding lone surrogates
    (not valid UTF-8).
    """
    try:  # fast path: one C-level encode proves there is no BadNumber and no lone surrogate
        json.dumps(value, ensure_ascii=False, check_circular=False,
                   separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError, RecursionError):
        pass  # find out what is wrong below
    else:
        return None if max_depth is None else _depth_problem(value, max_depth)
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            depth += 1
            if max_depth is not None and depth > max_depth:
                return f"content nests deeper than {max_depth} levels"
            if isinstance(item, dict):
                for key, child in item.items():
                    if not _utf8_ok(key):
                        return "content contains invalid Unicode (lone surrogate)"
                    stack.append((child, depth))
            else:
                stack.extend((child, depth) for child in item)
        elif isinstance(item, BadNumber):
            return item.why
        elif isinstance(item, str) and not _utf8_ok(item):
            return "content contains invalid Unicode (lone surrogate)"
    return None


def _depth_problem(value: object, max_depth: int) -> str | None:
    """The nesting message of :func:`json_problem`, or None (walks containers only)."""
    if not isinstance(value, (dict, list)):
        return None
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return f"content nests deeper than {max_depth} levels"
        for child in (item.values() if isinstance(item, dict) else item):
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return None


def _utf8_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _finite(value: object) -> object:
    """A copy of ``value`` with non-finite floats replaced by None (iterative)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if not isinstance(value, (dict, list)):
        return value
    root = type(value)()
    stack = [(value, root)]
    while stack:
        source, target = stack.pop()
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        for key, child in pairs:
            if isinstance(child, (dict, list)):
                copy = type(child)()
                stack.append((child, copy))
            elif isinstance(child, float) and not math.isfinite(child):
                copy = None
            else:
                copy = child
            if isinstance(target, dict):
                target[key] = copy
            else:
                target.append(copy)
    return root


def dumps(value: object) -> str:
    """Compact JSON text for a response; non-finite floats are written as ``null``."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return json.dumps(_finite(value), ensure_ascii=False, allow_nan=False,
                          separators=(",", ":"))


class WireJSONResponse(JSONResponse):
    """JSON response encoded with :func:`dumps` (every JSON answer of the server)."""

    def render(self, content: typing.Any) -> bytes:
        text = dumps(content)
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate echoed from a request: escape it
            return json.dumps(_finite(content), allow_nan=False,
                              separators=(",", ":")).encode("ascii")


class WireRoute(APIRoute):
    """Route class of every router: a route without an explicit ``response_model``
    gets none, so its return value is encoded by :class:`WireJSONResponse` (stdlib
    encoder) rather than pydantic, whose serializer has a depth limit of its own."""

    def __init__(self, path: str, endpoint, *, response_model: typing.Any = Default(None),
                 **kwargs):
        if isinstance(response_model, DefaultPlaceholder):
            response_model = None
        super().__init__(path, endpoint, response_model=response_model, **kwargs)
