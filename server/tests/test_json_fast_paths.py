"""orjson fast paths of wire_json give exactly the answers of the exact (stdlib) code.

``parse_json`` / ``loads`` take orjson's result only where it is provably the exact
parser's, and the encoders take orjson's bytes only where they are the stdlib
encoder's; these tests hold both to that on hand-picked edge cases, the corpus and
seeded random inputs, and check that a sync batch still rejects exactly its bad
changes (docs/protocol.md, Conventions, "JSON values").
"""

from __future__ import annotations

import json
import math
import random
import struct
import uuid

import pytest

from conftest import CORPUS, note
from layersync_server import wire_json
from layersync_server.errors import ApiError
from layersync_server.storage.sql import dump_json
from layersync_server.json_http import WireJSONResponse
from layersync_server.wire_json import (BadNumber, dumps, json_problem, loads, parse_json,
                                        parse_json_checked)

INSTANT_JSON = CORPUS.parent / "instant-json"


def _canonical(value) -> list:
    """A comparable token list (iterative: any depth): BadNumber markers become tuples,
    floats keep their sign bit, key order counts."""
    tokens: list = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, BadNumber):
            tokens.append(("BadNumber", item.literal, item.why))
        elif isinstance(item, dict):
            tokens.append(("dict", len(item)))
            for key, child in reversed(item.items()):
                stack.extend((child, ("key", key)))
        elif isinstance(item, list):
            tokens.append(("list", len(item)))
            stack.extend(reversed(item))
        elif isinstance(item, tuple):  # a key marker
            tokens.append(item)
        elif isinstance(item, float):
            tokens.append(("float", item.hex()))
        else:
            tokens.append((type(item).__name__, item))
    return tokens


def _exact(raw):
    try:
        return "ok", _canonical(wire_json._parse_exact(raw))
    except ApiError as exc:
        return "error", exc.status, exc.code, exc.message


def _fast(raw):
    try:
        return "ok", _canonical(parse_json(raw))
    except ApiError as exc:
        return "error", exc.status, exc.code, exc.message


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


EDGE_BODIES = [
    "0", "-0", "-0.0", "1.0", "1E5", "1e-400", "-1e-400", "-0e5", "1e999", "-1e400", "1.5e308",
    "4.9e-324", "2.4703282292062328e-324", "123456789012345678.123456789012345678e-300",
    "NaN", "Infinity", "-Infinity", "[NaN, 1]",
    "123456789012345678",  # 18 digits: orjson's int
    "1234567890123456789", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
    "-9223372036854775809", "18446744073709551615", "18446744073709551616", "1" * 30,
    "1" * 100, "1" * 101, "-" + "1" * 100, "9" * 5000, "0." + "0" * 98 + "1", "0." + "0" * 99 + "1",
    "1.5e" + "0" * 30 + "7", "1e-" + "0" * 19 + "5", "1E+" + "0" * 40 + "3",
    '{"x": \t\n 12345678901234567890123}', '{"x":[1, 2,\r 123456789012345678901]}',
    '{"id": "01000000000000000000000000A", "n": 1}',  # a long digit run inside a string
    '{"a": "x:1234567890123456789012345"}', '{"a": "e-1234567890123456789012"}',
    '{"a":1,"b":2,"a":3}', '"\\ud800"', '{"\\udfff": 1}', '"\\ud83d\\ude00"', '"\\u0000\x7f"',
    '"\x01"', "[1,]", "{", "", "  {}  ", "nope", "[]", '{"changes": [1e999]}',
    _nested(150), _nested(250), _nested(900), _nested(1100), _nested(30_000),
    '{"changes": [{"content": ' + '{"a":' * 300 + "{}" + "}" * 300 + "}]}",
]


@pytest.mark.parametrize("text", EDGE_BODIES, ids=range(len(EDGE_BODIES)))
def test_parse_matches_the_exact_parser_on_edge_cases(text):
    for raw in (text.encode("utf-8", "surrogatepass"), text):
        assert _fast(raw) == _exact(raw)


@pytest.mark.parametrize("raw", [b"\xef\xbb\xbf{\"a\": 1}", '{"a": "é"}'.encode("utf-16"),
                                 b'"\xed\xa0\x80"', b'"\xff"', b'{"a": 1}\x00'])
def test_parse_matches_the_exact_parser_on_odd_bytes(raw):
    assert _fast(raw) == _exact(raw)


