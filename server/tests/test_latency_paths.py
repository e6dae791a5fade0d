"""The propagation path's shortcuts answer exactly as the long way round.

* JWT cache: a token verified once is still refused when it expires (leeway included),
  is not yet valid (``nbf``/``iat``), or is revoked.
* Hand-over: a long-poll woken by a commit in this process answers from the page the
  commit read for it (notify.py); that page equals the re-read it replaces, and every
  case it can not stand for falls back to the re-read.
* The plain ASGI endpoints (routes/propagation.py): ``GET .../changes`` and ``POST
  .../sync``, served without FastAPI's router, answer byte for byte as the same routes
  declared the FastAPI way (:func:`_fastapi_declared`, the reference) do, odd queries,
  paths and methods included.
* ``serve`` runs on uvloop and httptools.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
import uuid
from pathlib import Path

import httpx
import jwt.api_jwt as api_jwt
import pytest
from fastapi import APIRouter, Depends, Query
from starlette.requests import Request

from conftest import CORPUS, change, note, start_server, stop_server
from layersync_server import auth
from layersync_server.app import create_app
from layersync_server.auth import JwtVerifier
from layersync_server.context import INLINE_MAX_RECORDS, AppContext, get_context
from layersync_server.json_http import WireJSONResponse, WireRoute
from layersync_server.routes.propagation import (INLINE_MAX_BODY_BYTES, HotRoute, LayerChanges,
                                                 LayerSync, plain_query)
from layersync_server.wire_json import MAX_REVISION
from layersync_server.errors import ApiError
from layersync_server.notify import LayerNotifier, page_after
from layersync_server.settings import Settings
from layersync_server.storage import NewDocument, open_storage
from layersync_server.tokens import mint_token

# -- JWT cache ---------------------------------------------------------------------------


@pytest.fixture
def verifier(keys) -> JwtVerifier:
    return JwtVerifier(keys[1], leeway_s=30)


def _refusal(verifier: JwtVerifier, token: str) -> str:
    with pytest.raises(ApiError) as raised:
        verifier.verify(f"Bearer {token}")
    assert raised.value.status == 403
    return raised.value.message


def test_cached_token_is_refused_once_expired_with_the_leeway(verifier, keys, monkeypatch):
    now = time.time()
    token = mint_token(keys[0], "doc", layer="", expires_in_s=10)
    grant = verifier.verify(f"Bearer {token}")
    assert token in verifier._verified
    exp = int(now) + 10
    monkeypatch.setattr(auth.time, "time", lambda: exp + 29.5)  # inside the 30 s leeway
    assert verifier.verify(f"Bearer {token}") is grant
    monkeypatch.setattr(auth.time, "time", lambda: exp + 30)  # PyJWT: exp <= now - leeway
    assert _refusal(verifier, token) == "token expired"


def test_cached_token_still_checks_nbf_and_iat(verifier, keys, monkeypatch):
    now = int(time.time())
    for claim in ("nbf", "iat"):
        token = mint_token(keys[0], "doc", layer="", **{claim: now + 20})
        verifier.verify(f"Bearer {token}")  # within the leeway: accepted and cached
        monkeypatch.setattr(auth.time, "time", lambda: now - 11)  # the clock went back
        assert _refusal(verifier, token) == f"invalid token: The token is not yet valid ({claim})"
        monkeypatch.undo()


def test_uncached_and_cached_refusals_agree(verifier, keys, monkeypatch):
    """At any moment, a token the cache holds gets the answer a fresh verifier (PyJWT's
    own checks) gives: the same grant, or the same refusal."""
    token = mint_token(keys[0], "doc", layer="", expires_in_s=5, nbf=int(time.time()) - 5)
    verifier.verify(f"Bearer {token}")
    real_datetime = api_jwt.datetime
    for shift in (-3600, -36, -35, 0, 34, 35, 36, 3600):
        moment = time.time() + shift

        class _Clock(real_datetime):  # PyJWT reads the clock through datetime.now
            @classmethod
            def now(cls, tz=None):
                return real_datetime.fromtimestamp(moment, tz)

        monkeypatch.setattr(auth.time, "time", lambda: moment)
        monkeypatch.setattr(api_jwt, "datetime", _Clock)
        outcomes = []
        for which in (verifier, JwtVerifier(keys[1], leeway_s=30)):
            try:
                outcomes.append(which.verify(f"Bearer {token}"))
            except ApiError as exc:
                outcomes.append(exc.message)
        assert outcomes[0] == outcomes[1], (shift, outcomes)
        monkeypatch.undo()


def test_token_cache_is_bounded(verifier, keys, monkeypatch):
    monkeypatch.setattr(JwtVerifier, "VERIFIED_CACHE_SIZE", 3)
    tokens = [mint_token(keys[0], "doc", layer="", user_id=f"u{i}") for i in range(5)]
    for token in tokens:
        assert verifier.verify(f"Bearer {token}").user_id is not None
    assert list(verifier._verified) == tokens[2:]


def test_cached_token_with_jti_is_refused_after_revocation_on_the_fast_routes(server):
    doc = server.new_document()
    jti = uuid.uuid4().hex
    headers = {"Authorization": f"Bearer {server.token(doc, jti=jti)}"}
    changes_url = server.layer_url(doc) + "/changes"
    sync_url = server.layer_url(doc) + "/sync"
    body = {"since": 0, "changes": []}
    assert server.http.get(changes_url, headers=headers).status_code == 200
    assert server.http.post(sync_url, headers=headers, json=body).status_code == 200
    assert server.http.post("/api/tokens/revoke", json={"jti": jti},
                            headers=server.admin()).status_code == 200
    for refused in (server.http.get(changes_url, headers=headers),
                    server.http.post(sync_url, headers=headers, json=body)):
        assert refused.status_code == 403 and refused.json()["error"]["message"] == "token revoked"


# -- hand-over: page_after against storage ------------------------------------------------


def _storage_with_document(tmp_path: Path):
    storage = open_storage(tmp_path / "db.sqlite")
    storage.create_document(NewDocument("d", "t", b"%PDF-1.4", "0" * 64, 1))
    return storage


def test_page_after_equals_list_records_at_the_same_snapshot(tmp_path):
    """Random commits (creates, updates, deletes, several per record): for every commit,
    the page read from the revision before it, cut down to any later since and limit,
    is what list_records returns for them."""
    storage = _storage_with_document(tmp_path)
    rng = random.Random(7)
    ids = [f"r{i}" for i in range(12)]
    try:
        for _ in range(40):
            with storage.write_layer("d", "L") as writer:
                before = writer.layer.revision
                for _ in range(rng.randint(1, 5)):
                    record_id = rng.choice(ids)
                    content = None if rng.random() < 0.3 else {**note(str(rng.random())), "id": record_id}
                    writer.put_record(record_id, content, None)
                after = writer.layer.revision
            for page_limit in (1000, 3):
                page = storage.list_records("d", "L", before, page_limit, True)
                for since in range(before, after + 1):
                    for limit in (1, 2, 5, 1000):
                        expected = storage.list_records("d", "L", since, limit, True)
                        got = page_after(page, before, since, limit)
                        if got is None:  # only when the page can not tell
                            assert page.has_more
                            continue
                        assert got == expected, (before, after, since, limit, page_limit)
            assert page_after(page, before, before - 1, 10) is None  # below the page: unknown
    finally:
        storage.close()


# -- hand-over: the notifier ---------------------------------------------------------------


def _page(storage, since, limit=1000):
    return storage.list_records("d", "L", since, limit, True)


def _commit(storage, *record_ids):
    with storage.write_layer("d", "L") as writer:
        before = writer.layer.revision
        for record_id in record_ids:
            writer.put_record(record_id, {**note(), "id": record_id}, None)
    return before, writer.layer


def test_notifier_hands_the_page_over_or_asks_for_a_re_read(tmp_path):
    storage = _storage_with_document(tmp_path)

    async def scenario():
        notifier = LayerNotifier()
        known = _page(storage, 0).layer

        async def wait(since=0, limit=1000, timeout=5.0, state=None):
            return await notifier.wait_for_change("d", "L", since, state or known, timeout, limit)

        # a commit with its page: the waiter answers from it, equal to a re-read
        waiter = asyncio.create_task(wait())
        await asyncio.sleep(0)
        assert notifier.open_waits == 1 and notifier.has_waiters("d", "L")
        before, state = _commit(storage, "a", "b")
        notifier.publish("d", "L", state.revision, _page(storage, before), before)
        woke, page = await waiter
        assert woke and page == _page(storage, 0)
        assert notifier.open_waits == 0 and not notifier.has_waiters("d", "L")

        # the waiter's limit cuts the handed page as list_records would
        known2 = state
        waiter = asyncio.create_task(wait(since=known2.revision, limit=1, state=known2))
        await asyncio.sleep(0)
        before, state = _commit(storage, "c", "d", "e")
        notifier.publish("d", "L", state.revision, _page(storage, before), before)
        woke, page = await waiter
        assert woke and page == _page(storage, known2.revision, 1) and page.has_more

        # a newer commit without a page (another process, an admin route): re-read
        known3 = state
        waiter = asyncio.create_task(wait(since=known3.revision, state=known3))
        await asyncio.sleep(0)
        before, state = _commit(storage, "f")
        page_f = _page(storage, before)
        _, state2 = _commit(storage, "g")
        notifier.publish("d", "L", state2.revision)  # commit "g" announced first, bare
        notifier.publish("d", "L", state.revision, page_f, before)  # "f"'s page is older
        assert await waiter == (True, None)

        # the echo of our own commit (PostgreSQL NOTIFY) does not spoil the page
        known4 = state2
        waiter = asyncio.create_task(wait(since=known4.revision, state=known4))
        await asyncio.sleep(0)
        before, state = _commit(storage, "h")
        notifier.publish("d", "L", state.revision, _page(storage, before), before)
        notifier.publish("d", "L", state.revision)
        woke, page = await waiter
        assert woke and page == _page(storage, known4.revision)

        # another incarnation of the layer (epoch) or a gap in the change feed: re-read
        waiter = asyncio.create_task(wait(since=state.revision, state=type(state)(
            "d", "L", "another-epoch", state.revision)))
        await asyncio.sleep(0)
        before, state5 = _commit(storage, "i")
        notifier.publish("d", "L", state5.revision, _page(storage, before), before)
        assert await waiter == (True, None)
        waiter = asyncio.create_task(wait(since=state5.revision, state=state5))
        await asyncio.sleep(0)
        await notifier.wake_all()
        assert await waiter == (True, None)

        # timeouts, and the plain wait_past of before
        assert await wait(since=10**6, timeout=0.05) == (False, None)
        assert await notifier.wait_past("d", "L", 10**6, 0, 0.05) is False
        assert notifier.open_waits == 0

    try:
        asyncio.run(scenario())
    finally:
        storage.close()


# -- hand-over and fast path through the app ------------------------------------------------


def _fastapi_declared(app):
    """``app`` with the two hot routes declared as FastAPI routes instead (the
    signatures they had as FastAPI routes: FastAPI reads and validates the path and the
    query), which then answer through the ASGI endpoints' ``answer``: what FastAPI's
    route machinery would answer. The reference of the tests below."""
    router = APIRouter(prefix="/sync/v1", route_class=WireRoute,
                       default_response_class=WireJSONResponse)
    layer_path = "/documents/{document_id}/layers/{layer:path}"

    @router.get(layer_path + "/changes")
    async def layer_changes(document_id: str, layer: str, request: Request,
                            since: int = Query(0, ge=0, le=MAX_REVISION),
                            wait: float = Query(0, ge=0, allow_inf_nan=False),
                            limit: int | None = Query(None, ge=1),
                            ctx: AppContext = Depends(get_context)) -> WireJSONResponse:
        return await LayerChanges(ctx).answer(request.scope, request.receive)

    @router.post(layer_path + "/sync")
    async def layer_sync(document_id: str, layer: str, request: Request,
                         ctx: AppContext = Depends(get_context)) -> WireJSONResponse:
        return await LayerSync(ctx).answer(request.scope, request.receive)

    app.router.routes[:] = [r for r in app.router.routes if not isinstance(r, HotRoute)]
    app.include_router(router)
    return app


@pytest.fixture
def apps(tmp_path, keys):
    """Two apps on one storage: ``fast`` as built, ``slow`` with the hot routes declared
    the FastAPI way (:func:`_fastapi_declared`)."""
    private_pem, public_key = keys
    settings = Settings(db_path=tmp_path / "db.sqlite", public_key_path=public_key, admin_token="t",
                        max_wait_s=5)
    storage = open_storage(settings.db_path)
    storage.create_document(NewDocument("doc", "t", (CORPUS / "sample-files-024-annotated_pdf.pdf")
                                        .read_bytes(), "0" * 64, 1))
    fast = create_app(settings, storage=storage)
    slow = _fastapi_declared(create_app(settings, storage=storage))
    assert sum(isinstance(r, HotRoute) for r in fast.router.routes) == 2
    yield fast, slow, private_pem
    storage.close()


def _layer_l(private_pem: bytes) -> tuple[dict, str]:
    """Headers (a JWT for layer "L" of "doc", the protocol header) and the layer's URL."""
    token = mint_token(private_pem, "doc", layer="L")
    return ({"Authorization": f"Bearer {token}", "LayerSync-Protocol": "1"},
            "/sync/v1/documents/doc/layers/L")


