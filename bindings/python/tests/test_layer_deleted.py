"""A listening client whose layer is deleted on the server (issue 19 item 1), through the
real library and the real server on loopback: the parked long-poll ends with 404
``not_found`` (or, on the change stream, the server ends the subscription with
``not_found``), the client reports ``INVALID_DOCUMENT`` through ``did_fail_sync`` once and
stops listening (no retry loop), its pending changes stay, and the layer is not
re-created by the client. The long-poll case runs behind the v1 FaultProxy (it answers
the stream 404, so the client falls back to long-polls)."""
from __future__ import annotations

import time
import urllib.request

import layersync

from conftest import WAIT_S
from faultproxy import FaultProxy

CHANGES_404 = 'route="/sync/v1/documents/{document_id}/layers/{layer:path}/changes",status="404"'


def _metric(server, prefix: str, contains: str = "") -> float:
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix) and contains in line)


def _wait_parked(server, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while _metric(server, "layersync_open_long_polls ") < count:
        assert time.monotonic() < deadline, "the client's long-poll did not park"
        time.sleep(0.02)


def _expect_invalid_document(client, doc, since: int, doc_id: str) -> None:
    """``did_fail_sync`` with INVALID_DOCUMENT (404 not_found, the layer deleted) for ``doc``."""
    event = client.wait_for("did_fail_sync", since=since, document=doc, timeout=WAIT_S)
    (error,) = event.args
    assert isinstance(error, layersync.InvalidDocumentError), error
    assert (error.code_name, error.http_status, error.document_id) == ("INVALID_DOCUMENT", 404, doc_id)
    assert "not_found" in str(error) and "deleted" in str(error), str(error)


def note(text: str) -> dict:
    return {"v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [20, 20, 24, 24],
            "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z",
            "icon": "comment", "text": {"format": "plain", "value": text}}


def test_a_listening_client_reports_invalid_document_and_stops_when_its_layer_is_deleted(
        make_client, server, uploaded):
    doc_id = uploaded()
    layer = "review"
    proxy = FaultProxy(server.url)  # protocol version 1: listening uses the long-poll
    client = make_client(server_url=proxy.url)
    client.wait_validated(timeout=WAIT_S)
    doc = client.document_for_jwt(server.mint_token(doc_id, layer=layer, user_id="alice"))
    doc.download(wait=True, timeout=WAIT_S)  # the JWT names a new layer: created
    assert layer in server.admin_json(f"/api/documents/{doc_id}/layers")["data"]
    pending = doc.create_annotation(note("not sent yet"))

    parked = _metric(server, "layersync_open_long_polls ")
    since = client.mark()
    doc.start_listening()
    _wait_parked(server, parked + 1)
    refused_before = _metric(server, "layersync_http_requests_total", CHANGES_404)
    server.admin_request(f"/api/documents/{doc_id}/layers/{layer}", method="DELETE")

    _expect_invalid_document(client, doc, since, doc_id)
    assert _metric(server, "layersync_http_requests_total", CHANGES_404) == refused_before + 1

    # Stopped: no more long-polls (a retrying loop would ask again within ~1 s), one report.
    time.sleep(3)
    assert _metric(server, "layersync_http_requests_total", CHANGES_404) == refused_before + 1
    assert [e.name for e in client.events(since=since, document=doc)
            if e.name == "did_fail_sync"] == ["did_fail_sync"]
    # the layer was not re-created; the unsent edit is kept
    assert layer not in server.admin_json(f"/api/documents/{doc_id}/layers")["data"]
    assert doc.has_unsynced_changes and doc.get_annotation(pending["id"])["text"]["value"] == "not sent yet"
    assert client.listening_transport == "long-poll"
    proxy.close()


def test_a_client_listening_on_the_stream_reports_invalid_document_and_stops_when_its_layer_is_deleted(
        make_client, server, uploaded):
    doc_id = uploaded()
    layer = "review"
    client = make_client()
    client.wait_validated(timeout=WAIT_S)
    doc = client.document_for_jwt(server.mint_token(doc_id, layer=layer, user_id="alice"))
    kept = client.document_for_jwt(server.mint_token(doc_id, layer="kept", user_id="alice"))
    doc.download(wait=True, timeout=WAIT_S)
    kept.download(wait=True, timeout=WAIT_S)
    pending = doc.create_annotation(note("not sent yet"))

    subscribed = _metric(server, "layersync_stream_subscriptions ")
    since = client.mark()
    doc.start_listening()
    kept.start_listening()
    deadline = time.monotonic() + WAIT_S
    while _metric(server, "layersync_stream_subscriptions ") < subscribed + 2:
        assert time.monotonic() < deadline, "the client did not subscribe"
        time.sleep(0.02)
    server.admin_request(f"/api/documents/{doc_id}/layers/{layer}", method="DELETE")

    _expect_invalid_document(client, doc, since, doc_id)

    # Stopped: the deleted layer's subscription is gone, the other layer's stays; one report.
    time.sleep(3)
    assert _metric(server, "layersync_stream_subscriptions ") == subscribed + 1
    assert [e.name for e in client.events(since=since, document=doc)
            if e.name == "did_fail_sync"] == ["did_fail_sync"]
    assert layer not in server.admin_json(f"/api/documents/{doc_id}/layers")["data"]
    assert doc.has_unsynced_changes and doc.get_annotation(pending["id"])["text"]["value"] == "not sent yet"
    assert client.listening_transport == "stream"
