"""The ASGI application factory.

``create_app(settings)`` wires storage, JWT verification, long-poll notification,
the sync router (``/sync/v1``), the admin router (``/api``), the protocol-version
middleware and the error envelope. Nothing is global: two apps in one process are
independent (the tests rely on that).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import Response

from layersync_server import __version__
from layersync_server.auth import JwtVerifier
from layersync_server.context import AppContext, run_in_worker
from layersync_server.errors import error_response, error_responses, install_error_handlers
from layersync_server.notify import LayerNotifier
from layersync_server.openapi_bodies import HealthOut, media
from layersync_server.observability import Metrics, ObservabilityMiddleware
from layersync_server.routes import admin, sync
from layersync_server.settings import Settings
from layersync_server.storage import Storage, open_storage
from layersync_server.wire_json import MAX_REVISION

PROTOCOL_HEADER = "layersync-protocol"
_PROTOCOL_HEADER_BYTES = PROTOCOL_HEADER.encode()


class ProtocolVersion:
    """The ``LayerSync-Protocol`` rules (docs/protocol.md, Conventions), in one place for
    :class:`ProtocolVersionMiddleware` and the hot routes served before it.

    Every response carries ``LayerSync-Protocol: <max>`` (:attr:`header`, appended last
    to the response headers); a request announcing a version below ``protocol_min`` is
    answered 426 ``old_client`` (400 when the header is not an integer). Requests
    without the header pass.
    """

    def __init__(self, settings: Settings):
        self.settings = settings
        self.header = (_PROTOCOL_HEADER_BYTES, str(settings.protocol_max).encode())

    def problem(self, headers) -> Response | None:
        """The error response for a request with these raw ``headers``, or None."""
        announced = None
        for name, value in headers:
            if name == _PROTOCOL_HEADER_BYTES:
                announced = value  # the last one counts
        if announced is None:
            return None
        try:
            version = int(announced.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            return error_response(400, "invalid_request", "LayerSync-Protocol must be an integer")
        if version < self.settings.protocol_min:
            return error_response(
                426, "old_client",
                f"protocol {version} is below the server minimum {self.settings.protocol_min}",
                {"min": self.settings.protocol_min, "max": self.settings.protocol_max})
        return None


class ProtocolVersionMiddleware:
    """ASGI middleware applying :class:`ProtocolVersion` to every HTTP request."""

    def __init__(self, app, protocol: ProtocolVersion):
        self.app = app
        self.protocol = protocol

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        header = self.protocol.header

        async def send_with_header(message):
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        problem = self.protocol.problem(scope.get("headers", ()))
        if problem is not None:
            return await problem(scope, receive, send_with_header)
        return await self.app(scope, receive, send_with_header)


#: Query values the fast path takes as they are (anything else goes to FastAPI, whose
#: validation then answers exactly as without the fast path).
_REVISION_VALUE = re.compile(r"0|[1-9][0-9]{0,18}")
_WAIT_VALUE = re.compile(r"(?:0|[1-9][0-9]{0,8})(?:\.[0-9]{1,9})?")
_LIMIT_VALUE = re.compile(r"[1-9][0-9]{0,17}")


def _hot_query(query_string: bytes) -> dict[str, str] | None:
    """``since``/``wait``/``limit`` of a long-poll query string when each is plainly
    written (digits; no escapes), else None. Other parameters are ignored, as FastAPI
    ignores them; the last of repeated ones counts, as in Starlette."""
    if not query_string:
        return {}
    try:
        text = query_string.decode("ascii")
    except UnicodeDecodeError:
        return None
    if "%" in text or "+" in text:
        return None
    values: dict[str, str] = {}
    for part in text.split("&"):
        name, eq, value = part.partition("=")
        if name in ("since", "wait", "limit"):
            if not eq:
                return None
            values[name] = value
    for name, pattern in (("since", _REVISION_VALUE), ("wait", _WAIT_VALUE), ("limit", _LIMIT_VALUE)):
        value = values.get(name)
        if value is not None and not pattern.fullmatch(value):
            return None
    if "since" in values and int(values["since"]) > MAX_REVISION:
        return None
    return values


class HotRoutes:
    """ASGI middleware serving the two requests on the propagation path, ``POST
    .../sync`` and the long-poll ``GET .../changes``, without FastAPI's router and
    dependency solving: ~0.3 ms less per request on a 2-core machine (a long-poll that
    answers at once: 0.8 -> 0.4 ms round trip over loopback).

    It calls the very route functions FastAPI would call, with the same arguments, and
    answers their errors through the app's exception handlers, so the answers are the
    same. Only plain requests take this path: a query it does not read as FastAPI would
    (escapes, other spellings of numbers, out-of-range values), another method, or a
    ``root_path`` go through FastAPI unchanged. Innermost of the app's own middlewares,
    so metrics, logs and the protocol header behave the same; :class:`LayerSyncApp`
    usually calls it before all of them (:class:`_Outermost`). The routes get the app's
    :class:`AppContext` directly (``dependency_overrides`` of ``get_context`` do not
    reach them on this path).
    """

    def __init__(self, app, ctx: AppContext, handlers: dict):
        self.app = app
        self.ctx = ctx
        self.handlers = handlers  # the app's exception handlers (live dict)
        self.routes = {}
        for route in sync.router.routes:  # the route objects FastAPI puts in scope["route"]
            endpoint = getattr(route, "endpoint", None)
            if endpoint is sync.layer_changes:
                self.routes["GET"] = route
            elif endpoint is sync.layer_sync:
                self.routes["POST"] = route

    def match(self, scope) -> tuple | None:
        """``(route, path parameters, query)`` of a request this path answers, else None."""
        if scope["type"] != "http" or scope.get("root_path"):
            return None
        route = self.routes.get(scope["method"])
        match = route.path_regex.match(scope["path"]) if route is not None else None
        if match is None:
            return None
        query = None
        if route.endpoint is sync.layer_changes:
            query = _hot_query(scope.get("query_string", b""))
            if query is None:
                return None
        return route, match.groupdict(), query

    async def __call__(self, scope, receive, send):
        found = self.match(scope)
        if found is None:
            return await self.app(scope, receive, send)
        response = await self.answer(scope, receive, found)
        await response(scope, receive, send)

    async def answer(self, scope, receive, found: tuple):
        """The response to a request :meth:`match` found; raises what no handler takes."""
        route, params, query = found
        scope["endpoint"] = route.endpoint
        scope["path_params"] = params
        scope["route"] = route
        request = Request(scope, receive)
        try:
            if route.endpoint is sync.layer_changes:
                limit = query.get("limit")
                return await sync.layer_changes(
                    params["document_id"], params["layer"], request,
                    since=int(query.get("since", 0)), wait=float(query.get("wait", 0)),
                    limit=None if limit is None else int(limit), ctx=self.ctx)
            return await sync.layer_sync(params["document_id"], params["layer"], request,
                                         ctx=self.ctx)
        except Exception as exc:  # noqa: BLE001 — what ExceptionMiddleware would do
            handler = self._handler(exc)
            if handler is None:
                raise
            return await handler(request, exc)

    def _handler(self, exc: Exception):
        for cls in type(exc).__mro__:
            if cls is Exception:
                return None  # 500s are ServerErrorMiddleware's, outside (as in FastAPI)
            handler = self.handlers.get(cls)
            if handler is not None:
                return handler
        return None


#: FastAPI's own layers that do nothing for our requests while FastAPI's telemetry is
#: off and it has no ``max_body_size`` (then the body-limit layer only passes through).
_PASSIVE_LAYERS = {("fastapi.telemetry._asgi", "ExceptionTelemetryMiddleware"),
                   ("fastapi._body_limit", "AppBodyLimitMiddleware")}


class _Outermost:
    """Serves :class:`HotRoutes`' requests before the middleware stack, doing what each
    layer above HotRoutes does for them: ServerErrorMiddleware (the 500 answer of an
    unexpected exception, without the protocol header, then re-raised),
    ObservabilityMiddleware (metrics, access log), ProtocolVersionMiddleware (check and
    header); the other layers are passive (:data:`_PASSIVE_LAYERS`)."""

    def __init__(self, routes: HotRoutes, protocol: ProtocolVersion, metrics: Metrics,
                 server_error):
        self.routes = routes
        self.protocol = protocol
        self.metrics = metrics
        self.server_error = server_error  # the app's 500 handler (async)

    @classmethod
    def above(cls, stack) -> "_Outermost | None":
        """The shortcut for a built middleware ``stack``, or None when a layer above
        HotRoutes is one it can not stand for (or there is no HotRoutes)."""
        layers = {}
        while not isinstance(stack, HotRoutes):
            kind = type(stack)
            known = kind in (ServerErrorMiddleware, ObservabilityMiddleware,
                             ProtocolVersionMiddleware)
            if not known and (kind.__module__, kind.__name__) not in _PASSIVE_LAYERS:
                return None
            layers[kind] = stack
            stack = getattr(stack, "app", None)
        errors = layers.get(ServerErrorMiddleware)
        observed = layers.get(ObservabilityMiddleware)
        protocol = layers.get(ProtocolVersionMiddleware)
        if (errors is None or errors.debug or not asyncio.iscoroutinefunction(errors.handler)
                or observed is None or protocol is None):
            return None
        return cls(stack, protocol.protocol, observed.metrics, errors.handler)

    async def __call__(self, scope, receive, send, found: tuple) -> None:
        started = time.monotonic()
        status = 500  # until a response starts (as ObservabilityMiddleware notes it)
        response = None
        try:
            response = self.protocol.problem(scope["headers"])
            if response is None:
                response = await self.routes.answer(scope, receive, found)
            response.raw_headers.append(self.protocol.header)
            status = response.status_code
            await response(scope, receive, send)
        except Exception as exc:
            if response is None:  # nothing sent: ServerErrorMiddleware's answer
                await (await self.server_error(Request(scope), exc))(scope, receive, send)
            raise
        finally:
            self.metrics.note_request(scope, status, time.monotonic() - started)


class LayerSyncApp(FastAPI):
    """FastAPI that answers :class:`HotRoutes`' requests before its middleware stack.

    Each layer of the stack (uvicorn's proxy headers, ServerErrorMiddleware, FastAPI's
    telemetry and body-limit layers, ObservabilityMiddleware, ProtocolVersionMiddleware)
    costs an await, most of them also a ``send`` wrapper, per request; for the two
    requests on the propagation path :class:`_Outermost` does what they do in one call
    (~0.02 ms less per request on a 2-core machine). It is used when the stack built for
    the first HTTP request allows it (:meth:`_Outermost.above`), FastAPI's native
    OpenTelemetry was not configured by then and the app has no ``root_path``;
    otherwise, and for every other request, the whole stack runs unchanged.
    """

    _hot: _Outermost | None = None
    _hot_checked = False
    _others = None  # what serves the other requests (default: the whole app)

    def drain(self) -> None:
        """First step of a graceful stop (server.py calls it on SIGTERM/SIGINT, once the
        listening socket is closed): every parked long-poll answers now, as if its wait
        had run out, and later ones answer without waiting
        (:meth:`LayerNotifier.drain`). Requests in flight, writes included, go on; the
        storage stays open until the lifespan's shutdown. Call on the event loop thread."""
        self.state.ctx.notifier.drain()

    def serve_others_through(self, middleware_class, **options) -> None:
        """Send the requests the shortcut does not answer through
        ``middleware_class(<the whole app>, **options)`` (server.py: uvicorn's
        proxy-headers middleware, which only those requests read)."""
        self._others = middleware_class(super().__call__, **options)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            if not self._hot_checked:
                self._hot = self._shortcut()
                self._hot_checked = True
            hot = self._hot
            if hot is not None:
                found = hot.routes.match(scope)
                if found is not None:
                    scope["app"] = self
                    return await hot(scope, receive, send, found)
        await (self._others or super().__call__)(scope, receive, send)

    def _shortcut(self) -> _Outermost | None:
        if self.root_path:
            return None
        telemetry = getattr(self, "_native_telemetry", None)
        if telemetry is not None and telemetry.enabled():
            return None
        if self.middleware_stack is None:
            self.middleware_stack = self.build_middleware_stack()
        return _Outermost.above(self.middleware_stack)


