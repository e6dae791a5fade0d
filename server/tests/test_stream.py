"""Protocol version 2, the change stream (docs/protocol.md, server/layersync_server/stream.py),
against real servers on loopback, over raw sockets: what arrives, in which order, on
how many connections.

Most tests use one server of their own (:func:`stream_server`): a short heartbeat, no
JWT leeway (so a token's expiry is seen within a second), and a small per-subscription
queue (so a slow reader overflows it quickly).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from conftest import CORPUS, change, note, start_server, stop_server
from layersync_server.permissions import bare_tombstone

QUEUE_PAGES = 8
STREAM_ENV = {"LAYERSYNC_SERVER_STREAM_HEARTBEAT_S": "2",
              "LAYERSYNC_SERVER_STREAM_QUEUE_PAGES": str(QUEUE_PAGES),
              "LAYERSYNC_SERVER_MAX_STREAM_SUBSCRIPTIONS": "60",
              "LAYERSYNC_SERVER_JWT_LEEWAY_S": "0",
              # Dead-client detection (test_stream_dead_peer.py) would otherwise close the
              # paused reader of test_slow_reader_does_not_stall_others after 2 x heartbeat.
              "LAYERSYNC_SERVER_STREAM_STALL_S": "20"}


class EventStream:
    """``POST /sync/v2/stream`` on a raw socket; a thread parses the chunked SSE body
    into :attr:`events` (``(name, data)``; ``("hb", None)`` for a heartbeat comment,
    ``("<end>", None)`` when the response or the connection ends)."""

    def __init__(self, url: str, token: str, read: bool = True, recv_buffer: int | None = None,
                 body: bytes = b""):
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if recv_buffer is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
        self.sock.settimeout(30)
        self.sock.connect((host, int(port)))
        self.sock.sendall((f"POST /sync/v2/stream HTTP/1.1\r\nHost: {host}\r\n"
                           f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n"
                           f"LayerSync-Protocol: 2\r\nContent-Length: {len(body)}\r\n\r\n").encode()
                          + body)
        self.events: queue.Queue = queue.Queue()
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = b""
        self.stream_id: str | None = None
        self.stream_key: str | None = None  # (hello's: the stream's authority)
        self.reading = threading.Event()
        self.reading.set()
        if read:
            self.start()

    def start(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()
        self.next("hello", 10)

    def pause(self) -> None:
        """Stop reading the socket (a client that does not read)."""
        self.reading.clear()

    def resume(self) -> None:
        self.reading.set()

    def _read(self) -> None:
        try:
            f = self.sock.makefile("rb", buffering=0)
            self.status = int(f.readline().split()[1])
            while (line := f.readline().strip()) != b"":
                name, _, value = line.decode().partition(":")
                self.headers[name.strip().lower()] = value.strip()
            if self.headers.get("transfer-encoding") != "chunked":
                self.body = f.read(int(self.headers.get("content-length", 0)))
                return
            buffer = b""
            while True:
                self.reading.wait()
                size = int(f.readline().strip(), 16)
                if size == 0:
                    return
                while size:
                    chunk = f.read(size)
                    buffer += chunk
                    size -= len(chunk)
                f.read(2)
                while b"\n\n" in buffer:
                    block, buffer = buffer.split(b"\n\n", 1)
                    self._parse(block.decode())
        except (OSError, ValueError, IndexError):
            pass
        finally:
            self.events.put(("<end>", None))

    def _parse(self, block: str) -> None:
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith(":"):
                self.events.put(("hb", None))
            elif line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if name is not None:
            if name == "hello":
                self.stream_id, self.stream_key = data["stream_id"], data["stream_key"]
            self.events.put((name, data))

    def next(self, name: str | None = None, timeout: float = 10, skip=("hb",)):
        """The next event (named ``name`` if given: other names fail), heartbeats skipped."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {name or 'event'} within {timeout} s") from None
            if got[0] in skip:
                continue
            assert name is None or got[0] == name, (name, got)
            return got[1] if name is not None else got

    def quiet(self, seconds: float) -> list:
        """The events (but heartbeats) that arrive within ``seconds``."""
        out, deadline = [], time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                got = self.events.get(timeout=left)
            except queue.Empty:
                break
            if got[0] != "hb":
                out.append(got)
        return out

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


#: ``key=OWN_KEY``: the stream's own key (from its hello); ``key=None`` sends no key header.
OWN_KEY = object()


