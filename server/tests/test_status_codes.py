"""Every status code and error code of docs/protocol.md's error table, triggered for real.

The table is parsed from the document, so a code added there without a case here
fails ``test_every_documented_error_has_a_case``.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from conftest import CORPUS, MAX_REQUEST_BYTES, change, note
from layersync_server.app import create_app
from layersync_server.auth import MAX_TOKEN_BYTES
from layersync_server.settings import Settings
from layersync_server.storage.sqlite import SqliteStorage

PROTOCOL = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
RESERVED = {(409, "epoch_mismatch")}  # documented as reserved: never sent


def documented_errors() -> set[tuple[int, str]]:
    table = PROTOCOL.read_text().split("### Error envelope", 1)[1].split("A client whose", 1)[0]
    pairs = set()
    for status, codes in re.findall(r"^\| (\d+|5xx) \| ([^|]+)\|", table, re.M):
        for code in re.findall(r"`([a-z_]+)`", codes):
            pairs.add((500 if status == "5xx" else int(status), code))
    return pairs


def _admin(server, method, path, **kwargs):
    return server.http.request(method, path, headers={**server.admin(), **kwargs.pop("headers", {})}, **kwargs)


def _invalid_request(server, doc):
    return server.http.get(server.layer_url(doc) + "/records", params={"since": "x"}, headers=server.auth(doc))


def _document_exists(server, doc):
    return server.upload((CORPUS / "pypdf-example.pdf").read_bytes(), doc)


def _conflict(server, doc):
    server.sync(doc, [change("create", "sc", note())])
    return server.http.post(server.layer_url(doc) + "/records/sc/restore", headers=server.auth(doc))


def _forbidden(server, doc):
    first = server.sync(doc, [change("create", "sf", note("v1"))]).json()["accepted"][0]["revision"]
    server.sync(doc, [change("update", "sf", note("v2"), base=first)], since=first)
    viewer = server.auth(doc, collaboration_permissions=["annotations:view:all"])
    return server.http.post(server.layer_url(doc) + "/records/sf/rollback", json={"revision": first},
                            headers=viewer)


def _hash_mismatch(server, doc):
    return server.http.put(f"/sync/v1/documents/{doc}/attachments/{'0' * 64}", content=b"x",
                           headers=server.auth(doc))


def _range(server, doc):
    return server.http.get(f"/sync/v1/documents/{doc}/pdf", headers={**server.auth(doc), "Range": "bytes=99999999-"})


def _too_large(server, doc):
    return server.http.post(server.layer_url(doc) + "/sync", content=b" " * (MAX_REQUEST_BYTES + 1),
                            headers={**server.auth(doc), "Content-Type": "application/json"})


def _token_too_large(server, doc):
    return server.http.get(server.layer_url(doc) + "/records",
                           headers={"Authorization": "Bearer " + "a" * (MAX_TOKEN_BYTES + 1)})


def _too_many_attempts(server, doc):
    """An app of its own: the shared test server has no limit (tests send wrong secrets)."""
    app = create_app(Settings(db_path=server.port_file.parent / f"limit-{uuid.uuid4().hex}.sqlite",
                              admin_token="t", admin_max_failures=1))
    with TestClient(app) as client:
        wrong = {"Authorization": 'Token token="wrong"'}
        assert client.get("/api/documents", headers=wrong).status_code == 401
        response = client.get("/api/documents", headers=wrong)
    assert response.headers["Retry-After"].isdigit()
    return response


CASES = {
    (400, "invalid_request"): _invalid_request,
    (401, "unauthorized"): lambda s, d: s.http.get(s.layer_url(d) + "/records"),
    (403, "access_denied"): lambda s, d: s.http.get(s.layer_url(d) + "/records", headers=s.auth("other")),
    (403, "forbidden"): _forbidden,
    (404, "not_found"): lambda s, d: s.http.get(s.layer_url("missing-doc") + "/records",
                                                headers=s.auth("missing-doc")),
    (409, "document_exists"): _document_exists,
    (409, "conflict"): _conflict,
    (409, "layer_exists"): lambda s, d: _admin(s, "POST", f"/api/documents/{d}/layers", json={"name": "~x"})
    if _admin(s, "POST", f"/api/documents/{d}/layers", json={"name": "~x"}).status_code == 200 else None,
    (409, "annotation_exists"): lambda s, d: _admin(s, "POST", f"/api/documents/{d}/annotations",
                                                    json={"id": s.records(d)["records"][0]["id"], "content": note()}),
    (422, "invalid_request"): lambda s, d: _admin(s, "POST", f"/api/documents/{d}/annotations",
                                                  json={"id": "no-content"}),
    (400, "hash_mismatch"): _hash_mismatch,
    (416, "range_not_satisfiable"): _range,
    (413, "payload_too_large"): _too_large,
    (431, "token_too_large"): _token_too_large,
    (426, "old_client"): lambda s, d: s.http.get("/sync/v1/info", headers={"LayerSync-Protocol": "0"}),
    (429, "too_many_attempts"): _too_many_attempts,
}


def test_every_documented_error_has_a_case():
    documented = documented_errors() - RESERVED
    assert (500, "internal") in documented and (409, "conflict") in documented
    assert documented - {(500, "internal")} == set(CASES)


@pytest.mark.parametrize("status,code", sorted(CASES), ids=lambda v: str(v))
def test_documented_error(server, status, code):
    doc = server.new_document()
    response = CASES[(status, code)](server, doc)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert set(response.json()["error"]) == {"code", "message", "details"}
    assert response.headers["LayerSync-Protocol"] == "2"


class _BrokenStorage(SqliteStorage):
    def list_records(self, *args, **kwargs):
        raise RuntimeError("disk on fire")


def test_server_fault_is_500_internal_with_the_envelope(tmp_path, keys):
    private_pem, public_key = keys
    app = create_app(Settings(db_path=tmp_path / "db.sqlite", public_key_path=public_key, admin_token="t"),
                     storage=_BrokenStorage(tmp_path / "db.sqlite"))
    from layersync_server.tokens import mint_token
    with TestClient(app, raise_server_exceptions=False) as client:
        token = mint_token(private_pem, "d", layer="")
        response = client.get("/sync/v1/documents/d/layers/~/records", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 500
    assert response.json() == {"error": {"code": "internal", "message": "internal server error", "details": {}}}


def test_success_statuses(server):
    doc = server.new_document()
    pdf = server.http.get(f"/sync/v1/documents/{doc}/pdf", headers=server.auth(doc))
    assert pdf.status_code == 200
    assert server.http.get(f"/sync/v1/documents/{doc}/pdf",
                           headers={**server.auth(doc), "Range": "bytes=0-9"}).status_code == 206
    assert server.http.get(f"/sync/v1/documents/{doc}/pdf",
                           headers={**server.auth(doc), "If-None-Match": pdf.headers["ETag"]}).status_code == 304
    data = uuid.uuid4().bytes
    url = f"/sync/v1/documents/{doc}/attachments/{hashlib.sha256(data).hexdigest()}"
    assert server.http.put(url, content=data, headers=server.auth(doc)).status_code == 201
    assert server.http.put(url, content=data, headers=server.auth(doc)).status_code == 200
