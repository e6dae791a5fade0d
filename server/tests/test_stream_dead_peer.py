"""The change stream's dead-peer detection on the server (issue 16: both ends see a dead
peer within 30 s; docs/protocol.md, "Protocol version 2: the change stream"): a client
that stops reading is closed within ``stream_stall_s`` (twice the heartbeat by default)
once the peer acknowledges nothing of what is buffered, a client that reads slowly is
not, and every stream's socket has TCP keepalive set from the heartbeat (stream.py).

A cut path itself can not be made on loopback without packet filtering: what the server
decides from a connection's TCP_INFO is checked on made-up values and a real socket, and
the keepalive on the server's own side of a stream (its timer in ``/proc/net/tcp``)."""

from __future__ import annotations

import json
import socket
import sys
import time

import pytest

from conftest import start_server, stop_server
from layersync_server.stream import KEEPALIVE_PROBES, TcpState, tcp_state, watch_peer
from test_stream import QUEUE_PAGES, EventStream, Stream

HEARTBEAT_S = 2
STALL_S = 2 * HEARTBEAT_S  # the default: stream_stall_s unset
SWEEP_S = 1  # stream.SWEEP_S: how often the server looks


@pytest.fixture(scope="module")
def dead_peer_server(tmp_path_factory, keys):
    tmp_path = tmp_path_factory.mktemp("deadpeer")
    process, server = start_server(tmp_path, str(tmp_path / "db.sqlite"), *keys, env={
        "LAYERSYNC_SERVER_STREAM_HEARTBEAT_S": str(HEARTBEAT_S),
        "LAYERSYNC_SERVER_STREAM_QUEUE_PAGES": str(QUEUE_PAGES)})
    server.process = process
    yield Stream(server)
    stop_server(process, server)


