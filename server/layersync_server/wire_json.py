"""JSON in and out of the server: the one place request bodies are parsed and
responses are encoded (docs/protocol.md, Conventions, "JSON values"). The rules only:
nothing here knows the web framework (:mod:`layersync_server.json_http` holds the
response class and the route class built on them).

Parsing never fails the whole body because of one value: a number that is not a
finite IEEE-754 double or is longer than :data:`MAX_NUMBER_CHARS` characters, and
the non-standard ``NaN``/``Infinity``/``-Infinity`` literals, parse to a
:class:`BadNumber` marker; :func:`json_problem` then says why the value holding it
is refused (a sync change is rejected ``invalid``, an admin body gets 400). Only a
body that is not JSON at all, or nests deeper than the parser can go, is refused
as a whole.

Encoding never writes ``NaN``: a non-finite float already stored is written as
``null``, so a record stored by an older server can not make a listing fail.

Speed: orjson parses and encodes, and the stdlib code above stays the reference.
orjson answers only where it provably gives the stdlib's answer; everywhere else
the stdlib code runs (on the whole body or value), so results are identical:

* parsing: orjson refuses ``NaN``/``Infinity``, overflowing numbers, lone
  surrogates, bad UTF-8 and nesting past 1024 (the exact parser then decides). It
  silently differs only on integers beyond 64 bits (it makes floats) and on
  literals over :data:`MAX_NUMBER_CHARS` (it accepts them), which both hold a run
  of 19+ digits that :func:`_risky_numbers` finds in the raw text first, and on
  nesting between the exact parser's limit (about 1000) and its own, so a value
  deeper than :data:`SAFE_PARSE_DEPTH` is parsed again;
* encoding: orjson refuses integers beyond 64 bits, lone surrogates, nesting past
  254 and, with the passthrough options, types the stdlib writes otherwise; it
  writes ``NaN`` as ``null`` like :func:`dumps`, and otherwise differs from the
  stdlib only for floats below 1e-4 (``0.00001`` / ``1.5e-7`` where Python writes
  ``1e-05`` / ``1.5e-07``), which :func:`_unlike_stdlib` finds in its output.

tests/test_json_fast_paths.py holds both paths to the same answers;
tests/test_push_fast_path.py holds :func:`parse_sync_json` (which also makes each
sync change's stored content text) to :func:`parse_json_checked`.
"""

from __future__ import annotations

import json
import math
import re

import orjson

from layersync_server.errors import invalid_request

#: Deepest nesting of record content (an object holding an object ... counts one
#: level per object or array; the content object itself is level 1). Instant JSON
#: records are shallow (about 5 levels).
MAX_JSON_DEPTH = 64
#: Largest revision (and ``since``/``base_revision``): SQL BIGINT, 2**63 - 1.
MAX_REVISION = 2**63 - 1
#: Longest number literal, characters (sign, digits, ``.``, exponent).
MAX_NUMBER_CHARS = 100


#: orjson parses up to 1024 levels, the exact parser up to about 1000 minus the stack
#: its caller already uses (then the body is refused): a value orjson parsed that nests
#: deeper than this is parsed again by the exact parser, which decides.
SAFE_PARSE_DEPTH = 200
#: Digits to ``0``, every other byte to ``x`` (see :func:`_risky_numbers`).
_DIGIT_MAP = bytes(48 if 48 <= byte <= 57 else 120 for byte in range(256))
_LONG_RUN = b"0" * 19
#: The literal ``e-`` (a compiled search finds it faster than ``bytes.__contains__``).
_E_MINUS = re.compile(rb"e-")
_DIGITS = frozenset(b"0123456789")
#: Digits to ``0``; ``e`` and ``-`` kept; ``,``, ``]`` and ``}`` (what follows a number
#: in orjson's output) to ``,``; every other byte to ``x`` (see :func:`_unlike_stdlib`).
_EXPONENT_SHAPE = bytes(48 if 48 <= byte <= 57 else byte if byte in b"e-" else
                        44 if byte in b",]}" else 120 for byte in range(256))
