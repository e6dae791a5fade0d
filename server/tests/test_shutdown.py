"""Stopping ``layersync-server serve`` with SIGTERM or SIGINT (server.py, module docs):
a parked long-poll answers at once (200, an empty page at the layer's revision), idle
keep-alive connections close, a write in flight finishes and gets its answer, the
storage is closed, and the process exits with status 0; a forced stop (requests still
in flight at ``shutdown_timeout_s``, or a worker thread stuck past
:data:`~layersync_server.server.EXIT_GRACE_S` more) exits with status 1, still within
that bound; and :func:`~layersync_server.server.serve` called by a program returns and
leaves it running.

Every test starts its own server process and talks to it over raw sockets, so it sees
exactly which bytes arrive, and when the connection ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import Server, change, note, start_server, stop_server
from layersync_server.notify import LayerNotifier
from layersync_server.server import EXIT_GRACE_S, FORCED_EXIT_STATUS
from layersync_server.settings import Settings

#: The long-polls these tests park ask to wait this long (and the server allows it).
LONG_WAIT_S = 60


def _connect(server: Server) -> socket.socket:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host.strip("[]"), int(port)), timeout=30)


def _request_head(method: str, path: str, headers: dict, body_length: int | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: layersync", "LayerSync-Protocol: 1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body_length is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {body_length}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_until_closed(sock: socket.socket, timeout_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when that was
    (seconds from now). Fails when the connection is still open after ``timeout_s``."""
    started = time.monotonic()
    sock.settimeout(timeout_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except socket.timeout:
        pytest.fail(f"connection still open after {timeout_s} s; received {data[:300]!r}")
    return data, time.monotonic() - started


def _read_one_response(sock: socket.socket) -> tuple[int, dict, bytes]:
    """One complete HTTP/1.1 response with a Content-Length (the connection stays open)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-response: {data!r}"
        data += chunk
    status, headers, rest = _parse_head(data)
    while len(rest) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        rest += chunk
    return status, headers, rest


def _parse_head(data: bytes) -> tuple[int, dict, bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def _complete_response(data: bytes) -> tuple[int, dict, dict]:
    """Status, headers and JSON body of the one 200 response in ``data``, checked whole."""
    status, headers, body = _parse_head(data)
    assert status == 200, data
    assert len(body) == int(headers["content-length"]), data
    return status, headers, json.loads(body)


def _open_long_polls(server: Server) -> int:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("layersync_open_long_polls "):
            return int(float(line.split()[1]))
    raise AssertionError("layersync_open_long_polls missing from /metrics")


def _wait_for_parked_long_polls(server: Server, count: int) -> None:
    deadline = time.monotonic() + 10
    while _open_long_polls(server) != count:
        assert time.monotonic() < deadline, "the long-poll never parked"
        time.sleep(0.02)


def _kill_if_running(process: subprocess.Popen, server: Server) -> None:
    """A test's cleanup: the server process is killed if the test left it running (it
    failed before the exit it checks), and the test's HTTP client closed."""
    if process.poll() is None:
        process.kill()
        process.wait()
    server.http.close()


def _ids(server: Server, document_id: str) -> set[str]:
    return {record["id"] for record in server.records(document_id)["records"]}


def _store(request, tmp_path: Path, backend: str) -> str:
    if backend == "postgres":
        return request.getfixturevalue("pg_url")
    return str(tmp_path / "store.sqlite")


@pytest.mark.parametrize("backend,signum", [("sqlite", signal.SIGTERM),
                                            ("sqlite", signal.SIGINT),
                                            ("postgres", signal.SIGTERM)],
                         ids=["sqlite-SIGTERM", "sqlite-SIGINT", "postgres-SIGTERM"])
