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
        assert s.subscribe(stream.stream_id, doc, "busy").status_code == 200
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
    the server sees no stall) opens a new stream naming the old one, ``{"replaces": id}``:
    the server closes the old one at once, its subscriptions with it. The same id from
    another user, or an id the server does not know, changes nothing and answers alike."""
    s = dead_peer_server
    url = s.server.url
    doc = s.server.new_document()

    def open_as(user_id: str, replaces=None) -> EventStream:
        body = json.dumps({} if replaces is None else {"replaces": replaces}).encode()
        stream = EventStream(url, s.server.token(doc, user_id=user_id), body=body)
        assert stream.status == 200, stream.status
        return stream

    def counts() -> tuple[float, float]:
        return s.metric("layersync_open_streams"), s.metric("layersync_stream_subscriptions")

    assert _wait(lambda: counts() == (0, 0), 10) is not None, f"streams of earlier tests: {counts()}"
    first = open_as("alice")
    assert s.subscribe(first.stream_id, doc, "r", user_id="alice").status_code == 200
    assert counts() == (1, 1)
    # bob names alice's stream, then an id nobody has: alice's stream stays, gets changes
    others = [open_as("bob", replaces=first.stream_id), open_as("alice", replaces="no-such-stream")]
    assert counts() == (3, 1)
    kept = s.push(doc, "kept", "r")
    assert first.next("changes")["revision"] == kept
    for stream in others:
        stream.close()
    assert _wait(lambda: counts() == (1, 1), 10) is not None, counts()
    # a malformed replaces is a bad request (the old stream is not touched)
    with s.http.stream("POST", "/sync/v2/stream", json={"replaces": 5},
                       headers=s.server.auth(doc, user_id="alice")) as bad:  # (a 200 would not end)
        assert bad.status_code == 400, bad.status_code
        assert json.loads(bad.read())["error"]["code"] == "invalid_request"
    assert counts() == (1, 1)
    # alice's own new stream replaces it: closed by the time its hello arrives, its socket reset
    second = open_as("alice", replaces=first.stream_id)
    assert counts() == (1, 0)
    assert first.next("<end>", timeout=5) is None
    assert s.subscribe(first.stream_id, doc, "r", user_id="alice").status_code == 404
    assert s.subscribe(second.stream_id, doc, "r", since=kept, user_id="alice").status_code == 200
    revision = s.push(doc, "after", "r")
    assert second.next("changes")["revision"] == revision
    second.close()
    first.close()


def _hello(stream: EventStream) -> str:
    """Read a stream that is not read by a thread up to its hello; its id."""
    buffer = b""
    while b'"stream_id":"' not in buffer or b"\n\n" not in buffer.split(b'"stream_id":"', 1)[1]:
        data = stream.sock.recv(1)
        assert data, "closed before hello"
        buffer += data
    stream.stream_id = buffer.split(b'"stream_id":"', 1)[1].split(b'"', 1)[0].decode()
    return stream.stream_id


def test_watch_peer_sets_keepalive():
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server_side, _ = listener.accept()
    try:
        watch_peer(server_side, 15, 30)
        assert server_side.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert server_side.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 15
        assert server_side.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == KEEPALIVE_PROBES
        # idle 15 s, then 3 probes 5 s apart: ended 30 s after the last byte acknowledged
        assert server_side.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 5
        # (no TCP_USER_TIMEOUT: it ends slow readers whose window is below a segment)
        assert server_side.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 0
    finally:
        for sock in (client, server_side, listener):
            sock.close()


def _tcp_info(retransmits: int, last_ack_recv_ms: int, bytes_acked: int) -> bytes:
    info = bytearray(128)
    info[2] = retransmits
    info[56:60] = last_ack_recv_ms.to_bytes(4, sys.byteorder)
    info[120:128] = bytes_acked.to_bytes(8, sys.byteorder)
    return bytes(info)


def test_a_cut_path_is_told_from_a_slow_reader_by_what_the_peer_acknowledges():
    """A cut path can not be made on loopback; what the sweeper decides from the
    connection's TCP_INFO can: retransmitting with no acknowledgement for ``stall_s -
    heartbeat_s`` is a cut path; a window probe answered (a slow reader) or an idle
    connection is not."""
    assert TcpState(_tcp_info(3, 16_000, 10)).unreachable(15)
    assert not TcpState(_tcp_info(3, 200, 10)).unreachable(15)  # probes answered
    assert not TcpState(_tcp_info(0, 60_000, 10)).unreachable(15)  # idle, nothing in flight
    assert TcpState(_tcp_info(0, 0, 123_456)).bytes_acked == 123_456
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server_side, _ = listener.accept()
    try:
        server_side.sendall(b"x" * 1000)
        assert client.recv(1000)
        time.sleep(0.1)
        state = tcp_state(server_side)
        assert state is not None and state.bytes_acked >= 1000 and state.retransmits == 0
    finally:
        for sock in (client, server_side, listener):
            sock.close()


def _server_side_timer(server_port: int, client_port: int) -> tuple[int, float] | None:
    """``(timer kind, seconds until it fires)`` of the server's socket of a connection, from
    ``/proc/net/tcp`` (kind 2: keepalive or another socket timer; 0: none)."""
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
            kind, when = fields[5].split(":")
            return int(kind, 16), int(when, 16) / 100  # (clock ticks, USER_HZ 100)
    return None


def test_the_servers_side_of_a_stream_has_keepalive(dead_peer_server):
    s = dead_peer_server
    doc = s.server.new_document()
    stream = s.open(doc)
    server_port = int(s.server.url.rsplit(":", 1)[1])
    client_port = stream.sock.getsockname()[1]
    seen = set()
    for _ in range(20):  # (a heartbeat in flight shows the retransmission timer for a moment)
        timer = _server_side_timer(server_port, client_port)
        assert timer is not None, "the stream's connection is not in /proc/net/tcp"
        seen.add(timer)
        if timer[0] == 2 and timer[1] <= HEARTBEAT_S + 0.5:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"no keepalive timer of {HEARTBEAT_S} s on the server's socket: {seen}")
    stream.close()
