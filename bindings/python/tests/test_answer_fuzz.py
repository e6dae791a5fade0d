"""Fuzz suite of server answers (issue 18 item 3): real answers of every endpoint the client
reads, garbled on the way by a proxy (faultproxy.py, mutations.py), through the Python package
over the C ABI.

Each case garbles one endpoint's answers for a while (keys removed, values retyped, numbers
negated, ids swapped, bodies truncated, lengths lied about, entries duplicated) while the
client edits and syncs, then heals, and checks that the client never crashed, that every
error it saw was INVALID_SERVER_DATA or transient (REQUEST_FAILED), that the client's records
equal the server's, and that every acknowledged write is on the server (or reported through
``did_reject_changes``). ``FUZZ_SEED`` reproduces a run (the seed is printed).
"""
from __future__ import annotations

import hashlib
import os
import random
import time
from typing import Any

import pytest

import layersync

from conftest import WAIT_S
from faultproxy import FaultProxy
from layersync.devserver import ReferenceServer
from mutations import KINDS, mutating_rule

SEED = int(os.environ.get("FUZZ_SEED", random.randrange(1 << 32)))
#: Codes a garbled answer may surface as: INVALID_SERVER_DATA, REQUEST_FAILED.
ALLOWED = {layersync.InvalidServerDataError.default_code, layersync.RequestFailedError.default_code}
MUTATE_S = 3.0


def note(text: str) -> dict[str, Any]:
    return {"v": 2, "type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 24, 24], "opacity": 1,
            "icon": "comment", "creatorName": "fuzz", "text": {"format": "plain", "value": text}}


def seeded(case: str) -> random.Random:
    print(f"FUZZ_SEED={SEED} ({case})")
    return random.Random(f"{SEED}-{case}")


def errors_of(client: layersync.Client, since: int = 0) -> list[layersync.LayerSyncError]:
    names = ("did_fail_sync", "did_fail_download", "server_did_validate")
    return [e.args[-1] for e in client.events(since=since) if e.name in names and e.args and
            isinstance(e.args[-1], layersync.LayerSyncError)]


