"""LayerSync: Python bindings of liblayersync, the offline-first sync engine for PDF
annotation layers (ctypes; no compiler needed).

Modules by concept, as in pygit2, each importing only those before it: ``_ffi``
(generated ctypes declarations, and the event and error tables of api/layersync.toml),
``_library`` (finding and loading the shared library), ``errors`` (one exception class per
error code), ``_convert`` (text, JSON, enums and error structs across ctypes),
``_callbacks`` (trampolines; exceptions raised inside callbacks, kept and re-raised),
``_handle`` (the C client's lifetime), ``events`` (:class:`Event`, the dispatcher),
``observer`` (:class:`Observer`), ``document`` (:class:`Document`), ``client``
(:class:`Client`; re-exports the names above it), ``aio`` (the asyncio adapter;
``import layersync.aio``), ``cli`` (the ``layersync`` command).

Quick start::

    with layersync.Client("http://127.0.0.1:8000", "/tmp/store") as client:
        doc = client.document_for_jwt(jwt)
        doc.download(wait=True, timeout=60)
        note = doc.create_annotation({"type": "pspdfkit/note", "pageIndex": 0, "bbox": [8, 8, 24, 24]})
        doc.sync(wait=True, timeout=30)

Errors are :class:`LayerSyncError` subclasses, one per error code; handlers registered
with :meth:`Client.on` run on the library's callback thread.

The shared library is loaded on first use (see :mod:`layersync._library` for the lookup
order; set ``LAYERSYNC_LIBRARY`` to a path to choose one).
"""
from __future__ import annotations

from . import _ffi
from ._library import LibraryLoadError, get_library, load_library
from .client import (EVENT_NAMES, OBSERVER_EVENT_NAMES, SYNC_DISABLED, Attachment, Client, Document,
                     DocumentState, Event, Observer)
from .document import HANDOUT_KEYS, OWNERSHIP_KEYS, PERMISSION_FLAG_KEYS, record_content
from .errors import *  # noqa: F401,F403  (one class per error code)
from .errors import ERROR_CLASSES, LayerSyncError

__version__: str = _ffi.VERSION
ABI_VERSION: int = _ffi.ABI_VERSION


def library_version() -> str:
    """The loaded library's version string (``layersync_version()``); loads it if needed."""
    raw: bytes = get_library().layersync_version()
    return raw.decode("utf-8")


__all__ = ["Client", "Document", "DocumentState", "Event", "EVENT_NAMES", "SYNC_DISABLED",
           "Observer", "OBSERVER_EVENT_NAMES", "Attachment", "HANDOUT_KEYS", "OWNERSHIP_KEYS",
           "PERMISSION_FLAG_KEYS", "record_content",
           "LayerSyncError", "ERROR_CLASSES", "LibraryLoadError", "load_library", "get_library",
           "library_version", "__version__", "ABI_VERSION"] + [c.__name__ for c in ERROR_CLASSES.values()]
