"""Scenario 6, protocol version 2: many change streams held open while syncs arrive.

Holder processes (as many as the open-files limit needs: one up to about that many
streams, :func:`knee`) hold tens of thousands of Server-Sent Events streams (``POST
/sync/v2/stream``) on raw asyncio sockets (a bare :class:`asyncio.Protocol` per stream:
no StreamReader, no HTTP library), each subscribed to 3 layers, while the parent's writers send
``POST .../sync`` with one create each, round-robin over the layers, at ``rate`` per
second. Propagation = the writer's ``time.monotonic()`` just before the sync request is
written, carried in the record's ``customData.t``, to the moment a ``changes`` event
carrying it has been read by a subscriber (every subscriber of the layer counts; the
monotonic clock is the machine's, the same in every process). Loopback only; every
phase is bounded in time. Each step reports its failures apart: connects that failed
after their retries (by error), subscribes, syncs, streams the server dropped, and
``lost``: deliveries of measured syncs that did not arrive.

Knee search (:func:`knee`): connect clients in steps (each step adds to the ones already
connected), measure at each, stop once p99 passes ``p99_limit_ms`` or ``max_clients``
is reached; reports each step and the server's RSS (VmRSS of every server process,
so memory per idle client = RSS growth / clients added while no sync runs).

    .venv/bin/python bench/stream_load.py --steps 1000,5000,10000 --rate 200
    .venv/bin/python bench/stream_load.py --postgres --steps 2000,10000   # 2 processes

Client sockets bind to 127.0.0.2..127.0.0.201 in turn, so one server port takes more
than the ~28,000 connections one source address has ephemeral ports for; the generator
raises its own (and, when it can, its hard) RLIMIT_NOFILE, which the servers it starts
inherit. A server needs a descriptor per stream plus about a hundred (its listening
socket and storage files, the generator's subscribe and sync connections): where the
hard limit can not be raised (no ``CAP_SYS_RESOURCE``), a step of exactly that many
clients on one server process fails by about that many connects.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import multiprocessing
import os
import random
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

    __slots__ = ("load", "buffer", "stream_id", "stream_key", "hello", "transport", "closed", "layers",
                 "_head")

    def __init__(self, load: "Streams", head: bytes):
        self.load = load
        self.buffer = b""
        self.stream_id: str | None = None
        self.stream_key: str | None = None  # (the hello's: sent with every subscribe)
        self.hello = asyncio.get_running_loop().create_future()
        self.transport = None
        self.closed = False
        self.layers: list[str] = []  # subscribed (the subscribe answered 200)
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
                hello = json.loads(block[at + 6:])
                self.stream_id, self.stream_key = hello["stream_id"], hello.get("stream_key")
                if not self.hello.done():
                    self.hello.set_result(self.stream_id)
            elif name in (b"notice", b"unsubscribed", b"reset", b"bye"):
                self.load.others[name.decode()] = self.load.others.get(name.decode(), 0) + 1

    def close(self) -> None:
        """Closed by the generator (not counted as dropped)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc) -> None:
        if not self.hello.done():
            self.hello.set_exception(ConnectionError("stream closed before hello"))
        elif not self.closed:  # the server (or the network) ended a connected stream
            self.load.dropped += 1
            for layer in self.layers:
                self.load.layer_subscribers[layer] -= 1
            self.layers = []
        self.closed = True


