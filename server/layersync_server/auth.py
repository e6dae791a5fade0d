"""Authentication: client JWTs (sync API) and the admin token (admin API).

JWT rules (docs/protocol.md, "Authentication"): signature checked with the configured
PEM public key, algorithms RS256/RS512 (RSA key) or ES256/ES512 (EC key) only —
``none`` and HMAC are never accepted, so the classic "HS256 signed with the public
key" forgery fails. ``exp`` and ``nbf`` are checked with ``Settings.jwt_leeway_s`` of
leeway. A token whose ``jti`` was revoked (admin API ``POST /api/tokens/revoke``) is
refused by the routes (they ask storage, so revocation reaches every process).
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from layersync_server.errors import ApiError, access_denied, unauthorized
from layersync_server.permissions import ClaimError, Permissions, parse_claim
from layersync_server.wire_json import json_problem

ALL_PERMISSIONS = ("read-document", "write", "download")
#: The longest JWT accepted (bytes), the client's limit too (JWTClaims.maximumTokenBytes):
#: it travels in every request's header, which libcurl and proxies cap.
MAX_TOKEN_BYTES = 65_536
_ALGORITHMS_BY_KEY = {rsa.RSAPublicKey: ["RS256", "RS512"], ec.EllipticCurvePublicKey: ["ES256", "ES512"]}
_ADMIN_HEADER = re.compile(r'^\s*Token\s+token="?([^"]*)"?\s*$', re.IGNORECASE)


@dataclass(frozen=True)
class Grant:
    """What a verified JWT allows: one document, one layer, a set of permissions, and
    (``collaboration``) the parsed ``collaboration_permissions`` claim, None when absent
    (full access; :mod:`layersync_server.permissions` decides with it).
    ``default_group``: the group of the records it creates; ``creator_name``: forced as
    their ``creatorName``."""

    document_id: str
    layer: str
    user_id: str | None
    permissions: frozenset[str]
    jti: str | None = None
    collaboration: Permissions | None = None
    default_group: str | None = None
    creator_name: str | None = None

    def require(self, document_id: str, layer: str | None, permission: str) -> None:
        """Raise 403 unless the grant covers ``document_id``, ``layer`` (None = any)
        and ``permission``."""
        if document_id != self.document_id:
            raise access_denied("token does not grant this document")
        if layer is not None and layer != self.layer:
            raise access_denied("token does not grant this layer")
        if permission not in self.permissions:
            raise access_denied(f"token lacks the '{permission}' permission")


class JwtVerifier:
    """Verifies ``Authorization: Bearer`` headers with one public key."""

    #: Tokens verified once, remembered with their :class:`Grant` so that a client's
    #: next request with the same token skips the signature check (ECDSA: ~0.15 ms) and
    #: the decoding. ``iat``, ``nbf`` and ``exp`` (with the leeway) are still checked on
    #: every request, as PyJWT checks them; revocation is the routes' business (storage).
    #: At most this many tokens are kept (the oldest is dropped first).
    VERIFIED_CACHE_SIZE = 10_000

    def __init__(self, public_key_path: Path | None, leeway_s: int):
        self._leeway_s = leeway_s
        #: token -> (grant, iat, nbf, exp), the times as PyJWT reads them (int) or None
        self._verified: dict[str, tuple[Grant, int | None, int | None, int | None]] = {}
        self._key = None
        self._algorithms: list[str] = []
        if public_key_path is not None:
            self._key = load_pem_public_key(Path(public_key_path).read_bytes())
            for key_type, algorithms in _ALGORITHMS_BY_KEY.items():
                if isinstance(self._key, key_type):
                    self._algorithms = algorithms
            if not self._algorithms:
                raise ValueError("public key must be RSA or EC")

    def verify(self, authorization: str | None, check_expiry: bool = True) -> Grant:
        """Turn an ``Authorization`` header into a :class:`Grant`. ``check_expiry=False``
        accepts a token whose ``exp`` has passed (and only that: signature, claims, ``nbf``
        and ``iat`` are checked as always), for a request that only ends something the
        token's holder started (unsubscribing from a change stream).

        Raises:
            ApiError: 401 ``unauthorized`` when the header is missing; 431
                ``token_too_large`` for a token over :data:`MAX_TOKEN_BYTES`; 403
                ``access_denied`` when it is not a valid, unexpired, well-formed JWT.
        """
        if not authorization:
            raise unauthorized("missing Authorization header")
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise access_denied("Authorization must be 'Bearer <JWT>'")
        if self._key is None:
            raise access_denied("server has no public key configured")
        token = token.strip()
        if len(token) > MAX_TOKEN_BYTES:  # (a header value is Latin-1: one character per byte)
            raise ApiError(431, "token_too_large", f"JWT is {len(token)} bytes, the limit is {MAX_TOKEN_BYTES}",
                           {"max_token_bytes": MAX_TOKEN_BYTES})
        cached = self._verified.get(token)
        if cached is not None:  # same bytes, same key: the signature and the claims hold
            grant, iat, nbf, exp = cached
            self._check_times(iat, nbf, exp if check_expiry else None)
            return grant
        options = {"require": ["document_id"], "verify_aud": False, "verify_exp": True,
                   "verify_nbf": True, "verify_iat": True}
        try:
            try:
                claims = jwt.decode(token, self._key, algorithms=self._algorithms,
                                    leeway=self._leeway_s, options=options)
            except jwt.ExpiredSignatureError:
                if check_expiry:
                    raise
                # Expired, so PyJWT found ``exp`` well-formed (an integer) before it compared
                # it: decode again without that comparison, never without the format check.
                claims = jwt.decode(token, self._key, algorithms=self._algorithms,
                                    leeway=self._leeway_s, options={**options, "verify_exp": False})
        except jwt.ExpiredSignatureError:
            raise access_denied("token expired") from None
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise access_denied(f"invalid token: {exc}") from None
        grant = _grant_from_claims(claims)
        if len(self._verified) >= self.VERIFIED_CACHE_SIZE:
            del self._verified[next(iter(self._verified))]
        # jwt.decode accepted them, so each is absent or converts with int() (PyJWT's rule)
        self._verified[token] = (grant, *(None if claims.get(name) is None else int(claims[name])
                                          for name in ("iat", "nbf", "exp")))
        return grant

    def expiry(self, authorization: str | None) -> float | None:
        """Unix time from which :meth:`verify` refuses this header's token as expired
        (its ``exp`` plus the leeway), None when it has no ``exp``. Call after
        :meth:`verify` accepted it."""
        token = (authorization or "").strip().partition(" ")[2].strip()
        cached = self._verified.get(token)
        if cached is not None:
            exp = cached[3]
        else:  # (dropped from the cache meanwhile: the signature was checked by verify)
            exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
        return None if exp is None else int(exp) + self._leeway_s

    def _check_times(self, iat: int | None, nbf: int | None, exp: int | None) -> None:
        """PyJWT's time checks, in its order and with its messages."""
        now = time.time()
        leeway = self._leeway_s
        if iat is not None and iat > now + leeway:
            raise access_denied("invalid token: The token is not yet valid (iat)")
        if nbf is not None and nbf > now + leeway:
            raise access_denied("invalid token: The token is not yet valid (nbf)")
        if exp is not None and exp <= now - leeway:
            raise access_denied("token expired")