def _client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=30)


@contextlib.contextmanager
def _write_layer_threads(storage):
    """While open, each ``storage.write_layer`` call appends the id of the thread that
    made it to the yielded list (the real method still runs)."""
    original = storage.write_layer
    threads: list[int] = []

    def noting(*args, **kwargs):
        threads.append(threading.get_ident())
        return original(*args, **kwargs)

    storage.write_layer = noting
    try:
        yield threads
    finally:
        storage.write_layer = original


def test_long_poll_answered_from_the_handed_page_equals_the_re_read(apps):
    fast, _, private_pem = apps
    auth_headers, url = _layer_l(private_pem)
    storage = fast.state.ctx.storage
    reads = []
    original = storage.list_records

    def counting(*args, **kwargs):
        # the read for the waiters right after the commit passes no exclude set (5
        # arguments); _list passes one
        reads.append("handed" if len(args) == 5 else "sync" if args[5] else "re-read")
        return original(*args, **kwargs)

    async def scenario():
        async with _client(fast) as client:
            for round_, limit in enumerate((None, 1, 2)):
                root, reply, other = f"root{round_}", f"reply{round_}", f"other{round_}"
                pushed = await client.post(url + "/sync", headers=auth_headers, json={"changes": [
                    change("create", root, note()), change("create", reply, note(rootId=root)),
                    change("create", other, note())]})
                revision = pushed.json()["revision"]
                params = {"since": revision, "wait": 5, **({"limit": limit} if limit else {})}
                poll = asyncio.create_task(client.get(url + "/changes", params=params,
                                                      headers=auth_headers))
                for _ in range(500):
                    await asyncio.sleep(0.01)
                    if fast.state.ctx.notifier.open_waits:
                        break
                reads.clear()
                storage.list_records = counting
                try:  # an update, and a delete whose cascade tombstones the reply
                    pushed = await client.post(url + "/sync", headers=auth_headers, json={
                        "since": revision, "changes": [
                            change("update", other, note("changed"), base=revision),
                            change("delete", root, base=revision - 2)]})
                    answer = await poll
                finally:
                    storage.list_records = original
                assert pushed.status_code == 200 and len(pushed.json()["accepted"]) == 2
                assert answer.status_code == 200
                assert reads == ["handed"], reads  # read once after the commit; the waiter did not re-read
                again = await client.get(url + "/changes", params={**params, "wait": 0},
                                         headers=auth_headers)
                assert answer.content == again.content
                body = answer.json()
                assert [(r["id"], r["deleted"]) for r in body["records"]] == \
                    [(other, False), (root, True), (reply, True)][:limit or 3]
                assert body["has_more"] is (limit is not None)
                assert body["next_since"] == (revision + limit if limit else revision + 3)

    asyncio.run(scenario())


