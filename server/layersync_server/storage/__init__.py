"""Storage backends behind one interface (:class:`~layersync_server.storage.base.Storage`).

Only SQLite exists today; a PostgreSQL backend implements the same two abstract
classes and runs the same conformance tests (``tests/test_storage.py``).
"""

from layersync_server.storage.base import (DocumentExists, DocumentInfo, DocumentNotFound,
                                           LayerState, LayerWriter, NewDocument, RecordPage,
                                           Storage, StoredRecord)


def open_storage(url_or_path) -> Storage:
    """Open the backend for ``url_or_path`` (today: a SQLite file path)."""
    from layersync_server.storage.sqlite import SqliteStorage
    return SqliteStorage(url_or_path)


__all__ = ["DocumentExists", "DocumentInfo", "DocumentNotFound", "LayerState", "LayerWriter",
           "NewDocument", "RecordPage", "Storage", "StoredRecord", "open_storage"]
