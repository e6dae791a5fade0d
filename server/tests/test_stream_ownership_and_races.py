"""The change stream (protocol version 2) against what a review of it found: a subscribe
racing with commits must still reach the layer's newest revision, and a stream's
subscriptions can be changed only by a request that presents the stream's key (its
``hello``'s ``stream_key``), with a JWT of any user (docs/protocol.md): the id alone, which
access logs hold, does nothing."""

from __future__ import annotations

import threading
import time

import httpx

from conftest import change, note
from layersync_server.permissions import bare_tombstone
from test_stream import EventStream, Stream, stream_server  # noqa: F401 (the fixture)


def _last_revision(es) -> int:
    """The revision up to which the stream has told its subscriber (changes / notice)."""
    last = 0
    while True:
        try:
            name, data = es.events.get_nowait()
        except Exception:  # queue.Empty
            return last
        if name == "changes":
            last = data["next_since"]
        elif name == "notice":
            last = data["revision"]


def test_subscribe_while_commits_flow_never_misses_the_newest_revision(stream_server):
    """A commit that lands between the subscribe's page read (in a worker: >16 records) and the
    subscription's registration is never delivered: the subscription sits one revision behind
    until some later commit happens (for a quiet layer: forever)."""
    s = stream_server
    doc = s.server.new_document()
    layer = "race"
    for i in range(40):  # the catch-up page is too big to be read inline: a worker reads it
        start = s.push(doc, f"seed{i}", layer)
    cursor = {"since": start}  # the writers' newest revision (small sync answers: fast commits)
    lagging: list = []
    for _round in range(10):
        stop = threading.Event()

        def writer(n0: int) -> None:
            http = httpx.Client(base_url=s.server.url, timeout=30)
            since, n = cursor["since"], 0
            auth = s.server.auth(doc, layer)
            while not stop.is_set():
                r = http.post(s.server.layer_url(doc, layer) + "/sync",
                              json={"client_id": f"w{n0}", "epoch": None, "since": since,
                                    "changes": [change("create", f"w{n0}-{_round}-{n}", note("w"))]},
                              headers=auth)
                since, n = r.json()["revision"], n + 1
                cursor["since"] = max(cursor["since"], since)
            http.close()

        writers = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
        for t in writers:
            t.start()
        streams = []
        try:
            for _ in range(40):
                es = s.open(doc)
                # from 40 revisions back: a page a worker reads (as from 0), without every
                # subscribe reading, sending and parsing the whole grown layer
                since = max(0, cursor["since"] - 40)
                assert s.subscribe(es, doc, layer, since=since).status_code == 200
                streams.append(es)
        finally:
            stop.set()
            for t in writers:
                t.join()
        # the layer is quiet now: every subscription must catch up within 3 s (a stuck one
        # never does: the wait runs out); waiting only as long as it takes
        final = s.server.records(doc, layer=layer, since=0, limit=1)["revision"]
        told = [0] * len(streams)
        deadline = time.monotonic() + 3
        while True:
            told = [max(t, _last_revision(es)) for t, es in zip(told, streams)]
            if all(t == final for t in told) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for got, es in zip(told, streams):
            if got != final:
                lagging.append((got, final))
            es.close()
        if lagging:
            break
    assert lagging == [], f"subscriptions stuck behind the layer's revision: {lagging}"


def test_a_token_for_another_layer_cannot_unsubscribe_someone_elses_subscription(stream_server):
    """DELETE .../subscriptions is authorised with any JWT for the document (any layer, any
    user): a guest of layer "public" who learns a stream id (it is in the access log's path)
    must not end another client's "private" subscription: without the stream's key it is
    the 404 of an unknown stream."""
    s = stream_server
    doc = s.server.new_document()
    victim = s.open(doc)
    assert s.subscribe(victim, doc, "private").status_code == 200
    guest = s.server.token(doc, "public", user_id="mallory",
                           collaboration_permissions=["annotations:view:group=public"])
    r = s.http.delete(f"/sync/v2/stream/{victim.stream_id}/subscriptions",
                      params={"document_id": doc, "layer": "private"},
                      headers={"Authorization": f"Bearer {guest}"})
    assert r.status_code == 404, r.text
    rev = s.push(doc, "still", "private")
    assert victim.next("changes")["revision"] == rev
    victim.close()


