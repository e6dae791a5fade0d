"""tests/permission-cases.json, which the engine's Swift tests check the client's evaluator
against (Tests/LayerSyncCoreTests/CollaborationPermissionsTests.swift), is what the real
server's rules decide today (server/layersync_server/permissions.py): regenerating it from
them gives the same file, so client and server cannot drift apart unnoticed."""
from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_the_shared_permission_cases_are_the_servers_decisions():
    result = subprocess.run([sys.executable, str(REPO / "tools" / "gen_permission_cases.py"), "--check"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
