"""Listening on the change stream with the JWTs of several users in one client (protocol
version 2, issue 16): a stream belongs to the `user_id` of the JWT that opened it, and the
server answers a subscription made with another user's JWT as for an unknown stream (404),
so one client that listens on layers of several users (an app with two accounts, a JWT
without `user_id` beside one with) holds one stream per user. Every layer is delivered over
the stream of its own user, with no reconnect loop; a user's layer that stops listening or
whose JWT expires leaves the other users' streams as they were; a reauthentication with a JWT
of another user moves the layer to that user's stream, and the old user's subscription
delivers nothing more to it."""
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


def test_layers_of_several_users_in_one_client_are_all_delivered_over_the_stream(make_client, own_server):
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
    # one stream per user (a JWT without user_id is a user of its own), not one per layer ...
    assert metric(srv, "layersync_open_streams") == 3
    # ... one connection each once the downloads' and subscriptions' idle keep-alives are
    # closed by the server (5 s), all held by the one listener thread
    port = urllib.parse.urlparse(srv.url).port
    wait_until(lambda: established_connections(port) == 3, "only the three streams' connections to be left", timeout=20)
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
    # ... and arrives over the listener's streams.
    for layer, record_id in written.items():
        client.wait_for("did_receive_changes", since=since, document=docs[layer], timeout=WAIT_S,
                        predicate=lambda e, r=record_id: r in e.args[0].get("created", []))
        assert docs[layer].get_annotation(record_id)["text"]["value"] == f"from the writer on {layer}"

    # No reconnect loop: three opens in all, and no subscription refused as an unknown stream.
    opens = stream_opens(srv)
    time.sleep(3)
    assert stream_opens(srv) == opens == 3
    assert requests_answered(srv, SUBSCRIPTIONS_ROUTE, status="404") == 0
    assert metric(srv, "layersync_open_streams") == 3
    assert metric(srv, "layersync_stream_subscriptions") == len(owners)

    # A user's last layer stops listening: that user's stream closes, the others stay.
    docs["n1"].stop_listening()
    wait_until(lambda: metric(srv, "layersync_open_streams") == 2, "the stream without user_id to close")
    for layer in ("b1", "b2"):
        docs[layer].stop_listening()
    wait_until(lambda: metric(srv, "layersync_open_streams") == 1, "bob's stream to close")
    after = client.mark()
    record_id = post_server_note(srv, doc_id, "a2", "alice goes on")
    client.wait_for("did_receive_changes", since=after, document=docs["a2"], timeout=WAIT_S,
                    predicate=lambda e: record_id in e.args[0].get("created", []))
    for doc in (docs["a1"], docs["a2"]):
        doc.stop_listening()
    wait_until(lambda: metric(srv, "layersync_open_streams") == 0, "the last stream to close")
    assert stream_opens(srv) == 3


def test_the_user_whose_jwt_opened_the_first_stream_leaving_does_not_stop_the_others(make_client, own_server):
    """The first layer's JWT (the one that opened the client's first stream) expires, then its
    user's other layer stops listening: the other user's layers listen on, on their stream."""
    srv = own_server(env={"LAYERSYNC_SERVER_JWT_LEEWAY_S": "0"})
    doc_id = "firstleaves"
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    client = make_client(server_url=srv.url)
    client.wait_validated(timeout=WAIT_S)
    since = client.mark()
    short = listening(client, srv, doc_id, "first", "alice", expires_in_s=6)
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 1, "the first layer's subscription")
    alice = listening(client, srv, doc_id, "alice2", "alice")
    bob = [listening(client, srv, doc_id, layer, "bob") for layer in ("bob1", "bob2")]
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 4, "every layer subscribed")
    assert metric(srv, "layersync_open_streams") == 2

    failed = client.wait_for("did_fail_authentication", since=since, document=short, timeout=WAIT_S)
    assert isinstance(failed.args[0], layersync.AccessDeniedError), failed.args
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 3, "the expired layer's subscription to end")
    alice.stop_listening()
    wait_until(lambda: metric(srv, "layersync_open_streams") == 1, "alice's stream to close with her last layer")
    after = client.mark()
    for doc in bob:
        record_id = post_server_note(srv, doc_id, doc.layer_name, "bob listens on")
        client.wait_for("did_receive_changes", since=after, document=doc, timeout=WAIT_S,
                        predicate=lambda e, r=record_id: r in e.args[0].get("created", []))
    assert metric(srv, "layersync_stream_subscriptions") == 2
    assert stream_opens(srv) == 2
    assert requests_answered(srv, SUBSCRIPTIONS_ROUTE, status="404") == 0
    assert [e.name for e in client.events(since=since, document=short) if e.name == "did_fail_authentication"] \
        == ["did_fail_authentication"]  # once
    assert client.listening_transport == "stream"


