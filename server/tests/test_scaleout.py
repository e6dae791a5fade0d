"""Scale-out (docs/architecture.md §10): several server processes on one PostgreSQL.

A change accepted by one process wakes a long-poll held by another (LISTEN/NOTIFY),
and both processes serve the same documents, layers and revisions.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from conftest import CORPUS, change, note, start_server, stop_server


@pytest.fixture
def two_processes(tmp_path, pg_url, keys):
    first = start_server(tmp_path, pg_url, *keys)
    second = start_server(tmp_path, pg_url, *keys)
    yield first[1], second[1]
    stop_server(*first)
    stop_server(*second)


def test_change_on_one_process_wakes_long_poll_on_another(two_processes):
    a, b = two_processes
    doc = "scale-doc"
    assert a.upload((CORPUS / "sample-files-024-annotated_pdf.pdf").read_bytes(), doc).status_code == 200
    revision = b.records(doc)["revision"]
    assert revision == a.records(doc)["revision"] == 3

    async def scenario():
        async with httpx.AsyncClient(timeout=30) as client:
            poll = asyncio.create_task(client.get(a.url + a.layer_url(doc) + "/changes",
                                                  params={"since": revision, "wait": 8},
                                                  headers=a.auth(doc)))
            await asyncio.sleep(0.5)
            assert not poll.done()
            started = time.monotonic()
            pushed = await client.post(b.url + b.layer_url(doc) + "/sync", headers=b.auth(doc),
                                       json={"since": revision,
                                             "changes": [change("create", "from-b", note("hi"))]})
            assert pushed.status_code == 200 and pushed.json()["accepted"]
            response = await poll
            return response, time.monotonic() - started

    response, elapsed = asyncio.run(scenario())
    assert response.status_code == 200
    assert [r["id"] for r in response.json()["records"]] == ["from-b"]
    assert elapsed < 3, f"long-poll on process A woke {elapsed:.1f} s after the commit on B"


def test_concurrent_writers_on_two_processes_get_unique_revisions(two_processes):
    a, b = two_processes
    doc = "scale-writers"
    assert a.upload((CORPUS / "sample-files-024-annotated_pdf.pdf").read_bytes(), doc).status_code == 200

    async def push(server, prefix):
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            for i in range(15):
                response = await client.post(server.layer_url(doc) + "/sync", headers=server.auth(doc),
                                             json={"changes": [change("create", f"{prefix}{i}", note())]})
                assert response.status_code == 200 and len(response.json()["accepted"]) == 1

    async def both():
        await asyncio.gather(push(a, "a"), push(b, "b"))

    asyncio.run(both())
    records = a.records(doc, limit=1000)["records"]
    revisions = [r["revision"] for r in records]
    assert len(records) == 33 and sorted(revisions) == list(range(1, 34))


def test_revocation_and_admin_changes_reach_every_process(two_processes):
    a, b = two_processes
    doc = "scale-revoke"
    assert a.upload((CORPUS / "sample-files-024-annotated_pdf.pdf").read_bytes(), doc).status_code == 200
    headers = {"Authorization": f"Bearer {a.token(doc, jti='shared-jti')}"}
    assert b.http.get(b.layer_url(doc) + "/records", headers=headers).status_code == 200
    assert a.http.post("/api/tokens/revoke", json={"jti": "shared-jti"}, headers=a.admin()).status_code == 200
    assert b.http.get(b.layer_url(doc) + "/records", headers=headers).status_code == 403

    async def scenario():
        async with httpx.AsyncClient(timeout=30) as client:
            poll = asyncio.create_task(client.get(a.url + a.layer_url(doc) + "/changes",
                                                  params={"since": 3, "wait": 8}, headers=a.auth(doc)))
            await asyncio.sleep(0.5)
            started = time.monotonic()
            made = await client.post(b.url + f"/api/documents/{doc}/annotations", headers=b.admin(),
                                     json={"id": "adm-b", "content": note("admin on b")})
            assert made.status_code == 200
            return await poll, time.monotonic() - started

    response, elapsed = asyncio.run(scenario())
    assert [r["id"] for r in response.json()["records"]] == ["adm-b"] and elapsed < 3
