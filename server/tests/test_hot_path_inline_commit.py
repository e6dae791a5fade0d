"""Small writes on the event loop thread (context.commit, SqliteStorage.without_waiting).

A commit of at most ``INLINE_MAX_CHANGES`` changes runs on the loop thread when the
SQLite write lock is free; when another thread of the process holds it, or another
connection (another process) holds SQLite's write lock, it runs in a worker instead and
the loop never waits. Either way the layer's long-polls are woken with the page the
commit read for them, and answer before the committing request resumes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time

import pytest

from layersync_server.auth import JwtVerifier
from layersync_server.context import INLINE_MAX_CHANGES, AppContext, commit
from layersync_server.notify import LayerNotifier
from layersync_server.settings import Settings
from layersync_server.storage import NewDocument, open_storage
from layersync_server.storage.base import WriteWouldWait
from layersync_server.storage.sqlite import BUSY_TIMEOUT_MS


@pytest.fixture
def ctx(tmp_path, keys):
    settings = Settings(db_path=tmp_path / "db.sqlite", public_key_path=keys[1])
    storage = open_storage(settings.db_path)
    storage.create_document(NewDocument("doc", "t", b"%PDF-1.4", "0" * 64, 1))
    yield AppContext(settings=settings, storage=storage,
                     verifier=JwtVerifier(keys[1], 30), notifier=LayerNotifier())
    storage.close()


def _writing(threads: list, record_id: str):
    """``work`` for commit: writes one record, notes the thread it ran on."""
    def work(writer):
        threads.append(threading.get_ident())
        return writer.put_record(record_id, {"v": 2, "id": record_id, "type": "pspdfkit/note"}, "u")
    return work


def _busy_timeout(storage) -> int:
    with storage.connection() as conn:
        return int(conn.execute("PRAGMA busy_timeout").fetchone()[0])


def test_small_commit_runs_on_the_loop_and_wakes_long_polls_first(ctx):
    threads, order = [], []

    async def scenario():
        loop_thread = threading.get_ident()
        state = ctx.storage.ensure_layer("doc", "L")

        async def poll():
            woke, page = await ctx.notifier.wait_for_change("doc", "L", state.revision, state,
                                                            5, 100)
            order.append("long-poll answered")
            return woke, page

        waiter = asyncio.create_task(poll())
        await asyncio.sleep(0.01)
        after, revision = await commit(ctx, "doc", "L", _writing(threads, "r1"), changes=1)
        order.append("commit returned")
        woke, page = await waiter
        assert threads == [loop_thread]
        assert after.revision == revision == state.revision + 1
        assert woke and [r.id for r in page.records] == ["r1"]  # the handed page
        assert order == ["long-poll answered", "commit returned"]
        # a big batch, or one of unknown size, still goes to a worker thread
        await commit(ctx, "doc", "L", _writing(threads, "r2"), changes=INLINE_MAX_CHANGES + 1)
        await commit(ctx, "doc", "L", _writing(threads, "r3"))
        assert threads[1] != loop_thread and threads[2] != loop_thread

    asyncio.run(scenario())
    assert _busy_timeout(ctx.storage) == BUSY_TIMEOUT_MS


def test_commit_goes_to_a_worker_while_another_thread_writes(ctx):
    threads, ticks = [], []
    holding, release = threading.Event(), threading.Event()

    def other_writer():
        with ctx.storage.write_layer("doc", "other"):
            holding.set()
            release.wait(10)

    async def scenario():
        loop_thread = threading.get_ident()
        other = threading.Thread(target=other_writer)
        other.start()
        assert holding.wait(10)

        async def ticker():
            while not release.is_set():
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(ticker())
        asyncio.get_running_loop().call_later(0.3, release.set)
        started = time.monotonic()
        after, _ = await commit(ctx, "doc", "L", _writing(threads, "r1"), changes=1)
        assert time.monotonic() - started >= 0.25  # it waited for the other writer...
        await ticking
        other.join()
        assert threads and threads[0] != loop_thread  # ...in a worker thread
        assert after.revision == 1
        assert len(ticks) >= 10  # and the loop went on meanwhile

    asyncio.run(scenario())


def test_commit_goes_to_a_worker_while_another_process_writes(ctx):
    """Another connection holding SQLite's write lock (as another process would): the
    loop thread's try gets SQLITE_BUSY at once, rolls back, keeps its busy timeout, and
    the worker waits for the lock; nothing is written twice."""
    threads, ticks = [], []
    ctx.storage.ensure_layer("doc", "L")
    other = sqlite3.connect(ctx.storage.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")

    async def scenario():
        loop_thread = threading.get_ident()
        with pytest.raises(WriteWouldWait), ctx.storage.without_waiting():
            with ctx.storage.write_layer("doc", "L"):
                pytest.fail("the transaction started")
        with ctx.storage.without_waiting():  # reads go on
            assert ctx.storage.list_records("doc", "L", 0, 10, True).records == []
        assert _busy_timeout(ctx.storage) == BUSY_TIMEOUT_MS

        async def ticker():
            while other.in_transaction:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(ticker())
        asyncio.get_running_loop().call_later(0.3, other.execute, "COMMIT")
        after, revision = await commit(ctx, "doc", "L", _writing(threads, "r1"), changes=1)
        await ticking
        assert threads and threads[0] != loop_thread
        assert len(threads) == 1  # the loop's try failed at BEGIN, before the work
        assert after.revision == revision == 1
        assert len(ticks) >= 10
        # the loop thread's connection is usable again, and writes inline
        after, _ = await commit(ctx, "doc", "L", _writing(threads, "r2"), changes=1)
        assert threads[-1] == loop_thread and after.revision == 2

    try:
        asyncio.run(scenario())
    finally:
        other.close()
    page = ctx.storage.list_records("doc", "L", 0, 10, True)
    assert [(r.id, r.revision) for r in page.records] == [("r1", 1), ("r2", 2)]


def test_busy_after_the_work_rolls_back_and_runs_the_work_again_in_a_worker(ctx, monkeypatch):
    """SQLITE_BUSY in the middle of the loop thread's transaction: it is rolled back,
    and the worker runs the work again from the start."""
    threads = []
    storage = ctx.storage
    original = storage.executemany
    failed = []

    def busy_once(conn, sql, seq):
        if not failed and threading.current_thread() is threading.main_thread():
            failed.append(sql)
            error = sqlite3.OperationalError("database is locked")
            error.sqlite_errorcode = 5  # SQLITE_BUSY
            raise error
        return original(conn, sql, seq)

    monkeypatch.setattr(storage, "executemany", busy_once)

    async def scenario():
        return await commit(ctx, "doc", "L", _writing(threads, "r1"), changes=1)

    after, revision = asyncio.run(scenario())
    assert failed and len(threads) == 2 and threads[0] != threads[1]
    assert after.revision == revision == 1
    assert [(r.id, r.revision) for r in storage.list_records("doc", "L", 0, 10, True).records] \
        == [("r1", 1)]
    with storage.connection() as conn:
        assert not conn.in_transaction
    assert _busy_timeout(storage) == BUSY_TIMEOUT_MS


def test_inline_calls_set_the_busy_timeout_once_until_the_thread_waits_again(ctx):
    """The event loop thread's inline writes and reads (``without_waiting`` blocks, one
    after another) set the connection's busy timeout to 0 once, not twice per block; the
    thread's next storage call outside a block has it back at ``BUSY_TIMEOUT_MS``."""
    storage = ctx.storage
    storage.ensure_layer("doc", "L")
    statements: list[str] = []
    with storage.connection() as conn:
        conn.set_trace_callback(statements.append)
    try:
        for i in range(5):
            with storage.without_waiting():
                with storage.write_layer("doc", "L") as writer:
                    writer.put_record(f"r{i}", {"v": 2, "id": f"r{i}"}, "u")
                assert storage.list_records("doc", "L", 0, 10, True).layer.revision == i + 1
                assert _busy_timeout(storage) == 0
        assert [s for s in statements if "busy_timeout=" in s] == ["PRAGMA busy_timeout=0"]
        assert _busy_timeout(storage) == BUSY_TIMEOUT_MS
        with storage.without_waiting():
            assert _busy_timeout(storage) == 0
        assert [s for s in statements if "busy_timeout=" in s] == [
            "PRAGMA busy_timeout=0", f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
            "PRAGMA busy_timeout=0"]
    finally:
        with storage.connection() as conn:
            conn.set_trace_callback(None)
