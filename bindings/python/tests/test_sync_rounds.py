"""A sync cycle runs until nothing is pending, however many rounds that takes (a breaker
finding: a fixed cap of 1000 rounds ended the cycle with did_finish_sync while changes
were still queued)."""
from __future__ import annotations

import os
from pathlib import Path

import layersync
from layersync.devserver import ReferenceServer, find_server_command

from conftest import REPO, WAIT_S, corpus_pdf


def note(text: str) -> dict:
    return {"v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [20, 20, 24, 24],
            "opacity": 1, "creatorName": "tester", "icon": "comment",
            "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z",
            "text": {"format": "plain", "value": text}}


def _server(workdir: Path, *extra: str) -> ReferenceServer:
    cmd = os.environ.get("LAYERSYNC_SERVER_CMD")
    default = REPO / ".venv" / "bin" / "layersync-server"
    command = cmd.split() if cmd else ([str(default)] if default.exists() else find_server_command())
    return ReferenceServer(workdir, command=command, extra_args=list(extra))


# One sync(wait=True) of 4,400 creates through a server whose max_request_bytes fits ~4
# changes per request takes more than 1000 rounds; it must leave nothing pending.
def test_one_sync_pushes_everything_with_a_small_request_limit(lib, tmp_path):
    srv = _server(tmp_path / "srv", "--max-request-bytes", "2000")
    srv.start()
    try:
        srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), "capdoc")
        client = layersync.Client(srv.url, tmp_path / "client", sync_delay_s=None)
        try:
            client.wait_validated(timeout=WAIT_S)
            doc = client.document_for_jwt(srv.mint_token("capdoc", user_id="alice"))
            doc.download(wait=True, timeout=WAIT_S)
            for i in range(4400):
                doc.create_annotation(note(f"rec {i}"))
            mark = client.mark()
            doc.sync(wait=True, timeout=120)
            ended = [e.name for e in client.events(since=mark) if e.name in ("did_finish_sync", "did_fail_sync")]
            assert ended == ["did_finish_sync"]
            # a finished sync means nothing is left to send
            assert not doc.has_unsynced_changes
            assert doc.state == layersync.DocumentState.CLEAN
        finally:
            client.close()
    finally:
        srv.stop()
