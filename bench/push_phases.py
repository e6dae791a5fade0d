"""Scenario 2's push, the server's half alone: its cost per pushed record, phase by phase.

Replays the sync requests of a push of ``--records`` creates (the engine's request shape
and batch size, ``common_records.annotation``) through the server's own functions, in
this process, on a fresh SQLite store, with the GC settings of ``layersync-server
serve``. Phases, per request: ``parse`` (``parse_sync_request``: JSON, change ids, the
contents' stored texts), ``apply`` (the rules, ``changes.apply_changes``: validation,
record schema, the writes buffered), ``flush`` (the batched INSERTs), ``page`` (the
answer's page), ``commit``, ``answer`` (``sync_answer`` and its encoding). Not here: HTTP,
the JWT, the event loop and the thread hop, about 4k instructions per pushed record of a
whole server process's 130k (callgrind over ``layersync-server serve``, scenario 2).

    .venv/bin/python bench/push_phases.py                # us per record, median of 5 runs
    .venv/bin/python bench/push_phases.py --callgrind    # instructions per record (valgrind)

``--callgrind`` runs this script again under ``valgrind --tool=callgrind``, which dumps
its counters at every phase boundary (``--dump-before=os_getppid``: the replay calls
``os.getppid()`` there), and sums them per phase: instruction counts do not depend on the
machine's load, wall-clock times do. The layer's epoch is random (printed): answer
encoding used to depend on its text.
"""
from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common_records import annotation, bench_id  # noqa: E402
from layersync_server.auth import Grant  # noqa: E402
from layersync_server.changes import answer_page, apply_changes, parse_sync_request, sync_answer  # noqa: E402
from layersync_server.storage.base import NewDocument  # noqa: E402
from layersync_server.storage.sqlite import SqliteStorage  # noqa: E402
from layersync_server.wire_json import encode_response  # noqa: E402

PHASES = ("parse", "apply", "flush", "page", "commit", "answer")
PAGE_SIZE = 1000


def bodies(records: int, batch: int) -> list[bytes]:
    """The engine's sync requests for ``records`` new notes, ``batch`` changes each
    (``since`` as the engine sends it: the revision the previous answer gave). Ids are
    ULIDs as the engine makes them (a millisecond time, then random characters; ascending):
    ``bench_id``'s long runs of ``0`` would each cost the parse's scan for long numbers."""
    rnd = random.Random(16)
    millis = 1_796_198_290_059

    def ulid(n: int) -> str:
        return bench_id("", (millis + n // 4) * 2**80 + rnd.getrandbits(80))

    out = []
    for start in range(0, records, batch):
        changes = []
        for i in range(start, min(records, start + batch)):
            record_id = ulid(2 * i)
            changes.append({"change_id": ulid(2 * i + 1), "op": "create", "id": record_id,
                            "content": annotation(i, record_id)})
        out.append(json.dumps({"client_id": ulid(0), "epoch": None, "since": start,
                               "changes": changes}, separators=(",", ":")).encode())
    return out


def replay(raws: list[bytes], work: Path, mark) -> str:
    """One push on a fresh store; ``mark(phase)`` at each phase's start. Returns the epoch."""
    storage = SqliteStorage(work / f"s{time.monotonic_ns()}.sqlite")
    storage.create_document(NewDocument("doc", "t", b"%PDF", "0" * 64, 1))
    grant = Grant("doc", "push", "bench", frozenset({"read-document", "write"}))
    epoch = storage.ensure_layer("doc", "push").epoch
    for raw in raws:
        mark("parse")
        body = parse_sync_request(raw.replace(b'"epoch":null', b'"epoch":"%s"' % epoch.encode(), 1))
        with storage.write_layer("doc", "push") as writer:
            mark("apply")
            result = apply_changes(writer, body.changes, grant.user_id, body.checked,
                                   body.content_texts, grant)
            mark("flush")
            writer.flush()
            mark("page")
            pushed = result, answer_page(writer, body.since, PAGE_SIZE, frozenset(result.own_revisions))
            mark("commit")
        state = writer.layer
        mark("answer")
        answer = sync_answer(state, pushed, grant, body.since)
        assert not answer["rejected"] and len(answer["accepted"]) == len(body.changes), "push failed"
        encode_response(answer)
        mark("end")
    storage.close()
    return epoch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1000, help="changes per request (the engine "
                        "sent 1000 notes, ~380 kB, per request in scenario 2)")
    parser.add_argument("--callgrind", action="store_true", help="instructions per record (valgrind)")
    parser.add_argument("--marks", action="store_true", help=argparse.SUPPRESS)  # the run under valgrind
    args = parser.parse_args()
    raws = bodies(args.records, args.batch)
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)  # as `serve` (server.py)
    with tempfile.TemporaryDirectory(prefix="push-phases-") as tmp:
        work = Path(tmp)
        if args.callgrind:
            return _callgrind(args, work)
        replay(raws, work, lambda phase: None)  # warm-up: imports, statement caches
        if args.marks:
            names: list[str] = []

            def mark(phase: str) -> None:
                names.append(phase)
                os.getppid()  # valgrind dumps its counters here

            epoch = replay(raws, work, mark)
            print(json.dumps({"epoch": epoch, "marks": names}))
            return 0
        runs: dict[str, list[float]] = {phase: [] for phase in PHASES}
        for _ in range(5):
            stamps: list[tuple[str, float]] = []
            epoch = replay(raws, work, lambda phase: stamps.append((phase, time.perf_counter())))
            sums = dict.fromkeys(PHASES, 0.0)
            for (phase, start), (_, end) in zip(stamps, stamps[1:]):
                if phase in sums:
                    sums[phase] += end - start
            for phase in PHASES:
                runs[phase].append(sums[phase])
        _table({phase: statistics.median(v) * 1e6 / args.records for phase, v in runs.items()},
               "us/record", f"median of 5 runs; load {os.getloadavg()[0]:.2f}; epoch {epoch}")
    return 0


def _callgrind(args, work: Path) -> int:
    out = work / "cg.out"
    proc = subprocess.run(["valgrind", "--tool=callgrind", "--dump-before=os_getppid",
                           f"--callgrind-out-file={out}", sys.executable, __file__, "--marks",
                           "--records", str(args.records), "--batch", str(args.batch)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        return 1
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    # dump k+1 holds what ran from mark k to mark k+1 (dump 1: start-up and warm-up)
    totals = dict.fromkeys(PHASES, 0)
    for number, phase in enumerate(run["marks"][:-1], start=2):
        text = Path(f"{out}.{number}").read_text()
        if phase in totals:
            totals[phase] += int(re.search(r"^summary: (\d+)", text, re.M).group(1))
    for leftover in glob.glob(f"{out}*"):
        os.unlink(leftover)
    _table({phase: count / args.records for phase, count in totals.items()}, "Ir/record",
           f"callgrind instructions; epoch {run['epoch']}")
    return 0


def _table(per_record: dict[str, float], unit: str, note: str) -> None:
    for phase, value in per_record.items():
        print(f"{phase:8s} {value:10.2f} {unit}" if unit.startswith("us") else f"{phase:8s} {value:10.0f} {unit}")
    total = sum(per_record.values())
    print(f"{'total':8s} {total:10.2f} {unit}" if unit.startswith("us") else f"{'total':8s} {total:10.0f} {unit}")
    print(f"({note})")


if __name__ == "__main__":
    raise SystemExit(main())