def stream_target(stream, key=OWN_KEY) -> tuple[str, dict]:
    """The stream id and key header of ``stream`` (an :class:`EventStream`, or an id: then
    no key unless ``key`` is given)."""
    if isinstance(stream, EventStream):
        stream_id, own = stream.stream_id, stream.stream_key
    else:
        stream_id, own = stream, None
    key = own if key is OWN_KEY else key
    return stream_id, ({} if key is None else {"LayerSync-Stream-Key": key})


class Stream:
    """A server plus the v2 requests of the tests."""

    def __init__(self, server):
        self.server = server
        self.http = server.http
        self._since: dict = {}

    def open(self, document_id: str, **kwargs) -> EventStream:
        return EventStream(self.server.url, self.server.token(document_id), **kwargs)

    def subscribe(self, stream, document_id: str, layer: str = "", since: int = 0,
                  epoch=None, token: str | None = None, key=OWN_KEY,
                  **token_args) -> httpx.Response:
        """``POST .../subscriptions`` on ``stream`` (an :class:`EventStream`: with its key;
        an id: with ``key`` if given), with ``token`` or a new JWT of ``token_args``."""
        stream_id, key_header = stream_target(stream, key)
        token = token or self.server.token(document_id, layer, **token_args)
        return self.http.post(f"/sync/v2/stream/{stream_id}/subscriptions",
                              json={"document_id": document_id, "layer": layer, "since": since,
                                    "epoch": epoch},
                              headers={"Authorization": f"Bearer {token}", **key_header})

    def unsubscribe(self, stream, document_id: str, layer: str = "", key=OWN_KEY,
                    token: str | None = None, **token_args) -> httpx.Response:
        stream_id, key_header = stream_target(stream, key)
        token = token or self.server.token(document_id, layer, **token_args)
        return self.http.delete(f"/sync/v2/stream/{stream_id}/subscriptions",
                                params={"document_id": document_id, "layer": layer},
                                headers={"Authorization": f"Bearer {token}", **key_header})

    def push(self, document_id: str, record_id: str, layer: str = "", text: str = "x",
             user_id: str = "alice", **content) -> int:
        key = (document_id, layer)
        response = self.server.sync(document_id, [change("create", record_id, note(text, **content))],
                                    since=self._since.get(key, 0), layer=layer, user_id=user_id)
        assert response.status_code == 200 and response.json()["accepted"], response.text
        self._since[key] = response.json()["revision"]  # (no answer of everything since 0)
        return response.json()["revision"]

    def metric(self, name: str) -> float:
        text = self.http.get("/metrics").text
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith(name + " ") or line.startswith(name + "{"))


@pytest.fixture(scope="module")
def stream_server(tmp_path_factory, keys):
    tmp_path = tmp_path_factory.mktemp("stream")
    process, server = start_server(tmp_path, str(tmp_path / "db.sqlite"), *keys,
                                   env=STREAM_ENV)
    server.process = process
    yield Stream(server)
    stop_server(process, server)


def _records(events) -> list[tuple[str, str, int]]:
    """``(layer, id, revision)`` of every record of the ``changes`` events."""
    return [(data["layer"], r["id"], r["revision"]) for name, data in events if name == "changes"
            for r in data["records"]]


