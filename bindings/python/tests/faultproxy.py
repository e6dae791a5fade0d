"""A fault-injecting and answer-mutating HTTP proxy on loopback, in front of the real server.

The Python counterpart of ``Tests/LayerSyncCoreTests/FaultProxy.swift`` (and a sibling of
``test_network_hint.py``'s ``CountingProxy``, which only forwards or resets TCP): it reads each
HTTP/1.1 request the client sends, asks ``rule(request)`` what to do with it, and answers the
client with ``Connection: close`` (so every request is its own connection and a fault never
leaks into the next request). Used by the fuzz suite of server answers (test_answer_fuzz.py)
and the convergence test (test_convergence.py).

Actions a rule returns (:class:`Action`):

- ``FORWARD``: the server's answer, unchanged.
- ``Action.mutate(fn)``: the server's whole answer is read, ``fn(status, headers, body)``
  returns the body sent on (a garbled answer), with an honest ``Content-Length``.
- ``Action.lie_length(delta)``: the real body with ``Content-Length`` off by ``delta`` bytes
  (longer: the client waits for bytes that never come until the connection closes).
- ``RESET``: the connection is reset before the request reaches the server.
- ``DROP_REPLY``: the request reaches the server (which commits it), the answer is lost.
- ``Action.delay(s)``: forwarded after ``s`` seconds.
- ``Action.stall(s)``: nothing for ``s`` seconds, then a reset (a stalled connection).
- ``Action.status(code)``: the proxy answers itself with that status and an error envelope.

The proxy speaks protocol version 1 only: it answers the change stream's requests
(``/sync/v2/stream``, protocol version 2) with 404, as a server without the stream would, so
a client behind it listens with per-layer long-polls (the answers these suites garble); the
stream's own faults are tested in test_change_stream.py.

Bounded: one thread per connection, everything on 127.0.0.1, stopped by :meth:`close`.
"""
from __future__ import annotations

import http.client
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlparse


@dataclass(frozen=True)
class Request:
    """A request as the proxy saw it."""
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def endpoint(self) -> str:
        """What the request is, by the part of the protocol it belongs to: ``info``, ``pdf``,
        ``snapshot`` (records since=0), ``records`` (delta pages), ``changes`` (long-poll),
        ``sync``, ``deleted``, ``history``, ``attachment``, ``revive`` or ``other``."""
        path = self.path.split("?")[0]
        if path.endswith("/info"):
            return "info"
        if path.endswith("/pdf"):
            return "pdf"
        if "/attachments/" in path:
            return "attachment"
        if path.endswith("/sync"):
            return "sync"
        if path.endswith("/changes"):
            return "changes"
        if path.endswith("/deleted"):
            return "deleted"
        if path.endswith("/history"):
            return "history"
        if path.endswith("/rollback") or path.endswith("/restore"):
            return "revive"
        if path.endswith("/records"):
            query = self.path.partition("?")[2]
            return "snapshot" if "since=0" in query.split("&") or not query else "records"
        return "other"


@dataclass(frozen=True)
class Action:
    kind: str
    seconds: float = 0.0
    code: int = 0
    delta: int = 0
    change: Callable[[int, dict[str, str], bytes], bytes] | None = field(default=None, compare=False)

    @staticmethod
    def mutate(change: Callable[[int, dict[str, str], bytes], bytes]) -> "Action":
        return Action("mutate", change=change)

    @staticmethod
    def lie_length(delta: int) -> "Action":
        return Action("lie_length", delta=delta)

    @staticmethod
    def delay(seconds: float) -> "Action":
        return Action("delay", seconds=seconds)

    @staticmethod
    def stall(seconds: float) -> "Action":
        return Action("stall", seconds=seconds)

    @staticmethod
    def status(code: int) -> "Action":
        return Action("status", code=code)


FORWARD = Action("forward")
RESET = Action("reset")
DROP_REPLY = Action("drop_reply")

_REASONS = {200: "OK", 201: "Created", 206: "Partial Content", 304: "Not Modified"}


