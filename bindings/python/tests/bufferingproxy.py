"""A loopback HTTP proxy that buffers answers, as some corporate proxies and misconfigured
reverse proxies do: it forwards each request at once, but holds the server's answer (status
line, headers and body) until 64 KiB of it have arrived or the server has finished it, so a
streamed answer (the change stream of protocol version 2) reaches the client only in 64 KiB
lumps, or never. Ordinary answers pass whole.

Each request gets its own upstream connection with ``Connection: close``, so "the end of the
answer" is the server closing that connection. One thread per connection, loopback only,
stopped by :meth:`close`. ``requests`` lists the request lines seen. Unlike FaultProxy
it forwards the change stream's requests too (it is the buffering box in front of a v2 server).

With ``pass_first=PASS_ALL`` it buffers nothing, and ``rewrite`` changes requests on their way
(a proxy that strips headers it does not know, or a load balancer that sends a request to
another server process): the box in front of a v2 server that passes the stream but not every
subscription.
"""
from __future__ import annotations

import socket
import sys
from typing import Callable

from faultproxy import FaultProxy, Request, _read_request

HOLD_BYTES = 64 * 1024
#: ``pass_first`` of a proxy that passes every answer as it arrives (buffers nothing)
PASS_ALL = sys.maxsize


class BufferingProxy(FaultProxy):
    """FaultProxy's listener and bookkeeping (``close``, ``cut_all``), with its own answer
    path: every request forwarded, every answer held as above."""

    def __init__(self, upstream_url: str, pass_first: int = 0,
                 rewrite: Callable[[Request], Request] | None = None) -> None:
        """``pass_first``: bytes of each answer passed at once before the buffering starts
        (a proxy that lets the head and the stream's ``hello`` through, then holds).
        ``rewrite(request)``: the request forwarded instead of ``request`` (``None``: as is)."""
        self.requests: list[str] = []
        self.pass_first = pass_first
        self.rewrite = rewrite
        super().__init__(upstream_url)

    def count(self, fragment: str) -> int:  # type: ignore[override]
        with self.lock:
            return sum(1 for line in self.requests if fragment in line)

    def _serve(self, conn: socket.socket) -> None:
        upstream = None
        try:
            request = _read_request(conn)
            if request is None:
                return
            with self.lock:
                self.requests.append(f"{request.method} {request.path}")
                rewrite = self.rewrite
            if rewrite is not None:
                request = rewrite(request)
            upstream = socket.create_connection(self.upstream, timeout=None)
            with self.lock:
                self.connections.add(upstream)
            headers = {k: v for k, v in request.headers.items()
                       if k.lower() not in ("connection", "keep-alive", "content-length")}
            head = [f"{request.method} {request.path} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items()]
            head += [f"Content-Length: {len(request.body)}", "Connection: close"]
            upstream.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + request.body)
            held, passed = b"", 0
            while True:
                chunk = upstream.recv(65536)
                if not chunk:
                    break
                if passed < self.pass_first:
                    conn.sendall(chunk)
                    passed += len(chunk)
                    continue
                held += chunk
                if len(held) >= HOLD_BYTES:
                    conn.sendall(held)
                    held = b""
            conn.sendall(held)
        except OSError:
            pass
        finally:
            for s in (upstream, conn):
                if s is not None:
                    with self.lock:
                        self.connections.discard(s)
                    try:
                        s.close()
                    except OSError:
                        pass
