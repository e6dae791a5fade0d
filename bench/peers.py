"""Scenario 7 peers, run with bench/.venv-peers/bin/python (not the repo's .venv).

    peers.py kinto --records N --writes W --reps R --workdir DIR
    peers.py yjs   --records N --writes W --reps R --workdir DIR

Prints one JSON line: push_rates (records/s), pull_rates, latency_p50_ms, latency_p99_ms, note.
Same records as LayerSync's scenarios (bench/common.py ``annotation``), same machine, same run.

- Kinto: ``kinto start`` (memory backend, Basic auth) as a subprocess; client A pushes the
  records with kinto-http's batch (the server's batch limit per request), client B pulls
  them (paged ``get_records``). Kinto has no push channel in its core (kinto-changes /
  webpush are plugins), so propagation is measured the way a Kinto client would sync:
  B polls ``?_since=<last timestamp>`` back to back; latency = A's write start to B seeing it.
- Yjs: pycrdt-websocket's ``WebsocketServer`` (a room per repetition) behind the ``websockets``
  library, in its own process (``peers.py yjs-server``, as LayerSync's server runs in its own);
  two ``pycrdt`` docs in this process connected through ``pycrdt.Provider``. Push = A writes
  every record into a shared ``Map`` in one transaction, measured until B's map holds them all.
  Propagation: A sets one key, B's observer fires (the next key once it did).
  Each repetition also runs the room in this process (one event loop for server and both
  clients, no process hop), reported in the note as ``same_process``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common_records import annotation, percentile  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- Kinto ---------------------------------------------------------------------------------


def run_kinto(args: argparse.Namespace) -> dict:
    import kinto_http
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    ini = workdir / "kinto.ini"
    bindir = Path(sys.executable).parent
    if not ini.exists():
        subprocess.run([str(bindir / "kinto"), "init", "--ini", str(ini), "--backend", "memory",
                        "--cache-backend", "memory", "--host", "127.0.0.1"], check=True,
                       capture_output=True)
        # Basic auth for any user (Kinto's classic default) and open bucket creation.
        text = ini.read_text().replace("multiauth.policies = account", "multiauth.policies = basicauth")
        text = text.replace("kinto.bucket_create_principals = account:admin",
                            "kinto.bucket_create_principals = system.Authenticated")
        ini.write_text(text)
    port = free_port()
    log = open(workdir / "kinto.log", "wb")
    proc = subprocess.Popen([str(bindir / "kinto"), "start", "--ini", str(ini), "--port", str(port), "-q"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                import urllib.request
                urllib.request.urlopen(url + "/", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("kinto did not start: " + (workdir / "kinto.log").read_text()[-2000:])
                time.sleep(0.2)
        auth = ("bench", "secret")
        push, pull = [], []
        for rep in range(args.reps):
            a = kinto_http.Client(server_url=url, auth=auth, bucket="bench", collection=f"c{rep}")
            a.create_bucket(id="bench", if_not_exists=True)
            a.create_collection(id=f"c{rep}", bucket="bench", if_not_exists=True)
            records = [annotation(i) for i in range(args.records)]
            t0 = time.monotonic()
            with a.batch() as batch:
                for r in records:
                    batch.create_record(data=r)
            push.append(args.records / (time.monotonic() - t0))
            b = kinto_http.Client(server_url=url, auth=auth, bucket="bench", collection=f"c{rep}")
            t0 = time.monotonic()
            got = b.get_records()
            pull.append(len(got) / (time.monotonic() - t0))
            if len(got) != args.records:
                raise RuntimeError(f"kinto pull got {len(got)} of {args.records}")
        # Propagation: B polls back to back.
        a = kinto_http.Client(server_url=url, auth=auth, bucket="bench", collection="live")
        a.create_collection(id="live", bucket="bench", if_not_exists=True)
        b = kinto_http.Client(server_url=url, auth=auth, bucket="bench", collection="live")
        seen: dict[str, float] = {}
        stop = threading.Event()
        since = {"ts": b.get_records_timestamp()}

        def poll() -> None:
            while not stop.is_set():
                recs = b.get_records(_since=since["ts"])
                t = time.monotonic()
                for r in recs:
                    seen.setdefault(r["id"], t)
                    since["ts"] = max(int(since["ts"]), int(r["last_modified"]))
        th = threading.Thread(target=poll, daemon=True)
        th.start()
        lat = []
        for i in range(args.writes + 5):
            t0 = time.monotonic()
            rid = a.create_record(data=annotation(i))["data"]["id"]
            while rid not in seen:
                time.sleep(0.0002)
            if i >= 5:
                lat.append(seen[rid] - t0)
        stop.set()
        th.join(10)
        return {"peer": "kinto", "push_rates": push, "pull_rates": pull,
                "latency_p50_ms": percentile(lat, 0.5) * 1e3, "latency_p99_ms": percentile(lat, 0.99) * 1e3,
                "note": "Kinto memory backend (no disk writes: favours Kinto); kinto-http batch push; "
                        "propagation by back-to-back _since polling (Kinto core has no push channel)"}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


# -- Yjs (pycrdt-websocket) ---------------------------------------------------------------


class WsChannel:
    """pycrdt ``Channel`` over a ``websockets`` connection (server or client side)."""

    def __init__(self, ws, path: str) -> None:
        self._ws, self._path = ws, path

    @property
    def path(self) -> str:
        return self._path

    def __aiter__(self):
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self.recv()
        except Exception:
            raise StopAsyncIteration() from None

    async def send(self, message: bytes) -> None:
        await self._ws.send(message)

    async def recv(self) -> bytes:
        return bytes(await self._ws.recv())


def _yjs_store_class(workdir: str):
    """pycrdt-store's SQLiteYStore writing under ``workdir`` (every update of a room)."""
    from pycrdt.store import SQLiteYStore

    class Store(SQLiteYStore):
        db_path = str(Path(workdir) / "ystore.db")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    return Store


