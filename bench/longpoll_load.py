"""Scenario 6 load: many long-polls held open while syncs arrive at a fixed rate.

Plain HTTP/1.1 over asyncio streams (no client library), so that the load generator costs
as little CPU as possible next to the server on the same machine. Every poller holds one
keep-alive connection and loops on ``GET .../changes?since=REV&wait=50`` on its own layer;
writers send ``POST .../sync`` with one create, spread round-robin over the layers at
``rate`` per second. Propagation = time from just before a sync request is written to the
moment a long-poll response carrying that record has been read.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import time
import urllib.parse
from typing import Any

from common import Server, annotation, bench_id, percentile


class Conn:
    def __init__(self, url: str) -> None:
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, token: str, body: bytes | None = None) -> tuple[int, Any]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Authorization: Bearer {token}\r\nLayerSync-Protocol: 1\r\n")
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + (body or b""))
        assert self.reader is not None
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("connection closed")
        status = int(status_line.split()[1])
        length, chunked = 0, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            k = k.strip().lower()
            if k == "content-length":
                length = int(v)
            elif k == "transfer-encoding" and "chunked" in v.lower():
                chunked = True
        if chunked:
            data = b""
            while True:
                size = int((await self.reader.readline()).strip(), 16)
                if size == 0:
                    await self.reader.readline()
                    break
                data += await self.reader.readexactly(size)
                await self.reader.readline()
        else:
            data = await self.reader.readexactly(length)
        return status, json.loads(data) if data else None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _run(writers: list[Server], pollers: list[Server], minter: Server, document: str,
               polls: int, rate: int, duration_s: float, writer_conns: int = 32) -> dict[str, Any]:
    layers = [f"lp{i}" for i in range(polls)]
    tokens = {layer: minter.token(document, layer) for layer in layers}
    sent: dict[str, float] = {}
    latencies: list[float] = []
    sync_rtts: list[float] = []
    errors = 0
    stop = asyncio.Event()
    measuring = {"on": False}

    async def poller(i: int, layer: str) -> None:
        nonlocal errors
        srv = pollers[i % len(pollers)]
        conn = Conn(srv.url)
        base = f"/sync/v1/documents/{document}/layers/{layer}"
        status, body = await conn.request("GET", f"{base}/records?since=0", tokens[layer])
        since = body["revision"]
        ready.append(1)
        while not stop.is_set():
            try:
                status, body = await conn.request("GET", f"{base}/changes?since={since}&wait=50", tokens[layer])
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                if stop.is_set():
                    break
                errors += 1
                conn.close()
                conn = Conn(srv.url)
                continue
            t = time.monotonic()
            if status != 200:
                errors += 1
                await asyncio.sleep(0.1)
                continue
            for rec in body["records"]:
                t0 = sent.get(rec["id"])
                if t0 is not None and measuring["on"]:
                    latencies.append(t - t0)
                    received.add(rec["id"])
            since = max(since, body.get("next_since") or 0, body["revision"] if not body.get("has_more") else 0)
        conn.close()

    ready: list[int] = []
    received: set[str] = set()
    tasks = [asyncio.create_task(poller(i, layer)) for i, layer in enumerate(layers)]
    while len(ready) < polls:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # let every long-poll reach the server
    open_polls = sum((s.metric("layersync_open_long_polls") or 0) for s in pollers)

    queue: asyncio.Queue[tuple[str, int] | None] = asyncio.Queue()
    since_of: dict[str, int] = {layer: 0 for layer in layers}
    measured_ids: list[str] = []

    async def writer(k: int) -> None:
        nonlocal errors
        srv = writers[k % len(writers)]
        conn = Conn(srv.url)
        while True:
            item = await queue.get()
            if item is None:
                break
            layer, n = item
            rid = bench_id("LP", n)
            body = json.dumps({"client_id": f"bench-writer-{k}", "epoch": None, "since": since_of[layer],
                               "changes": [{"change_id": bench_id("CH", n), "op": "create", "id": rid,
                                            "content": annotation(n)}]}).encode()
            t0 = time.monotonic()
            sent[rid] = t0
            if measuring["on"]:
                measured_ids.append(rid)
            try:
                status, resp = await conn.request("POST", f"/sync/v1/documents/{document}/layers/{layer}/sync",
                                                  tokens[layer], body)
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                errors += 1
                conn.close()
                conn = Conn(srv.url)
                continue
            sync_rtts.append(time.monotonic() - t0)
            if status != 200 or not resp.get("accepted"):
                errors += 1
            else:
                since_of[layer] = max(since_of[layer], resp["revision"])
        conn.close()

    wtasks = [asyncio.create_task(writer(k)) for k in range(writer_conns)]
    layer_cycle = itertools.cycle(layers)
    warmup_s = min(1.0, duration_s / 4)
    start = time.monotonic()
    n = 0
    measure_start = None
    while True:
        now = time.monotonic()
        elapsed = now - start
        if elapsed >= warmup_s + duration_s:
            break
        if elapsed >= warmup_s and measure_start is None:
            measuring["on"] = True
            measure_start, n_at_measure = now, n
        due = int(elapsed * rate)
        while n < due:
            queue.put_nowait((next(layer_cycle), n))
            n += 1
        await asyncio.sleep(0.002)
    measured_sent = n - n_at_measure
    measure_end = time.monotonic()
    for _ in wtasks:
        queue.put_nowait(None)
    await asyncio.gather(*wtasks)
    await asyncio.sleep(2.0)  # stragglers
    measuring["on"] = False
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    missing = sum(1 for rid in measured_ids if rid not in received)
    lat_ms = [x * 1e3 for x in latencies]
    return {"long_polls": polls, "open_long_polls": open_polls, "rate": rate,
            "achieved_rate": measured_sent / (measure_end - measure_start), "duration_s": duration_s,
            "sent": len(measured_ids), "received": len(latencies), "missing": missing, "errors": errors,
            "p50_ms": percentile(lat_ms, 0.5), "p99_ms": percentile(lat_ms, 0.99),
            "max_ms": max(lat_ms) if lat_ms else float("nan"),
            "sync_p50_ms": percentile([x * 1e3 for x in sync_rtts], 0.5),
            "sync_p99_ms": percentile([x * 1e3 for x in sync_rtts], 0.99)}


def run(writers: list[Server], pollers: list[Server], minter: Server, document: str, polls: int,
        rate: int, duration_s: float) -> dict[str, Any]:
    return asyncio.run(_run(writers, pollers, minter, document, polls, rate, duration_s))