def test_plain_query_reads_only_what_fastapi_reads_the_same_way():
    assert plain_query(b"") == {}
    assert plain_query(b"since=5&wait=30&limit=2&x=y") == {"since": "5", "wait": "30", "limit": "2"}
    assert plain_query(b"since=1&since=2") == {"since": "2"}
    assert plain_query(b"wait=0.25") == {"wait": "0.25"}
    for odd in (b"since=%31", b"since=+1", b"since=01", b"since=-1", b"since=", b"since",
                b"since=1e3", b"wait=inf", b"wait=nan", b"wait=1e3", b"wait=.5", b"limit=0",
                b"since=9223372036854775808", b"since=\xff"):
        assert plain_query(odd) is None, odd


_QUERIES = ["", "?since=0", "?since=2", "?since=3&wait=0", "?since=1&limit=1", "?since=1&limit=2&wait=1",
            "?since=-1", "?since=abc", "?since=1e3", "?since=%32", "?since=02", "?since=+2", "?since=",
            "?wait=-1", "?wait=inf", "?wait=nan", "?wait=abc", "?since=3&wait=0.05", "?limit=0",
            "?limit=-3", "?limit=abc", "?since=9223372036854775807", "?since=9223372036854775808",
            "?since=1&since=2", "?unknown=1&since=2", "?since=2&limit=99999999999999999999"]


