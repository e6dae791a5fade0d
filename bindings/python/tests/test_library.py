"""Loading liblayersync: lookup order, ABI check, version."""
from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

import layersync
from layersync import _ffi, _library


def test_loads_and_abi_matches(lib):
    assert lib.layersync_abi_version() == _ffi.ABI_VERSION
    assert lib.layersync_version().decode() == _ffi.VERSION
    assert layersync.library_version() == _ffi.VERSION


def test_every_declared_function_is_exported(lib):
    for name in _ffi.FUNCTIONS:
        assert getattr(lib, name).argtypes is not None, name


def test_abi_mismatch_is_refused(monkeypatch, lib):
    monkeypatch.setattr(_ffi, "ABI_VERSION", _ffi.ABI_VERSION + 1)
    with pytest.raises(layersync.LibraryLoadError, match="ABI version"):
        _library.load_library(lib._name)


def test_explicit_path_never_falls_back(tmp_path):
    missing = tmp_path / "nope" / "liblayersync.so"
    with pytest.raises(layersync.LibraryLoadError, match="not found"):
        _library.load_library(missing)
    assert isinstance(layersync.LibraryLoadError("x"), ImportError)


def test_not_a_library_is_a_clear_error(tmp_path):
    bogus = tmp_path / "liblayersync.so"
    bogus.write_bytes(b"not an ELF file")
    with pytest.raises(layersync.LibraryLoadError, match="could not be loaded"):
        _library.load_library(bogus)


def test_lookup_order():
    assert _library.candidate_paths("/x/lib.so", {"LAYERSYNC_LIBRARY": "/env.so"}) == [("argument", "/x/lib.so", True)]
    assert _library.candidate_paths(None, {"LAYERSYNC_LIBRARY": "/env.so"}) == [("$LAYERSYNC_LIBRARY", "/env.so", True)]
    rest = _library.candidate_paths(None, {})
    assert rest[0][0] == "bundled" and Path(rest[0][1]).parent == Path(_library.__file__).resolve().parent
    assert [src for src, _, explicit in rest if explicit] == []
    assert rest[-1][0] == "system"


def test_error_code_names_match_library(lib):
    for code, name in _ffi.ERROR_CODE_NAMES.items():
        assert lib.layersync_error_code_name(code).decode() == name
    assert lib.layersync_error_code_name(424242).decode() == "UNRECOGNIZED"


def test_version_cli(capsys):
    from layersync import cli
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert _ffi.VERSION in capsys.readouterr().out


def test_system_lookup_asks_pkg_config(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "pkg-config"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\n[ "$1" = "--variable=libdir" ] && [ "$2" = "layersync" ] && echo /opt/ls/lib\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    sources = [(s, p) for s, p, _ in _library.candidate_paths(None, {}) if not s.startswith("checkout")]
    assert [s for s, _ in sources][:2] == ["bundled", "pkg-config"]
    assert sources[1][1] == "/opt/ls/lib/liblayersync.so"


def test_development_checkout_lookup_finds_the_swift_build():
    """Imported from <repo>/bindings/python (the editable install of `make setup`), the
    package finds the library `swift build` made, after a bundled copy and before the system."""
    repo = Path(_library.__file__).resolve().parents[3]
    built = [repo / ".build" / c / "liblayersync.so" for c in ("release", "debug")]
    built = [p for p in built if p.is_file()]
    assert built, "run `make build` first"
    sources = _library.candidate_paths(None, {})
    checkout = [(s, p) for s, p, _ in sources if s.startswith("checkout")]
    assert {p for _, p in checkout} == {str(p) for p in built}
    newest = max(built, key=lambda p: p.stat().st_mtime)
    assert checkout[0][1] == str(newest)
    order = [s for s, _, _ in sources]
    assert order.index("bundled") < order.index(checkout[0][0]) < order.index("system")


def test_bundled_copy_is_used_without_environment(lib, tmp_path):
    """A package directory holding liblayersync.so loads it with no LAYERSYNC_LIBRARY."""
    import shutil
    import subprocess
    import sys
    pkg = tmp_path / "layersync"
    shutil.copytree(Path(_library.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copyfile(lib._name, pkg / "liblayersync.so")
    proc = subprocess.run([sys.executable, "-c", "import layersync; print(layersync.get_library()._layersync_path)"],
                          capture_output=True, text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{pkg / 'liblayersync.so'} (from bundled)"
