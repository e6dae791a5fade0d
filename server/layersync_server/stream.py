"""Protocol version 2: one pushed change stream per client (docs/protocol.md, "Protocol
version 2: the change stream"). The server's transport module for it: the fan-out hub
(:class:`StreamHub`) and the three HTTP endpoints (:func:`stream_routes`).

A client opens one Server-Sent Events response (``POST /sync/v2/stream``) and adds or
removes layers with short requests (``POST``/``DELETE .../subscriptions``), each
authorised by that layer's JWT. What a subscription receives is exactly what the v1
long-poll answers: every page is read with :func:`~layersync_server.routes.access.list_page`
(or handed over by the commit, :func:`~layersync_server.notify.page_after`) and written
with :func:`~layersync_server.routes.access.page_json` for the subscription's grant
(collaboration permissions: a record it may not view is left out of a page from cursor 0,
a bare tombstone past it, :func:`~layersync_server.permissions.sent_as_delta`). The sync
rules are not repeated here.

Fan-out (all of it on the event loop thread, never awaiting one client for another):

* :class:`~layersync_server.notify.LayerNotifier` calls :meth:`StreamHub.publish` for every
  commit it learns of (this process, or another one through the PostgreSQL change feed),
  :meth:`StreamHub.forget` for a deleted layer, :meth:`StreamHub.recheck_all` after a gap
  in the feed and :meth:`StreamHub.drain` when the server stops.
* A caught-up subscription takes its page from the page the commit handed over (one
  encoding shared by every subscription with the same cursor and the same view); when
  there is none (another process's commit) it *catches up*: reads storage from its
  cursor until it has the newest revision. Reads of one ``(layer, since)`` in flight at
  the same time are made once (all the subscribers of a layer woken by one commit).
* Each subscription has at most :attr:`StreamHub.max_pending` pages queued on its
  stream; one more replaces them with one ``notice`` (the client fetches with v1 and
  goes on), so a client that does not read costs a bounded amount of memory.
* Each stream is written by its own request task (the ASGI response), which alone
  waits for its socket.
* A dead client is seen within about ``stall_s`` (``stream_stall_s``, default twice
  ``heartbeat_s``: 30 s), whether the path to it is cut or it stopped reading: the
  sweeper closes a stream whose written bytes are retransmitted unacknowledged (a
  heartbeat is in flight at most ``heartbeat_s`` after a cut), or of which the transport
  holds bytes while the peer acknowledges nothing for ``stall_s`` (its buffers are full);
  TCP keepalive (:func:`watch_peer`) covers a connection with nothing in flight. A
  client that reads nothing while its socket still takes bytes (6-byte heartbeats on a
  quiet layer fit its buffers for days, and its kernel acknowledges them) looks alive to
  the server; the client sees that end (a stream silent for twice the heartbeat is dead
  to it), and the stream it opens then names the dead one with its key (``"replaces"``,
  ``"key"``), which the server closes at once (:meth:`StreamHub.replace`).
* One sweeper task for the whole hub sends heartbeats (a ``: hb`` comment to a stream
  silent for ``heartbeat_s``), closes stalled streams and, every
  :data:`REVOCATION_CHECK_S`, ends subscriptions whose token was revoked by another
  process (a revocation in this process ends them at once).

Authority over a stream is its key (``stream_key`` in ``hello``, 256 random bits): a
subscribe or unsubscribe names it in the ``LayerSync-Stream-Key`` header, a ``replaces`` in
the open body; a wrong or missing key is answered as an unknown stream (404). Who opened
the stream does not matter: each subscription is authorised by its own layer's JWT, of any
user, so a client holds one stream for all its layers (:meth:`StreamHub.keyed`).

All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import socket as _socket
import struct
import sys
import time
from collections import deque

from starlette.requests import Request
from starlette.routing import Match, Route

from layersync_server.auth import Grant
from layersync_server.context import AppContext, check_document_id, read_json_object, run_in_worker
from layersync_server.errors import ApiError, access_denied, invalid_request, not_found
from layersync_server.errors_http import api_error_response
from layersync_server.ids import is_valid_layer_name
from layersync_server.json_http import WireJSONResponse
from layersync_server.notify import page_after
from layersync_server.permissions import sent_as_delta
from layersync_server.routes.access import grant as grant_of, list_page, page_json
from layersync_server.storage.base import RecordPage
from layersync_server.wire_json import MAX_REVISION, encode_response

log = logging.getLogger(__name__)

STREAM_PATH = "/sync/v2/stream"
#: The request header that carries a stream's key (a header, not the URL: access logs and
#: proxies record paths and query strings).
STREAM_KEY_HEADER = "layersync-stream-key"
#: TCP keepalive probes sent to a silent peer before the kernel ends the connection.
KEEPALIVE_PROBES = 3
#: How often the sweeper runs (heartbeats, stalled streams), seconds.
SWEEP_S = 1.0
#: How often subscriptions' tokens are checked against revocations made by other
#: processes (PostgreSQL), seconds.
REVOCATION_CHECK_S = 5.0
#: Largest ``changes`` event; a bigger page goes as a ``notice`` (fetch with v1).
MAX_EVENT_BYTES = 4 * 1024 * 1024

_HEARTBEAT = b": hb\n\n"


def event(name: str, data: dict) -> bytes:
    """One Server-Sent Event: ``event: NAME`` and one line of JSON."""
    return b"event: " + name.encode() + b"\ndata: " + encode_response(data) + b"\n\n"


def watch_peer(sock, heartbeat_s: float, stall_s: float) -> None:
    """TCP keepalive on a stream's socket: probes once it has been idle ``heartbeat_s``,
    :data:`KEEPALIVE_PROBES` of them in what is left of ``stall_s``, then the kernel ends
    the connection. (It covers a connection with nothing in flight; a heartbeat written
    into a cut path is in flight, which suspends keepalive: the sweeper's
    :func:`tcp_state` check sees that one.) ``TCP_USER_TIMEOUT`` is not set: with a
    receive window smaller than a segment (a client reading slowly) Linux counts the
    window probes as unanswered and ended such streams after it, though data moved.
    Options the platform lacks are skipped; a socket that refuses them (closed
    already) is left as it is."""
    left_s = max(1.0, stall_s - heartbeat_s)
    options = [(_socket.SOL_SOCKET, _socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", max(1, round(heartbeat_s))),
                        ("TCP_KEEPINTVL", max(1, round(left_s / KEEPALIVE_PROBES))),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES)):
        if hasattr(_socket, name):
            options.append((_socket.IPPROTO_TCP, getattr(_socket, name), value))
    with contextlib.suppress(OSError):
        for level, option, value in options:
            sock.setsockopt(level, option, value)


class TcpState:
    """What the sweeper reads of a stream's connection (Linux ``struct tcp_info``)."""

    __slots__ = ("retransmits", "last_ack_recv_ms", "bytes_acked")

    def __init__(self, info: bytes):
        #: retransmissions of the oldest unacknowledged segment (0: nothing overdue)
        self.retransmits = info[2]
        #: milliseconds since the peer last acknowledged anything
        self.last_ack_recv_ms = int.from_bytes(info[56:60], sys.byteorder)
        #: bytes the peer has acknowledged, in all (Linux 4.1+)
        self.bytes_acked = int.from_bytes(info[120:128], sys.byteorder)

    def unreachable(self, silent_s: float) -> bool:
        """Written bytes are being retransmitted and the peer acknowledged nothing for
        ``silent_s``: the path to it is cut (a slow reader's window probes are
        acknowledged)."""
        return self.retransmits > 0 and self.last_ack_recv_ms > silent_s * 1000