def test_a_reauthentication_as_another_user_moves_the_layer_to_that_users_stream(make_client, own_server):
    """A layer listened to with a JWT without user_id (full view) is reauthenticated with
    bob's JWT that views only the group "public": its subscription moves to bob's stream, and
    nothing filtered for the old JWT reaches it any more (a record bob may not view stays out
    of the layer) while another layer keeps the old user's stream."""
    srv = own_server()
    doc_id = "reauthuser"
    srv.upload(corpus_pdf("pdfjs-pr20043.pdf"), doc_id)
    client = make_client(server_url=srv.url)
    client.wait_validated(timeout=WAIT_S)
    moving = listening(client, srv, doc_id, "moving", None)
    staying = listening(client, srv, doc_id, "staying", None)
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2, "both layers subscribed")
    assert metric(srv, "layersync_open_streams") == 1

    bobs = srv.mint_token(doc_id, layer="moving", user_id="bob",
                          collaboration_permissions=["annotations:*:group=public"])
    moving.reauthenticate(bobs, wait=True, timeout=WAIT_S)
    wait_until(lambda: metric(srv, "layersync_open_streams") == 2, "bob's stream")
    wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2,
               "the layer's subscription on the old stream to end (one per layer)")

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
    on_staying = post_server_note(srv, doc_id, "staying", "the old user's stream goes on")
    client.wait_for("did_receive_changes", since=since, document=staying, timeout=WAIT_S,
                    predicate=lambda e: on_staying in e.args[0].get("created", []))
    assert requests_answered(srv, SUBSCRIPTIONS_ROUTE, status="404") == 0
    assert stream_opens(srv) == 2
    assert moving.listening_transport == staying.listening_transport == "stream"


def test_each_users_dead_stream_is_replaced_by_that_users_next_one(make_client, own_server):
    """The path of both users' streams goes silent while the server's kernel still sees them
    acknowledged: each user's new stream names that user's dead one (`replaces`, which the
    server honours only from the same user), so the server ends up holding one stream per
    user and one subscription per layer, not the dead ones beside them."""
    heartbeat_s = 2  # the client takes it from the server info: dead after 4 s of silence
    doc_id = "replaced"
    srv, proxy = behind_stall_proxy(own_server, doc_id, heartbeat_s)
    try:
        client = make_client(server_url=proxy.url)
        client.wait_validated(timeout=WAIT_S)
        docs = [listening(client, srv, doc_id, layer, user) for layer, user in (("a", "alice"), ("b", "bob"))]
        wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2, "the subscriptions")
        assert metric(srv, "layersync_open_streams") == 2
        proxy.stall_existing()  # the client's flows go silent; new ones pass
        during = [post_server_note(srv, doc_id, doc.layer_name, "while the old streams are silent") for doc in docs]
        for doc, record_id in zip(docs, during):
            wait_until(lambda d=doc, r=record_id: r in local_ids(d), f"the change on {doc.layer_name} made while the path was silent",
                       timeout=2 * heartbeat_s + 5 + 1 + 10)
        wait_until(lambda: metric(srv, "layersync_stream_subscriptions") == 2, "one subscription per layer")
        assert metric(srv, "layersync_open_streams") == 2, "a stream the client gave up is still open on the server"
        assert client.listening_transport == "stream"
    finally:
        proxy.close()
