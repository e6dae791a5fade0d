"""Build step of the layersync wheel: bundle a built liblayersync.so into the package.

Everything declarative is in pyproject.toml; this file only adds the bundling, so that
``pip install ./bindings/python`` gives a package that finds its library with no
environment variables (``layersync/_library.py`` looks next to itself first after an
explicit path / ``$LAYERSYNC_LIBRARY``).

Which library is bundled (the first that exists):

1. ``$LAYERSYNC_LIBRARY``;
2. ``<repo>/.build/release/liblayersync.so``, then ``<repo>/.build/debug/liblayersync.so``
   (``swift build -c release|debug --product layersync`` or ``make build``).

With none, the build fails with a message saying so, unless ``LAYERSYNC_BUNDLE_LIBRARY=0``
asks for a wheel without it (that package then uses the system's library, found through
pkg-config / ldconfig). Editable installs (``pip install -e``) never copy the library into
the source tree. Because the wheel carries a native library it is tagged for this
platform (``has_ext_modules``), not ``py3-none-any``.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LIB_NAME = {"darwin": "liblayersync.dylib", "win32": "layersync.dll"}.get(sys.platform, "liblayersync.so")


def _bundling() -> bool:
    return os.environ.get("LAYERSYNC_BUNDLE_LIBRARY", "1") not in ("0", "false", "no")


def find_library() -> Path | None:
    """The built library to bundle, or None."""
    env = os.environ.get("LAYERSYNC_LIBRARY")
    if env:
        path = Path(env)
        if not path.is_file():
            raise SystemExit(f"layersync build: LAYERSYNC_LIBRARY={env} does not exist")
        return path
    for config in ("release", "debug"):
        path = REPO / ".build" / config / LIB_NAME
        if path.is_file():
            return path
    return None


class BuildPyWithLibrary(build_py):
    """``build_py`` that also copies liblayersync into the built package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False) or not _bundling():
            return
        library = find_library()
        if library is None:
            raise SystemExit(
                "layersync build: no liblayersync to bundle. Build it first (`make build`, or "
                "`swift build -c release --product layersync`), set LAYERSYNC_LIBRARY=/path/to/"
                f"{LIB_NAME}, or set LAYERSYNC_BUNDLE_LIBRARY=0 to rely on a system-wide install.")
        target = Path(self.build_lib) / "layersync" / LIB_NAME
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library, target)
        os.chmod(target, 0o755)
        self.announce(f"bundled {library} as {target}", level=2)


try:  # setuptools >= 70.1 ships bdist_wheel; older ones use the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]


class BdistWheelAnyPython(bdist_wheel):  # type: ignore[misc]
    """Tags the wheel ``py3-none-<platform>``: the library is native, but ctypes loads it
    from any Python 3 (there is no extension module compiled against one CPython ABI)."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


class BinaryDistribution(Distribution):
    """Marks the wheel platform-specific: it carries a native shared library."""

    def has_ext_modules(self) -> bool:
        return _bundling()


setup(cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": BdistWheelAnyPython},
      distclass=BinaryDistribution)
