"""Admin API: revoking client JWTs."""

from __future__ import annotations

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from layersync_server import openapi_bodies as bodies
from layersync_server.context import AppContext
from layersync_server.errors import invalid_request
from layersync_server.openapi_bodies import ok
from layersync_server.routes.admin.common import admin_router, json_body, require_admin


router = admin_router()

@router.post("/tokens/revoke", summary="Revoke client JWTs by jti",
             openapi_extra=bodies.REVOKE, responses=ok(bodies.RevokedOut, "revoked"))
async def revoke_token(request: Request, ctx: AppContext = Depends(require_admin)) -> dict:
    """Body ``{"jti": "..."}``. Every later request with a JWT carrying that ``jti`` gets
    403, on every server process sharing the database."""
    body = await json_body(request, ctx)
    jti = body.get("jti") if isinstance(body, dict) else None
    if not isinstance(jti, str) or not 0 < len(jti) <= 256:
        raise invalid_request("jti must be a string of 1..256 characters")
    await run_in_threadpool(ctx.storage.revoke_token, jti)
    return {"data": {"jti": jti, "revoked": True}}
