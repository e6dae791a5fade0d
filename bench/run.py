#!/usr/bin/env python3
"""LayerSync benchmarks (issue 7): how fast, how big, against what.

Runs every scenario on this machine in one run, each next to its baseline, prints a table
and writes ``bench/results/<timestamp>.json``. Not part of ``make test``.

    .venv/bin/python bench/run.py                 # full sizes (see SIZES)
    .venv/bin/python bench/run.py --smoke         # tiny sizes, < 60 s, for CI
    .venv/bin/python bench/run.py --only 1,4,5 --reps 5 --scale 0.2

Library: ``$LAYERSYNC_LIBRARY`` if set, else ``.build/release/liblayersync.so`` (build it
with ``swift build -c release -j 2 --product layersync``). Scenario 7 needs
``bench/setup.sh`` (the peers' virtualenv); without it the scenario is skipped, saying so.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if not os.environ.get("LAYERSYNC_LIBRARY"):
    os.environ["LAYERSYNC_LIBRARY"] = str(REPO / ".build" / "release" / "liblayersync.so")

import common  # noqa: E402
from common import REVIEWER_CLAIMS, Server, annotation, bench_id, percentile, summary  # noqa: E402

# Full sizes are the issue's; --smoke and --scale shrink them.
SIZES = {
    "download_annotations": 100_000, "pdf_bytes": 20 * 1024 * 1024,
    "push_records": 10_000,
    "latency_writes": 1_000, "idle_listeners": 100,
    "create_calls": 2_000,
    "server_long_polls": 1_000, "server_syncs_per_s": 200, "server_duration_s": 15,
    "stream_steps": "5000,10000,20000,30000,40000,50000", "stream_budget_s": 600,
    "peer_records": 10_000, "peer_latency_writes": 300,
}
SMOKE = {
    "download_annotations": 500, "pdf_bytes": 256 * 1024,
    "push_records": 200,
    "latency_writes": 20, "idle_listeners": 3,
    "create_calls": 100,
    "server_long_polls": 20, "server_syncs_per_s": 20, "server_duration_s": 2,
    "stream_steps": "20,50", "stream_budget_s": 60,
    "peer_records": 100, "peer_latency_writes": 10,
}
SCALABLE = {"download_annotations", "pdf_bytes", "push_records", "latency_writes", "create_calls",
            "server_duration_s", "peer_records", "peer_latency_writes"}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.sizes = dict(SMOKE if args.smoke else SIZES)
        if args.scale != 1.0:
            for k in SCALABLE:
                self.sizes[k] = max(1, int(self.sizes[k] * args.scale))
        for kv in args.size or []:
            k, v = kv.split("=", 1)
            self.sizes[k] = int(v)
        self.reps = args.reps or (1 if args.smoke else 3)
        self.tmp = Path(tempfile.mkdtemp(prefix="layersync-bench-"))
        self.rows: list[dict[str, Any]] = []
        self.details: dict[str, Any] = {}
        self.cache: dict[str, Any] = {}
        self.lib = Path(os.environ["LAYERSYNC_LIBRARY"])
        self.c_bench = HERE / ".build" / "ls_bench"

    def log(self, msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    # -- results ------------------------------------------------------------------------

    def row(self, scenario: str, metric: str, values: list[float], unit: str, *,
            target: str = "", ok: bool | None = None, baseline: list[float] | None = None,
            ratio: float | None = None, note: str = "") -> None:
        """One result row. ``ok`` is the verdict against ``target``; a row without either
        (ok None) is informational: no target, shown as "info" and never a MISS."""
        r = {"scenario": scenario, "metric": metric, "unit": unit, "value": summary(values),
             "target": target, "pass": ok, "note": note}
        if baseline is not None:
            r["baseline"] = summary(baseline)
        if ratio is not None:
            r["ratio"] = ratio
        self.rows.append(r)

    def skip(self, scenario: str, why: str) -> None:
        self.rows.append({"scenario": scenario, "metric": "(skipped)", "unit": "", "value": {"n": 0},
                          "target": "", "pass": None, "note": why})
        self.log(f"scenario {scenario} skipped: {why}")

    # -- helpers ------------------------------------------------------------------------

    def build_c(self) -> None:
        self.c_bench.parent.mkdir(exist_ok=True)
        src = HERE / "ls_bench.c"
        # The library's soname is liblayersync.so.0; SwiftPM's output has no such link.
        libdir = self.c_bench.parent / "lib"
        libdir.mkdir(exist_ok=True)
        for name in ("liblayersync.so", "liblayersync.so.0"):
            link = libdir / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(self.lib.resolve())
        subprocess.run(["cc", "-O2", "-std=c11", "-Wall", "-Wextra", f"-I{REPO / 'include'}", str(src),
                        "-o", str(self.c_bench), f"-L{libdir}", "-llayersync", "-lsqlite3",
                        "-lcurl", "-lpthread", f"-Wl,-rpath,{libdir}"], check=True)

    def c_run(self, *args: str, timeout: float = 900) -> dict[str, Any]:
        proc = subprocess.run([str(self.c_bench), *args], capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"ls_bench {args[0]} failed: {proc.stderr.strip()}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def server(self, name: str, extra: list[str] | None = None, env: dict[str, str] | None = None) -> Server:
        return Server(self.tmp / name, extra_args=extra, env=env).start()

    def storage(self, name: str) -> Path:
        p = self.tmp / "stores" / f"{name}-{time.monotonic_ns()}"
        p.mkdir(parents=True)
        return p

    def pdf(self, size: int) -> Path:
        path = self.tmp / f"doc-{size}.pdf"
        if not path.exists():
            common.make_pdf(path, size)
        return path

    # -- scenario 1 (+5): initial download ----------------------------------------------

    def s1_download(self) -> None:
        n, size = self.sizes["download_annotations"], self.sizes["pdf_bytes"]
        srv = self.server("s1", ["--max-request-bytes", str(16 * 1024 * 1024)])
        try:
            pdf = self.pdf(size)
            srv.upload_bytes(pdf.read_bytes(), "s1")
            seed_s = srv.seed("s1", "", n)
            self.log(f"s1: seeded {n} annotations in {seed_s:.1f} s, PDF {pdf.stat().st_size} bytes")
            jwt = srv.token("s1")
            # The URLs the client fetches: the PDF, then the record pages.
            urls = [f"{srv.url}/sync/v1/documents/s1/pdf"]
            since = 0
            while True:
                url = f"{srv.url}/sync/v1/documents/s1/layers/~/records?since={since}"
                req = common.urllib.request.Request(url, headers={"Authorization": f"Bearer {jwt}"})
                page = json.loads(common.urllib.request.urlopen(req, timeout=120).read())
                urls.append(url)
                if not page["has_more"]:
                    break
                since = page["next_since"]
            ls_s, base_s, curl_s, sqlite_s, rss = [], [], [], [], []
            for rep in range(self.reps):
                r = self.c_run("download", srv.url, str(self.storage("s1")), jwt)
                ls_s.append(r["download_s"])
                rss.append(r)
                c, s = self._download_baseline(urls, jwt, rep)
                curl_s.append(c), sqlite_s.append(s), base_s.append(c + s)
                self.log(f"s1 rep {rep}: layersync {r['download_s']:.3f} s, curl {c:.3f} s + sqlite3 {s:.3f} s")
            ratio = statistics_median(ls_s) / statistics_median(base_s)
            self.row("1 download", f"{n} annotations + {size / 2**20:.3g} MiB PDF, C ABI to did_finish_download",
                     ls_s, "s", target="<= 2x baseline", ok=ratio <= 2.0, baseline=base_s, ratio=ratio,
                     note=f"baseline = curl {statistics_median(curl_s):.3f} s + sqlite3 import "
                          f"{statistics_median(sqlite_s):.3f} s ({len(urls) - 1} record pages)")
            self.cache["rss"] = rss
            self.details["s1"] = {"annotations": n, "pdf_bytes": pdf.stat().st_size, "pages": len(urls) - 1,
                                  "curl_s": curl_s, "sqlite_s": sqlite_s, "runs": rss}
        finally:
            srv.stop()

    def _download_baseline(self, urls: list[str], jwt: str, rep: int) -> tuple[float, float]:
        out = self.tmp / f"curl-{rep}"
        out.mkdir()
        cfg = out / "curl.cfg"
        lines = [f'header = "Authorization: Bearer {jwt}"', 'header = "LayerSync-Protocol: 1"', "silent", "fail"]
        for i, u in enumerate(urls):
            lines += [f'url = "{u}"', f'output = "{out / (f"p{i}.json" if i else "doc.pdf")}"']
        cfg.write_text("\n".join(lines) + "\n")
        t0 = time.monotonic()
        subprocess.run(["curl", "-K", str(cfg)], check=True)
        curl_s = time.monotonic() - t0
        sql = ["PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;",
               "CREATE TABLE records(id TEXT PRIMARY KEY NOT NULL, revision INTEGER, content TEXT);", "BEGIN;"]
        for i in range(1, len(urls)):
            sql.append("INSERT INTO records SELECT value->>'id', value->>'revision', value->'content' "
                       f"FROM json_each(readfile('{out / f'p{i}.json'}'), '$.records');")
        sql.append("COMMIT;")
        t0 = time.monotonic()
        subprocess.run(["sqlite3", str(out / "base.sqlite")], input="\n".join(sql), text=True, check=True,
                       stdout=subprocess.DEVNULL)
        sqlite_s = time.monotonic() - t0
        shutil.rmtree(out, ignore_errors=True)
        return curl_s, sqlite_s

    # -- scenario 5: memory ------------------------------------------------------------

    def s5_memory(self) -> None:
        if "rss" not in self.cache:
            self.s1_download()
        runs = self.cache["rss"]
        deltas = [(r["rss_synced_kb"] - r["rss_empty_client_kb"]) / 1024 for r in runs]
        med = statistics_median(deltas)
        self.row("5 memory", f"RSS with {self.sizes['download_annotations']}-annotation layer open + synced, "
                             "above empty client", deltas, "MiB", target="< 50 MiB", ok=med < 50,
                 note=f"empty client {statistics_median([r['rss_empty_client_kb'] for r in runs]) / 1024:.1f} MiB; "
                      f"peak (VmHWM) {statistics_median([r['rss_peak_kb'] for r in runs]) / 1024:.1f} MiB")

    # -- scenario 2: push ----------------------------------------------------------------

    def modes(self) -> list[tuple[str, dict[str, Any] | None]]:
        """The JWTs scenarios 2 and 3 run with: ``("", None)`` (no collaboration claim);
        with ``--permissions`` also ``(" perm", REVIEWER_CLAIMS)``, the same run measured
        with a reviewer's claim. Callers run both in every repetition, in the order
        :meth:`in_turn` gives (machine drift falls on both alike)."""
        plain: list[tuple[str, dict[str, Any] | None]] = [("", None)]
        return plain + [(" perm", REVIEWER_CLAIMS)] if self.args.permissions else plain

    @staticmethod
    def in_turn(modes: list, rep: int) -> list:
        """``modes`` in repetition ``rep``'s order: as given in even repetitions, reversed in
        odd ones (ABBA), so a load that rises or falls during the run does not favour the
        mode that runs first."""
        return modes if rep % 2 == 0 else modes[::-1]

    def _permission_rows(self, scenario: str, metric: str, by_mode: dict[str, list[float]], unit: str,
                         higher_is_better: bool, *, verdict: bool = True, note: str = "") -> None:
        """With ``--permissions``: the row of ``metric`` measured with the claim, its
        baseline the same measurement without it, ratio with/without; target: within 10 %
        (issue 14). ``verdict`` False: the ratio is shown, no verdict (a tail percentile
        of one run)."""
        if " perm" not in by_mode:
            return
        without, with_claim = (statistics_median(by_mode[m]) for m in ("", " perm"))
        ratio = with_claim / without if without else float("nan")
        # the two runs of one repetition are neighbours in time: their ratios are the
        # paired view of the same comparison (less of the machine's drift in them)
        paired = [b / a for a, b in zip(by_mode[""], by_mode[" perm"]) if a]
        ok = (ratio >= 0.9 if higher_is_better else ratio <= 1.1) if verdict else None
        self.row(scenario, f"{metric}, JWT with collaboration_permissions (reviewer)", by_mode[" perm"], unit,
                 target=("with/without >= 0.90x" if higher_is_better else "with/without <= 1.10x") if verdict else "",
                 ok=ok, baseline=by_mode[""], ratio=ratio,
                 note=note or f"without the claim {_fmt(without)} {unit}, with {_fmt(with_claim)} {unit} "
                              f"(medians); per-repetition ratios {', '.join(f'{r:.2f}' for r in paired)}, "
                              f"median {statistics_median(paired):.2f}; claim "
                              f"{REVIEWER_CLAIMS['collaboration_permissions']}")

    def s2_push(self) -> None:
        import layersync
        n = self.sizes["push_records"]
        srv = self.server("s2")
        try:
            srv.upload_bytes(self.pdf(64 * 1024).read_bytes(), "s2")
            modes = self.modes()
            create_s, sync_s, rates, total_rates = ({m: [] for m, _ in modes} for _ in range(4))
            for rep in range(self.reps):
                for mode, claims in self.in_turn(modes, rep):
                    layer = f"push{rep}{mode.strip()}"
                    with layersync.Client(srv.url, str(self.storage("s2")), allow_insecure_http=True,
                                          sync_delay_s=None) as client:
                        client.wait_validated(timeout=30)
                        doc = client.document_for_jwt(srv.token("s2", layer, extra_claims=claims))
                        doc.download(wait=True, timeout=120)
                        t0 = time.monotonic()
                        for i in range(n):
                            doc.create_annotation(annotation(i))
                        t1 = time.monotonic()
                        doc.sync(wait=True, timeout=600)
                        t2 = time.monotonic()
                    assert layer in srv.admin_json("/api/documents/s2/layers")["data"], "no layer"
                    count = srv.admin_json(f"/api/documents/s2/layers/{layer}/document_info")["data"][
                        "layer"]["recordCount"]
                    if count != n:
                        raise RuntimeError(f"server holds {count} records of {n} after sync")
                    if claims is not None:  # the claim was in force: the records got its default group
                        first = srv.admin_json(f"/api/documents/s2/layers/{layer}/annotations")["data"][
                            "annotations"][0]
                        if first["group"] != claims["default_group"]:
                            raise RuntimeError(f"record {first['id']} is in group {first['group']!r}, "
                                               f"not the claim's {claims['default_group']!r}")
                    create_s[mode].append(t1 - t0), sync_s[mode].append(t2 - t1)
                    rates[mode].append(n / (t2 - t1)), total_rates[mode].append(n / (t2 - t0))
                    self.log(f"s2 rep {rep}{mode}: {n} creates {t1 - t0:.2f} s, sync {t2 - t1:.2f} s "
                             f"= {n / (t2 - t1):.0f} records/s")
            med = statistics_median(rates[""])
            self.row("2 push", f"{n} local creates then one sync, records/s of the sync (server included)",
                     rates[""], "rec/s", target=">= 10000 rec/s", ok=med >= 10_000,
                     note=f"sync {statistics_median(sync_s['']):.2f} s; creates (Python, via C ABI) "
                          f"{statistics_median(create_s['']):.2f} s; creates+sync "
                          f"{statistics_median(total_rates['']):.0f} rec/s")
            self._permission_rows("2 push", f"{n} local creates then one sync, records/s of the sync", rates,
                                  "rec/s", higher_is_better=True)
            self._permission_rows("2 push", f"{n} local creates + one sync, records/s of both", total_rates,
                                  "rec/s", higher_is_better=True)
            self.cache["push_rate"] = med
        finally:
            srv.stop()

    # -- scenario 3: propagation latency --------------------------------------------------

    def s3_latency(self) -> None:
        import layersync
        writes, idle = self.sizes["latency_writes"], self.sizes["idle_listeners"]
        srv = self.server("s3")
        idle_proc = None
        try:
            srv.upload_bytes(self.pdf(64 * 1024).read_bytes(), "s3")
            tokens = [srv.token("s3", f"idle{i}") for i in range(idle)]
            tok_file = self.tmp / "idle-tokens.json"
            tok_file.write_text(json.dumps(tokens))
            idle_proc = subprocess.Popen([sys.executable, str(HERE / "idle_listeners.py"), srv.url,
                                          str(self.storage("idle")), str(tok_file)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            line = idle_proc.stdout.readline()
            if not line.startswith("ready"):
                raise RuntimeError(f"idle listeners did not start: {line!r}")
            modes = self.modes()
            py50, py99, c50s, c99s = ({m: [] for m, _ in modes} for _ in range(4))
            last: dict[str, tuple[list[float], dict[str, Any]]] = {}  # mode -> its last run
            # one run of `writes` per mode; with --permissions `reps` runs per mode, alternating
            for rep in range(self.reps if len(modes) > 1 else 1):
                for mode, claims in self.in_turn(modes, rep):
                    suffix = f"{rep}{mode.strip()}" if len(modes) > 1 else ""
                    lat = self._latency_run(srv, "s3", writes, suffix, claims)
                    c_lat = self._latency_c(srv, "s3", writes, suffix, claims)
                    py50[mode].append(percentile(lat, 0.5) * 1e3), py99[mode].append(percentile(lat, 0.99) * 1e3)
                    c50s[mode].append(c_lat["p50_us"] / 1e3), c99s[mode].append(c_lat["p99_us"] / 1e3)
                    last[mode] = (lat, c_lat)
                    self.log(f"s3 rep {rep}{mode}: p50 C {c50s[mode][-1]:.2f} ms, Python {py50[mode][-1]:.2f} ms")
            open_polls = srv.metric("layersync_open_long_polls")
            open_streams = srv.metric("layersync_open_streams")
            lat, c_lat = last[""]
            p50, p99 = statistics_median(py50[""]), statistics_median(py99[""])
            c50, c99 = statistics_median(c50s[""]), statistics_median(c99s[""])
            self.row("3 latency", f"write+sync on A -> did_receive_changes on B, p50 ({writes} writes, "
                                  f"{idle} idle listeners), C ABI", c50s[""], "ms", target="< 10 ms", ok=c50 < 10,
                     note=f"listening on the change stream (protocol 2, the default); server open streams "
                          f"{open_streams}, long-polls {open_polls} during run; A's create_annotation p50 "
                          f"{c_lat['create_p50_us']:.0f} us of it")
            self.row("3 latency", "same, p99, C ABI", c99s[""], "ms", target="< 50 ms", ok=c99 < 50,
                     note=f"max {c_lat['max_us'] / 1e3:.1f} ms")
            self.row("3 latency", "same, p50, Python package (ctypes)", py50[""], "ms", target="< 10 ms",
                     ok=p50 < 10)
            self.row("3 latency", "same, p99, Python package (ctypes)", py99[""], "ms", target="< 50 ms",
                     ok=p99 < 50, note=f"max {max(lat) * 1e3:.1f} ms")
            self._permission_rows("3 latency", "p50, C ABI", c50s, "ms", higher_is_better=False)
            self._permission_rows("3 latency", "p99, C ABI", c99s, "ms", higher_is_better=False, verdict=False)
            self._permission_rows("3 latency", "p50, Python package", py50, "ms", higher_is_better=False)
            self._permission_rows("3 latency", "p99, Python package", py99, "ms", higher_is_better=False,
                                  verdict=False)
            self.cache["latency_p50_ms"] = p50
            self.details["s3"] = {"latencies_ms": [x * 1e3 for x in lat], "open_long_polls": open_polls,
                                  "open_streams": open_streams, "c_abi": c_lat, "p50_ms_by_claim": {
                                      "python": {("with" if m else "without"): v for m, v in py50.items()},
                                      "c_abi": {("with" if m else "without"): v for m, v in c50s.items()}}}
            self._listening_cost(srv, "s3")
        finally:
            if idle_proc is not None:
                idle_proc.stdin.close()
                try:
                    idle_proc.wait(30)
                except subprocess.TimeoutExpired:
                    idle_proc.kill()
            srv.stop()

    def _listening_cost(self, srv: Server, document: str, layers: int = 50) -> None:
        """Row "client listening on 50 layers": connections held and threads used by one
        client process (bench/listen_many.py), on the stream and, for comparison, after the
        fallback to per-layer long-polls (a server speaking protocol 1 only)."""
        tokens = self.tmp / "many-tokens.json"
        tokens.write_text(json.dumps([srv.token(document, f"many{i}", "carol") for i in range(layers)]))
        v1 = self.server("s3-v1", env={"LAYERSYNC_SERVER_PROTOCOL_MAX": "1"})
        try:
            v1.upload_bytes(self.pdf(64 * 1024).read_bytes(), document)
            v1_tokens = self.tmp / "many-tokens-v1.json"
            v1_tokens.write_text(json.dumps([v1.token(document, f"many{i}", "carol") for i in range(layers)]))
            # Both at once: each process counts only its own threads and its own connections
            # to its own server, and most of a run is listen_many.py's two 7 s settles.
            runs = {how: subprocess.Popen([sys.executable, str(HERE / "listen_many.py"), server.url,
                                           str(self.storage(f"many-{how}")), str(path)],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for how, server, path in (("stream", srv, tokens), ("long-poll", v1, v1_tokens))}
            found = {}
            try:
                for how, proc in runs.items():
                    out, err = proc.communicate(timeout=600)
                    if proc.returncode != 0:
                        raise RuntimeError(f"listen_many.py ({how}) exited with {proc.returncode}: {err.strip()}")
                    found[how] = json.loads(out.strip().splitlines()[-1])
                    self.log(f"s3 listening on {layers} layers, {how}: {found[how]}")
            finally:
                for proc in runs.values():
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
        finally:
            v1.stop()
        stream, poll = found["stream"], found["long-poll"]
        used = stream["threads_listening"] - stream["threads_before"]
        self.row("3 listening", f"client listening on {layers} layers: connections held (stream)",
                 [stream["connections"]], "connections", target="1", ok=stream["connections"] == 1
                 and stream["transport"] == "stream",
                 note=f"long-poll fallback: {poll['connections']} connections ({poll['transport']})")
        self.row("3 listening", f"client listening on {layers} layers: threads used (stream)", [used], "threads",
                 target="<= 2", ok=used <= 2,
                 note=f"threads before/while listening {stream['threads_before']}/{stream['threads_listening']}; "
                      f"long-poll fallback uses {poll['threads_listening'] - poll['threads_before']}")
        self.details["s3_listening"] = found

    def _latency_c(self, srv: Server, document: str, writes: int, suffix: str = "",
                   claims: dict[str, Any] | None = None) -> dict[str, Any]:
        """Scenario 3's loop through the C ABI (ls_bench latency) on layer ``live-c<suffix>``,
        the JWTs with ``claims`` added: percentiles in us."""
        storage = self.storage(f"{document}-c")
        layer = f"live-c{suffix}"
        return self.c_run("latency", srv.url, str(storage), srv.token(document, layer, "alice", claims),
                          srv.token(document, layer, "bob", claims), str(writes))

    def _latency_run(self, srv: Server, document: str, writes: int, suffix: str = "",
                     claims: dict[str, Any] | None = None) -> list[float]:
        """Scenario 3's loop through the Python package on layer ``live<suffix>``, the JWTs
        with ``claims`` added: the latencies in s."""
        import layersync
        from layersync.client import SYNC_OUTCOME, sync_outcome_predicate
        arrived: dict[str, float] = {}
        cond = threading.Condition()

        def on_changes(_doc: Any, changes: Any) -> None:
            t = time.monotonic()
            if isinstance(changes, str):
                changes = json.loads(changes)
            with cond:
                for key in ("created", "updated"):
                    for item in changes.get(key, []):
                        arrived[item if isinstance(item, str) else item.get("id")] = t
                cond.notify_all()

        with layersync.Client(srv.url, str(self.storage("a")), allow_insecure_http=True, sync_delay_s=None) as ca, \
             layersync.Client(srv.url, str(self.storage("b")), allow_insecure_http=True, sync_delay_s=None) as cb:
            ca.wait_validated(), cb.wait_validated()
            da = ca.document_for_jwt(srv.token(document, f"live{suffix}", "alice", claims))
            db = cb.document_for_jwt(srv.token(document, f"live{suffix}", "bob", claims))
            da.download(wait=True), db.download(wait=True)
            cb.on("did_receive_changes", on_changes)
            db.start_listening()
            time.sleep(0.5)
            lat = []
            for i in range(writes + 5):  # 5 warm-up writes
                t0 = time.monotonic()
                rid = da.create_annotation(annotation(i))["id"]
                mark = ca.mark()
                da.sync(wait=False)
                with cond:
                    if not cond.wait_for(lambda: rid in arrived, timeout=10):
                        raise RuntimeError(f"B did not receive write {i} within 10 s")
                    t1 = arrived[rid]
                ca.wait_for(SYNC_OUTCOME, since=mark, document=da, predicate=sync_outcome_predicate(), timeout=30)
                if i >= 5:
                    lat.append(t1 - t0)
            db.stop_listening()
        return lat

    # -- scenario 4: local write -----------------------------------------------------------

    def s4_local_write(self) -> None:
        n = self.sizes["create_calls"]
        srv = self.server("s4")
        try:
            srv.upload_bytes(self.pdf(64 * 1024).read_bytes(), "s4")
            jwt = srv.token("s4", "local")
            ls, raw = [], []
            for rep in range(self.reps):
                r = self.c_run("create", srv.url, str(self.storage("s4")), jwt, str(n))
                b = self.c_run("raw", str(self.storage("raw") / "raw.sqlite"), str(n))
                ls.append(r["p50_us"]), raw.append(b["p50_us"])
                self.log(f"s4 rep {rep}: create p50 {r['p50_us']:.1f} us (p99 {r['p99_us']:.1f}), "
                         f"raw insert+commit p50 {b['p50_us']:.1f} us (p99 {b['p99_us']:.1f})")
                self.details.setdefault("s4", []).append({"layersync": r, "raw": b})
            ratio = statistics_median(ls) / statistics_median(raw)
            self.row("4 local write", f"layersync_document_create_annotation p50 per call ({n} calls, C)",
                     ls, "us", target="<= 2x raw", ok=ratio <= 2.0, baseline=raw, ratio=ratio,
                     note="baseline: sqlite3 prepared INSERT + COMMIT, WAL, synchronous=FULL")
        finally:
            srv.stop()

    # -- scenario 6: server under long-polls --------------------------------------------------

    def s6_server(self) -> None:
        import longpoll_load
        polls, rate, dur = (self.sizes["server_long_polls"], self.sizes["server_syncs_per_s"],
                            self.sizes["server_duration_s"])
        srv = self.server("s6", ["--max-wait-s", "60"])
        try:
            srv.upload_bytes(self.pdf(64 * 1024).read_bytes(), "s6")
            r = longpoll_load.run([srv], [srv], srv, "s6", polls, rate, dur)
        finally:
            srv.stop()
        self._s6_rows("6 server (SQLite, 1 process)", r, polls, rate)
        self.details["s6_sqlite"] = r
        self._s6_stream("6 stream (SQLite, 1 process)", [self.server("s6s")], "s6_stream_sqlite")
        from pgcluster import PgCluster, find_bin_dir
        bin_dir = find_bin_dir()
        if bin_dir is None:
            self.skip("6 server (PostgreSQL)", "PostgreSQL binaries not found (scripts/setup.sh installs them)")
            return
        cluster = PgCluster(bin_dir)
        servers: list[Server] = []
        try:
            url = cluster.create_database("bench")
            key_dir = self.tmp / "s6pg-a"
            for name in ("s6pg-a", "s6pg-b"):
                s = Server(self.tmp / name, extra_args=["--db", url, "--max-wait-s", "60"])
                if name == "s6pg-b":  # same keys as process A
                    s.workdir.mkdir(parents=True, exist_ok=True)
                    for f in ("private.pem", "public.pem"):
                        shutil.copy(key_dir / f, s.workdir / f)
                servers.append(s.start())
            servers[0].upload_bytes(self.pdf(64 * 1024).read_bytes(), "s6")
            r = longpoll_load.run(writers=[servers[0]], pollers=[servers[1]], minter=servers[0],
                                  document="s6", polls=polls, rate=rate, duration_s=dur)
            self._s6_rows("6 server (PostgreSQL, 2 processes)", r, polls, rate,
                          extra="writes to process A, long-polls on process B; cluster runs with fsync=off")
            self.details["s6_postgres"] = r
            for s in servers:
                s.stop()
            servers = []
            url = cluster.create_database("bench_stream")
            for name in ("s6spg-a", "s6spg-b"):
                s = Server(self.tmp / name, extra_args=["--db", url])
                if name == "s6spg-b":
                    s.workdir.mkdir(parents=True, exist_ok=True)
                    for f in ("private.pem", "public.pem"):
                        shutil.copy(self.tmp / "s6spg-a" / f, s.workdir / f)
                servers.append(s.start())
            self._s6_stream("6 stream (PostgreSQL, 2 processes)", servers, "s6_stream_postgres",
                            stop=False)
        finally:
            for s in servers:
                s.stop()
            cluster.stop()

    def _s6_stream(self, name: str, servers: list[Server], key: str, stop: bool = True) -> None:
        """Scenario 6 on the change stream (protocol 2): stream_load.py's knee search,
        each client one stream of 3 layers, syncs at ``server_syncs_per_s``."""
        import stream_load
        steps = [int(x) for x in str(self.sizes["stream_steps"]).split(",")]
        rate = self.sizes["server_syncs_per_s"]
        try:
            servers[0].upload_bytes(self.pdf(64 * 1024).read_bytes(), "s6s")
            r = stream_load.knee(servers, "s6s", steps, rate, self.sizes["server_duration_s"] / 3,
                                 budget_s=float(self.sizes["stream_budget_s"]))
        finally:
            if stop:
                for s in servers:
                    s.stop()
        self.details[key] = r
        best = r["largest_passing"]
        knee = r["knee"]
        if best is None:
            self.row(name, "connected streaming clients with p99 < 250 ms", [0], "clients",
                     target=">= 20,000", ok=False, note=f"first step already past the limit: {knee}")
            return
        self.row(name, f"connected streaming clients (3 layers each) at p99 < 250 ms, "
                       f"{best['achieved_rate']:.0f}/{rate} syncs/s", [best["clients"]], "clients",
                 target=">= 20,000", ok=best["clients"] >= 20_000 and best["errors"] == 0
                 and best["lost"] == 0,
                 note=(f"largest passing step: p50 {best['p50_ms']:.1f} ms, p99 {best['p99_ms']:.1f} ms, "
                       f"{best['errors']} errors, {best['lost']} deliveries lost, "
                       f"server RSS {best['server_rss_mb']} MB ({best['kb_per_idle_client']} KiB per idle "
                       f"client); knee: " + (f"{knee['clients']} clients, p99 {knee['p99_ms']:.1f} ms, "
                                            f"RSS {knee['server_rss_mb']} MB" if knee else
                                            f"not reached up to {steps[-1]} clients or the time budget")))

    def _s6_rows(self, name: str, r: dict[str, Any], polls: int, rate: int, extra: str = "") -> None:
        self.row(name, f"p99 propagation, {r['open_long_polls']} long-polls held, "
                       f"{r['achieved_rate']:.0f}/{rate} syncs/s", [r["p99_ms"]], "ms", target="< 250 ms",
                 ok=r["p99_ms"] < 250 and r["achieved_rate"] >= 0.9 * rate and r["missing"] == 0,
                 note=f"p50 {r['p50_ms']:.1f} ms; sync round trip p50 {r['sync_p50_ms']:.1f} / "
                      f"p99 {r['sync_p99_ms']:.1f} ms; {r['received']} received, {r['missing']} missing, "
                      f"{r['errors']} errors. {extra}")

    # -- scenario 7: peers ---------------------------------------------------------------------

    def s7_peers(self) -> None:
        peers_py = HERE / ".venv-peers" / "bin" / "python"
        if not peers_py.exists():
            self.skip("7 peers", "bench/.venv-peers missing: run bench/setup.sh (needs PyPI)")
            return
        n, writes = self.sizes["peer_records"], self.sizes["peer_latency_writes"]
        # LayerSync's own numbers at the peers' sizes, measured in this run.
        ls_push, ls_lat = [], []
        srv = self.server("s7")
        try:
            import layersync
            srv.upload_bytes(self.pdf(64 * 1024).read_bytes(), "s7")
            for rep in range(self.reps):
                with layersync.Client(srv.url, str(self.storage("s7")), allow_insecure_http=True,
                                      sync_delay_s=None) as client:
                    client.wait_validated()
                    doc = client.document_for_jwt(srv.token("s7", f"p{rep}"))
                    doc.download(wait=True)
                    for i in range(n):
                        doc.create_annotation(annotation(i))
                    t0 = time.monotonic()
                    doc.sync(wait=True, timeout=600)
                    ls_push.append(n / (time.monotonic() - t0))
            lat = self._latency_run(srv, "s7", writes)
            ls_lat = [percentile(lat, 0.5) * 1e3, percentile(lat, 0.99) * 1e3]
            c_lat = self._latency_c(srv, "s7", writes)
            ls_lat_c = [c_lat["p50_us"] / 1e3, c_lat["p99_us"] / 1e3]
        finally:
            srv.stop()
        self.log(f"s7: layersync push {statistics_median(ls_push):.0f} rec/s, latency p50 {ls_lat_c[0]:.2f} ms "
                 f"(C ABI), {ls_lat[0]:.2f} ms (Python package)")
        floor = self._floor(writes)
        for peer in ("kinto", "yjs"):
            proc = subprocess.run([str(peers_py), str(HERE / "peers.py"), peer, "--records", str(n),
                                   "--writes", str(writes), "--reps", str(self.reps),
                                   "--workdir", str(self.tmp / f"peer-{peer}")],
                                  capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0:
                self.skip(f"7 peers ({peer})", f"peer run failed: {proc.stderr.strip()[-800:]}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            self.details[f"s7_{peer}"] = r
            label = {"kinto": "Kinto + kinto-http", "yjs": "pycrdt-websocket (Yjs)"}[peer]
            pr = statistics_median(ls_push) / statistics_median(r["push_rates"])
            self.row(f"7 vs {label}", f"push {n} records, LayerSync rec/s (baseline: peer rec/s)", ls_push,
                     "rec/s", target="beat peer", ok=pr > 1, baseline=r["push_rates"], ratio=pr,
                     note=r.get("note", ""))
            for how, (l50, l99) in (("C ABI", ls_lat_c), ("Python package", ls_lat)):
                lr = r["latency_p50_ms"] / l50
                self.row(f"7 vs {label}", f"propagation p50 over {writes} writes, LayerSync via {how} ms "
                                          "(baseline: peer ms)", [l50], "ms", target="beat peer", ok=lr > 1,
                         baseline=[r["latency_p50_ms"]], ratio=lr,
                         note=f"LayerSync p99 {l99:.1f} ms, peer p99 {r['latency_p99_ms']:.1f} ms; "
                              f"ratio = peer/LayerSync (>1 = LayerSync faster)")
            if "pull_rates" in r:
                self.details[f"s7_{peer}"]["note_pull"] = "pull rate of the peer's second client"
        self._floor_rows(floor, writes, ls_lat_c[0], ls_lat[0], self.details.get("s7_yjs"))

    def _floor(self, writes: int) -> dict[str, Any]:
        """Scenario 7's floor: ``ls_bench relay`` against ``relay.py`` (bare FastAPI/uvicorn
        relay, the server's uvicorn settings), B on the pushed stream (LayerSync's default
        transport) and on long-poll (its fallback), without and with A's fdatasync,
        alternating, ``reps`` times each. Informational: what the architecture costs before
        any of LayerSync's work. Keys: ``"<transport>/<none|fsync>"``."""
        from relay import Relay
        runs: dict[str, list[dict[str, Any]]] = {}
        relay = Relay(self.tmp / "relay").start()
        try:
            # The fdatasync'd file sits under the run's work dir, next to the client stores.
            data = self.storage("floor") / "fdatasync.dat"
            for rep in range(self.reps):
                for transport in ("stream", "longpoll"):
                    for how in ("none", "fsync"):
                        r = self.c_run("relay", relay.url, str(writes), how, str(data), transport, timeout=300)
                        runs.setdefault(f"{transport}/{how}", []).append(r)
                        self.log(f"s7 floor rep {rep} ({transport}, {how}): p50 {r['p50_us']:.0f} us, "
                                 f"p99 {r['p99_us']:.0f} us")
        finally:
            relay.stop()
        self.details["s7_floor"] = {"relay": relay.impl, **runs}
        return {"impl": relay.impl, **runs}

    def _floor_rows(self, floor: dict[str, Any], writes: int, ls_c_ms: float, ls_py_ms: float,
                    yjs: dict[str, Any] | None) -> None:
        def p50s(key: str) -> list[float]:
            return [r["p50_us"] / 1e3 for r in floor[key]]

        def tail(key: str) -> str:
            runs = floor[key]
            longpoll = statistics_median(p50s(key.replace("stream/", "longpoll/")))
            return (f"p90 {statistics_median([r['p90_us'] for r in runs]) / 1e3:.3f} ms, "
                    f"p99 {statistics_median([r['p99_us'] for r in runs]) / 1e3:.3f} ms; A's POST round trip "
                    f"p50 {statistics_median([r['post_p50_us'] for r in runs]):.0f} us; the same with B on "
                    f"long-poll (the fallback): p50 {longpoll:.3f} ms")

        bare, durable = statistics_median(p50s("stream/none")), statistics_median(p50s("stream/fsync"))
        fdatasync_us = statistics_median([r["fdatasync_p50_us"] for r in floor["stream/fsync"]])
        self.row("7 floor", "floor: bare relay, 2 libcurl clients, B on a pushed stream, no fsync, p50",
                 p50s("stream/none"), "ms",
                 note=f"floor: bare FastAPI/uvicorn relay between two libcurl clients, B reading an event "
                      f"stream, no auth, no storage (bench/relay.py with the server's uvicorn settings: "
                      f"{floor['impl']}; ls_bench relay, {writes} writes): {tail('stream/none')}")
        if yjs is not None:
            y = yjs["latency_p50_ms"]
            verdict = (f"LayerSync can beat Yjs only if its own work above this floor stays under "
                       f"{y - durable:.3f} ms" if y > durable else
                       "the floor alone is not faster than Yjs: beating Yjs needs a design change, not tuning")
            yjs_note = (f"Yjs (pycrdt-websocket, no fsync on its path) p50 {y:.3f} ms = floor {y - bare:+.3f} ms "
                        f"= floor with fdatasync {y - durable:+.3f} ms: {verdict}")
        else:
            yjs_note = "Yjs not measured in this run"
        self.row("7 floor", "floor: same + A's 4 KiB pwrite + fdatasync first, p50", p50s("stream/fsync"), "ms",
                 note=f"floor with rule 1's least cost (one 4 KiB page overwritten + fdatasync on the disk of "
                      f"the client stores, p50 {fdatasync_us:.0f} us): {tail('stream/fsync')}. LayerSync minus "
                      f"this floor (its own overhead): C ABI (FULL) {ls_c_ms:.3f} - {durable:.3f} = "
                      f"{ls_c_ms - durable:+.3f} ms, Python package {ls_py_ms:.3f} - {durable:.3f} = "
                      f"{ls_py_ms - durable:+.3f} ms. {yjs_note}")
        self.details["s7_floor"].update({"p50_ms_none": bare, "p50_ms_fsync": durable,
                                         "layersync_minus_floor_ms": {"c_abi": ls_c_ms - durable,
                                                                      "python": ls_py_ms - durable}})

    # -- run -------------------------------------------------------------------------------

    def run(self) -> int:
        if not self.lib.exists():
            print(f"library not found: {self.lib} (swift build -c release -j 2 --product layersync)", file=sys.stderr)
            return 2
        self.build_c()
        scenarios: dict[str, Callable[[], None]] = {
            "1": self.s1_download, "5": self.s5_memory, "2": self.s2_push, "3": self.s3_latency,
            "4": self.s4_local_write, "6": self.s6_server, "7": self.s7_peers}
        only = self.args.only.split(",") if self.args.only else list(scenarios)
        started = time.time()
        failed = 0
        for key in only:
            self.log(f"scenario {key} ...")
            try:
                scenarios[key]()
            except Exception as exc:  # one broken scenario must not hide the others
                failed += 1
                traceback.print_exc()
                self.rows.append({"scenario": key, "metric": "(error)", "unit": "", "value": {"n": 0},
                                  "target": "", "pass": False, "note": f"{type(exc).__name__}: {exc}"})
        self.report(time.time() - started)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return 1 if failed else 0

    def report(self, elapsed: float) -> None:
        out = {"timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "machine": common.machine(), "library": str(self.lib), "smoke": self.args.smoke,
               "reps": self.reps, "sizes": self.sizes, "elapsed_s": round(elapsed, 1),
               "git": _git_head(), "results": self.rows, "details": self.details}
        results_dir = Path(self.args.out)
        results_dir.mkdir(parents=True, exist_ok=True)
        path = results_dir / (dt.datetime.now().strftime("%Y%m%d-%H%M%S") + ("-smoke" if self.args.smoke else "") + ".json")
        path.write_text(json.dumps(out, indent=1))
        m = out["machine"]
        print()
        print(f"machine: {m.get('cpu', '?')}, {m['cpus']} CPUs, {m.get('mem_gb', '?')} GB, "
              f"load {tuple(round(x, 2) for x in m.get('load_avg', ()))}; reps {self.reps}; {elapsed:.0f} s")
        print(format_table(self.rows))
        print(f"\nwrote {path}")


