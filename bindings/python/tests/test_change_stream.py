"""Listening on the change stream (protocol version 2, issue 16), through the real library
and the real server on loopback: one stream connection and one listener thread per client
however many layers it listens on; subscriptions added and removed while changes flow; one
expired JWT among several ends that layer's listening alone; a server killed mid-stream and
restarted loses and duplicates nothing; a buffering proxy, or a server that does not offer the
stream, makes the client fall back to per-layer long-polls by itself (and say so)."""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import layersync
from layersync.devserver import ReferenceServer

from bufferingproxy import PASS_ALL, BufferingProxy
from procstat import established_connections, threads
from stallproxy import StallProxy
from conftest import REPO, WAIT_S, corpus_pdf

SERVER_COMMAND = [str(REPO / ".venv" / "bin" / "layersync-server")]


def note(text: str) -> dict:
    return {"v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [20, 20, 24, 24],
            "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z",
            "icon": "comment", "text": {"format": "plain", "value": text}}


def metric(server: ReferenceServer, name: str) -> float:
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))


def wait_until(condition, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def post_server_note(server: ReferenceServer, doc_id: str, layer: str, text: str) -> str:
    where = f"/layers/{urllib.parse.quote(layer, safe='')}" if layer else ""
    body = server.admin_request(f"/api/documents/{doc_id}{where}/annotations",
                                method="POST", json_body={"content": note(text)})
    return json.loads(body)["data"]["annotation_id"]


def received_ids(client: layersync.Client, doc, since: int) -> list[str]:
    ids: list[str] = []
    for e in client.events(since=since, name="did_receive_changes", document=doc):
        ids += e.args[0].get("created", []) + e.args[0].get("updated", [])
    return ids


def local_ids(doc) -> set[str]:
    return {a["id"] for a in doc.list_annotations()}


@pytest.fixture
def own_server(tmp_path: Path):
    """``own_server(env=..., port=...) -> ReferenceServer``: a server of the test's own
    (stopped at teardown), for the cases that restart it or need its settings."""
    servers: list[ReferenceServer] = []

    def start(env: dict[str, str] | None = None, port: int | None = None, workdir: Path | None = None) -> ReferenceServer:
        extra = ["--port", str(port)] if port else []
        srv = ReferenceServer(workdir or tmp_path / f"server{len(servers)}", command=SERVER_COMMAND, env=env, extra_args=extra)
        srv.start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop()


def open_layers(client: layersync.Client, server: ReferenceServer, doc_id: str, layers: list[str], user_id: str = "alice"):
    docs = []
    for layer in layers:
        doc = client.document_for_jwt(server.mint_token(doc_id, layer=layer, user_id=user_id))
        doc.download(wait=True, timeout=WAIT_S)
        docs.append(doc)
    return docs


def behind_stall_proxy(own_server, doc_id: str, heartbeat_s: float = 2) -> tuple[ReferenceServer, StallProxy]:
    """A server of the test's own with ``heartbeat_s`` (the client then finds a stream dead
    after twice that of silence), ``doc_id`` uploaded, and a :class:`StallProxy` in front
    of it (the caller closes it): (server, proxy)."""
    srv = own_server(env={"LAYERSYNC_SERVER_STREAM_HEARTBEAT_S": str(heartbeat_s)})
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    return srv, StallProxy(srv.url)


def listen_through(make_client, proxy_url: str, server: ReferenceServer, doc_id: str, layers: list[str]):
    """A validated client on ``proxy_url`` listening on ``layers`` of ``doc_id``: (client, docs)."""
    client = make_client(server_url=proxy_url)
    client.wait_validated(timeout=WAIT_S)
    docs = open_layers(client, server, doc_id, layers)
    for doc in docs:
        doc.start_listening()
    return client, docs


def test_fifty_layers_share_one_stream_connection_and_one_listener_thread(make_client, server, uploaded):
    doc_id = uploaded()
    port = urllib.parse.urlparse(server.url).port
    client = make_client()
    client.wait_validated(timeout=WAIT_S)
    layers = [f"l{i}" for i in range(50)]
    docs = open_layers(client, server, doc_id, layers)
    streams_before = metric(server, "layersync_open_streams")
    subscriptions_before = metric(server, "layersync_stream_subscriptions")
    time.sleep(1)  # the downloads' threads settle
    threads_before = threads()

    for doc in docs:
        doc.start_listening()
    wait_until(lambda: metric(server, "layersync_stream_subscriptions") == subscriptions_before + 50, "50 subscriptions")
    assert client.listening_transport == "stream"
    # One stream on the server for the 50 layers ...
    assert metric(server, "layersync_open_streams") == streams_before + 1
    # ... and, once the server closed the idle keep-alive connections of the downloads and
    # subscriptions (5 s), one connection held by this process.
    wait_until(lambda: established_connections(port) == 1, "only the stream connection to be left", timeout=20)
    threads_listening = threads()
    assert threads_listening - threads_before <= 3, (threads_before, threads_listening)

    # Changes on several layers arrive through it.
    since = client.mark()
    created = {i: post_server_note(server, doc_id, layers[i], f"on {layers[i]}") for i in (0, 17, 49)}
    for i, record_id in created.items():
        client.wait_for("did_receive_changes", since=since, document=docs[i], timeout=WAIT_S,
                        predicate=lambda e, r=record_id: r in e.args[0].get("created", []))
        assert docs[i].get_annotation(record_id)["text"]["value"] == f"on {layers[i]}"
    assert established_connections(port) <= 2  # the stream (and at most a fresh fetch)
    assert metric(server, "layersync_open_streams") == streams_before + 1
    assert threads() - threads_before <= 3

    for doc in docs:
        doc.stop_listening()
    wait_until(lambda: metric(server, "layersync_open_streams") == streams_before, "the stream to close with the last layer")
    assert metric(server, "layersync_stream_subscriptions") == subscriptions_before


def test_start_and_stop_listening_while_changes_flow(make_client, server, uploaded):
    doc_id = uploaded()
    layers = ["a", "b", "c"]
    client = make_client()
    client.wait_validated(timeout=WAIT_S)
    docs = dict(zip(layers, open_layers(client, server, doc_id, layers)))
    for doc in docs.values():
        doc.start_listening()

    stop = threading.Event()
    written: dict[str, list[str]] = {layer: [] for layer in layers}

    def writer() -> None:
        n = 0
        while not stop.is_set():
            layer = layers[n % 3]
            written[layer].append(post_server_note(server, doc_id, layer, f"{layer}-{n}"))
            n += 1
            time.sleep(0.005)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for _ in range(6):  # "b" goes off and on while all three layers change
            time.sleep(0.3)
            docs["b"].stop_listening()
            stopped_at = client.mark()
            time.sleep(0.3)
            # stopped: nothing arrives for b (an event already queued at the stop may land)
            late = [e for e in client.events(since=stopped_at, name="did_receive_changes", document=docs["b"])]
            assert len(late) <= 1, late
            docs["b"].start_listening()
    finally:
        stop.set()
        thread.join(timeout=WAIT_S)
    for layer, doc in docs.items():
        wait_until(lambda d=doc, l=layer: local_ids(d) >= set(written[l]), f"layer {layer} to hold every server change")
        assert local_ids(doc) == set(server.annotations(doc_id, layer)), layer
    assert client.listening_transport == "stream"


def test_one_expired_jwt_among_several_stops_that_layer_alone(make_client, own_server, tmp_path):
    srv = own_server(env={"LAYERSYNC_SERVER_JWT_LEEWAY_S": "0"})
    doc_id = "expiry"
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    client = make_client(server_url=srv.url)
    client.wait_validated(timeout=WAIT_S)
    short = client.document_for_jwt(srv.mint_token(doc_id, layer="short", user_id="alice", expires_in_s=4))
    short.download(wait=True, timeout=WAIT_S)
    others = open_layers(client, srv, doc_id, ["x", "y"])
    since = client.mark()
    for doc in [short, *others]:
        doc.start_listening()

    failed = client.wait_for("did_fail_authentication", since=since, document=short, timeout=WAIT_S)
    assert isinstance(failed.args[0], layersync.AccessDeniedError), failed.args
    # its subscription ended alone (the server ends it when the JWT's exp passes)
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2, "the expired layer's subscription to end")
    assert metric(srv, "layersync_open_streams") == 1
    # the other layers go on receiving
    after = client.mark()
    for doc in others:
        record_id = post_server_note(srv, doc_id, doc.layer_name, "still here")
        client.wait_for("did_receive_changes", since=after, document=doc, timeout=WAIT_S,
                        predicate=lambda e, r=record_id: r in e.args[0].get("created", []))
    missed = post_server_note(srv, doc_id, "short", "while expired")
    time.sleep(1.0)
    assert missed not in local_ids(short)
    assert [e.name for e in client.events(since=since, document=short) if e.name == "did_fail_authentication"] \
        == ["did_fail_authentication"]  # once

    # a new token resumes it, from where it was
    short.reauthenticate(srv.mint_token(doc_id, layer="short", user_id="alice"), wait=True, timeout=WAIT_S)
    wait_until(lambda: missed in local_ids(short), "the reauthenticated layer to catch up")
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 3, "the layer to subscribe again")
    assert client.listening_transport == "stream"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_killed_mid_stream_and_restarted_loses_and_duplicates_nothing(make_client, own_server, tmp_path):
    port = free_port()
    srv = own_server(port=port, workdir=tmp_path / "restarted")
    doc_id = "restart"
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    listener = make_client(server_url=srv.url)
    listener.wait_validated(timeout=WAIT_S)
    layers = ["p", "q"]
    docs = dict(zip(layers, open_layers(listener, srv, doc_id, layers)))
    since = listener.mark()
    for doc in docs.values():
        doc.start_listening()
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2, "the subscriptions")

    before = {layer: [post_server_note(srv, doc_id, layer, f"before {i}") for i in range(5)] for layer in layers}
    for layer, doc in docs.items():
        wait_until(lambda d=doc, l=layer: local_ids(d) >= set(before[l]), "the changes before the kill")
    srv.process.kill()  # kill -9: no bye, the stream just breaks
    srv.process.wait(timeout=WAIT_S)
    srv.process = None
    time.sleep(1.0)
    srv.start()  # same port, same database
    assert srv.url.endswith(f":{port}")
    after = {layer: [post_server_note(srv, doc_id, layer, f"after {i}") for i in range(5)] for layer in layers}
    for layer, doc in docs.items():
        wait_until(lambda d=doc, l=layer: local_ids(d) >= set(before[l] + after[l]), f"layer {layer} after the restart")
        assert local_ids(doc) == set(srv.annotations(doc_id, layer))
        ids = received_ids(listener, doc, since)
        assert len(ids) == len(set(ids)), f"a change arrived twice: {ids}"
    assert metric(srv, "layersync_open_streams") == 1
    assert listener.listening_transport == "stream"


