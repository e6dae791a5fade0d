"""asyncio adapter: LayerSync events delivered to a running event loop.

The library runs every callback of a client on its own background thread. This module
hands each recorded :class:`~layersync.Event` to an asyncio loop with
``loop.call_soon_threadsafe``, so coroutines can ``async for`` over events and ``await``
downloads and sync cycles without blocking the loop::

    import asyncio, layersync, layersync.aio

    async def main(jwt: str) -> None:
        with layersync.Client("http://127.0.0.1:8787", "/tmp/store") as client:
            await layersync.aio.wait_validated(client, timeout=10)
            doc = client.document_for_jwt(jwt)
            await layersync.aio.download(doc, timeout=60)
            doc.create_annotation({"type": "pspdfkit/note", "pageIndex": 0, "bbox": [8, 8, 24, 24]})
            await layersync.aio.sync(doc, timeout=30)
            doc.start_listening()
            async with layersync.aio.events(client, "did_receive_changes") as stream:
                async for event in stream:
                    print(event.args[0])   # {"created": [...], "updated": [...], "deleted": [...]}

Threading: the blocking-free calls (``doc.sync(wait=False)``, ``create_annotation``, ...)
may be made from the loop directly; they return as soon as the local write is durable or
the background work is queued. Exceptions raised by handlers on the callback thread are
re-raised from the next awaited helper, as from the blocking helpers. Cancelling an
awaiting task stops the wait only; the engine's work (a sync cycle, a download) goes on —
call ``doc.cancel_download()`` / ``doc.stop_syncing(True)`` to stop that.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Callable, Iterable

from .client import (DOWNLOAD_OUTCOME, REAUTH_OUTCOME, SYNC_OUTCOME, Client, Document, Event,
                     raise_if_failed, sync_outcome_predicate)

__all__ = ["EventStream", "events", "wait_for", "wait_validated", "download", "sync", "reauthenticate",
           "annotation_history", "rollback_annotation", "list_deleted_annotations", "restore_annotation",
           "download_attachment"]


class EventStream:
    """Events of one client, queued on an asyncio loop; an async iterator and an async
    context manager. Create it with :func:`events`.

    Every event recorded *after* the stream was created (and matching ``names`` /
    ``document``) is delivered in order, exactly once. Events arriving after the loop was
    closed are dropped. The queue is unbounded; close the stream when done.
    """

    def __init__(self, client: Client, names: str | Iterable[str] | None = None,
                 document: Document | None = None, *,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._client = client
        self._names: frozenset[str] | None = (
            None if names is None else frozenset({names} if isinstance(names, str) else names))
        self._document = document
        self._loop = loop or asyncio.get_running_loop()
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        # Subscribing and reading the mark under the dispatcher's (reentrant) lock makes the
        # split exact: events up to `since` are history, every later one is delivered live.
        with client._dispatcher.cond:
            self._remove: Callable[[], None] | None = client.subscribe(self._deliver)
            #: Sequence number of the last event recorded before the stream started.
            self.since: int = client.mark()

    def _deliver(self, event: Event) -> None:  # callback thread
        if self._names is not None and event.name not in self._names:
            return
        if self._document is not None and event.document is not self._document:
            return
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)
        except RuntimeError:  # loop closed: nobody will read it
            pass

    def _put_backlog(self, since: int) -> None:
        """Queues events recorded after ``since`` but before the stream started."""
        for event in self._client.events(since=since, document=self._document):
            if event.seq <= self.since and (self._names is None or event.name in self._names):
                self._queue.put_nowait(event)

    async def get(self, timeout: float | None = None) -> Event:
        """The next event.

        Raises:
            TimeoutError: none within ``timeout`` seconds (None: wait forever).
            BaseException: an exception a handler raised on the callback thread.
        """
        self._client.raise_callback_errors()
        if timeout is None:
            event = await self._queue.get()
        else:
            try:
                event = await asyncio.wait_for(self._queue.get(), timeout)
            except asyncio.TimeoutError:
                raise TimeoutError(f"no LayerSync event within {timeout} s") from None
        self._client.raise_callback_errors()
        return event

    def close(self) -> None:
        """Stops delivering events (idempotent); already queued events can still be read."""
        remove, self._remove = self._remove, None
        if remove is not None:
            remove()

    def __aiter__(self) -> "EventStream":
        return self

    async def __anext__(self) -> Event:
        if self._remove is None and self._queue.empty():
            raise StopAsyncIteration
        return await self.get()

    async def __aenter__(self) -> "EventStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


def events(client: Client, names: str | Iterable[str] | None = None,
           document: Document | None = None) -> EventStream:
    """An :class:`EventStream` of ``client``'s events (optionally only ``names`` and only
    ``document``'s), delivered to the running loop. Must be called from a coroutine."""
    return EventStream(client, names, document)


