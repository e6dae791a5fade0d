"""schemathesis against the server's own OpenAPI document (bounded examples).

Runs the ``st`` CLI against a dedicated server process: no 5xx, every response
conforms to the documented schema, status code and content type. Once with the admin
token (admin API) and once with a client JWT for a real document (sync API).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ADMIN_TOKEN, start_server, stop_server

MAX_EXAMPLES = os.environ.get("LAYERSYNC_FUZZ_EXAMPLES", "5")
CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"


def _st() -> str:
    found = Path(sys.executable).with_name("st")
    if found.exists():
        return str(found)
    which = shutil.which("st")
    if which is None:
        pytest.skip("schemathesis is not installed (pip install -e 'server[test]')")
    return which


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory, keys):
    tmp = tmp_path_factory.mktemp("fuzz")
    process, srv = start_server(tmp, str(tmp / "fuzz.sqlite"), *keys)
    yield srv
    stop_server(process, srv)


@pytest.mark.parametrize("api", ["admin", "sync"])
def test_schemathesis_finds_no_server_errors(fuzz_server, api, tmp_path):
    if api == "admin":
        header, paths = f'Authorization: Token token="{ADMIN_TOKEN}"', "^/(api|healthz|metrics)"
    else:
        doc = fuzz_server.new_document()
        header, paths = f"Authorization: Bearer {fuzz_server.token(doc)}", "^/sync/"
    result = subprocess.run(
        [_st(), "run", fuzz_server.url + "/openapi.json", "--checks", CHECKS, "-H", header,
         "--include-path-regex", paths, "--max-examples", MAX_EXAMPLES,
         "--phases", "coverage,fuzzing", "--workers", "1", "--request-timeout", "20",
         "--seed", "1", "--warnings", "off"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_HOOKS": ""})
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