def test_a_buffering_proxy_makes_the_client_fall_back_to_long_poll(make_client, server, uploaded, capfd):
    doc_id = uploaded()
    proxy = BufferingProxy(server.url)
    try:
        client, docs = listen_through(make_client, proxy.url, server, doc_id, ["u", "v"])
        started = time.monotonic()
        wait_until(lambda: client.listening_transport == "long-poll", "the fallback to long-poll", timeout=15)
        assert time.monotonic() - started < 8  # the 5 s hello deadline, not the 30 s stall
        since = client.mark()
        for doc in docs:
            record_id = post_server_note(server, doc_id, doc.layer_name, "through the buffering proxy")
            client.wait_for("did_receive_changes", since=since, document=doc, timeout=WAIT_S,
                            predicate=lambda e, r=record_id: r in e.args[0].get("created", []))
        assert proxy.count("POST /sync/v2/stream") == 1  # one try, then long-polls
        assert proxy.count("/changes?") >= 2
        assert "falls back to per-layer long-poll" in capfd.readouterr().err
    finally:
        proxy.close()


def test_after_a_fallback_the_network_coming_back_tries_the_stream_at_once(make_client, server, uploaded, capfd):
    """The host says the network is back (set_network_available) after a fallback: the path
    may not be the one that buffered, so the stream is tried now, not 5 minutes later."""
    doc_id = uploaded()
    proxy = BufferingProxy(server.url)
    try:
        client, docs = listen_through(make_client, proxy.url, server, doc_id, ["u", "v"])
        wait_until(lambda: client.listening_transport == "long-poll", "the fallback to long-poll", timeout=15)
        proxy.pass_first = PASS_ALL  # the new path buffers nothing
        client.set_network_available(False)
        client.set_network_available(True)
        wait_until(lambda: client.listening_transport == "stream", "the stream after the network came back",
                   timeout=15)
        assert proxy.requests.count("POST /sync/v2/stream") == 2  # the fallen-back try, the one now
        since = client.mark()
        for doc in docs:
            record_id = post_server_note(server, doc_id, doc.layer_name, "on the stream again")
            client.wait_for("did_receive_changes", since=since, document=doc, timeout=WAIT_S,
                            predicate=lambda e, r=record_id: r in e.args[0].get("created", []))
            assert doc.listening_transport == "stream"
    finally:
        proxy.close()


