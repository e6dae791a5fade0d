"""The real ``layersync`` command (a subprocess) against the real server on loopback."""
from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from layersync import cli

from conftest import WAIT_S

BIN = Path(sys.executable).parent / "layersync"
COMMAND = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "layersync"]
NOTE = {"type": "pspdfkit/note", "pageIndex": 0, "bbox": [30, 30, 24, 24], "creatorName": "cli-test", "icon": "comment",
        "text": {"format": "plain", "value": "from the CLI — 你好 👋"}}


def run(*args: str, env: dict[str, str] | None = None, stdin: str | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, input=stdin,
                          env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.fixture
def cli_env(server, uploaded, tmp_path) -> dict[str, str]:
    """Environment for one CLI user of a fresh document: server, JWT file, storage."""
    doc_id = uploaded()
    token = tmp_path / "token.jwt"
    token.write_text(server.mint_token(doc_id, user_id="cli") + "\n")
    return {"LAYERSYNC_SERVER": server.url, "LAYERSYNC_JWT": f"@{token}",
            "LAYERSYNC_STORAGE": str(tmp_path / "cli-store"), "DOC_ID": doc_id}


def test_help_has_examples_and_exit_codes():
    top = run("--help")
    assert top.returncode == 0
    for word in ("examples:", "exit status:", "listen", "annotations", "export", "status", "comments",
                 "attachments", "history", "rollback", "deleted", "restore", "search"):
        assert word in top.stdout
    for code in cli.EXIT_CODES:
        assert f"  {code} " in top.stdout
    sub = run("annotations", "add", "--help")
    assert sub.returncode == 0 and "example" in sub.stdout and "--no-sync" in sub.stdout
    assert "not yet available" not in top.stdout
    status = run("status", "--help")
    assert "pending_change_count" in status.stdout and "last_sync_time" in status.stdout


def test_python_m_version():
    proc = subprocess.run([sys.executable, "-m", "layersync", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and "layersync 0." in proc.stdout and "library" in proc.stdout


def test_version_exits_1_when_the_library_does_not_load():
    env = {**os.environ, "LAYERSYNC_LIBRARY": "/nonexistent/liblayersync.so"}
    proc = subprocess.run([sys.executable, "-m", "layersync", "--version"], capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "library not loaded" in proc.stdout + proc.stderr


def test_usage_errors_exit_2(cli_env):
    assert run("annotations", "frob").returncode == cli.EXIT_USAGE
    no_jwt = run("status", env={**cli_env, "LAYERSYNC_JWT": ""})
    assert no_jwt.returncode == cli.EXIT_USAGE and "JWT" in no_jwt.stderr
    bad_json = run("annotations", "add", "{not json", env=cli_env)
    assert bad_json.returncode == cli.EXIT_USAGE and "not JSON" in bad_json.stderr
    assert "write @" not in bad_json.stderr


def test_a_json_file_argument_errors_name_the_file_and_the_missing_at(cli_env, tmp_path):
    note_file = tmp_path / "note.json"
    note_file.write_text(json.dumps(NOTE))
    missing = run("annotations", "add", f"@{tmp_path / 'missing.json'}", env=cli_env)
    assert missing.returncode == cli.EXIT_USAGE, missing.stderr
    assert "cannot read the JSON file" in missing.stderr and "missing.json" in missing.stderr
    without_at = run("annotations", "add", str(note_file), env=cli_env)
    assert without_at.returncode == cli.EXIT_USAGE and f"write @{note_file}" in without_at.stderr
    long_text = run("annotations", "add", "x" * 5000, env=cli_env)  # not a file name either
    assert long_text.returncode == cli.EXIT_USAGE and "not JSON" in long_text.stderr


def test_download_edit_sync_export(cli_env, server):
    env, doc_id = cli_env, cli_env["DOC_ID"]
    status = run("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) | {} == json.loads(status.stdout)
    assert json.loads(status.stdout)["downloaded"] is False
    assert json.loads(status.stdout)["last_sync_time"] is None
    human = run("status", env=env).stdout
    assert re.search(r"^last_sync +never$", human, re.M)
    assert re.search(r"^layer +\(default\)$", human, re.M) and json.loads(status.stdout)["layer"] == ""

    down = run("download", "--progress", env=env)
    assert down.returncode == 0, down.stderr
    assert Path(down.stdout.strip()).is_file()
    assert f"download {doc_id}" in down.stderr  # the tqdm bar
    again = run("download", "--json", env=env)
    assert again.returncode == 0 and json.loads(again.stdout)["downloaded"] is False

    listed = run("annotations", "list", "--json", env=env)
    imported = json.loads(listed.stdout)
    assert len(imported) == len(server.annotations(doc_id)) > 0
    table = run("annotations", "list", "--limit", "1", env=env)
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[:3] == ["ID", "TYPE", "PAGE"]
    assert table.stdout.rstrip().endswith("\n1 annotation")

    added = run("annotations", "add", "-", "--json", env=env, stdin=json.dumps(NOTE, ensure_ascii=False))
    assert added.returncode == 0, added.stderr
    ann_id = json.loads(added.stdout)["id"]
    assert server.annotations(doc_id)[ann_id]["text"]["value"] == NOTE["text"]["value"]

    got = run("annotations", "get", ann_id, env=env)
    assert json.loads(got.stdout)["text"] == NOTE["text"]

    changed = {"text": {"format": "plain", "value": "edited by the CLI ✏️"}}
    upd = run("annotations", "update", ann_id, json.dumps(changed), "--no-sync", env=env)
    assert upd.returncode == 0 and upd.stdout.strip() == ann_id
    pending = json.loads(run("status", "--json", env=env).stdout)
    assert pending["pending_changes"] is True and pending["state"] == "DIRTY"
    synced = run("sync", "--json", "--progress", env=env)
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout)["pending_changes"] is False
    assert server.annotations(doc_id)[ann_id]["text"]["value"] == "edited by the CLI ✏️"

    out = Path(env["LAYERSYNC_STORAGE"]).parent / "export.json"
    exported = run("export", "-o", str(out), env=env)
    assert exported.returncode == 0, exported.stderr
    document = json.loads(out.read_text("utf-8"))
    assert document["format"] == cli.INSTANT_JSON_FORMAT
    assert {a["id"] for a in document["annotations"]} == set(server.annotations(doc_id))

    removed = run("annotations", "rm", ann_id, env=env)
    assert removed.returncode == 0, removed.stderr
    assert ann_id not in server.annotations(doc_id)
    missing = run("annotations", "get", ann_id, "--json", env=env)
    assert missing.returncode == cli.EXIT_NOT_FOUND
    error = json.loads(missing.stderr)["error"]
    assert error["name"] == "NO_SUCH_ANNOTATION" and error["code"] == 11


def test_network_error_exit_3(cli_env, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run("download", "--timeout", "20", env={**cli_env, "LAYERSYNC_SERVER": f"http://127.0.0.1:{port}"})
    assert proc.returncode == cli.EXIT_NETWORK, proc.stderr
    assert "REQUEST_FAILED" in proc.stderr


def test_auth_errors_exit_4(cli_env, server):
    malformed = run("status", "--jwt", "not-a-jwt", env=cli_env)
    assert malformed.returncode == cli.EXIT_AUTH and "INVALID_JWT" in malformed.stderr
    assert "write @FILE" in malformed.stderr  # no dot at all: surely not a JWT
    good = server.mint_token(cli_env["DOC_ID"], user_id="cli")
    head, payload, signature = good.split(".")
    forged = ".".join([head, payload, ("A" if signature[0] != "A" else "B") + signature[1:]])
    refused = run("download", "--jwt", forged, "--json", env=cli_env)
    assert refused.returncode == cli.EXIT_AUTH, refused.stderr
    assert json.loads(refused.stderr.strip().splitlines()[-1])["error"]["name"] == "ACCESS_DENIED"


def test_a_jwt_file_named_without_its_at_gets_a_hint(cli_env, tmp_path):
    """LAYERSYNC_JWT=alice.jwt (a file name, no @): the library's INVALID_JWT message as it
    is, plus the hint to write @alice.jwt, exit 4; --json puts it in "hint". A value with
    two dots that names no file is only malformed (no hint)."""
    token_file = cli_env["LAYERSYNC_JWT"][1:]
    (tmp_path / "alice.jwt").write_text(Path(token_file).read_text())
    env = {**cli_env, "LAYERSYNC_JWT": "alice.jwt"}
    proc = subprocess.run([*COMMAND, "status"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, **env}, timeout=60)
    assert proc.returncode == cli.EXIT_AUTH, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "layersync: [INVALID_JWT 32] malformed JWT: expected 3 dot-separated parts, found 2 "
        "(to read the token from the file alice.jwt, write @alice.jwt)"]
    proc = subprocess.run([*COMMAND, "status", "--json"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, **env}, timeout=60)
    error = json.loads(proc.stderr.strip().splitlines()[-1])["error"]
    assert error["hint"] == "to read the token from the file alice.jwt, write @alice.jwt"
    assert error["message"] == "malformed JWT: expected 3 dot-separated parts, found 2"
    plain = run("status", "--jwt", "a.b.c", env=cli_env)
    assert plain.returncode == cli.EXIT_AUTH and "write @" not in plain.stderr


def _read_line(proc: subprocess.Popen[str], stream: Any, timeout: float) -> str:
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            proc.kill()
            raise AssertionError(f"no output within {timeout} s; stderr: {proc.stderr.read() if proc.stderr else ''}")
        return str(stream.readline())
    finally:
        sel.close()


def test_listen_prints_changes_until_ctrl_c(cli_env, downloaded, tmp_path):
    env = cli_env
    assert run("download", env=env).returncode == 0
    # An ignored SIGINT stays ignored across exec, and Python then installs no KeyboardInterrupt
    # handler: under `nohup` or a non-interactive shell's background job (`make test &`) the
    # child would never see the Ctrl-C below. A caught SIGINT becomes SIG_DFL in the child.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen([*COMMAND, "listen", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, **env})
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        started = json.loads(_read_line(proc, proc.stderr, WAIT_S))
        assert started["event"] == "listening"
        _, other = downloaded(env["DOC_ID"], user_id="bob")
        created = other.create_annotation(NOTE)
        other.sync(wait=True, timeout=WAIT_S)
        seen: list[str] = []
        deadline = time.monotonic() + WAIT_S
        while created["id"] not in seen:
            line = json.loads(_read_line(proc, proc.stdout, max(0.1, deadline - time.monotonic())))
            assert line["event"] == "changes" and "time" in line
            seen += line["created"] + line["updated"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT_S) == cli.EXIT_INTERRUPTED
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_comments_search_attachments_history(cli_env, server, tmp_path):
    env, doc_id = cli_env, cli_env["DOC_ID"]
    assert run("download", env=env).returncode == 0
    added = run("annotations", "add", json.dumps(NOTE), "--json", env=env)
    assert added.returncode == 0, added.stderr
    ann_id = json.loads(added.stdout)["id"]

    # status counts pending changes and shows the last sync (the add above synced)
    before = time.time()
    assert run("sync", env=env).returncode == 0
    synced = json.loads(run("status", "--json", env=env).stdout)["last_sync_time"]
    assert isinstance(synced, float) and before - 1 <= synced <= time.time() + 1
    human = run("status", env=env).stdout
    assert re.search(r"^last_sync +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}$", human, re.M), human
    upd = run("annotations", "update", ann_id, '{"text": {"format": "plain", "value": "second 🦓 zebra"}}',
              "--no-sync", env=env)
    assert upd.returncode == 0, upd.stderr
    status = json.loads(run("status", "--json", env=env).stdout)
    assert status["pending_change_count"] == 1 and status["pending_changes"] is True
    assert status["last_sync_time"] == synced  # an edit is not a sync
    assert "pending_change_count  1" in run("status", env=env).stdout
    assert json.loads(run("sync", "--json", env=env).stdout)["pending_change_count"] == 0

    # comments
    c1 = run("comments", "add", ann_id, "looks right ✅", "--creator", "cli-bob", env=env)
    assert c1.returncode == 0, c1.stderr
    c2 = run("comments", "add", ann_id, "--data", '{"text": {"format": "plain", "value": "second"}}', "--json", env=env)
    assert c2.returncode == 0, c2.stderr
    assert json.loads(c2.stdout)["rootId"] == ann_id
    listed = json.loads(run("comments", "list", ann_id, "--json", env=env).stdout)
    assert [c["id"] for c in listed] == [c1.stdout.strip(), json.loads(c2.stdout)["id"]]
    assert listed[0]["creatorName"] == "cli-bob" and listed[0]["text"]["value"] == "looks right ✅"
    assert server.annotations(doc_id)[listed[0]["id"]]["rootId"] == ann_id  # synced
    table = run("comments", "list", ann_id, env=env)
    assert table.stdout.rstrip().endswith("2 comments") and "cli-bob" in table.stdout
    assert run("comments", "add", ann_id, env=env).returncode == cli.EXIT_USAGE  # neither TEXT nor --data
    assert run("comments", "list", "no-such-root", env=env).returncode == cli.EXIT_NOT_FOUND

    # search
    found = run("annotations", "search", "zeb", "sec", "--json", env=env)
    assert found.returncode == 0, found.stderr
    assert [a["id"] for a in json.loads(found.stdout)] == [ann_id]
    assert run("annotations", "search", "nothingmatchesthis", env=env).stdout.rstrip().endswith("0 matches")

    # history, rollback
    history = json.loads(run("history", ann_id, "--json", env=env).stdout)
    assert [v["content"]["text"]["value"] for v in history] == ["second 🦓 zebra", NOTE["text"]["value"]]
    assert "REVISION" in run("history", ann_id, env=env).stdout
    rolled = run("rollback", ann_id, str(history[1]["revision"]), "--json", env=env)
    assert rolled.returncode == 0, rolled.stderr
    assert json.loads(rolled.stdout)["text"] == NOTE["text"]
    assert server.annotations(doc_id)[ann_id]["text"] == NOTE["text"]
    assert run("history", "never-existed", env=env).returncode == cli.EXIT_NOT_FOUND

    # deleted, restore
    assert run("annotations", "rm", ann_id, env=env).returncode == 0
    deleted = json.loads(run("deleted", "--json", env=env).stdout)
    assert ann_id in [d["id"] for d in deleted]
    assert "deleted annotation" in run("deleted", env=env).stdout
    restored = run("restore", ann_id, env=env)
    assert restored.returncode == 0 and restored.stdout.strip() == ann_id, restored.stderr
    assert ann_id in server.annotations(doc_id)
    conflict = run("restore", ann_id, "--json", env=env)  # live now
    assert conflict.returncode == cli.EXIT_ERROR and json.loads(conflict.stderr)["error"]["name"] == "CONFLICT"

    # attachments: added by this user, fetched (downloaded) by another
    blob = bytes(range(256)) * 40
    src = tmp_path / "picture.png"
    src.write_bytes(blob)
    att = run("attachments", "add", str(src), "--json", env=env)
    assert att.returncode == 0, att.stderr
    meta = json.loads(att.stdout)
    assert meta["content_type"] == "image/png" and meta["size_bytes"] == len(blob)
    att_id = meta["attachment_id"]
    image = {"type": "pspdfkit/image", "pageIndex": 0, "bbox": [1, 1, 64, 64], "imageAttachmentId": att_id,
             "contentType": "image/png"}
    assert run("annotations", "add", json.dumps(image), env=env).returncode == 0
    other = {**env, "LAYERSYNC_STORAGE": str(tmp_path / "other-store")}
    assert run("download", env=other).returncode == 0
    not_loaded = run("attachments", "get", att_id, "--no-download", "--json", env=other)
    assert not_loaded.returncode == cli.EXIT_ERROR
    assert json.loads(not_loaded.stderr)["error"]["name"] == "ATTACHMENT_NOT_LOADED"
    out = tmp_path / "fetched.png"
    got = run("attachments", "get", att_id, "-o", str(out), "--json", env=other)
    assert got.returncode == 0, got.stderr
    assert out.read_bytes() == blob and json.loads(got.stdout)["content_type"] == "image/png"
    raw = subprocess.run([*COMMAND, "attachments", "get", att_id], capture_output=True,
                         env={**os.environ, **other}, timeout=60)
    assert raw.returncode == 0 and raw.stdout == blob  # binary on stdout
    missing = run("attachments", "get", "0" * 64, "--json", env=other)
    assert missing.returncode == cli.EXIT_NOT_FOUND
    assert json.loads(missing.stderr)["error"]["name"] == "NO_SUCH_ATTACHMENT"
    piped = run("attachments", "add", "-", "--content-type", "text/plain", "--no-sync", env=env, stdin="héllo")
    assert piped.returncode == 0 and len(piped.stdout.strip()) == 64


def test_default_group_shows_sets_and_resets(server, uploaded, tmp_path):
    doc_id = uploaded()
    token = tmp_path / "token.jwt"
    token.write_text(server.mint_token(doc_id, user_id="cli", default_group="team") + "\n")
    env = {"LAYERSYNC_SERVER": server.url, "LAYERSYNC_JWT": f"@{token}", "LAYERSYNC_STORAGE": str(tmp_path / "store")}
    shown = run("default-group", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {"default_group": "team"}
    assert run("default-group", "drafts", env=env).returncode == 0
    assert run("default-group", env=env).stdout.strip() == "drafts"  # kept in the local store
    added = run("annotations", "add", json.dumps(NOTE), env=env)
    assert added.returncode == 0, added.stderr
    groups = {r["id"]: r["group"] for r in server.admin_json(f"/api/documents/{doc_id}/annotations")["data"]["annotations"]}
    assert groups[added.stdout.strip()] == "drafts"
    assert run("default-group", "--reset", "--json", env=env).stdout.strip() == '{"default_group": "team"}'
    assert run("default-group", "x", "--reset", env=env).returncode != 0