def _random_number(rnd: random.Random) -> str:
    digits = lambda n: "".join(rnd.choice("0123456789") for _ in range(n))  # noqa: E731
    sign = rnd.choice(["", "-"])
    whole = rnd.choice(["0", str(rnd.randint(1, 9)) + digits(rnd.choice([0, 3, 17, 18, 19, 25, 60, 99]))])
    frac = rnd.choice(["", "." + digits(rnd.choice([1, 5, 17, 18, 19, 40, 99]))])
    exp = rnd.choice(["", "e" + rnd.choice(["", "+", "-"]) + digits(rnd.choice([1, 2, 3, 19, 30]))])
    return sign + whole + frac + exp


def _random_value(rnd: random.Random, depth: int = 0):
    kind = rnd.random()
    if depth > 4 or kind < 0.4:
        return rnd.choice([_random_number(rnd), '"s"', '"0000000000000000000001"', "true", "null",
                           '"\\u00e9\\ud83d\\ude00"'])
    if kind < 0.7:
        return "[" + ", ".join(_random_value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))) + "]"
    return "{" + ",".join(f'"k{i}": {_random_value(rnd, depth + 1)}'
                          for i in range(rnd.randint(0, 4))) + "}"


def test_parse_matches_the_exact_parser_on_random_documents():
    rnd = random.Random(20261129)
    for _ in range(3000):
        text = _random_value(rnd)
        assert _fast(text.encode()) == _exact(text.encode()), text


def test_parse_checked_says_clean_only_when_it_is():
    value, checked = parse_json_checked(b'{"a": [1, 2.5, "x"]}')
    assert checked and value == {"a": [1, 2.5, "x"]}
    for raw in (b'{"a": NaN}', b'{"a": "\\ud800"}', b'{"a": ' + b"1" * 40 + b"}",
                b'{"a": {"b": {"c": {}}}}'):
        value, checked = parse_json_checked(raw, 3)
        assert not checked, raw


def test_stored_text_loads_like_json_loads():
    texts = ['{"x":NaN,"y":Infinity}', '{"n":' + "7" * 40 + "}", '{"n":-9223372036854775809}',
             '{"id":"SEED0000000000000000000001","v":2}', '{"f":1e+16,"g":1e-05,"h":-0.0}',
             json.dumps({"t": "é \u2028 😀"}, ensure_ascii=False)]
    for text in texts:
        assert _canonical(loads(text)) == _canonical(json.loads(text))
        assert _canonical(loads(text.encode())) == _canonical(json.loads(text.encode()))


# -- encoding ---------------------------------------------------------------------------------

