"""The convergence test (issue 18 item 4): 3 client processes (convergence_worker.py, the Python
package over the C ABI) edit one layer at random through a fault proxy (delays, resets, lost
replies, stalls, 503s) with offline periods (the proxy resets everything), kill -9 of clients
(restarted on the same store), short-lived tokens (6 s; the ``request_token`` callback
reauthenticates) and a server restart. Then everything heals and it checks: every client equals
the server byte for byte, every acknowledged write is on the server in its last version, or
superseded by another acknowledged write, or reported through ``did_reject_changes``; no
record twice; ``PRAGMA integrity_check`` ok on every store.

Bounded in ``make test`` (``SOAK_SECONDS``, default 35 s of faults, about 60-90 s in all);
``make soak`` runs it longer. The seed is printed; ``SOAK_SEED=`` reproduces the schedule of
faults and edits (not the threads' interleaving).
"""
from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import REPO, corpus_pdf
from faultproxy import DROP_REPLY, FORWARD, RESET, Action, FaultProxy
from layersync.devserver import ReferenceServer

WORKER = Path(__file__).with_name("convergence_worker.py")
CLIENTS = 3


def reported_ids(worker_dir: Path) -> set[str]:
    """The record ids whose conflicts this worker's host was told of: every
    ``did_reject_changes`` of every incarnation (killed ones included: a report is stored
    in the transaction that adopts the server version and delivered again at the next
    open, so a kill -9 loses none), plus the store's durable reports read at the end
    (``Document.rejected_changes``). The one place the accounting reads reports."""
    out: set[str] = set()
    path = worker_dir / "reports.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            out.update(json.loads(line)["ids"])
    out.update(json.loads((worker_dir / "stored_reports.json").read_text()))
    return out


