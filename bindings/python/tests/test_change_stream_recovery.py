"""Listening on the change stream when the path or the server misbehaves (protocol version 2,
issue 16; the review's findings 1, 3, 4 and 5): a network stall is not taken for buffering and
listening comes back to the stream; a proxy that passes the hello and then buffers is detected
by the subscriptions' acknowledgements; layers past the server's subscription limit long-poll
on their own and move to the stream when it has room, and so does a layer whose subscription
gets 404 while the stream is open (a proxy strips its key; another server process got it); a cursor ahead of a server restored from
a backup re-bases on the stream as on a long-poll; a stream whose path went silent while the
server still sees it acknowledged is closed on the server when the client replaces it (the
review's last finding). Uses stallproxy.py and bufferingproxy.py."""
from __future__ import annotations

import dataclasses
import json
import shutil
import time
from typing import Callable

import pytest

from bufferingproxy import PASS_ALL, BufferingProxy
from faultproxy import Request
from conftest import WAIT_S, corpus_pdf
from test_change_stream import (behind_stall_proxy, free_port, listen_through, local_ids, metric, open_layers, own_server,  # noqa: F401
                                post_server_note, wait_until)


def test_a_network_stall_does_not_move_listening_to_long_poll_for_good(make_client, own_server):
    """A silent network (a blackholing path) is detected and the stream reopened; the reopened
    stream's hello cannot arrive while the path is still silent, but neither can the probe's
    answer, so that is no buffering: the client reopens the stream, and once the path is back
    it listens on the stream again (not on long-polls for the rest of its life)."""
    doc_id = "stall"
    srv, proxy = behind_stall_proxy(own_server, doc_id)
    try:
        client, docs = listen_through(make_client, proxy.url, srv, doc_id, ["a", "b"])
        wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2, "the subscriptions")
        assert client.listening_transport == "stream"
        accepted = proxy.accepted
        proxy.stalled = True  # the network goes silent
        wait_until(lambda: proxy.accepted > accepted, "the client to see the dead peer and reconnect", timeout=30)
        time.sleep(7)  # the network stays out a little longer than the 5 s hello deadline
        proxy.stalled = False  # ... and comes back
        record_id = post_server_note(srv, doc_id, "b", "after the outage")
        wait_until(lambda: record_id in local_ids(docs[1]), "the change after the outage", timeout=40)
        wait_until(lambda: client.listening_transport == "stream", "listening back on the stream", timeout=40)
    finally:
        proxy.close()


def test_the_server_closes_the_stream_a_client_replaced_after_its_path_went_silent(make_client, own_server):
    """A middlebox stalls the client's flows while its kernel keeps acknowledging what the
    server sends (heartbeats fit the buffers): the server sees nothing wrong on TCP and would
    hold the stream and its subscriptions for good. The client sees no byte for twice the
    heartbeat and opens a new stream (a new flow, which passes) naming the old one: by the time
    listening works again the server holds one stream for the client, not two, and one
    subscription per layer, and changes reach the client."""
    heartbeat_s = 2  # the client takes it from the server info: dead after 4 s of silence
    doc_id = "deadpeer"
    srv, proxy = behind_stall_proxy(own_server, doc_id, heartbeat_s)
    try:
        client, docs = listen_through(make_client, proxy.url, srv, doc_id, ["a", "b"])
        wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2, "the subscriptions")
        assert metric(srv, "layersync_open_streams") == 1
        proxy.stall_existing()  # the client's flows go silent; new ones pass
        stalled_at = time.monotonic()
        during = post_server_note(srv, doc_id, "a", "while the old stream is silent")
        # dead after 2 x heartbeat of silence (libcurl averages its speed over up to 5 s), a
        # backoff of at most 1 s, then a new stream and its subscriptions
        wait_until(lambda: during in local_ids(docs[0]), "the change made while the path was silent",
                   timeout=2 * heartbeat_s + 5 + 1 + 10)
        assert (metric(srv, "layersync_open_streams"), metric(srv, "layersync_stream_subscriptions")) == (1, 2), \
            f"the stream the client gave up {time.monotonic() - stalled_at:.0f} s ago is still open on the server"
        after = post_server_note(srv, doc_id, "b", "on the new stream")
        wait_until(lambda: after in local_ids(docs[1]), "a change made after the new stream opened")
        assert client.listening_transport == "stream"
    finally:
        proxy.close()


