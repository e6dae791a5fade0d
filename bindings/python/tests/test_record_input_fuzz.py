"""Hypothesis over the package's and the C ABI's own inputs (issue 18 item 3): records built
from random JSON given to create/update, and random bytes given to the C functions as they
are. Each is either accepted and read back equal, or refused with a clear error (a LayerSync
code and a message) with nothing stored and nothing queued.
"""
from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

import layersync

from conftest import WAIT_S

#: Codes an input may be refused with.
REFUSED = {layersync.InvalidJSONStructureError.default_code, layersync.InvalidArgumentError.default_code,
           layersync.InvalidCustomDataError.default_code}
SETTINGS = settings(max_examples=120, deadline=None, derandomize=False, print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

scalars = (st.none() | st.booleans() | st.integers(min_value=-(1 << 70), max_value=1 << 70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
KEYS = ["type", "pageIndex", "bbox", "opacity", "icon", "text", "id", "v", "customData", "creatorName",
        "color", "note", "rotation", "createdAt", "flags", "name"]
overrides = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=10), json_values, max_size=4)


def base_note() -> dict[str, Any]:
    return {"v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 24, 24], "opacity": 1,
            "icon": "comment", "creatorName": "fuzz", "text": {"format": "plain", "value": "base"}}


def same(a: Any, b: Any) -> bool:
    """JSON equality (numbers by value: 1 == 1.0 as the engine may write either)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return a == b or math.isclose(a, b, rel_tol=1e-15)
    return a == b and type(a) is type(b)


def snapshot(doc: layersync.Document) -> tuple[str, bool]:
    return json.dumps(sorted(doc.list_annotations(), key=lambda r: r["id"]), sort_keys=True), doc.has_unsynced_changes


def assert_refused(error: layersync.LayerSyncError, what: Any) -> None:
    assert error.code in REFUSED, f"{what!r}: {error!r}"
    assert error.message, f"{what!r}: an error without a message"


def test_created_records_from_random_json_are_stored_as_given_or_refused(downloaded):
    _, doc = downloaded()
    doc.sync(wait=True, timeout=WAIT_S)

    @SETTINGS
    @given(overrides)
    def check(changes: dict[str, Any]) -> None:
        record = {**base_note(), **changes}
        record.pop("id", None) if not isinstance(record.get("id"), str) else None
        before = snapshot(doc)
        try:
            stored = doc.create_annotation(record)
        except layersync.LayerSyncError as error:
            assert_refused(error, record)
            assert snapshot(doc) == before, f"{record!r} was refused but something was stored"
            return
        assert all(same(stored[k], v) for k, v in layersync.record_content(record).items()), (record, stored)
        assert same(doc.get_annotation(stored["id"]), stored)
        doc.delete_annotation(stored["id"])
    check()


def test_updates_from_random_json_are_stored_as_given_or_leave_the_record(downloaded):
    _, doc = downloaded()
    target = doc.create_annotation(base_note())

    @SETTINGS
    @given(overrides)
    def check(changes: dict[str, Any]) -> None:
        current = doc.get_annotation(target["id"])
        record = {**current, **changes, "id": target["id"]}
        before = snapshot(doc)
        try:
            stored = doc.update_annotation(record)
        except layersync.LayerSyncError as error:
            assert_refused(error, record)
            assert snapshot(doc) == before, f"{record!r} was refused but the record changed"
            return
        # (the keys a record is handed out with beside its content, createdBy and the
        # rest, are never taken from input: only the content is stored as given)
        assert all(same(stored[k], v) for k, v in layersync.record_content(record).items()), (record, stored)
        assert all(same(stored[k], current[k]) for k in ("createdBy", "group") if k in current), (record, stored)
        assert same(doc.get_annotation(target["id"]), stored)
        doc.update_annotation(base_note() | {"id": target["id"]})
    check()


def test_random_bytes_into_the_c_abi_are_stored_or_refused(downloaded):
    """The C functions get the bytes as they are (no Python-side JSON encoding): invalid
    UTF-8, truncated JSON, NaN, deep nesting, NUL-free garbage."""
    _, doc = downloaded()
    text_json = st.builds(lambda r: json.dumps({**base_note(), **r}), overrides)
    raw = (st.binary(max_size=80).map(lambda b: b.replace(b"\0", b"")) | text_json.map(str.encode)
           | text_json.map(lambda t: t[: len(t) // 2].encode()) | st.just(b'{"type":"pspdfkit/note","pageIndex":NaN}')
           | st.integers(1, 200).map(lambda n: (b'{"a":' * n) + b"1" + b"}" * n))

    @SETTINGS
    @given(raw)
    def check(data: bytes) -> None:
        before = snapshot(doc)
        for fn in ("layersync_document_create_annotation", "layersync_document_update_annotation"):
            try:
                out = doc._call_out(fn, data)
            except layersync.LayerSyncError as error:
                assert error.code in REFUSED | {layersync.NoSuchAnnotationError.default_code}, f"{fn} {data!r}: {error!r}"
                assert error.message
                assert snapshot(doc) == before, f"{fn} refused {data!r} but stored something"
                continue
            assert out is not None
            stored = json.loads(out)
            assert same(doc.get_annotation(stored["id"]), stored)
            doc.delete_annotation(stored["id"])
            before = snapshot(doc)
    check()