def _grant_from_claims(claims: dict) -> Grant:
    """The :class:`Grant` of a verified payload; 403 ``access_denied`` for a claim of the
    wrong type, a malformed ``collaboration_permissions``, or a lone surrogate anywhere."""
    for name, value in claims.items():
        # A "\ud800" escape decodes to a lone surrogate, which is no Unicode text: the client
        # refuses such a token (INVALID_JWT), and a user_id, group or creatorName holding one
        # would be stamped on records no client can read back. Any claim, at any depth, as
        # the client's parser refuses the whole payload.
        if json_problem({name: value}, None):
            raise access_denied(f"invalid token: claim {ascii(name)} is not valid Unicode text "
                                "(a lone surrogate)")
    document_id = claims.get("document_id")
    layer = claims.get("layer", claims.get("layer_name", ""))
    user_id = claims.get("user_id")
    permissions = claims.get("permissions", list(ALL_PERMISSIONS))
    jti = claims.get("jti")
    if jti is not None and not isinstance(jti, str):
        raise access_denied("claim jti must be a string")
    if not isinstance(document_id, str) or not document_id:
        raise access_denied("claim document_id must be a non-empty string")
    if not isinstance(layer, str):
        raise access_denied("claim layer must be a string")
    if user_id is not None and not isinstance(user_id, str):
        raise access_denied("claim user_id must be a string")
    if not isinstance(permissions, list) or not all(isinstance(p, str) for p in permissions):
        raise access_denied("claim permissions must be an array of strings")
    for name in ("default_group", "creator_name"):
        if claims.get(name) is not None and not isinstance(claims[name], str):
            raise access_denied(f"claim {name} must be a string")
    try:
        collaboration = parse_claim(claims.get("collaboration_permissions"))
    except ClaimError as exc:
        raise access_denied(f"invalid token: {exc}") from None
    return Grant(document_id, layer, user_id, frozenset(permissions), jti, collaboration,
                 claims.get("default_group"), claims.get("creator_name"))


#: The admin API's ``Authorization`` scheme (``Token token="..."``), named in its 401 challenge.
ADMIN_SCHEME = "Token"


