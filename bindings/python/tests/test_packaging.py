"""Packaging: the wheel bundles liblayersync and works in a fresh virtualenv with no
environment variables; the package type-checks with ``mypy --strict``."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]


def test_fresh_venv_pip_install_bundles_the_library(lib, tmp_path, server, uploaded):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # Bundle exactly the library under test (LAYERSYNC_LIBRARY is set by conftest).
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                              str(PACKAGE)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    bare = {"PATH": "/usr/bin:/bin"}  # no LAYERSYNC_LIBRARY, no LD_LIBRARY_PATH
    for command in ([str(python), "-m", "layersync", "--version"], [str(env_dir / "bin" / "layersync"), "--version"]):
        proc = subprocess.run(command, capture_output=True, text=True, env=bare, cwd=tmp_path, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "(from bundled)" in proc.stdout and str(env_dir) in proc.stdout, proc.stdout
    wheel_tag = next((env_dir / "lib").glob("python*/site-packages/layersync-*.dist-info/WHEEL")).read_text()
    assert "Tag: py3-none-linux_" in wheel_tag and "Root-Is-Purelib: false" in wheel_tag
    # without the [xfdf] extra, `layersync xfdf` says what to install: one line, exit 1, no traceback
    token = tmp_path / "token.jwt"
    token.write_text(server.mint_token(uploaded(), user_id="venv"))
    cli_env = {**bare, "LAYERSYNC_SERVER": server.url, "LAYERSYNC_JWT": f"@{token}",
               "LAYERSYNC_STORAGE": str(tmp_path / "store")}
    for args in (["xfdf", "export"], ["xfdf", "import", "-"]):
        proc = subprocess.run([str(env_dir / "bin" / "layersync"), *args], capture_output=True, text=True,
                              env=cli_env, cwd=tmp_path, timeout=60, input="<xfdf/>")
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("layersync: ") and "pip install ./formats" in proc.stderr, proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy not installed (scripts/requirements-dev.txt)")
def test_mypy_strict_passes():
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", os.devnull, "layersync"],
                          capture_output=True, text=True, cwd=PACKAGE, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
