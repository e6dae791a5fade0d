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

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request

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


class ProtocolVersionMiddleware:
    """ASGI middleware for the ``LayerSync-Protocol`` header (docs/protocol.md, Conventions).

    Adds ``LayerSync-Protocol: <max>`` to every response, and answers 426
    ``old_client`` when a request announces a version below ``protocol_min``
    (400 when the header is not an integer). Requests without the header pass.
    """

    def __init__(self, app, settings: Settings):
        self.app = app
        self.settings = settings
        self._header = (_PROTOCOL_HEADER_BYTES, str(settings.protocol_max).encode())

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        header = self._header

        async def send_with_header(message):
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        announced = None
        for name, value in scope.get("headers", ()):
            if name == _PROTOCOL_HEADER_BYTES:
                announced = value  # the last one counts
        if announced is not None:
            problem = self._check(announced)
            if problem is not None:
                return await problem(scope, receive, send_with_header)
        return await self.app(scope, receive, send_with_header)

    def _check(self, announced: bytes):
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
    so metrics, logs and the protocol header behave the same. The routes get the app's
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

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("root_path"):
            return await self.app(scope, receive, send)
        route = self.routes.get(scope["method"])
        match = route.path_regex.match(scope["path"]) if route is not None else None
        if match is None:
            return await self.app(scope, receive, send)
        if route.endpoint is sync.layer_changes:
            query = _hot_query(scope.get("query_string", b""))
            if query is None:
                return await self.app(scope, receive, send)
        params = match.groupdict()
        scope["endpoint"] = route.endpoint
        scope["path_params"] = params
        scope["route"] = route
        request = Request(scope, receive)
        try:
            if route.endpoint is sync.layer_changes:
                limit = query.get("limit")
                response = await sync.layer_changes(
                    params["document_id"], params["layer"], request,
                    since=int(query.get("since", 0)), wait=float(query.get("wait", 0)),
                    limit=None if limit is None else int(limit), ctx=self.ctx)
            else:
                response = await sync.layer_sync(params["document_id"], params["layer"], request,
                                                 ctx=self.ctx)
        except Exception as exc:  # noqa: BLE001 — what ExceptionMiddleware would do
            handler = self._handler(exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await response(scope, receive, send)

    def _handler(self, exc: Exception):
        for cls in type(exc).__mro__:
            if cls is Exception:
                return None  # 500s are ServerErrorMiddleware's, outside (as in FastAPI)
            handler = self.handlers.get(cls)
            if handler is not None:
                return handler
        return None


def create_app(settings: Settings, storage: Storage | None = None) -> FastAPI:
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
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            ctx.storage.close()

    app = FastAPI(title="LayerSync server", version=__version__, lifespan=lifespan,
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
    app.add_middleware(ProtocolVersionMiddleware, settings=settings)
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