def _old_render(content) -> bytes:
    """The response encoder before orjson (wire_json at commit 521df14)."""
    try:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        text = json.dumps(wire_json._finite(content), ensure_ascii=False, allow_nan=False,
                          separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(wire_json._finite(content), allow_nan=False,
                          separators=(",", ":")).encode("ascii")


def _old_dump_json(content) -> str:
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"))


def _corpus_values():
    for path in sorted(INSTANT_JSON.glob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        yield document
        for key in ("annotations", "comments", "formFields", "formFieldValues"):
            for item in document.get(key, []) if isinstance(document, dict) else []:
                yield item


def test_corpus_instant_json_encodes_byte_identically():
    values = list(_corpus_values())
    assert len(values) > 6
    for value in values:
        assert WireJSONResponse(value).body == _old_render(value)
        assert dumps(value) == _old_render(value).decode("utf-8")
        if isinstance(value, dict):
            assert dump_json(value) == _old_dump_json(value)


def _random_float(rnd: random.Random) -> float:
    while True:
        choice = rnd.random()
        if choice < 0.4:
            value = struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0]
        elif choice < 0.8:
            value = rnd.uniform(-1, 1) * 10.0 ** rnd.randint(-12, 25)
        else:
            value = rnd.randint(1, 99) * 10.0 ** rnd.randint(-12, 25)
        if math.isfinite(value):
            return value


def test_random_values_encode_byte_identically():
    rnd = random.Random(7)
    for _ in range(2000):
        value = {"bbox": [_random_float(rnd) for _ in range(4)], "n": rnd.randint(-2**70, 2**70),
                 "text": rnd.choice(["plain", "é\u2028😀", "a\x00b\x1f\"\\/", "note-1e-5 0.00001"]),
                 "list": [rnd.choice([None, True, False, 0, -0.0, 1e-05, 1e16])]}
        assert WireJSONResponse(value).body == _old_render(value)
        assert dump_json(value) == _old_dump_json(value)


@pytest.mark.parametrize("value", [
    {"x": float("nan"), "y": [float("inf"), -float("inf")]},  # written as null in responses
    {"lone": "\ud800", "n": 1}, {"\udfff": 1},                  # escaped, never a 500
    {"big": 2**64, "small": -2**63 - 1, "ok": 2**64 - 1},
    {"deep": json.loads(_nested(300))}, (1, 2), {"t": (1.5e-7, 1e22)},
])
def test_special_values_encode_like_the_old_encoder(value):
    assert WireJSONResponse(value).body == _old_render(value)
    if isinstance(value, dict) and "lone" not in value and "\udfff" not in value:
        assert dump_json(value) == _old_dump_json(value)  # NaN stays NaN in stored text


@pytest.mark.parametrize("text", [
    "c1975110-b42e-4c0f-8467-b4b2d31e632d",  # a layer epoch: "2e-4c" is no float
    "note-1 e-mail white-space 1e-5x 10.00001 x0e-0y", "version 2e-7"])
def test_float_like_text_in_strings_keeps_the_fast_encoder(text):
    # Only a float orjson writes otherwise (a number: before ",", "]", "}" or the end)
    # sends a value to the stdlib encoder; such text inside a string does not, so a
    # layer whose epoch reads like one is answered as fast as any other.
    value = {"epoch": text, "accepted": [{"id": "A", "revision": 7}], "x": [0.5, 1e-4]}
    assert wire_json.fast_dumps(value) == _old_render(value)
    assert wire_json.fast_dumps([text, 1.5e-7]) is None  # a real one still does
    assert wire_json.fast_dumps({"x": 0.00001, "t": text}) is None

# -- a sync batch rejects exactly its bad changes ------------------------------------------------

def _sync_raw(server, doc: str, changes_json: list[str]):
    raw = '{"client_id": "t", "epoch": null, "since": 0, "changes": [%s]}' % ", ".join(changes_json)
    return server.http.post(server.layer_url(doc) + "/sync", content=raw.encode("utf-8", "surrogatepass"),
                            headers={**server.auth(doc), "Content-Type": "application/json"})


BAD_CONTENTS = {
    "digits5000": '{"x": %s}' % ("9" * 5000),
    "long-fraction": '{"x": 0.%s1}' % ("0" * 120),
    "nan": '{"x": [1, NaN]}',
    "overflow": '{"x": {"y": 1e999}}',
    "surrogate-value": '{"text": {"value": "a\\ud800b"}}',
    "surrogate-key": '{"\\udc00": 1}',
    "deep": '{"a":' * 64 + "{}" + "}" * 64,
}


def test_bad_values_in_a_batch_of_good_ones_are_rejected_alone(server):
    doc = server.new_document()
    entries, expected_bad = [], {}
    for index in range(40):
        rid = f"good-{index}"
        content = json.dumps(note(f"note {index}", bbox=[index + 0.25, 1e-05, 2**70, 12.5]))
        if index % 5 == 2:
            name = sorted(BAD_CONTENTS)[(index // 5) % len(BAD_CONTENTS)]
            rid, content = f"bad-{name}-{index}", BAD_CONTENTS[name]
            expected_bad[rid] = json_problem(wire_json._parse_exact(content))
            assert expected_bad[rid], name
        entries.append('{"change_id": "%s", "op": "create", "id": "%s", "content": %s}'
                       % (uuid.uuid4().hex, rid, content))
    response = _sync_raw(server, doc, entries)
    assert response.status_code == 200, response.text
    body = response.json()
    rejected = {r["id"]: (r["reason"], r["message"]) for r in body["rejected"]}
    assert rejected == {rid: ("invalid", message) for rid, message in expected_bad.items()}
    assert len(body["accepted"]) == 40 - len(expected_bad)
    stored = {r["id"]: r["content"] for r in server.records(doc)["records"]}
    assert stored["good-0"]["bbox"] == [0.25, 1e-05, 2**70, 12.5]
    assert not any(rid.startswith("bad-") for rid in stored)


def test_long_digit_runs_in_ids_and_big_integers_round_trip(server):
    doc = server.new_document()
    rid = "R" + "0" * 24 + "1"
    raw = ('{"change_id": "%s", "op": "create", "id": "%s", "content": {"n": 18446744073709551616, '
           '"m": -9223372036854775809, "s": "x:1234567890123456789012"}}' % (uuid.uuid4().hex, rid))
    response = _sync_raw(server, doc, [raw])
    assert response.status_code == 200 and response.json()["accepted"], response.text
    text = server.http.get(server.layer_url(doc) + "/records", headers=server.auth(doc)).text
    assert '"n":18446744073709551616,"m":-9223372036854775809' in text
    assert '"s":"x:1234567890123456789012"' in text
