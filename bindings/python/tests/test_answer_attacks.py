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


def records(doc: layersync.Document) -> dict:
    """The local records by id, as content (``layersync.record_content``: without ownership)."""
    return {r["id"]: layersync.record_content(r) for r in doc.list_annotations()}


def wait_until(predicate, timeout: float = WAIT_S, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def largest_revision_once(endpoint: str):
    """A rule that sets the layer revision of the first ``endpoint`` answer to 2^63-1 (a valid
    number, a lie about the layer), then forwards."""
    done: list[bool] = []

    def garble(status, headers, body):
        answer = json.loads(body)
        answer["revision"] = MAX_REVISION
        if not answer.get("has_more"):
            answer["next_since"] = MAX_REVISION
        return json.dumps(answer).encode()

    def rule(request):
        if request.endpoint != endpoint or done:
            return FORWARD
        done.append(True)
        return Action.mutate(garble)
    return rule


@pytest.mark.parametrize("endpoint", ["changes", "sync"])
def test_an_answer_claiming_the_largest_revision_does_not_wedge_the_layer(make_client, server, uploaded, proxy, endpoint):
    """A long-poll or sync answer whose layer revision is 2^63-1 passes every check of its own
    (it is in range, no record above it) and moves the cursor there; every correct answer
    after it has a revision below the cursor and is refused. Once the server answers correctly
    the layer must resume by itself (issue 18: a layer never gets stuck): the client finds its
    cursor ahead of the server's layer and downloads the snapshot again, keeping its pending
    changes."""
    doc_id = uploaded()
    client = client_through(make_client, proxy, sync_delay_s=0.2, long_poll_wait_s=1)
    doc = client.document_for_jwt(server.mint_token(doc_id))
    doc.download(wait=True, timeout=WAIT_S)
    proxy.set_rule(largest_revision_once(endpoint))
    if endpoint == "changes":
        doc.start_listening()
        wait_until(lambda: proxy.count("changes") >= 2, what="a second long-poll")
    else:
        doc.create_annotation(note("before the lie"))
        doc.sync(wait=True, timeout=WAIT_S)
    # The server moves on; the client must see it and get its own edit through.
    server.admin_request(f"/api/documents/{doc_id}/annotations", method="POST",
                         json_body={"content": note("from the server")})
    mine = doc.create_annotation(note("after the lie"))["id"]
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            doc.sync(wait=True, timeout=WAIT_S)
        except layersync.InvalidServerDataError:
            pass
        if not doc.has_unsynced_changes and records(doc) == server.annotations(doc_id):
            break
        time.sleep(0.5)
    doc.stop_listening()
    assert mine in server.annotations(doc_id), "the local edit never reached the server"
    assert records(doc) == server.annotations(doc_id), "the client never equalled the server"


def test_the_servers_annotations_are_all_listed_past_the_admin_listings_limit(server, uploaded):
    """``ReferenceServer.annotations`` (what every convergence check compares the clients with)
    lists every live record: the admin JSON listing stops at 1000 (``"truncated": true``), and a
    180 s soak grows past that, where each client then seemed to have records the server had
    not."""
    doc_id = uploaded()
    before = len(server.annotations(doc_id))
    for start in range(0, 1005, 335):
        server.admin_request(f"/api/documents/{doc_id}/annotations", method="POST",
                             json_body={"annotations": [{"content": note(f"bulk {i}")} for i in range(start, start + 335)]})
    assert len(server.annotations(doc_id)) == before + 1005