def _wait(predicate, timeout: float) -> float | None:
    """Seconds until ``predicate()`` held (polled every 0.1 s), ``None`` past ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.1)
    return None


def test_a_client_that_stops_reading_is_closed_within_twice_the_heartbeat(dead_peer_server):
    """A client whose socket buffers are full and stay full (it reads nothing; the layer
    then goes quiet) is closed after ``stream_stall_s`` without the write buffer moving,
    not the 30 s a fixed bound gave; a client that reads on the same layer stays."""
    s = dead_peer_server
    doc = s.server.new_document()
    big = "x" * 40_000
    stalled = s.open(doc, recv_buffer=4096)
    reading = s.open(doc)
    for stream in (stalled, reading):
        assert s.subscribe(stream, doc, "busy").status_code == 200
    stalled.pause()
    assert s.metric("layersync_open_streams") == 2
    # changes flow until the stalled client's queue overflowed: its socket and the server's
    # write buffer are full then
    notices = s.metric("layersync_stream_notices")
    pushed = 0
    while s.metric("layersync_stream_notices") < notices + 1:
        assert pushed < 600, "no notice after 24 MB the client did not read"
        for _ in range(10):
            s.push(doc, f"big{pushed}", "busy", text=big)
            pushed += 1
            reading.next("changes", timeout=5)
    quiet_since = time.monotonic()  # the layer is quiet from now on
    closed_after = _wait(lambda: s.metric("layersync_open_streams") == 1, STALL_S + 10)
    assert closed_after is not None, "the stream of a client that reads nothing stayed open"
    assert time.monotonic() - quiet_since <= STALL_S + SWEEP_S + 3, \
        f"closed {time.monotonic() - quiet_since:.1f} s after the layer went quiet"
    # the client's end of the connection is gone too (reset: its unread bytes are dropped)
    stalled.resume()
    deadline = time.monotonic() + 10
    while (name := stalled.next(None, timeout=max(0.1, deadline - time.monotonic()))[0]) != "<end>":
        assert name in ("changes", "notice"), name
    # the reader was not touched: it still gets live changes
    revision = s.push(doc, "after", "busy")
    assert reading.next("changes")["revision"] == revision
    assert s.metric("layersync_open_streams") == 1
    reading.close()
    stalled.close()


def test_a_client_that_reads_slowly_is_not_closed(dead_peer_server):
    """Progress is what counts, not an empty buffer: a client that reads a little at a
    time (the server's buffers stay full all along) keeps its stream past
    ``stream_stall_s``."""
    s = dead_peer_server
    doc = s.server.new_document()
    slow = s.open(doc, recv_buffer=1 << 18, read=False)
    assert s.subscribe(_hello(slow), doc, "trickle").status_code == 200
    for i in range(60):
        s.push(doc, f"t{i}", "trickle", text="y" * 40_000)  # 2.4 MB: longer than the test reads
    started, received = time.monotonic(), 0
    while time.monotonic() - started < STALL_S * 2 + SWEEP_S:
        while (got := len(slow.sock.recv(65536))) and received + got < 1 << 16:
            received += got
        assert got, "the server closed a client that reads"
        received = 0
        time.sleep(0.5)
    assert s.metric("layersync_open_streams") == 1
    slow.close()
    assert _wait(lambda: s.metric("layersync_open_streams") == 0, 10) is not None


def test_a_stream_that_names_the_one_it_replaces_closes_that_one(dead_peer_server):
    """A client whose path went silent (a middlebox that acknowledges but delivers nothing:
    the server sees no stall) opens a new stream naming the old one with its key,
    ``{"replaces": id, "key": stream_key}``: the server closes the old one at once, its
    subscriptions with it, whoever's JWT opens the new one (the key is the authority). The
    id with no key or a wrong one, or a key with an id the server does not know, changes
    nothing and answers alike."""
    s = dead_peer_server
    url = s.server.url
    doc = s.server.new_document()

    def open_as(user_id: str, replaces=None, key=None) -> EventStream:
        body = {} if replaces is None else {"replaces": replaces}
        if key is not None:
            body["key"] = key
        stream = EventStream(url, s.server.token(doc, user_id=user_id), body=json.dumps(body).encode())
        assert stream.status == 200, stream.status
        return stream

    def counts() -> tuple[float, float]:
        return s.metric("layersync_open_streams"), s.metric("layersync_stream_subscriptions")

    assert _wait(lambda: counts() == (0, 0), 10) is not None, f"streams of earlier tests: {counts()}"
    first = open_as("alice")
    assert s.subscribe(first, doc, "r", user_id="alice").status_code == 200
    assert counts() == (1, 1)
    # its id alone, with a wrong key (of the same user, or another stream's), or its key with
    # an id nobody has: alice's stream stays, gets changes
    others = [open_as("alice", replaces=first.stream_id),
              open_as("alice", replaces=first.stream_id, key=first.stream_key[::-1])]
    others.append(open_as("bob", replaces=first.stream_id, key=others[0].stream_key))
    others.append(open_as("alice", replaces="no-such-stream", key=first.stream_key))
    assert counts() == (5, 1)
    kept = s.push(doc, "kept", "r")
    assert first.next("changes")["revision"] == kept
    for stream in others:
        stream.close()
    assert _wait(lambda: counts() == (1, 1), 10) is not None, counts()
    # a malformed replaces or key is a bad request (the old stream is not touched)
    for body in ({"replaces": 5}, {"replaces": first.stream_id, "key": 5}):
        with s.http.stream("POST", "/sync/v2/stream", json=body,
                           headers=s.server.auth(doc, user_id="alice")) as bad:  # (a 200 would not end)
            assert bad.status_code == 400, bad.status_code
            assert json.loads(bad.read())["error"]["code"] == "invalid_request"
    assert counts() == (1, 1)
    # the new stream with the old one's key replaces it, opened with a JWT of another user
    # as well: closed by the time its hello arrives, its socket reset
    second = open_as("bob", replaces=first.stream_id, key=first.stream_key)
    assert counts() == (1, 0)
    assert first.next("<end>", timeout=5) is None
    assert s.subscribe(first, doc, "r", user_id="alice").status_code == 404
    assert s.subscribe(second, doc, "r", since=kept, user_id="alice").status_code == 200
    revision = s.push(doc, "after", "r")
    assert second.next("changes")["revision"] == revision
    second.close()
    first.close()


def _hello(stream: EventStream) -> EventStream:
    """Read a stream that is not read by a thread up to its hello (its id and key set)."""
    buffer = b""
    while b"event: hello\n" not in buffer or b"\n\n" not in buffer.split(b"event: hello\n", 1)[1]:
        data = stream.sock.recv(1)
        assert data, "closed before hello"
        buffer += data
    block = buffer.split(b"event: hello\n", 1)[1].split(b"\n\n", 1)[0]
    hello = json.loads(block.split(b"data: ", 1)[1])
    stream.stream_id, stream.stream_key = hello["stream_id"], hello["stream_key"]
    return stream
