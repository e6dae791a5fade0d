"""Mixed-version deployments after migration 3, long-polls on a re-created layer, and
pins from the break-it review of 7060b1f (orjson fast paths, hot routes, long-poll
hand-over, migration 3, JWT cache) that the suite did not cover yet.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from conftest import change
from layersync_server.changes import apply_changes
from layersync_server.storage import NewDocument, open_storage
from layersync_server.storage.base import LayerState


# -- migration 3 / record_versions ---------------------------------------------------------

@pytest.fixture(params=["sqlite", "postgres"])
def storage(request, tmp_path):
    target = (tmp_path / "store.sqlite" if request.param == "sqlite"
              else request.getfixturevalue("pg_url"))
    backend = open_storage(target, history_versions=3)
    backend.create_document(NewDocument("d", "Doc", b"%PDF-1.4 fake", "00" * 32, 1, []))
    yield backend
    backend.close()


def _write_version_row_like_the_previous_release(storage, record_id: str) -> int:
    """What a 7060b1f~1 server process (still running during a rolling upgrade of
    several processes on one database, or started by mistake on a migrated file: it
    does not refuse schema 3) writes on every put: a record_versions row for the
    *current* revision too. Returns that revision."""
    record = storage.get_record("d", "", record_id)
    with storage.transaction(write=True) as conn:
        storage.execute(conn, "INSERT INTO record_versions (document_id, layer, id, revision, deleted,"
                        " content, updated_by, updated_at) VALUES (?,?,?,?,?,?,?,?)",
                        ("d", "", record_id, record.revision, 0, json.dumps(record.content),
                         record.updated_by, record.updated_at))
    return record.revision


# After migration 3, a record_versions row for the current revision (written by a
# previous-release process sharing the database) must neither make the next update/delete
# of that record fail with a UNIQUE violation in SqlLayerWriter.flush (HTTP 500 forever)
# nor appear twice in history (UNION ALL of records and record_versions).
def test_update_after_a_previous_release_wrote_the_current_version_row(storage):
    with storage.write_layer("d", "") as writer:
        apply_changes(writer, [change("create", "x", {"n": 1}, change_id="c1")], "u")
    current = _write_version_row_like_the_previous_release(storage, "x")
    with storage.write_layer("d", "") as writer:  # was an IntegrityError / UniqueViolation
        result = apply_changes(writer, [change("update", "x", {"n": 2}, base=current,
                                               change_id="c2")], "u")
    assert result.accepted and not result.rejected
    history = storage.record_history("d", "", "x")
    assert [v.revision for v in history] == [current + 1, current]
    assert [v.content["n"] for v in history] == [2, 1]


# Same cause: history listed the current revision twice, so history_versions=3 showed
# only two distinct versions.
def test_history_lists_each_revision_once_after_a_previous_release_wrote(storage):
    with storage.write_layer("d", "") as writer:
        apply_changes(writer, [change("create", "y", {"n": 1}, change_id="c1")], "u")
    current = _write_version_row_like_the_previous_release(storage, "y")
    assert [v.revision for v in storage.record_history("d", "", "y")] == [current]


def test_old_and_new_writers_interleaved_keep_history_distinct_and_bounded(storage):
    """New, old, new writes of one record: every update succeeds, history stays
    newest first without duplicates and within history_versions (3)."""
    with storage.write_layer("d", "") as writer:
        apply_changes(writer, [change("create", "z", {"n": 1}, change_id="c1")], "u")
    for n in range(2, 6):
        current = _write_version_row_like_the_previous_release(storage, "z")
        with storage.write_layer("d", "") as writer:
            result = apply_changes(writer, [change("update", "z", {"n": n}, base=current,
                                                   change_id=f"c{n}")], "u")
        assert result.accepted and not result.rejected
    history = storage.record_history("d", "", "z")
    assert [v.content["n"] for v in history] == [5, 4, 3]
    assert [v.revision for v in history] == sorted({v.revision for v in history}, reverse=True)


# -- schema versions -------------------------------------------------------------------------

def _bump_schema_version(target, version: int) -> None:
    if isinstance(target, str):  # PostgreSQL URL
        import psycopg
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("INSERT INTO layersync_schema (version) VALUES (%s)", (version,))
    else:
        import sqlite3
        conn = sqlite3.connect(target)
        conn.execute(f"PRAGMA user_version={int(version)}")
        conn.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_server_refuses_a_database_migrated_by_a_newer_one(backend, request, tmp_path):
    from layersync_server.storage.sql import SCHEMA_VERSION, SchemaTooNew
    target = (tmp_path / "store.sqlite" if backend == "sqlite"
              else request.getfixturevalue("pg_url"))
    open_storage(target).close()  # migrated to SCHEMA_VERSION
    _bump_schema_version(str(target) if backend == "postgres" else target, SCHEMA_VERSION + 1)
    with pytest.raises(SchemaTooNew) as raised:
        open_storage(target)
    message = str(raised.value)
    assert f"version {SCHEMA_VERSION + 1}" in message and f"version {SCHEMA_VERSION}:" in message
    assert (raised.value.found, raised.value.supported) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)


def test_serve_exits_with_a_clear_error_on_a_newer_schema(tmp_path, keys):
    import subprocess
    import sys
    from layersync_server.storage.sql import SCHEMA_VERSION
    db = tmp_path / "newer.sqlite"
    open_storage(db).close()
    _bump_schema_version(db, SCHEMA_VERSION + 1)
    done = subprocess.run([sys.executable, "-m", "layersync_server", "serve", "--port", "0",
                           "--db", str(db), "--public-key", str(keys[1])],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert f"database schema version {SCHEMA_VERSION + 1} is newer than this server's schema " \
           f"version {SCHEMA_VERSION}" in done.stderr


# -- long-poll wake-ups after a layer reset -------------------------------------------------

# LayerNotifier._latest (and _LayerSignal.revision) kept the old epoch's revision after
# the layer was deleted and re-created (also in 7060b1f~1), so a long-poll on the new
# epoch with since < that stale revision returned at once instead of waiting: every client
# of the layer busy-polled until the new epoch's revision passed the old one.
def test_long_poll_on_a_re_created_layer_waits(server):
    document_id = server.new_document()
    layer = "reset-" + uuid.uuid4().hex[:6]
    for n in range(6):
        assert server.sync(document_id, [change("create", f"r{n}", {"n": n})],
                           layer=layer).status_code == 200
    response = server.http.delete(f"/api/documents/{document_id}/layers/{layer}",
                                  headers=server.admin())
    assert response.status_code == 200, response.text
    _recreate_empty(server, document_id, layer)  # (a deleted layer comes back only this way)
    answer = server.sync(document_id, [change("create", "again", {"n": 0})], layer=layer).json()
    assert answer["revision"] == 1
    start = time.monotonic()
    response = server.http.get(server.layer_url(document_id, layer) + "/changes",
                               params={"since": 1, "wait": 1.5},
                               headers=server.auth(document_id, layer))
    elapsed = time.monotonic() - start
    assert response.status_code == 200 and response.json()["records"] == []
    assert elapsed >= 1.2, f"long-poll returned after {elapsed:.3f} s instead of waiting"


def _recreate_empty(server, document_id: str, layer: str) -> None:
    """Create ``layer`` again, empty, through the admin API (a copy of an empty layer)."""
    assert server.sync(document_id, [], layer="empty").status_code == 200  # never existed: created
    response = server.http.post(f"/api/documents/{document_id}/layers", headers=server.admin(),
                                json={"name": layer, "source_layer_name": "empty"})
    assert response.status_code == 200, response.text
    assert response.json()["data"]["revision"] == 0


def test_notifier_forget_drops_the_old_epoch_and_wakes_waiters():
    import asyncio
    from layersync_server.notify import LayerNotifier

    async def scenario():
        notifier = LayerNotifier()
        notifier.publish("d", "l", 7)
        waiter = asyncio.create_task(notifier.wait_for_change("d", "l", 7, 7, 5.0))
        await asyncio.sleep(0)
        assert notifier.has_waiters("d", "l") and not waiter.done()
        notifier.forget("d", "l")
        assert await asyncio.wait_for(waiter, 1) == (True, None)  # woken: re-read storage
        assert not notifier.has_waiters("d", "l")
        # the new epoch is at revision 1: a wait with since=1 waits (7 is forgotten)
        assert await notifier.wait_past("d", "l", 1, 1, 0.2) is False
        notifier.forget("d", "unknown")  # nothing known: no-op

    asyncio.run(scenario())


def test_change_feed_carries_a_reset_marker_for_layer_and_document_deletes(pg_url):
    """Storage level: delete_layer / delete_document notify with ``reset``; the feed
    reports those to ``on_reset`` and ordinary commits to ``callback``."""
    import asyncio
    import psycopg
    from layersync_server.storage.postgres import CHANNEL, PgChangeFeed

    backend = open_storage(pg_url)
    try:
        backend.create_document(NewDocument("fd", "Doc", b"%PDF-1.4 fake", "00" * 32, 1, []))
        with psycopg.connect(pg_url, autocommit=True) as listener:
            listener.execute(f"LISTEN {CHANNEL}")
            with backend.write_layer("fd", "rv") as writer:
                apply_changes(writer, [change("create", "a", {"n": 1}, change_id="c1")], "u")
            assert backend.delete_layer("fd", "rv")
            backend.create_layer("fd", "rv", [{"id": "b", "v": 2, "n": 1}])  # re-created: new epoch
            assert backend.delete_document("fd")
            payloads = [json.loads(n.payload) for n in listener.notifies(timeout=2, stop_after=5)]
    finally:
        backend.close()
    assert payloads[:3] == [{"d": "fd", "l": "rv", "r": 1},
                            {"d": "fd", "l": "rv", "r": 2, "reset": True},
                            {"d": "fd", "l": "rv", "r": 1}]
    assert sorted((p["l"], p.get("reset")) for p in payloads[3:]) == [("", True), ("rv", True)]

    calls = []

    async def published(document_id, layer, revision):
        calls.append(("published", document_id, layer, revision))

    async def forgotten(document_id, layer):
        calls.append(("forgotten", document_id, layer))

    async def dispatch_all():
        feed = PgChangeFeed(pg_url)
        for payload in payloads[:3]:
            await feed.dispatch(json.dumps(payload), published, forgotten)
        await feed.dispatch(json.dumps(payloads[1]), published)  # no on_reset: a plain wake-up

    asyncio.run(dispatch_all())
    assert calls == [("published", "fd", "rv", 1), ("forgotten", "fd", "rv"),
                     ("published", "fd", "rv", 1), ("published", "fd", "rv", 2)]


def test_layer_reset_on_one_process_reaches_long_polls_on_another(tmp_path, pg_url, keys):
    """Two processes on one PostgreSQL: A knows the layer at revision 6; B deletes it
    (A's long-poll wakes at once, with 404: the layer is deleted) and re-creates it (admin
    API) at revision 1; a long-poll on A with since=1 then waits instead of answering at
    once from A's stale revision."""
    import asyncio
    import httpx
    from conftest import CORPUS, start_server, stop_server

    first, second = start_server(tmp_path, pg_url, *keys), start_server(tmp_path, pg_url, *keys)
    try:
        a, b = first[1], second[1]
        doc, layer = "reset-doc", "reset-layer"
        assert a.upload((CORPUS / "sample-files-024-annotated_pdf.pdf").read_bytes(),
                        doc).status_code == 200
        for n in range(6):  # written through A: A's notifier knows revision 6
            assert a.sync(doc, [change("create", f"r{n}", {"n": n})], layer=layer).status_code == 200

        async def delete_while_polling():
            async with httpx.AsyncClient(timeout=30) as client:
                poll = asyncio.create_task(client.get(a.url + a.layer_url(doc, layer) + "/changes",
                                                      params={"since": 6, "wait": 8},
                                                      headers=a.auth(doc, layer)))
                await asyncio.sleep(0.5)
                assert not poll.done()
                started = time.monotonic()
                deleted = await client.delete(b.url + f"/api/documents/{doc}/layers/{layer}",
                                              headers=b.admin())
                assert deleted.status_code == 200, deleted.text
                return await poll, time.monotonic() - started

        woken, elapsed = asyncio.run(delete_while_polling())
        assert woken.status_code == 404 and elapsed < 3, (woken.text, elapsed)
        assert woken.json()["error"]["code"] == "not_found"
        _recreate_empty(b, doc, layer)
        answer = b.sync(doc, [change("create", "again", {"n": 0})], layer=layer).json()
        assert answer["revision"] == 1
        time.sleep(0.3)  # let A's change feed deliver B's commits
        start = time.monotonic()
        response = a.http.get(a.layer_url(doc, layer) + "/changes", params={"since": 1, "wait": 1.5},
                              headers=a.auth(doc, layer))
        elapsed = time.monotonic() - start
        assert response.status_code == 200 and response.json()["records"] == []
        assert response.json()["epoch"] == answer["epoch"]
        assert elapsed >= 1.2, f"long-poll on A returned after {elapsed:.3f} s instead of waiting"
    finally:
        stop_server(*first)
        stop_server(*second)


