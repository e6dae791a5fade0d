"""JWT and admin-token checks: a JWT gets 401 when missing, 403 for every kind of bad token;
the admin token gets 401 when missing or wrong (Document Engine's ``ApiAuthToken``)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest

from layersync_server.tokens import generate_keypair, mint_token


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _records(server, doc, headers):
    return server.http.get(server.layer_url(doc) + "/records", headers=headers)


def test_missing_authorization_is_401(server):
    doc = server.new_document()
    response = _records(server, doc, {})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


def _forged_tokens(server, doc):
    claims = {"document_id": doc, "layer": "", "exp": int(time.time()) + 600}
    other_private, _ = generate_keypair("ES256")
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64(json.dumps(claims).encode())
    signature = hmac.new(server.public_key_path.read_bytes(), f"{header}.{payload}".encode(),
                         hashlib.sha256).digest()
    return {
        "expired": server.token(doc, expires_in_s=-3600),
        "alg-none": jwt.encode(claims, None, algorithm="none"),
        "hs256-with-public-key": f"{header}.{payload}.{_b64(signature)}",
        "wrong-key": mint_token(other_private, doc, layer=""),
        "wrong-document": server.token("some-other-document"),
        "wrong-layer": server.token(doc, layer="other"),
        "garbage": "not.a.jwt",
        "no-document-claim": jwt.encode({"exp": int(time.time()) + 60},
                                        __import__("cryptography.hazmat.primitives.serialization",
                                                   fromlist=["x"]).load_pem_private_key(
                                            server.private_pem, None), algorithm="ES256"),
    }


@pytest.mark.parametrize("kind", ["expired", "alg-none", "hs256-with-public-key", "wrong-key",
                                  "wrong-document", "wrong-layer", "garbage", "no-document-claim"])
def test_bad_tokens_are_403(server, kind):
    doc = server.new_document()
    token = _forged_tokens(server, doc)[kind]
    response = _records(server, doc, {"Authorization": f"Bearer {token}"})
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "access_denied"


@pytest.mark.parametrize("claims", [{"user_id": "al\ud800ice"}, {"default_group": "\udfffteam"},
                                    {"creator_name": "Alice \ud83d"}, {"jti": "t\ud800"},
                                    {"permissions": ["read-document", "\ud800"]},
                                    {"app_claim": {"nested": ["\udc00"]}}, {"app\ud800": 1}],
                         ids=["user_id", "default_group", "creator_name", "jti", "permissions",
                              "nested", "claim-name"])
def test_a_lone_surrogate_in_any_claim_is_403(server, claims):
    """The client refuses such a token (INVALID_JWT: its JSON parser takes no lone surrogate);
    the server refuses it too, naming the claim, instead of stamping records with it."""
    doc = server.new_document()
    token = server.token(doc, **claims)
    assert "\\ud" in _b64_json_payload(token)  # signed as the escape
    response = _records(server, doc, {"Authorization": f"Bearer {token}"})
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "access_denied"
    assert error["message"] == (f"invalid token: claim {ascii(next(iter(claims)))} is not valid "
                                "Unicode text (a lone surrogate)")
    fine = {"user_id": "alice", "default_group": "team", "creator_name": "Alice \U0001f600"}
    ok = _records(server, doc, {"Authorization": f"Bearer {server.token(doc, **fine)}"})
    assert ok.status_code == 200, ok.text


def _b64_json_payload(token: str) -> str:
    payload = token.split(".")[1]
    return base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode()


def test_layer_name_alias_and_small_leeway(server):
    doc = server.new_document()
    token = server.token(doc, layer=None, layer_name="review", expires_in_s=-5)
    response = server.http.get(server.layer_url(doc, "review") + "/records",
                               headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200


def test_admin_token(server):
    assert server.http.get("/api/documents").status_code == 401
    wrong = server.http.get("/api/documents", headers={"Authorization": 'Token token="nope"'})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized"
    assert wrong.json()["error"]["message"] == "invalid admin token"
    assert server.http.get("/api/documents", headers=server.admin()).status_code == 200


def test_401_answers_carry_the_challenge_of_their_scheme(server):
    """RFC 9110 §15.5.2: a 401 carries WWW-Authenticate, naming the scheme the route takes:
    Bearer (a JWT) on the sync routes, Token (Document Engine's ApiAuthToken) on the admin API."""
    doc = server.new_document()
    assert _records(server, doc, {}).headers["WWW-Authenticate"].startswith("Bearer ")
    for headers in ({}, {"Authorization": 'Token token="nope"'}):
        response = server.http.get("/api/documents", headers=headers)
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"].startswith("Token ")