#: Types orjson would encode but the stdlib encoder refuses or writes otherwise go to it.
_ORJSON_OPTIONS = (orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS
                   | orjson.OPT_PASSTHROUGH_DATETIME)


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
    return parse_json_checked(raw)[0]


def parse_json_checked(raw: bytes | str, max_depth: int = SAFE_PARSE_DEPTH) -> tuple[object, bool]:
    """:func:`parse_json`, and whether the value is known clean: True means no
    :class:`BadNumber` and no lone surrogate anywhere in it, and nesting of at most
    ``max_depth`` levels (the value itself is level 1; capped at
    :data:`SAFE_PARSE_DEPTH`). False means unknown (the exact parser answered).

    Raises:
        ApiError: as :func:`parse_json`.
    """
    value = _orjson_loads(raw)
    if value is not _REFUSED and _within_depth_exact([value], min(max_depth, SAFE_PARSE_DEPTH)):
        return value, True
    return _parse_exact(raw), False


#: :func:`_orjson_loads` could not answer: the exact parser decides.
_REFUSED = object()


def _orjson_loads(raw: bytes | str) -> object:
    """orjson's value of ``raw`` when it is the exact parser's up to nesting (see module
    docs: the caller still checks the depth), else :data:`_REFUSED`."""
    if _risky_numbers(raw):
        return _REFUSED
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _REFUSED  # the exact parser decides, and words the error


def parse_sync_json(raw: bytes | str,
                    max_content_depth: int = MAX_JSON_DEPTH) -> tuple[object, bool, list | None]:
    """:func:`parse_json_checked` of a sync request body with ``max_content_depth + 3``
    levels (body, ``changes``, change, then the content, whose levels count from 1), and
    the stored text of each change's content, made in the same pass.

    Returns ``(value, checked, texts)``: ``value`` and ``checked`` are exactly
    ``parse_json_checked(raw, max_content_depth + 3)``'s. ``texts`` is None or, when
    ``checked``, a list parallel to ``value["changes"]``: ``texts[i]`` is
    :func:`~layersync_server.storage.sql.dump_json` of ``changes[i]["content"]`` (a
    str; the stdlib encoder's compact text) when that content is an object, else None
    (also when that text needs the stdlib encoder, see :func:`fast_dumps`).

    Cost: instead of walking every container of the body for its depth, each content
    is encoded once (the text the writer stores anyway) and its brackets counted: a
    text with at most ``max_content_depth`` ``{``/``[`` can not nest deeper (brackets
    inside strings only add to the count). Only a content over that bound, and any
    other container (``content`` not an object, another field), is walked; a body
    whose ``changes`` is not a list of objects takes :func:`parse_json_checked`'s walk.

    Raises:
        ApiError: as :func:`parse_json`.
    """
    value = _orjson_loads(raw)
    if value is not _REFUSED:
        texts = _content_texts(value, max_content_depth)
        if texts is not None:
            return value, True, texts
        if _within_depth_exact([value], min(max_content_depth + 3, SAFE_PARSE_DEPTH)):
            return value, True, None
    return _parse_exact(raw), False, None