def _sockets_of(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            pass
    return count


def test_info_advertises_the_stream(stream_server):
    body = stream_server.http.get("/sync/v1/info").json()
    assert body["protocol"] == {"min": 1, "max": 2}
    assert body["stream"] == {"path": "/sync/v2/stream", "heartbeat_s": 2, "max_subscriptions": 60}
    assert "stream" in body["capabilities"] and "long-poll" in body["capabilities"]


def test_fifty_layers_on_one_connection(stream_server):
    s = stream_server
    doc = s.server.new_document()
    sockets_before = _sockets_of(s.server.process.pid)
    streams, subscriptions = s.metric("layersync_open_streams"), s.metric("layersync_stream_subscriptions")
    stream = s.open(doc)
    assert stream.status == 200 and stream.headers["content-type"].startswith("text/event-stream")
    layers = [f"layer-{i}" for i in range(50)]
    for layer in layers:
        answer = s.subscribe(stream, doc, layer)
        assert answer.status_code == 200, answer.text
        assert answer.json()["subscribed"] is True and answer.json()["revision"] == 0
    assert s.metric("layersync_open_streams") == streams + 1
    assert s.metric("layersync_stream_subscriptions") == subscriptions + 50
    assert s.metric("layersync_open_long_polls") == 0
    # the stream is the one connection the server holds for this client (the requests
    # above went over the fixture's one keep-alive connection, opened before)
    assert _sockets_of(s.server.process.pid) - sockets_before == 1
    for layer in layers:
        s.push(doc, "r-" + layer, layer)
    got = {}
    while len(got) < 50:
        data = stream.next("changes")
        got[data["layer"]] = data
    for layer in layers:
        data = got[layer]
        assert data["since"] == 0 and data["revision"] == 1 and not data["has_more"]
        assert [r["id"] for r in data["records"]] == ["r-" + layer]
    assert stream.quiet(0.3) == []
    stream.close()


def test_catch_up_then_live_and_heartbeat(stream_server):
    s = stream_server
    doc = s.server.new_document()  # its default layer holds the PDF's 3 annotations
    stream = s.open(doc)
    answer = s.subscribe(stream, doc, "", since=1).json()
    assert answer["revision"] == 3
    first = stream.next("changes")
    assert first["since"] == 1 and [r["revision"] for r in first["records"]] == [2, 3]
    assert first["epoch"] == answer["epoch"] and first["next_since"] == 3
    revision = s.push(doc, "live")
    live = stream.next("changes")
    assert live["since"] == 3 and live["revision"] == revision
    assert [r["id"] for r in live["records"]] == ["live"]
    # a silent stream gets a heartbeat before a client would call it dead (2 * heartbeat_s,
    # heartbeat_s = 2 here): the bound protocol.md promises, not the sweeper's usual timing
    assert stream.events.get(timeout=4) == ("hb", None)
    stream.close()


def test_subscribe_and_unsubscribe_while_changes_flow(stream_server):
    s = stream_server
    doc = s.server.new_document()
    stream = s.open(doc)
    assert s.subscribe(stream, doc, "a").status_code == 200
    stop = threading.Event()
    pushed = {"a": [], "b": []}

    def writer(layer):
        i = 0
        while not stop.is_set():
            pushed[layer].append(s.push(doc, f"{layer}{i}", layer))
            i += 1

    threads = [threading.Thread(target=writer, args=(layer,)) for layer in ("a", "b")]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    b_since = s.server.records(doc, layer="b")["revision"]
    assert s.subscribe(stream, doc, "b", since=b_since).status_code == 200
    time.sleep(0.4)
    assert s.unsubscribe(stream, doc, "a").json() == {"subscribed": False}
    unsubscribed_at = len(pushed["a"])
    time.sleep(0.3)
    stop.set()
    for thread in threads:
        thread.join()
    events = stream.quiet(1.0)
    cursors = {"a": 0, "b": b_since}
    seen = {"a": [], "b": []}
    for name, data in events:
        assert name == "changes", (name, data)
        layer = data["layer"]
        assert data["since"] == cursors[layer], "a page must start at the layer's cursor"
        cursors[layer] = data["next_since"]
        seen[layer] += [r["revision"] for r in data["records"]]
    # b: everything after the revision it subscribed at, once, in order
    assert seen["b"] == [r for r in pushed["b"] if r > b_since] and seen["b"]
    # a: from the start, in order, no duplicate, and nothing after the unsubscribe's answer
    # (protocol.md: pages still queued then are dropped, so fewer may arrive; at most one
    # push committed before the answer had not returned when it was counted)
    assert seen["a"] and seen["a"] == list(range(1, len(seen["a"]) + 1))
    assert len(seen["a"]) <= unsubscribed_at + 1 < len(pushed["a"])
    assert s.unsubscribe(stream, doc, "a").status_code == 404
    stream.close()


def test_expiry_of_one_subscription_ends_it_alone(stream_server):
    s = stream_server
    doc = s.server.new_document()
    subscriptions = s.metric("layersync_stream_subscriptions")
    stream = s.open(doc)
    assert s.subscribe(stream, doc, "short", expires_in_s=2).status_code == 200
    assert s.subscribe(stream, doc, "long").status_code == 200
    s.push(doc, "before", "short")
    assert stream.next("changes")["layer"] == "short"
    data = stream.next("unsubscribed", timeout=5)
    assert data == {"document_id": doc, "layer": "short", "reason": "token_expired"}
    s.push(doc, "after", "short")
    s.push(doc, "other", "long")
    data = stream.next("changes")
    assert data["layer"] == "long" and [r["id"] for r in data["records"]] == ["other"]
    assert stream.quiet(0.3) == []
    assert s.metric("layersync_stream_subscriptions") == subscriptions + 1
    stream.close()


def test_revoked_token_ends_its_subscription(stream_server):
    s = stream_server
    doc = s.server.new_document()
    stream = s.open(doc)
    assert s.subscribe(stream, doc, "x", jti="revoke-me").status_code == 200
    assert s.subscribe(stream, doc, "y").status_code == 200
    assert s.http.post("/api/revoke", json={"jti": "revoke-me"},
                       headers=s.server.admin()).status_code == 200
    assert stream.next("unsubscribed") == {"document_id": doc, "layer": "x",
                                           "reason": "token_revoked"}
    s.push(doc, "still", "y")
    assert stream.next("changes")["layer"] == "y"
    # a revoked token subscribes no more
    assert s.subscribe(stream, doc, "x", jti="revoke-me").status_code == 403
    stream.close()


def test_deleted_layer_ends_with_not_found(stream_server):
    s = stream_server
    doc = s.server.new_document()
    stream = s.open(doc)
    assert s.subscribe(stream, doc, "gone").status_code == 200
    assert s.subscribe(stream, doc, "stays").status_code == 200
    s.push(doc, "r", "gone")
    stream.next("changes")
    deleted = s.http.delete(f"/api/documents/{doc}/layers/gone", headers=s.server.admin())
    assert deleted.status_code in (200, 204), deleted.text
    assert stream.next("unsubscribed") == {"document_id": doc, "layer": "gone",
                                           "reason": "not_found"}
    assert s.subscribe(stream, doc, "gone").status_code == 404
    stream.close()


def test_epoch_mismatch_answers_reset(stream_server):
    s = stream_server
    doc = s.server.new_document()
    subscriptions = s.metric("layersync_stream_subscriptions")
    stream = s.open(doc)
    answer = s.subscribe(stream, doc, "", since=3, epoch="not-this-one")
    assert answer.status_code == 200
    epoch = answer.json()["epoch"]
    assert stream.next("reset") == {"document_id": doc, "layer": "", "epoch": epoch}
    assert s.metric("layersync_stream_subscriptions") == subscriptions
    stream.close()


def test_guest_never_receives_a_private_record(stream_server):
    s = stream_server
    doc = s.server.new_document()
    guest = ["annotations:view:group=public", "annotations:view:self"]
    stream = EventStream(s.server.url, s.server.token(doc, user_id="guest"))  # the guest's own stream
    assert s.subscribe(stream, doc, "p", user_id="guest",
                       collaboration_permissions=guest).status_code == 200
    full = EventStream(s.server.url, s.server.token(doc))
    assert s.subscribe(full, doc, "p").status_code == 200
    response = s.server.sync(doc, [change("create", "secret", note("private")),
                                   {**change("create", "open", note("public")), "group": "public"}],
                             layer="p")
    assert response.status_code == 200, response.text
    got = stream.next("changes")
    # From cursor 0 (nothing applied yet) a record the guest may not view is left out, as in
    # a snapshot: a bare tombstone would only tell it that the record exists.
    assert got["since"] == 0 and [r["id"] for r in got["records"]] == ["open"]
    assert "private" not in json.dumps(got) and "secret" not in json.dumps(got)
    assert got["records"][0]["content"]["text"]["value"] == "public"
    whole = full.next("changes")
    assert {r["id"]: r["content"]["text"]["value"] for r in whole["records"]} == {
        "secret": "private", "open": "public"}
    # Past cursor 0 (a delta): the public note moved to a private group leaves the guest's
    # view as a bare tombstone, so that its copy is dropped.
    base = {r["id"]: r["revision"] for r in whole["records"]}["open"]
    response = s.server.sync(doc, [{**change("update", "open", note("now private"), base=base),
                                    "group": "staff"}], layer="p")
    assert response.status_code == 200, response.text
    moved = stream.next("changes")
    assert moved["since"] > 0 and len(moved["records"]) == 1
    assert moved["records"][0] == bare_tombstone("open", moved["records"][0]["revision"]), \
        "a bare tombstone, nothing else"
    assert "now private" not in json.dumps(moved)
    stream.close()
    full.close()


def test_bad_requests(stream_server):
    s = stream_server
    doc = s.server.new_document()
    stream = s.open(doc)
    sid = stream
    assert s.subscribe("no-such-stream", doc, "x").status_code == 404
    assert s.subscribe("no-such-stream", doc, "x").json()["error"]["code"] == "not_found"
    auth = {**s.server.auth(doc, "x"), "LayerSync-Stream-Key": stream.stream_key}
    url = f"/sync/v2/stream/{stream.stream_id}/subscriptions"
    for body in (b"{", b"[1]", b'{"document_id": 5}', b'{"document_id": "d", "since": -1}',
                 b'{"document_id": "d", "since": "3"}', b'{"document_id": "d", "layer": 3}'):
        answer = s.http.post(url, content=body, headers=auth)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["error"]["code"] == "invalid_request"
    assert s.http.post(url, json={"document_id": doc, "layer": "x"},
                       headers={"LayerSync-Stream-Key": stream.stream_key}).status_code == 401
    assert s.subscribe(sid, doc, "x", token=s.server.token(doc, "other")).status_code == 403
    assert s.subscribe(sid, doc, "x", token=s.server.token(doc, "x", expires_in_s=-5)).status_code == 403
    assert s.subscribe(sid, "doc-missing-" + uuid.uuid4().hex, "x").status_code == 404
    assert s.unsubscribe(sid, doc, "never").status_code == 404
    for i in range(60):
        assert s.subscribe(sid, doc, f"m{i}").status_code == 200
    assert s.subscribe(sid, doc, "m0", since=0).status_code == 200  # a replacement
    too_many = s.subscribe(sid, doc, "m60")
    assert too_many.status_code == 429 and too_many.json()["error"]["code"] == "too_many_subscriptions"
    # opening: no token 401, a bad one 403, a non-JSON body 400
    no_token = s.http.post("/sync/v2/stream")
    assert no_token.status_code == 401
    assert s.http.post("/sync/v2/stream", headers={"Authorization": "Bearer nope"}).status_code == 403
    assert s.http.post("/sync/v2/stream", content=b"nope", headers=auth).status_code == 400
    stream.close()


def test_slow_reader_does_not_stall_others(stream_server):
    s = stream_server
    doc = s.server.new_document()
    big = "x" * 40_000  # each page is ~40 kB: a few fill the socket buffers
    slow = s.open(doc, recv_buffer=4096)
    slow.pause()
    fast = s.open(doc)
    for stream in (slow, fast):
        assert s.subscribe(stream, doc, "busy").status_code == 200
    revisions = []
    # push until the slow reader's queue overflowed (the socket buffers hold a few MB
    # first); the other client gets every page at once all along
    notices = s.metric("layersync_stream_notices")
    while s.metric("layersync_stream_notices") < notices + 1:
        assert len(revisions) < 600, "no notice after 24 MB the client did not read"
        for i in range(10):
            started = time.monotonic()
            revisions.append(s.push(doc, f"big{len(revisions)}", "busy", text=big))
            data = fast.next("changes", timeout=5)
            assert [r["revision"] for r in data["records"]] == [revisions[-1]]
            assert time.monotonic() - started < 2
    for i in range(QUEUE_PAGES * 2):  # (more pages meanwhile: the same one notice)
        revisions.append(s.push(doc, f"more{i}", "busy"))
        assert fast.next("changes")["revision"] == revisions[-1]
    assert s.metric("layersync_stream_notices") == notices + 1
    # the slow reader reads again: pages in order, one notice for what did not fit in
    # its queue, then live pages again from the notice's revision
    slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    slow.resume()
    cursor, noticed = 0, []
    while cursor < revisions[-1]:
        name, data = slow.next(timeout=10)
        if name == "notice":
            noticed.append(data["revision"])
            assert data["revision"] >= cursor
            cursor = data["revision"]  # (the client fetches up to it with v1)
        else:
            assert name == "changes" and data["since"] == cursor, (name, data, cursor)
            cursor = data["next_since"]
    assert len(noticed) == 1, noticed
    last = s.push(doc, "after", "busy")
    data = slow.next("changes")
    assert data["since"] == revisions[-1] and data["revision"] == last
    fast.close()
    slow.close()


def test_kill_9_mid_stream_then_resume_gives_everything_once_and_stop_says_bye(tmp_path, keys):
    db = str(tmp_path / "db.sqlite")
    process, server = start_server(tmp_path, db, *keys, env=STREAM_ENV)
    s = Stream(server)
    doc = server.new_document()
    stream = s.open(doc)
    assert s.subscribe(stream, doc, "k").status_code == 200
    pushed, cursor, seen = [], 0, []
    for i in range(20):
        pushed.append(f"k{i}")
        s.push(doc, f"k{i}", "k")
    while cursor < 20:
        data = stream.next("changes")
        assert data["since"] == cursor
        seen += [r["id"] for r in data["records"]]
        cursor = data["next_since"]
    writer_failed = threading.Event()

    def writer():  # changes keep coming while the server dies
        for i in range(20, 1000):
            try:
                s.push(doc, f"k{i}", "k")
            except (AssertionError, httpx.HTTPError):
                writer_failed.set()
                return
            pushed.append(f"k{i}")

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.3)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    thread.join()
    assert writer_failed.is_set()
    while True:  # what arrived before the connection broke is applied, nothing torn
        name, data = stream.next(timeout=5)
        if name == "<end>":
            break
        assert name == "changes" and data["since"] == cursor
        seen += [r["id"] for r in data["records"]]
        cursor = data["next_since"]
    stream.close()
    server.http.close()
    process, server = start_server(tmp_path, db, *keys, env=STREAM_ENV)
    try:
        s = Stream(server)
        s._since[(doc, "k")] = server.records(doc, layer="k")["revision"]
        pushed.append("after-restart")
        final = s.push(doc, "after-restart", "k")
        stream = s.open(doc)
        assert s.subscribe(stream, doc, "k", since=cursor).status_code == 200
        while cursor < final:
            data = stream.next("changes")
            assert data["since"] == cursor
            seen += [r["id"] for r in data["records"]]
            cursor = data["next_since"]
        committed = [r["id"] for r in server.records(doc, layer="k", limit=1000)["records"]]
        # every committed change once, in order; the push the kill cut may or may not be
        assert seen == committed and len(set(seen)) == len(seen)
        assert set(pushed) - set(seen) <= set(pushed[-2:-1])
        # a clean stop (SIGTERM) ends the stream with bye, at once
        started = time.monotonic()
        stop_server(process, server)
        assert process.returncode == 0
        assert stream.next("bye", timeout=5) == {"reason": "shutdown"}
        assert stream.next(timeout=5) == ("<end>", None)
        assert time.monotonic() - started < 3
        stream.close()
    finally:
        stop_server(process, server)


