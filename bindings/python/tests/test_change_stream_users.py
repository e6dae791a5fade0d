"""Listening on the change stream with the JWTs of several users in one client (protocol
version 2, issue 16): authority over a stream is its key (handed out in its `hello`), not the
user who opened it, and each subscription is authorised by its own layer's JWT, so one client
that listens on layers of several users (an app with two accounts, a JWT without `user_id`
beside one with) holds ONE stream, counted on the server: one open stream, one connection.
Every layer is delivered over it, with no reconnect loop; one user's JWT expiring ends that
subscription alone (one did_fail_authentication for that document); a layer that stops
listening leaves the others as they were; a reauthentication with a JWT of another user
subscribes the layer again on the same stream, and nothing filtered for the old JWT reaches
it any more."""
from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request

import layersync
from layersync.devserver import ReferenceServer

from conftest import WAIT_S, corpus_pdf
from procstat import established_connections, threads
from stallproxy import StallProxy
from test_change_stream import (behind_stall_proxy, local_ids, metric, note, own_server, post_server_note,  # noqa: F401
                                wait_until)

STREAM_ROUTE = "/sync/v2/stream"
SUBSCRIPTIONS_ROUTE = "/sync/v2/stream/{stream_id}/subscriptions"


def requests_answered(server: ReferenceServer, route: str, method: str = "POST", status: str | None = None) -> float:
    """``layersync_http_requests_total`` of ``method`` on ``route`` (answered, any status or ``status``).
    A stream's request counts when its answer ends."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        match = re.match(r'layersync_http_requests_total\{(.*)\} (\S+)$', line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if labels.get("route") == route and labels.get("method") == method \
                and (status is None or labels.get("status") == status):
            total += float(match.group(2))
    return total


def stream_opens(server: ReferenceServer) -> float:
    """Streams opened so far: those still open plus those whose answer ended."""
    return metric(server, "layersync_open_streams") + requests_answered(server, STREAM_ROUTE)


def opened(client: layersync.Client, server: ReferenceServer, doc_id: str, layer: str, user_id: str | None, **claims):
    """The downloaded ``layer`` of ``doc_id`` in ``client`` with a JWT of ``user_id`` (None: no user_id claim)."""
    doc = client.document_for_jwt(server.mint_token(doc_id, layer=layer, user_id=user_id, **claims))
    doc.download(wait=True, timeout=WAIT_S)
    return doc


def listening(client: layersync.Client, server: ReferenceServer, doc_id: str, layer: str, user_id: str | None, **claims):
    doc = opened(client, server, doc_id, layer, user_id, **claims)
    doc.start_listening()
    return doc


def test_three_users_in_one_client_hold_one_stream_and_every_change_arrives(make_client, own_server):
    srv = own_server()
    doc_id = "users"
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    client = make_client(server_url=srv.url)
    client.wait_validated(timeout=WAIT_S)
    owners = {"a1": "alice", "a2": "alice", "b1": "bob", "b2": "bob", "n1": None}  # None: no user_id
    docs = {layer: opened(client, srv, doc_id, layer, user) for layer, user in owners.items()}
    time.sleep(1)  # the downloads' threads settle
    threads_before = threads()
    for doc in docs.values():
        doc.start_listening()
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == len(owners), "every layer subscribed")
    # one stream for the three users (a JWT without user_id is a user of its own), not one per
    # user or per layer ...
    assert metric(srv, "layersync_open_streams") == 1
    # ... one connection once the downloads' and subscriptions' idle keep-alives are closed by
    # the server (5 s), held by the one listener thread
    port = urllib.parse.urlparse(srv.url).port
    wait_until(lambda: established_connections(port) == 1, "only the stream's connection to be left", timeout=20)
    assert threads() - threads_before <= 3, (threads_before, threads())
    assert client.listening_transport == "stream"
    assert {layer: doc.listening_transport for layer, doc in docs.items()} == {layer: "stream" for layer in owners}

    # Each layer changes from another client (the writer's own JWT of that layer's user) ...
    writer = make_client(server_url=srv.url)
    writer.wait_validated(timeout=WAIT_S)
    since = client.mark()
    written = {}
    for layer, user in owners.items():
        doc = writer.document_for_jwt(srv.mint_token(doc_id, layer=layer, user_id=user))
        doc.download(wait=True, timeout=WAIT_S)
        written[layer] = doc.create_annotation(note(f"from the writer on {layer}"))["id"]
        doc.sync(wait=True, timeout=WAIT_S)
    # ... and arrives over the listener's one stream.
    for layer, record_id in written.items():
        client.wait_for("did_receive_changes", since=since, document=docs[layer], timeout=WAIT_S,
                        predicate=lambda e, r=record_id: r in e.args[0].get("created", []))
        assert docs[layer].get_annotation(record_id)["text"]["value"] == f"from the writer on {layer}"

    # No reconnect loop: one open in all, and no subscription refused as an unknown stream.
    opens = stream_opens(srv)
    time.sleep(3)
    assert stream_opens(srv) == opens == 1
    assert requests_answered(srv, SUBSCRIPTIONS_ROUTE, status="404") == 0
    assert metric(srv, "layersync_open_streams") == 1
    assert metric(srv, "layersync_stream_subscriptions") == len(owners)

    # Every layer of two users stops listening: their subscriptions end, the stream stays for alice's.
    for layer in ("n1", "b1", "b2"):
        docs[layer].stop_listening()
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2, "the stopped layers' subscriptions to end")
    assert metric(srv, "layersync_open_streams") == 1
    after = client.mark()
    record_id = post_server_note(srv, doc_id, "a2", "alice goes on")
    client.wait_for("did_receive_changes", since=after, document=docs["a2"], timeout=WAIT_S,
                    predicate=lambda e: record_id in e.args[0].get("created", []))
    for doc in (docs["a1"], docs["a2"]):
        doc.stop_listening()
    wait_until(lambda: metric(srv, "layersync_open_streams") == 0, "the stream to close with the last layer")
    assert stream_opens(srv) == 1
    # every layer but the last was unsubscribed (with the key); the last one closed the stream
    assert requests_answered(srv, SUBSCRIPTIONS_ROUTE, method="DELETE", status="200") == len(owners) - 1


def test_one_users_jwt_expiry_ends_that_subscription_alone(make_client, own_server):
    """The first layer's JWT (alice's, the one that opened the stream) expires: that
    subscription ends with one did_fail_authentication for its document, and the other
    layers, alice's and bob's, keep receiving on the same stream (never reopened)."""
    srv = own_server(env={"LAYERSYNC_SERVER_JWT_LEEWAY_S": "0"})
    doc_id = "firstleaves"
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    client = make_client(server_url=srv.url)
    client.wait_validated(timeout=WAIT_S)
    since = client.mark()
    short = listening(client, srv, doc_id, "first", "alice", expires_in_s=6)
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 1, "the first layer's subscription")
    others = [listening(client, srv, doc_id, layer, user) for layer, user in
              (("alice2", "alice"), ("bob1", "bob"), ("bob2", "bob"))]
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 4, "every layer subscribed")
    assert metric(srv, "layersync_open_streams") == 1

    failed = client.wait_for("did_fail_authentication", since=since, document=short, timeout=WAIT_S)
    assert isinstance(failed.args[0], layersync.AccessDeniedError), failed.args
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 3, "the expired layer's subscription to end")
    after = client.mark()
    for doc in others:
        record_id = post_server_note(srv, doc_id, doc.layer_name, f"{doc.layer_name} listens on")
        client.wait_for("did_receive_changes", since=after, document=doc, timeout=WAIT_S,
                        predicate=lambda e, r=record_id: r in e.args[0].get("created", []))
    time.sleep(1)
    assert metric(srv, "layersync_open_streams") == 1
    assert metric(srv, "layersync_stream_subscriptions") == 3
    assert stream_opens(srv) == 1
    assert requests_answered(srv, SUBSCRIPTIONS_ROUTE, status="404") == 0
    assert [e.name for e in client.events(since=since) if e.name == "did_fail_authentication"] \
        == ["did_fail_authentication"]  # once, and for that document alone
    assert client.listening_transport == "stream"
    assert [doc.listening_transport for doc in others] == ["stream"] * 3


def test_a_reauthentication_as_another_user_keeps_the_one_stream(make_client, own_server):
    """A layer listened to with a JWT without user_id (full view) is reauthenticated with
    bob's JWT that views only the group "public": it is subscribed again on the same stream
    (which replaces its subscription), and nothing filtered for the old JWT reaches it any more
    (a record bob may not view stays out of the layer) while another layer goes on as it was."""
    srv = own_server()
    doc_id = "reauthuser"
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    client = make_client(server_url=srv.url)
    client.wait_validated(timeout=WAIT_S)
    moving = listening(client, srv, doc_id, "moving", None)
    staying = listening(client, srv, doc_id, "staying", None)
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2, "both layers subscribed")
    assert metric(srv, "layersync_open_streams") == 1
    subscribes = requests_answered(srv, SUBSCRIPTIONS_ROUTE, status="200")

    bobs = srv.mint_token(doc_id, layer="moving", user_id="bob",
                          collaboration_permissions=["annotations:*:group=public"])
    moving.reauthenticate(bobs, wait=True, timeout=WAIT_S)
    wait_until(lambda: requests_answered(srv, SUBSCRIPTIONS_ROUTE, status="200") > subscribes,
               "the layer subscribed again with bob's JWT")

    since = client.mark()
    secret = srv.admin_request(f"/api/documents/{doc_id}/layers/moving/annotations", method="POST",
                               json_body={"content": note("secret"), "group": "secret"})
    public = srv.admin_request(f"/api/documents/{doc_id}/layers/moving/annotations", method="POST",
                               json_body={"content": note("public"), "group": "public"})
    secret_id = json.loads(secret)["data"]["annotation_id"]
    public_id = json.loads(public)["data"]["annotation_id"]
    client.wait_for("did_receive_changes", since=since, document=moving, timeout=WAIT_S,
                    predicate=lambda e: public_id in e.args[0].get("created", []))
    assert secret_id not in local_ids(moving), "a record filtered for the old JWT reached the layer"
    on_staying = post_server_note(srv, doc_id, "staying", "the other layer goes on")
    client.wait_for("did_receive_changes", since=since, document=staying, timeout=WAIT_S,
                    predicate=lambda e: on_staying in e.args[0].get("created", []))
    assert metric(srv, "layersync_open_streams") == 1
    assert metric(srv, "layersync_stream_subscriptions") == 2
    assert requests_answered(srv, SUBSCRIPTIONS_ROUTE, status="404") == 0
    assert stream_opens(srv) == 1
    assert moving.listening_transport == staying.listening_transport == "stream"


def test_a_dead_stream_of_several_users_is_replaced_by_the_next_one(make_client, own_server):
    """The path of the stream that carries alice's and bob's layers goes silent while the
    server's kernel still sees it acknowledged: the client's new stream names the dead one with
    its key (`replaces`), so the server ends up holding one stream and one subscription per
    layer, not the dead one beside them."""
    heartbeat_s = 2  # the client takes it from the server info: dead after 4 s of silence
    doc_id = "replaced"
    srv, proxy = behind_stall_proxy(own_server, doc_id, heartbeat_s)
    try:
        client = make_client(server_url=proxy.url)
        client.wait_validated(timeout=WAIT_S)
        docs = [listening(client, srv, doc_id, layer, user) for layer, user in (("a", "alice"), ("b", "bob"))]
        wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2, "the subscriptions")
        assert metric(srv, "layersync_open_streams") == 1
        proxy.stall_existing()  # the client's flows go silent; new ones pass
        during = [post_server_note(srv, doc_id, doc.layer_name, "while the old stream is silent") for doc in docs]
        for doc, record_id in zip(docs, during):
            wait_until(lambda d=doc, r=record_id: r in local_ids(d), f"the change on {doc.layer_name} made while the path was silent",
                       timeout=2 * heartbeat_s + 5 + 1 + 10)
        wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2, "one subscription per layer")
        assert metric(srv, "layersync_open_streams") == 1, "a stream the client gave up is still open on the server"
        assert stream_opens(srv) == 2
        assert client.listening_transport == "stream"
    finally:
        proxy.close()


class _PausingProxy(StallProxy):
    """A :class:`StallProxy` whose :meth:`pause_existing` holds the connections open at that
    moment (their bytes wait in the proxy) until :meth:`resume`: a path that is slow for a
    moment, not lost."""

    def pause_existing(self) -> None:
        self.stall_existing()

    def resume(self) -> None:
        with self.lock:
            self.stalled_up_to = 0


def _jwt(srv: ReferenceServer, doc_id: str, layer: str, user_id: str, jti: str) -> str:
    """A JWT of ``user_id`` for ``layer`` with a ``jti`` (so that it can be revoked)."""
    from layersync_server.tokens import mint_token
    return mint_token(srv.private_key.read_bytes(), doc_id, layer=layer, user_id=user_id, jti=jti)


def test_a_revocation_overtaken_by_a_reauthentication_ends_nothing(make_client, own_server):
    """Bob's JWT of layer "b" is revoked: the server ends that subscription and writes
    `unsubscribed` (token_revoked) on the stream, which is slow for a moment. Meanwhile the app
    reauthenticates "b" with bob's new JWT, which subscribes it again on the same stream. The
    stale `unsubscribed` that arrives then is about the revoked JWT's subscription, which is gone:
    it must not end the new one (no did_fail_authentication for the new JWT, "b" keeps
    listening). The other users' layers are untouched all along."""
    srv = own_server()
    doc_id = "revokedreauth"
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    proxy = _PausingProxy(srv.url)
    try:
        client = make_client(server_url=proxy.url)
        client.wait_validated(timeout=WAIT_S)
        revoked = _jwt(srv, doc_id, "b", "bob", "bob-1")
        docs = {"a": listening(client, srv, doc_id, "a", "alice"), "c": listening(client, srv, doc_id, "c", "carol")}
        docs["b"] = client.document_for_jwt(revoked)
        docs["b"].download(wait=True, timeout=WAIT_S)
        docs["b"].start_listening()
        wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 3, "every layer subscribed")
        port = urllib.parse.urlparse(srv.url).port
        wait_until(lambda: established_connections(port) == 1, "only the stream's connection to be left", timeout=20)
        subscribes = requests_answered(srv, SUBSCRIPTIONS_ROUTE, status="200")
        since = client.mark()

        proxy.pause_existing()  # the stream is slow for a moment; new connections pass
        srv.admin_request("/api/revoke", method="POST", json_body={"jwts": [revoked]})
        wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2, "the revoked JWT's subscription to end")
        docs["b"].reauthenticate(_jwt(srv, doc_id, "b", "bob", "bob-2"), wait=True, timeout=WAIT_S)
        wait_until(lambda: requests_answered(srv, SUBSCRIPTIONS_ROUTE, status="200") > subscribes,
                   "b subscribed again with bob's new JWT")
        proxy.resume()  # the stale `unsubscribed` arrives now, then the new subscription's ack

        after = client.mark()
        for layer in ("a", "c", "b"):  # (the stale event is handled before a's and c's changes)
            if layer == "b":
                failed = [e for e in client.events(since=since) if e.name == "did_fail_authentication"]
                assert failed == [], f"the stale unsubscribed ended the new JWT's subscription: {failed}"
            record_id = post_server_note(srv, doc_id, layer, f"{layer} listens on")
            client.wait_for("did_receive_changes", since=after, document=docs[layer], timeout=WAIT_S,
                            predicate=lambda e, r=record_id: r in e.args[0].get("created", []))
        assert metric(srv, "layersync_stream_subscriptions") == 3
        assert metric(srv, "layersync_open_streams") == 1
        assert {layer: doc.listening_transport for layer, doc in docs.items()} == {layer: "stream" for layer in docs}
    finally:
        proxy.close()
