"""A push parsed the fast way gives exactly the answers and stored bytes of the exact parser.

``parse_sync_json`` hands the rules each content's stored text (and ``checked``: no bad
number, lone surrogate or deep nesting anywhere), so the writer stores that text instead
of encoding the content again; the exact parser (``_parse_exact``) gives neither. These
tests push the same batches both ways into twin layers of every backend and compare the
outcomes, the stored rows and the logged outcome texts byte for byte; they also hold
``parse_sync_json`` to ``parse_json_checked`` and the exclusion forms of
``changes_since`` to a plain filter."""

from __future__ import annotations

import json
import random

import pytest

from conftest import note
from layersync_server import wire_json
from layersync_server.changes import apply_changes
from layersync_server.errors import ApiError
from layersync_server.ids import all_valid_record_ids, is_valid_record_id
from layersync_server.storage.sql import dump_json
from layersync_server.wire_json import MAX_JSON_DEPTH, parse_json_checked, parse_sync_json


def _nested_text(levels: int) -> str:
    """A JSON object nesting ``levels`` levels (the object itself is level 1)."""
    return '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)


#: The fields the record schema requires of a note besides its type (docs/protocol.md).
NOTE_FIELDS = '"pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment"'


def _content(record_id: str, extra: str = "") -> str:
    return ('{"v":2,"type":"pspdfkit/note","pageIndex":0,"icon":"comment","bbox":[1,2,3,4],"text":{"format":"plain",'
            f'"value":"n"}}{extra},"id":{json.dumps(record_id)}}}')


def _create(change_id: str, record_id: str, content: str | None = None) -> str:
    return (f'{{"change_id":{json.dumps(change_id)},"op":"create","id":{json.dumps(record_id)},'
            f'"content":{_content(record_id) if content is None else content}}}')


def _body(changes: list[str], since: int = 0) -> bytes:
    return f'{{"client_id":"t","since":{since},"changes":[{",".join(changes)}]}}'.encode(
        "utf-8", "surrogatepass")


def _first_batch() -> list[str]:
    """Every way a change can differ from a plain create of a new record."""
    changes = [_create(f"c{i}", f"r{i}") for i in range(200)]  # several insert statements
    changes += [
        _create("dup-id", "r5"),  # the record exists (created above)
        _create("c7", "other"),  # the change id was applied above: its outcome is replayed
        _create("no-id", "n1", '{"v":2,"type":"pspdfkit/note",' + NOTE_FIELDS + '}'),  # id added when stored
        _create("other-id", "n2", '{"v":2,"id":"someone-else"}'),  # id replaced
        _create("no-v", "n3", '{"id":"n3","type":"pspdfkit/note",' + NOTE_FIELDS + '}'),  # v defaulted
        _create("root", "k1", _content("k1", ',"rootId":"r9"')),
        _create("root-num", "k2", _content("k2", ',"rootId":7')),
        _create("child-of-r1", "k3", _content("k3", ',"rootId":"r1"')),  # deleted with r1 below
        _create("small-float", "f1", _content("f1", ',"x":1e-05,"y":0.00002,"z":1.5e-7')),
        _create("big-float", "f2", _content("f2", ',"x":1e16,"y":-0.0,"z":123456789012345678')),
        _create("null", "f3", _content("f3", ',"x":null,"s":"e-1 0.0000 {[[["')),
        _create("deep-64", "deep1", _content("deep1", f',"x":{_nested_text(63)}')),
        _create("brackets", "b1", _content("b1", ',"s":"' + "{[" * 80 + '"')),
        _create("list", "l1", "[1,2]"),
        _create("string", "l2", '"x"'),
        _create("null-content", "l3", "null"),
        '{"change_id":"no-content","op":"create","id":"l4"}',
        _create("bad-id", ""),
        _create("long-id", "x" * 129),
        _create("unicode", "é😀‮", _content("é😀‮", ',"t":"\u2028 \\u0000 \\" \\\\"')),
        _create("quote-id", 'q"\\', _content('q"\\')),
        '{"change_id":"upd","op":"update","id":"r3","base_revision":4,"content":' + _content("r3") + "}",
        '{"change_id":"upd-again","op":"update","id":"r3","base_revision":4,"content":' + _content("r3") + "}",
        '{"change_id":"del","op":"delete","id":"r1","base_revision":2}',
        '{"change_id":"bad-op","op":"move","id":"r2"}',
        _create("after-delete", "r1"),
        _create("c-last", "r-last"),
        _create("c-last", "r-last-2"),  # the change id repeats within the batch
        _create("same-id-a", "twice"),
        _create("same-id-b", "twice"),
    ]
    return changes


