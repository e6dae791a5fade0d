"""JSON values the server refuses, per change or per request, and never a 500
(docs/protocol.md, Conventions, "JSON values"; QA defects 1-4)."""

from __future__ import annotations

import json
import uuid

import pytest

from conftest import CORPUS, change, note, start_server, stop_server

MAX_REVISION = 2**63 - 1


def _nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def _sync_raw(server, doc: str, changes_json: str, since: str = "0"):
    raw = '{"client_id": "t", "epoch": null, "since": %s, "changes": [%s]}' % (since, changes_json)
    return server.http.post(server.layer_url(doc) + "/sync", content=raw,
                            headers={**server.auth(doc), "Content-Type": "application/json"})


def _assert_listings_ok(server, doc: str) -> None:
    for path in ("/records", "/changes", "/records?since=1", "/deleted"):
        response = server.http.get(server.layer_url(doc) + path, headers=server.auth(doc))
        assert response.status_code == 200, (path, response.text)
    for path in ("/annotations", "/document.json"):
        response = server.http.get(f"/api/documents/{doc}{path}", headers=server.admin())
        assert response.status_code == 200, (path, response.text)


# -- defect 1: depth ----------------------------------------------------------------------------

def test_info_advertises_json_limits(server):
    limits = server.http.get("/sync/v1/info").json()["limits"]
    assert limits["max_json_depth"] == 64
    assert limits["max_number_chars"] == 100


def test_too_deep_content_is_rejected_invalid_and_the_layer_stays_readable(server):
    doc = server.new_document()
    ok = note(customData=_nested(63))  # content is level 1, customData 2..64: 64 levels
    too_deep = note(customData=_nested(64))
    response = server.sync(doc, [change("create", "deep-ok", ok), change("create", "deep-300", note(customData=_nested(300))),
                                 change("create", "deep-65", too_deep)])
    assert response.status_code == 200, response.text
    body = response.json()
    assert [a["id"] for a in body["accepted"]] == ["deep-ok"]
    assert [(r["id"], r["reason"]) for r in body["rejected"]] == [("deep-300", "invalid"),
                                                                   ("deep-65", "invalid")]
    assert "64 levels" in body["rejected"][0]["message"]
    _assert_listings_ok(server, doc)


def test_admin_rejects_too_deep_annotations(server):
    doc = server.new_document()
    url = f"/api/documents/{doc}"
    deep = note(customData=_nested(300))
    # an annotation write refuses a body it cannot store with 422 (Document Engine's answer)
    for method, path, body, status in (("POST", "/annotations", {"content": deep}, 422),
                                       ("POST", "/apply_instant_json", {"annotations": [deep]}, 400)):
        response = server.http.request(method, url + path, json=body, headers=server.admin())
        assert response.status_code == status, response.text
        assert response.json()["error"]["code"] == "invalid_request"
        assert "64 levels" in response.json()["error"]["message"]
    created = server.http.post(url + "/annotations", json={"id": "shallow", "content": note()},
                               headers=server.admin())
    assert created.status_code == 200, created.text
    response = server.http.put(url + "/annotations/shallow", json={"content": deep}, headers=server.admin())
    assert response.status_code == 422 and "64 levels" in response.json()["error"]["message"]
    _assert_listings_ok(server, doc)


def test_records_stored_before_the_limit_never_break_listings(tmp_path, keys):
    """A record stored by an older server (300 levels deep, NaN inside) is still served."""
    from layersync_server.storage import NewDocument, open_storage
    db = tmp_path / "legacy.sqlite"
    storage = open_storage(db)
    doc = "doc-legacy"
    storage.create_document(NewDocument(doc, "t", (CORPUS / "sample-files-024-annotated_pdf.pdf").read_bytes(),
                                        "0" * 64, 1))
    with storage.write_layer(doc, "") as writer:
        writer.put_record("legacy-deep", {**note(customData=_nested(300)), "id": "legacy-deep"}, None)
        writer.put_record("legacy-nan", {**note(), "id": "legacy-nan", "x": float("nan")}, None)
    storage.close()
    process, srv = start_server(tmp_path, str(db), *keys)
    try:
        _assert_listings_ok(srv, doc)
        records = {r["id"]: r for r in srv.records(doc)["records"]}
        assert records["legacy-nan"]["content"]["x"] is None
        streamed = srv.http.get(f"/api/documents/{doc}/annotations",
                                headers={**srv.admin(), "Accept": "application/x-ndjson"})
        assert streamed.status_code == 200
        assert all(json.loads(line) for line in streamed.text.splitlines())
        conflict = srv.http.post(srv.layer_url(doc) + "/records/legacy-nan/rollback",
                                 json={"revision": 1, "base_revision": 99}, headers=srv.auth(doc))
        assert conflict.status_code in (404, 409), conflict.text
    finally:
        stop_server(process, srv)