def statistics_median(v: list[float]) -> float:
    import statistics
    return statistics.median(v)


def _fmt(x: float) -> str:
    if x != x:
        return "nan"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def format_table(rows: list[dict[str, Any]]) -> str:
    head = ["scenario", "metric", "median", "spread", "baseline", "ratio", "target", "result"]
    lines = []
    for r in rows:
        v = r["value"]
        med = f"{_fmt(v['median'])} {r['unit']}" if v.get("n") else "-"
        spread = f"{_fmt(v['min'])}..{_fmt(v['max'])}" if v.get("n", 0) > 1 else ""
        base = f"{_fmt(r['baseline']['median'])}" if r.get("baseline", {}).get("n") else ""
        ratio = f"{r['ratio']:.2f}x" if r.get("ratio") is not None else ""
        # pass None: no verdict, either a skipped scenario or an informational row (no target).
        res = ("ERROR" if r["metric"] == "(error)" else "skip" if r["metric"] == "(skipped)"
               else {True: "PASS", False: "MISS", None: "info"}[r["pass"]])
        lines.append([r["scenario"], r["metric"], med, spread, base, ratio, r["target"], res])
    widths = [max(len(h), *(min(len(l[i]), 70) for l in lines)) if lines else len(h) for i, h in enumerate(head)]
    def fmt(cells: list[str]) -> str:
        return " | ".join(c[:70].ljust(w) for c, w in zip(cells, widths))
    out = [fmt(head), "-+-".join("-" * w for w in widths)] + [fmt(l) for l in lines]
    notes = [f"  [{r['scenario']}] {r['note']}" for r in rows if r.get("note")]
    return "\n".join(out + ["", "notes:"] + notes)


def _git_head() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return ""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition (CI)")
    p.add_argument("--reps", type=int, help="repetitions per scenario (default 3, smoke 1)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the scalable sizes")
    p.add_argument("--size", action="append", help="override one size, e.g. --size push_records=5000")
    p.add_argument("--only", help="comma-separated scenarios: 1,2,3,4,5,6,7")
    p.add_argument("--out", default=str(HERE / "results"), help="directory of the JSON results")
    p.add_argument("--permissions", action="store_true",
                   help="scenarios 2 and 3 also with a reviewer's collaboration_permissions claim in the "
                        "JWTs, alternating with the plain JWT each repetition; rows give both and the ratio")
    return Bench(p.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
