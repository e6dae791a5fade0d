"""A raw TCP relay on loopback with a switch: ``stalled = True`` stops relaying bytes in both
directions on every connection (old and new ones are accepted and held open), as a network
path that silently blackholes traffic; ``stalled = False`` resumes relaying."""
from __future__ import annotations

import socket
import threading
import time


class StallProxy:
    def __init__(self, upstream_url: str) -> None:
        host, port = upstream_url.removeprefix("http://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stalled = False
        self.closed = False
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                self.socks.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        while self.stalled and not self.closed:
            time.sleep(0.05)
        try:
            up = socket.create_connection(self.upstream)
        except OSError:
            conn.close()
            return
        with self.lock:
            self.socks.append(up)
        threading.Thread(target=self._pipe, args=(conn, up), daemon=True).start()
        self._pipe(up, conn)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.closed:
                data = src.recv(65536)
                if not data:
                    break
                while self.stalled and not self.closed:
                    time.sleep(0.05)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        with self.lock:
            for s in self.socks:
                try:
                    s.close()
                except OSError:
                    pass
