"""The ASGI application factory.

``create_app(settings)`` wires storage, JWT verification, long-poll notification,
the sync router (``/sync/v1``), the admin router (``/api``), the protocol-version
middleware and the error envelope. Nothing is global: two apps in one process are
independent (the tests rely on that).
"""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from layersync_server import __version__
from layersync_server.auth import JwtVerifier
from layersync_server.context import AppContext
from layersync_server.errors import error_response, error_responses, install_error_handlers
from layersync_server.notify import LayerNotifier
from layersync_server.openapi_bodies import HealthOut, media
from layersync_server.observability import Metrics, ObservabilityMiddleware
from layersync_server.routes import admin, sync
from layersync_server.settings import Settings
from layersync_server.storage import Storage, open_storage

PROTOCOL_HEADER = "layersync-protocol"


class ProtocolVersionMiddleware:
    """ASGI middleware for the ``LayerSync-Protocol`` header (docs/protocol.md, Conventions).

    Adds ``LayerSync-Protocol: <max>`` to every response, and answers 426
    ``old_client`` when a request announces a version below ``protocol_min``
    (400 when the header is not an integer). Requests without the header pass.
    """

    def __init__(self, app, settings: Settings):
        self.app = app
        self.settings = settings

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        header_value = str(self.settings.protocol_max).encode()

        async def send_with_header(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + [(PROTOCOL_HEADER.encode(), header_value)]
            await send(message)

        announced = dict(scope.get("headers") or []).get(PROTOCOL_HEADER.encode())
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

            task = asyncio.create_task(feed.run(ctx.notifier.published, on_listening))
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
        await run_in_threadpool(ctx.storage.get_document, "~")
        return {"status": "ok"}

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics",
             response_class=PlainTextResponse,
             responses={200: media("text/plain", "Prometheus text exposition format",
                                   {"type": "string"})})
    def prometheus_metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

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