def test_another_user_cannot_replace_my_subscription_with_a_narrower_view(stream_server):
    """Anyone holding a stream id could re-subscribe (replace) its subscriptions with their own
    JWT: a guest's token for the same layer would turn the client's subscription into the
    guest's view, so the client receives bare tombstones for private records and deletes them.
    Without the stream's key it is the 404 of an unknown stream."""
    s = stream_server
    doc = s.server.new_document()
    owner = s.open(doc)
    assert s.subscribe(owner, doc, "p").status_code == 200
    rev = s.push(doc, "secret", "p", text="private")
    owner.next("changes")
    guest = s.server.token(doc, "p", user_id="mallory",
                           collaboration_permissions=["annotations:view:group=public"])
    r = s.http.post(f"/sync/v2/stream/{owner.stream_id}/subscriptions",
                    json={"document_id": doc, "layer": "p", "since": rev},
                    headers={"Authorization": f"Bearer {guest}"})
    owner.close()
    assert r.status_code == 404, "someone else's JWT re-subscribed my stream: " + r.text


def _answer(response) -> tuple:
    """What a client can tell of an answer: status, body, the headers that are not per request."""
    return (response.status_code, response.content,
            {k: v for k, v in response.headers.items() if k not in ("date", "content-length")})


def test_a_wrong_or_missing_key_answers_exactly_as_an_unknown_stream(stream_server):
    """Subscribe and unsubscribe with the stream's id and no key, an empty one, a wrong one
    (another open stream's key, or the key cut short): the same answer as for an id the
    server never handed out (404 not_found), and nothing changes on the stream."""
    s = stream_server
    doc = s.server.new_document()
    stream, other = s.open(doc), s.open(doc)
    assert s.subscribe(stream, doc, "kept").status_code == 200
    unknown_sub = _answer(s.subscribe("no-such-stream", doc, "x", key=stream.stream_key))
    unknown_unsub = _answer(s.unsubscribe("no-such-stream", doc, "kept", key=stream.stream_key))
    assert unknown_sub[0] == unknown_unsub[0] == 404
    assert b'"code":"not_found"' in unknown_sub[1].replace(b" ", b"")
    for key in (None, "", other.stream_key, stream.stream_key[:-1], stream.stream_key + "A",
                "=" * 43):
        assert _answer(s.subscribe(stream.stream_id, doc, "x", key=key)) == unknown_sub, key
        assert _answer(s.unsubscribe(stream.stream_id, doc, "kept", key=key)) == unknown_unsub, key
    # nothing was subscribed or ended: "kept" still delivers, "x" never does
    s.push(doc, "x1", "x")
    rev = s.push(doc, "k1", "kept")
    data = stream.next("changes")
    assert data["layer"] == "kept" and data["revision"] == rev
    assert stream.quiet(0.3) == []
    assert s.unsubscribe(stream, doc, "kept").status_code == 200
    stream.close()
    other.close()


def test_one_stream_takes_the_subscriptions_of_every_user_with_its_key(stream_server):
    """A stream opened with alice's JWT takes subscriptions authorised by bob's JWT and by a
    JWT without user_id (each its own layer's), delivers each as that JWT may see it, and
    any JWT for the document ends any of them with the key: who opened the stream does not
    matter, the key does."""
    s = stream_server
    doc = s.server.new_document()
    stream = EventStream(s.server.url, s.server.token(doc, user_id="alice"))
    guest = ["annotations:view:group=public"]
    assert s.subscribe(stream, doc, "a", user_id="alice").status_code == 200
    assert s.subscribe(stream, doc, "b", user_id="bob", collaboration_permissions=guest).status_code == 200
    assert s.subscribe(stream, doc, "c").status_code == 200  # no user_id
    got = {}
    for layer in ("a", "b", "c"):
        s.push(doc, "n-" + layer, layer)
    s.server.sync(doc, [{**change("create", "public-b", note("open")), "group": "public"}], layer="b")
    while len(got) < 3 or len(got.get("b", [])) < 1:
        data = stream.next("changes")
        got.setdefault(data["layer"], []).extend(r["id"] for r in data["records"])
    assert got["a"] == ["n-a"] and got["c"] == ["n-c"]
    assert got["b"] == ["public-b"], "bob's subscription sees bob's view"
    # bob's layer ended with carol's JWT for the document (another layer), with the key
    r = s.unsubscribe(stream, doc, "b", token=s.server.token(doc, "zzz", user_id="carol"))
    assert r.status_code == 200 and r.json() == {"subscribed": False}
    # bob re-subscribes "a" (alice's): it is replaced, now with bob's JWT
    assert s.subscribe(stream, doc, "a", since=1, user_id="bob", collaboration_permissions=guest).status_code == 200
    s.push(doc, "b2", "b")
    rev = s.push(doc, "private-a", "a")
    data = stream.next("changes")
    # (a delta: a record bob's view leaves out is a bare tombstone)
    assert data["layer"] == "a" and data["revision"] == rev, data
    assert data["records"] == [bare_tombstone("private-a", rev)], data
    assert stream.quiet(0.3) == []
    stream.close()


