"""The ASGI application factory.

``create_app(settings)`` wires storage, JWT verification, long-poll notification,
the routers (:data:`ROUTERS`: the sync API under ``/sync/v1`` with its two hot routes,
the admin API under ``/api``), the protocol-version middleware and the error envelope.
Nothing is global: two apps in one process are independent (the tests rely on that).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic.json_schema import models_json_schema
from starlette.responses import Response

from layersync_server import __version__
from layersync_server.auth import JwtVerifier
from layersync_server.context import AppContext, run_in_worker
from layersync_server.errors import invalid_request
from layersync_server.errors_http import (api_error_response, error_response, error_responses,
                                          install_error_handlers)
from layersync_server.notify import LayerNotifier
from layersync_server.openapi_bodies import HealthOut, media
from layersync_server.observability import Metrics, ObservabilityMiddleware
from layersync_server import dashboard
from layersync_server.routes import admin, sync
from layersync_server.routes.propagation import (OPENAPI_MODELS, OPENAPI_PATHS,
                                                 hot_routes)
from layersync_server.settings import Settings
from layersync_server.storage import Storage, open_storage
from layersync_server.stream import StreamHub, stream_routes

PROTOCOL_HEADER = "layersync-protocol"
_PROTOCOL_HEADER_BYTES = PROTOCOL_HEADER.encode()


class ProtocolVersion:
    """The ``LayerSync-Protocol`` rules (docs/protocol.md, Conventions), applied to every
    request by :class:`ProtocolVersionMiddleware`.

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
            return api_error_response(invalid_request("LayerSync-Protocol must be an integer"))
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


class LayerSyncApp(FastAPI):
    """FastAPI with the server's graceful stop (:meth:`drain`)."""

    def drain(self) -> None:
        """First step of a graceful stop (server.py calls it on SIGTERM/SIGINT, once the
        listening socket is closed): every parked long-poll answers now, as if its wait
        had run out, and later ones answer without waiting
        (:meth:`LayerNotifier.drain`). Requests in flight, writes included, go on; the
        storage stays open until the lifespan's shutdown. Call on the event loop thread."""
        self.state.ctx.notifier.drain()  # (and the change streams: bye)


#: The FastAPI routers of the app, in the order their routes are matched and listed in
#: ``/openapi.json``; a new router is one more entry. The propagation path's routes (the
#: hot routes and the change stream) come before them, so that a request to them matches
#: at the first tries (:func:`_include_routes`).
ROUTERS = (sync.router, *admin.ROUTERS, dashboard.router)  # dashboard: HTML for people


def _include_routes(app: LayerSyncApp, ctx: AppContext) -> None:
    """Every route of the app but the operations ones (the one place routers are added).
    The hot routes' and the stream's paths are matched by no other route (their last
    segments are theirs alone), so their place changes only how soon they are found."""
    app.router.routes.extend([*hot_routes(ctx), *stream_routes(ctx)])
    for router in ROUTERS:
        app.include_router(router)


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
    ctx.notifier.hub = StreamHub(ctx, settings.stream_heartbeat_s, settings.stream_queue_pages,
                                 settings.max_stream_subscriptions, settings.stream_stall_s)

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
    metrics = app.state.metrics = Metrics(ctx.notifier, ctx.storage)
    install_error_handlers(app)
    _include_routes(app, ctx)

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

    app.add_middleware(ProtocolVersionMiddleware, protocol=ProtocolVersion(settings))
    app.add_middleware(ObservabilityMiddleware, metrics=metrics)
    _describe_errors_in_openapi(app)
    return app


def _describe_errors_in_openapi(app: FastAPI) -> None:
    """Validation errors answer 400 with the envelope (errors_http.py), not FastAPI's 422:
    drop the 422 entries FastAPI documents by default (the admin routes' own 422, as
    Document Engine answers a body it refuses, stay). Adds the hot routes' static
    description (:data:`~layersync_server.routes.propagation.OPENAPI_PATHS`) after the
    sync router's records route, where FastAPI listed them."""
    build = app.openapi

    def openapi():
        if app.openapi_schema is None:
            schema = build()
            _add_hot_routes(schema)
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    responses = operation.get("responses", {})
                    if "HTTPValidationError" in str(responses.get("422", "")):
                        responses.pop("422")  # FastAPI's, not the admin routes' own 422
            schema.get("components", {}).get("schemas", {}).pop("HTTPValidationError", None)
            schema.get("components", {}).get("schemas", {}).pop("ValidationError", None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


def _add_hot_routes(schema: dict) -> None:
    paths, models = schema.setdefault("paths", {}), schema.setdefault("components", {})
    hot = copy.deepcopy(OPENAPI_PATHS)
    listed = list(paths.items())
    at = next((i + 1 for i, (path, _) in enumerate(listed) if path.endswith("/records")),
              len(listed))
    schema["paths"] = dict(listed[:at] + list(hot.items()) + listed[at:])
    _, definitions = models_json_schema([(model, "validation") for model in OPENAPI_MODELS],
                                        ref_template="#/components/schemas/{model}")
    found = models.setdefault("schemas", {})
    for name, definition in definitions.get("$defs", {}).items():
        found.setdefault(name, definition)
    models["schemas"] = dict(sorted(found.items()))