def _content_texts(body: object, max_content_depth: int) -> list | None:
    """The texts of :func:`parse_sync_json` when ``body`` (parsed by orjson) provably
    nests at most ``max_content_depth + 3`` levels; None when not known (the caller walks).

    The contents' texts are joined by ``\\n`` (which orjson never writes raw: it escapes
    control characters), so the bracket count of every content and the scans for
    floats orjson writes otherwise each take one C-level pass over all of them."""
    if type(body) is not dict or max_content_depth + 3 > SAFE_PARSE_DEPTH:
        return None
    changes = body.get("changes")
    if type(changes) is not list:
        return None
    for key, item in body.items():  # other containers: level 2 of the body
        if (type(item) in _CONTAINERS and key != "changes"
                and not _within_depth_exact([item], max_content_depth + 2)):
            return None
    contents: list = []  # the dict contents, in order
    has_content: list = []  # per change: whether it has one
    for change in changes:
        if type(change) is not dict:
            return None
        content = None
        for key, item in change.items():
            if type(item) in _CONTAINERS:
                if key == "content" and type(item) is dict:
                    content = item
                elif not _within_depth_exact([item], max_content_depth):  # level 4, as content
                    return None
        has_content.append(content is not None)
        if content is not None:
            contents.append(content)
    try:
        datas = [orjson.dumps(content) for content in contents]
    except orjson.JSONEncodeError:  # nesting past 254
        return None
    joined = b"\n".join(datas)
    # per content, its "{" and "[" (a line of them per content)
    openers = joined.translate(None, _NOT_OPENERS_OR_NEWLINE).split(b"\n")
    if max(map(len, openers)) > max_content_depth:
        for content, count in zip(contents, openers):
            if len(count) > max_content_depth and not _within_depth_exact([content],
                                                                          max_content_depth):
                return None
    if _unlike_stdlib(joined):  # then some text may be one fast_dumps refuses
        texts_of = [None if _unlike_stdlib(data) else data.decode("utf-8") for data in datas]
    else:
        texts_of = joined.decode("utf-8").split("\n") if datas else []
    if len(texts_of) == len(changes):
        return texts_of
    found = iter(texts_of)
    return [next(found) if has else None for has in has_content]


_CONTAINERS = {dict, list}
#: Every byte but ``{``, ``[`` and ``\n`` (``bytes.translate`` deletes them: what is
#: left counts the openers per line).
_NOT_OPENERS_OR_NEWLINE = bytes(b for b in range(256) if b not in b"{[\n")


def _within_depth_exact(values: list, max_depth: int) -> bool:
    """:func:`within_depth` for values made by orjson, whose containers are exactly
    ``dict`` and ``list`` (compares types, half the cost of ``isinstance``)."""
    level = [value for value in values if type(value) in _CONTAINERS]
    depth = 1
    while level:
        if depth > max_depth:
            return False
        level = [child for item in level
                 for child in (item.values() if type(item) is dict else item)
                 if type(child) in _CONTAINERS]
        depth += 1
    return True