async def _yjs_serve(port: int, ystore: bool, workdir: str, ready=None) -> None:
    """pycrdt-websocket's ``WebsocketServer`` behind ``websockets`` on ``port`` until
    cancelled; a room per path, each persisting its updates when ``ystore``."""
    import websockets
    from pycrdt.websocket import WebsocketServer, YRoom

    store_cls = _yjs_store_class(workdir) if ystore else None
    async with WebsocketServer(auto_clean_rooms=False) as wss:
        async def handler(ws):
            path = ws.request.path
            if store_cls is not None and path not in wss.rooms:
                wss.rooms[path] = YRoom(ready=True, ystore=store_cls(path=path))
            await wss.serve(WsChannel(ws, path))

        async with websockets.serve(handler, "127.0.0.1", port, max_size=None):
            if ready is not None:
                ready()
            await asyncio.Future()


async def _yjs_clients(port: int, room: str, records: int, writes: int) -> tuple[float, list[float]]:
    """Two pycrdt docs connected to ``room``: the push rate of ``records`` keys set by A in
    one transaction until B holds them all, and (``writes`` > 0) the propagation of one
    key at a time, A's set until B's observer fired (s)."""
    import websockets
    from pycrdt import Doc, Map, Provider

    docs = [Doc(), Doc()]
    maps = [d.get("records", type=Map) for d in docs]
    conns = [await websockets.connect(f"ws://127.0.0.1:{port}{room}", max_size=None) for _ in docs]
    providers = [Provider(d, WsChannel(c, room)) for d, c in zip(docs, conns)]
    lat = []
    async with providers[0], providers[1]:
        await asyncio.sleep(0.3)
        arrived: dict[str, float] = {}
        waiting: dict[str, Any] = {"key": None, "event": None}
        done = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_change(event) -> None:
            t = time.monotonic()
            for key in event.keys:
                arrived[key] = t
                if key == waiting["key"]:
                    waiting["event"].set()
            if len(maps[1]) >= records:
                loop.call_soon(done.set)
        maps[1].observe(on_change)
        t0 = time.monotonic()
        with docs[0].transaction():
            for i in range(records):
                maps[0][f"r{i}"] = json.dumps(annotation(i))
        await asyncio.wait_for(done.wait(), 600)
        push = records / (time.monotonic() - t0)
        for i in range(writes + 5 if writes else 0):
            key = f"live{i}"
            waiting["key"], waiting["event"] = key, asyncio.Event()
            t0 = time.monotonic()
            maps[0][key] = json.dumps(annotation(i))
            await asyncio.wait_for(waiting["event"].wait(), 10)
            if i >= 5:
                lat.append(arrived[key] - t0)
    for c in conns:
        await c.close()
    return push, lat


