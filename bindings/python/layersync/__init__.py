"""LayerSync: Python bindings of liblayersync, the offline-first sync engine for PDF
annotation layers (ctypes; no compiler needed).

Layers, as in pygit2: ``_ffi`` (generated ctypes declarations), ``_library`` (finding
and loading the shared library), ``errors`` (one exception class per error code),
``client`` (the Pythonic :class:`Client` and :class:`Document`), ``cli`` (the
``layersync`` command).

The shared library is loaded on first use (see :mod:`layersync._library` for the lookup
order; set ``LAYERSYNC_LIBRARY`` to a path to choose one).
"""
from __future__ import annotations

from . import _ffi
from ._library import LibraryLoadError, get_library, load_library
from .client import EVENT_NAMES, SYNC_DISABLED, Client, Document, DocumentState, Event
from .errors import *  # noqa: F401,F403  (one class per error code)
from .errors import ERROR_CLASSES, LayerSyncError

__version__: str = _ffi.VERSION
ABI_VERSION: int = _ffi.ABI_VERSION


def library_version() -> str:
    """The loaded library's version string (``layersync_version()``); loads it if needed."""
    return get_library().layersync_version().decode("utf-8")


__all__ = ["Client", "Document", "DocumentState", "Event", "EVENT_NAMES", "SYNC_DISABLED",
           "LayerSyncError", "ERROR_CLASSES", "LibraryLoadError", "load_library", "get_library",
           "library_version", "__version__", "ABI_VERSION"] + [c.__name__ for c in ERROR_CLASSES.values()]