def settle(doc: layersync.Document, server, doc_id: str, timeout: float = 45.0) -> None:
    """Syncs until the client's records equal the server's (bounded)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            doc.sync(wait=True, timeout=WAIT_S)
            if not doc.has_unsynced_changes and records(doc) == server.annotations(doc_id):
                return
        except layersync.LayerSyncError as error:
            assert error.code in ALLOWED, f"after healing: {error!r}"
            last = error
        time.sleep(0.3)
    assert records(doc) == server.annotations(doc_id), f"the client never equalled the server ({last!r})"


def records(doc: layersync.Document) -> dict[str, dict[str, Any]]:
    return {r["id"]: layersync.record_content(r) for r in doc.list_annotations()}


def strip(content: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in content.items() if k not in ("createdAt", "updatedAt")}


@pytest.fixture(scope="module")
def paged_server(tmp_path_factory):
    """A server whose pages hold 3 records, so sync answers have ``has_more`` and the client
    reads delta pages (``GET records?since=``)."""
    from conftest import REPO
    srv = ReferenceServer(tmp_path_factory.mktemp("paged"), command=[str(REPO / ".venv" / "bin" / "layersync-server")],
                          env={"LAYERSYNC_SERVER_MAX_PAGE_RECORDS": "3"})
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def proxy(server):
    p = FaultProxy(server.url)
    yield p
    p.close()


def open_client(make_client, srv, proxy_url: str, doc_id: str):
    """``(client, doc)``: downloaded through the proxy while it forwards."""
    client = make_client(server_url=proxy_url, sync_delay_s=0.2, long_poll_wait_s=2)
    client.wait_validated(timeout=WAIT_S)
    doc = client.document_for_jwt(srv.mint_token(doc_id, user_id="fuzz"))
    doc.download(wait=True, timeout=WAIT_S)
    return client, doc


@pytest.fixture
def fuzz_client(make_client, server, uploaded, proxy):
    """``(client, doc, doc_id)``: downloaded through the proxy while it forwards."""
    doc_id = uploaded()
    client, doc = open_client(make_client, server, proxy.url, doc_id)
    return client, doc, doc_id


def edit_while_garbled(client, doc, server, doc_id: str, rng: random.Random, admin_burst: int = 1) -> dict[str, str]:
    """Local edits and server edits (admin API) for ``MUTATE_S`` seconds, syncing explicitly
    too; returns the acknowledged writes: {record id: text last written, "" for deleted}."""
    acknowledged: dict[str, str] = {}
    deadline = time.monotonic() + MUTATE_S
    step = 0
    while time.monotonic() < deadline:
        step += 1
        text = f"fuzz {step} {rng.random():.6f}"
        mine = [i for i, t in acknowledged.items() if t]
        choice = rng.random()
        if choice < 0.5 or not mine:
            acknowledged[doc.create_annotation(note(text))["id"]] = text
        elif choice < 0.8:
            target = rng.choice(mine)
            doc.update_annotation(dict(doc.get_annotation(target), text={"format": "plain", "value": text}))
            acknowledged[target] = text
        else:
            target = rng.choice(mine)
            doc.delete_annotation(target)
            acknowledged[target] = ""
        if step % 3 == 0:
            for burst in range(admin_burst):
                server.admin_request(f"/api/documents/{doc_id}/annotations", method="POST",
                                     json_body={"content": note(f"admin {step}.{burst}")})
        if step % 4 == 0:
            try:
                doc.sync(wait=True, timeout=WAIT_S)
            except layersync.LayerSyncError as error:
                assert error.code in ALLOWED, f"sync under garbled answers: {error!r}"
        time.sleep(0.05)
    return acknowledged


def check_acknowledged(client, server, doc_id: str, acknowledged: dict[str, str]) -> None:
    on_server = server.annotations(doc_id)
    reported = {r["id"] for e in client.events() if e.name == "did_reject_changes" for r in e.args[0]}
    for record_id, text in acknowledged.items():
        if record_id in reported:
            continue
        if text:
            assert record_id in on_server and on_server[record_id]["text"]["value"] == text, \
                f"acknowledged write of {record_id} ({text!r}) is not on the server"
        else:
            assert record_id not in on_server, f"acknowledged delete of {record_id} is not on the server"


@pytest.mark.parametrize("endpoint", ["sync", "changes", "records"])
def test_garbled_answers_of_the_sync_path_heal(make_client, server, paged_server, uploaded, endpoint, request):
    """``POST sync``, the long-poll and delta pages garbled while editing: errors are
    INVALID_SERVER_DATA or transient, and after healing the client equals the server and every
    acknowledged write is there. Delta pages are read after a sync answer with ``has_more``:
    their case runs against a server of 3-record pages."""
    if endpoint == "records":
        server = paged_server
        doc_id = f"paged-{request.node.name[-20:]}".replace("[", "-").replace("]", "")
        from conftest import corpus_pdf
        server.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    else:
        doc_id = uploaded()
    proxy = FaultProxy(server.url)
    request.addfinalizer(proxy.close)
    client, doc = open_client(make_client, server, proxy.url, doc_id)
    rng = seeded(endpoint)
    if endpoint != "records":  # listening keeps sync answers short: no `has_more`
        doc.start_listening()
    mark = client.mark()
    proxy.set_rule(mutating_rule({endpoint}, rng))
    acknowledged = edit_while_garbled(client, doc, server, doc_id, rng, admin_burst=5 if endpoint == "records" else 1)
    proxy.set_rule(None)
    settle(doc, server, doc_id)
    doc.stop_listening()
    seen = errors_of(client, mark)
    assert all(e.code in ALLOWED for e in seen), [repr(e) for e in seen if e.code not in ALLOWED]
    check_acknowledged(client, server, doc_id, acknowledged)
    assert proxy.count(endpoint) > 0, f"no {endpoint} request passed the proxy"


def test_garbled_snapshot_download_heals(make_client, server, uploaded, proxy):
    """The snapshot pages of a download garbled: the download fails with INVALID_SERVER_DATA or
    a transient error (never a half-applied store); once healed it downloads the server's records."""
    doc_id = uploaded()
    rng = seeded("snapshot")
    for kind in KINDS:
        client = make_client(server_url=proxy.url)
        client.wait_validated(timeout=WAIT_S)
        doc = client.document_for_jwt(server.mint_token(doc_id))
        proxy.set_rule(mutating_rule({"snapshot", "records"}, rng, (kind,)))
        try:
            doc.download(wait=True, timeout=WAIT_S)
            # A garble that left the answer valid (e.g. a removed unknown key): then it is the truth.
            assert records(doc) == server.annotations(doc_id), f"{kind}: a garbled snapshot was stored"
        except layersync.LayerSyncError as error:
            assert error.code in ALLOWED, f"{kind}: {error!r}"
        proxy.set_rule(None)
        if not doc.is_downloaded:
            doc.download(wait=True, timeout=WAIT_S)
        settle(doc, server, doc_id)
        client.close()


