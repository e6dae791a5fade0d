"""Durability under kill -9 while server changes stream in (ARCHITECTURE.md §4 rule 1,
docs/durability.md): a child process (stream_kill9_worker.py) listens on a layer over the
change stream while the server's changes pour in, and makes local edits; it is SIGKILLed at
random moments, several times over the same storage. After every kill, read straight from
the layer's SQLite file:

- every local edit whose API call had returned is there (FULL commit: durable at return);
- the server side of the store is exactly the server's records up to the committed cursor
  (`since`): the server changes, committed without an fsync (NORMAL), are never torn — the
  cursor commits with the records it covers;

and at the end a client on the same storage resumes from that cursor: it receives exactly the
server's records above it, each once, and then holds all of them.

LAYERSYNC_STREAM_KILL9_SEED reproduces a run; the seed is printed.
"""
from __future__ import annotations

import glob
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from conftest import WAIT_S
from test_change_stream import post_server_note, wait_until

WORKER = Path(__file__).with_name("stream_kill9_worker.py")
ITERATIONS = 6


def server_records(server, doc_id: str, layer: str, jwt: str) -> dict[str, int]:
    """``{id: revision}`` of the layer's live records (v1 ``GET records`` pages)."""
    out: dict[str, int] = {}
    since = 0
    while True:
        url = f"{server.url}/sync/v1/documents/{doc_id}/layers/{layer}/records?since={since}"
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {jwt}", "LayerSync-Protocol": "1"})
        with urllib.request.urlopen(request, timeout=30) as response:
            page = json.loads(response.read())
        for record in page["records"]:
            if record.get("deleted"):
                out.pop(record["id"], None)
            else:
                out[record["id"]] = record["revision"]
        if not page["has_more"]:
            return out
        since = page["next_since"]


def read_store(storage: Path) -> tuple[int, dict[str, int], set[str]]:
    """(committed cursor, {id: server revision} of the server side, ids with local content or a queued change)."""
    (path,) = glob.glob(str(storage / "**" / "layer.sqlite"), recursive=True)
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        since = int(dict(db.execute("SELECT key, value FROM meta").fetchall()).get("since") or 0)
        server_side = {rid: rev for rid, rev, deleted in
                       db.execute("SELECT id, server_revision, server_deleted FROM records WHERE server_revision IS NOT NULL")
                       if not deleted}
        local = {rid for (rid,) in db.execute("SELECT id FROM records WHERE content IS NOT NULL")}
        local |= {rid for (rid,) in db.execute("SELECT record_id FROM pending_changes")}
        return since, server_side, local
    finally:
        db.close()


def test_kill9_while_server_changes_stream_in(make_client, server, uploaded, tmp_path):
    seed = int(os.environ.get("LAYERSYNC_STREAM_KILL9_SEED", random.randrange(1 << 30)))
    print(f"LAYERSYNC_STREAM_KILL9_SEED={seed}")
    rng = random.Random(seed)
    doc_id = uploaded()
    layer = "streamed"
    jwt = server.mint_token(doc_id, layer=layer, user_id="alice")
    storage = tmp_path / "killed"
    acked: set[str] = set()

    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            post_server_note(server, doc_id, layer, f"server {n}")
            n += 1
            time.sleep(0.003)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    cursors = []
    try:
        for iteration in range(ITERATIONS):
            child = subprocess.Popen([sys.executable, str(WORKER), server.url, str(storage), jwt, str(iteration)],
                                     stdout=subprocess.PIPE, text=True, env=os.environ.copy())
            try:
                assert child.stdout is not None
                assert child.stdout.readline().strip() == "R", "the worker did not start listening"
                deadline = time.monotonic() + rng.uniform(0.3, 1.5)
                lines: list[str] = []
                reader = threading.Thread(target=lambda: lines.extend(child.stdout), daemon=True)
                reader.start()
                time.sleep(max(0.0, deadline - time.monotonic()))
                child.send_signal(signal.SIGKILL)
                assert child.wait(timeout=WAIT_S) == -signal.SIGKILL
                reader.join(timeout=WAIT_S)
            finally:
                if child.poll() is None:
                    child.kill()
            acked |= {line.split()[1] for line in lines if line.startswith("E ")}
            since, server_side, local = read_store(storage)
            cursors.append(since)
            missing = acked - local
            assert not missing, f"iteration {iteration}: acknowledged local edits lost by kill -9: {sorted(missing)[:5]}"
            expected = {rid: rev for rid, rev in server_records(server, doc_id, layer, jwt).items() if rev <= since}
            assert server_side == expected, (
                f"iteration {iteration}: the store's server side is not the server's layer up to its cursor {since}: "
                f"only local {sorted(set(server_side) - set(expected))[:5]}, "
                f"only server {sorted(set(expected) - set(server_side))[:5]}")
    finally:
        stop.set()
        thread.join(timeout=WAIT_S)
    assert cursors[-1] > 0 and len(set(cursors)) > 1, f"the streamed changes did not move the cursor: {cursors}"
    assert acked, "no local edit was acknowledged"

    # Resume: from the committed cursor, each server record above it exactly once.
    since, server_side, _ = read_store(storage)
    client = make_client(storage_path=storage)
    client.wait_validated(timeout=WAIT_S)
    doc = client.document_for_jwt(jwt)
    mark = client.mark()
    doc.start_listening()
    final = server_records(server, doc_id, layer, jwt)
    wait_until(lambda: read_store(storage)[1] == final, "the resumed layer to hold every server record")
    received: list[str] = []
    for e in client.events(since=mark, name="did_receive_changes", document=doc):
        received += e.args[0].get("created", []) + e.args[0].get("updated", [])
    assert len(received) == len(set(received)), "a server change arrived twice after the resume"
    assert set(received) == {rid for rid, rev in final.items() if rev > since}
    assert client.listening_transport == "stream"
    for record_id in list(acked)[:20]:
        assert doc.get_annotation(record_id)["text"]["value"].startswith("local ")
