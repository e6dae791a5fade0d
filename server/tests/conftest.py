"""Shared fixtures: a real ``layersync-server serve`` subprocess on loopback.

The server is started once per session exactly as harnesses start it
(``python -m layersync_server serve --port 0 ...``), and the fixture waits for the
``layersync-server listening on http://HOST:PORT`` line. Every test uses its own
document ids, so tests do not interfere.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pikepdf
import pytest

from layersync_server.storage import NewDocument, open_storage
from layersync_server.tokens import generate_keypair, mint_token

def _raise_open_files_limit(wanted: int = 8192) -> None:
    """Long-poll tests hold 1,000+ sockets on each side; servers inherit this limit."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


_raise_open_files_limit()

# The shared corpus beside the checkout (../shared/corpus/pdf; `make SHARED=...` or
# LAYERSYNC_CORPUS moves it).
CORPUS = Path(os.environ.get("LAYERSYNC_CORPUS",
                             Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "pdf"))
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

    def empty_document(self, name: str = "pypdf-example.pdf") -> str:
        """A new document of corpus PDF ``name`` whose default layer holds no annotation."""
        document_id = self.new_document(name)
        response = self.http.request("DELETE", f"/api/documents/{document_id}/annotations",
                                     json={"annotationIds": "all"}, headers=self.admin())
        assert response.status_code == 200, response.text
        return document_id

    def apply_instant_json(self, document_id: str, instant_json: dict) -> None:
        response = self.http.post(f"/api/documents/{document_id}/apply_instant_json",
                                  json=instant_json, headers=self.admin())
        assert response.status_code == 200, response.text

    def document_json(self, document_id: str) -> dict:
        response = self.http.get(f"/api/documents/{document_id}/document.json", headers=self.admin())
        assert response.status_code == 200, response.text
        return response.json()

    def exported_pdf(self, document_id: str) -> bytes:
        response = self.http.get(f"/api/documents/{document_id}/pdf", headers=self.admin())
        assert response.status_code == 200, response.text
        return response.content

    def reimported(self, document_id: str) -> dict:
        """``document.json`` of the default layer's PDF export uploaded as a new document."""
        copy_id = "doc-" + uuid.uuid4().hex
        response = self.upload(self.exported_pdf(document_id), copy_id)
        assert response.status_code == 200, response.text
        return self.document_json(copy_id)

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
def pg_cluster():
    """A throwaway PostgreSQL cluster (see pgcluster.py); skipped only when the
    PostgreSQL server binaries are not installed."""
    from pgcluster import PgCluster, find_bin_dir
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not found (apt-get install postgresql); "
                    "PostgreSQL tests need initdb and pg_ctl")
    cluster = PgCluster(bin_dir)
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster) -> str:
    """URL of a fresh, empty database in the session's cluster."""
    return pg_cluster.create_database("t_" + uuid.uuid4().hex[:20])


def _sqlite_backend(request, tmp_path):
    return open_storage(tmp_path / "store.sqlite", history_versions=3)


def _postgres_backend(request, tmp_path):
    return open_storage(request.getfixturevalue("pg_url"), history_versions=3)


#: The storage backends every storage-level test runs against (history of 3 versions);
#: a new backend is added here and must pass those tests unchanged.
BACKENDS = {"sqlite": _sqlite_backend, "postgres": _postgres_backend}


def open_backend(request, tmp_path):
    """A new, empty storage of the backend ``request.param`` names (a key of
    :data:`BACKENDS`): a SQLite file in ``tmp_path``, or a fresh PostgreSQL database
    on the session's throwaway cluster."""
    return BACKENDS[request.param](request, tmp_path)


@pytest.fixture(params=sorted(BACKENDS))
def storage(request, tmp_path):
    """Each storage backend, holding one document ``"d"`` and no layer yet (a test module
    may define its own ``storage`` instead)."""
    backend = open_backend(request, tmp_path)
    backend.create_document(NewDocument("d", "Doc", b"%PDF-1.4 fake", "00" * 32, 1))
    yield backend
    backend.close()


def start_server(tmp: Path, db: str, private_pem: bytes, public_key_path: Path,
                 *extra_args: str, stderr_path: Path | None = None,
                 env: dict | None = None) -> tuple[subprocess.Popen, Server]:
    """Start ``python -m layersync_server serve --port 0`` and wait for its ready line.
    stderr goes to ``stderr_path`` when given (read it after stopping), else a pipe."""
    port_file = tmp / f"port-{uuid.uuid4().hex[:8]}"
    process = subprocess.Popen(
        [sys.executable, "-m", "layersync_server", "serve", "--port", "0",
         "--db", db, "--public-key", str(public_key_path),
         "--admin-token", ADMIN_TOKEN, "--max-request-bytes", str(MAX_REQUEST_BYTES),
         "--max-wait-s", "10", "--port-file", str(port_file),
         # tests send wrong admin secrets on purpose (the conformance suite: every operation)
         # from one address; the limit has tests of its own (test_admin_limit.py)
         "--admin-max-failures", "0", *extra_args],
        stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
        stderr=subprocess.PIPE if stderr_path is None else stderr_path.open("w"))
    line = process.stdout.readline()
    assert line.startswith(READY), (line, process.stderr.read() if process.poll() is not None
                                    and process.stderr else "")
    return process, Server(line[len(READY):].strip(), private_pem, public_key_path, port_file)


def stop_server(process: subprocess.Popen, instance: Server) -> None:
    instance.http.close()
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def keys(tmp_path_factory) -> tuple[bytes, Path]:
    """An ES256 key pair: (private PEM, path of the public PEM)."""
    tmp = tmp_path_factory.mktemp("keys")
    private_pem, public_pem = generate_keypair("ES256")
    (tmp / "public.pem").write_bytes(public_pem)
    return private_pem, tmp / "public.pem"


@pytest.fixture(scope="session")
def server(request, tmp_path_factory, keys) -> Server:
    """The shared server: SQLite, or PostgreSQL when LAYERSYNC_TEST_BACKEND=postgres
    (the whole HTTP suite then runs against a throwaway PostgreSQL cluster)."""
    tmp = tmp_path_factory.mktemp("server")
    db = str(tmp / "db.sqlite")
    if os.environ.get("LAYERSYNC_TEST_BACKEND") == "postgres":
        db = request.getfixturevalue("pg_cluster").create_database("shared_" + uuid.uuid4().hex[:12])
    process, instance = start_server(tmp, db, *keys)
    yield instance
    stop_server(process, instance)


def synthetic_pdf(pages) -> bytes:
    """A PDF of blank pages, one per ``(MediaBox, /Rotate)`` in ``pages`` (a MediaBox
    may start anywhere, not only at 0,0)."""
    pdf = pikepdf.new()
    for box, rotate in pages:
        pdf.add_blank_page(page_size=(box[2] - box[0], box[3] - box[1]))
        page = pdf.pages[-1]
        page.obj.MediaBox = pikepdf.Array(box)
        page.obj.Rotate = rotate
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def note(text: str = "hello", **extra) -> dict:
    """A minimal Instant JSON v2 note content."""
    return {"v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 20, 20],
            "text": {"format": "plain", "value": text}, "icon": "comment", "createdAt": "2025-01-01T00:00:00Z",
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