def create_app(settings: Settings, storage: Storage | None = None) -> LayerSyncApp:
    """Build the application.

    Args:
        settings: server settings (see :class:`Settings`).
        storage: a backend to use instead of opening ``settings.db_path``; the app
            closes whatever storage it holds on shutdown.

    Raises:
        ValueError / OSError: the public key file is unreadable or not RSA/EC.
    """
    ctx = AppContext(settings=settings,
                     storage=storage or open_storage(settings.db_path,
                                                     history_versions=settings.history_versions),
                     verifier=JwtVerifier(settings.public_key_path, settings.jwt_leeway_s),
                     notifier=LayerNotifier())

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        feed = ctx.storage.change_feed()
        task = None
        if feed is not None:  # commits by other processes wake this process's long-polls
            listening = asyncio.Event()

            async def on_listening():
                listening.set()
                await ctx.notifier.wake_all()  # notifications may have been missed

            task = asyncio.create_task(feed.run(ctx.notifier.published, on_listening,
                                                ctx.notifier.forgotten))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(listening.wait(), 10)
        try:
            yield
        finally:  # after the server answered or closed every connection (server.py)
            ctx.notifier.drain()  # an ASGI server that did not call app.drain()
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            # off the event loop: SQLite's close waits for a statement another thread
            # still runs (a write past the shutdown timeout, waiting for a lock), and the
            # loop must stay free to close the connections meanwhile
            await run_in_worker(ctx.storage.close)

    app = LayerSyncApp(title="LayerSync server", version=__version__, lifespan=lifespan,
                       docs_url=None, redoc_url=None)
    app.state.ctx = ctx
    install_error_handlers(app)
    app.include_router(sync.router)
    app.include_router(admin.router)
    metrics = Metrics(ctx.notifier, ctx.storage)

    @app.get("/healthz", tags=["operations"], summary="Liveness and storage check",
             response_model=HealthOut, responses=error_responses(500))
    async def healthz() -> dict:
        """``{"status": "ok"}`` when storage answers; 500 ``internal`` otherwise."""
        await run_in_worker(ctx.storage.get_document, "~")
        return {"status": "ok"}

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics",
             response_class=PlainTextResponse,
             responses={200: media("text/plain", "Prometheus text exposition format",
                                   {"type": "string"})})
    def prometheus_metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(HotRoutes, ctx=ctx, handlers=app.exception_handlers)
    app.add_middleware(ProtocolVersionMiddleware, protocol=ProtocolVersion(settings))
    app.add_middleware(ObservabilityMiddleware, metrics=metrics)
    _describe_errors_in_openapi(app)
    return app


def _describe_errors_in_openapi(app: FastAPI) -> None:
    """Validation errors answer 400 with the envelope (errors.py), not FastAPI's 422:
    drop the 422 entries FastAPI documents by default."""
    build = app.openapi

    def openapi():
        if app.openapi_schema is None:
            schema = build()
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            schema.get("components", {}).get("schemas", {}).pop("HTTPValidationError", None)
            schema.get("components", {}).get("schemas", {}).pop("ValidationError", None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
