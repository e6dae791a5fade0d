"""Listening on the change stream when the path or the server misbehaves (protocol version 2,
issue 16; the review's findings 1, 3, 4 and 5): a network stall is not taken for buffering and
listening comes back to the stream; a proxy that passes the hello and then buffers is detected
by the subscriptions' acknowledgements; layers past the server's subscription limit long-poll
on their own and move to the stream when it has room; a cursor ahead of a server restored from
a backup re-bases on the stream as on a long-poll; a stream whose path went silent while the
server still sees it acknowledged is closed on the server when the client replaces it (the
review's last finding). Uses stallproxy.py and bufferingproxy.py."""
from __future__ import annotations

import shutil
import time

from bufferingproxy import BufferingProxy
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
