"""Fixtures: the REAL liblayersync and the REAL reference server on loopback.

The library comes from ``LAYERSYNC_LIBRARY`` (the Makefile points it at
``.build/<config>/liblayersync.so``), else ``<repo>/.build/debug/liblayersync.so``.
A missing library or server is an error, not a skip: these tests exist to catch that.
"""
from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path
from typing import Callable, Iterator

import pytest

REPO = Path(__file__).resolve().parents[3]
# The shared corpus beside the checkout (../shared/corpus/pdf; `make SHARED=...` or
# LAYERSYNC_CORPUS moves it).
CORPUS = Path(os.environ.get("LAYERSYNC_CORPUS",
                             Path(__file__).resolve().parents[3].parent / "shared" / "corpus" / "pdf"))
if not CORPUS.is_dir():
    CORPUS = REPO / "corpus" / "pdf"

os.environ.setdefault("LAYERSYNC_LIBRARY", str(REPO / ".build" / "debug" / "liblayersync.so"))

import layersync  # noqa: E402  (after LAYERSYNC_LIBRARY is set)
from layersync.devserver import ReferenceServer, find_server_command  # noqa: E402

WAIT_S = 30.0  # generous upper bound of every wait; tests wait on events, never sleep


@pytest.fixture(scope="session")
def lib():
    """The loaded, ABI-checked library."""
    path = os.environ["LAYERSYNC_LIBRARY"]
    if not Path(path).exists():
        pytest.fail(f"liblayersync not built: {path} (run `swift build` or set LAYERSYNC_LIBRARY)")
    return layersync.get_library()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceServer]:
    """One reference server for the session (documents get unique ids per test)."""
    cmd = os.environ.get("LAYERSYNC_SERVER_CMD")
    default = REPO / ".venv" / "bin" / "layersync-server"
    command = cmd.split() if cmd else ([str(default)] if default.exists() else find_server_command())
    srv = ReferenceServer(tmp_path_factory.mktemp("server"), command=command)
    srv.start()
    yield srv
    srv.stop()


_ids = itertools.count(1)


def corpus_pdf(name: str) -> Path:
    path = CORPUS / name
    if not path.exists():
        pytest.fail(f"corpus PDF missing: {path}")
    return path


@pytest.fixture
def uploaded(server: ReferenceServer, request: pytest.FixtureRequest) -> Callable[..., str]:
    """``uploaded(pdf_name="pdfjs-pr20043.pdf") -> document_id``: uploads a corpus PDF under a
    fresh document id."""
    def upload(pdf_name: str = "pdfjs-pr20043.pdf") -> str:
        doc_id = f"t{next(_ids)}-{request.node.name[:40]}".replace("[", "-").replace("]", "")
        server.upload(corpus_pdf(pdf_name), doc_id)
        return doc_id
    return upload


@pytest.fixture
def make_client(lib, server: ReferenceServer, tmp_path: Path) -> Iterator[Callable[..., layersync.Client]]:
    """``make_client(**kwargs) -> Client`` against the session server, each with its own
    storage directory; all closed at teardown."""
    clients: list[layersync.Client] = []
    counter = itertools.count()

    def make(**kwargs) -> layersync.Client:
        url = kwargs.pop("server_url", server.url)
        storage = kwargs.pop("storage_path", tmp_path / f"client{next(counter)}")
        kwargs.setdefault("sync_delay_s", None)  # tests sync explicitly
        client = layersync.Client(url, storage, **kwargs)
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def downloaded(make_client, server: ReferenceServer, uploaded):
    """``downloaded(doc_id=None, user_id="alice", **client_kwargs) -> (client, document)``."""
    def make(doc_id: str | None = None, user_id: str = "alice", **kwargs):
        doc_id = doc_id or uploaded()
        client = make_client(**kwargs)
        client.wait_validated(timeout=WAIT_S)
        doc = client.document_for_jwt(server.mint_token(doc_id, user_id=user_id))
        doc.download(wait=True, timeout=WAIT_S)
        return client, doc
    return make