def _second_batch() -> list[str]:
    """Replays, creates of records of the first batch and fresh creates."""
    return [_create("c3", "r3"), _create("again", "r4"), _create("fresh", "fresh1"),
            _create("c199", "zzz"), _create("deep-64", "x")] + \
        [_create(f"s{i}", f"t{i}") for i in range(100)]


def _push(storage, layer: str, raw: bytes, fast: bool, user_id: str | None = "alice"):
    if fast:
        body, checked, texts = parse_sync_json(raw)
    else:  # the general path: the exact parser, no texts
        body, checked, texts = wire_json._parse_exact(raw), False, None
    with storage.write_layer("d", layer) as writer:
        result = apply_changes(writer, body["changes"], user_id, checked, texts)
        page = writer.changes_since(body["since"], 1000, frozenset(result.own_revisions))
    return result, page, checked, texts


def _stored(storage, layer: str):
    with storage.transaction(write=False) as conn:
        records = [tuple(r[k] for k in ("id", "revision", "deleted", "content", "root_id",
                                        "created_by", "updated_by"))
                   for r in storage.execute(conn, "SELECT * FROM records WHERE document_id=? AND "
                                            "layer=? ORDER BY revision", ("d", layer)).fetchall()]
        outcomes = [(r["change_id"], r["outcome"]) for r in storage.execute(
            conn, "SELECT change_id, outcome FROM change_log WHERE document_id=? AND layer=? "
            "ORDER BY change_id", ("d", layer)).fetchall()]
        versions = [tuple(r[k] for k in ("id", "revision", "deleted", "content"))
                    for r in storage.execute(conn, "SELECT * FROM record_versions WHERE "
                                             "document_id=? AND layer=? ORDER BY id, revision",
                                             ("d", layer)).fetchall()]
    return records, outcomes, versions


def _page_key(page):
    return ([r.to_wire() for r in page.records], page.has_more, page.next_since, page.layer.revision)


def test_fast_and_general_paths_store_and_answer_the_same(storage):
    for batch, since in ((_first_batch(), 0), (_second_batch(), 3)):
        raw = _body(batch, since)
        fast = _push(storage, "fast", raw, fast=True)
        general = _push(storage, "general", raw, fast=False)
        assert fast[2] and fast[3] is not None  # the parse handed over the texts
        assert fast[0].accepted == general[0].accepted
        assert fast[0].rejected == general[0].rejected
        assert fast[0].own_revisions == general[0].own_revisions
        assert _page_key(fast[1]) == _page_key(general[1])
    assert _stored(storage, "fast") == _stored(storage, "general")
    reasons = {r["change_id"]: r["reason"] for r in fast[0].rejected}
    assert reasons["again"] == "exists" and "fresh" not in reasons
    records = {r[0]: r for r in _stored(storage, "fast")[0]}
    assert records["n1"][3] == '{"v":2,"type":"pspdfkit/note",' + NOTE_FIELDS + ',"id":"n1"}'
    assert records["k1"][4] == "r9" and records["k2"][4] is None
    assert records["k3"][2] and records["k3"][3] is None  # the cascade reached it


