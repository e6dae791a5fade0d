"""Scenario 6, protocol version 2: many change streams held open while syncs arrive.

One process holds tens of thousands of Server-Sent Events streams (``POST
/sync/v2/stream``) on raw asyncio sockets (a bare :class:`asyncio.Protocol` per stream:
no StreamReader, no HTTP library), each subscribed to 3 layers, while writers send
``POST .../sync`` with one create each, round-robin over the layers, at ``rate`` per
second. Propagation = the writer's ``time.monotonic()`` just before the sync request is
written, carried in the record's ``customData.t``, to the moment a ``changes`` event
carrying it has been read by a subscriber (every subscriber of the layer counts).
Loopback only; every phase is bounded in time.

Knee search (:func:`knee`): connect clients in steps (each step adds to the ones already
connected), measure at each, stop once p99 passes ``p99_limit_ms`` or ``max_clients``
is reached; reports each step and the server's RSS (VmRSS of every server process,
so memory per idle client = RSS growth / clients added while no sync runs).

    .venv/bin/python bench/stream_load.py --steps 1000,5000,10000 --rate 200
    .venv/bin/python bench/stream_load.py --postgres --steps 2000,10000   # 2 processes

Client sockets bind to 127.0.0.2..127.0.0.201 in turn, so one server port takes more
than the ~28,000 connections one source address has ephemeral ports for; the generator
raises its own (and, when it can, its hard) RLIMIT_NOFILE, which the servers it starts
inherit.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

from common import Server, annotation, bench_id, percentile

SOURCE_ADDRESSES = [f"127.0.0.{i}" for i in range(2, 202)]


def raise_nofile(wanted: int) -> int:
    """Raise RLIMIT_NOFILE towards ``wanted`` (the hard limit too when privileged)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            return wanted
        except (ValueError, OSError):
            pass
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class StreamClient(asyncio.Protocol):
    """One stream: sends the POST, reads the hello, then parses ``changes`` events."""

    __slots__ = ("load", "buffer", "stream_id", "hello", "transport", "closed", "_head")

    def __init__(self, load: "Load", head: bytes):
        self.load = load
        self.buffer = b""
        self.stream_id: str | None = None
        self.hello = asyncio.get_running_loop().create_future()
        self.transport = None
        self.closed = False
        self._head = head

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self._head)
        del self._head

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data
        if b"\n\n" not in buffer:
            self.buffer = buffer
            return
        *blocks, self.buffer = buffer.split(b"\n\n")
        now = time.monotonic()
        for block in blocks:
            at = block.find(b"data: ")
            if at < 0:
                continue
            name_at = block.find(b"event: ")
            name = block[name_at + 7:block.index(b"\n", name_at)] if name_at >= 0 else b""
            if name == b"changes":
                self.load.received(json.loads(block[at + 6:]), now)
            elif name == b"hello":
                self.stream_id = json.loads(block[at + 6:])["stream_id"]
                if not self.hello.done():
                    self.hello.set_result(self.stream_id)
            elif name in (b"notice", b"unsubscribed", b"reset", b"bye"):
                self.load.others[name.decode()] = self.load.others.get(name.decode(), 0) + 1

    def connection_lost(self, exc) -> None:
        self.closed = True
        if not self.hello.done():
            self.hello.set_exception(ConnectionError("stream closed before hello"))
        self.load.lost += 1


