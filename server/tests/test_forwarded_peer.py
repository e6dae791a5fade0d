"""A request's ``X-Forwarded-For`` never names another connection to the server.

uvicorn's proxy headers (server.py: ``proxy_headers=True``, FORWARDED_ALLOW_IPS, default
loopback) rewrite ``scope["client"]`` to the address a trusted peer forwards, port
included (``X-Forwarded-For: 127.0.0.1:41234``). The change stream looks its own
connection up by that address (``StreamHub.transports``, kept by server.py's HTTP
protocol) to watch and, when its client is gone or a new stream replaces it, reset it.
A forwarded address must not find another client's connection there: a stream opened
with another connection's address, then replaced (``{"replaces": ...}``, which resets the
replaced stream's connection), would reset that other connection.
"""

from __future__ import annotations

import json
import socket
import time

import httpx

from conftest import change, note, start_server, stop_server


def _hello(response: httpx.Response, kept: list) -> dict:
    """The stream's ``hello`` event (``kept`` holds the reader: a dropped one closes the
    response)."""
    chunks = response.iter_text()
    kept.append(chunks)
    buffered = ""
    while "\n\n" not in buffered:
        buffered += next(chunks)
    data = next(line for line in buffered.splitlines() if line.startswith("data: "))
    return json.loads(data[len("data: "):])


def test_a_forwarded_address_does_not_reach_another_connection(tmp_path, keys):
    process, srv = start_server(tmp_path, str(tmp_path / "db.sqlite"), *keys)
    try:
        document_id = srv.new_document()
        revision = srv.sync(document_id, [change("create", "n0", note())]).json()["revision"]
        host, port = srv.url.removeprefix("http://").rsplit(":", 1)
        # the victim: a long-poll parked on its own connection
        victim = socket.create_connection((host, int(port)))
        victim.settimeout(10)
        token = srv.auth(document_id)["Authorization"]
        victim.sendall((f"GET {srv.layer_url(document_id)}/changes?since={revision}&wait=8 HTTP/1.1\r\n"
                        f"Host: {host}\r\nAuthorization: {token}\r\nLayerSync-Protocol: 1\r\n\r\n").encode())
        time.sleep(0.3)  # parked
        peer = "%s:%d" % victim.getsockname()
        # the attacker: a stream "forwarded for" the victim's address, then one replacing it
        headers = {**srv.auth(document_id, user_id="mallory"), "LayerSync-Protocol": "2"}
        kept: list = []
        with httpx.Client(base_url=srv.url, timeout=10) as attacker:
            with attacker.stream("POST", "/sync/v2/stream", json={},
                                 headers={**headers, "X-Forwarded-For": peer}) as first:
                assert first.status_code == 200
                hello = _hello(first, kept)
                replaces = {"replaces": hello["stream_id"], "key": hello["stream_key"]}
                with attacker.stream("POST", "/sync/v2/stream", json=replaces,
                                     headers=headers) as second:
                    assert second.status_code == 200
                    _hello(second, kept)
                    # a commit wakes the victim's long-poll: it answers on its connection
                    pushed = srv.sync(document_id, [change("create", "n1", note())])
                    assert pushed.status_code == 200
                    try:
                        answer = victim.recv(65536)
                    except ConnectionResetError:
                        answer = b"<reset>"
    finally:
        victim.close()
        stop_server(process, srv)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_stream_requests_count_under_their_routes(server):
    """``/metrics`` and the access log name a stream request by its route template, as
    every other route's (``unmatched`` is for paths no route matches)."""
    document_id = server.new_document()
    base = "/sync/v2/stream"
    answers = [server.http.get(base).status_code,  # 405
               server.http.post(base).status_code,  # 401: no token
               server.http.delete(base + "/nope/subscriptions", params={"document_id": document_id},
                                  headers=server.auth(document_id)).status_code]  # 404
    assert answers == [405, 401, 404]
    metrics = server.http.get("/metrics").text
    for route, method, status in ((base, "GET", 405), (base, "POST", 401),
                                  (base + "/{stream_id}/subscriptions", "DELETE", 404)):
        assert f'layersync_http_requests_total{{method="{method}",route="{route}",status="{status}"}}' \
            in metrics, (route, method, status)