# -- defect 2: numbers --------------------------------------------------------------------------

@pytest.mark.parametrize("literal", ["9" * 5000, "-" + "1" * 101, "NaN", "Infinity", "-Infinity",
                                     "1e999", "-1e400"])
def test_bad_number_rejects_only_its_change(server, literal):
    doc = server.new_document()
    good = json.dumps(change("create", "fine", note()))
    bad = '{"change_id": "bad-%s", "op": "create", "id": "badnum", "content": {"x": %s}}' % (
        uuid.uuid4().hex, literal)
    response = _sync_raw(server, doc, bad + ", " + good)
    assert response.status_code == 200, response.text
    body = response.json()
    assert [a["id"] for a in body["accepted"]] == ["fine"]
    assert [(r["id"], r["reason"]) for r in body["rejected"]] == [("badnum", "invalid")]
    assert body["rejected"][0]["message"]
    # the outcome is stored: a retry gets the same answer
    again = _sync_raw(server, doc, bad.replace('"x": ' + literal, '"x": 1')).json()
    assert again["rejected"] == body["rejected"]
    assert all(r["id"] != "badnum" for r in server.records(doc)["records"])


def test_bad_number_in_base_revision_or_admin_body(server):
    doc = server.new_document()
    response = _sync_raw(server, doc, '{"change_id": "%s", "op": "delete", "id": "x", "base_revision": NaN}'
                         % uuid.uuid4().hex)
    assert response.status_code == 200
    assert response.json()["rejected"][0]["reason"] == "invalid"
    for literal in ("NaN", "1e999", "9" * 5000):
        response = server.http.post(f"/api/documents/{doc}/annotations",
                                    content='{"type": "pspdfkit/note", "x": %s}' % literal,
                                    headers={**server.admin(), "Content-Type": "application/json"})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "invalid_request"


def test_big_numbers_within_the_limit_round_trip(server):
    doc = server.new_document()
    big = "1" * 100
    response = _sync_raw(server, doc, '{"change_id": "%s", "op": "create", "id": "big", '
                         '"content": {"x": %s, "y": 1.5e300}}' % (uuid.uuid4().hex, big))
    assert response.json()["accepted"], response.text
    content = {r["id"]: r for r in server.records(doc)["records"]}["big"]["content"]
    assert content["x"] == int(big) and content["y"] == 1.5e300


def test_not_json_is_still_a_whole_body_400(server):
    doc = server.new_document()
    for raw in ("{", "[]", "nope", '{"changes": [1e999]}'):
        response = server.http.post(server.layer_url(doc) + "/sync", content=raw,
                                    headers={**server.auth(doc), "Content-Type": "application/json"})
        assert response.status_code == 400, (raw, response.text)


# -- defect 3: control characters in ids ----------------------------------------------------------

@pytest.mark.parametrize("char", ["\u0000", "\u0001", "\u001f", "\u007f", "\ud800"])
def test_ids_with_control_characters_or_lone_surrogates(server, char):
    doc = server.new_document()
    bad_id = f"dup{char}one"
    raw = json.dumps({"change_id": uuid.uuid4().hex, "op": "create", "id": bad_id, "content": note()})
    response = _sync_raw(server, doc, raw)
    assert response.status_code == 200, response.text
    rejected = response.json()["rejected"]
    assert [r["reason"] for r in rejected] == ["invalid"] and rejected[0]["id"] is None
    ids = {r["id"] for r in server.records(doc)["records"]}
    assert "dup" not in ids and bad_id not in ids
    response = _sync_raw(server, doc, json.dumps({"change_id": f"c{char}x", "op": "create",
                                                  "id": "fine", "content": note()}))
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"
    response = server.http.post(f"/api/documents/{doc}/annotations",
                                content=json.dumps({"id": bad_id, "content": note()}),
                                headers={**server.admin(), "Content-Type": "application/json"})
    if char == "\ud800":  # a lone surrogate anywhere in a body: not JSON LayerSync reads (400)
        assert response.status_code == 400 and "lone surrogate" in response.text, response.text
    else:  # a bad field of an annotation write: Document Engine's 422
        assert response.status_code == 422, response.text
        assert "annotation id" in response.json()["error"]["message"]
    if char != "\ud800":  # not expressible in a URL
        quoted = bad_id.encode().hex()
        path = "dup%" + "%".join(quoted[i:i + 2] for i in range(6, len(quoted) - 6, 2)) + "one"
        for url in (f"/api/documents/{doc}/annotations/{path}",
                    server.layer_url(doc) + f"/records/{path}/history"):
            headers = server.admin() if url.startswith("/api") else server.auth(doc)
            response = server.http.get(url, headers=headers)
            assert response.status_code == 400, (url, response.text)
        response = server.http.get(f"/sync/v1/documents/{path}/layers/~/records", headers=server.auth(doc))
        assert response.status_code == 400
        response = server.http.get(f"/sync/v1/documents/{doc}/layers/{path}/records", headers=server.auth(doc))
        assert response.status_code == 400