def test_two_processes_on_postgresql(tmp_path, pg_url, keys):
    first = start_server(tmp_path, pg_url, *keys, env=STREAM_ENV)
    second = start_server(tmp_path, pg_url, *keys, env=STREAM_ENV)
    try:
        a, b = Stream(first[1]), Stream(second[1])
        doc = "pg-stream-" + uuid.uuid4().hex[:8]

        assert a.server.upload((CORPUS / "sample-files-024-annotated_pdf.pdf").read_bytes(),
                               doc).status_code == 200
        on_a, on_b = a.open(doc), b.open(doc)
        for s, stream in ((a, on_a), (b, on_b)):
            assert s.subscribe(stream, doc, "", since=3).status_code == 200
            assert s.subscribe(stream, doc, "r", jti="pg-revoke").status_code == 200
        ids = []
        for i in range(10):
            (a if i % 2 else b).push(doc, f"p{i}")
            a._since = b._since = {**a._since, **b._since}
            ids.append(f"p{i}")
        for stream in (on_a, on_b):
            cursor, seen = 3, []
            while len(seen) < 10:
                data = stream.next("changes")
                assert data["layer"] == "" and data["since"] == cursor
                seen += [r["id"] for r in data["records"]]
                cursor = data["next_since"]
            assert seen == ids
        # a token revoked through process A ends its subscription on process B as well
        assert a.http.post("/api/revoke", json={"jti": "pg-revoke"},
                           headers=a.server.admin()).status_code == 200
        assert on_a.next("unsubscribed", timeout=2)["reason"] == "token_revoked"
        assert on_b.next("unsubscribed", timeout=8)["reason"] == "token_revoked"
        on_a.close()
        on_b.close()
    finally:
        stop_server(*first)
        stop_server(*second)