def _signature(response: httpx.Response):
    return response.status_code, response.content, sorted(response.headers.multi_items())


def test_fast_path_answers_as_fastapi_does(apps):
    fast, slow, private_pem = apps
    calls = []
    slow_context = get_context

    def spy(request: Request):
        calls.append(request.url.path)
        return slow_context(request)

    fast.dependency_overrides[get_context] = spy  # FastAPI's routes call it; the endpoints not
    good = mint_token(private_pem, "doc", layer="")
    headers = [{"Authorization": f"Bearer {good}"}, {},
               {"Authorization": f"Bearer {mint_token(private_pem, 'doc', layer='other')}"},
               {"Authorization": "Bearer not.a.jwt"},
               {"Authorization": f"Bearer {mint_token(private_pem, 'doc', layer='', permissions=['download'])}"},
               {"Authorization": f"Bearer {good}", "LayerSync-Protocol": "0"},
               {"Authorization": f"Bearer {good}", "LayerSync-Protocol": "x"}]
    layers = ["~", "L", "a%01b", "..", "a/b", "", "x" * 129]
    documents = ["doc", "missing", "d" * 129]
    bodies = [b'{"since": 0, "changes": []}', b"not json", b"[]", b'{"since": -1}',
              b'{"changes": [{"op": "create"}]}', b'{"epoch": "nope", "since": 0, "changes": []}',
              b"{}", b'{"changes": [{"change_id": "same-change", "op": "create", "id": "fp", '
                     b'"content": {"type": "pspdfkit/note"}}]}']

    async def scenario():
        async with _client(fast) as f, _client(slow) as s:
            # replaying a change id answers the stored outcome, so both apps can push it
            for document in documents:
                for layer in layers:
                    base = f"/sync/v1/documents/{document}/layers/{layer}"
                    for header in headers:
                        for query in _QUERIES:
                            a = await f.get(base + "/changes" + query, headers=header)
                            b = await s.get(base + "/changes" + query, headers=header)
                            assert _signature(a) == _signature(b), (base, query, header, a.text, b.text)
                        for body in bodies:  # the first push applies; compare the replays
                            await f.post(base + "/sync", content=body, headers=header)
                            a = await f.post(base + "/sync", content=body, headers=header)
                            b = await s.post(base + "/sync", content=body, headers=header)
                            assert _signature(a) == _signature(b), (base, body, header, a.text, b.text)
            # other methods and near-miss paths go to FastAPI (405, 404)
            for method, path in (("PUT", "/sync/v1/documents/doc/layers/~/changes"),
                                 ("GET", "/sync/v1/documents/doc/layers/~/sync"),
                                 ("POST", "/sync/v1/documents/doc/layers/~/changes"),
                                 ("GET", "/sync/v1/documents/doc/layers/~/changes/"),
                                 ("GET", "/sync/v1/documents/doc/layers/changes"),
                                 ("HEAD", "/sync/v1/documents/doc/layers/~/changes")):
                a = await f.request(method, path, headers=headers[0])
                b = await s.request(method, path, headers=headers[0])
                assert _signature(a) == _signature(b), (method, path, a.text, b.text)
            metrics = (await f.get("/metrics")).text
            assert calls == [], "FastAPI's route machinery served a hot request"
            base = "/sync/v1/documents/doc/layers/~"
            assert (await f.get(base + "/changes?since=1&wait=0&limit=5", headers=headers[0])).status_code == 200
            assert (await f.post(base + "/sync", content=bodies[0], headers=headers[0])).status_code == 200
            assert (await f.get(base + "/changes?since=%31", headers=headers[0])).status_code == 200
            assert calls == []  # odd queries too: the endpoint validates them itself
        assert 'route="/sync/v1/documents/{document_id}/layers/{layer:path}/changes"' in metrics
        assert 'route="/sync/v1/documents/{document_id}/layers/{layer:path}/sync"' in metrics

    asyncio.run(scenario())


