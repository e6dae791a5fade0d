"""Run the app with uvicorn on an already-bound socket, announce readiness, and stop
cleanly on SIGTERM/SIGINT.

Binding the socket ourselves makes ``port=0`` work: the OS picks a free port, and
once uvicorn is accepting connections the server prints exactly one line to stdout::

    layersync-server listening on http://HOST:PORT

(flushed) and, if asked, writes ``PORT`` to a file. Test harnesses wait for that line.

Stopping (SIGTERM from systemd or Kubernetes, SIGINT from a terminal), in order:

1. the listening socket closes: new connections are refused (uvicorn notices the
   signal within 0.1 s);
2. every parked long-poll answers at once, 200 with the page it read before waiting
   (no records, the layer's revision): what it would have answered had its ``wait``
   run out, so a client just polls again, elsewhere or later
   (:meth:`LayerSyncApp.drain <layersync_server.app.LayerSyncApp.drain>`);
3. idle keep-alive connections close; a connection with a request in flight closes
   after that request's answer, which says ``Connection: close``;
4. requests in flight (a sync commit, an upload) get up to ``shutdown_timeout_s``
   (:class:`~layersync_server.settings.Settings`, default 5 s) to finish and answer;
   past that uvicorn cancels them (a cancelled request answers 500, or its connection
   just closes) and logs it;
5. the app's lifespan shutdown stops the PostgreSQL change feed (its LISTEN
   connection closes) and closes the storage (SQLite: every connection, the last one
   checkpointing the WAL into the database file; PostgreSQL: the pool);
6. :func:`serve` returns ``True`` and ``layersync-server serve`` exits with status 0.

How long that takes (the one place this is stated; settings.py and the README refer
here): with nothing in flight, about 0.2 s from the signal to the process's exit (0.22 s
measured with an empty SQLite store on an idle machine). It is uvicorn's fixed 0.1 s
pause after asking the connections to close (step 3), up to 0.1 s more while it polls
for connections still open (every 0.1 s: a long-poll's answer, a keep-alive closing),
then the storage's close (step 5: a SQLite WAL checkpoint, longer the more was written
since the last one; a PostgreSQL pool closing its connections) and the interpreter's
exit. A request in flight adds its own time, up to ``shutdown_timeout_s``.

A stop is *forced*, and ``serve`` returns ``False`` / the command exits with status 1
(so systemd or Kubernetes see that something, typically a stuck storage, held it), when
requests were still in flight at ``shutdown_timeout_s`` (uvicorn cancels them and logs
``Cancel N running task(s), timeout graceful shutdown exceeded``; with a timeout of 0 it
does not wait at all, so every stop counts), when a second SIGINT stopped the waiting at
once (uvicorn's rule; the lifespan's shutdown is then skipped, the storage is not
closed), or when the lifespan's shutdown failed. The command then exits at once, without
waiting for worker threads still busy with an abandoned request.

Worker threads can not be cancelled: one still blocked in storage (a write waiting for a
lock, say) can hold step 5 (SQLite's close waits for the statement it runs). So a
watchdog started with the stop ends the process if :func:`serve` has not returned
:data:`EXIT_GRACE_S` after ``shutdown_timeout_s``: it logs ``still stopping ... exiting
without waiting for them`` and exits at once, status 1. :func:`serve` cancels the
watchdog as soon as the server has stopped, so a program that calls it and goes on
running is not ended by it. Committed data is safe either way (every commit is one
transaction).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path

import uvicorn

from layersync_server.app import create_app
from layersync_server.observability import configure_logging
from layersync_server.settings import Settings

READY_PREFIX = "layersync-server listening on "

#: Seconds past ``shutdown_timeout_s`` after which a stopping process exits without
#: waiting any longer for worker threads or the storage to close (module docs).
EXIT_GRACE_S = 2.0

#: Exit status of a forced stop (module docs); a clean stop exits with 0.
FORCED_EXIT_STATUS = 1

#: The accept queue asked for; the kernel caps it at ``net.core.somaxconn`` (Linux's
#: default, 4096, since 5.4), which bounds how many clients may be connecting at once
#: (thousands of change streams reconnecting after a restart) before the kernel drops
#: SYNs and they retry a second later.
LISTEN_BACKLOG = 65535

log = logging.getLogger("layersync_server.server")


class _LayerSyncServer(uvicorn.Server):
    """uvicorn's server plus the ready line, the long-poll drain, the watchdog of a stop
    and whether the stop was clean (module docs)."""

    def __init__(self, config: uvicorn.Config, app, url: str, port: int,
                 port_file: Path | None, shutdown_timeout_s: float):
        super().__init__(config)
        self._app = app
        self._url, self._port, self._port_file = url, port, port_file
        self._shutdown_timeout_s = shutdown_timeout_s
        self._in_flight_finished = False
        self.watchdog: threading.Timer | None = None  # started by shutdown()

    async def startup(self, sockets=None):
        await super().startup(sockets=sockets)
        if self.should_exit:  # startup failed
            return
        if self._port_file is not None:
            tmp = self._port_file.with_name(self._port_file.name + ".tmp")
            tmp.write_text(f"{self._port}\n")
            os.replace(tmp, self._port_file)
        print(READY_PREFIX + self._url, flush=True)

    async def shutdown(self, sockets=None):
        # Refuse new connections first, so no long-poll parks after the drain; no await
        # between the drain and uvicorn's close of idle connections (super), so no
        # request starts in between either.
        for server in getattr(self, "servers", ()):
            server.close()
        self._app.drain()
        self.watchdog = _exit_after(self._shutdown_timeout_s + EXIT_GRACE_S)
        await super().shutdown(sockets=sockets)

    async def _wait_tasks_to_complete(self):
        # uvicorn's shutdown() runs this under asyncio.wait_for(timeout_graceful_shutdown)
        # and cancels the requests still in flight when it times out: only a return from
        # here means none was abandoned. (A uvicorn without this method never calls it:
        # every stop then counts as forced, which the tests notice.)
        await super()._wait_tasks_to_complete()
        self._in_flight_finished = True

    @property
    def stopped_cleanly(self) -> bool:
        """The stop finished every request in flight and closed the storage (module
        docs); ``False`` before a stop."""
        return (self._in_flight_finished and not self.force_exit
                and not self.lifespan.should_exit)  # should_exit: lifespan shutdown failed

    @contextlib.contextmanager
    def capture_signals(self):
        """uvicorn's, minus its last step: after a graceful stop uvicorn re-raises the
        signal it caught with the previous handlers back, so the process ends killed by
        SIGTERM (status -15) or with KeyboardInterrupt; a stop that was asked for and
        done is a success here (exit status 0)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def exit_now(status: int) -> None:
    """End the process at once with ``status`` (stdout and stderr flushed), without
    waiting for worker threads: they can not be cancelled (module docs)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _exit_after(delay_s: float) -> threading.Timer:
    """End the process, status :data:`FORCED_EXIT_STATUS`, ``delay_s`` seconds from now
    unless the returned timer is cancelled first."""

    def expire():
        log.error("still stopping %.1f s after the signal (worker threads busy); exiting "
                  "without waiting for them", delay_s)
        exit_now(FORCED_EXIT_STATUS)

    timer = threading.Timer(delay_s, expire)
    timer.daemon = True  # does not itself keep the process alive
    timer.start()
    return timer


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's ``RLIMIT_NOFILE`` as far as it may (every held change stream
    or long-poll is one descriptor; the usual soft limit, 1024, would cap a server at
    about a thousand clients) and log it: soft and hard to the kernel's ceiling
    (``fs.nr_open``) when the process is privileged (root, ``CAP_SYS_RESOURCE``), else
    the soft limit to the hard one. Returns the ``(soft, hard)`` limits now in force. A
    limit that can not be raised is logged and left as it is."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        ceiling = int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        ceiling = 1 << 20
    if hard != resource.RLIM_INFINITY and hard < ceiling:
        with contextlib.suppress(ValueError, OSError):  # (unprivileged: not allowed)
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, ceiling))
            log.info("open-files limit (RLIMIT_NOFILE) raised from %s (hard limit %s) to %s",
                     soft, hard, ceiling)
            return ceiling, ceiling
    target = ceiling if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        log.info("open-files limit (RLIMIT_NOFILE): %s (hard limit %s)", soft, hard)
        return soft, hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not raise the open-files limit from %d to %d: %s", soft, target, exc)
        return soft, hard
    log.info("open-files limit (RLIMIT_NOFILE) raised from %s to %s (hard limit %s)",
             soft, target, hard)
    return target, hard


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port=0`` = any free port), with the
    longest accept queue the kernel allows (:data:`LISTEN_BACKLOG`)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must be IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections
    # only for sockets that say so, and without it Nagle's algorithm holds each response
    # body (sent after its headers) for the peer's delayed ACK, about 40 ms per long-poll
    # (measured by bench/ scenario 3: p50 47.6 ms -> 5.0 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


def log_listen_backlog() -> int | None:
    """Log the accept queue the kernel gives :func:`bind`'s socket (``net.core.somaxconn``;
    a warning below 4096) and return it; ``None`` where it can not be read."""
    try:
        somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return None
    backlog = min(somaxconn, LISTEN_BACKLOG)
    if backlog < 4096:
        log.warning("listen backlog %d (net.core.somaxconn): a burst of reconnecting clients "
                    "may be refused; raise net.core.somaxconn", backlog)
    else:
        log.info("listen backlog %d (net.core.somaxconn)", backlog)
    return backlog


def connection_protocol(transports: dict):
    """uvicorn's HTTP protocol (httptools or h11, as ``http="auto"`` picks) that also keeps
    ``transports`` of its open connections: ``id(client)`` -> asyncio transport, where
    ``client`` is the peer address tuple the protocol puts, as the same object, in every
    request's ``scope["client"]``. The change stream sets socket options on its connection
    and watches its write buffer (:class:`~layersync_server.stream.StreamHub`). Keyed by
    that object, not by the address: uvicorn's proxy headers replace ``scope["client"]``
    with what a trusted peer forwards (``X-Forwarded-For``, a port included), and a
    forwarded address must not find another client's connection (a stream's replacement
    resets its connection). A forwarded request's stream so has no transport. One dict
    entry per connection, nothing per request."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class ConnectionProtocol(AutoHTTPProtocol):
        _key = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if self.client is not None:  # (kept alive by the protocol: its id is its own)
                self._key = id(self.client)
                transports[self._key] = transport

        def connection_lost(self, exc) -> None:
            key = self._key
            if key is not None and transports.get(key) is self.transport:
                del transports[key]
            super().connection_lost(exc)

    return ConnectionProtocol


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 0,
          port_file: Path | None = None, log_level: str = "warning") -> bool:
    """Serve until SIGTERM or SIGINT, then stop as the module docs say and return
    whether the stop was clean: ``False`` when it was forced (requests in flight
    abandoned; their worker threads may still be busy). Blocks; call it on the main
    thread (signal handlers). Once the server has stopped, nothing of it ends the
    process: the stop's watchdog is cancelled.

    Raises:
        OSError: the address can not be bound. ValueError: see :func:`create_app`.
        SystemExit(3): uvicorn's start-up failed (the app's lifespan).
    """
    sock = bind(host, port)
    actual_port = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    configure_logging(log_level)
    raise_open_files_limit()
    log_listen_backlog()
    # "auto" = uvloop and httptools (dependencies of the server) when importable, else
    # asyncio and h11: a request round trip is ~0.1 ms shorter with them.
    app = create_app(settings)
    # uvicorn's X-Forwarded-For/-Proto handling: FORWARDED_ALLOW_IPS, default loopback
    config = uvicorn.Config(app, log_level=log_level, lifespan="on", loop="auto",
                            http=connection_protocol(app.state.ctx.notifier.hub.transports),
                            proxy_headers=True,
                            timeout_graceful_shutdown=settings.shutdown_timeout_s,
                            access_log=False, log_config=None)
    server = _LayerSyncServer(config, app, f"http://{url_host}:{actual_port}", actual_port,
                              port_file, settings.shutdown_timeout_s)
    # Thousands of held long-polls keep many objects alive; with the default thresholds
    # (700, 10, 10) the collector's full passes over them showed up as 100+ ms stalls in
    # bench scenario 6's p99. Collect less often and leave start-up objects out of it.
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        server.run(sockets=[sock])
    finally:
        # The watchdog is for a stop that hangs in run(); run() has returned.
        if server.watchdog is not None:
            server.watchdog.cancel()
        sock.close()
    if server.force_exit:  # uvicorn logs the other forced stops itself
        log.error("stopped without waiting for requests in flight or closing the storage "
                  "(second SIGINT)")
    sys.stdout.flush()
    return server.stopped_cleanly