def test_signal_answers_long_polls_finishes_writes_and_exits_0(request, tmp_path, keys,
                                                               backend, signum):
    db = _store(request, tmp_path, backend)
    stderr_path = tmp_path / "stderr.log"
    process, server = start_server(tmp_path, db, *keys, "--max-wait-s", str(LONG_WAIT_S),
                                   stderr_path=stderr_path)
    try:
        with contextlib.ExitStack() as sockets:
            doc = server.new_document()
            before = server.sync(doc, [change("create", "before", note("committed before"))])
            assert before.status_code == 200, before.text
            revision = before.json()["revision"]
            auth = server.auth(doc)

            # (a) a parked long-poll
            poll = sockets.enter_context(_connect(server))
            poll.sendall(_request_head(
                "GET", f"{server.layer_url(doc)}/changes?since={revision}&wait={LONG_WAIT_S}",
                auth))
            # (b) an idle keep-alive connection, one request answered
            idle = sockets.enter_context(_connect(server))
            idle.sendall(_request_head("GET", "/healthz", {}))
            status, headers, _ = _read_one_response(idle)
            assert status == 200 and headers.get("connection") != "close"
            # (c) a write in flight: its head and half its body are sent before the signal
            body = json.dumps({"client_id": "t", "since": revision,
                               "changes": [change("create", "during", note("in flight"))]}).encode()
            write = sockets.enter_context(_connect(server))
            write.sendall(_request_head("POST", f"{server.layer_url(doc)}/sync", auth, len(body))
                          + body[:len(body) // 2])
            _wait_for_parked_long_polls(server, 1)

            process.send_signal(signum)
            signalled = time.monotonic()

            data, _ = _read_until_closed(poll, timeout_s=LONG_WAIT_S)
            poll_answered_s = time.monotonic() - signalled
            status, headers, page = _complete_response(data)
            assert status == 200, data
            assert page["records"] == [] and page["revision"] == revision
            assert page["next_since"] == revision and page["has_more"] is False
            assert headers["connection"] == "close"
            assert poll_answered_s < 3, f"long-poll answered {poll_answered_s:.2f} s after the signal"

            _, idle_closed_s = _read_until_closed(idle, timeout_s=5)
            assert idle_closed_s < 3
            with pytest.raises(ConnectionRefusedError):  # no longer accepting
                _connect(server).close()
            assert process.poll() is None  # still waiting for the write

            write.sendall(body[len(body) // 2:])  # the rest of the write, after the stop began
            data, _ = _read_until_closed(write, timeout_s=10)
            status, headers, answer = _complete_response(data)
            assert status == 200, data
            assert [a["id"] for a in answer["accepted"]] == ["during"]
            assert headers["connection"] == "close"

            assert process.wait(timeout=10) == 0
            exited_s = time.monotonic() - signalled
            assert exited_s < 5, f"exited {exited_s:.2f} s after the signal"
    finally:
        _kill_if_running(process, server)

    log = stderr_path.read_text()
    assert '"level": "error"' not in log, log
    if backend == "sqlite":  # the last connection's close checkpointed the WAL away
        wal = Path(db + "-wal")
        assert not wal.exists() or wal.stat().st_size == 0

    process, server = start_server(tmp_path, db, *keys)
    try:
        assert _ids(server, doc) >= {"before", "during"}
    finally:
        stop_server(process, server)


def test_a_stuck_write_does_not_hold_the_exit_past_the_bound(tmp_path, keys):
    """A sync commit waiting for the SQLite write lock (held by another process, here
    the test) can not finish and its worker thread can not be cancelled: the process
    still exits within ``shutdown_timeout_s`` + ``EXIT_GRACE_S``, with status 1 and an
    error logged (a forced stop); what was committed before is intact."""
    db = str(tmp_path / "store.sqlite")
    timeout_s = 0.5
    stderr_path = tmp_path / "stderr.log"
    process, server = start_server(tmp_path, db, *keys, stderr_path=stderr_path,
                                   env={"LAYERSYNC_SERVER_SHUTDOWN_TIMEOUT_S": str(timeout_s)})
    lock = sqlite3.connect(db, isolation_level=None)
    try:
        doc = server.new_document()
        assert server.sync(doc, [change("create", "before", note())]).status_code == 200
        lock.execute("BEGIN IMMEDIATE")  # the server's busy timeout is 30 s
        body = json.dumps({"client_id": "t", "since": 0,
                           "changes": [change("create", "stuck", note())]}).encode()
        write = _connect(server)
        write.sendall(_request_head("POST", f"{server.layer_url(doc)}/sync", server.auth(doc),
                                    len(body)) + body)
        time.sleep(0.5)  # the commit is in its worker thread, waiting for the lock

        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        bound_s = timeout_s + EXIT_GRACE_S + 1.5
        try:
            assert process.wait(timeout=bound_s + 10) == FORCED_EXIT_STATUS
        finally:
            exited_s = time.monotonic() - signalled
        assert exited_s < bound_s, f"exited {exited_s:.2f} s after SIGTERM"
        assert "timeout graceful shutdown exceeded" in stderr_path.read_text()
        data, _ = _read_until_closed(write, timeout_s=5)  # answered 500, or just closed
        assert not data or _parse_head(data)[0] == 500, data
        write.close()
    finally:
        lock.close()  # rolls back: the server's stuck commit never happened
        _kill_if_running(process, server)

    process, server = start_server(tmp_path, db, *keys)
    try:
        assert "before" in _ids(server, doc)
    finally:
        stop_server(process, server)


@contextlib.contextmanager
def _stalled_write(server: Server):
    """A sync write whose body stops halfway (a stalled client): the request is in flight,
    reading its body, until the block ends."""
    doc = server.new_document()
    body = json.dumps({"client_id": "t", "since": 0,
                       "changes": [change("create", "stalled", note())]}).encode()
    with _connect(server) as write:
        write.sendall(_request_head("POST", f"{server.layer_url(doc)}/sync",
                                    server.auth(doc), len(body)) + body[:len(body) // 2])
        time.sleep(0.3)  # the request is in flight, reading its body
        yield write


def test_a_request_still_in_flight_at_the_timeout_makes_the_exit_status_1(tmp_path, keys):
    """A write whose body never finishes arriving (a stalled client) is abandoned at
    ``shutdown_timeout_s``: the server stops right then, without the watchdog, and
    says so with status 1 and uvicorn's error line."""
    timeout_s = 0.5
    stderr_path = tmp_path / "stderr.log"
    process, server = start_server(tmp_path, str(tmp_path / "store.sqlite"), *keys,
                                   "--shutdown-timeout-s", str(timeout_s),
                                   stderr_path=stderr_path)
    try:
        with _stalled_write(server):
            process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            assert process.wait(timeout=timeout_s + EXIT_GRACE_S + 10) == FORCED_EXIT_STATUS
            exited_s = time.monotonic() - signalled
        assert exited_s < timeout_s + EXIT_GRACE_S, f"exited {exited_s:.2f} s after SIGTERM"
        log = stderr_path.read_text()
        assert "timeout graceful shutdown exceeded" in log, log
        assert "still stopping" not in log, log  # not the watchdog
    finally:
        _kill_if_running(process, server)


def test_a_second_sigint_stops_without_waiting_and_exits_1(tmp_path, keys):
    """Ctrl-C twice: the first starts the graceful stop, which waits for a stalled write;
    the second ends the waiting at once (uvicorn's force_exit), the storage is not
    closed, and the process says so and exits with status 1, long before the timeout."""
    stderr_path = tmp_path / "stderr.log"
    process, server = start_server(tmp_path, str(tmp_path / "store.sqlite"), *keys,
                                   "--shutdown-timeout-s", "60", stderr_path=stderr_path)
    try:
        with _stalled_write(server):
            process.send_signal(signal.SIGINT)
            time.sleep(0.5)
            assert process.poll() is None  # the first Ctrl-C waits for the write
            process.send_signal(signal.SIGINT)
            signalled = time.monotonic()
            assert process.wait(timeout=30) == FORCED_EXIT_STATUS
            exited_s = time.monotonic() - signalled
        # Well before the 60 s the graceful stop would wait (a loose bound, for loaded CI).
        assert exited_s < 10, f"exited {exited_s:.2f} s after the second SIGINT"
        log = stderr_path.read_text()
        assert "(second SIGINT)" in log, log
        assert "still stopping" not in log, log  # not the watchdog
    finally:
        _kill_if_running(process, server)


_SERVE_THEN_KEEP_RUNNING = """
import os, signal, sys, threading, time
from pathlib import Path
from layersync_server.server import EXIT_GRACE_S, serve
from layersync_server.settings import Settings

db, port_file, timeout_s = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])

def stop_once_listening():
    while not port_file.exists():
        time.sleep(0.02)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=stop_once_listening, daemon=True).start()
clean = serve(Settings(db_path=db, shutdown_timeout_s=timeout_s), port_file=port_file)
print("serve returned", clean, flush=True)
time.sleep(timeout_s + EXIT_GRACE_S + 1)  # past the stop's watchdog
print("still running", flush=True)
"""


def test_serve_returns_and_its_caller_keeps_running(tmp_path):
    """serve() is documented to stop and return: the watchdog of its stop must not end
    the program that called it afterwards."""
    timeout_s = 0.5
    result = subprocess.run([sys.executable, "-c", _SERVE_THEN_KEEP_RUNNING,
                             str(tmp_path / "x.sqlite"), str(tmp_path / "port"), str(timeout_s)],
                            capture_output=True, text=True, timeout=60)
    lines = result.stdout.splitlines()
    assert lines[1:] == ["serve returned True", "still running"], (result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr
    assert "still stopping" not in result.stderr


def test_notifier_drain_answers_waiters_as_timed_out_and_later_waits_at_once():
    async def scenario():
        notifier = LayerNotifier()
        parked = asyncio.create_task(notifier.wait_for_change("d", "", 5, 5, LONG_WAIT_S))
        await asyncio.sleep(0)
        assert notifier.open_waits == 1
        notifier.drain()
        assert await asyncio.wait_for(parked, 1) == (False, None)
        started = time.monotonic()
        assert await notifier.wait_for_change("d", "", 5, 5, LONG_WAIT_S) == (False, None)
        assert time.monotonic() - started < 1
        # a wait with a newer revision known still wakes (the caller re-reads storage)
        assert await notifier.wait_for_change("d", "", 4, 5, LONG_WAIT_S) == (True, None)
        assert notifier.open_waits == 0

    asyncio.run(scenario())


def test_shutdown_timeout_setting(tmp_path):
    assert Settings().shutdown_timeout_s == 5
    env = {"LAYERSYNC_SERVER_SHUTDOWN_TIMEOUT_S": "0.25"}
    assert Settings.from_env(env).shutdown_timeout_s == 0.25
    assert Settings.from_env(env, shutdown_timeout_s=3.0).shutdown_timeout_s == 3.0
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(ValueError):
            Settings.from_env({"LAYERSYNC_SERVER_SHUTDOWN_TIMEOUT_S": bad})
    result = subprocess.run([sys.executable, "-m", "layersync_server", "serve", "--port", "0",
                             "--db", str(tmp_path / "x.sqlite"), "--shutdown-timeout-s", "-1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "shutdown_timeout_s" in result.stderr


def test_postgres_close_also_closes_a_connection_in_use_when_it_is_handed_back(pg_url):
    """A forced stop closes the storage while a worker still holds a connection: that
    connection is closed when handed back, not kept in the pool (where nothing would
    ever close it); connections opened after the close are pooled again."""
    from layersync_server.storage import open_storage
    storage = open_storage(pg_url)
    try:
        with storage.connection() as idle:
            pass
        with storage.connection() as in_use:
            assert in_use is idle  # pooled: the idle connection is reused
            storage.close()
            assert idle.closed is False  # still in use: closing it now would break the worker
            in_use.execute("SELECT 1")
        assert in_use.closed, "a connection in use at close() went back into the pool"
        with storage.connection() as fresh:
            assert fresh is not in_use and fresh.execute("SELECT 1").fetchone()
        with storage.connection() as again:
            assert again is fresh  # after the close, connections are pooled as before
    finally:
        storage.close()
    assert fresh.closed
