"""Answers the fuzz suite (test_answer_fuzz.py) does not make: each a targeted lie of the server
(or of the path to it), through the fault proxy (faultproxy.py) and the Python package over the
C ABI. Each test fails without the client behaviour it names.
"""
from __future__ import annotations

import hashlib
import json
import time
import urllib.request

import pytest

import layersync

from conftest import WAIT_S, corpus_pdf
from faultproxy import FORWARD, Action, FaultProxy

MAX_REVISION = (1 << 63) - 1


def note(text: str) -> dict:
    return {"v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 24, 24], "opacity": 1,
            "icon": "comment", "creatorName": "attack", "text": {"format": "plain", "value": text}}


@pytest.fixture
def proxy(server):
    p = FaultProxy(server.url)
    yield p
    p.close()


def client_through(make_client, proxy, **kwargs) -> layersync.Client:
    client = make_client(server_url=proxy.url, **kwargs)
    client.wait_validated(timeout=WAIT_S)
    return client


@pytest.mark.parametrize("garble", ["truncated", "flipped", "short_length"])
def test_a_pdf_whose_bytes_do_not_match_its_etag_is_refused(make_client, server, uploaded, proxy, garble):
    """The PDF answer carries a strong ETag, the SHA-256 of its bytes (protocol.md). Bytes cut
    or garbled on the way with a Content-Length that agrees (or a Content-Length shorter than
    the body: the client stops reading there) are INVALID_SERVER_DATA, nothing is stored as the
    document's PDF; once healed the download stores the server's exact bytes."""
    doc_id = uploaded()
    token = server.mint_token(doc_id)
    served = urllib.request.urlopen(urllib.request.Request(f"{server.url}/sync/v1/documents/{doc_id}/pdf",
                                                           headers={"Authorization": f"Bearer {token}"}), timeout=WAIT_S)
    original = served.read()
    assert served.headers["ETag"] == f'"{hashlib.sha256(original).hexdigest()}"'

    def rule(request):
        if request.endpoint != "pdf":
            return FORWARD
        if garble == "truncated":
            return Action.mutate(lambda status, headers, body: body[: len(body) // 2])
        if garble == "flipped":
            return Action.mutate(lambda status, headers, body: body[:100] + bytes([body[100] ^ 1]) + body[101:])
        return Action.lie_length(-100)

    proxy.set_rule(rule)
    client = client_through(make_client, proxy)
    doc = client.document_for_jwt(token)
    with pytest.raises(layersync.InvalidServerDataError, match="SHA-256"):
        doc.download(wait=True, timeout=WAIT_S)
    assert not doc.is_downloaded
    proxy.set_rule(None)
    doc.download(wait=True, timeout=WAIT_S)
    with open(doc.pdf_path, "rb") as stored:
        assert stored.read() == original
