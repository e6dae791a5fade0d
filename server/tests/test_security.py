"""Security: JWT algorithms, nbf, revocation by jti, id validation, body bounds."""

from __future__ import annotations

import time
import uuid

import pytest

from conftest import ADMIN_TOKEN, MAX_REQUEST_BYTES, start_server, stop_server
from layersync_server.tokens import generate_keypair, mint_token


@pytest.mark.parametrize("alg", ["RS256", "RS512", "ES256", "ES512"])
def test_every_asymmetric_algorithm_is_accepted(tmp_path, alg):
    private_pem, public_pem = generate_keypair(alg)
    (tmp_path / "public.pem").write_bytes(public_pem)
    process, srv = start_server(tmp_path, str(tmp_path / "db.sqlite"), private_pem, tmp_path / "public.pem")
    try:
        doc = srv.new_document()
        token = mint_token(private_pem, doc, layer="", alg=alg)
        ok = srv.http.get(srv.layer_url(doc) + "/records", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200
    finally:
        stop_server(process, srv)


def test_not_before_with_leeway(server):
    doc = server.new_document()
    soon = server.token(doc, nbf=int(time.time()) + 5)
    later = server.token(doc, nbf=int(time.time()) + 3600)
    url = server.layer_url(doc) + "/records"
    assert server.http.get(url, headers={"Authorization": f"Bearer {soon}"}).status_code == 200
    refused = server.http.get(url, headers={"Authorization": f"Bearer {later}"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "access_denied"


def test_revocation_by_jti(server):
    doc = server.new_document()
    jti = uuid.uuid4().hex
    headers = {"Authorization": f"Bearer {server.token(doc, jti=jti)}"}
    url = server.layer_url(doc) + "/records"
    assert server.http.get(url, headers=headers).status_code == 200
    revoked = server.http.post("/api/tokens/revoke", json={"jti": jti}, headers=server.admin())
    assert revoked.status_code == 200
    refused = server.http.get(url, headers=headers)
    assert refused.status_code == 403 and refused.json()["error"]["message"] == "token revoked"
    assert server.http.get(url, headers=server.auth(doc, jti=uuid.uuid4().hex)).status_code == 200


@pytest.mark.parametrize("payload", [b'{"jti":"\\ud800"}',  # a lone surrogate: no text store takes it
                                     b'{"jti":' + b"[" * 5000 + b"]" * 5000 + b"}"])  # past the parser's depth
def test_revoking_a_jwt_whose_payload_no_server_accepts_lists_it_as_failing(server, payload):
    """``/api/revoke`` reads the ``jti`` of each JWT without checking the signature: a payload
    nesting past the JSON parser's recursion limit or a ``jti`` holding a lone surrogate
    (a token every route refuses 403) is "not a JWT with a jti claim" (both were 500)."""
    import base64

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    jwt = part(b'{"alg":"ES256"}') + "." + part(payload) + ".c2ln"
    good = server.token(server.new_document(), jti=uuid.uuid4().hex)
    answer = server.http.post("/api/revoke", json={"jwts": [jwt, good]}, headers=server.admin())
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"] == [good] and answer.json()["failingPaths"] == [
        {"path": "$.jwts[0]", "details": "not a JWT with a jti claim"}]


@pytest.mark.parametrize("path", [
    "/sync/v1/documents/{doc}/layers/..%2F..%2Fetc/records",
    "/sync/v1/documents/{doc}/layers/a%5Cb/records",
    "/sync/v1/documents/{doc}/layers/" + "x" * 129 + "/records",
    "/sync/v1/documents/{doc}/layers/a%01b/records",
    "/sync/v1/documents/" + "d" * 129 + "/layers/~/records",
    "/sync/v1/documents/../layers/~/records",
])
def test_ids_and_layer_names_are_validated(server, path):
    doc = server.new_document()
    response = server.http.get(path.format(doc=doc), headers=server.auth(doc))
    assert response.status_code in (400, 404), response.text
    assert "error" in response.json()


def test_layer_name_traversal_is_400(server):
    doc = server.new_document()
    response = server.http.get(server.layer_url(doc, "..") + "/records", headers=server.auth(doc, ".."))
    assert response.status_code in (400, 404)
    response = server.http.get(server.layer_url(doc, "a%5Cb") + "/records", headers=server.auth(doc, "a\\b"))
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"


def test_admin_bodies_are_bounded(server):
    doc = server.new_document()
    big = b'{"annotations": [' + b" " * (MAX_REQUEST_BYTES + 10) + b"]}"
    response = server.http.post(f"/api/documents/{doc}/apply_instant_json", content=big,
                                headers={**server.admin(), "Content-Type": "application/json"})
    assert response.status_code == 413 and response.json()["error"]["code"] == "payload_too_large"


def test_admin_token_never_accepts_bearer(server):
    response = server.http.get("/api/documents", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert response.status_code == 401 and response.json()["error"]["message"] == "invalid admin token"