class Http:
    """A keep-alive HTTP/1.1 connection for the short requests (subscribe, sync)."""

    def __init__(self, url: str):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.reader = self.writer = None

    async def request(self, method: str, path: str, token: str, body: bytes) -> tuple[int, Any]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write((f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
                           f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                           f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        data = await self.reader.readexactly(length)
        return status, json.loads(data) if data else None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class Load:
    def __init__(self, servers: list[Server], document: str, layers_per_client: int = 3,
                 subscribers_per_layer: int = 20):
        self.servers = servers
        self.document = document
        self.layers_per_client = layers_per_client
        self.subscribers_per_layer = subscribers_per_layer
        self.tokens: dict[str, str] = {}
        self.clients: list[StreamClient] = []
        self.latencies: list[float] = []
        self.measuring = False
        self.others: dict[str, int] = {}
        self.lost = 0
        self.errors = 0
        self.since: dict[str, int] = {}

    def layer_token(self, layer: str) -> str:
        token = self.tokens.get(layer)
        if token is None:
            token = self.tokens[layer] = self.servers[0].token(self.document, layer)
        return token

    def layers(self) -> list[str]:
        count = max(1, len(self.clients) * self.layers_per_client // self.subscribers_per_layer)
        return [f"s{i}" for i in range(count)]

    def received(self, data: dict, now: float) -> None:
        if not self.measuring:
            return
        for record in data["records"]:
            sent = ((record.get("content") or {}).get("customData") or {}).get("t")
            if sent is not None:
                self.latencies.append(now - sent)

    async def connect(self, count: int, concurrency: int = 200, deadline_s: float = 300) -> None:
        """Add ``count`` streams, each subscribed to 3 layers (spread over the servers)."""
        loop = asyncio.get_running_loop()
        start = len(self.clients)
        total = start + count
        layers_after = max(1, total * self.layers_per_client // self.subscribers_per_layer)
        subscribers = [Http(s.url) for s in self.servers for _ in range(concurrency // 4)]
        queues = [asyncio.Queue() for _ in self.servers]
        deadline = time.monotonic() + deadline_s

        async def open_one(i: int) -> None:
            server = self.servers[i % len(self.servers)]
            u = urllib.parse.urlsplit(server.url)
            token = self.layer_token(f"s{i % layers_after}")
            head = (f"POST /sync/v2/stream HTTP/1.1\r\nHost: {u.hostname}\r\nAuthorization: Bearer "
                    f"{token}\r\nAccept: text/event-stream\r\nContent-Length: 0\r\n\r\n").encode()
            _, client = await loop.create_connection(
                lambda: StreamClient(self, head), u.hostname, u.port,
                local_addr=(SOURCE_ADDRESSES[i % len(SOURCE_ADDRESSES)], 0))
            stream_id = await asyncio.wait_for(client.hello, 30)
            self.clients.append(client)
            for k in range(self.layers_per_client):
                layer = f"s{(i * self.layers_per_client + k) % layers_after}"
                queues[i % len(self.servers)].put_nowait((stream_id, layer))

        async def subscriber(http: Http, queue: asyncio.Queue) -> None:
            while True:
                item = await queue.get()
                if item is None:
                    return
                stream_id, layer = item
                body = json.dumps({"document_id": self.document, "layer": layer,
                                   "since": self.since.get(layer, 0)}).encode()
                try:
                    status, _ = await http.request("POST", f"/sync/v2/stream/{stream_id}/subscriptions",
                                                   self.layer_token(layer), body)
                    if status != 200:
                        self.errors += 1
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    self.errors += 1
                    http.close()
                    http.reader = http.writer = None

        per_server = concurrency // 4
        workers = [asyncio.create_task(subscriber(h, queues[k // per_server]))
                   for k, h in enumerate(subscribers)]
        pending = set()
        for i in range(start, total):
            if time.monotonic() > deadline:
                break
            pending.add(asyncio.create_task(open_one(i)))
            if len(pending) >= concurrency:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                self.errors += sum(1 for t in done if t.exception() is not None)
        if pending:
            done, _ = await asyncio.wait(pending)
            self.errors += sum(1 for t in done if t.exception() is not None)
        while any(not q.empty() for q in queues) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for k, _ in enumerate(workers):
            queues[k // per_server].put_nowait(None)
        await asyncio.wait(workers, timeout=max(1.0, deadline - time.monotonic()))
        for h in subscribers:
            h.close()

    async def measure(self, rate: int, duration_s: float, writers_per_server: int = 8) -> dict:
        """Send ``rate`` syncs/s for ``duration_s`` (after a 1 s warm-up) to every layer in
        turn, on every server in turn; the latencies of what arrives meanwhile."""
        layers = self.layers()
        conns = [(s, Http(s.url)) for s in self.servers for _ in range(writers_per_server)]
        queue: asyncio.Queue = asyncio.Queue()
        sync_rtts: list[float] = []
        count = {"n": 0}

        async def writer(server: Server, http: Http) -> None:
            while (item := await queue.get()) is not None:
                layer, n = item
                sent = time.monotonic()
                body = json.dumps({"client_id": "bench-writer", "since": self.since.get(layer, 0),
                                   "changes": [{"change_id": bench_id("SC", n), "op": "create",
                                                "id": bench_id("SR", n),
                                                "content": annotation(n, customData={"t": sent})}]}).encode()
                try:
                    status, answer = await http.request(
                        "POST", f"/sync/v1/documents/{self.document}/layers/{layer}/sync",
                        self.layer_token(layer), body)
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    self.errors += 1
                    http.close()
                    http.reader = http.writer = None
                    continue
                sync_rtts.append(time.monotonic() - sent)
                if status == 200:
                    self.since[layer] = max(self.since.get(layer, 0), answer["revision"])
                else:
                    self.errors += 1

        tasks = [asyncio.create_task(writer(s, h)) for s, h in conns]
        base = int(time.time() * 1000) % 10_000_000 * 1000
        started = time.monotonic()
        warm = 1.0
        self.latencies = []
        sent_measured = 0
        while (elapsed := time.monotonic() - started) < warm + duration_s:
            self.measuring = elapsed >= warm
            due = int(elapsed * rate)
            while count["n"] < due:
                n = count["n"]
                queue.put_nowait((layers[n % len(layers)], base + n))
                count["n"] += 1
                sent_measured += self.measuring
            await asyncio.sleep(0.005)
        for _ in tasks:
            queue.put_nowait(None)
        await asyncio.wait(tasks, timeout=10)
        await asyncio.sleep(1.0)  # stragglers
        self.measuring = False
        for _, h in conns:
            h.close()
        lat = [x * 1e3 for x in self.latencies]
        return {"clients": len(self.clients), "subscriptions": len(self.clients) * self.layers_per_client,
                "layers": len(layers), "rate": rate, "achieved_rate": sent_measured / duration_s,
                "deliveries": len(lat), "p50_ms": percentile(lat, 0.5), "p99_ms": percentile(lat, 0.99),
                "max_ms": max(lat) if lat else float("nan"),
                "sync_p50_ms": percentile([x * 1e3 for x in sync_rtts], 0.5),
                "sync_p99_ms": percentile([x * 1e3 for x in sync_rtts], 0.99)}

    def close(self) -> None:
        for client in self.clients:
            if client.transport is not None:
                client.transport.close()


async def _knee(servers: list[Server], document: str, steps: list[int], rate: int, duration_s: float,
                p99_limit_ms: float, budget_s: float) -> dict:
    load = Load(servers, document)
    pids = [s.process.pid for s in servers]
    rows = []
    knee = None
    started = time.monotonic()
    rss0 = sum(rss_mb(p) for p in pids)
    try:
        for target in steps:
            if time.monotonic() - started > budget_s:
                break
            before_rss, before = sum(rss_mb(p) for p in pids), len(load.clients)
            t0 = time.monotonic()
            await load.connect(target - before,
                               deadline_s=max(10.0, budget_s - (time.monotonic() - started)))
            connect_s = time.monotonic() - t0
            await asyncio.sleep(2.0)
            idle_rss = sum(rss_mb(p) for p in pids)
            streams = sum(s.metric("layersync_open_streams") or 0 for s in servers)
            subs = sum(s.metric("layersync_stream_subscriptions") or 0 for s in servers)
            row = await load.measure(rate, duration_s)
            row.update({"server_rss_mb": round(sum(rss_mb(p) for p in pids), 1),
                        "idle_rss_mb": round(idle_rss, 1),
                        "kb_per_idle_client": round((idle_rss - before_rss) * 1024
                                                    / max(1, len(load.clients) - before), 1),
                        "open_streams": streams, "subscriptions_on_server": subs,
                        "connect_s": round(connect_s, 1), "errors": load.errors, "lost": load.lost,
                        "others": dict(load.others),
                        "generator_rss_mb": round(rss_mb(os.getpid()), 1)})
            rows.append(row)
            print(json.dumps(row), flush=True)
            if row["p99_ms"] > p99_limit_ms or row["achieved_rate"] < 0.9 * rate:
                knee = row
                break
    finally:
        load.close()
    passing = [r for r in rows if r is not knee]
    return {"steps": rows, "knee": knee, "largest_passing": passing[-1] if passing else None,
            "baseline_rss_mb": round(rss0, 1)}


def knee(servers: list[Server], document: str, steps: list[int], rate: int = 200,
         duration_s: float = 5.0, p99_limit_ms: float = 250.0, budget_s: float = 300) -> dict:
    """The knee search of the module docs (scenario 6 calls it; so does :func:`main`)."""
    raise_nofile(max(steps) * 2 + 10_000)
    return asyncio.run(_knee(servers, document, steps, rate, duration_s, p99_limit_ms, budget_s))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", default="1000,5000,10000,20000,30000,40000,50000")
    p.add_argument("--rate", type=int, default=200)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--budget", type=float, default=300.0, help="seconds for the whole search")
    p.add_argument("--postgres", action="store_true", help="two server processes on PostgreSQL")
    p.add_argument("--workdir", default="/tmp/layersync-stream-load")
    args = p.parse_args()
    steps = [int(x) for x in args.steps.split(",")]
    raise_nofile(max(steps) * 2 + 10_000)  # (inherited by the servers started below)
    tmp = Path(args.workdir)
    shutil.rmtree(tmp, ignore_errors=True)
    servers: list[Server] = []
    cluster = None
    try:
        if args.postgres:
            from pgcluster import PgCluster, find_bin_dir
            cluster = PgCluster(find_bin_dir())
            url = cluster.create_database("streams")
            for name in ("a", "b"):
                s = Server(tmp / name, extra_args=["--db", url])
                if name == "b":
                    s.workdir.mkdir(parents=True, exist_ok=True)
                    for f in ("private.pem", "public.pem"):
                        shutil.copy(tmp / "a" / f, s.workdir / f)
                servers.append(s.start())
        else:
            servers.append(Server(tmp / "a").start())
        pdf = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "pdf"
        sample = next(iter(sorted(pdf.glob("*.pdf"))))
        servers[0].upload_bytes(sample.read_bytes(), "streams")
        result = knee(servers, "streams", steps, args.rate, args.duration, budget_s=args.budget)
        print(json.dumps({"knee": result["knee"], "largest_passing": result["largest_passing"],
                          "baseline_rss_mb": result["baseline_rss_mb"]}, indent=1))
    finally:
        for s in servers:
            s.stop()
        if cluster is not None:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