async def wait_for(client: Client, names: str | Iterable[str], *, since: int | None = None,
                   document: Document | None = None,
                   predicate: Callable[[Event], bool] | None = None,
                   timeout: float | None = 30.0,
                   on_event: Callable[[Event], Any] | None = None,
                   watch: Iterable[str] = ()) -> Event:
    """Awaits an event, like :meth:`Client.wait_for` but without blocking the loop.

    Args:
        names: Event name(s) to wait for.
        since: Only events with a larger sequence number (take it from
            :meth:`Client.mark` before starting the work); None: only future events.
        document, predicate: Further filters.
        timeout: Seconds (None: forever).
        on_event: Called on the loop for every matching event and those named in ``watch``.

    Raises:
        TimeoutError; an exception a handler raised on the callback thread.
    """
    wanted = {names} if isinstance(names, str) else set(names)
    watched = set(watch)
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    stream = EventStream(client, wanted | watched, document, loop=loop)
    try:
        if since is not None:
            stream._put_backlog(since)
        while True:
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                event = await stream.get(remaining)
            except TimeoutError:
                raise TimeoutError(f"no {'/'.join(sorted(wanted))} event within {timeout} s") from None
            if event.name in watched and on_event is not None:
                on_event(event)
            if event.name in wanted and (predicate is None or predicate(event)):
                return event
    finally:
        stream.close()


async def wait_validated(client: Client, timeout: float | None = 30.0) -> dict[str, Any]:
    """Awaits the connection sequence's outcome; see :meth:`Client.wait_validated`.

    Returns:
        The server's ``GET /sync/v1/info`` body as a dict.

    Raises:
        RequestFailedError, OldClientError, OldServerError, InvalidServerDataError; TimeoutError.
    """
    event = await wait_for(client, "server_did_validate", since=0, timeout=timeout)
    info, error = event.args
    if error is not None:
        raise_if_failed(Event(event.seq, "did_fail_validation", None, (error,), event.time), "validation")
    return info if isinstance(info, dict) else {"raw": info}


async def download(doc: Document, *, timeout: float | None = 300.0,
                   progress: Callable[[int, int], Any] | None = None) -> None:
    """Downloads the PDF and the layer's records; see :meth:`Document.download`.

    ``progress(done_bytes, total_bytes)`` runs on the loop.

    Raises:
        AlreadyDownloadedError, InvalidStateError (from the call); the error of
        ``did_fail_download``; TimeoutError.
    """
    client = doc.client
    since = client.mark()
    doc.download(wait=False)

    def on_event(e: Event) -> None:
        if e.name == "download_progress" and progress is not None:
            progress(*e.args)

    event = await wait_for(client, DOWNLOAD_OUTCOME, since=since, document=doc, timeout=timeout,
                           on_event=on_event, watch=("download_progress",))
    raise_if_failed(event, "download")


async def sync(doc: Document, *, timeout: float | None = 60.0) -> None:
    """Runs a two-way sync cycle and awaits its outcome; see :meth:`Document.sync`.

    Raises:
        NotDownloadedError; the cycle's error (RequestFailedError, AccessDeniedError, ...);
        TimeoutError.
    """
    client = doc.client
    since = client.mark()
    doc.sync(wait=False)
    event = await wait_for(client, SYNC_OUTCOME, since=since, document=doc,
                           predicate=sync_outcome_predicate(), timeout=timeout)
    raise_if_failed(event, "sync")


