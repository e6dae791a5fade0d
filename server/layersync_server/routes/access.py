"""What the client routes share (routes/sync.py, routes/propagation.py): the JWT grant
check and reading a page of a layer's records."""

from __future__ import annotations

from layersync_server.auth import Grant
from layersync_server.context import (INLINE_MAX_RECORDS, AppContext, check_document_id,
                                      deleted_layer, read_inline_first, run_in_worker)
from layersync_server.errors import access_denied, not_found
from layersync_server.permissions import wire_records
from layersync_server.storage import DocumentNotFound, LayerDeleted, RecordPage


async def grant(authorization: str | None, ctx: AppContext, document_id: str, layer: str | None,
                permission: str, check_revoked: bool = True) -> Grant:
    """Verify the JWT of the ``Authorization`` header value and check it grants
    ``document_id``/``layer``/``permission`` and is not revoked. 401 without a token,
    403 otherwise, 400 on a malformed id.

    ``check_revoked=False`` leaves the revocation check (a storage read) to the caller,
    which then makes it in its own worker-thread hop (:func:`list_page`'s ``revoked_jti``).
    """
    check_document_id(document_id)
    found = ctx.verifier.verify(authorization)
    found.require(document_id, layer, permission)
    if check_revoked and found.jti is not None and await run_in_worker(ctx.storage.is_token_revoked,
                                                                       found.jti):
        raise access_denied("token revoked")
    return found


def page_size(ctx: AppContext, limit: int | None) -> int:
    """Records per page: ``limit``, at most ``max_page_records`` (its default)."""
    return min(limit or ctx.settings.max_page_records, ctx.settings.max_page_records)


def page_json(page: RecordPage, grant: Grant | None = None, as_delta: bool = True) -> dict:
    """``{"epoch", "revision", "records", "has_more", "next_since"}`` of a page, as
    ``grant`` may see it (:func:`~layersync_server.permissions.wire_records`: a record it
    may not view is a bare tombstone in a delta, absent from a snapshot)."""
    return {"epoch": page.layer.epoch, "revision": page.layer.revision,
            "records": wire_records(grant, page.records, as_delta),
            "has_more": page.has_more, "next_since": page.next_since}


async def list_page(ctx: AppContext, document_id: str, layer: str, since: int, limit: int | None,
                    include_tombstones: bool, exclude: frozenset[int] = frozenset(),
                    revoked_jti: str | None = None, inline: bool = False) -> RecordPage:
    """A page of records (in a worker thread). With ``revoked_jti``, first refuses a
    revoked token (403, as :func:`grant` would) in the same hop. ``inline``: first try
    reading at most ``INLINE_MAX_RECORDS`` on the event loop (:func:`read_inline_first`);
    a page that has more than that is read again, whole, in a worker. 404 when the
    document does not exist or the layer was deleted."""
    storage, size_asked = ctx.storage, page_size(ctx, limit)

    def read(size: int = size_asked) -> RecordPage:
        if revoked_jti is not None and storage.is_token_revoked(revoked_jti):
            raise access_denied("token revoked")
        return storage.list_records(document_id, layer, since, size, include_tombstones, exclude)

    def read_small() -> RecordPage | None:
        size = min(size_asked, INLINE_MAX_RECORDS)
        page = read(size)
        return page if size == size_asked or not page.has_more else None

    try:
        if inline:
            return await read_inline_first(storage, read_small, read)
        return await run_in_worker(read)
    except DocumentNotFound:
        raise not_found(f"no document {document_id!r}") from None
    except LayerDeleted:
        raise deleted_layer(document_id, layer) from None