_TCP_INFO_BYTES = 128


def tcp_state(sock) -> TcpState | None:
    """The connection's :class:`TcpState`, ``None`` where the platform does not say."""
    try:
        info = sock.getsockopt(_socket.IPPROTO_TCP, _socket.TCP_INFO, _TCP_INFO_BYTES)
    except (OSError, AttributeError):
        return None
    return TcpState(info) if len(info) >= _TCP_INFO_BYTES else None


def _chunk_bytes(body: bytes) -> int:
    """Bytes HTTP/1.1 chunked encoding puts on the wire for ``body``."""
    return len(body) + len(b"%x" % len(body)) + 4 if body else 0


def wire_seconds(value: float) -> int | float:
    """A number of seconds as JSON writes it best: ``15``, not ``15.0``."""
    return int(value) if float(value).is_integer() else value


class _Notice:
    """A ``notice`` queued for a subscription; its revision grows until it is written."""

    __slots__ = ("revision",)

    def __init__(self, revision: int):
        self.revision = revision


class Subscription:
    """One layer on one stream."""

    __slots__ = ("stream", "document_id", "layer", "wire_layer", "grant", "view", "epoch",
                 "cursor", "known", "recheck", "task", "timer", "closed", "generation",
                 "pending", "notice")

    def __init__(self, stream: "Stream", document_id: str, layer: str, wire_layer: str,
                 grant: Grant, epoch: str, cursor: int, known: int):
        self.stream = stream
        self.document_id, self.layer, self.wire_layer = document_id, layer, wire_layer
        self.grant = grant
        # what decides the records' wire shapes: subscriptions with the same view and
        # cursor share one encoded event
        perms = grant.collaboration
        self.view = None if perms is None else (perms.entries, grant.user_id)
        self.epoch = epoch
        self.cursor = cursor  # the ``since`` of the next page to send
        self.known = known  # newest revision known to be committed
        self.recheck = False  # re-read storage even if ``known`` is reached (delete, gap)
        self.task: asyncio.Task | None = None  # catching up
        self.timer: asyncio.TimerHandle | None = None  # the token's expiry
        self.closed = False
        self.generation = 0  # queued pages of older generations were dropped (overflow)
        self.pending = 0  # pages of this generation queued on the stream
        self.notice: _Notice | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.document_id, self.layer


