"""Storage backends behind one interface (:class:`~layersync_server.storage.base.Storage`).

SQLite (embedded default, one file) and PostgreSQL (several server processes on one
database) share their SQL (:mod:`.sql`) and run the same conformance tests
(``tests/test_storage.py``).
"""

from layersync_server.storage.base import (Attachment, DocumentExists, DocumentInfo,
                                           DocumentNotFound, LayerDeleted, LayerExists,
                                           LayerState, LayerWriter, NewDocument, RecordPage,
                                           Storage, StoredRecord)


def is_postgres_url(url_or_path) -> bool:
    """True for ``postgres://`` / ``postgresql://`` URLs."""
    return str(url_or_path).startswith(("postgres://", "postgresql://"))


def open_storage(url_or_path, history_versions: int = 20) -> Storage:
    """Open the backend for ``url_or_path``: a PostgreSQL URL, else a SQLite file path."""
    if is_postgres_url(url_or_path):
        from layersync_server.storage.postgres import PostgresStorage
        return PostgresStorage(str(url_or_path), history_versions=history_versions)
    from layersync_server.storage.sqlite import SqliteStorage
    return SqliteStorage(url_or_path, history_versions=history_versions)


__all__ = ["Attachment", "DocumentExists", "DocumentInfo", "DocumentNotFound", "LayerDeleted",
           "LayerExists", "LayerState", "LayerWriter", "NewDocument", "RecordPage", "Storage", "StoredRecord",
           "is_postgres_url", "open_storage"]