def test_outcomes_of_the_first_batch(storage):
    """What the rules say for each odd change (not only "the same as the general path")."""
    result = _push(storage, "L", _body(_first_batch()), fast=True)[0]
    reasons = {r["change_id"]: r["reason"] for r in result.rejected}
    accepted = {a["change_id"]: a for a in result.accepted}
    assert reasons == {"dup-id": "exists", "list": "invalid",
                       "string": "invalid", "null-content": "invalid", "no-content": "invalid",
                       "bad-id": "invalid", "long-id": "invalid", "upd-again": "conflict",
                       "bad-op": "invalid", "after-delete": "exists", "same-id-b": "exists"}
    assert accepted["c7"]["id"] == "r7"  # replayed, not applied to "other"
    assert accepted["c-last"]["id"] == "r-last"  # the repeat got the first outcome
    assert len(result.accepted) + len(result.rejected) == len(_first_batch())
    assert [a["revision"] for a in result.accepted[:200]] == list(range(1, 201))


@pytest.mark.parametrize("literal", ["NaN", "1e999", "9" * 200, '"\\ud800"', _nested_text(64)])
def test_a_bad_value_sends_the_whole_body_the_general_way(storage, literal):
    """A body holding a bad number, a lone surrogate or a content nesting 65 levels is
    not ``checked``; its other changes get the same outcomes and bytes as in a clean body."""
    batch = _first_batch()[:50] + [_create("bad", "bad", _content("bad", f',"x":{literal}'))]
    fast = _push(storage, "fast", _body(batch), fast=True)
    assert not fast[2] and fast[3] is None
    general = _push(storage, "general", _body(batch), fast=False)
    assert fast[0].accepted == general[0].accepted and fast[0].rejected == general[0].rejected
    assert fast[0].rejected[-1]["reason"] == "invalid"
    assert _stored(storage, "fast") == _stored(storage, "general")


def test_existing_records_and_logged_change_ids_from_an_earlier_transaction(storage):
    first = [_create(f"c{i}", f"r{i}") for i in range(120)]
    _push(storage, "L", _body(first), fast=True)
    again = [_create(f"c{i}", f"other{i}") for i in range(0, 120, 2)] + \
        [_create(f"n{i}", f"r{i}") for i in range(1, 120, 2)]
    result = _push(storage, "L", _body(again), fast=True)[0]
    assert [a["id"] for a in result.accepted] == [f"r{i}" for i in range(0, 120, 2)]
    assert [a["revision"] for a in result.accepted] == [i + 1 for i in range(0, 120, 2)]
    assert {r["reason"] for r in result.rejected} == {"exists"}
    assert [r["id"] for r in result.rejected] == [f"r{i}" for i in range(1, 120, 2)]
    assert storage.get_layer("d", "L").revision == 120


# -- parse_sync_json --------------------------------------------------------------------------

def _parse_answer(raw, function):
    try:
        value, checked = function(raw)[:2]
    except ApiError as exc:
        return "error", exc.status, exc.message
    return "ok", json.dumps(value, default=repr, sort_keys=False), checked


SYNC_BODIES = [
    _body([]), b'{"changes":[]}', b"{}", b"[]", b'"x"', b"nope", b'{"changes":{}}',
    _body(_first_batch()), _body(_second_batch()),
    _body([_create("c", "r", _content("r", f',"x":{_nested_text(63)}'))]),  # content: 64 levels
    _body([_create("c", "r", _content("r", f',"x":{_nested_text(64)}'))]),  # 65
    _body([_create("c", "r", _nested_text(300))]), _body([_create("c", "r", _nested_text(1100))]),
    _body([_create("c", "r", _content("r", ',"s":"' + "[" * 300 + '"'))]),
    b'{"changes":[{"change_id":"c","op":"create","id":"r","content":{},"x":[[1]]}]}',
    b'{"changes":[{"change_id":"c","op":"create","id":"r","content":[' + b"[" * 70 + b"]" * 70 + b"]}]}",
    b'{"changes":[1,2]}', b'{"changes":[{"content":{"a":1}}],"x":{"y":[1]}}',
    b'{"changes":[{"content":{"a":1e-7}},{"content":{"a":"1e-7"}},{"content":{"a":1.0}}]}',
    b'{"changes":[{"content":{"a":NaN}}]}', b'{"changes":[{"content":{"a":"\\ud800"}}]}',
    b'{"changes":[{"content":{"a":' + b"1" * 30 + b"}}]}",
    b'{"changes":[{"content":{"a":"x\\ny\\u2028"}},{"op":"delete"},{"content":{}}]}',
]