class Stream:
    """One open ``text/event-stream`` response."""

    __slots__ = ("id", "key", "subs", "queue", "waiter", "closing", "last_write",
                 "send_started", "task", "aborted", "progress", "transport", "sock",
                 "written", "drained", "stalled_since", "next_reach_check")

    def __init__(self, stream_id: str, key: str, now: float):
        self.id = stream_id
        #: The secret handed out in ``hello``: only a request that presents it changes the
        #: stream (its subscriptions, or closes it by ``replaces``); the id alone does nothing.
        self.key = key
        self.subs: dict[tuple[str, str], Subscription] = {}
        #: ``(subscription or None, its generation, bytes or _Notice)``
        self.queue: deque = deque()
        self.waiter: asyncio.Future | None = None  # the writer waits for the queue
        self.closing = False  # write what is queued, then end the response
        self.last_write = now
        self.send_started: float | None = None  # a write waits for the socket since then
        self.task: asyncio.Task | None = None
        self.aborted = False
        self.progress: asyncio.Event | None = None  # set after each write (catch-up waits)
        #: The connection's asyncio transport and socket when the server knows them
        #: (server.py), for the stall check: bytes handed to the transport, bytes of the
        #: connection out of the server when last seen moving (acknowledged by the peer;
        #: without TCP_INFO: out of the transport's buffer), and since when the transport
        #: buffers bytes while that does not move.
        self.transport: asyncio.Transport | None = None
        self.sock = None
        self.written = 0
        self.drained = 0
        self.stalled_since: float | None = None
        self.next_reach_check = now  # when the sweeper next asks whether the peer answers

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def push(self, sub: Subscription | None, payload) -> None:
        self.queue.append((sub, 0 if sub is None else sub.generation, payload))
        self.wake()


