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
- Yjs: pycrdt-websocket's ``WebsocketServer`` (one room) behind the ``websockets`` library;
  two ``pycrdt`` docs connected through ``pycrdt.Provider``. Push = A writes every record into a
  shared ``Map`` in one transaction, measured until B's map holds them all. Propagation: A sets
  one key, B's observer fires.
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


async def _yjs(args: argparse.Namespace) -> dict:
    import websockets
    from pycrdt import Doc, Map, Provider
    from pycrdt.websocket import WebsocketServer, YRoom

    store_cls = None
    if args.ystore:
        from pycrdt.store import SQLiteYStore

        class Store(SQLiteYStore):
            db_path = str(Path(args.workdir) / "ystore.db")
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        store_cls = Store

    port = free_port()
    push, lat_all = [], []
    async with WebsocketServer(auto_clean_rooms=False) as wss:
        async def handler(ws):
            await wss.serve(WsChannel(ws, ws.request.path))

        async with websockets.serve(handler, "127.0.0.1", port, max_size=None):
            for rep in range(args.reps):
                room = f"/room{rep}"
                if store_cls is not None:  # a room that persists every update (pycrdt-store)
                    wss.rooms[room] = YRoom(ready=True, ystore=store_cls(path=room))
                docs, maps = [Doc(), Doc()], []
                for d in docs:
                    maps.append(d.get("records", type=Map))
                conns = [await websockets.connect(f"ws://127.0.0.1:{port}{room}", max_size=None) for _ in docs]
                providers = [Provider(d, WsChannel(c, room)) for d, c in zip(docs, conns)]
                async with providers[0], providers[1]:
                    await asyncio.sleep(0.3)
                    count = {"n": 0}
                    arrived: dict[str, float] = {}
                    done = asyncio.Event()
                    loop = asyncio.get_running_loop()

                    def on_change(event) -> None:
                        t = time.monotonic()
                        for key in event.keys:
                            arrived[key] = t
                        if len(maps[1]) >= args.records:
                            loop.call_soon(done.set)
                    maps[1].observe(on_change)
                    t0 = time.monotonic()
                    with docs[0].transaction():
                        for i in range(args.records):
                            maps[0][f"r{i}"] = json.dumps(annotation(i))
                    await asyncio.wait_for(done.wait(), 600)
                    push.append(args.records / (time.monotonic() - t0))
                    if rep == 0:
                        for i in range(args.writes + 5):
                            key = f"live{i}"
                            t0 = time.monotonic()
                            maps[0][key] = json.dumps(annotation(i))
                            while key not in arrived:
                                await asyncio.sleep(0.0002)
                            if i >= 5:
                                lat_all.append(arrived[key] - t0)
                for c in conns:
                    await c.close()
    return {"peer": "yjs", "push_rates": push,
            "latency_p50_ms": percentile(lat_all, 0.5) * 1e3, "latency_p99_ms": percentile(lat_all, 0.99) * 1e3,
            "note": "pycrdt-websocket room, 2 pycrdt clients over websockets; records as JSON strings in a "
                    "Y.Map; " + ("room persists updates in SQLiteYStore (written after the relay, off the "
                                 "propagation path)" if args.ystore else "in memory, no persistence (favours Yjs)")}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("peer", choices=["kinto", "yjs"])
    p.add_argument("--records", type=int, default=10_000)
    p.add_argument("--writes", type=int, default=300)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--no-ystore", dest="ystore", action="store_false",
                   help="Yjs room without persistence (default: SQLiteYStore)")
    p.add_argument("--workdir", default="/tmp/layersync-bench-peers")
    args = p.parse_args()
    if args.peer == "kinto":
        r = run_kinto(args)
    else:
        r = asyncio.run(_yjs(args))
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
