"""``layersync-server`` with TCP_NODELAY on its accepted connections, for an A/B run
(``bench/run.py --server-nodelay``) of the cause found by scenarios 3 and 6.

Cause: ``layersync_server.server.bind`` makes its listening socket with
``socket.socket(family, SOCK_STREAM)``, so ``sock.proto`` is 0; asyncio's ``_set_nodelay``
only sets TCP_NODELAY when ``proto == IPPROTO_TCP``, so every accepted connection keeps
Nagle's algorithm. uvicorn writes a response's headers and body in two ``send`` calls; the
body then waits for the client's delayed ACK (about 40 ms on Linux). The fix in the server
is one argument: ``socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)``.

With ``LAYERSYNC_BENCH_WRITE_LOCK=1`` it also applies the second fix found by scenario 6:
SQLite write transactions are serialised by an in-process lock before ``BEGIN IMMEDIATE``,
so concurrent syncs in the thread pool queue on a lock that wakes them at once instead of
in SQLite's busy handler, which polls with sleeps of 1..100 ms.

This wrapper applies exactly that and runs the unchanged CLI.
"""
import os
import socket
import sys

import layersync_server.server as server
from layersync_server.cli import main


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


server.bind = bind

if os.environ.get("LAYERSYNC_BENCH_WRITE_LOCK") == "1":
    import contextlib
    import threading

    from layersync_server.storage.sqlite import SqliteStorage

    _write_lock = threading.Lock()
    _transaction = SqliteStorage.transaction

    @contextlib.contextmanager
    def transaction(self, write: bool):
        if not write:
            with _transaction(self, write) as conn:
                yield conn
            return
        with _write_lock, _transaction(self, write) as conn:
            yield conn

    SqliteStorage.transaction = transaction

if __name__ == "__main__":
    sys.exit(main())