def test_a_cursor_ahead_of_the_server_is_noticed_on_the_stream(make_client, own_server, tmp_path):
    """The server's database is restored from a file backup (same epochs, older revisions):
    a v1 long-poll sees revision < since and re-downloads (rebaseIfCursorIsAheadOfServer);
    on the stream the subscribe answer's revision < since is refused by the same rule and the
    layer re-bases the same way, then subscribes again from the new cursor and gets the
    changes made after the restore."""
    port = free_port()
    work = tmp_path / "restored"
    srv = own_server(port=port, workdir=work)
    doc_id = "ahead"
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    post_server_note(srv, doc_id, "a", "first")
    srv.stop()
    shutil.copy(work / "s.sqlite", tmp_path / "backup.sqlite")  # the backup
    srv.start()
    client = make_client(server_url=srv.url)
    client.wait_validated(timeout=WAIT_S)
    (doc,) = open_layers(client, srv, doc_id, ["a"])
    later = [post_server_note(srv, doc_id, "a", f"later {i}") for i in range(3)]
    doc.start_listening()
    wait_until(lambda: set(later) <= local_ids(doc), "the client at the newest revision")
    doc.stop_listening()
    srv.stop()
    for suffix in ("", "-wal", "-shm"):
        (work / ("s.sqlite" + suffix)).unlink(missing_ok=True)
    shutil.copy(tmp_path / "backup.sqlite", work / "s.sqlite")  # restored
    srv.start()
    doc.start_listening()
    time.sleep(2)
    fresh = post_server_note(srv, doc_id, "a", "after the restore")
    wait_until(lambda: fresh in local_ids(doc), "the change made after the restore", timeout=60)
    assert local_ids(doc) == set(srv.annotations(doc_id, "a"))


def test_layers_past_the_servers_max_subscriptions_still_receive_changes(make_client, own_server, capfd):
    """A client listening on more layers than the server's max_subscriptions gets 429 for the
    extra ones: those long-poll on their own (said on stderr and in the layer's
    listening_transport, the client stays on the stream) and are subscribed again when a
    place on the stream frees up."""
    srv = own_server(env={"LAYERSYNC_SERVER_MAX_STREAM_SUBSCRIPTIONS": "3"})
    doc_id = "many"
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    client = make_client(server_url=srv.url)
    client.wait_validated(timeout=WAIT_S)
    layers = ["m0", "m1", "m2", "m3"]
    docs = open_layers(client, srv, doc_id, layers)
    for doc in docs:
        doc.start_listening()
    time.sleep(2)
    ids = {layer: post_server_note(srv, doc_id, layer, "x") for layer in layers}
    for layer, doc in zip(layers, docs):
        wait_until(lambda d=doc, l=layer: ids[l] in local_ids(d), f"layer {layer} to receive its change", timeout=20)
    assert client.listening_transport == "stream"
    refused = [doc for doc in docs if doc.listening_transport == "long-poll"]
    assert len(refused) == 1, [doc.listening_transport for doc in docs]
    assert "uses its own long-poll" in capfd.readouterr().err
    assert metric(srv, "layersync_stream_subscriptions") == 3
    # a place on the stream frees up: the refused layer takes it
    next(doc for doc in docs if doc is not refused[0]).stop_listening()
    wait_until(lambda: refused[0].listening_transport == "stream", "the refused layer on the stream")
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 3, "its subscription")
    record_id = post_server_note(srv, doc_id, refused[0].layer_name, "on the stream now")
    wait_until(lambda: record_id in local_ids(refused[0]), "the change on the stream")
    wait_until(lambda: metric(srv, "layersync_open_long_polls") == 0, "its long-poll to end")


def strip_stream_key(stripped: Callable[[str], bool]) -> Callable[[Request], Request]:
    """A ``BufferingProxy`` rewrite: a subscribe request of a layer for which ``stripped(layer)``
    is true loses its ``LayerSync-Stream-Key`` header (a proxy that strips headers it does not
    know); everything else passes as is."""
    def rewrite(request: Request) -> Request:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/subscriptions"):
            return request
        if not stripped(json.loads(request.body).get("layer")):
            return request
        headers = {k: v for k, v in request.headers.items() if k.lower() != "layersync-stream-key"}
        return dataclasses.replace(request, headers=headers)
    return rewrite