class Http:
    """A keep-alive HTTP/1.1 connection for the short requests (subscribe, sync)."""

    def __init__(self, url: str):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.reader = self.writer = None

    async def request(self, method: str, path: str, token: str, body: bytes,
                      stream_key: str | None = None) -> tuple[int, Any]:
        """One request; ``stream_key``: a change stream's key (``LayerSync-Stream-Key``)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        key = "" if stream_key is None else f"LayerSync-Stream-Key: {stream_key}\r\n"
        self.writer.write((f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
                           f"Authorization: Bearer {token}\r\n{key}Content-Type: application/json\r\n"
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


class Streams:
    """The streams one holder process holds (:func:`_hold`) and what they read.

    Counts it reports: ``connect_errors`` (by error: a stream whose connect or hello
    failed after every retry), ``connect_retries``, ``subscribe_errors``, ``dropped``
    (connected streams that ended without the generator closing them), per layer the
    subscriptions held by connected streams, and while measuring the latencies and, per
    measured record id, the deliveries read."""

    def __init__(self, urls: list[str], document: str, layers_per_client: int):
        self.urls = urls
        self.document = document
        self.layers_per_client = layers_per_client
        self.tokens: dict[str, str] = {}
        self.clients: list[StreamClient] = []
        self.latencies: list[float] = []
        self.measuring = False
        self.others: dict[str, int] = {}
        self.connect_errors: dict[str, int] = {}
        self.connect_retries = 0
        self.subscribe_errors = 0
        self.dropped = 0
        self.layer_subscribers: dict[str, int] = {}
        self.arrived: dict[str, int] = {}  # record id -> deliveries read while measuring

    def received(self, data: dict, now: float) -> None:
        if not self.measuring:
            return
        arrived = self.arrived
        for record in data["records"]:
            sent = ((record.get("content") or {}).get("customData") or {}).get("t")
            if sent is not None:
                self.latencies.append(now - sent)
                rid = record.get("id")
                arrived[rid] = arrived.get(rid, 0) + 1

    def _connect_failed(self, exc: BaseException) -> None:
        name = type(exc).__name__
        if isinstance(exc, OSError) and exc.errno is not None:
            name += f"({errno.errorcode.get(exc.errno, exc.errno)})"
        self.connect_errors[name] = self.connect_errors.get(name, 0) + 1

    async def connect(self, indices: list[int], layers_after: int, since: dict[str, int],
                      deadline_s: float, concurrency: int = 100, attempts: int = 5) -> None:
        """Open the streams ``indices`` (stream ``i`` goes to server ``i % len(urls)``),
        each subscribed to 3 layers of ``s0 .. s{layers_after - 1}``. A stream whose
        connect or hello fails is retried (``attempts`` in all, backoff with jitter,
        within the deadline), so a step holds exactly its clients unless errors say
        otherwise."""
        loop = asyncio.get_running_loop()
        subscribers = [Http(url) for url in self.urls for _ in range(concurrency // 4)]
        queues = [asyncio.Queue() for _ in self.urls]
        deadline = time.monotonic() + deadline_s

        async def open_one(i: int) -> None:
            u = urllib.parse.urlsplit(self.urls[i % len(self.urls)])
            token = self.tokens[f"s{i % layers_after}"]
            head = (f"POST /sync/v2/stream HTTP/1.1\r\nHost: {u.hostname}\r\nAuthorization: Bearer "
                    f"{token}\r\nAccept: text/event-stream\r\nContent-Length: 0\r\n\r\n").encode()
            for attempt in range(attempts):
                client = None
                try:
                    _, client = await asyncio.wait_for(loop.create_connection(
                        lambda: StreamClient(self, head), u.hostname, u.port,
                        local_addr=(SOURCE_ADDRESSES[(i + attempt) % len(SOURCE_ADDRESSES)], 0)),
                        max(0.1, min(30.0, deadline - time.monotonic())))
                    stream_id = await asyncio.wait_for(
                        client.hello, max(0.1, min(30.0, deadline - time.monotonic())))
                    break
                except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
                    if client is not None:
                        client.close()
                    if attempt == attempts - 1 or time.monotonic() > deadline:
                        self._connect_failed(exc)
                        return
                    self.connect_retries += 1
                    await asyncio.sleep(random.uniform(0, 0.2 * 2 ** attempt))
            self.clients.append(client)
            for k in range(self.layers_per_client):
                layer = f"s{(i * self.layers_per_client + k) % layers_after}"
                queues[i % len(self.urls)].put_nowait((client, stream_id, layer))

        async def subscriber(http: Http, queue: asyncio.Queue) -> None:
            while (item := await queue.get()) is not None:
                client, stream_id, layer = item
                body = json.dumps({"document_id": self.document, "layer": layer,
                                   "since": since.get(layer, 0)}).encode()
                try:
                    status, _ = await http.request("POST", f"/sync/v2/stream/{stream_id}/subscriptions",
                                                   self.tokens[layer], body, client.stream_key)
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    self.subscribe_errors += 1
                    http.close()
                    http.reader = http.writer = None
                    continue
                if status != 200:
                    self.subscribe_errors += 1
                elif not client.closed:
                    client.layers.append(layer)
                    self.layer_subscribers[layer] = self.layer_subscribers.get(layer, 0) + 1

        per_server = concurrency // 4
        workers = [asyncio.create_task(subscriber(h, queues[k // per_server]))
                   for k, h in enumerate(subscribers)]
        pending = set()
        for n, i in enumerate(indices):
            if time.monotonic() > deadline:
                self.connect_errors["deadline"] = self.connect_errors.get("deadline", 0) + len(indices) - n
                break
            pending.add(asyncio.create_task(open_one(i)))
            if len(pending) >= concurrency:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if pending:
            await asyncio.wait(pending)
        while any(not q.empty() for q in queues) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for k, _ in enumerate(workers):
            queues[k // per_server].put_nowait(None)
        await asyncio.wait(workers, timeout=max(1.0, deadline - time.monotonic()))
        for h in subscribers:
            h.close()

    def counts(self) -> dict:
        return {"clients": len(self.clients), "connect_errors": self.connect_errors,
                "connect_retries": self.connect_retries, "subscribe_errors": self.subscribe_errors,
                "dropped": self.dropped, "layer_subscribers": self.layer_subscribers,
                "others": self.others}

    def close(self) -> None:
        for client in self.clients:
            client.close()


def _hold(conn, urls: list[str], document: str, layers_per_client: int, nofile: int) -> None:
    """A holder process: holds streams as the parent's commands on ``conn`` say
    (``connect``, ``measure`` on/off, ``close``) and answers each with its counts."""
    raise_nofile(nofile)
    streams = Streams(urls, document, layers_per_client)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        while True:
            command, args = await loop.run_in_executor(None, conn.recv)
            if command == "connect":
                streams.tokens.update(args["tokens"])
                await streams.connect(args["indices"], args["layers_after"], args["since"],
                                      args["deadline_s"])
                conn.send(streams.counts())
            elif command == "measure":
                streams.measuring = args
                if args:
                    streams.latencies, streams.arrived = [], {}
                    conn.send(None)
                else:
                    conn.send({**streams.counts(), "latencies": streams.latencies,
                               "arrived": streams.arrived})
            else:
                streams.close()
                conn.send(None)
                return

    asyncio.run(run())


class Load:
    """The parent's side: holder processes hold the streams (each within its open-files
    limit; the parent keeps none of them), the parent sends the syncs and measures.
    ``lost`` of a step = deliveries of a measured sync that did not arrive: for each sync
    answered 200, one per subscription of its layer held by a connected stream
    (``notice`` events are counted apart in ``others``: their changes are not on the
    stream)."""

    def __init__(self, servers: list[Server], document: str, holders: int = 1,
                 layers_per_client: int = 3, subscribers_per_layer: int = 20,
                 nofile: int = 65536):
        self.servers = servers
        self.document = document
        self.layers_per_client = layers_per_client
        self.subscribers_per_layer = subscribers_per_layer
        self.tokens: dict[str, str] = {}
        self.since: dict[str, int] = {}
        self.clients = 0  # streams opened so far (connected or not)
        self.counts: list[dict] = [{} for _ in range(holders)]
        self.sync_errors = 0
        context = multiprocessing.get_context("fork")
        self.holders = []
        for _ in range(holders):
            parent, child = context.Pipe()
            process = context.Process(target=_hold, daemon=True, args=(
                child, [s.url for s in servers], document, layers_per_client, nofile))
            process.start()
            child.close()
            self.holders.append((process, parent))

    def layer_token(self, layer: str) -> str:
        token = self.tokens.get(layer)
        if token is None:
            token = self.tokens[layer] = self.servers[0].token(self.document, layer)
        return token

    @property
    def connected(self) -> int:
        return sum(c.get("clients", 0) for c in self.counts)

    def layers(self) -> list[str]:
        count = max(1, self.connected * self.layers_per_client // self.subscribers_per_layer)
        return [f"s{i}" for i in range(count)]

    def layer_subscribers(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for c in self.counts:
            for layer, n in c.get("layer_subscribers", {}).items():
                total[layer] = total.get(layer, 0) + n
        return total

    def summed(self, name: str) -> Any:
        values = [c.get(name) for c in self.counts if name in c]
        if values and isinstance(values[0], dict):
            total: dict = {}
            for v in values:
                for k, n in v.items():
                    total[k] = total.get(k, 0) + n
            return total
        return sum(values)

    def errors(self) -> int:
        """Every failure counted so far (connects after retries, subscribes, syncs,
        dropped streams)."""
        return (sum(self.summed("connect_errors").values()) + self.summed("subscribe_errors")
                + self.sync_errors + self.summed("dropped"))

    async def _call(self, command: str, args: Any = None) -> list:
        loop = asyncio.get_running_loop()
        for _, conn in self.holders:
            conn.send((command, args))
        return list(await asyncio.gather(*(loop.run_in_executor(None, conn.recv)
                                           for _, conn in self.holders)))

    async def connect(self, count: int, deadline_s: float = 300) -> None:
        """Add ``count`` streams, each subscribed to 3 layers (spread over the servers and
        the holders)."""
        total = self.clients + count
        layers_after = max(1, total * self.layers_per_client // self.subscribers_per_layer)
        tokens = {f"s{i}": self.layer_token(f"s{i}") for i in range(layers_after)}
        loop = asyncio.get_running_loop()
        for k, (_, conn) in enumerate(self.holders):
            conn.send(("connect", {"indices": list(range(self.clients + k, total, len(self.holders))),
                                   "layers_after": layers_after, "since": dict(self.since),
                                   "tokens": tokens, "deadline_s": deadline_s}))
        self.counts = list(await asyncio.gather(*(loop.run_in_executor(None, conn.recv)
                                                  for _, conn in self.holders)))
        self.clients = total

    async def measure(self, rate: int, duration_s: float, writers_per_server: int = 8) -> dict:
        """Send ``rate`` syncs/s for ``duration_s`` (after a 1 s warm-up) to every layer in
        turn, on every server in turn; the latencies of what arrives meanwhile, and the
        deliveries of the measured syncs that did not arrive (``lost``)."""
        layers = self.layers()
        subscribers = self.layer_subscribers()
        conns = [(s, Http(s.url)) for s in self.servers for _ in range(writers_per_server)]
        queue: asyncio.Queue = asyncio.Queue()
        sync_rtts: list[float] = []
        count = {"n": 0}
        expected: dict[str, int] = {}  # measured record id -> subscriptions of its layer

        async def writer(server: Server, http: Http) -> None:
            while (item := await queue.get()) is not None:
                layer, n, measured = item
                rid = bench_id("SR", n)
                sent = time.monotonic()
                body = json.dumps({"client_id": "bench-writer", "since": self.since.get(layer, 0),
                                   "changes": [{"change_id": bench_id("SC", n), "op": "create",
                                                "id": rid,
                                                "content": annotation(n, customData={"t": sent})}]}).encode()
                try:
                    status, answer = await http.request(
                        "POST", f"/sync/v1/documents/{self.document}/layers/{layer}/sync",
                        self.layer_token(layer), body)
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    self.sync_errors += 1
                    http.close()
                    http.reader = http.writer = None
                    continue
                sync_rtts.append(time.monotonic() - sent)
                if status == 200:
                    self.since[layer] = max(self.since.get(layer, 0), answer["revision"])
                    if measured:
                        expected[rid] = subscribers.get(layer, 0)
                else:
                    self.sync_errors += 1

        tasks = [asyncio.create_task(writer(s, h)) for s, h in conns]
        base = int(time.time() * 1000) % 10_000_000 * 1000
        started = time.monotonic()
        warm = 1.0
        sent_measured = 0
        measuring = False
        while (elapsed := time.monotonic() - started) < warm + duration_s:
            if not measuring and elapsed >= warm:
                await self._call("measure", True)
                measuring = True
            due = int(elapsed * rate)
            while count["n"] < due:
                n = count["n"]
                queue.put_nowait((layers[n % len(layers)], base + n, measuring))
                count["n"] += 1
                sent_measured += measuring
            await asyncio.sleep(0.005)
        for _ in tasks:
            queue.put_nowait(None)
        await asyncio.wait(tasks, timeout=10)
        await asyncio.sleep(1.0)  # stragglers
        reports = await self._call("measure", False)
        self.counts = reports
        for _, h in conns:
            h.close()
        arrived: dict[str, int] = {}
        lat: list[float] = []
        for r in reports:
            lat.extend(x * 1e3 for x in r["latencies"])
            for rid, n in r["arrived"].items():
                arrived[rid] = arrived.get(rid, 0) + n
        lost = sum(max(0, want - arrived.get(rid, 0)) for rid, want in expected.items())
        duplicated = sum(max(0, arrived.get(rid, 0) - want) for rid, want in expected.items())
        return {"clients": self.connected, "subscriptions": sum(self.layer_subscribers().values()),
                "layers": len(layers), "rate": rate, "achieved_rate": sent_measured / duration_s,
                "deliveries": len(lat), "expected_deliveries": sum(expected.values()),
                "lost": lost, "duplicated": duplicated,
                "p50_ms": percentile(lat, 0.5), "p99_ms": percentile(lat, 0.99),
                "max_ms": max(lat) if lat else float("nan"),
                "sync_p50_ms": percentile([x * 1e3 for x in sync_rtts], 0.5),
                "sync_p99_ms": percentile([x * 1e3 for x in sync_rtts], 0.99)}

    async def close(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            await asyncio.wait_for(self._call("close"), 30)
        for process, conn in self.holders:
            process.join(5)
            if process.is_alive():
                process.kill()
            conn.close()


async def _knee(load: "Load", steps: list[int], rate: int, duration_s: float,
                p99_limit_ms: float, budget_s: float) -> dict:
    servers, holders = load.servers, len(load.holders)
    pids = [s.process.pid for s in servers]
    rows = []
    knee = None
    started = time.monotonic()
    rss0 = sum(rss_mb(p) for p in pids)
    try:
        for target in steps:
            if time.monotonic() - started > budget_s:
                break
            before_rss, before = sum(rss_mb(p) for p in pids), load.connected
            t0 = time.monotonic()
            await load.connect(target - load.clients,
                               deadline_s=max(10.0, budget_s - (time.monotonic() - started)))
            connect_s = time.monotonic() - t0
            await asyncio.sleep(2.0)
            idle_rss = sum(rss_mb(p) for p in pids)
            streams = sum(s.metric("layersync_open_streams") or 0 for s in servers)
            subs = sum(s.metric("layersync_stream_subscriptions") or 0 for s in servers)
            row = await load.measure(rate, duration_s)
            row.update({"server_rss_mb": round(sum(rss_mb(p) for p in pids), 1),
                        "server_rss_mb_each": [round(rss_mb(p), 1) for p in pids],
                        "idle_rss_mb": round(idle_rss, 1),
                        "kb_per_idle_client": round((idle_rss - before_rss) * 1024
                                                    / max(1, load.connected - before), 1),
                        "open_streams": streams, "subscriptions_on_server": subs,
                        "connect_s": round(connect_s, 1), "errors": load.errors(),
                        "connect_errors": load.summed("connect_errors"),
                        "connect_retries": load.summed("connect_retries"),
                        "subscribe_errors": load.summed("subscribe_errors"),
                        "sync_errors": load.sync_errors, "dropped": load.summed("dropped"),
                        "others": load.summed("others"), "holders": holders,
                        "generator_rss_mb": round(rss_mb(os.getpid()) + sum(
                            rss_mb(p.pid) for p, _ in load.holders), 1),
                        "load_avg_1m": round(os.getloadavg()[0], 2)})
            rows.append(row)
            print(json.dumps(row), flush=True)
            if row["p99_ms"] > p99_limit_ms or row["achieved_rate"] < 0.9 * rate:
                knee = row
                break
    finally:
        await load.close()
    passing = [r for r in rows if r is not knee]
    return {"steps": rows, "knee": knee, "largest_passing": passing[-1] if passing else None,
            "baseline_rss_mb": round(rss0, 1)}


#: Descriptors a holder process keeps for itself (its subscribe connections, the
#: interpreter's files) beside its streams.
HOLDER_SPARE_FDS = 500


def knee(servers: list[Server], document: str, steps: list[int], rate: int = 200,
         duration_s: float = 5.0, p99_limit_ms: float = 250.0, budget_s: float = 300) -> dict:
    """The knee search of the module docs (scenario 6 calls it; so does :func:`main`).
    The streams are held by as many holder processes as the open-files limit needs."""
    nofile = raise_nofile(max(steps) * 2 + 10_000)
    holders = max(1, -(-max(steps) // max(1000, nofile - HOLDER_SPARE_FDS)))
    load = Load(servers, document, holders, nofile=nofile)  # (forks: before any event loop)
    return asyncio.run(_knee(load, steps, rate, duration_s, p99_limit_ms, budget_s))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", default="1000,5000,10000,20000,30000,40000,50000")
    p.add_argument("--rate", type=int, default=200)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--budget", type=float, default=300.0, help="seconds for the whole search")
    p.add_argument("--p99-limit", type=float, default=250.0,
                   help="ms: the knee (the search stops at the first step past it)")
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
        result = knee(servers, "streams", steps, args.rate, args.duration, args.p99_limit,
                      budget_s=args.budget)
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
