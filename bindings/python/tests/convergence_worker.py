"""One client process of the convergence test (test_convergence.py): edits a layer at random
through the Python package until told to stop, journaling what the API acknowledged.

Run by the test, never by hand: ``python convergence_worker.py DIR URL DOCUMENT_ID KEY SEED``.
In ``DIR`` it keeps its store (``DIR/store``) and appends JSON lines, each fsynced:
``acks.jsonl`` (``{"id", "text", "incarnation"}``, ``text`` "" for a delete: written after the
call returned, so a kill -9 in between loses the line, never a line for an unacknowledged
write), ``reports.jsonl`` (the ids of every ``did_reject_changes``, with the incarnation),
and at the end ``stored_reports.json`` (the record ids of the store's durable conflict reports).
It quiesces when ``DIR/quiesce`` appears (stops editing, syncs until nothing is pending, writes
``DIR/quiesced``) and ends when ``DIR/final`` appears (syncs once more, writes its records to
``DIR/records.json`` and exits 0). Tokens live 6 s; the ``request_token`` callback mints a new
one (``reauthenticate``), so tokens expire all the time.
"""
from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from pathlib import Path

import layersync
from layersync_server.tokens import mint_token

TOKEN_S = 6


def append(path: Path, entry: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


def note(text: str) -> dict:
    return {"v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 24, 24], "opacity": 1,
            "icon": "comment", "creatorName": "soak", "text": {"format": "plain", "value": text}}


def main() -> int:
    directory, url, document_id, key_path, seed = sys.argv[1:6]
    directory_path = Path(directory)
    key = Path(key_path).read_bytes()
    incarnation = f"{os.getpid()}"
    rng = random.Random(f"{seed}-{incarnation}")
    name = directory_path.name

    def token() -> str:
        return mint_token(key, document_id, user_id=name, expires_in_s=TOKEN_S)

    holder: dict[str, layersync.Document] = {}

    def request_token(doc: layersync.Document) -> None:
        try:
            doc.reauthenticate(token(), wait=False)
        except layersync.LayerSyncError:
            pass  # already authenticating: the next expiry asks again

    def rejected(doc: layersync.Document, reports: list) -> None:
        append(directory_path / "reports.jsonl", {"ids": [r["id"] for r in reports], "incarnation": incarnation})

    client = layersync.Client(url, directory_path / "store", sync_delay_s=0.3, long_poll_wait_s=2,
                              request_timeout_s=10, connect_timeout_s=3,
                              delegate={"request_token": request_token, "did_reject_changes": rejected})
    doc = client.document_for_jwt(token())
    holder["doc"] = doc
    while not doc.is_downloaded:
        try:
            doc.download(wait=True, timeout=30)
        except layersync.AccessDeniedError:
            try:
                doc.reauthenticate(token(), wait=True, timeout=30)
            except layersync.LayerSyncError:
                time.sleep(0.5)
        except layersync.LayerSyncError:
            time.sleep(0.5)
    doc.start_listening()
    step = 0
    while not (directory_path / "quiesce").exists():
        step += 1
        time.sleep(rng.uniform(0.02, 0.25))
        try:
            local = doc.list_annotations()
            soak = [r for r in local if r.get("creatorName") == "soak"]
            choice = rng.random()
            text = f"{name}-{incarnation}-{step}"
            if choice < 0.45 or not soak:
                stored = doc.create_annotation(note(text))
                append(directory_path / "acks.jsonl", {"id": stored["id"], "text": text, "incarnation": incarnation})
            elif choice < 0.85:
                target = rng.choice(soak)
                doc.update_annotation(dict(target, text={"format": "plain", "value": text}))
                append(directory_path / "acks.jsonl", {"id": target["id"], "text": text, "incarnation": incarnation})
            else:
                target = rng.choice(soak)
                doc.delete_annotation(target["id"])
                append(directory_path / "acks.jsonl", {"id": target["id"], "text": "", "incarnation": incarnation})
        except layersync.NoSuchAnnotationError:
            pass  # deleted meanwhile by a server change
    settle(doc, token)
    (directory_path / "quiesced").write_text(incarnation)
    while not (directory_path / "final").exists():
        time.sleep(0.1)
    settle(doc, token)
    doc.stop_listening()
    # the records' content (without ownership), as the server's listing gives it
    records = sorted((layersync.record_content(r) for r in doc.list_annotations()), key=lambda r: r["id"])
    # the durable conflict reports (stored with the adopted server version, so a kill -9 of
    # an earlier incarnation lost none of them), written before records.json
    stored = doc.rejected_changes()
    (directory_path / "stored_reports.json").write_text(json.dumps(sorted({r["id"] for r in stored})))
    (directory_path / "records.json").write_text(json.dumps(records, sort_keys=True))
    client.close()
    return 0


def settle(doc: layersync.Document, token) -> None:
    """Syncs until a cycle succeeds with nothing pending (bounded)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            doc.sync(wait=True, timeout=30)
            if not doc.has_unsynced_changes:
                return
        except layersync.AccessDeniedError:
            try:
                doc.reauthenticate(token(), wait=True, timeout=30)
            except layersync.LayerSyncError:
                pass
        except layersync.LayerSyncError:
            pass
        time.sleep(0.2)
    raise SystemExit("could not settle within 120 s")


if __name__ == "__main__":
    threading.current_thread().name = "worker"
    sys.exit(main())
