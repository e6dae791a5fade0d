"""Deleting a layer (or its document) while clients listen, and bringing it back on
purpose (issue 19 item 1; docs/protocol.md, "When a layer is created").

A deleted layer is not re-created by a request that names it: a parked long-poll ends
at once with 404 ``not_found``, and every later sync, records or changes request on it
answers 404 too, until the admin API creates it again (``POST /api/documents/{id}/layers``,
e.g. from a copy: the restore flow), which works on the deleted name (no 409
``layer_exists``) and gives a new epoch. Each test runs on SQLite (one process) and on
two PostgreSQL processes (the listener on one, the admin calls on the other: the wake-up
crosses processes through LISTEN/NOTIFY).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from conftest import CORPUS, change, note, start_server, stop_server

PDF = CORPUS / "sample-files-024-annotated_pdf.pdf"
#: How long a parked long-poll may take to end after the delete answered.
PROMPT_S = 2.0


@pytest.fixture(params=["sqlite", "postgres-two-processes"])
def pair(request, tmp_path, keys):
    """``(listener, admin)`` servers: the same SQLite process twice, or two processes on
    one PostgreSQL database."""
    if request.param == "sqlite":
        started = [start_server(tmp_path, str(tmp_path / "db.sqlite"), *keys)]
        yield started[0][1], started[0][1]
    else:
        url = request.getfixturevalue("pg_url")
        started = [start_server(tmp_path, url, *keys), start_server(tmp_path, url, *keys)]
        yield started[0][1], started[1][1]
    for process, instance in started:
        stop_server(process, instance)


def _open_long_polls(server) -> int:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    line = next(l for l in text.splitlines() if l.startswith("layersync_open_long_polls "))
    return int(float(line.split()[1]))


async def _parked(server, count: int) -> None:
    deadline = time.monotonic() + 10
    while _open_long_polls(server) < count:
        assert time.monotonic() < deadline, f"fewer than {count} long-polls parked"
        await asyncio.sleep(0.02)


def _poll(client: httpx.AsyncClient, server, doc: str, layer: str, since: int, wait: float = 8):
    return asyncio.create_task(client.get(
        server.url + server.layer_url(doc, layer or "~") + "/changes",
        params={"since": since, "wait": wait}, headers=server.auth(doc, layer)))


def _layer_names(server, doc: str) -> list[str]:
    response = server.http.get(f"/api/documents/{doc}/layers", headers=server.admin())
    assert response.status_code == 200, response.text
    return response.json()["data"]


def _assert_not_found(response: httpx.Response) -> None:
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "not_found", response.text


def _assert_stays_deleted(server, doc: str, layer: str) -> None:
    """Every client request on the layer answers 404 and none brings it back."""
    url = server.layer_url(doc, layer)
    auth = server.auth(doc, layer)
    _assert_not_found(server.http.get(url + "/changes", params={"since": 0, "wait": 0}, headers=auth))
    _assert_not_found(server.http.get(url + "/changes", params={"since": 3, "wait": 0.3}, headers=auth))
    _assert_not_found(server.sync(doc, [], layer=layer))
    _assert_not_found(server.sync(doc, [change("create", "resurrect", note())], layer=layer))
    _assert_not_found(server.http.get(url + "/records", headers=auth))
    _assert_not_found(server.http.get(url + "/records", params={"since": 2}, headers=auth))
    _assert_not_found(server.http.get(url + "/deleted", headers=auth))
    _assert_not_found(server.http.get(f"/api/documents/{doc}/layers/{layer}/annotations",
                                      headers=server.admin()))
    _assert_not_found(server.http.get(f"/api/documents/{doc}/layers/{layer}/annotations",
                                      headers={**server.admin(), "Accept": "application/x-ndjson"}))
    _assert_not_found(server.http.post(f"/api/documents/{doc}/layers/{layer}/annotations",
                                       json={"content": note()}, headers=server.admin()))
    assert layer not in _layer_names(server, doc)


def _new_layer(server, doc: str, count: int) -> tuple[str, dict]:
    """A layer created by a JWT naming it (it never existed), holding ``count`` notes."""
    layer = "l-" + uuid.uuid4().hex[:8]
    answer = server.sync(doc, [change("create", f"n{i}", note(f"note {i}")) for i in range(count)],
                         layer=layer)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["accepted"]) == count
    return layer, answer.json()


def test_a_parked_long_poll_ends_with_404_when_its_layer_is_deleted(pair):
    listener, admin = pair
    doc = "del-" + uuid.uuid4().hex[:8]
    assert admin.upload(PDF.read_bytes(), doc).status_code == 200
    layer, answer = _new_layer(listener, doc, 2)
    assert layer in _layer_names(admin, doc)

    async def scenario():
        async with httpx.AsyncClient(timeout=30) as client:
            before = _open_long_polls(listener)
            polls = [_poll(client, listener, doc, layer, answer["revision"]) for _ in range(3)]
            other = _poll(client, listener, doc, "", 10**6, wait=3)  # another layer: unaffected
            await _parked(listener, before + 4)
            assert not any(p.done() for p in polls)
            deleted = await client.delete(admin.url + f"/api/documents/{doc}/layers/{layer}",
                                          headers=admin.admin())
            assert deleted.status_code == 200, deleted.text
            started = time.monotonic()
            done = await asyncio.gather(*polls)
            elapsed = time.monotonic() - started
            return done, elapsed, other

    done, elapsed, other = asyncio.run(scenario())
    assert elapsed < PROMPT_S, f"parked long-polls ended {elapsed:.2f} s after the delete"
    for response in done:
        _assert_not_found(response)
        assert "deleted" in response.json()["error"]["message"]
    _assert_stays_deleted(listener, doc, layer)
    _assert_stays_deleted(admin, doc, layer)
    # deleting it again: 404 (nothing to delete); the document and its other layers work
    _assert_not_found(admin.http.delete(f"/api/documents/{doc}/layers/{layer}", headers=admin.admin()))
    assert listener.records(doc)["revision"] == admin.records(doc)["revision"]
    assert listener.sync(doc, [change("create", "fine", note())]).status_code == 200
    assert _new_layer(listener, doc, 1)[0] in _layer_names(admin, doc)  # new names: still created


def test_delete_then_restore_from_a_copy_with_listeners(pair):
    """The documented restore flow: copy the layer, delete it, create it again from the
    copy. The create succeeds (no 409), with a new epoch; listeners of the restored layer
    get its records and its later changes; the old epoch's clients are told to reset."""
    listener, admin = pair
    doc = "restore-" + uuid.uuid4().hex[:8]
    assert admin.upload(PDF.read_bytes(), doc).status_code == 200
    layer, answer = _new_layer(listener, doc, 3)
    old_epoch = answer["epoch"]
    backup = admin.http.post(f"/api/documents/{doc}/layers", headers=admin.admin(),
                             json={"name": layer + "-backup", "source_layer_name": layer})
    assert backup.status_code == 200, backup.text

    async def delete_while_listening():
        async with httpx.AsyncClient(timeout=30) as client:
            before = _open_long_polls(listener)
            polls = [_poll(client, listener, doc, layer, answer["revision"]) for _ in range(2)]
            await _parked(listener, before + 2)
            deleted = await client.delete(admin.url + f"/api/documents/{doc}/layers/{layer}",
                                          headers=admin.admin())
            assert deleted.status_code == 200, deleted.text
            return await asyncio.wait_for(asyncio.gather(*polls), PROMPT_S)

    for response in asyncio.run(delete_while_listening()):
        _assert_not_found(response)
    _assert_stays_deleted(listener, doc, layer)

    restored = admin.http.post(f"/api/documents/{doc}/layers", headers=admin.admin(),
                               json={"name": layer, "source_layer_name": layer + "-backup"})
    assert restored.status_code == 200, restored.text  # was 409 layer_exists
    data = restored.json()["data"]
    assert data["revision"] == 3 and data["recordCount"] == 3 and data["epoch"] != old_epoch
    assert layer in _layer_names(listener, doc)

    # a client of the old epoch is told to reset; a fresh listener gets the records
    stale = listener.sync(doc, [], since=answer["revision"], epoch=old_epoch, layer=layer).json()
    assert stale["epoch_changed"] and stale["epoch"] == data["epoch"]
    first = listener.http.get(listener.layer_url(doc, layer) + "/changes",
                              params={"since": 0, "wait": 5}, headers=listener.auth(doc, layer))
    assert first.status_code == 200, first.text
    assert first.json()["epoch"] == data["epoch"]
    assert sorted(r["id"] for r in first.json()["records"]) == ["n0", "n1", "n2"]

    async def listen_on_the_restored_layer():
        async with httpx.AsyncClient(timeout=30) as client:
            before = _open_long_polls(listener)
            polls = [_poll(client, listener, doc, layer, data["revision"]) for _ in range(2)]
            await _parked(listener, before + 2)
            written = await client.post(admin.url + f"/api/documents/{doc}/layers/{layer}/annotations",
                                        json={"id": "after", "content": note("after restore")},
                                        headers=admin.admin())
            assert written.status_code == 200, written.text
            return await asyncio.wait_for(asyncio.gather(*polls), PROMPT_S)

    for response in asyncio.run(listen_on_the_restored_layer()):
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["epoch"] == data["epoch"] and [r["id"] for r in body["records"]] == ["after"]
    # clients write to it again
    pushed = listener.sync(doc, [change("create", "n9", note())], since=4, epoch=data["epoch"],
                           layer=layer).json()
    assert not pushed["epoch_changed"] and pushed["revision"] == 5

    # deleted again, then created from the base layer (no source): works on the name too
    assert admin.http.delete(f"/api/documents/{doc}/layers/{layer}",
                             headers=admin.admin()).status_code == 200
    _assert_stays_deleted(listener, doc, layer)
    again = admin.http.post(f"/api/documents/{doc}/layers", headers=admin.admin(), json={"name": layer})
    assert again.status_code == 200, again.text
    assert again.json()["data"]["epoch"] not in (old_epoch, data["epoch"])
    assert listener.sync(doc, [], layer=layer).status_code == 200


