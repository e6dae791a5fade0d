"""Wake-ups for long-polls: one signal per layer, in process.

Every route that writes calls :meth:`LayerNotifier.published` after it commits;
long-poll requests wait in :meth:`LayerNotifier.wait_for_change` without touching the
database or holding a thread, so one process holds thousands of idle long-polls.
With PostgreSQL, the storage's change feed (LISTEN/NOTIFY, docs/architecture.md §10)
also calls ``published`` for commits made by other processes; the waiting side is
the same. Deleting a layer or document calls :meth:`LayerNotifier.forget` instead
(the feed carries a reset marker for it), because a re-created layer counts its
revisions from 0 again, and wakes the layer's long-polls: they re-read storage and get
404 (a deleted layer is not created again by a read, docs/protocol.md). A long-poll that
read storage before a delete and parks after its ``forget`` ran (a read in a worker
thread, or another process's reset arriving meanwhile) would miss it: it passes the
:attr:`LayerNotifier.resets` it saw before reading, and re-reads at once when a
``forget`` ran since.

Hand-over: a commit made in this process may pass ``published`` the page a waiter
would read next (``list_records(since=<revision before the commit>)``, read right after
the commit on the committing thread; see ``context.commit``). A woken waiter whose ``since`` that page
covers answers from it (:func:`page_after`) instead of reading storage itself: one read
on the committing thread serves every waiter, with no worker-thread round trip each on
the propagation path. The page is a
snapshot of the layer after the commit, exactly what a re-read at that moment
returns. Whenever the handed page can not stand for a re-read (a commit from another
process, an admin change without a page, a wake-up after a gap in the change feed,
a page cut by its limit) the waiter re-reads as before.

Shutdown: :meth:`LayerNotifier.drain` answers every parked long-poll at once, as if
its wait had run out (an empty page at the revision it read: the client simply polls
again, elsewhere or later), and makes later waits return at once; server.py calls it
when SIGTERM/SIGINT arrives, before waiting for open requests.

Streams (protocol version 2): :attr:`LayerNotifier.hub`, when set (create_app sets it),
is told of every publish, forget, wake-up of all and drain as well
(:class:`~layersync_server.stream.StreamHub`), and :meth:`LayerNotifier.has_waiters`
counts its subscriptions, so a commit hands its page to them too.

All methods must be called on the event loop thread, except :meth:`has_waiters`.
"""

from __future__ import annotations

import asyncio

from layersync_server.storage.base import LayerState, RecordPage

#: Handed pages kept per layer while it has waiters (only ones as new as the newest
#: published revision are useful; this bounds memory if commits race).
_MAX_PAGES = 4


class _LayerSignal:
    __slots__ = ("revision", "waiters", "pages")

    def __init__(self) -> None:
        self.revision = 0  # newest revision known to be committed
        self.waiters: dict[asyncio.Future, int] = {}  # future -> the waiter's since
        self.pages: list[tuple[int, RecordPage]] = []  # (since the page was read from, page)


def page_after(page: RecordPage, page_since: int, since: int, limit: int) -> RecordPage | None:
    """What ``list_records(since, limit, include_tombstones=True)`` returns at the
    snapshot of ``page``, which was read as ``list_records(page_since, L,
    include_tombstones=True)``; ``None`` when ``page`` can not tell (``since`` is below
    ``page_since``, or ``page`` was cut by its limit before enough records)."""
    if since < page_since or limit < 1:
        return None
    records = page.records
    if since > page_since:
        records = [r for r in records if r.revision > since]
    if len(records) > limit:
        records = records[:limit]
        return RecordPage(page.layer, records, True, records[-1].revision)
    if page.has_more:  # the page stops before the layer does: more may follow these
        return None
    return RecordPage(page.layer, list(records), False, page.layer.revision)


