"""Development key pairs and JWTs (what an app's backend does in production).

Used by ``layersync-server keygen`` / ``mint-token`` and by the tests.
"""

from __future__ import annotations

import time

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

SUPPORTED_ALGORITHMS = ("ES256", "ES512", "RS256", "RS512")
_CURVES = {"ES256": ec.SECP256R1, "ES512": ec.SECP521R1}


def generate_keypair(alg: str = "ES256") -> tuple[bytes, bytes]:
    """A new key pair for ``alg`` as ``(private_pem, public_pem)`` (PKCS#8 / SPKI).

    Raises:
        ValueError: ``alg`` is not one of :data:`SUPPORTED_ALGORITHMS`.
    """
    if alg in _CURVES:
        key = ec.generate_private_key(_CURVES[alg]())
    elif alg in ("RS256", "RS512"):
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        raise ValueError(f"unsupported algorithm {alg!r}; use one of {', '.join(SUPPORTED_ALGORITHMS)}")
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    return private_pem, public_pem


def default_algorithm(private_pem: bytes) -> str:
    """ES256/ES512 for P-256/P-521 keys, RS256 for RSA keys."""
    key = serialization.load_pem_private_key(private_pem, password=None)
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return "ES512" if key.curve.name == "secp521r1" else "ES256"
    raise ValueError("private key must be RSA or EC")


def mint_token(private_pem: bytes, document_id: str, layer: str | None = None,
               user_id: str | None = None, permissions: list[str] | None = None,
               expires_in_s: int | None = 3600, alg: str | None = None,
               collaboration_permissions: list[str] | None = None,
               default_group: str | None = None, creator_name: str | None = None,
               **extra_claims) -> str:
    """Sign a client JWT granting ``document_id`` (and ``layer``, default layer if None).

    ``expires_in_s`` is relative to now (negative = already expired; None = no ``exp``).
    ``collaboration_permissions`` (``<content-type>:<action>:<scope>`` entries; None =
    no claim, full access), ``default_group``, ``creator_name``: the collaboration
    claims (docs/protocol.md, "Collaboration permissions"), signed as given, malformed
    or not (tests sign malformed ones; ``layersync-server mint-token`` checks its entries
    with :func:`~layersync_server.permissions.parse_claim` first).
    """
    claims: dict = {"document_id": document_id, **extra_claims}
    if collaboration_permissions is not None:
        claims["collaboration_permissions"] = collaboration_permissions
    for name, value in (("default_group", default_group), ("creator_name", creator_name)):
        if value is not None:
            claims[name] = value
    if layer is not None:
        claims["layer"] = layer
    if user_id is not None:
        claims["user_id"] = user_id
    if permissions is not None:
        claims["permissions"] = permissions
    if expires_in_s is not None:
        claims["exp"] = int(time.time()) + int(expires_in_s)
    return jwt.encode(claims, serialization.load_pem_private_key(private_pem, password=None),
                      algorithm=alg or default_algorithm(private_pem))