class StreamHub:
    """Streams and subscriptions of one app (module docs)."""

    def __init__(self, ctx: AppContext, heartbeat_s: float = 15.0, max_pending: int = 64,
                 max_subscriptions: int = 1000, stall_s: float | None = None):
        self.ctx = ctx
        self.heartbeat_s = heartbeat_s
        self.stall_s = 2 * heartbeat_s if stall_s is None else stall_s
        #: The server's open connections by ``id(scope["client"])`` (the protocol's own
        #: address tuple, never one rewritten from X-Forwarded-For), kept by server.py's
        #: HTTP protocol; empty when another ASGI server runs the app (then a stall is seen
        #: only by a write that waits, no socket option is set).
        self.transports: dict[int, asyncio.Transport] = {}
        self.max_pending = max_pending
        self.max_subscriptions = max_subscriptions
        self.streams: dict[str, Stream] = {}
        self._layers: dict[tuple[str, str], set[Subscription]] = {}
        self._jtis: dict[str, set[Subscription]] = {}
        self._reads: dict[tuple[str, str, int], asyncio.Future] = {}
        self._sweeper: asyncio.Task | None = None
        self.draining = False
        #: Counters for the metrics (observability.py): events written, notices queued.
        self.events_sent = 0
        self.notices_sent = 0

    # -- what the metrics read (safe from a worker thread: atomic sizes) ---------------

    @property
    def open_streams(self) -> int:
        return len(self.streams)

    @property
    def subscription_count(self) -> int:
        return sum(len(subs) for subs in list(self._layers.values()))

    def has_subscribers(self, document_id: str, layer: str) -> bool:
        """Whether a stream listens on the layer (a hint, safe from any thread)."""
        return (document_id, layer) in self._layers

    # -- the notifier's side -------------------------------------------------------------

    def publish(self, document_id: str, layer: str, revision: int,
                page: RecordPage | None = None, page_since: int | None = None) -> None:
        """``revision`` of the layer is committed; ``page`` (when given) is
        ``list_records(page_since, ...)`` read after that commit (notify.py)."""
        subs = self._layers.get((document_id, layer))
        if not subs:
            return
        encoded: dict = {}  # (cursor, view, layer as written) -> (page, event): one encoding each
        for sub in list(subs):
            if revision > sub.known:
                sub.known = revision
            if sub.task is not None or revision <= sub.cursor:
                continue  # catching up (it reads until it has ``known``), or nothing new
            if sub.notice is not None:  # the client fetches with v1 up to the notice
                sub.notice.revision = sub.cursor = max(sub.known, sub.notice.revision)
                continue
            key = (sub.cursor, sub.view, sub.wire_layer)
            found = encoded.get(key)
            if found is None and page is not None and page_since is not None \
                    and page.layer.epoch == sub.epoch:
                handed = page_after(page, page_since, sub.cursor,
                                    self.ctx.settings.max_page_records)
                if handed is not None:
                    found = encoded[key] = (handed, self._changes_event(sub, handed))
            if found is not None:
                self._deliver(sub, *found)
                if not found[0].has_more and sub.cursor >= sub.known:
                    continue
            self._catch_up(sub)

    def forget(self, document_id: str, layer: str) -> None:
        """The layer was deleted (or re-created): every subscription re-reads it and ends
        with ``not_found`` or ``reset``."""
        for key in [k for k in self._reads if k[:2] == (document_id, layer)]:
            del self._reads[key]  # reads of before the delete must not be shared after it
        for sub in list(self._layers.get((document_id, layer), ())):
            sub.recheck = True
            self._catch_up(sub)

    def recheck_all(self) -> None:
        """Notifications may have been missed (the change feed reconnected): every
        subscription re-reads its layer."""
        self._reads.clear()
        for subs in list(self._layers.values()):
            for sub in list(subs):
                sub.recheck = True
                self._catch_up(sub)

    def revoked(self, jti: str) -> None:
        """Tokens with ``jti`` were revoked: end their subscriptions (``token_revoked``)."""
        for sub in list(self._jtis.get(jti, ())):
            self.end(sub, "token_revoked")

    def drain(self) -> None:
        """The server stops: every stream gets ``bye`` and ends; new ones end at once."""
        self.draining = True
        for stream in list(self.streams.values()):
            self._close_stream(stream, bye=True)
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    # -- subscriptions -------------------------------------------------------------------

    def subscribe(self, stream: Stream, document_id: str, layer: str, wire_layer: str,
                  grant: Grant, page: RecordPage, since: int, exp: float | None) -> Subscription:
        """Add (or replace) the subscription of ``stream`` to the layer whose page after
        ``since`` is ``page`` (read after the grant was checked), and queue that page."""
        old = stream.subs.get((document_id, layer))
        if old is not None:
            self._close(old)
        elif len(stream.subs) >= self.max_subscriptions:
            raise ApiError(429, "too_many_subscriptions",
                           f"a stream holds at most {self.max_subscriptions} subscriptions",
                           {"max_subscriptions": self.max_subscriptions})
        sub = Subscription(stream, document_id, layer, wire_layer, grant, page.layer.epoch,
                           since, page.layer.revision)
        stream.subs[sub.key] = sub
        self._layers.setdefault(sub.key, set()).add(sub)
        if grant.jti is not None:
            self._jtis.setdefault(grant.jti, set()).add(sub)
        if exp is not None:
            loop = asyncio.get_running_loop()
            sub.timer = loop.call_later(max(0.0, exp - time.time()), self.end, sub,
                                        "token_expired")
        # A commit published while ``page`` was read (in a worker) found no subscription to
        # tell: the notifier's newest revision of the layer covers it, so catch up to that.
        sub.known = max(sub.known, self.ctx.notifier.latest(document_id, layer))
        if page.records or page.layer.revision > since:
            self._deliver(sub, page, self._changes_event(sub, page))
        if page.has_more or sub.known > sub.cursor:
            self._catch_up(sub)
        return sub

    def unsubscribe(self, stream: Stream, document_id: str, layer: str) -> bool:
        sub = stream.subs.get((document_id, layer))
        if sub is None:
            return False
        self._close(sub)
        return True

    def reset(self, stream: Stream, document_id: str, wire_layer: str, epoch: str) -> None:
        """Queue ``reset``: the layer's epoch is not the one the client synced against."""
        stream.push(None, event("reset", {"document_id": document_id, "layer": wire_layer,
                                          "epoch": epoch}))

    def end(self, sub: Subscription, reason: str) -> None:
        """End one subscription with ``unsubscribed`` (``reason``)."""
        if sub.closed:
            return
        self._close(sub)
        sub.stream.push(None, event("unsubscribed", {"document_id": sub.document_id,
                                                     "layer": sub.wire_layer, "reason": reason}))

    def _close(self, sub: Subscription) -> None:
        sub.closed = True
        sub.generation += 1  # its queued pages are not written any more
        stream = sub.stream
        if stream.subs.get(sub.key) is sub:
            del stream.subs[sub.key]
        subs = self._layers.get(sub.key)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._layers[sub.key]
        jti = sub.grant.jti
        if jti is not None and jti in self._jtis:
            self._jtis[jti].discard(sub)
            if not self._jtis[jti]:
                del self._jtis[jti]
        if sub.timer is not None:
            sub.timer.cancel()
        if sub.task is not None and sub.task is not asyncio.current_task():
            sub.task.cancel()
        sub.task = None

    # -- pages ---------------------------------------------------------------------------

    def _changes_event(self, sub: Subscription, page: RecordPage) -> bytes:
        body = {"document_id": sub.document_id, "layer": sub.wire_layer, "since": sub.cursor,
                **page_json(page, sub.grant, sent_as_delta(sub.cursor))}
        return event("changes", body)

    def _deliver(self, sub: Subscription, page: RecordPage, data: bytes) -> None:
        """Queue a page for ``sub`` (whose cursor is the page's ``since``), or a notice
        when it is too large or the subscription's queue is full."""
        if sub.notice is not None:
            sub.notice.revision = sub.cursor = max(sub.notice.revision, page.next_since)
            return
        if len(data) > MAX_EVENT_BYTES or sub.pending >= self.max_pending:
            sub.generation += 1  # drop what is queued: the client fetches it with v1
            sub.pending = 0
            sub.notice = _Notice(max(sub.known, page.next_since))
            sub.cursor = sub.notice.revision
            sub.stream.push(sub, sub.notice)
            self.notices_sent += 1
            return
        sub.pending += 1
        sub.cursor = page.next_since
        sub.stream.push(sub, data)

    def _catch_up(self, sub: Subscription) -> None:
        if sub.task is None and not sub.closed:
            sub.task = asyncio.get_running_loop().create_task(self._run_catch_up(sub))

    async def _run_catch_up(self, sub: Subscription) -> None:
        """Read pages from the subscription's cursor until it has every revision known."""
        stream = sub.stream
        try:
            while not sub.closed:
                while sub.pending >= self.max_pending // 2 and sub.notice is None:
                    if stream.progress is None:  # wait for the writer (a slow reader)
                        stream.progress = asyncio.Event()
                    await stream.progress.wait()
                    if sub.closed:
                        return
                if sub.notice is not None:  # the client fetches with v1 anyway
                    sub.notice.revision = sub.cursor = max(sub.known, sub.notice.revision)
                    sub.recheck = False
                    if sub.cursor >= sub.known:
                        return
                sub.recheck = False
                try:
                    page = await self._read(sub.document_id, sub.layer, sub.cursor)
                except ApiError as exc:
                    if exc.status == 404:
                        self.end(sub, "not_found")
                        return
                    raise
                if sub.closed:
                    return
                if page.layer.epoch != sub.epoch:
                    self._close(sub)
                    self.reset(stream, sub.document_id, sub.wire_layer, page.layer.epoch)
                    return
                if page.layer.revision > sub.known:
                    sub.known = page.layer.revision
                if page.records or page.layer.revision > sub.cursor:
                    self._deliver(sub, page, self._changes_event(sub, page))
                if not page.has_more and sub.cursor >= sub.known and not sub.recheck:
                    return
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 — storage trouble: the client fetches with v1
            log.warning("stream catch-up of %s/%s failed; sending a notice", sub.document_id,
                        sub.layer, exc_info=True)
            if not sub.closed and sub.notice is None:
                sub.generation += 1
                sub.pending = 0
                sub.notice = _Notice(max(sub.known, sub.cursor))
                sub.cursor = sub.notice.revision
                stream.push(sub, sub.notice)
        finally:
            if sub.task is asyncio.current_task():
                sub.task = None

    async def _read(self, document_id: str, layer: str, since: int) -> RecordPage:
        """The v1 changes page after ``since`` (:func:`list_page`), one read for every
        caller asking for the same page at the same time."""
        key = (document_id, layer, since)
        future = self._reads.get(key)
        if future is None:
            future = asyncio.ensure_future(list_page(self.ctx, document_id, layer, since, None,
                                                     include_tombstones=True, inline=True))
            self._reads[key] = future

            def done(f, key=key):
                if self._reads.get(key) is f:
                    del self._reads[key]
                if not f.cancelled():
                    f.exception()  # (retrieved: no "never retrieved" warning)

            future.add_done_callback(done)
        return await asyncio.shield(future)

    # -- streams -------------------------------------------------------------------------

    def open(self, client: tuple | None = None) -> Stream:
        """A new stream with a new id and key; ``client`` is the request's ``scope["client"]`` (its connection's
        transport, when :attr:`transports` has it, gets :func:`watch_peer`; a client
        address forwarded by a proxy has none)."""
        loop = asyncio.get_running_loop()
        # 192 bits of id, 256 of key (base64url)
        stream = Stream(secrets.token_urlsafe(24), secrets.token_urlsafe(32), loop.time())
        transport = self.transports.get(id(client)) if client is not None else None
        if transport is not None:
            stream.transport = transport
            stream.sock = sock = transport.get_extra_info("socket")
            if sock is not None:
                watch_peer(sock, self.heartbeat_s, self.stall_s)
        self.streams[stream.id] = stream
        if self._sweeper is None and not self.draining:
            self._sweeper = loop.create_task(self._sweep())
        return stream

    def _close_stream(self, stream: Stream, bye: bool = False) -> None:
        for sub in list(stream.subs.values()):
            self._close(sub)
        if self.streams.get(stream.id) is stream:
            del self.streams[stream.id]
        if bye and not stream.closing:
            stream.push(None, event("bye", {"reason": "shutdown"}))
        stream.closing = True
        stream.wake()

    async def serve(self, stream: Stream, receive, send) -> None:
        """Write the stream until it closes (the client went away, the server stops, or
        its socket stalled). Runs in the request's own task."""
        stream.task = asyncio.current_task()
        watcher = asyncio.ensure_future(self._watch_disconnect(stream, receive))
        loop = asyncio.get_running_loop()
        if stream.transport is not None:  # (the response's head, if still buffered)
            stream.written = stream.drained = stream.transport.get_write_buffer_size()
        try:
            stream.push(None, event("hello", {"stream_id": stream.id, "stream_key": stream.key,
                                              "heartbeat_s": wire_seconds(self.heartbeat_s),
                                              "protocol_version": 2}))
            if self.draining:
                self._close_stream(stream, bye=True)
            queue = stream.queue
            while True:
                if not queue:
                    if stream.closing:
                        break
                    stream.waiter = loop.create_future()
                    await stream.waiter
                    stream.waiter = None
                    continue
                chunks = []
                while queue:
                    sub, generation, payload = queue.popleft()
                    if sub is not None:
                        if generation != sub.generation:
                            continue  # dropped (overflow) or unsubscribed
                        if type(payload) is _Notice:
                            sub.notice = None
                            payload = event("notice", {"document_id": sub.document_id,
                                                       "layer": sub.wire_layer,
                                                       "revision": payload.revision})
                        else:
                            sub.pending -= 1
                    chunks.append(payload)
                if not chunks:
                    continue
                self.events_sent += len(chunks)
                stream.send_started = loop.time()
                body = b"".join(chunks)
                stream.written += _chunk_bytes(body)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                stream.send_started = None
                stream.last_write = loop.time()
                progress = stream.progress
                if progress is not None:
                    stream.progress = None
                    progress.set()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not stream.aborted:
                raise
            # stalled: returning without ending the response makes uvicorn close it
        finally:
            watcher.cancel()
            self._close_stream(stream)
            if stream.progress is not None:
                stream.progress.set()

    def _stalled(self, stream: Stream, now: float) -> bool:
        """Whether the stream's client is gone (module docs). Either the path to it is
        cut: what was written is retransmitted with no acknowledgement for ``stall_s -
        heartbeat_s`` (asked once per ``heartbeat_s``; a heartbeat is in flight at most
        ``heartbeat_s`` after the cut). Or it reads nothing: the transport buffers bytes
        (the socket's buffers are full) and the peer acknowledged none of the
        connection's bytes for ``stall_s`` (the kernel's buffers drain in big steps, so a
        client reading slowly is told apart by what it acknowledges; without TCP_INFO:
        nothing left the transport's buffer; for an unknown transport: a write waited
        that long)."""
        transport = stream.transport
        if transport is None:
            started = stream.send_started
            return started is not None and now - started > self.stall_s
        buffered = transport.get_write_buffer_size()
        state = None
        if stream.sock is not None and (buffered or now >= stream.next_reach_check):
            stream.next_reach_check = now + self.heartbeat_s
            state = tcp_state(stream.sock)
            if state is not None and state.unreachable(self.stall_s - self.heartbeat_s):
                return True
        if not buffered:
            stream.stalled_since = None
            return False
        drained = state.bytes_acked if state is not None else stream.written - buffered
        if stream.stalled_since is None or drained > stream.drained:
            stream.stalled_since, stream.drained = now, drained
            return False
        return now - stream.stalled_since > self.stall_s

    def keyed(self, stream_id: str, key: str | None) -> Stream | None:
        """The open stream ``stream_id`` if ``key`` is its key, else ``None`` (unknown,
        closed, no key or a wrong one: the same answer). Compared in constant time."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.closing or key is None:
            return None
        # (surrogatepass: a key from a JSON body may hold lone surrogates, which no key has;
        # an encoding error would answer differently for an open id)
        if not hmac.compare_digest(stream.key.encode(), key.encode("utf-8", "surrogatepass")):
            return None
        return stream

    def replace(self, stream_id: str, key: str | None) -> None:
        """A new stream names ``stream_id`` with ``key`` as the one it replaces (its client
        found it dead: silence, an error): that stream is closed at once, its connection
        reset. Its path may still take bytes while delivering none (a stalled middlebox that
        acknowledges), which the stall checks cannot see. An unknown id or a wrong key
        leaves everything as it is, silently."""
        stream = self.keyed(stream_id, key)
        if stream is not None:
            self._abort(stream, "its client opened a stream that replaces it")

    def _abort(self, stream: Stream, why: str | None = None) -> None:
        log.info("closing a change stream: %s", why or
                 f"its client is gone (nothing taken for {self.stall_s:.0f} s)")
        if stream.transport is not None:
            # a close would wait for the buffers to drain: reset the connection (linger 0:
            # the kernel drops what it holds for the peer), abort the transport; the
            # request task sees the disconnect and ends
            if stream.sock is not None:
                with contextlib.suppress(OSError):
                    stream.sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
            stream.transport.abort()
        elif stream.task is not None:
            stream.aborted = True
            stream.task.cancel()
        self._close_stream(stream)

    async def _watch_disconnect(self, stream: Stream, receive) -> None:
        with contextlib.suppress(Exception):
            while (await receive())["type"] != "http.disconnect":
                pass
        self._close_stream(stream)

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        next_revocation_check = loop.time() + REVOCATION_CHECK_S
        while True:
            await asyncio.sleep(SWEEP_S)
            now = loop.time()
            quiet = now - self.heartbeat_s + SWEEP_S
            for stream in list(self.streams.values()):
                if self._stalled(stream, now):
                    self._abort(stream)
                elif (stream.send_started is None and stream.last_write <= quiet
                      and not stream.queue):
                    stream.push(None, _HEARTBEAT)
            if now >= next_revocation_check and self._jtis:
                next_revocation_check = now + REVOCATION_CHECK_S
                with contextlib.suppress(Exception):
                    for jti in await run_in_worker(self.ctx.storage.revoked_jtis,
                                                   list(self._jtis)):
                        self.revoked(jti)


# -- the endpoints ---------------------------------------------------------------------

def _hub(ctx: AppContext) -> StreamHub:
    return ctx.notifier.hub


def _stream_of(hub: StreamHub, scope, request: Request) -> Stream:
    """The open stream of the request's path whose key the request presents
    (``LayerSync-Stream-Key``); a missing or wrong key answers as an unknown stream (404),
    so an id that leaked tells nothing and changes nothing."""
    stream = hub.keyed(scope["path_params"]["stream_id"], request.headers.get(STREAM_KEY_HEADER))
    if stream is None:
        raise not_found("no open stream with this id")
    return stream


def _layer_name(value) -> str:
    if not isinstance(value, str):
        raise invalid_request("layer must be a string (\"\" or \"~\" is the default layer)")
    name = "" if value in ("", "~") else value
    if name and not is_valid_layer_name(name):
        raise invalid_request("layer name must be 1..128 characters without control characters, "
                              "'/' or '\\', and not '.', '..' or '~'")
    return name


class _Endpoint:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    async def __call__(self, scope, receive, send):
        try:
            response = await self.answer(scope, receive, send)
        except ApiError as exc:
            response = api_error_response(exc)
        if response is not None:
            await response(scope, receive, send)

    async def answer(self, scope, receive, send):
        raise NotImplementedError


class OpenStream(_Endpoint):
    """``POST /sync/v2/stream``: any valid, unrevoked JWT of this server opens a stream.
    The body may name the stream this one replaces with its key (``{"replaces": "<stream
    id>", "key": "<its stream_key>"}``): the client's previous stream, which it found dead;
    the server closes it first (:meth:`StreamHub.replace`)."""

    async def answer(self, scope, receive, send):
        ctx = self.ctx
        request = Request(scope, receive)
        found = ctx.verifier.verify(request.headers.get("authorization"))
        if found.jti is not None and await run_in_worker(ctx.storage.is_token_revoked, found.jti):
            raise access_denied("token revoked")
        body = await read_json_object(request, ctx)
        replaces, key = body.get("replaces"), body.get("key")
        if replaces is not None and not isinstance(replaces, str):
            raise invalid_request("replaces must be a stream id (a string)")
        if key is not None and not isinstance(key, str):
            raise invalid_request("key must be the replaced stream's stream_key (a string)")
        hub = _hub(ctx)
        if replaces is not None:
            hub.replace(replaces, key)
        stream = hub.open(scope.get("client"))
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache, no-transform"),
            (b"x-accel-buffering", b"no")]})
        await hub.serve(stream, receive, send)
        return None


class Subscriptions(_Endpoint):
    """``POST`` (subscribe) and ``DELETE`` (unsubscribe) ``.../{stream_id}/subscriptions``."""

    async def answer(self, scope, receive, send):
        if scope["method"] == "DELETE":
            return await self.unsubscribe(scope, receive)
        return await self.subscribe(scope, receive)

    async def subscribe(self, scope, receive):
        ctx, hub = self.ctx, _hub(self.ctx)
        request = Request(scope, receive)
        body = await read_json_object(request, ctx)
        document_id, since, epoch = body.get("document_id"), body.get("since", 0), body.get("epoch")
        if not isinstance(document_id, str):
            raise invalid_request("document_id must be a string")
        name = _layer_name(body.get("layer", ""))
        if type(since) is not int or not 0 <= since <= MAX_REVISION:
            raise invalid_request(f"since must be an integer 0..{MAX_REVISION}")
        if epoch is not None and not isinstance(epoch, str):
            raise invalid_request("epoch must be a string or null")
        found = await grant_of(request.headers.get("authorization"), ctx, document_id, name,
                               "read-document")
        exp = ctx.verifier.expiry(request.headers.get("authorization"))
        _stream_of(hub, scope, request)
        page = await list_page(ctx, document_id, name, since, None, include_tombstones=True,
                               inline=True)
        stream = _stream_of(hub, scope, request)  # (still open?)
        answer = {"subscribed": True, "revision": page.layer.revision, "epoch": page.layer.epoch}
        if epoch is not None and epoch != page.layer.epoch:
            hub.unsubscribe(stream, document_id, name)
            hub.reset(stream, document_id, body.get("layer", ""), page.layer.epoch)
            return WireJSONResponse({**answer, "reset": True})
        hub.subscribe(stream, document_id, name, body.get("layer", ""), found, page, since, exp)
        if body.get("ack") is True:
            # asked for: the client checks that its stream delivers (buffering, protocol.md)
            stream.push(None, event("subscribed", {"document_id": document_id,
                                                   "layer": body.get("layer", ""),
                                                   "revision": page.layer.revision}))
            answer["ack"] = True
        return WireJSONResponse(answer)

    async def unsubscribe(self, scope, receive):
        ctx, hub = self.ctx, _hub(self.ctx)
        request = Request(scope, receive)
        document_id = request.query_params.get("document_id")
        if document_id is None:
            raise invalid_request("document_id is required")
        name = _layer_name(request.query_params.get("layer", ""))
        # Any JWT of this server for the document, expired or revoked too: the key is the
        # authority here, and ending a subscription gives nothing (a client must be able to
        # end one whose token ran out, protocol.md "Unsubscribe").
        check_document_id(document_id)
        ctx.verifier.verify(request.headers.get("authorization"), check_expiry=False).require(
            document_id, None, "read-document")
        stream = _stream_of(hub, scope, request)
        if not hub.unsubscribe(stream, document_id, name):
            raise not_found("no such subscription on this stream")
        return WireJSONResponse({"subscribed": False})


class _StreamRoute(Route):
    def __init__(self, path: str, endpoint, methods: list[str]):
        super().__init__(path, endpoint, methods=methods, include_in_schema=False)
        self.methods = set(methods)  # (no HEAD)

    def matches(self, scope):
        """Starlette's match, plus ``route`` in the child scope: its ``path`` template names
        the request in metrics and logs (:meth:`Metrics.note_request`), not "unmatched"."""
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


def stream_routes(ctx: AppContext) -> list[Route]:
    """The three routes of protocol version 2 (mounted beside the v1 routes)."""
    subscriptions = Subscriptions(ctx)
    return [_StreamRoute(STREAM_PATH, OpenStream(ctx), ["POST"]),
            _StreamRoute(STREAM_PATH + "/{stream_id}/subscriptions", subscriptions,
                         ["POST", "DELETE"])]