async def reauthenticate(doc: Document, jwt: str, *, timeout: float | None = 30.0) -> None:
    """Replaces the document's JWT and awaits the outcome; see :meth:`Document.reauthenticate`.

    Raises:
        InvalidJWTError, UserIDMismatchError, AlreadyAuthenticatingError, the error of
        ``did_fail_reauthentication``; TimeoutError.
    """
    client = doc.client
    since = client.mark()
    doc.reauthenticate(jwt, wait=False)
    event = await wait_for(client, REAUTH_OUTCOME, since=since, document=doc, timeout=timeout)
    raise_if_failed(event, "reauthentication")


async def _result(future: "concurrent.futures.Future[Any]", timeout: float | None, what: str) -> Any:
    """Awaits a one-shot operation's Future on the running loop. Cancelling the awaiting
    task (or the timeout) stops the wait only; the request goes on."""
    wrapped = asyncio.wrap_future(future)
    try:
        return await asyncio.wait_for(asyncio.shield(wrapped), timeout)
    except asyncio.TimeoutError:
        raise TimeoutError(f"no answer to {what} within {timeout} s (it may still complete)") from None


async def annotation_history(doc: Document, annotation_id: str, *,
                             timeout: float | None = 30.0) -> list[dict[str, Any]]:
    """Awaits the server's kept versions of a record; see :meth:`Document.annotation_history`.

    Returns:
        ``[{"id", "revision": int, "deleted": bool, "content": dict | None}]``, newest first.

    Raises:
        NoSuchAnnotationError, RequestFailedError, AccessDeniedError, TimeoutError.
    """
    return list(await _result(doc._begin_history(annotation_id), timeout, "annotation_history") or [])


async def rollback_annotation(doc: Document, annotation_id: str, revision: int, *,
                              timeout: float | None = 30.0) -> dict[str, Any]:
    """Awaits a rollback to a kept version; see :meth:`Document.rollback_annotation`.

    Raises:
        ConflictError, NoSuchAnnotationError, InvalidRequestError, RequestFailedError, TimeoutError.
    """
    return dict(await _result(doc._begin_rollback(annotation_id, revision), timeout, "rollback_annotation") or {})


async def list_deleted_annotations(doc: Document, *, timeout: float | None = 30.0) -> list[dict[str, Any]]:
    """Awaits the layer's deleted records; see :meth:`Document.list_deleted_annotations`.

    Returns:
        ``[{"id", "revision": int, "last_content": dict | None}]``, oldest deletion first.

    Raises:
        RequestFailedError, AccessDeniedError, TimeoutError.
    """
    return list(await _result(doc._begin_deleted(), timeout, "list_deleted_annotations") or [])


async def restore_annotation(doc: Document, annotation_id: str, *,
                             timeout: float | None = 30.0) -> dict[str, Any]:
    """Awaits the restore of a deleted record; see :meth:`Document.restore_annotation`.

    Raises:
        ConflictError, NoSuchAnnotationError, RequestFailedError, TimeoutError.
    """
    return dict(await _result(doc._begin_restore(annotation_id), timeout, "restore_annotation") or {})


async def download_attachment(doc: Document, attachment_id: str, *,
                              timeout: float | None = 60.0) -> dict[str, Any]:
    """Awaits an attachment's download into the disk cache; see
    :meth:`Document.download_attachment`. Then ``doc.attachment_data(id)`` returns the bytes.

    Returns:
        ``{"attachment_id": str, "size_bytes": int, "content_type": str}``.

    Raises:
        NoSuchAttachmentError, InvalidServerDataError, RequestFailedError, TimeoutError.
    """
    return dict(await _result(doc._begin_download_attachment(attachment_id), timeout, "download_attachment") or {})
