"""Who may see the dashboard: the admin secret, asked once, then a session cookie.

The login form's secret is checked like the admin API's header
(:func:`layersync_server.auth.check_admin_token`); a right one gets a session cookie
(:data:`COOKIE`: HttpOnly, ``SameSite=Strict``, ``Secure`` over https, path
``/dashboard``) holding ``<nonce>.<expiry>.<HMAC-SHA256 of both keyed by the secret>``:
nothing is stored server side, every process sharing the secret accepts it, and
changing the secret ends every session. Scripts may send ``Authorization: Token
token="<secret>"`` instead of the cookie.

CSRF: every state-changing request authenticated by the cookie carries the session's
CSRF token (HMAC of the session nonce, in a ``csrf`` form field or an
``X-CSRF-Token`` header), and a browser's ``Origin``, when sent, must be this server;
requests authenticated by the header need neither (a browser never adds it by itself).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from starlette.requests import Request

from layersync_server.auth import check_admin_token
from layersync_server.context import client_address
from layersync_server.errors import access_denied, not_found

COOKIE = "layersync_dashboard"
COOKIE_PATH = "/dashboard"
#: How long a login lasts, seconds.
SESSION_TTL_S = 12 * 3600


def _mac(secret: str, message: str) -> str:
    digest = hmac.new(secret.encode(), message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def new_session(secret: str, now_s: float | None = None) -> str:
    """A fresh session cookie value for ``secret``, valid :data:`SESSION_TTL_S` seconds."""
    expires = int((time.time() if now_s is None else now_s) + SESSION_TTL_S)
    payload = f"{secrets.token_urlsafe(16)}.{expires}"
    return f"{payload}.{_mac(secret, 'session:' + payload)}"


def session_nonce(secret: str, value: str | None) -> str | None:
    """The nonce of a valid, unexpired session cookie value, else None."""
    if not value or value.count(".") != 2:
        return None
    nonce, expires, mac = value.split(".")
    if not hmac.compare_digest(mac.encode(), _mac(secret, f"session:{nonce}.{expires}").encode()):
        return None
    if not expires.isdigit() or int(expires) < time.time():
        return None
    return nonce


def csrf_token(secret: str, nonce: str) -> str:
    """The CSRF token of the session with ``nonce``."""
    return _mac(secret, "csrf:" + nonce)


@dataclass(frozen=True)
class Viewer:
    """An authenticated request: by the ``Authorization`` header (``csrf`` is None) or
    by the session cookie (``csrf`` is the token its forms must carry)."""

    csrf: str | None

    def check(self, request: Request, sent: object) -> None:
        """Refuse a state-changing request without the right CSRF token, or sent from
        another origin (cookie sessions only).

        Raises:
            ApiError: 403 ``access_denied``.
        """
        if self.csrf is None:
            return
        if not isinstance(sent, str):  # absent, or a file part named csrf
            sent = request.headers.get("x-csrf-token")
        if not sent or not hmac.compare_digest(sent.encode(), self.csrf.encode()):
            raise access_denied("missing or wrong CSRF token; reload the page and try again")
        check_origin(request)


def check_origin(request: Request) -> None:
    """403 when the browser says the request comes from another origin."""
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        host = request.headers.get("host", "")
        if origin.split("://", 1)[-1] != host:
            raise access_denied("request from another origin")
    elif origin == "null":
        raise access_denied("request from an opaque origin")


def enabled_secret(request: Request) -> str:
    """The admin secret; 404 when the server has none (the dashboard is off)."""
    secret = request.app.state.ctx.settings.admin_token
    if not secret:
        raise not_found("the dashboard is off: the server has no admin secret")
    return secret


def viewer(request: Request) -> Viewer | None:
    """The request's :class:`Viewer`, or None when it carries neither credential.

    Raises:
        ApiError: 404 when the dashboard is off; 401 for a wrong ``Authorization`` (as the admin API).
    """
    secret = enabled_secret(request)
    authorization = request.headers.get("authorization")
    if authorization:
        ctx = request.app.state.ctx
        check_admin_token(authorization, secret, ctx.admin_guard, client_address(request))
        return Viewer(None)
    nonce = session_nonce(secret, request.cookies.get(COOKIE))
    return None if nonce is None else Viewer(csrf_token(secret, nonce))


def check_secret(request: Request, sent: str) -> bool:
    """Whether the login form's ``sent`` secret is the admin secret; a wrong one counts
    against the client address as a wrong admin token does (429 past the limit)."""
    secret = enabled_secret(request)
    return request.app.state.ctx.admin_guard.attempt(
        client_address(request), lambda: hmac.compare_digest(sent.encode(), secret.encode()))


def set_session_cookie(request: Request, response) -> None:
    """Log the browser in: a new session cookie on ``response``."""
    response.set_cookie(COOKIE, new_session(enabled_secret(request)), max_age=SESSION_TTL_S,
                        path=COOKIE_PATH, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")


def clear_session_cookie(request: Request, response) -> None:
    """Log the browser out."""
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")