def test_fast_path_server_fault_is_500_with_the_envelope(apps):
    fast, _, private_pem = apps
    token = mint_token(private_pem, "doc", layer="")

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    fast.state.ctx.storage.list_records = broken
    from starlette.testclient import TestClient
    with TestClient(fast, raise_server_exceptions=False) as client:
        response = client.get("/sync/v1/documents/doc/layers/~/changes",
                              headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 500
    assert response.json() == {"error": {"code": "internal", "message": "internal server error",
                                         "details": {}}}


# -- serve runs on uvloop and httptools ------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc (Linux)")
def test_serve_runs_on_uvloop_and_httptools(tmp_path, keys):
    """Both are dependencies of the server, and uvicorn's "auto" picks them up."""
    process, srv = start_server(tmp_path, str(tmp_path / "db.sqlite"), *keys)
    try:
        assert srv.http.get("/healthz").status_code == 200
        maps = Path(f"/proc/{process.pid}/maps").read_text()
    finally:
        stop_server(process, srv)
    assert "/uvloop/loop." in maps and "/httptools/parser/parser." in maps


def test_long_poll_reads_small_pages_on_the_loop_and_big_ones_whole_in_a_worker(apps):
    """GET changes reads at most INLINE_MAX_RECORDS records on the event loop thread
    (context.read_inline_first); a page with more is read again, whole, in a worker, and
    the answer is the one a worker read gives."""
    fast, slow, private_pem = apps
    auth_headers, url = _layer_l(private_pem)
    storage = fast.state.ctx.storage
    original = storage.list_records
    reads = []

    def noting(*args, **kwargs):
        reads.append((threading.get_ident(), args[3]))  # thread, page size asked for
        return original(*args, **kwargs)

    async def scenario():
        loop_thread = threading.get_ident()
        async with _client(fast) as client, _client(slow) as reference:
            n = INLINE_MAX_RECORDS + 4
            pushed = await client.post(url + "/sync", headers=auth_headers, json={
                "changes": [change("create", f"r{i}", note()) for i in range(n)]})
            revision = pushed.json()["revision"]
            storage.list_records = noting
            try:
                for since, expect in ((revision - 3, [loop_thread]), (0, [loop_thread, "worker"])):
                    reads.clear()
                    params = {"since": since, "wait": 0}
                    answer = await client.get(url + "/changes", params=params, headers=auth_headers)
                    assert [t if t == loop_thread else "worker" for t, _ in reads] == expect
                    assert reads[0][1] == INLINE_MAX_RECORDS
                    storage.list_records = original
                    assert answer.content == (await reference.get(url + "/changes", params=params,
                                                                  headers=auth_headers)).content
                    storage.list_records = noting
                    assert len(answer.json()["records"]) == (3 if since else n)
            finally:
                storage.list_records = original

    asyncio.run(scenario())


def test_pushes_with_a_delete_or_a_big_body_are_written_off_the_event_loop(apps):
    """A sync of a few small creates/updates commits on the loop thread; one with a delete
    (a root's comments go with it: unbounded rows), a body over INLINE_MAX_BODY_BYTES or no
    change at all (a pull, whose page may be big) commits in a worker, so it cannot stall
    the other requests."""
    fast, _, private_pem = apps
    auth_headers, url = _layer_l(private_pem)
    storage = fast.state.ctx.storage

    async def scenario():
        loop_thread = threading.get_ident()
        async with _client(fast) as client:
            with _write_layer_threads(storage) as threads:
                async def push(changes):
                    threads.clear()
                    answer = await client.post(url + "/sync", headers=auth_headers, json={"changes": changes})
                    assert answer.status_code == 200 and not answer.json()["rejected"], answer.text
                    return ["loop" if t == loop_thread else "worker" for t in threads], answer.json()
                where, pushed = await push([change("create", "root", note()),
                                            change("create", "c1", note(rootId="root"))])
                assert where == ["loop"]
                revision = pushed["revision"]
                where, _ = await push([change("delete", "root", base=revision - 1)])
                assert where == ["worker"]
                where, _ = await push([])  # a pull: its answer page may be big
                assert where == ["worker"]
                big = note("x" * (INLINE_MAX_BODY_BYTES + 1))
                where, _ = await push([change("create", "big", big)])
                assert where == ["worker"]
            assert (await client.get(url + "/records", params={"since": 0},
                                     headers=auth_headers)).json()["records"][0]["id"] == "big"

    asyncio.run(scenario())


def test_inline_push_of_a_client_behind_reads_its_answer_page_in_a_worker(apps):
    """A small push commits on the loop thread, but reads at most INLINE_MAX_RECORDS
    records of its answer page there: a client owed more (it is behind) gets its push
    rolled back and made again in a worker, which reads the whole page; the answer is the
    one FastAPI's route gives, and the change is applied once."""
    fast, slow, private_pem = apps
    auth_headers, url = _layer_l(private_pem)
    storage = fast.state.ctx.storage

    async def scenario():
        loop_thread = threading.get_ident()
        async with _client(fast) as client, _client(slow) as reference:
            n = INLINE_MAX_RECORDS + 4
            for start in range(0, n, 4):  # small pushes
                creates = [change("create", f"r{i}", note()) for i in range(start, start + 4)]
                pushed = await client.post(url + "/sync", headers=auth_headers,
                                           json={"changes": creates})
            revision = pushed.json()["revision"]
            with _write_layer_threads(storage) as threads:
                for since, where in ((revision - 3, ["loop"]), (0, ["loop", "worker"])):
                    threads.clear()
                    body = {"since": since, "changes": [change("create", f"new{since}", note())]}
                    answer = await client.post(url + "/sync", headers=auth_headers, json=body)
                    assert ["loop" if t == loop_thread else "worker" for t in threads] == where
                    got = answer.json()
                    assert len(got["changes"]) == (3 if since else n + 1)  # r0.. and new{since}
                    assert got["accepted"][0]["revision"] == got["revision"] and not got["has_more"]
                    own = got["accepted"][0]["revision"]
                    page = storage.list_records("doc", "L", since, 1000, True, frozenset({own}))
                    assert got["changes"] == [r.to_wire() for r in page.records]
                    assert got["next_since"] == page.next_since == own
                    listed = await reference.get(url + "/changes", headers=auth_headers,
                                                 params={"since": since, "wait": 0})
                    assert [r for r in listed.json()["records"] if r["id"] != f"new{since}"] \
                        == got["changes"]
        assert storage.get_layer("doc", "L").revision == n + 2

    asyncio.run(scenario())