class LayerNotifier:
    """Tracks the newest committed revision per ``(document_id, layer)``."""

    def __init__(self) -> None:
        self._signals: dict[tuple[str, str], _LayerSignal] = {}
        self._latest: dict[tuple[str, str], int] = {}
        self._draining = False
        #: How many times a layer was forgotten or every waiter woken (see module docs).
        self.resets = 0
        #: The change streams' hub (stream.py), told of everything below; None: no streams.
        self.hub = None

    def latest(self, document_id: str, layer: str) -> int:
        """The newest revision of the layer published since it was last forgotten (0: none)."""
        return self._latest.get((document_id, layer), 0)

    def has_waiters(self, document_id: str, layer: str) -> bool:
        """Whether a long-poll or a stream waits on the layer now (a hint; safe from any
        thread)."""
        hub = self.hub
        return ((document_id, layer) in self._signals
                or (hub is not None and hub.has_subscribers(document_id, layer)))

    async def published(self, document_id: str, layer: str, revision: int,
                        page: RecordPage | None = None, page_since: int | None = None) -> None:
        """Record that ``revision`` is committed and wake the layer's waiters.

        ``page``, when given, is ``list_records(page_since, ..., include_tombstones=True)``
        read after that commit, with ``page_since`` at most the revision the layer had
        before it (see module docs); waiters may answer from it.
        """
        self.publish(document_id, layer, revision, page, page_since)

    def publish(self, document_id: str, layer: str, revision: int,
                page: RecordPage | None = None, page_since: int | None = None) -> None:
        """:meth:`published` without the coroutine."""
        key = (document_id, layer)
        if revision > self._latest.get(key, 0):
            self._latest[key] = revision
        if self.hub is not None:
            self.hub.publish(document_id, layer, revision, page, page_since)
        signal = self._signals.get(key)
        if signal is None:  # nobody waits
            return
        if revision > signal.revision:
            signal.revision = revision
        pages = signal.pages
        if page is not None and page_since is not None:
            pages.append((page_since, page))
        if pages:  # a page older than the newest known commit can not stand for a re-read
            newest = signal.revision
            signal.pages = [p for p in pages if p[1].layer.revision >= newest][-_MAX_PAGES:]
        newest = signal.revision
        for future, since in signal.waiters.items():
            if newest > since and not future.done():
                future.set_result(True)

    def forget(self, document_id: str, layer: str) -> None:
        """The layer was deleted (alone or with its document), by this process or
        another: drop what is known of its revisions, since a layer re-created under
        that name (a new epoch) counts again from 0, and wake its waiters so they
        re-read storage (they then see the new epoch, or 404). Without this, a
        long-poll on the new epoch with ``since`` below the old epoch's revision would
        answer at once, empty, until the new revisions passed the old ones."""
        key = (document_id, layer)
        self.resets += 1
        self._latest.pop(key, None)
        if self.hub is not None:
            self.hub.forget(document_id, layer)
        signal = self._signals.pop(key, None)
        if signal is None:
            return
        signal.pages = []  # pages of the old epoch: never hand them over
        for future in signal.waiters:
            if not future.done():
                future.set_result(True)

    async def forgotten(self, document_id: str, layer: str) -> None:
        """:meth:`forget` as a coroutine (the change feed's ``on_reset``)."""
        self.forget(document_id, layer)

    @property
    def open_waits(self) -> int:
        """Long-polls currently waiting (the ``open long-polls`` metric; read by the
        metrics scrape in a worker thread, hence the atomic copy)."""
        return sum(len(signal.waiters) for signal in list(self._signals.values()))

    def waiting_on(self, document_id: str, layer: str) -> int:
        """Long-polls waiting on one layer now (the dashboard's "connected clients")."""
        signal = self._signals.get((document_id, layer))
        return 0 if signal is None else len(signal.waiters)

    async def wake_all(self) -> None:
        """Wake every waiter so it re-reads storage (after a gap in the change feed)."""
        self.resets += 1
        if self.hub is not None:
            self.hub.recheck_all()
        for signal in list(self._signals.values()):
            signal.revision = max(signal.revision, 1 << 62)
            signal.pages = []
            for future in signal.waiters:
                if not future.done():
                    future.set_result(True)

    def drain(self) -> None:
        """The server is stopping: answer every parked long-poll now as if its wait had
        run out (``wait_for_change`` returns ``(False, None)``, so the route answers the
        page it read before waiting), and from now on return at once instead of waiting.
        Waits already due to wake (a newer revision is known) still wake. Streams end
        with ``bye``. Idempotent."""
        self._draining = True
        if self.hub is not None:
            self.hub.drain()
        for signal in list(self._signals.values()):
            signal.pages = []
            for future in signal.waiters:
                if not future.done():
                    future.set_result(False)

    async def wait_past(self, document_id: str, layer: str, since: int, known_revision: int,
                        timeout_s: float) -> bool:
        """Wait until a revision above ``since`` is published, up to ``timeout_s`` seconds.

        ``known_revision`` is the layer revision the caller read from storage (so a
        commit that landed between that read and this call is not missed). Returns
        True when woken by a newer revision, False on timeout.
        """
        woke, _ = await self.wait_for_change(document_id, layer, since, known_revision, timeout_s)
        return woke

    async def wait_for_change(self, document_id: str, layer: str, since: int,
                              known: LayerState | int, timeout_s: float,
                              limit: int | None = None,
                              resets_seen: int | None = None) -> tuple[bool, RecordPage | None]:
        """:meth:`wait_past`, also returning the page to answer with when a handed page
        covers it: ``(woken, page or None)``. ``known`` is the layer state the caller
        read from storage (or only its revision: then no page is handed over); ``limit``
        the caller's page size. With ``(True, None)`` the caller re-reads storage.
        ``resets_seen``: :attr:`resets` as of before the caller's read; when a layer was
        forgotten since, answers ``(True, None)`` at once (the read may predate a delete).
        """
        if resets_seen is not None and resets_seen != self.resets:
            return True, None
        key = (document_id, layer)
        signal = self._signals.get(key)
        if signal is None:
            signal = self._signals[key] = _LayerSignal()
        known_revision = known if isinstance(known, int) else known.revision
        signal.revision = max(signal.revision, known_revision, self._latest.get(key, 0))
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        signal.waiters[future] = since
        timer = None
        try:
            if signal.revision <= since:
                if self._draining:  # stopping: answer now, as if the wait had run out
                    return False, None
                timer = loop.call_later(timeout_s, _expire, future)
                if not await future:
                    return False, None
            if isinstance(known, int) or limit is None:
                return True, None
            return True, self._handed(signal, since, known, limit)
        finally:
            if timer is not None:
                timer.cancel()
            del signal.waiters[future]
            if not signal.waiters and self._signals.get(key) is signal:
                del self._signals[key]

    @staticmethod
    def _handed(signal: _LayerSignal, since: int, known: LayerState, limit: int) -> RecordPage | None:
        newest = signal.revision
        for page_since, page in reversed(signal.pages):
            state = page.layer
            # same layer incarnation, not older than what the waiter read nor than the
            # newest commit announced, and something new for it
            if (state.epoch == known.epoch and state.revision >= newest
                    and state.revision >= known.revision and state.revision > since):
                found = page_after(page, page_since, since, limit)
                if found is not None:
                    return found
        return None


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(False)
