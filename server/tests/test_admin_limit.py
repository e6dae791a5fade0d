"""The limit on failed admin secrets (docs/protocol.md, "Admin API"): per client address,
after ``admin_max_failures`` wrong secrets within ``admin_failure_window_s`` the address
gets 429 ``too_many_attempts`` with ``Retry-After``, the right secret too (else a guess would
still be answered), until the window has passed; other addresses, a missing header and a
success are not counted against anyone. On a real server (the admin API and the
dashboard), and the guard itself on a clock of its own."""

from __future__ import annotations

import time
import uuid

import pytest

from conftest import start_server, stop_server
from layersync_server.auth import AdminSecretGuard
from layersync_server.errors import ApiError

WINDOW_S = 2.0


@pytest.fixture
def limited(tmp_path, keys):
    """A server of its own that allows 3 wrong admin secrets per address every 2 s."""
    process, instance = start_server(tmp_path, str(tmp_path / "db.sqlite"), *keys,
                                     "--admin-max-failures", "3", "--admin-failure-window-s", str(WINDOW_S))
    yield instance
    stop_server(process, instance)


def _documents(server, secret: str, address: str | None = None):
    headers = {"Authorization": f'Token token="{secret}"'}
    if address is not None:  # uvicorn trusts X-Forwarded-For from loopback: the client address
        headers["X-Forwarded-For"] = address
    return server.http.get("/api/documents", headers=headers)


def test_wrong_admin_secrets_are_limited_per_address_for_a_window(limited):
    right = limited.admin()["Authorization"].split('"')[1]
    assert [_documents(limited, "guess").status_code for _ in range(3)] == [401, 401, 401]
    refused = _documents(limited, right)  # at the limit: not even the right secret is looked at
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "too_many_attempts" and set(error) == {"code", "message", "details"}
    wait = int(refused.headers["Retry-After"])
    assert 1 <= wait <= WINDOW_S and error["details"] == {"retry_after_s": wait}
    assert _documents(limited, "guess").status_code == 429  # and a guess is not counted again
    # another address is not affected, nor is a request without the header counted
    assert _documents(limited, right, "10.0.0.7").status_code == 200
    assert limited.http.get("/api/documents").status_code == 401
    time.sleep(wait + 0.1)  # the window has passed: the legitimate admin is back in
    assert _documents(limited, right).status_code == 200
    # a success forgets the failures: three more guesses before the limit again
    assert [_documents(limited, "guess").status_code for _ in range(4)] == [401, 401, 401, 429]


def test_the_dashboard_login_form_counts_wrong_secrets_too(limited):
    form = lambda secret: limited.http.post(  # noqa: E731
        "/dashboard/login", data={"secret": secret, "next": "/dashboard"},
        headers={"X-Forwarded-For": "10.0.0.9"}, follow_redirects=False)
    assert [form("guess").status_code for _ in range(3)] == [403, 403, 403]
    refused = form(limited.admin()["Authorization"].split('"')[1])
    assert refused.status_code == 429 and "Retry-After" in refused.headers, refused.text
    # the admin API from that address too: one limit per address
    assert _documents(limited, "guess", "10.0.0.9").status_code == 429
    assert _documents(limited, "guess", "10.0.0.10").status_code == 401


def test_the_guard_bounds_guesses_and_lockouts_and_forgets_old_addresses():
    now = [1000.0]
    guard = AdminSecretGuard(2, 10.0, clock=lambda: now[0])
    assert not guard.attempt("a", lambda: False) and not guard.attempt("a", lambda: False)
    with pytest.raises(ApiError) as raised:
        guard.attempt("a", lambda: pytest.fail("the secret is not checked at the limit"))
    assert raised.value.status == 429 and raised.value.headers == {"Retry-After": "10"}
    now[0] += 9.5
    with pytest.raises(ApiError) as raised:
        guard.attempt("a", lambda: True)
    assert raised.value.headers == {"Retry-After": "1"}
    now[0] += 0.5  # the first failure is 10 s old: one more guess
    assert guard.attempt("a", lambda: True)
    assert not guard.attempt("a", lambda: False)  # the success forgot both failures
    assert guard.attempt("a", lambda: True)
    assert AdminSecretGuard(0, 10.0).attempt("a", lambda: False) is False  # 0: no limit
    many = AdminSecretGuard(1, 10.0, clock=lambda: now[0])
    many.MAX_ADDRESSES = 3
    for address in ("w", "x", "y", "z"):
        many.attempt(address, lambda: False)
    assert many.attempt("w", lambda: True)  # the least recently failed was forgotten
    with pytest.raises(ApiError):
        many.attempt("z", lambda: True)
    with pytest.raises(ValueError):
        AdminSecretGuard(-1, 10.0)
    with pytest.raises(ValueError):
        AdminSecretGuard(3, 0)


def test_guesses_sent_at_once_are_counted_one_after_another():
    """Twelve wrong secrets at once from one address (the admin dependency runs in worker
    threads): 3 are checked, 9 refused 429, as if sent one by one (each used to pass the
    count before any was recorded, so all 12 were checked)."""
    import threading
    guard = AdminSecretGuard(3, 60.0)
    checked, refused, start = [], [], threading.Barrier(12)

    def wrong() -> bool:
        checked.append(1)
        time.sleep(0.05)  # the checks of the others overlap this one's, unless they queue
        return False

    def guess() -> None:
        start.wait()
        try:
            guard.attempt("a", wrong)
        except ApiError as exc:
            refused.append(exc.status)
    threads = [threading.Thread(target=guess) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (len(checked), refused) == (3, [429] * 9)


def test_the_settings_reach_the_guard(tmp_path, keys):
    from layersync_server.app import create_app
    from layersync_server.settings import Settings
    app = create_app(Settings(db_path=tmp_path / f"{uuid.uuid4().hex}.sqlite", public_key_path=keys[1],
                              admin_token="t", admin_max_failures=7, admin_failure_window_s=30))
    guard = app.state.ctx.admin_guard
    assert (guard.max_failures, guard.window_s) == (7, 30)
    assert Settings.from_env({"LAYERSYNC_SERVER_ADMIN_MAX_FAILURES": "4",
                              "LAYERSYNC_SERVER_ADMIN_FAILURE_WINDOW_S": "1.5"}).admin_failure_window_s == 1.5


def test_ipv6_addresses_of_one_slash_64_share_a_limit(limited):
    right = limited.admin()["Authorization"].split('"')[1]
    assert [_documents(limited, "guess", f"2001:db8::{n}").status_code for n in (1, 2, 3)] == [401] * 3
    assert _documents(limited, right, "2001:db8::4").status_code == 429
    assert _documents(limited, right, "2001:db8:0:1::1").status_code == 200  # another /64


def test_an_ipv4_mapped_address_counts_as_its_ipv4_address(limited):
    right = limited.admin()["Authorization"].split('"')[1]
    assert [_documents(limited, "guess", "192.0.2.7").status_code for _ in range(3)] == [401] * 3
    assert _documents(limited, right, "::ffff:192.0.2.7").status_code == 429
    assert _documents(limited, right, "192.0.2.8").status_code == 200
