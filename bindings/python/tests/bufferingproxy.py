"""A loopback HTTP proxy that buffers answers, as some corporate proxies and misconfigured
reverse proxies do: it forwards each request at once, but holds the server's answer (status
line, headers and body) until 64 KiB of it have arrived or the server has finished it, so a
streamed answer (the change stream of protocol version 2) reaches the client only in 64 KiB
lumps, or never. Ordinary answers pass whole.

Each request gets its own upstream connection with ``Connection: close``, so "the end of the
answer" is the server closing that connection. One thread per connection, loopback only,
stopped by :meth:`close`. ``requests`` lists the request lines seen.
"""
from __future__ import annotations

import socket
import threading
from urllib.parse import urlparse

from faultproxy import _read_request

HOLD_BYTES = 64 * 1024


class BufferingProxy:
    def __init__(self, upstream_url: str) -> None:
        parsed = urlparse(upstream_url)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        self.requests: list[str] = []
        self.sockets: set[socket.socket] = set()
        self.closed = False
        threading.Thread(target=self._accept_loop, daemon=True, name="bufferingproxy").start()

    def count(self, fragment: str) -> int:
        with self.lock:
            return sum(1 for line in self.requests if fragment in line)

    def close(self) -> None:
        self.closed = True
        try:
            self.listener.close()
        except OSError:
            pass
        with self.lock:
            sockets = list(self.sockets)
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def _accept_loop(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="bufferingproxy-conn").start()

    def _track(self, s: socket.socket, add: bool) -> None:
        with self.lock:
            (self.sockets.add if add else self.sockets.discard)(s)

    def _serve(self, conn: socket.socket) -> None:
        upstream = None
        self._track(conn, True)
        try:
            request = _read_request(conn)
            if request is None:
                return
            with self.lock:
                self.requests.append(f"{request.method} {request.path}")
            upstream = socket.create_connection(self.upstream, timeout=None)
            self._track(upstream, True)
            headers = {k: v for k, v in request.headers.items()
                       if k.lower() not in ("connection", "keep-alive", "content-length")}
            head = [f"{request.method} {request.path} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items()]
            head += [f"Content-Length: {len(request.body)}", "Connection: close"]
            upstream.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + request.body)
            held = b""
            while True:
                chunk = upstream.recv(65536)
                if not chunk:
                    break
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
                    self._track(s, False)
                    try:
                        s.close()
                    except OSError:
                        pass
