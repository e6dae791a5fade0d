"""Long-poll ``GET .../changes``: wakes on a commit from another request, or times out empty."""

from __future__ import annotations

import asyncio
import time

import httpx

from conftest import change, note


def test_long_poll_wakes_on_change_from_another_request(server):
    doc = server.new_document()
    url = server.layer_url(doc) + "/changes"

    async def scenario():
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            started = time.monotonic()
            poll = asyncio.create_task(client.get(url, params={"since": 3, "wait": 8},
                                                  headers=server.auth(doc)))
            await asyncio.sleep(0.5)
            assert not poll.done()
            pushed = await client.post(server.layer_url(doc) + "/sync", headers=server.auth(doc),
                                       json={"since": 3, "changes": [change("create", "lp", note())]})
            assert pushed.status_code == 200
            response = await poll
            return response, time.monotonic() - started

    response, elapsed = asyncio.run(scenario())
    assert response.status_code == 200
    body = response.json()
    assert [r["id"] for r in body["records"]] == ["lp"] and body["revision"] == 4
    assert elapsed < 5


def test_long_poll_answers_at_once_when_changes_exist(server):
    doc = server.new_document()
    started = time.monotonic()
    response = server.http.get(server.layer_url(doc) + "/changes", params={"since": 2, "wait": 8},
                               headers=server.auth(doc))
    assert response.status_code == 200 and len(response.json()["records"]) == 1
    assert time.monotonic() - started < 4


def test_long_poll_times_out_empty(server):
    doc = server.new_document()
    started = time.monotonic()
    response = server.http.get(server.layer_url(doc) + "/changes", params={"since": 3, "wait": 1},
                               headers=server.auth(doc))
    elapsed = time.monotonic() - started
    body = response.json()
    assert response.status_code == 200
    assert body["records"] == [] and body["has_more"] is False and body["next_since"] == 3
    assert 0.9 <= elapsed < 5
