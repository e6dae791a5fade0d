"""What collaboration permissions cost the server (docs/protocol.md, "Collaboration
permissions"): the server halves of scenario 2 (one sync of N creates) and scenario 3
(a one-record push woken into another client's long-poll), and a snapshot page read,
each with a JWT without the claim and with a reviewer's claim, alternating runs on one
real server over loopback (SQLite). Prints medians and the difference per record.

    .venv/bin/python bench/permissions_cost.py [--records 5000] [--reps 5] [--writes 200]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "server" / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from common_records import REVIEWER_CLAIMS  # noqa: E402
from conftest import change, note, start_server, stop_server  # noqa: E402
from layersync_server.tokens import generate_keypair  # noqa: E402

CLAIM = REVIEWER_CLAIMS


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--writes", type=int, default=200)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    private, public = generate_keypair("ES256")
    (tmp / "public.pem").write_bytes(public)
    process, srv = start_server(tmp, str(tmp / "db.sqlite"), private, tmp / "public.pem",
                                "--max-request-bytes", "64000000",
                                env={"LAYERSYNC_SERVER_MAX_PAGE_RECORDS": "100000"})
    try:
        doc = srv.new_document()
        modes = {"without claim": {}, "with claim": CLAIM}
        push = {m: [] for m in modes}
        read = {m: [] for m in modes}
        for _ in range(args.reps):
            for mode, claims in modes.items():
                layer = "p" + uuid.uuid4().hex[:10]
                headers = srv.auth(doc, layer, user_id="alice", **claims)
                body = {"since": 0, "changes": [change("create", f"r{i:06}", {**note(str(i)), "id": f"r{i:06}"})
                                                for i in range(args.records)]}
                t0 = time.perf_counter()
                answer = srv.http.post(srv.layer_url(doc, layer) + "/sync", json=body, headers=headers)
                push[mode].append(time.perf_counter() - t0)
                assert answer.status_code == 200 and len(answer.json()["accepted"]) == args.records
                t0 = time.perf_counter()
                page = srv.http.get(srv.layer_url(doc, layer) + "/records", headers=headers,
                                    params={"since": 0, "limit": args.records})
                read[mode].append(time.perf_counter() - t0)
                assert len(page.json()["records"]) == args.records
        latency = {m: [] for m in modes}
        for mode, claims in modes.items():
            layer = "l" + uuid.uuid4().hex[:10]
            writer = srv.auth(doc, layer, user_id="alice", **claims)
            reader = srv.auth(doc, layer, user_id="bob", **claims)
            import httpx
            with httpx.Client(base_url=srv.url, headers={"LayerSync-Protocol": "1"}) as poller:
                since = 0
                for i in range(args.writes):
                    got = {}

                    def poll():
                        got["r"] = poller.get(srv.layer_url(doc, layer) + "/changes",
                                              params={"since": since, "wait": 5}, headers=reader)
                        got["t"] = time.perf_counter()

                    thread = threading.Thread(target=poll)
                    thread.start()
                    time.sleep(0.005)  # the poll is parked
                    t0 = time.perf_counter()
                    sent = srv.http.post(srv.layer_url(doc, layer) + "/sync", headers=writer,
                                         json={"since": since, "changes": [change("create", f"w{i}", note())]})
                    thread.join()
                    latency[mode].append(got["t"] - t0)
                    since = sent.json()["revision"]
                    assert got["r"].json()["records"][0]["id"] == f"w{i}"
        n = args.records
        print(f"{'metric':58} {'without':>10} {'with':>10} {'diff':>8}")
        for name, data, scale, unit in (
                (f"scenario 2 server: one sync of {n} creates, records/s", push, None, "rec/s"),
                (f"snapshot page of {n} records, ms", read, 1e3, "ms"),
                (f"scenario 3 server: push -> long-poll answer p50, ms", latency, 1e3, "ms")):
            a, b = (statistics.median(data[m]) for m in modes)
            if scale is None:
                a, b = n / a, n / b
            else:
                a, b = a * scale, b * scale
            print(f"{name:58} {a:10.2f} {b:10.2f} {100 * (b - a) / a:+7.1f}%")
        for name, data in (("sync", push), ("snapshot", read)):
            a, b = (statistics.median(data[m]) for m in modes)
            print(f"per-record cost of the claim, {name}: {(b - a) / n * 1e6:+.2f} us")
    finally:
        stop_server(process, srv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