class AdminSecretGuard:
    """A limit on failed admin-secret checks per client address (docs/protocol.md, "Admin
    API"): after ``max_failures`` failures within ``window_s`` seconds, the address's next
    checks are refused 429 ``too_many_attempts`` with ``Retry-After``, without looking at the
    secret (else each guess would still be answered), until the oldest of those failures is
    ``window_s`` old. So a guesser gets at most ``max_failures`` guesses a window, and nobody
    is locked out longer than ``window_s`` after their last failure; a success forgets the
    address's failures. ``max_failures`` 0: no limit. Per process (with N server processes,
    N times as many guesses). The address is the request's client address, which behind a
    proxy is the proxy's unless uvicorn trusts its ``X-Forwarded-For``
    (``FORWARDED_ALLOW_IPS``). Thread-safe (the admin dependency runs in worker threads).
    """

    #: Addresses remembered at most (the least recently failed are forgotten first).
    MAX_ADDRESSES = 10_000

    @staticmethod
    def counted_as(address: str) -> str:
        """The key ``address``'s failures are counted under: an IPv6 address counts as its
        /64 (one client, a home or a host, is handed a whole /64, so per address it would get
        ``max_failures`` guesses 2^64 times over), an IPv4-mapped one (``::ffff:a.b.c.d``) as
        that IPv4 address, an IPv4 address and anything that is not an address as it is."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return address
        if isinstance(ip, ipaddress.IPv6Address):
            if ip.ipv4_mapped is not None:
                return str(ip.ipv4_mapped)
            return str(ipaddress.IPv6Network((ip, 64), strict=False))
        return str(ip)

    def __init__(self, max_failures: int, window_s: float, clock: Callable[[], float] = time.monotonic):
        if max_failures < 0 or not 0 < window_s < float("inf"):
            raise ValueError("admin_max_failures must be >= 0 and admin_failure_window_s a positive number")
        self.max_failures, self.window_s, self._clock = max_failures, window_s, clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def attempt(self, address: str, check: Callable[[], bool]) -> bool:
        """``check()`` (whether the secret sent is the admin secret), counted for ``address``
        (as :meth:`counted_as` says). ``check`` runs under the guard's lock (so concurrent guesses are counted one after
        another): it must be quick and must not call the guard.

        Raises:
            ApiError: 429 ``too_many_attempts`` (``Retry-After``: whole seconds until the
                address may try again; ``details.retry_after_s``) when ``address`` is at
                the limit; ``check`` is not run then.
        """
        if self.max_failures == 0:
            return check()
        address = self.counted_as(address)
        # One lock around the count, the check and the new failure: with the check outside
        # it, guesses sent at once all passed the count before any failed (a check is one
        # compare_digest of a few bytes, so they queue for microseconds).
        with self._lock:
            now = self._clock()
            times = self._failures.get(address)
            if times is not None:
                while times and times[0] <= now - self.window_s:
                    times.popleft()
                if len(times) >= self.max_failures:
                    wait = max(1, math.ceil(times[0] + self.window_s - now))
                    raise ApiError(429, "too_many_attempts",
                                   f"too many failed admin secrets from this address; try again in {wait} s",
                                   {"retry_after_s": wait}, headers={"Retry-After": str(wait)})
            ok = check()
            if ok:
                self._failures.pop(address, None)
                return True
            times = self._failures.pop(address, None) or deque()
            times.append(self._clock())
            if len(self._failures) >= self.MAX_ADDRESSES:
                del self._failures[next(iter(self._failures))]
            self._failures[address] = times  # (last: the most recently failed)
        return False


def check_admin_token(authorization: str | None, secret: str | None,
                      guard: AdminSecretGuard | None = None, address: str = "") -> None:
    """Check ``Authorization: Token token="<secret>"``; with ``guard``, a wrong secret counts
    as a failure of ``address`` (:class:`AdminSecretGuard`; a missing header does not).

    Raises:
        ApiError: 401 ``unauthorized`` when missing, wrong, or when no secret is configured
        (Document Engine's ``ApiAuthToken`` scheme answers every failed check 401); 429
        ``too_many_attempts`` when ``address`` is at ``guard``'s limit.
    """
    if not authorization:
        raise unauthorized("missing Authorization header", ADMIN_SCHEME)
    if not secret:
        raise unauthorized("admin API disabled: no admin token configured", ADMIN_SCHEME)

    def right() -> bool:
        match = _ADMIN_HEADER.match(authorization)
        return bool(match) and hmac.compare_digest(match.group(1).encode(), secret.encode())
    if not (right() if guard is None else guard.attempt(address, right)):
        raise unauthorized("invalid admin token", ADMIN_SCHEME)