def test_deleting_the_document_ends_its_long_polls_and_keeps_its_layers_deleted(pair):
    listener, admin = pair
    doc = "deldoc-" + uuid.uuid4().hex[:8]
    assert admin.upload(PDF.read_bytes(), doc).status_code == 200
    layer, answer = _new_layer(listener, doc, 1)
    base = listener.records(doc)["revision"]

    async def scenario():
        async with httpx.AsyncClient(timeout=30) as client:
            before = _open_long_polls(listener)
            polls = [_poll(client, listener, doc, layer, answer["revision"]),
                     _poll(client, listener, doc, "", base)]
            await _parked(listener, before + 2)
            deleted = await client.delete(admin.url + f"/api/documents/{doc}", headers=admin.admin())
            assert deleted.status_code == 200, deleted.text
            return await asyncio.wait_for(asyncio.gather(*polls), PROMPT_S)

    for response in asyncio.run(scenario()):
        _assert_not_found(response)
    for name in ("", layer):
        _assert_not_found(listener.sync(doc, [change("create", "x", note())], layer=name))
        _assert_not_found(listener.http.get(listener.layer_url(doc, name or "~") + "/changes",
                                            params={"since": 0, "wait": 0.3},
                                            headers=listener.auth(doc, name)))
    # uploaded again: the upload brings the default layer back, the other layer stays
    # deleted until someone creates it
    assert admin.upload(PDF.read_bytes(), doc).status_code == 200
    assert listener.records(doc)["revision"] == base
    _assert_stays_deleted(listener, doc, layer)
    created = admin.http.post(f"/api/documents/{doc}/layers", headers=admin.admin(), json={"name": layer})
    assert created.status_code == 200, created.text
    assert listener.sync(doc, [], layer=layer).status_code == 200


def test_a_long_poll_that_parks_after_a_delete_it_read_before_re_reads_at_once():
    """The window between a long-poll's storage read (in a worker thread, or before
    another process's reset arrived) and its parking: a ``forget`` that ran in it makes
    the wait return at once, so the re-read answers 404 instead of a full wait."""
    from layersync_server.notify import LayerNotifier

    async def scenario():
        notifier = LayerNotifier()
        seen = notifier.resets  # the route reads this, then storage
        notifier.forget("d", "l")  # the layer is deleted meanwhile
        started = time.monotonic()
        assert await notifier.wait_for_change("d", "l", 0, 0, 5.0, resets_seen=seen) == (True, None)
        assert time.monotonic() - started < 0.5
        # nothing forgotten since the read: the wait runs its course
        assert await notifier.wait_for_change("d", "l", 0, 0, 0.1,
                                              resets_seen=notifier.resets) == (False, None)

    asyncio.run(scenario())
