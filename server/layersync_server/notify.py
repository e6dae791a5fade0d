"""Wake-ups for long-polls: one :class:`asyncio.Condition` per layer, in process.

Every route that writes calls :meth:`LayerNotifier.published` after it commits;
long-poll requests wait in :meth:`LayerNotifier.wait_past` without touching the
database or holding a thread, so one process holds thousands of idle long-polls.
With PostgreSQL, the storage's change feed (LISTEN/NOTIFY, ARCHITECTURE.md §10)
also calls ``published`` for commits made by other processes; the waiting side is
the same.

All methods must be called on the event loop thread.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class _LayerSignal:
    condition: asyncio.Condition = field(default_factory=asyncio.Condition)
    revision: int = 0
    waiters: int = 0


class LayerNotifier:
    """Tracks the newest committed revision per ``(document_id, layer)``."""

    def __init__(self) -> None:
        self._signals: dict[tuple[str, str], _LayerSignal] = {}
        self._latest: dict[tuple[str, str], int] = {}

    async def published(self, document_id: str, layer: str, revision: int) -> None:
        """Record that ``revision`` is committed and wake the layer's waiters."""
        key = (document_id, layer)
        self._latest[key] = max(self._latest.get(key, 0), revision)
        signal = self._signals.get(key)
        if signal is None:  # nobody waits
            return
        async with signal.condition:
            signal.revision = max(signal.revision, revision)
            signal.condition.notify_all()

    @property
    def open_waits(self) -> int:
        """Long-polls currently waiting (the ``open long-polls`` metric)."""
        return sum(signal.waiters for signal in self._signals.values())

    async def wake_all(self) -> None:
        """Wake every waiter so it re-reads storage (after a gap in the change feed)."""
        for signal in list(self._signals.values()):
            async with signal.condition:
                signal.revision = max(signal.revision, 1 << 62)
                signal.condition.notify_all()

    async def wait_past(self, document_id: str, layer: str, since: int, known_revision: int,
                        timeout_s: float) -> bool:
        """Wait until a revision above ``since`` is published, up to ``timeout_s`` seconds.

        ``known_revision`` is the layer revision the caller read from storage (so a
        commit that landed between that read and this call is not missed). Returns
        True when woken by a newer revision, False on timeout.
        """
        key = (document_id, layer)
        signal = self._signals.setdefault(key, _LayerSignal())
        signal.revision = max(signal.revision, known_revision, self._latest.get(key, 0))
        signal.waiters += 1
        try:
            async with signal.condition:
                await asyncio.wait_for(signal.condition.wait_for(lambda: signal.revision > since),
                                       timeout_s)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            signal.waiters -= 1
            if signal.waiters == 0:
                self._signals.pop(key, None)
