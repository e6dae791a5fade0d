"""Scenario 7's floor: a bare relay on the architecture's stack, nothing else.

FastAPI + uvicorn with the reference server's uvicorn settings (server/layersync_server/
server.py: loop/http "auto" = uvloop/httptools when importable, the server's own listening
socket), and three routes:

- ``POST /p``: the body becomes revision n+1; every parked ``GET /g`` wakes up and every
  open ``GET /s`` gets it as one event.
- ``GET /g?since=N`` (long-poll, protocol version 1's transport): answers ``{"revision": n,
  "records": [<last body>]}`` at once if n > N, else parks until the next POST (or 30 s,
  then answers the current state).
- ``GET /s`` (a pushed stream, protocol version 2's transport): Server-Sent Events, first
  ``data: {"revision": n, "records": []}`` (where it starts), then ``data: {"revision": n,
  "records": [<body>]}`` + a blank line per POST, until the client goes away.

No auth, no storage, no validation: what is left of a propagation over HTTP long-poll or
a pushed stream when LayerSync's own work is taken away. ``ls_bench relay`` is the client side (two libcurl
clients). ``run.py`` starts it through :class:`Relay`:

    python relay.py             # prints "relay listening on http://127.0.0.1:PORT loop=... http=..."

The process also exits when its stdin reaches EOF, so it cannot outlive the harness that
started it (even one killed with SIGKILL).
"""
import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

READY_PREFIX = "relay listening on "
_READY = re.compile(re.escape(READY_PREFIX) + r"(http://\S+)(.*)")
WAIT_S = 30.0


def create_app() -> Any:
    # No `from __future__ import annotations` in this module: FastAPI reads the routes'
    # annotations at runtime, and Request is a local name here.
    from fastapi import FastAPI, Request
    from fastapi.responses import Response, StreamingResponse

    app = FastAPI()
    state: dict[str, Any] = {"revision": 0, "body": b"", "waiters": [], "streams": []}

    @app.post("/p")
    async def post(request: Request) -> Response:
        body = await request.body()
        state["revision"] += 1
        state["body"] = body
        waiters, state["waiters"] = state["waiters"], []
        for f in waiters:
            if not f.done():
                f.set_result(None)
        event = b'data: {"revision":%d,"records":[%s]}\n\n' % (state["revision"], body)
        for queue in state["streams"]:
            queue.put_nowait(event)
        return Response(b'{"revision":%d}' % state["revision"], media_type="application/json")

    @app.get("/s")
    async def stream() -> StreamingResponse:
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        state["streams"].append(queue)

        async def events():
            try:
                yield b'data: {"revision":%d,"records":[]}\n\n' % state["revision"]
                while True:
                    yield await queue.get()
            finally:
                state["streams"].remove(queue)

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    @app.get("/g")
    async def get(since: int) -> Response:
        if state["revision"] <= since:
            f = asyncio.get_running_loop().create_future()
            state["waiters"].append(f)
            try:
                await asyncio.wait_for(f, WAIT_S)
            except asyncio.TimeoutError:
                pass
        return Response(b'{"revision":%d,"records":[%s]}' % (state["revision"], state["body"]),
                        media_type="application/json")

    return app


def serve() -> None:
    """Serves on a free loopback port until SIGTERM/SIGINT or EOF on stdin. Blocks."""
    import uvicorn
    # The server's own socket (IPPROTO_TCP, so that accepted connections get TCP_NODELAY):
    # imported, not copied, so that the floor follows the server if it changes.
    from layersync_server.server import bind

    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    # The reference server's uvicorn.Config (layersync_server.server.serve), minus its app.
    config = uvicorn.Config(create_app(), log_level="warning", lifespan="on", loop="auto", http="auto",
                            proxy_headers=False, timeout_graceful_shutdown=2, access_log=False,
                            log_config=None)

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if not self.should_exit:
                loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
                http = config.http_protocol_class.__name__
                print(f"{READY_PREFIX}http://127.0.0.1:{port} loop={loop} http={http}", flush=True)

    def watch_stdin() -> None:
        sys.stdin.buffer.read()  # EOF: the harness is gone
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch_stdin, daemon=True).start()
    try:
        Announcing(config).run(sockets=[sock])
    finally:
        sock.close()


class Relay:
    """The relay as a child process of the harness: ``start()`` returns once it listens
    (``url``, ``impl`` = "loop=... http=..."), ``stop()`` ends it. Idempotent stop."""

    def __init__(self, workdir: Path, python: str = sys.executable) -> None:
        self.workdir = Path(workdir)
        self.python = python
        self.url = ""
        self.impl = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "relay.log"

    def start(self, timeout_s: float = 30.0) -> "Relay":
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([self.python, str(Path(__file__).resolve())], stdin=subprocess.PIPE,
                                            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.log_path.read_text("utf-8", "replace")
            match = _READY.search(text)
            if match:
                self.url, self.impl = match.group(1), match.group(2).strip()
                return self
            rc = self.process.poll()
            if rc is not None:
                self.stop()
                raise RuntimeError(f"relay exited with {rc}:\n{text}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"relay did not start within {timeout_s} s:\n" + self.log_path.read_text("utf-8", "replace"))

    def stop(self) -> None:
        # The harness's helper (bench/common.py puts the bindings on the path); imported
        # here, so the relay's own process (`python relay.py`) needs neither.
        from layersync.devserver import stop_process

        proc, self.process = self.process, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        stop_process(proc)

    def __enter__(self) -> "Relay":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


if __name__ == "__main__":
    serve()