@pytest.mark.parametrize("stripped", [("b",), ("a", "b")], ids=["one-layer", "every-layer"])
def test_a_subscription_refused_404_on_the_open_stream_long_polls_on_its_own(make_client, own_server, capfd, stripped):
    """A subscribe request answered 404 while the client's stream is open and reads heartbeats,
    for a layer that exists: it did not reach the stream as the server holds it (another server
    process got it; here a proxy strips its LayerSync-Stream-Key, for layer b or for every
    layer). That layer long-polls on its own, as one refused with 429 (said on stderr and in
    its listening_transport); the other layers stay on the stream. (It was never subscribed
    and got no live change, with nothing reported.) When the stream is reopened the layer tries
    it again and, its requests passing now, moves to it (its changes come on the stream, no
    more long-polls)."""
    srv = own_server()
    doc_id = "nokey"
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    layers = ["a", "b"]
    stripping = set(stripped)
    proxy = BufferingProxy(srv.url, pass_first=PASS_ALL, rewrite=strip_stream_key(lambda layer: layer in stripping))
    try:
        client, docs = listen_through(make_client, proxy.url, srv, doc_id, layers)
        wait_until(lambda: metric(srv, "layersync_open_streams") == 1, "the stream")
        ids = {layer: post_server_note(srv, doc_id, layer, "live") for layer in layers}
        for layer, doc in zip(layers, docs):
            wait_until(lambda d=doc, l=layer: ids[l] in local_ids(d), f"layer {layer} to receive its change", timeout=20)
        assert client.listening_transport == "stream"
        assert [doc.listening_transport for doc in docs] == ["long-poll" if layer in stripped else "stream" for layer in layers]
        wait_until(lambda: metric(srv, "layersync_open_long_polls") == len(stripped), "the stripped layers' long-polls on the server")
        assert (metric(srv, "layersync_open_streams"), metric(srv, "layersync_stream_subscriptions")) == (1, len(layers) - len(stripped))
        err = capfd.readouterr().err
        for layer in layers:
            said = f"{doc_id}/{layer} uses its own long-poll: the server answers 404" in err
            assert said == (layer in stripped), err
        # The key passes again; a new stream (the old one's connection cut) takes the layers back.
        stripping.clear()
        proxy.cut_all()
        wait_until(lambda: [doc.listening_transport for doc in docs] == ["stream"] * len(layers), "every layer on the new stream",
                   timeout=30)
        wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == len(layers), "every subscription on the new stream")
        # (the server holds a cancelled long-poll's proxied request until its wait ends)
        long_polls = proxy.count("/changes")
        ids = {layer: post_server_note(srv, doc_id, layer, "on the stream now") for layer in layers}
        for layer, doc in zip(layers, docs):
            wait_until(lambda d=doc, l=layer: ids[l] in local_ids(d), f"layer {layer}'s change on the stream")
        assert proxy.count("/changes") == long_polls, "a change came by long-poll"
        assert client.listening_transport == "stream"
    finally:
        proxy.close()


def test_a_proxy_that_passes_the_hello_then_buffers_is_detected(make_client, server, uploaded):
    """A proxy that passes the answer's head and hello and then holds the body in 64 KiB lumps:
    the subscriptions' acknowledgements (`subscribed` events) do not arrive while the server
    answers the probe, so the client falls back to long-poll and gets the change."""
    doc_id = uploaded()
    proxy = BufferingProxy(server.url, pass_first=300)  # head and hello pass, then 64 KiB lumps
    try:
        client, docs = listen_through(make_client, proxy.url, server, doc_id, ["u", "v"])
        time.sleep(3)
        record_id = post_server_note(server, doc_id, "u", "through the proxy")
        deadline = time.monotonic() + 45
        while record_id not in local_ids(docs[0]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert record_id in local_ids(docs[0]), (
            f"no change within 45 s; transport {client.listening_transport}, "
            f"{proxy.count('POST /sync/v2/stream HTTP') + proxy.count('POST /sync/v2/stream')} stream requests")
        assert client.listening_transport == "long-poll"
    finally:
        proxy.close()