# -- pins: behaviour that held ------------------------------------------------------------

def _nest(levels: int) -> str:
    return '{"a":' * (levels - 1) + '{"b":1}' + "}" * (levels - 1)


def test_depth_64_and_65_and_number_spellings_in_one_fast_parsed_batch(server):
    """64 levels stored, 65 rejected alone, while the rest of the body is orjson-clean;
    stored text is the stdlib encoder's spelling of each number."""
    document_id = server.new_document()
    spellings = {"a": ("1.0", "1.0"), "b": ("1e2", "100.0"), "c": ("-0", "0"), "d": ("-0.0", "-0.0"),
                 "e": ("1e16", "1e+16"), "f": ("0.00001", "1e-05"), "g": ("1.5e-7", "1.5e-07"),
                 "h": ("9007199254740993", "9007199254740993"), "i": ("1e-400", "0.0"),
                 "j": ("123456789012345678", "123456789012345678"), "k": ('"\\u2028"', '"\u2028"')}
    entries = [json.dumps({"change_id": f"n{levels}", "op": "create", "id": f"n{levels}"})[:-1]
               + f',"content":{_nest(levels)}}}' for levels in (64, 65)]
    entries += ['{"change_id":"s%s","op":"create","id":"s%s","content":{"v":2,"id":"s%s","x":%s}}'
                % (key, key, key, literal) for key, (literal, _) in spellings.items()]
    body = '{"since":0,"changes":[' + ",".join(entries) + "]}"
    response = server.http.post(server.layer_url(document_id) + "/sync", content=body.encode(),
                                headers={**server.auth(document_id), "Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [(r["change_id"], r["reason"]) for r in answer["rejected"]] == [("n65", "invalid")]
    assert "64 levels" in answer["rejected"][0]["message"]
    assert len(answer["accepted"]) == 1 + len(spellings)
    text = server.http.get(server.layer_url(document_id) + "/records",
                           headers=server.auth(document_id)).content.decode()
    for key, (_, stored) in spellings.items():
        assert f'"x":{stored}' in text, (key, stored)


def test_handed_pages_cut_by_max_page_records_are_never_mistaken_for_the_whole_delta(tmp_path):
    """page_after on a page that stops at its limit: answers only when the cut is past
    the caller's own limit (then has_more), else asks for a re-read."""
    from layersync_server.notify import page_after
    from layersync_server.storage.base import RecordPage, StoredRecord

    records = [StoredRecord(id=f"r{r}", revision=r, deleted=False, content={}) for r in (5, 6, 7)]
    page = RecordPage(LayerState("d", "", "e", 9), records, True, 7)  # 8, 9 not in it
    assert page_after(page, 4, 4, 3) is None
    cut = page_after(page, 4, 4, 2)
    assert [r.revision for r in cut.records] == [5, 6] and cut.has_more and cut.next_since == 6
    assert page_after(page, 4, 5, 5) is None
    assert page_after(page, 5, 4, 10) is None  # since below the page's since