def _risky_numbers(raw: bytes | str) -> bool:
    """True when ``raw`` may hold a number literal that orjson reads differently from
    the exact parser: 19+ digits in a row that start a number (after ``:``, ``,``,
    ``[`` or the start, whitespace and a minus between), its fraction (after ``.``) or
    its exponent (after ``e``/``E`` and a sign). An integer of 18 digits fits 64 bits,
    and a literal over :data:`MAX_NUMBER_CHARS` characters has at most 4 non-digits, so
    one of its three digit runs is 33+ long. Runs inside strings may answer True
    (only the slow path). Costs one ``translate`` and ``find`` over the text."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    digits = raw.translate(_DIGIT_MAP)
    start = digits.find(_LONG_RUN)
    while start >= 0:
        before = start - 1
        if before >= 0 and raw[before] in b"+-":
            before -= 1
        if before >= 0 and raw[before] in b".eE":
            return True
        while before >= 0 and raw[before] in b" \t\n\r":
            before -= 1
        if before < 0 or raw[before] in b":,[":
            return True
        end = digits.find(b"x", start)  # next run
        if end < 0:
            return False
        start = digits.find(_LONG_RUN, end)
    return False


def _parse_exact(raw: bytes | str) -> object:
    try:
        return json.loads(raw, parse_int=_parse_int, parse_float=_parse_float,
                          parse_constant=_parse_constant)
    except RecursionError:
        raise invalid_request("body nests too deeply to parse") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_request(f"body is not JSON: {exc}") from None


def loads(text: str | bytes) -> object:
    """Parse JSON text this server wrote (stored records and outcomes): the stdlib's
    ``json.loads`` result (``NaN`` of an older server included), by orjson when that
    is provably the same."""
    if not _risky_numbers(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def json_problem(value: object, max_depth: int | None = MAX_JSON_DEPTH) -> str | None:
    """Why ``value`` (a parsed JSON value) may not be stored, or None.

    Checks, iteratively (any depth): nesting deeper than ``max_depth`` (None: no
    limit), :class:`BadNumber` markers, and strings or keys holding lone surrogates
    (not valid UTF-8).
    """
    try:  # fast path: one C-level encode proves there is no BadNumber and no lone surrogate
        orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)  # (it refuses big integers and
        # nesting past 254, the walk decides then)
    except TypeError:
        pass  # find out what is wrong below
    else:
        return None if max_depth is None else depth_problem(value, max_depth)
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


def depth_problem(value: object, max_depth: int) -> str | None:
    """The nesting message of :func:`json_problem`, or None (walks containers only)."""
    return None if within_depth([value], max_depth) else f"content nests deeper than {max_depth} levels"


def within_depth(values: list, max_depth: int) -> bool:
    """True when none of ``values`` nests deeper than ``max_depth`` levels (a dict or
    list is level 1, each container inside one more). Walks the containers a whole
    level at a time (list comprehensions, no per-container Python call)."""
    level = [value for value in values if isinstance(value, (dict, list))]
    depth = 1
    while level:
        if depth > max_depth:
            return False
        level = [child for item in level
                 for child in (item.values() if isinstance(item, dict) else item)
                 if isinstance(child, (dict, list))]
        depth += 1
    return True


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


def fast_dumps(value: object) -> bytes | None:
    """orjson's UTF-8 encoding of ``value`` when it is byte-identical to the stdlib
    encoder's (``ensure_ascii=False``, compact separators; ``NaN`` as ``null`` like
    :func:`dumps`), else None (see module docs)."""
    try:
        data = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:
        return None
    if _unlike_stdlib(data):
        return None
    return data


def _unlike_stdlib(data: bytes) -> bool:
    """Whether orjson's text ``data`` may hold a float the stdlib encoder writes otherwise:
    one below 1e-4 written ``0.0000...`` (not after a digit: ``10.00001`` is the same in
    both), or one with a single exponent digit, ``1.5e-7`` (Python ``1.5e-07``), i.e.
    ``<digit>e-<digit>`` before ``,``, ``]``, ``}`` or the end (what follows a number in
    orjson's output: its keys are strings). Text like that inside a string answers True
    too, which only costs the stdlib encoder.

    Cost: one memmem per literal (``0.0000`` is rare), and when ``e-`` occurs (a UUID
    epoch holds it one time in four, English text often) one ``translate`` and memmem,
    about 1 ns per byte; the regex this replaces took some 40 (~4 ms per 90 kB answer)."""
    if b"0.0000" in data:
        at = data.find(b"0.0000")
        while at >= 0:
            if at == 0 or data[at - 1] not in _DIGITS:
                return True
            at = data.find(b"0.0000", at + 1)
    if _E_MINUS.search(data) is None:
        return False
    shape = data.translate(_EXPONENT_SHAPE)
    return b"0e-0," in shape or shape.endswith(b"0e-0")


def dumps(value: object) -> str:
    """Compact JSON text for a response; non-finite floats are written as ``null``."""
    data = fast_dumps(value)
    return data.decode("utf-8") if data is not None else _stdlib_dumps(value)


def _stdlib_dumps(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return json.dumps(_finite(value), ensure_ascii=False, allow_nan=False,
                          separators=(",", ":"))


def encode_response(content: object) -> bytes:
    """The bytes of a JSON response body: :func:`fast_dumps`, else the stdlib encoder's
    UTF-8 text (``NaN`` as ``null``), else, for a lone surrogate echoed from a request,
    the ASCII text with it escaped."""
    data = fast_dumps(content)
    if data is not None:
        return data
    text = _stdlib_dumps(content)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate echoed from a request: escape it
        return json.dumps(_finite(content), allow_nan=False,
                          separators=(",", ":")).encode("ascii")