def test_garbled_deleted_list_is_refused(fuzz_client, server, proxy):
    """``GET deleted`` garbled: the list is refused with INVALID_SERVER_DATA or a transient
    error, or (the garble left it valid) it is the true list."""
    client, doc, doc_id = fuzz_client
    for record_id in list(records(doc))[:2]:
        doc.delete_annotation(record_id)
    doc.sync(wait=True, timeout=WAIT_S)
    truth = doc.list_deleted_annotations(timeout=WAIT_S)
    assert len(truth) == 2
    rng = seeded("deleted")
    for kind in KINDS * 3:
        proxy.set_rule(mutating_rule({"deleted"}, rng, (kind,)))
        try:
            assert doc.list_deleted_annotations(timeout=WAIT_S) == truth, f"{kind}: a garbled list was returned"
        except layersync.LayerSyncError as error:
            assert error.code in ALLOWED, f"{kind}: {error!r}"
    proxy.set_rule(None)
    assert doc.list_deleted_annotations(timeout=WAIT_S) == truth
    settle(doc, server, doc_id)


def test_garbled_attachment_is_refused(fuzz_client, make_client, server, proxy):
    """An attachment's bytes garbled (flipped, truncated, length lied about): the download fails
    and stores nothing; healed, the bytes are right."""
    client, doc, doc_id = fuzz_client
    data = bytes(range(256)) * 40
    attachment_id = doc.add_attachment(data, "application/octet-stream")
    assert attachment_id == hashlib.sha256(data).hexdigest()
    doc.sync(wait=True, timeout=WAIT_S)
    other = make_client(server_url=proxy.url)
    other.wait_validated(timeout=WAIT_S)
    reader = other.document_for_jwt(server.mint_token(doc_id))
    reader.download(wait=True, timeout=WAIT_S)
    rng = seeded("attachment")
    garbles = [lambda s, h, b: b[:-1], lambda s, h, b: b[:1] + bytes([b[1] ^ 1]) + b[2:], lambda s, h, b: b + b"x",
               lambda s, h, b: b""]
    from faultproxy import Action, FORWARD
    for index, garble in enumerate(garbles + [None, None]):
        action = Action.mutate(garble) if garble else Action.lie_length(rng.choice([-5, 9]))
        proxy.set_rule(lambda request, action=action: action if request.endpoint == "attachment" else FORWARD)
        with pytest.raises(layersync.LayerSyncError) as raised:
            reader.download_attachment(attachment_id, wait=True, timeout=WAIT_S)
        assert raised.value.code in ALLOWED, f"garble {index}: {raised.value!r}"
        with pytest.raises(layersync.LayerSyncError):
            reader.attachment_data(attachment_id)
    proxy.set_rule(None)
    reader.download_attachment(attachment_id, wait=True, timeout=WAIT_S)
    assert reader.attachment_data(attachment_id) == data


def test_garbled_server_info_is_refused_and_the_client_still_syncs(make_client, server, uploaded, proxy):
    """``GET info`` garbled: ``server_did_validate`` reports INVALID_SERVER_DATA or a transient
    error (or the garble left it valid); the client does not crash, and once healed it syncs."""
    doc_id = uploaded()
    rng = seeded("info")
    for kind in KINDS:
        proxy.set_rule(mutating_rule({"info"}, rng, (kind,)))
        client = make_client(server_url=proxy.url)
        try:
            client.wait_validated(timeout=WAIT_S)
        except layersync.LayerSyncError as error:
            assert error.code in ALLOWED, f"{kind}: {error!r}"
        proxy.set_rule(None)
        doc = client.document_for_jwt(server.mint_token(doc_id))
        doc.download(wait=True, timeout=WAIT_S)
        doc.create_annotation(note(f"after info {kind}"))
        settle(doc, server, doc_id)
        client.close()
