"""Shared fixtures: a real ``layersync-server serve`` subprocess on loopback.

The server is started once per session exactly as harnesses start it
(``python -m layersync_server serve --port 0 ...``), and the fixture waits for the
``layersync-server listening on http://HOST:PORT`` line. Every test uses its own
document ids, so tests do not interfere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from layersync_server.tokens import generate_keypair, mint_token

CORPUS = Path(os.environ.get("LAYERSYNC_CORPUS", "/work/shared/corpus/pdf"))
ADMIN_TOKEN = "test-admin-secret"
MAX_REQUEST_BYTES = 64 * 1024
READY = "layersync-server listening on "


class Server:
    """A running server plus helpers to talk to it."""

    def __init__(self, url: str, private_pem: bytes, public_key_path: Path, port_file: Path):
        self.url = url
        self.private_pem = private_pem
        self.public_key_path = public_key_path
        self.port_file = port_file
        self.http = httpx.Client(base_url=url, timeout=30, headers={"LayerSync-Protocol": "1"})

    def token(self, document_id: str, layer: str | None = "", **kwargs) -> str:
        return mint_token(self.private_pem, document_id, layer=layer, **kwargs)

    def auth(self, document_id: str, layer: str | None = "", **kwargs) -> dict:
        return {"Authorization": f"Bearer {self.token(document_id, layer, **kwargs)}"}

    def admin(self) -> dict:
        return {"Authorization": f'Token token="{ADMIN_TOKEN}"'}

    def upload(self, pdf: bytes, document_id: str | None = None) -> httpx.Response:
        params = {"document_id": document_id} if document_id else {}
        return self.http.post("/api/documents", content=pdf, params=params,
                              headers={**self.admin(), "Content-Type": "application/pdf"})

    def new_document(self, name: str = "sample-files-024-annotated_pdf.pdf") -> str:
        document_id = "doc-" + uuid.uuid4().hex
        response = self.upload((CORPUS / name).read_bytes(), document_id)
        assert response.status_code == 200, response.text
        return document_id

    def layer_url(self, document_id: str, layer: str = "~") -> str:
        return f"/sync/v1/documents/{document_id}/layers/{layer}"

    def sync(self, document_id: str, changes: list[dict], since: int = 0, epoch=None,
             layer: str = "", user_id: str = "alice") -> httpx.Response:
        return self.http.post(self.layer_url(document_id, layer or "~") + "/sync",
                              json={"client_id": "test", "epoch": epoch, "since": since,
                                    "changes": changes},
                              headers=self.auth(document_id, layer, user_id=user_id))

    def records(self, document_id: str, since: int = 0, layer: str = "", **params) -> dict:
        response = self.http.get(self.layer_url(document_id, layer or "~") + "/records",
                                 params={"since": since, **params},
                                 headers=self.auth(document_id, layer))
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    tmp = tmp_path_factory.mktemp("server")
    private_pem, public_pem = generate_keypair("ES256")
    (tmp / "public.pem").write_bytes(public_pem)
    port_file = tmp / "port"
    process = subprocess.Popen(
        [sys.executable, "-m", "layersync_server", "serve", "--port", "0",
         "--db", str(tmp / "db.sqlite"), "--public-key", str(tmp / "public.pem"),
         "--admin-token", ADMIN_TOKEN, "--max-request-bytes", str(MAX_REQUEST_BYTES),
         "--max-wait-s", "10", "--port-file", str(port_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    line = process.stdout.readline()
    assert line.startswith(READY), (line, process.stderr.read() if process.poll() is not None else "")
    assert time.monotonic() < deadline
    url = line[len(READY):].strip()
    instance = Server(url, private_pem, tmp / "public.pem", port_file)
    yield instance
    instance.http.close()
    process.terminate()
    process.wait(timeout=10)


def note(text: str = "hello", **extra) -> dict:
    """A minimal Instant JSON v2 note content."""
    return {"v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 20, 20],
            "text": {"format": "plain", "value": text}, "createdAt": "2025-01-01T00:00:00Z",
            "updatedAt": "2025-01-01T00:00:00Z", **extra}


def change(op: str, record_id: str, content: dict | None = None, base: int | None = None,
           change_id: str | None = None) -> dict:
    """A sync change entry with a fresh change id unless one is given."""
    entry = {"change_id": change_id or uuid.uuid4().hex, "op": op, "id": record_id}
    if content is not None:
        entry["content"] = content
    if base is not None:
        entry["base_revision"] = base
    return entry