def acknowledged(worker_dir: Path) -> list[dict]:
    path = worker_dir / "acks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class Workers:
    def __init__(self, root: Path, url: str, document_id: str, key: Path, seed: int) -> None:
        self.root, self.url, self.document_id, self.key, self.seed = root, url, document_id, key, seed
        self.processes: dict[int, subprocess.Popen] = {}
        self.killed: dict[int, set[str]] = defaultdict(set)  # worker -> pids killed

    def dir(self, index: int) -> Path:
        path = self.root / f"w{index}"
        path.mkdir(exist_ok=True)
        return path

    def start(self, index: int) -> None:
        log = open(self.dir(index) / "worker.log", "ab")
        self.processes[index] = subprocess.Popen(
            [sys.executable, str(WORKER), str(self.dir(index)), self.url, self.document_id, str(self.key), str(self.seed)],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(WORKER.parent)})
        log.close()

    def kill(self, index: int) -> None:
        process = self.processes[index]
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            self.killed[index].add(str(process.pid))

    def check_alive(self, done: str | None = None) -> None:
        """Fails if a worker exited, unless it already wrote ``done`` (a worker exits by itself,
        with a status the test checks, once it wrote ``records.json``)."""
        for index, process in self.processes.items():
            if done is not None and (self.dir(index) / done).exists():
                continue
            if process.poll() is not None:
                log = (self.dir(index) / "worker.log").read_text(errors="replace")[-3000:]
                pytest.fail(f"worker {index} exited with {process.returncode} (a crash?):\n{log}")

    def wait_for(self, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all((self.dir(i) / name).exists() for i in self.processes):
                return
            self.check_alive(done=name)
            time.sleep(0.2)
        pytest.fail(f"workers did not reach {name!r} within {timeout} s")


def fault_rule(rng: random.Random):
    """Mostly forwards; sometimes delays, resets, loses the reply, stalls or answers 503."""
    def rule(request) -> Action:
        roll = rng.random()
        if roll < 0.70:
            return FORWARD
        if roll < 0.80:
            return Action.delay(rng.uniform(0.05, 1.0))
        if roll < 0.86:
            return RESET
        if roll < 0.92:
            return DROP_REPLY
        if roll < 0.96:
            return Action.status(503)
        return Action.stall(rng.uniform(0.5, 3.0))
    return rule


def stores(worker_dir: Path) -> list[Path]:
    return [p for p in (worker_dir / "store").rglob("*") if p.is_file() and p.read_bytes()[:16] == b"SQLite format 3\0"]


def test_three_clients_converge_through_faults_kills_expiry_and_a_restart(tmp_path):
    seconds = float(os.environ.get("SOAK_SECONDS", "35"))
    seed = int(os.environ.get("SOAK_SEED", random.randrange(1 << 32)))
    print(f"\nconvergence: SOAK_SEED={seed} SOAK_SECONDS={seconds}")
    rng = random.Random(seed)
    server = ReferenceServer(tmp_path / "server", command=[str(REPO / ".venv" / "bin" / "layersync-server")],
                             env={"LAYERSYNC_SERVER_JWT_LEEWAY_S": "0"})
    server.start()
    proxy = FaultProxy(server.url)
    workers = Workers(tmp_path, proxy.url, "soak", server.private_key, seed)
    events: list[str] = []
    try:
        server.upload(corpus_pdf("pdfjs-pr20043.pdf"), "soak")
        for index in range(CLIENTS):
            workers.start(index)
        proxy.set_rule(fault_rule(random.Random(rng.random())))
        restarted = False
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(1.0, 3.0))
            workers.check_alive()
            roll = rng.random()
            if roll < 0.25:
                index = rng.randrange(CLIENTS)
                events.append(f"kill -9 w{index}")
                workers.kill(index)
                workers.start(index)
            elif roll < 0.45:
                events.append("offline")
                proxy.set_rule(lambda request: RESET)
                proxy.cut_all()
                time.sleep(rng.uniform(1.0, 3.0))
                proxy.set_rule(fault_rule(random.Random(rng.random())))
            elif roll < 0.55 and not restarted or (not restarted and time.monotonic() > deadline - 5):
                events.append("server restart")
                restarted = True
                server.stop()
                server.start()
                proxy.set_upstream(server.url)
        if not restarted:
            events.append("server restart")
            server.stop()
            server.start()
            proxy.set_upstream(server.url)
        print("convergence: " + ", ".join(events))
        # Heal, quiesce, then a final round so each client has seen every other's last write.
        proxy.set_rule(None)
        for index in range(CLIENTS):
            (workers.dir(index) / "quiesce").write_text("")
        workers.wait_for("quiesced", 150)
        for index in range(CLIENTS):
            (workers.dir(index) / "final").write_text("")
        workers.wait_for("records.json", 150)
        for index, process in workers.processes.items():
            assert process.wait(timeout=60) == 0, f"worker {index} exited with {process.returncode}"

        on_server = server.annotations("soak")
        server_bytes = json.dumps(sorted(on_server.values(), key=lambda r: r["id"]), sort_keys=True)
        for index in range(CLIENTS):
            local = (workers.dir(index) / "records.json").read_text()
            if local != server_bytes:
                mine = {r["id"]: r for r in json.loads(local)}
                only_local = sorted(set(mine) - set(on_server))
                only_server = sorted(set(on_server) - set(mine))
                differ = sorted(i for i in set(mine) & set(on_server) if mine[i] != on_server[i])
                pytest.fail(f"client w{index} differs from the server (SOAK_SEED={seed}): only local {only_local[:5]}, "
                            f"only on the server {only_server[:5]}, different {[(i, mine[i].get('text'), on_server[i].get('text')) for i in differ[:5]]}")
            for store in stores(workers.dir(index)):
                with sqlite3.connect(store) as db:
                    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", f"{store} failed integrity_check"
        texts = [r["text"]["value"] for r in on_server.values() if r.get("creatorName") == "soak"]
        assert len(texts) == len(set(texts)), "a write was applied twice (duplicate records)"

        # Accounting: every acknowledged write is on the server in its last version, superseded
        # by another acknowledged write to that record, or reported.
        writes = {i: acknowledged(workers.dir(i)) for i in range(CLIENTS)}
        by_record: dict[str, list[tuple[int, dict]]] = defaultdict(list)
        for index, entries in writes.items():
            for entry in entries:
                by_record[entry["id"]].append((index, entry))
        lost = []
        for index, entries in writes.items():
            reported = reported_ids(workers.dir(index))
            for entry in entries:
                record = on_server.get(entry["id"])
                state = record["text"]["value"] if record else ""
                if state == entry["text"] or entry["id"] in reported:
                    continue
                # Superseded: the record ended in the version of another acknowledged write to it
                # (processes' clocks do not order writes; the server's final state does).
                if any(other is not entry and other["text"] == state for _, other in by_record[entry["id"]]):
                    continue
                lost.append(entry)
        total = sum(len(e) for e in writes.values())
        kills = sum(len(pids) for pids in workers.killed.values())
        print(f"convergence: {total} acknowledged writes, {len(on_server)} records, {kills} kill -9")
        assert not lost, f"acknowledged writes neither on the server nor superseded nor reported: {lost[:5]}"
        assert total > 20, "too few writes to mean anything"
    finally:
        for index in list(workers.processes):
            if workers.processes[index].poll() is None:
                workers.kill(index)
        proxy.close()
        server.stop()
