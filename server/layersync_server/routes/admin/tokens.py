"""Admin API: revoking client JWTs: Document Engine's ``POST /api/revoke`` and its
older LayerSync path ``POST /api/tokens/revoke``, one handler.

Bodies: Document Engine's ``{"jwts": ["<JWT>", ...]}`` revokes the ``jti`` claim of each
token (a token without one cannot be revoked: it is listed in ``failingPaths``) and answers
``BatchOperationResult`` with ``data`` = the revoked JWTs; ``{"jti": "..."}`` revokes that id
and answers ``{"data": {"jti", "revoked": true}}``. Either way every later request with a JWT
carrying that ``jti`` gets 403, on every server process sharing the database.
"""

from __future__ import annotations

import base64
import binascii
import json

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from layersync_server import openapi_bodies as bodies
from layersync_server.context import AppContext
from layersync_server.errors import invalid_request
from layersync_server.openapi_bodies import media
from layersync_server.routes.admin.common import admin_router, json_body, require_admin
from layersync_server.wire_json import json_problem


router = admin_router()

#: Longest ``jti`` stored.
MAX_JTI_CHARS = 256


def _jti_of(jwt: object) -> str | None:
    """The ``jti`` claim of a compact JWT, read without checking its signature (revoking
    an id is harmless whoever names it); None when it has none or is no JWT, also when the
    payload nests too deep for the parser or the ``jti`` holds a lone surrogate (no server
    accepts such a token, and no text store takes the id: both were 500)."""
    if not isinstance(jwt, str) or jwt.count(".") != 2:
        return None
    payload = jwt.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        return None
    jti = claims.get("jti") if isinstance(claims, dict) else None
    if not isinstance(jti, str) or not 0 < len(jti) <= MAX_JTI_CHARS or json_problem(jti, None):
        return None
    return jti


_REVOKE_BODY = bodies.json_body({"type": "object", "properties": {
    "jwts": {"type": "array", "items": {"type": "string"}, "description": "Document Engine's form"},
    "jti": {"type": "string", "minLength": 1, "maxLength": MAX_JTI_CHARS}}})
_REVOKED = {200: media("application/json", "revoked: BatchOperationResult for `jwts`, "
                       "`{data: {jti, revoked}}` for `jti`", {
    "type": "object", "required": ["data"], "properties": {
        "data": {"type": ["array", "object"]}, "result": {"type": "string",
                                                          "enum": ["success", "partial_failure", "failure"]},
        "status": {"type": "integer"}, "failingPaths": {"type": "array"}}})}


@router.post("/revoke", summary="Revoke client JWTs (by their jti)", openapi_extra=_REVOKE_BODY,
             responses=_REVOKED)
@router.post("/tokens/revoke", summary="Revoke client JWTs by jti (alias of /api/revoke)",
             openapi_extra=_REVOKE_BODY, responses=_REVOKED)
async def revoke_token(request: Request, ctx: AppContext = Depends(require_admin)) -> dict:
    """Body ``{"jwts": [...]}`` or ``{"jti": "..."}`` (see the module docs)."""
    body = await json_body(request, ctx)
    if isinstance(body, dict) and "jwts" in body:
        jwts = body["jwts"]
        if not isinstance(jwts, list):
            raise invalid_request("jwts must be an array of JWTs")
        revoked, failing = [], []
        for index, jwt in enumerate(jwts):
            jti = _jti_of(jwt)
            if jti is None:
                failing.append({"path": f"$.jwts[{index}]", "details": "not a JWT with a jti claim"})
                continue
            await run_in_threadpool(ctx.storage.revoke_token, jti)
            ctx.notifier.hub.revoked(jti)  # its stream subscriptions end now (stream.py)
            revoked.append(jwt)
        result = "success" if not failing else "partial_failure" if revoked else "failure"
        return {"data": revoked, "result": result, "status": 200, "failingPaths": failing}
    jti = body.get("jti") if isinstance(body, dict) else None
    if not isinstance(jti, str) or not 0 < len(jti) <= MAX_JTI_CHARS:
        raise invalid_request("jti must be a string of 1..256 characters (or send jwts)")
    await run_in_threadpool(ctx.storage.revoke_token, jti)
    ctx.notifier.hub.revoked(jti)
    return {"data": {"jti": jti, "revoked": True}}
