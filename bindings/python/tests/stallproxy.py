"""A raw TCP relay on loopback with two switches. ``stalled = True`` stops relaying bytes in
both directions on every connection (old and new ones are accepted and held open), as a
network path that silently blackholes traffic; ``stalled = False`` resumes relaying.
:meth:`StallProxy.stall_existing` stalls the connections open at that moment for good while
new ones relay: a middlebox that lost those flows (a NAT rebinding, a stalled load balancer)
but whose kernel still acknowledges what the server sends; nothing of them passes any more,
not even their end."""
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
        #: connections numbered up to this one (1, 2, ... in accept order) are stalled for good
        self.stalled_up_to = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def stall_existing(self) -> None:
        """Stall every connection accepted so far, for good; later ones relay."""
        with self.lock:
            self.stalled_up_to = self.accepted

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                number = self.accepted
                self.socks.append(conn)
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _lost(self, number: int) -> bool:
        return number <= self.stalled_up_to and not self.closed

    def _serve(self, conn: socket.socket, number: int) -> None:
        while (self.stalled or self._lost(number)) and not self.closed:
            time.sleep(0.05)
        try:
            up = socket.create_connection(self.upstream)
        except OSError:
            conn.close()
            return
        with self.lock:
            self.socks.append(up)
        threading.Thread(target=self._pipe, args=(conn, up, number), daemon=True).start()
        self._pipe(up, conn, number)

    def _pipe(self, src: socket.socket, dst: socket.socket, number: int) -> None:
        try:
            while not self.closed:
                data = src.recv(65536)
                if not data:
                    break
                while (self.stalled or self._lost(number)) and not self.closed:
                    time.sleep(0.05)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            while self._lost(number):  # a lost flow's end does not pass either
                time.sleep(0.05)
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