def test_an_expired_jwt_still_ends_a_subscription_with_the_key(stream_server):
    """Unsubscribing needs a JWT of this server for the document, but not an unexpired one:
    the key is the authority, and a client must be able to end a subscription whose token
    ran out. A JWT for another document, or a forged one, is still refused (403)."""
    s = stream_server
    doc, elsewhere = s.server.new_document(), s.server.new_document()
    stream = s.open(doc)
    assert s.subscribe(stream, doc, "x").status_code == 200
    assert s.unsubscribe(stream, doc, "x", token=s.server.token(elsewhere, "x")).status_code == 403
    assert s.unsubscribe(stream, doc, "x", token=s.server.token(doc, "x") + "x").status_code == 403
    expired = s.server.token(doc, "x", expires_in_s=-60)
    assert s.unsubscribe(stream, doc, "x", key=None, token=expired).status_code == 404
    assert s.unsubscribe(stream, doc, "x", token=expired).json() == {"subscribed": False}
    s.push(doc, "after", "x")
    assert stream.quiet(0.3) == []
    # the same expired JWT still opens, subscribes and reads nothing
    assert s.subscribe(stream, doc, "x", token=expired).status_code == 403
    assert s.http.get(s.server.layer_url(doc, "x") + "/records",
                      headers={"Authorization": f"Bearer {expired}"}).status_code == 403
    stream.close()


def test_a_replaces_key_that_no_stream_could_have_tells_nothing_about_the_id(stream_server):
    """``{"replaces": id, "key": "\\ud800"}`` (a lone surrogate, valid JSON): ignored as any
    wrong key, whether the id is open or not. It answered 500 for an open id and 200 for an
    unknown one (the key could not be encoded for the comparison), which told anyone with a
    JWT whether a stream id is still open, and opened no stream for the client."""
    s = stream_server
    doc = s.server.new_document()
    victim = s.open(doc)
    token = s.server.token(doc)
    for target in (victim.stream_id, "no-such-stream"):
        body = ('{"replaces": "%s", "key": "\\ud800\\udc00x\\udfff"}' % target).encode()
        replacing = EventStream(s.server.url, token, read=False, body=body)
        try:
            replacing.start()  # (its hello, or it fails)
            assert replacing.status == 200, target
        finally:
            replacing.close()
    rev = s.push(doc, "still-open")
    assert s.subscribe(victim, doc, since=rev - 1).status_code == 200
    assert victim.next("changes")["revision"] == rev
    victim.close()


def test_unsubscribe_refuses_a_malformed_exp_as_every_route_does(stream_server):
    """Unsubscribe checks its JWT with ``verify(check_expiry=False)``; a JWT (validly signed)
    whose ``exp`` is no integer is refused 403 there as on every other route, not a 500 (the
    verifier's cache converted the unchecked ``exp`` with int())."""
    from layersync_server.tokens import mint_token
    s = stream_server
    doc = s.server.new_document()
    stream = s.open(doc)
    assert s.subscribe(stream, doc, "x").status_code == 200
    for exp in ("soon", "1e3", [1], {"at": 1}):
        token = mint_token(s.server.private_pem, doc, layer="x", expires_in_s=None, exp=exp)
        elsewhere = s.http.get(s.server.layer_url(doc, "x") + "/records",
                               headers={"Authorization": f"Bearer {token}"})
        assert elsewhere.status_code == 403, (exp, elsewhere.text)
        with httpx.Client(base_url=s.server.url, timeout=10) as http:  # (a 500 closes the connection)
            r = http.delete(f"/sync/v2/stream/{stream.stream_id}/subscriptions",
                            params={"document_id": doc, "layer": "x"},
                            headers={"Authorization": f"Bearer {token}",
                                     "LayerSync-Stream-Key": stream.stream_key})
        assert r.status_code == 403, (exp, r.status_code, r.text)
        assert r.json()["error"] == elsewhere.json()["error"], exp
    # nothing was ended
    rev = s.push(doc, "kept", "x")
    assert stream.next("changes")["revision"] == rev
    stream.close()
