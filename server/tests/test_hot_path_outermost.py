"""The hot routes' shortcut before the middleware stack (app.LayerSyncApp,
routes/propagation.Shortcut).

``POST .../sync`` and the long-poll ``GET .../changes`` are answered before
ServerErrorMiddleware, FastAPI's own layers, ObservabilityMiddleware and
ProtocolVersionMiddleware; the shortcut does what those do for them. These tests pin
that it is taken, that it answers (status, body, headers), counts (``/metrics``) and
fails (500, re-raised) exactly as the whole stack does (the same endpoints reached
through the router, and the routes declared the FastAPI way), and that it steps aside
when a layer it can not stand for is present. test_latency_paths.py compares the answers
of many more requests with FastAPI's.
"""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.testclient import TestClient

from conftest import change, note, start_server, stop_server
from layersync_server.app import create_app
from layersync_server.tokens import mint_token
from test_latency_paths import apps  # noqa: F401 — the fixture: fast and slow app, one storage

LAYER = "/sync/v1/documents/doc/layers/~"


@pytest.fixture
def three_apps(apps):
    """``fast`` as built, ``stack`` with the shortcut off (the endpoints reached through
    the stack and the router), ``slow`` with the routes declared the FastAPI way
    (test_latency_paths.apps); one storage."""
    fast, slow, private_pem = apps
    stack = create_app(fast.state.ctx.settings, storage=fast.state.ctx.storage)
    stack.hot_shortcut = False  # every request takes the stack
    return fast, stack, slow, private_pem


def _client(app, **kwargs) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, **kwargs), base_url="http://t",
                             timeout=30)


def _signature(response: httpx.Response):
    return response.status_code, response.content, response.headers.multi_items()


@pytest.fixture
def stack_calls(monkeypatch) -> list:
    """Paths of the requests that went through ServerErrorMiddleware (the outermost
    layer of FastAPI's stack)."""
    calls = []
    original = ServerErrorMiddleware.__call__

    async def counting(self, scope, receive, send):
        if scope["type"] == "http":
            calls.append(scope["path"])
        return await original(self, scope, receive, send)

    monkeypatch.setattr(ServerErrorMiddleware, "__call__", counting)
    return calls


def _requests(private_pem: bytes):
    """(method, path, headers, body) of hot requests with every kind of answer."""
    auth = {"Authorization": f"Bearer {mint_token(private_pem, 'doc', layer='')}"}
    elsewhere = {"Authorization": f"Bearer {mint_token(private_pem, 'missing', layer='')}"}
    push = b'{"since": 0, "changes": [{"change_id": "c1", "op": "create", "id": "r1", ' \
           b'"content": {"type": "pspdfkit/note"}}]}'
    return [("GET", LAYER + "/changes?since=0", auth, b""),
            ("POST", LAYER + "/sync", auth, push),
            ("POST", LAYER + "/sync", {**auth, "LayerSync-Protocol": "1"}, push),  # replay
            ("GET", LAYER + "/changes?since=0&limit=1", {**auth, "LayerSync-Protocol": "1"}, b""),
            ("GET", LAYER + "/changes?since=0", {**auth, "LayerSync-Protocol": "0"}, b""),  # 426
            ("POST", LAYER + "/sync", {**auth, "LayerSync-Protocol": "one"}, push),  # 400
            ("GET", LAYER + "/changes?since=0", {}, b""),  # 401
            ("POST", LAYER + "/sync", auth, b"not json"),  # 400
            ("POST", "/sync/v1/documents/missing/layers/~/sync", elsewhere, push),  # 404
            ("GET", "/sync/v1/documents/doc/layers/a%01b/changes", auth, b"")]  # 400


def _counts(metrics_text: str) -> list[str]:
    """The request counter lines of /metrics (durations differ between runs)."""
    return sorted(line for line in metrics_text.splitlines()
                  if line.startswith("layersync_http_requests_total{")
                  or re.match(r"layersync_sync_duration_seconds_count\{", line))


def test_hot_requests_skip_the_stack_and_answer_and_count_as_it_does(three_apps, stack_calls):
    fast, stack, slow, private_pem = three_apps
    requests = _requests(private_pem)

    async def scenario():
        answers = {}
        seed = create_app(fast.state.ctx.settings, storage=fast.state.ctx.storage)
        async with _client(seed) as client:  # later pushes of c1 replay its outcome
            method, path, headers, body = requests[1]
            seeded = await client.request(method, path, headers=headers, content=body)
            assert seeded.status_code == 200
        for name, app in (("fast", fast), ("stack", stack), ("slow", slow)):
            async with _client(app) as client:
                stack_calls.clear()
                answers[name] = [_signature(await client.request(m, p, headers=h, content=b))
                                 for m, p, h, b in requests]
                calls = list(stack_calls)
                answers[name + " metrics"] = _counts((await client.get("/metrics")).text)
                answers[name + " calls"] = calls
        return answers

    answers = asyncio.run(scenario())
    assert answers["fast calls"] == []  # no hot request went through the stack
    assert len(answers["stack calls"]) == len(requests) == len(answers["slow calls"])
    assert answers["fast"] == answers["stack"] == answers["slow"]
    statuses = [a[0] for a in answers["fast"]]
    assert statuses == [200, 200, 200, 200, 426, 400, 401, 400, 404, 400]
    assert all(("layersync-protocol", "2") == a[2][-1] for a in answers["fast"])
    assert answers["fast metrics"] == answers["stack metrics"] == answers["slow metrics"]
    assert any('route="unmatched",status="426"' in line for line in answers["fast metrics"])
    assert any('layers/{layer:path}/sync",status="200"} 2.0' in line
               for line in answers["fast metrics"])


