"""Operations: Prometheus metrics, structured (JSON) logs without secrets, /healthz.

Metrics live in a per-app :class:`prometheus_client.CollectorRegistry` (two apps in
one process stay independent) and are served at ``GET /metrics``:

* ``layersync_http_requests_total{method, route, status}`` — every request, by route
  template (never the raw path, so ids do not explode cardinality);
* ``layersync_sync_duration_seconds{endpoint}`` — duration of ``sync``, ``records``
  and ``changes`` requests (long-polls include their wait);
* ``layersync_open_long_polls`` — long-polls currently waiting in this process;
* ``layersync_open_streams`` — change streams (protocol version 2) open in this process,
  one connection each; ``layersync_stream_subscriptions`` — layers subscribed on them;
  ``layersync_stream_events`` — events written so far; ``layersync_stream_notices`` —
  ``notice`` events queued so far (pages left off a stream: too large, or its client
  does not read);
* ``layersync_layer_records{document_id, layer}`` — live records per layer (read from
  storage at scrape time, at most 1000 layers).

Logs: one JSON object per line on stderr. The access log has method, route, path
(without the query string), status and duration; a filter replaces anything shaped
like a JWT or an admin token with ``[redacted]`` in every record.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

access_log = logging.getLogger("layersync_server.access")
_SECRET = re.compile(r'eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*|(?i:token\s+token=)"?[^"\s]*"?'
                     r'|(?i:bearer)\s+\S+')
_TIMED = {"/sync", "/records", "/changes"}
#: Bound of the per-middleware cache of labelled counters (methods x routes x statuses).
_MAX_CACHED_LABELS = 4096
#: How many of the latest error answers (status >= 400) :attr:`Metrics.recent_errors` keeps.
RECENT_ERRORS = 100


def redact(text: str) -> str:
    """``text`` with JWTs, ``Bearer x`` and ``Token token="x"`` replaced by ``[redacted]``."""
    return _SECRET.sub("[redacted]", text)


class RedactingJsonFormatter(logging.Formatter):
    """Formats records as one JSON object per line, secrets redacted."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"), "level": record.levelname.lower(),
                 "logger": record.name, "message": redact(record.getMessage())}
        for key in ("method", "route", "path", "status", "duration_ms"):
            if hasattr(record, key):
                value = getattr(record, key)
                entry[key] = redact(value) if isinstance(value, str) else value
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str) -> None:
    """Send every log record to stderr as redacted JSON lines at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingJsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True


class _LayerRecords:
    def __init__(self, storage):
        self.storage = storage

    def collect(self):
        family = GaugeMetricFamily("layersync_layer_records", "Live records per layer",
                                   labels=["document_id", "layer"])
        try:
            for document_id, layer, count in self.storage.layer_record_counts():
                family.add_metric([document_id, layer], count)
        except Exception:  # noqa: BLE001 — a scrape must not fail because storage hiccups
            logging.getLogger(__name__).warning("could not count records for metrics", exc_info=True)
        yield family


class Metrics:
    """The app's registry and instruments, and :meth:`note_request`, which records one
    request in them (for :class:`ObservabilityMiddleware`; the hot routes and the stream
    routes, plain ASGI routes, put themselves in the scope for it as FastAPI's do).

    Cheap on every request: labelled metric children are looked up once per label set
    and kept, and the access log entry is only built when INFO is enabled.
    """

    def __init__(self, notifier, storage):
        self.registry = CollectorRegistry()
        self.requests = Counter("layersync_http_requests", "HTTP requests",
                                ["method", "route", "status"], registry=self.registry)
        self.sync_duration = Histogram("layersync_sync_duration_seconds",
                                       "Duration of sync, records and changes requests",
                                       ["endpoint"], registry=self.registry,
                                       buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                                                10, 30, 60))
        open_polls = Gauge("layersync_open_long_polls", "Long-polls waiting in this process",
                           registry=self.registry)
        open_polls.set_function(lambda: notifier.open_waits)
        hub = notifier.hub
        if hub is not None:  # protocol version 2 (stream.py)
            Gauge("layersync_open_streams", "Change streams open in this process (one "
                  "connection each)", registry=self.registry).set_function(lambda: hub.open_streams)
            Gauge("layersync_stream_subscriptions", "Layers subscribed on this process's "
                  "change streams", registry=self.registry).set_function(
                      lambda: hub.subscription_count)
            Gauge("layersync_stream_events", "Events written on change streams so far",
                  registry=self.registry).set_function(lambda: hub.events_sent)
            Gauge("layersync_stream_notices", "notice events queued so far (a page too "
                  "large, or a client that does not read)",
                  registry=self.registry).set_function(lambda: hub.notices_sent)
        self.registry.register(_LayerRecords(storage))
        self._counters: dict[tuple[str, str, int], object] = {}
        self._timers: dict[str, object] = {}
        #: The latest answers with status >= 400, oldest first: ``(unix time, method,
        #: route template, path without query, status)`` (the dashboard shows them).
        self.recent_errors: deque[tuple[float, str, str, str, int]] = deque(maxlen=RECENT_ERRORS)

    def note_request(self, scope, status: int, elapsed_s: float) -> None:
        """Count, time and log the HTTP request of ASGI ``scope``, answered ``status``
        after ``elapsed_s`` seconds (its route template is ``scope["route"].path``)."""
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        method = scope["method"]
        self._count(method, route, status)
        if status >= 400:
            self.recent_errors.append((time.time(), method, route, scope["path"], status))
        if route.startswith("/sync/v1/"):
            suffix = route[route.rfind("/"):]
            if suffix in _TIMED:
                timer = self._timers.get(suffix)
                if timer is None:
                    timer = self._timers[suffix] = self.sync_duration.labels(suffix[1:])
                timer.observe(elapsed_s)
        if access_log.isEnabledFor(logging.INFO):
            access_log.info("%s %s %s", method, route, status,
                            extra={"method": method, "route": route, "path": scope["path"],
                                   "status": status, "duration_ms": round(elapsed_s * 1000, 2)})

    def _count(self, method: str, route: str, status: int) -> None:
        key = (method, route, status)
        counter = self._counters.get(key)
        if counter is None:
            if len(self._counters) >= _MAX_CACHED_LABELS:  # (methods x routes x statuses)
                self._counters.clear()
            counter = self._counters[key] = self.requests.labels(method, route, str(status))
        counter.inc()


class ObservabilityMiddleware:
    """ASGI middleware: counts and times requests and writes the access log
    (:meth:`Metrics.note_request`)."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.monotonic()
        status = 500

        async def send_and_note(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            self.metrics.note_request(scope, status, time.monotonic() - started)
