"""Operations: /healthz, Prometheus /metrics, settings from a config file and the
environment, JSON logs that never contain tokens, 1,000 idle long-polls."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from conftest import change, note, start_server, stop_server


def test_healthz_and_metrics(server):
    assert server.http.get("/healthz").json() == {"status": "ok"}
    doc = server.new_document()
    server.sync(doc, [change("create", "m1", note())])
    text = server.http.get("/metrics").text
    assert 'layersync_http_requests_total{method="POST",route="/sync/v1/documents/{document_id}/layers/{layer:path}/sync",status="200"}' in text
    assert 'layersync_sync_duration_seconds_count{endpoint="sync"}' in text
    assert "layersync_open_long_polls" in text
    assert f'layersync_layer_records{{document_id="{doc}",layer=""}} 4.0' in text


def test_config_file_environment_and_token_free_logs(tmp_path, keys):
    private_pem, public_key = keys
    (tmp_path / "layersync.toml").write_text(
        f'[server]\ndb = "{tmp_path / "from-config.sqlite"}"\nmax-wait-s = 7\nhistory_versions = 5\n')
    log = tmp_path / "stderr.log"
    process, srv = start_server(tmp_path, str(tmp_path / "flag.sqlite"), private_pem, public_key,
                                "--config", str(tmp_path / "layersync.toml"), "--log-level", "info",
                                stderr_path=log, env={"LAYERSYNC_SERVER_MAX_PAGE_RECORDS": "77"})
    try:
        limits = srv.http.get("/sync/v1/info").json()["limits"]
        # --max-wait-s 10 from the harness flags wins over the file; the file sets history;
        # the environment sets the page size
        assert limits["max_wait_s"] == 10 and limits["history_versions"] == 5
        assert limits["max_page_records"] == 77
        doc = srv.new_document()
        token = srv.token(doc)
        srv.http.get(srv.layer_url(doc) + "/records", headers={"Authorization": f"Bearer {token}"})
        srv.http.get(srv.layer_url(doc) + "/records", params={"token": token})
        srv.http.get(srv.layer_url(doc) + "/records", headers={"Authorization": "Bearer not-a-jwt-secret"})
    finally:
        stop_server(process, srv)
    assert (tmp_path / "flag.sqlite").exists() and not (tmp_path / "from-config.sqlite").exists()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any(entry.get("status") == 200 and entry.get("route", "").endswith("/records") for entry in lines)
    text = log.read_text()
    assert token not in text and token.split(".")[1] not in text
    assert "not-a-jwt-secret" not in text and "test-admin-secret" not in text


def test_one_process_holds_a_thousand_idle_long_polls(server):
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 2100:
        pytest.skip(f"open files limit {soft} is too low for 1,000 sockets per side (raise ulimit -n)")
    doc = server.new_document()
    headers = server.auth(doc)
    url = server.layer_url(doc) + "/changes"
    count = 1000

    async def scenario():
        limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=count + 10)
        async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as client:
            polls = [asyncio.create_task(client.get(url, params={"since": 3, "wait": 10}, headers=headers))
                     for _ in range(count)]
            deadline = time.monotonic() + 30
            open_polls = 0
            while time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                metrics = (await client.get("/metrics")).text
                line = next(l for l in metrics.splitlines() if l.startswith("layersync_open_long_polls "))
                open_polls = float(line.split()[1])
                if open_polls >= count:
                    break
            assert open_polls >= count, f"only {open_polls} long-polls open"
            assert not any(p.done() for p in polls)
            pushed = await client.post(server.layer_url(doc) + "/sync", headers=headers,
                                       json={"since": 3, "changes": [change("create", "wake", note())]})
            assert pushed.status_code == 200
            return await asyncio.gather(*polls)

    responses = asyncio.run(scenario())
    assert all(r.status_code == 200 and [x["id"] for x in r.json()["records"]] == ["wake"] for r in responses)


def test_serve_follows_forwarded_headers_of_a_trusted_proxy(tmp_path, keys):
    """uvicorn's proxy-headers middleware (FORWARDED_ALLOW_IPS, default loopback): a
    redirect follows ``X-Forwarded-Proto`` from a trusted (loopback) proxy, and the hot
    routes answer behind it."""
    process, srv = start_server(tmp_path, str(tmp_path / "db.sqlite"), *keys)
    try:
        redirect = srv.http.get("/sync/v1/info/", headers={"X-Forwarded-Proto": "https"},
                                follow_redirects=False)
        plain = srv.http.get("/sync/v1/info/", follow_redirects=False)
        document_id = srv.new_document()
        pushed = srv.sync(document_id, [change("create", "n1", note())])
        polled = srv.http.get(srv.layer_url(document_id) + "/changes", params={"since": 0},
                              headers={**srv.auth(document_id), "X-Forwarded-For": "10.0.0.1"})
    finally:
        stop_server(process, srv)
    assert redirect.status_code == 307 and redirect.headers["location"].startswith("https://")
    assert plain.headers["location"].startswith("http://")
    assert pushed.status_code == 200 and pushed.headers["layersync-protocol"] == "2"
    assert polled.status_code == 200 and "n1" in [r["id"] for r in polled.json()["records"]]
