"""The delegate's ``is_network_available`` reachability hint (docs/threading.md §8).

The client talks to the real server through a small TCP proxy that counts the connections
the client opens and either forwards them or resets them at once (a transport failure:
no HTTP answer), so "no request was made" is a count that did not move.
"""
from __future__ import annotations

import socket
import struct
import threading
from urllib.parse import urlparse

import pytest

import layersync

from conftest import WAIT_S


class CountingProxy:
    """Loopback TCP proxy in front of ``upstream_url``: ``mode`` "forward" or "reset"."""

    def __init__(self, upstream_url: str) -> None:
        self.upstream_port = urlparse(upstream_url).port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        self.mode = "forward"
        self.accepted = 0
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                mode = self.mode
            if mode == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                conn.close()
                continue
            with self.lock:
                self.connections += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def set_mode(self, mode: str) -> None:
        """"reset" also cuts the open forwarded connections (kept-alive ones, long-polls)."""
        with self.lock:
            self.mode = mode
            if mode == "reset":
                for s in self.connections:
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def count(self) -> int:
        with self.lock:
            return self.accepted

    def close(self) -> None:
        self.set_mode("reset")
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            for s in self.connections:
                s.close()


class Hint:
    """``is_network_available``: answers ``answer``; counts calls and records their threads."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.answer = True
        self.calls = 0
        self.true_answers = 0
        self.threads: set[int] = set()
        self.document: layersync.Document | None = None

    def __call__(self) -> bool:
        if self.document is not None:
            self.document.has_unsynced_changes  # the hint may call the API
        with self.cond:
            self.calls += 1
            self.true_answers += self.answer
            self.threads.add(threading.get_ident())
            self.cond.notify_all()
            return self.answer

    def set(self, answer: bool) -> None:
        with self.cond:
            self.answer = answer

    def wait(self, predicate) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self), timeout=WAIT_S), "the hint was not asked in time"


@pytest.fixture
def proxy(server):
    p = CountingProxy(server.url)
    yield p
    p.close()


def open_document(make_client, server, uploaded, url, delegate):
    client = make_client(server_url=url, delegate=delegate)
    client.wait_validated(timeout=WAIT_S)
    doc = client.document_for_jwt(server.mint_token(uploaded(), user_id="alice"))
    doc.download(wait=True, timeout=WAIT_S)
    return client, doc


def note(text: str) -> dict:
    return {"type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 32, 32], "icon": "comment",
            "text": {"format": "plain", "value": text}}


def test_hint_false_stops_requests_until_it_says_true(make_client, server, uploaded, proxy):
    hint = Hint()
    callback_threads: set[int] = set()
    delegate = {"is_network_available": hint,
                "did_fail_sync": lambda doc, error: callback_threads.add(threading.get_ident())}
    client, doc = open_document(make_client, server, uploaded, proxy.url, delegate)
    hint.document = doc
    assert hint.calls == 0  # every request was answered: never asked

    hint.set(False)
    proxy.set_mode("reset")
    created = doc.create_annotation(note("offline 📴"))
    before = proxy.count()
    with pytest.raises(layersync.RequestFailedError) as failure:
        doc.sync(wait=True, timeout=WAIT_S)
    assert "no request was made" not in failure.value.message and proxy.count() > before
    assert hint.calls >= 1  # asked before that failure was reported
    tried = proxy.count()
    with pytest.raises(layersync.RequestFailedError) as failure:
        doc.sync(wait=True, timeout=WAIT_S)
    assert "no request was made" in failure.value.message
    calls = hint.calls
    hint.wait(lambda h: h.calls > calls)  # asked again on its own while it says false
    assert proxy.count() == tried and doc.has_unsynced_changes

    since = client.mark()
    proxy.set_mode("forward")
    hint.set(True)
    client.wait_for("did_finish_sync", since=since, document=doc, timeout=WAIT_S)  # no sync call
    assert not doc.has_unsynced_changes and created["id"] in server.annotations(doc.id)
    assert hint.threads == callback_threads and threading.get_ident() not in hint.threads


def test_explicit_false_wins_over_a_hint_saying_true(make_client, server, uploaded, proxy):
    hint = Hint()
    client, doc = open_document(make_client, server, uploaded, proxy.url, {"is_network_available": hint})
    hint.set(False)
    proxy.set_mode("reset")
    created = doc.create_annotation(note("explicitly offline"))
    with pytest.raises(layersync.RequestFailedError):
        doc.sync(wait=True, timeout=WAIT_S)
    client.set_network_available(False)
    proxy.set_mode("forward")
    true_answers = hint.true_answers
    hint.set(True)
    hint.wait(lambda h: h.true_answers > true_answers)  # the periodic ask
    tried = proxy.count()
    for _ in range(2):
        with pytest.raises(layersync.RequestFailedError) as failure:
            doc.sync(wait=True, timeout=WAIT_S)
        assert "no request was made" in failure.value.message
    assert proxy.count() == tried and doc.has_unsynced_changes
    since = client.mark()
    client.set_network_available(True)
    client.wait_for("did_finish_sync", since=since, document=doc, timeout=WAIT_S)
    assert created["id"] in server.annotations(doc.id)


def test_without_a_hint_every_sync_tries_the_network(make_client, server, uploaded, proxy):
    client, doc = open_document(make_client, server, uploaded, proxy.url, None)
    proxy.set_mode("reset")
    doc.create_annotation(note("no hint"))
    for _ in range(3):
        before = proxy.count()
        with pytest.raises(layersync.RequestFailedError):
            doc.sync(wait=True, timeout=WAIT_S)
        assert proxy.count() > before
    proxy.set_mode("forward")
    doc.sync(wait=True, timeout=WAIT_S)
    assert not doc.has_unsynced_changes