class FaultProxy:
    """Loopback HTTP proxy in front of ``upstream_url``; ``rule`` decides per request."""

    def __init__(self, upstream_url: str, rule: Callable[[Request], Action] | None = None) -> None:
        parsed = urlparse(upstream_url)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self._rule: Callable[[Request], Action] = rule or (lambda request: FORWARD)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.log: list[tuple[str, str]] = []  # (endpoint, action kind)
        self.connections: set[socket.socket] = set()
        self.closed = False
        threading.Thread(target=self._accept_loop, daemon=True, name="faultproxy-accept").start()

    # -- control ------------------------------------------------------------------------

    def set_rule(self, rule: Callable[[Request], Action] | None) -> None:
        with self.lock:
            self._rule = rule or (lambda request: FORWARD)

    def set_upstream(self, upstream_url: str) -> None:
        """Points the proxy at another server address (a restarted server's new port)."""
        parsed = urlparse(upstream_url)
        with self.lock:
            self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)

    def cut_all(self) -> None:
        """Resets every open connection (long-polls parked in the proxy included)."""
        with self.lock:
            connections = list(self.connections)
        for conn in connections:
            _reset(conn)

    def count(self, endpoint: str | None = None) -> int:
        with self.lock:
            return sum(1 for e, _ in self.log if endpoint is None or e == endpoint)

    def close(self) -> None:
        self.closed = True
        try:
            self.listener.close()
        except OSError:
            pass
        self.cut_all()

    # -- plumbing -----------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="faultproxy-conn").start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            request = _read_request(conn)
            if request is None:
                return
            if request.path.startswith("/sync/v2/"):
                with self.lock:
                    self.log.append(("stream", "status"))
                self._act(conn, request, Action.status(404))
                return
            with self.lock:
                rule = self._rule
            try:
                action = rule(request)
            except Exception:  # a rule's bug must not hang the client
                action = RESET
            with self.lock:
                self.log.append((request.endpoint, action.kind))
            self._act(conn, request, action)
        except OSError:
            pass
        finally:
            with self.lock:
                self.connections.discard(conn)
            try:
                conn.close()
            except OSError:
                pass

    def _act(self, conn: socket.socket, request: Request, action: Action) -> None:
        if action.kind == "reset":
            _reset(conn)
            return
        if action.kind == "stall":
            time.sleep(action.seconds)
            _reset(conn)
            return
        if action.kind == "status":
            body = json.dumps({"error": {"code": "injected", "message": f"injected {action.code}"}}).encode()
            _send(conn, action.code, {"Content-Type": "application/json"}, body)
            return
        if action.kind == "delay":
            time.sleep(action.seconds)
        status, headers, body = self._forward(request)
        if action.kind == "drop_reply":
            _reset(conn)
            return
        length = len(body)
        if action.kind == "mutate" and action.change is not None:
            body = action.change(status, headers, body)
            length = len(body)
        elif action.kind == "lie_length":
            length = max(0, len(body) + action.delta)
        _send(conn, status, headers, body, content_length=length)

    def _forward(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            address = self.upstream
        upstream = http.client.HTTPConnection(*address, timeout=120)
        try:
            headers = {k: v for k, v in request.headers.items()
                       if k.lower() not in ("connection", "keep-alive", "content-length", "transfer-encoding")}
            upstream.request(request.method, request.path, body=request.body or None, headers=headers)
            response = upstream.getresponse()
            body = response.read()
            kept = {k: v for k, v in response.getheaders()
                    if k.lower() not in ("connection", "keep-alive", "content-length", "transfer-encoding")}
            return response.status, kept, body
        finally:
            upstream.close()


def _read_request(conn: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
        if len(data) > 1 << 20:
            return None
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip()] = value.strip()
    length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), "0") or 0)
    if any(k.lower() == "expect" for k in headers):
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        headers = {k: v for k, v in headers.items() if k.lower() != "expect"}
    body = rest
    while len(body) < length:
        chunk = conn.recv(min(1 << 20, length - len(body)))
        if not chunk:
            return None
        body += chunk
    return Request(method, path, headers, body[:length])


def _send(conn: socket.socket, status: int, headers: dict[str, str], body: bytes,
          content_length: int | None = None) -> None:
    reason = _REASONS.get(status, "Status")
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += [f"Content-Length: {len(body) if content_length is None else content_length}", "Connection: close"]
    conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    try:
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _reset(conn: socket.socket) -> None:
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
    except OSError:
        pass
