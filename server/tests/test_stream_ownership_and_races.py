"""The change stream (protocol version 2) against what a review of it found: a subscribe
racing with commits must still reach the layer's newest revision, and a stream's
subscriptions can be changed only by the user who opened it (docs/protocol.md)."""

from __future__ import annotations

import threading
import time

import httpx

from conftest import change, note
from test_stream import Stream, stream_server  # noqa: F401 (the fixture)


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
                assert s.subscribe(es.stream_id, doc, layer, since=since).status_code == 200
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
    """DELETE .../subscriptions is authorised with any JWT for the document (any layer, any user)
    and the stream is not bound to whoever opened it: a guest of layer "public" who learns a
    stream id (it is in the access log's path) ends another user's "private" subscription."""
    s = stream_server
    doc = s.server.new_document()
    victim = s.open(doc)
    assert s.subscribe(victim.stream_id, doc, "private").status_code == 200
    guest = s.server.token(doc, "public", user_id="mallory",
                           collaboration_permissions=["annotations:view:group=public"])
    r = s.http.delete(f"/sync/v2/stream/{victim.stream_id}/subscriptions",
                      params={"document_id": doc, "layer": "private"},
                      headers={"Authorization": f"Bearer {guest}"})
    victim.close()
    assert r.status_code in (403, 404), r.text


def test_another_user_cannot_replace_my_subscription_with_a_narrower_view(stream_server):
    """Anyone holding a stream id can re-subscribe (replace) its subscriptions with their own
    JWT: a guest's token for the same layer turns the owner's subscription into the guest's
    view, so the owner's client receives bare tombstones for private records and deletes them."""
    s = stream_server
    doc = s.server.new_document()
    owner = s.open(doc)
    assert s.subscribe(owner.stream_id, doc, "p").status_code == 200
    rev = s.push(doc, "secret", "p", text="private")
    owner.next("changes")
    guest = s.server.token(doc, "p", user_id="mallory",
                           collaboration_permissions=["annotations:view:group=public"])
    r = s.http.post(f"/sync/v2/stream/{owner.stream_id}/subscriptions",
                    json={"document_id": doc, "layer": "p", "since": rev},
                    headers={"Authorization": f"Bearer {guest}"})
    owner.close()
    assert r.status_code in (403, 404), "someone else's JWT re-subscribed my stream: " + r.text