def test_server_fault_on_the_shortcut_answers_and_raises_as_the_stack(three_apps, stack_calls):
    fast, stack, _, private_pem = three_apps
    headers = {"Authorization": f"Bearer {mint_token(private_pem, 'doc', layer='')}",
               "LayerSync-Protocol": "1"}
    storage = fast.state.ctx.storage
    original = storage.list_records

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    answers = {}
    storage.list_records = broken
    try:
        for name, app in (("fast", fast), ("stack", stack)):
            stack_calls.clear()
            with TestClient(app, raise_server_exceptions=False) as client:
                answer = client.get(LAYER + "/changes?since=0", headers=headers)
                answers[name] = (answer.status_code, answer.content, answer.headers.multi_items())
            answers[name + " calls"] = list(stack_calls)
            with TestClient(app) as client, pytest.raises(RuntimeError, match="disk on fire"):
                client.get(LAYER + "/changes?since=0", headers=headers)  # re-raised to the server
    finally:
        storage.list_records = original

    async def counts(app):
        async with _client(app) as client:
            return _counts((await client.get("/metrics")).text)

    assert answers["fast calls"] == [] and answers["stack calls"] == [LAYER + "/changes"]
    assert answers["fast"] == answers["stack"]
    status, body, headers = answers["fast"]
    assert status == 500
    assert body == b'{"error":{"code":"internal","message":"internal server error","details":{}}}'
    assert "layersync-protocol" not in dict(headers)  # as ServerErrorMiddleware sends it
    assert asyncio.run(counts(fast)) == asyncio.run(counts(stack))
    assert any('changes",status="500"} 2.0' in line for line in asyncio.run(counts(fast)))


class _Tagging:
    """A middleware the shortcut can not stand for: it tags every response."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        async def tagged(message):
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), (b"x-tag", b"1")]
            await send(message)
        await self.app(scope, receive, tagged)


def test_shortcut_steps_aside_for_unknown_layers_debug_and_root_path(three_apps, stack_calls):
    fast, _, _, private_pem = three_apps
    headers = {"Authorization": f"Bearer {mint_token(private_pem, 'doc', layer='')}"}
    path = LAYER + "/changes?since=0"

    def served_through_stack(app) -> httpx.Response:
        async def get():
            async with _client(app) as client:
                return await client.get(path, headers=headers)
        stack_calls.clear()
        answer = asyncio.run(get())
        assert answer.status_code == 200
        return answer, stack_calls == [LAYER + "/changes"]

    ctx = fast.state.ctx
    assert served_through_stack(fast)[1] is False
    tagged = create_app(ctx.settings, storage=ctx.storage)
    tagged.add_middleware(_Tagging)
    answer, through = served_through_stack(tagged)
    assert through and answer.headers["x-tag"] == "1"
    debugging = create_app(ctx.settings, storage=ctx.storage)
    debugging.debug = True  # ServerErrorMiddleware's debug page for a 500
    assert served_through_stack(debugging)[1] is True
    rooted = create_app(ctx.settings, storage=ctx.storage)
    rooted.root_path = "/base"
    assert served_through_stack(rooted)[1] is True


def test_serve_keeps_forwarded_headers_for_other_routes(tmp_path, keys):
    """uvicorn's proxy-headers middleware now runs inside the app for every request but
    the hot ones (which read neither client nor scheme): a redirect still follows
    ``X-Forwarded-Proto`` from a trusted (loopback) proxy, and the hot routes answer."""
    process, srv = start_server(tmp_path, str(tmp_path / "db.sqlite"), *keys)
    try:
        redirect = srv.http.get("/sync/v1/info/", headers={"X-Forwarded-Proto": "https"},
                                follow_redirects=False)
        plain = srv.http.get("/sync/v1/info/", follow_redirects=False)
        document_id = srv.new_document()
        pushed = srv.sync(document_id, [change("create", "n1", note())])
        polled = srv.http.get(srv.layer_url(document_id) + "/changes", params={"since": 0},
                              headers={**srv.auth(document_id), "X-Forwarded-For": "10.0.0.1"})
    finally:
        stop_server(process, srv)
    assert redirect.status_code == 307 and redirect.headers["location"].startswith("https://")
    assert plain.headers["location"].startswith("http://")
    assert pushed.status_code == 200 and pushed.headers["layersync-protocol"] == "2"
    assert polled.status_code == 200 and "n1" in [r["id"] for r in polled.json()["records"]]