def test_a_server_without_the_stream_is_listened_to_with_long_polls(make_client, own_server, capfd):
    srv = own_server(env={"LAYERSYNC_SERVER_PROTOCOL_MAX": "1"})
    doc_id = "v1only"
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    client = make_client(server_url=srv.url)
    assert client.wait_validated(timeout=WAIT_S)["protocol"]["max"] == 1
    (doc,) = open_layers(client, srv, doc_id, [""])
    since = client.mark()
    doc.start_listening()
    wait_until(lambda: client.listening_transport == "long-poll", "the long-poll fallback", timeout=5)
    wait_until(lambda: metric(srv, "layersync_open_long_polls") == 1, "the long-poll to park")
    record_id = post_server_note(srv, doc_id, "", "v1")
    client.wait_for("did_receive_changes", since=since, document=doc, timeout=WAIT_S,
                    predicate=lambda e: record_id in e.args[0].get("created", []))
    assert metric(srv, "layersync_open_streams") == 0
    assert "does not offer the change stream" in capfd.readouterr().err


def test_subscribing_with_an_old_epoch_resets_the_layer_and_listening_goes_on(make_client, server, uploaded):
    doc_id = uploaded()
    client = make_client()
    client.wait_validated(timeout=WAIT_S)
    (doc,) = open_layers(client, server, doc_id, ["recreated"])
    # The layer is recreated while nobody listens: the client still holds the old epoch.
    server.admin_request(f"/api/documents/{doc_id}/layers/recreated", method="DELETE")
    server.admin_request(f"/api/documents/{doc_id}/layers", method="POST", json_body={"name": "recreated"})
    fresh = post_server_note(server, doc_id, "recreated", "in the new epoch")
    since = client.mark()
    doc.start_listening()  # subscribes with the old epoch: the server answers with `reset`
    client.wait_for("did_reset_layer", since=since, document=doc, timeout=WAIT_S)
    wait_until(lambda: fresh in local_ids(doc), "the new epoch's snapshot")
    # ... and the layer is subscribed again from the new snapshot's cursor
    later = post_server_note(server, doc_id, "recreated", "live in the new epoch")
    client.wait_for("did_receive_changes", since=since, document=doc, timeout=WAIT_S,
                    predicate=lambda e: later in e.args[0].get("created", []))
    assert local_ids(doc) == set(server.annotations(doc_id, "recreated"))
    assert client.listening_transport == "stream"