@pytest.mark.parametrize("raw", SYNC_BODIES, ids=range(len(SYNC_BODIES)))
def test_parse_sync_json_is_parse_json_checked(raw):
    expected = _parse_answer(raw, lambda r: parse_json_checked(r, MAX_JSON_DEPTH + 3))
    assert _parse_answer(raw, parse_sync_json) == expected
    _check_texts(raw)


def _check_texts(raw):
    try:
        value, checked, texts = parse_sync_json(raw)
    except ApiError:
        return
    if texts is None:
        return
    assert checked
    assert len(texts) == len(value["changes"])
    for change, text in zip(value["changes"], texts):
        content = change.get("content") if isinstance(change, dict) else None
        if text is not None:
            assert isinstance(content, dict) and text == dump_json(content)


def _random_scalar(rnd):
    return rnd.choice(['"s"', '"e-5"', '"0.00001"', '"{[{"', "1", "-0", "1.5", "1e-05",
                       "2.5e-7", "0.00003", "1e16", "123456789012345678", "true", "null",
                       '"\\u00e9\\ud83d\\ude00"', '"a\\"b\\\\c\\n"'])


def _random_json(rnd, depth: int) -> str:
    if depth <= 1 or rnd.random() < 0.3:
        return _random_scalar(rnd)
    if rnd.random() < 0.5:
        return "[" + ",".join(_random_json(rnd, depth - 1) for _ in range(rnd.randint(0, 3))) + "]"
    return "{" + ",".join(f'"k{i}":{_random_json(rnd, depth - 1)}'
                          for i in range(rnd.randint(0, 3))) + "}"


def test_parse_sync_json_on_random_bodies():
    rnd = random.Random(20261129)
    for _ in range(400):
        changes = []
        for index in range(rnd.randint(0, 6)):
            content = "{" + ",".join(f'"k{i}":{_random_json(rnd, rnd.choice([2, 5, 70]))}'
                                     for i in range(rnd.randint(0, 4))) + "}"
            if rnd.random() < 0.1:
                content = _nested_text(rnd.randint(60, 70))
            extra = rnd.choice(["", ',"base_revision":3', ',"x":[1]', ',"x":{"y":1}'])
            changes.append(f'{{"change_id":"c{index}","op":"create","id":"r{index}"{extra},'
                           f'"content":{content}}}')
        raw = _body(changes)
        assert _parse_answer(raw, parse_sync_json) == _parse_answer(
            raw, lambda r: parse_json_checked(r, MAX_JSON_DEPTH + 3)), raw
        _check_texts(raw)


# -- changes_since exclusions, record ids ---------------------------------------------------

@pytest.mark.parametrize("since,exclude", [
    (0, set()), (5, set(range(6, 16))), (5, set(range(1, 12))), (5, set(range(8, 12))),
    (5, {7, 9, 11}), (5, set(range(16, 30))), (0, set(range(1, 31))), (29, {30}), (3, {2, 3}),
])
def test_changes_since_leaves_out_exactly_the_excluded_revisions(storage, since, exclude):
    with storage.write_layer("d", "L") as writer:
        for i in range(30):
            writer.put_record(f"r{i}", {"id": f"r{i}", "v": 2}, None)
    for limit in (3, 1000):
        with storage.write_layer("d", "L") as writer:
            page = writer.changes_since(since, limit, frozenset(exclude))
        expected = [r for r in range(since + 1, 31) if r not in exclude]
        assert [r.revision for r in page.records] == expected[:limit]
        assert page.has_more == (len(expected) > limit)
        listed = storage.list_records("d", "L", since, limit, True, frozenset(exclude))
        assert [r.revision for r in listed.records] == expected[:limit]
        assert (listed.has_more, listed.next_since) == (page.has_more, page.next_since)


