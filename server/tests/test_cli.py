"""CLI: keygen, mint-token, upload and export as subprocesses (serve is exercised by conftest)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import jwt
import pytest
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from conftest import ADMIN_TOKEN, CORPUS, change, note


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "layersync_server", *args],
                          capture_output=True, text=True, timeout=30)


def test_port_file_matches_ready_line(server):
    assert server.url.endswith(":" + server.port_file.read_text().strip())


@pytest.mark.parametrize("alg", ["ES256", "RS256"])
def test_keygen_and_mint_token(tmp_path, alg):
    assert _cli("keygen", "--out", str(tmp_path), "--alg", alg).returncode == 0
    assert oct((tmp_path / "private.pem").stat().st_mode & 0o777) == "0o600"
    minted = _cli("mint-token", "--private-key", str(tmp_path / "private.pem"), "--document-id",
                  "doc1", "--layer", "review", "--user-id", "u1", "--permissions",
                  "read-document", "write", "--expires-in", "60")
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip()
    assert jwt.get_unverified_header(token)["alg"] == alg
    claims = jwt.decode(token, load_pem_public_key((tmp_path / "public.pem").read_bytes()),
                        algorithms=[alg])
    assert claims["document_id"] == "doc1" and claims["layer"] == "review"
    assert claims["user_id"] == "u1" and claims["permissions"] == ["read-document", "write"]


def test_upload_command(server):
    doc = "cli-" + uuid.uuid4().hex
    result = _cli("upload", "--url", server.url, "--admin-token", ADMIN_TOKEN,
                  str(CORPUS / "pdfjs-issue13447.pdf"), "--document-id", doc)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["data"]["annotationCount"] == 16
    bad = _cli("upload", "--url", server.url, "--admin-token", "wrong",
               str(CORPUS / "pdfjs-issue13447.pdf"))
    assert bad.returncode == 1 and "unauthorized" in bad.stderr


def test_export_command_writes_the_pdf_with_synced_annotations_and_the_instant_json(server, tmp_path):
    import pikepdf
    doc = server.new_document("pdfjs-issue13447.pdf")
    synced = server.sync(doc, [change("create", "cli-export-note", note("exported by the CLI"))])
    assert synced.status_code == 200, synced.text
    out = tmp_path / "out.pdf"
    result = _cli("export", doc, "--url", server.url, "--admin-token", ADMIN_TOKEN, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "written=1" in result.stderr and not (tmp_path / "out.pdf.part").exists()
    with pikepdf.open(out) as pdf:
        names = {str(a.get("/NM")) for page in pdf.pages for a in page.get("/Annots", [])}
        texts = {str(a.get("/Contents")) for page in pdf.pages for a in page.get("/Annots", [])}
    assert "cli-export-note" in names and "exported by the CLI" in texts
    as_json = _cli("export", doc, "--url", server.url, "--admin-token", ADMIN_TOKEN, "--json", "-o", "-")
    assert as_json.returncode == 0, as_json.stderr
    exported = json.loads(as_json.stdout)
    assert "cli-export-note" in {a["id"] for a in exported["annotations"]}

    missing = _cli("export", "no-such-doc", "--url", server.url, "--admin-token", ADMIN_TOKEN,
                   "-o", str(tmp_path / "missing.pdf"))
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr, missing.stderr
    assert not (tmp_path / "missing.pdf").exists()
    bad = _cli("export", doc, "--url", server.url, "--admin-token", "wrong", "-o", str(tmp_path / "x.pdf"))
    assert bad.returncode == 1 and "unauthorized" in bad.stderr and "HTTP 401" in bad.stderr


def test_listening_socket_is_tcp_so_asyncio_disables_nagle():
    """asyncio sets TCP_NODELAY on accepted connections only when the listening socket's
    proto is IPPROTO_TCP; with proto 0 every long-poll answer waited ~40 ms for a delayed
    ACK (bench/ scenario 3). Check both the socket and an accepted connection."""
    import asyncio
    import socket

    from layersync_server.server import bind

    listener = bind("127.0.0.1", 0)
    assert listener.proto == socket.IPPROTO_TCP
    accepted: list[int] = []

    async def main() -> None:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_client, sock=listener)
        _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
        for _ in range(100):
            if accepted:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert accepted and accepted[0] != 0
