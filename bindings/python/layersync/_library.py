"""Finding and loading liblayersync (the ctypes layer under the Pythonic API).

Lookup order (the first that exists wins; an explicit choice never falls back):

1. the ``path`` argument of :func:`load_library`;
2. the environment variable ``LAYERSYNC_LIBRARY`` (a file path);
3. a copy bundled in the package directory (``layersync/liblayersync.so``);
4. in a development checkout (the package imported from ``<repo>/bindings/python``, as
   the editable install of ``make setup`` does), the library ``swift build`` made in
   ``<repo>/.build/release`` or ``<repo>/.build/debug``, the newer first;
5. the system: ``pkg-config --variable=libdir layersync`` (an installed ``layersync.pc``),
   then ``ctypes.util.find_library("layersync")`` (ldconfig's cache) and finally the
   dynamic loader's default search (``LD_LIBRARY_PATH``, ``/etc/ld.so.conf``).

After loading, every function is declared with :func:`layersync._ffi.bind` and the
library's ``layersync_abi_version()`` must equal :data:`layersync._ffi.ABI_VERSION`;
otherwise :class:`LibraryLoadError` (an :class:`ImportError`) is raised.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from . import _ffi

__all__ = ["LibraryLoadError", "load_library", "get_library", "candidate_paths", "ENV_VAR"]

ENV_VAR = "LAYERSYNC_LIBRARY"

_SHARED_NAMES = {"darwin": ("liblayersync.dylib",), "win32": ("layersync.dll",)}


class LibraryLoadError(ImportError):
    """liblayersync could not be found or loaded, or its ABI version differs from the bindings'."""


def _bundled_names() -> tuple[str, ...]:
    return _SHARED_NAMES.get(sys.platform, ("liblayersync.so",))


def _pkg_config_libdir() -> str | None:
    """``libdir`` of an installed ``layersync.pc``, or None (no pkg-config, no .pc)."""
    exe = shutil.which("pkg-config")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "--variable=libdir", "layersync"], capture_output=True,
                              text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    libdir = proc.stdout.strip()
    return libdir if proc.returncode == 0 and libdir else None


def candidate_paths(path: str | os.PathLike[str] | None = None,
                    environ: dict[str, str] | None = None) -> list[tuple[str, str, bool]]:
    """The places :func:`load_library` tries, in order.

    Returns a list of ``(source, name_or_path, explicit)``; ``explicit`` entries must exist,
    the others are tried only if present. Pure function, used by the tests.
    """
    env = os.environ if environ is None else environ
    if path is not None:
        return [("argument", os.fspath(path), True)]
    if env.get(ENV_VAR):
        return [(f"${ENV_VAR}", env[ENV_VAR], True)]
    out: list[tuple[str, str, bool]] = []
    here = Path(__file__).resolve().parent
    for name in _bundled_names():
        out.append(("bundled", str(here / name), False))
    checkout = here.parent.parent.parent
    if (checkout / "Package.swift").is_file() and (checkout / "api" / "layersync.toml").is_file():
        built = [checkout / ".build" / config / name
                 for config in ("release", "debug") for name in _bundled_names()]
        # The most recently built one first: it is the one the developer just made.
        for lib in sorted((p for p in built if p.is_file()), key=lambda p: p.stat().st_mtime, reverse=True):
            out.append((f"checkout {lib.parent.name}", str(lib), False))
    libdir = _pkg_config_libdir()
    if libdir:
        for name in _bundled_names():
            out.append(("pkg-config", os.path.join(libdir, name), False))
    found = ctypes.util.find_library("layersync")
    if found:
        out.append(("find_library", found, False))
    for name in _bundled_names():
        out.append(("system", name, False))
    return out


def _open(source: str, name: str) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(name)
    except OSError as exc:
        raise LibraryLoadError(f"liblayersync from {source} ({name}) could not be loaded: {exc}") from exc


def load_library(path: str | os.PathLike[str] | None = None) -> ctypes.CDLL:
    """Loads liblayersync, declares its functions and checks its ABI version.

    Args:
        path: An explicit path of the shared library; overrides every other source.

    Returns:
        The ``ctypes.CDLL`` with ``restype``/``argtypes`` set for every function.

    Raises:
        LibraryLoadError: nothing loadable found, or the ABI version differs.
    """
    tried: list[str] = []
    lib: ctypes.CDLL | None = None
    where = ""
    for source, name, explicit in candidate_paths(path):
        looks_like_path = os.sep in name
        if looks_like_path and not os.path.exists(name):
            if explicit:
                raise LibraryLoadError(f"liblayersync not found at {name} (from {source})")
            tried.append(name)
            continue
        try:
            lib = _open(source, name)
            where = f"{name} (from {source})"
            break
        except LibraryLoadError as exc:
            if explicit:
                raise
            tried.append(str(exc.__cause__))
    if lib is None:
        raise LibraryLoadError(
            "liblayersync not found: install a wheel that bundles it (pip install layersync), "
            "install the C library system-wide (cmake --install; found through pkg-config or "
            f"ldconfig), or point {ENV_VAR} at liblayersync.so. Tried: " + "; ".join(tried))
    try:
        _ffi.bind(lib)
    except AttributeError as exc:
        raise LibraryLoadError(f"{where} lacks a LayerSync function: {exc}") from exc
    abi = int(lib.layersync_abi_version())
    if abi != _ffi.ABI_VERSION:
        raise LibraryLoadError(
            f"{where} has ABI version {abi}, these bindings need {_ffi.ABI_VERSION}; "
            "regenerate the bindings or use a matching library")
    lib._layersync_path = where  # type: ignore[attr-defined]
    return lib


_lock = threading.Lock()
_default: ctypes.CDLL | None = None


def get_library() -> ctypes.CDLL:
    """The process-wide library, loaded on first use with :func:`load_library` (thread-safe)."""
    global _default
    with _lock:
        if _default is None:
            _default = load_library()
        return _default
