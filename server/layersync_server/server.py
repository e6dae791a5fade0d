"""Run the app with uvicorn on an already-bound socket and announce readiness.

Binding the socket ourselves makes ``port=0`` work: the OS picks a free port, and
once uvicorn is accepting connections the server prints exactly one line to stdout::

    layersync-server listening on http://HOST:PORT

(flushed) and, if asked, writes ``PORT`` to a file. Test harnesses wait for that line.
"""

from __future__ import annotations

import gc
import os
import socket
import sys
from pathlib import Path

import uvicorn
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from layersync_server.app import create_app
from layersync_server.observability import configure_logging
from layersync_server.settings import Settings

READY_PREFIX = "layersync-server listening on "


class _AnnouncingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, url: str, port: int, port_file: Path | None):
        super().__init__(config)
        self._url, self._port, self._port_file = url, port, port_file

    async def startup(self, sockets=None):
        await super().startup(sockets=sockets)
        if self.should_exit:  # startup failed
            return
        if self._port_file is not None:
            tmp = self._port_file.with_name(self._port_file.name + ".tmp")
            tmp.write_text(f"{self._port}\n")
            os.replace(tmp, self._port_file)
        print(READY_PREFIX + self._url, flush=True)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port=0`` = any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must be IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections
    # only for sockets that say so, and without it Nagle's algorithm holds each response
    # body (sent after its headers) for the peer's delayed ACK, about 40 ms per long-poll
    # (measured by bench/ scenario 3: p50 47.6 ms -> 5.0 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 0,
          port_file: Path | None = None, log_level: str = "warning") -> None:
    """Serve until SIGINT/SIGTERM. Blocks."""
    sock = bind(host, port)
    actual_port = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    configure_logging(log_level)
    # "auto" = uvloop and httptools (dependencies of the server) when importable, else
    # asyncio and h11: a request round trip is ~0.1 ms shorter with them.
    app = create_app(settings)
    # uvicorn's X-Forwarded-For/-Proto handling (FORWARDED_ALLOW_IPS, default loopback)
    # moves inside the app, behind the hot routes' shortcut: those two routes read
    # neither the client address nor the scheme, and skip one more layer.
    config = uvicorn.Config(app, log_level=log_level, lifespan="on",
                            loop="auto", http="auto", proxy_headers=False,
                            timeout_graceful_shutdown=2, access_log=False, log_config=None)
    app.serve_others_through(ProxyHeadersMiddleware, trusted_hosts=config.forwarded_allow_ips)
    server = _AnnouncingServer(config, f"http://{url_host}:{actual_port}", actual_port, port_file)
    # Thousands of held long-polls keep many objects alive; with the default thresholds
    # (700, 10, 10) the collector's full passes over them showed up as 100+ ms stalls in
    # bench scenario 6's p99. Collect less often and leave start-up objects out of it.
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    sys.stdout.flush()