def test_record_id_check_matches_its_definition():
    def reference(value):
        return (isinstance(value, str) and 0 < len(value) <= 128
                and not any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF
                            for c in value))
    rnd = random.Random(7)
    samples = [chr(c) for c in range(0x2100)] + [chr(c) for c in range(0xD700, 0xE100)] + \
        [chr(rnd.randrange(0x110000)) for _ in range(3000)]
    for char in samples:
        for value in (char, "ab" + char, char + "x" * 127, char * 129):
            assert is_valid_record_id(value) == reference(value), repr(value)
    for value in ("", "x" * 128, "x" * 129, None, 7, b"abc", "01M8MC7QCD4FAFZQCN4MF2ABEC"):
        assert is_valid_record_id(value) == reference(value)


def test_create_then_update_of_one_record_in_one_flush(storage):
    """A flush holding two writes of one record (PostgreSQL refuses them in one
    multi-row upsert) stores the last."""
    changes = [_create("a", "x"), _create("b", "y"),
               '{"change_id":"c","op":"update","id":"x","base_revision":1,"content":'
               + _content("x", ',"k":1') + "}"]
    for layer, fast in (("fast", True), ("general", False)):
        result = _push(storage, layer, _body(changes), fast)[0]
        assert [a["revision"] for a in result.accepted] == [1, 2, 3] and not result.rejected
    assert _stored(storage, "fast") == _stored(storage, "general")
    assert storage.get_record("d", "fast", "x").content["k"] == 1


@pytest.mark.parametrize("ids", [[], ["a"], ["a", "b" * 128], ["é😀‮", "q\"\\ x"]])
def test_all_valid_record_ids_accepts_valid_lists(ids):
    assert all_valid_record_ids(ids)


@pytest.mark.parametrize("bad", ["", "x" * 129, None, 3, "a\x00", "a\x7f", "\ud800", "\u2028\x1f"])
def test_all_valid_record_ids_refuses_any_bad_item(bad):
    for ids in ([bad], ["ok", bad], [bad, "ok", "fine"]):
        assert not all_valid_record_ids(ids)


def test_changes_without_ids_or_with_bad_ids_in_a_checked_body(storage):
    batch = [_create("a", "r1"), '{"change_id":"b","op":"create","content":{"v":2}}',
             '{"change_id":"c","op":"create","id":null,"content":{"v":2,"id":null}}',
             _create("d", "bad\x01id"), _create("e", "r2"),
             _create("f", "bad\x02id", _content("bad\x02id"))]  # the content agrees
    fast = _push(storage, "fast", _body(batch), fast=True)
    general = _push(storage, "general", _body(batch), fast=False)
    assert fast[2] and fast[3] is not None
    assert fast[0].accepted == general[0].accepted and fast[0].rejected == general[0].rejected
    assert [r["change_id"] for r in fast[0].rejected] == ["b", "c", "d", "f"]
    assert _stored(storage, "fast") == _stored(storage, "general")