def _run_yjs(args: argparse.Namespace) -> dict:
    """Both topologies, alternating per repetition: the room's server in its own process
    (as LayerSync's server is: the main numbers) and in the clients' process (one event
    loop for all three, no process hop: the note)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "yjs-server", "--port", str(port),
                               "--workdir", str(Path(args.workdir) / "split"),
                               *([] if args.ystore else ["--no-ystore"])],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the Yjs server process did not start")
        split_push, split_lat, same_push, same_lat = [], [], [], []
        for rep in range(args.reps):
            writes = args.writes if rep == 0 else 0
            push, lat = asyncio.run(_yjs_clients(port, f"/room{rep}", args.records, writes))
            split_push.append(push), split_lat.extend(lat)

            async def same_process(rep=rep, writes=writes):
                own_port = free_port()
                started = asyncio.Event()
                task = asyncio.create_task(_yjs_serve(own_port, args.ystore, str(Path(args.workdir) / "same"),
                                                      started.set))
                await started.wait()
                try:
                    return await _yjs_clients(own_port, f"/room{rep}", args.records, writes)
                finally:
                    task.cancel()
            push, lat = asyncio.run(same_process())
            same_push.append(push), same_lat.extend(lat)
    finally:
        server.kill()
        server.wait(10)
    persist = ("room persists updates in SQLiteYStore (written after the relay, off the propagation path)"
               if args.ystore else "in memory, no persistence (favours Yjs)")
    return {"peer": "yjs", "push_rates": split_push,
            "latency_p50_ms": percentile(split_lat, 0.5) * 1e3, "latency_p99_ms": percentile(split_lat, 0.99) * 1e3,
            "same_process": {"push_rates": same_push, "latency_p50_ms": percentile(same_lat, 0.5) * 1e3,
                             "latency_p99_ms": percentile(same_lat, 0.99) * 1e3},
            "note": "pycrdt-websocket room in its own server process (as LayerSync's server), 2 pycrdt "
                    f"clients over websockets in the bench process; records as JSON strings in a Y.Map; "
                    f"{persist}; push = A's one transaction of local writes until B holds them all "
                    f"(LayerSync's push row counts its sync only). Same process as the clients (one event "
                    f"loop, no process hop): push {statistics.median(same_push):,.0f} rec/s, propagation "
                    f"p50 {percentile(same_lat, 0.5) * 1e3:.3f} ms, p99 {percentile(same_lat, 0.99) * 1e3:.3f} ms"}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("peer", choices=["kinto", "yjs", "yjs-server"])
    p.add_argument("--port", type=int, default=0, help="yjs-server: the port to listen on")
    p.add_argument("--records", type=int, default=10_000)
    p.add_argument("--writes", type=int, default=300)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--no-ystore", dest="ystore", action="store_false",
                   help="Yjs room without persistence (default: SQLiteYStore)")
    p.add_argument("--workdir", default="/tmp/layersync-bench-peers")
    args = p.parse_args()
    if args.peer == "yjs-server":  # _run_yjs's server process: serves until stdin closes
        async def serve() -> None:
            loop = asyncio.get_running_loop()
            task = asyncio.create_task(_yjs_serve(args.port, args.ystore, args.workdir,
                                                  lambda: print("ready", flush=True)))
            await loop.run_in_executor(None, sys.stdin.read)
            task.cancel()
        asyncio.run(serve())
        return 0
    r = run_kinto(args) if args.peer == "kinto" else _run_yjs(args)
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