# -- defect 4: 500s that must be 4xx ----------------------------------------------------------------

@pytest.mark.parametrize("params", [{"since": 2**63}, {"since": 10**30}, {"since": -1}, {"since": "x"},
                                    {"limit": 0}, {"limit": -5}, {"limit": "many"},
                                    {"wait": -1}, {"wait": "inf"}, {"wait": "nan"}, {"wait": "x"}])
def test_bad_query_parameters_are_400(server, params):
    doc = server.new_document()
    for path in ("/records", "/changes", "/deleted"):
        if "wait" in params and path != "/changes":
            continue
        response = server.http.get(server.layer_url(doc) + path, params=params, headers=server.auth(doc))
        assert response.status_code == 400, (path, params, response.text)
        assert response.json()["error"]["code"] == "invalid_request"


def test_edge_query_values_are_served(server):
    doc = server.new_document()
    for params in ({"since": MAX_REVISION}, {"limit": 10**30}, {"wait": 1e300, "since": 0}):
        path = "/changes" if "wait" in params else "/records"
        response = server.http.get(server.layer_url(doc) + path, params=params, headers=server.auth(doc))
        assert response.status_code == 200, (params, response.text)


@pytest.mark.parametrize("since", [str(2**63), str(10**40), "-1", "1.5", '"3"', "NaN", "1e999", "9" * 5000])
def test_bad_since_in_sync_body_is_400(server, since):
    doc = server.new_document()
    response = _sync_raw(server, doc, "", since=since)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"


def test_too_deep_sync_body_is_400(server):
    doc = server.new_document()
    for depth in (1000, 5000, 30_000):
        raw = '{"changes": [' + "[" * depth + "]" * depth + "]}"
        response = server.http.post(server.layer_url(doc) + "/sync", content=raw,
                                    headers={**server.auth(doc), "Content-Type": "application/json"})
        assert response.status_code == 400, (depth, response.text)
        assert response.json()["error"]["code"] == "invalid_request"
    # a change whose content is 900 levels deep parses but is rejected on its own
    content = '{"a":' * 900 + "{}" + "}" * 900
    response = _sync_raw(server, doc, '{"change_id": "%s", "op": "create", "id": "d900", "content": %s}'
                         % (uuid.uuid4().hex, content))
    assert response.status_code == 200, response.text
    assert response.json()["rejected"][0]["reason"] == "invalid"


def test_lone_surrogates_never_500(server):
    doc = server.new_document()
    for raw, status in (('{"change_id": "\\ud800", "op": "create", "id": "x", "content": {}}', 400),
                        ('{"change_id": "s-%s", "op": "create", "id": "\\udfff", "content": {}}'
                         % uuid.uuid4().hex, 200),
                        ('{"change_id": "s-%s", "op": "create", "id": "ok-id", "content": {"\\ud800": 1}}'
                         % uuid.uuid4().hex, 200)):
        response = _sync_raw(server, doc, raw)
        assert response.status_code == status, (raw, response.text)
        if status == 200:
            assert response.json()["rejected"][0]["reason"] == "invalid"


@pytest.mark.parametrize("base", [str(2**63), "-1", '"7"', "true", "1.0", "null", "NaN"])
def test_bad_base_revision_is_invalid_per_change(server, base):
    doc = server.new_document()
    created = server.sync(doc, [change("create", "r", note())]).json()["accepted"][0]
    for op in ("update", "delete"):
        raw = '{"change_id": "%s", "op": "%s", "id": "r", "base_revision": %s, "content": {}}' % (
            uuid.uuid4().hex, op, base)
        response = _sync_raw(server, doc, raw)
        assert response.status_code == 200, response.text
        assert [r["reason"] for r in response.json()["rejected"]] == ["invalid"]
    for path, body in (("rollback", '{"revision": %s}' % base),
                       ("rollback", '{"revision": %d, "base_revision": %s}' % (created["revision"], base)),
                       ("restore", '{"base_revision": %s}' % base)):
        if base == "null" and "base_revision" in body:
            continue  # null base_revision means "no check"
        response = server.http.post(server.layer_url(doc) + f"/records/r/{path}", content=body,
                                    headers={**server.auth(doc), "Content-Type": "application/json"})
        assert response.status_code == 400, (path, body, response.text)