def test_prefetch_finds_existing_keys_inside_and_at_the_ends_of_a_batch(storage):
    """:meth:`SqlLayerWriter.prefetch` proves a batch of keys absent with one range probe
    per table where the backend orders text as Python does; random batches of ids made of
    one- to four-byte characters, whose ranges hold existing records and logged change
    ids inside, at either end or not at all, get exactly the general path's outcomes."""
    rnd = random.Random(11)
    alphabet = ["a", "b", "z", "A", "~", "é", "ÿ", "\u0800", "\uffee", "\U0001f600"]

    def key():
        return "".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 3)))

    logged: list[str] = []
    for round_ in range(40):
        ids = list(dict.fromkeys(key() for _ in range(rnd.randint(2, 12))))
        change_ids = [rnd.choice(logged) if logged and rnd.random() < 0.2 else key() + f"-{round_}"
                      for _ in ids]
        batch = [_create(c, i) for c, i in zip(change_ids, ids)]
        fast = _push(storage, "fast", _body(batch), fast=True)
        general = _push(storage, "general", _body(batch), fast=False)
        assert fast[2] and fast[3] is not None
        assert fast[0].accepted == general[0].accepted
        assert fast[0].rejected == general[0].rejected
        logged.extend(change_ids)
    assert _stored(storage, "fast") == _stored(storage, "general")
    reasons = {r["reason"] for r in fast[0].rejected}
    assert "exists" in reasons  # existing records were met (and replays of logged ids)


def test_a_batch_of_new_ids_is_proved_absent_with_one_probe_per_table(storage):
    """The range probe (SQLite) or the id lists (PostgreSQL) of :meth:`prefetch`: a
    batch of new, time-ordered ids costs SQLite one query per table, and a batch whose
    range holds an existing id (at an end, or inside) is looked up id by id."""
    ulid = [f"01M8MNQ9{n:06d}XPBRMXJ7DHY" for n in range(0, 3000, 3)]
    first = [_create(ulid[i + 1], ulid[i]) for i in range(0, 200, 2)]
    _push(storage, "L", _body(first), fast=True)
    probes = ordered = getattr(storage, "ORDERED_TEXT_KEYS", False)
    statements: list[str] = []
    if ordered:
        with storage.connection() as conn:
            conn.set_trace_callback(statements.append)
    try:
        cases = [  # (change ids, record ids, records that exist)
            ([ulid[i + 1] for i in range(400, 600, 2)], [ulid[i] for i in range(400, 600, 2)], []),
            ([f"x{i}" for i in range(3)], [ulid[0], ulid[500], ulid[502]], [ulid[0]]),  # low end
            ([f"y{i}" for i in range(3)], [ulid[300], ulid[302], ulid[198]], [ulid[198]]),  # high
            ([f"z{i}" for i in range(2)], [ulid[1], ulid[301]], []),  # ulid[2] inside, not asked
        ]
        for change_ids, record_ids, existing in cases:
            statements.clear()
            with storage.write_layer("d", "L") as writer:
                writer.prefetch(record_ids, change_ids)
                assert [i for i in record_ids if writer.get_record(i) is not None] == existing
                assert all(writer.recorded_outcome(c) is None for c in change_ids)
                selects = [s for s in statements if s.startswith("SELECT")
                           and ("FROM records" in s or "FROM change_log" in s)]
            if probes:
                in_lists = [s for s in selects if " IN (" in s]
                assert len(selects) == 2 + len(in_lists), selects
                assert bool(in_lists) == (record_ids != cases[0][1]), selects
    finally:
        if ordered:
            with storage.connection() as conn:
                conn.set_trace_callback(None)


def test_creates_without_a_user_or_root_ids_store_nulls(storage):
    """A batch of fast-path creates whose user and roots are all null (a token without
    ``user_id``): PostgreSQL types those all-NULL ``VALUES`` columns as text, and the rows
    are the general path's."""
    batch = [_create(f"c{i}", f"r{i}") for i in range(300)]
    for layer, fast in (("fast", True), ("general", False)):
        result = _push(storage, layer, _body(batch), fast, user_id=None)[0]
        assert len(result.accepted) == 300
    assert _stored(storage, "fast") == _stored(storage, "general")
    record = storage.get_record("d", "fast", "r7")
    assert (record.created_by, record.updated_by, record.revision) == (None, None, 8)
