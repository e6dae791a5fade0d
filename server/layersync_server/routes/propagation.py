"""The two requests on the propagation path, ``POST .../sync`` and the long-poll ``GET
.../changes`` (docs/protocol.md), as plain ASGI endpoints: no FastAPI router, dependency
solving or parameter models. Each is written once (:class:`LayerSync`,
:class:`LayerChanges`); the rules they apply live in :mod:`layersync_server.changes`.

Why plain ASGI: FastAPI's route machinery costs ~0.3 ms per request on a 2-core machine
(a long-poll that answers at once: 0.8 -> 0.4 ms round trip over loopback), and these two
requests are most of the traffic. Each is a Starlette :class:`HotRoute`, the first routes
of the app's router (``create_app``), behind the same middleware stack as every other
request (protocol check and header, metrics and access log, the error envelope).

``/openapi.json`` describes them with :data:`OPENAPI_PATHS`, a static fragment.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated

from pydantic import Field, TypeAdapter, ValidationError
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.routing import Match, Route

from layersync_server import openapi_bodies as bodies
from layersync_server.changes import parse_sync_request, push, sync_answer
from layersync_server.context import (INLINE_MAX_RECORDS, AppContext, commit, layer_from_segment,
                                      read_body)
from layersync_server.errors import invalid_fields
from layersync_server.errors_http import COMMON_ERROR_RESPONSES
from layersync_server.json_http import WireJSONResponse
from layersync_server.permissions import sent_as_delta
from layersync_server.routes.access import grant, list_page, page_json, page_size
from layersync_server.wire_json import MAX_REVISION

LAYER_PATH = "/sync/v1/documents/{document_id}/layers/{layer:path}"


# -- GET .../changes ------------------------------------------------------------------------

#: Query values read as they are written (anything else is validated by pydantic, as
#: FastAPI would validate the parameters declared in :data:`OPENAPI_PATHS`).
_REVISION_VALUE = re.compile(r"0|[1-9][0-9]{0,18}")
_WAIT_VALUE = re.compile(r"(?:0|[1-9][0-9]{0,8})(?:\.[0-9]{1,9})?")
_LIMIT_VALUE = re.compile(r"[1-9][0-9]{0,17}")

#: ``name: (validator, default)`` of the long-poll's query parameters, in order.
_QUERY = {"since": (TypeAdapter(Annotated[int, Field(ge=0, le=MAX_REVISION)]), 0),
          "wait": (TypeAdapter(Annotated[float, Field(ge=0, allow_inf_nan=False)]), 0),
          "limit": (TypeAdapter(Annotated[int | None, Field(ge=1)]), None)}


def plain_query(query_string: bytes) -> dict[str, str] | None:
    """``since``/``wait``/``limit`` of a long-poll query string when each is plainly
    written (digits; no escapes), else None (:func:`changes_query` then validates the
    query in full). Other parameters are ignored; the last of repeated ones counts."""
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
        if name in _QUERY:
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


def changes_query(query_string: bytes) -> tuple[int, float, int | None]:
    """``(since, wait, limit)`` of a long-poll query string.

    Raises:
        ApiError: 400 ``invalid_request`` with ``details.errors`` (one ``{"loc",
            "msg"}`` per bad parameter), the envelope of any request the server
            validates against its OpenAPI description.
    """
    plain = plain_query(query_string)
    if plain is not None:
        limit = plain.get("limit")
        return (int(plain.get("since", 0)), float(plain.get("wait", 0)),
                None if limit is None else int(limit))
    given = dict(QueryParams(query_string))  # as Starlette reads it: the last one counts
    values, problems = [], []
    for name, (validator, default) in _QUERY.items():
        if name not in given:
            values.append(default)
            continue
        try:
            values.append(validator.validate_python(given[name]))
        except ValidationError as exc:
            problems += [{**e, "loc": ("query", name, *e["loc"])} for e in exc.errors()]
    if problems:
        raise invalid_fields(problems)
    return values[0], values[1], values[2]


class _HotEndpoint:
    """A plain ASGI endpoint over the app context: :meth:`answer` builds the response (or
    raises :class:`~layersync_server.errors.ApiError`, which the caller turns into the error envelope)."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    async def __call__(self, scope, receive, send):
        await (await self.answer(scope, receive))(scope, receive, send)

    async def answer(self, scope, receive) -> WireJSONResponse:
        raise NotImplementedError


class LayerChanges(_HotEndpoint):
    """ASGI endpoint of ``GET .../changes``: long-poll. Answers at once if there are
    records past ``since``, else holds up to ``wait`` seconds (capped at ``max_wait_s``)
    until a commit to the layer. A delete of the layer (or its document) ends the wait:
    the re-read answers 404 ``not_found`` (the layer is not created again)."""

    async def answer(self, scope, receive) -> WireJSONResponse:
        """The response; raises :class:`~layersync_server.errors.ApiError` for an error answer."""
        ctx = self.ctx
        since, wait, limit = changes_query(scope.get("query_string", b""))
        params = scope["path_params"]
        document_id = params["document_id"]
        name = layer_from_segment(params["layer"])
        found = await grant(Request(scope, receive).headers.get("authorization"), ctx,
                            document_id, name, "read-document", check_revoked=False)
        resets = ctx.notifier.resets  # a delete after this read still ends the wait
        page = await list_page(ctx, document_id, name, since, limit, include_tombstones=True,
                               revoked_jti=found.jti, inline=True)
        wait_s = min(wait, ctx.settings.max_wait_s)
        if page.records or wait_s <= 0:
            return WireJSONResponse(page_json(page, found, sent_as_delta(since)))
        woke, handed = await ctx.notifier.wait_for_change(document_id, name, since, page.layer,
                                                          wait_s, page_size(ctx, limit), resets)
        if handed is not None:  # the page the commit that woke us read for us (notify.py)
            page = handed
        elif woke:
            page = await list_page(ctx, document_id, name, since, limit, include_tombstones=True,
                                   inline=True)
        return WireJSONResponse(page_json(page, found, sent_as_delta(since)))


# -- POST .../sync --------------------------------------------------------------------------

#: Largest request body whose changes :func:`commit` may write on the event loop thread.
INLINE_MAX_BODY_BYTES = 64 * 1024


def _bounded_size(raw: bytes, changes: list) -> int | None:
    """The number of changes for :func:`commit`, when what they write is known to be small
    (a body of at most :data:`INLINE_MAX_BODY_BYTES`, no delete); else None, which keeps
    the write off the event loop. A delete is unbounded: deleting a root annotation
    deletes all of its comments (docs/rules.md rule 3), thousands of rows that would
    stall every other request of the process (20,000 comments: ~0.5 s on the loop). A
    pull without changes has no propagation to hurry and may answer a whole page (a new
    client's ``since=0``), so it stays off the loop too."""
    if (not changes or len(raw) > INLINE_MAX_BODY_BYTES
            or any(change.get("op") == "delete" for change in changes)):
        return None
    return len(changes)


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # a worker thread
        return False
    return True


class LayerSync(_HotEndpoint):
    """ASGI endpoint of ``POST .../sync``: push changes and pull server changes in one
    round trip (:func:`~layersync_server.changes.push`)."""

    async def answer(self, scope, receive) -> WireJSONResponse:
        """The response; raises :class:`~layersync_server.errors.ApiError` for an error answer."""
        ctx = self.ctx
        params = scope["path_params"]
        document_id = params["document_id"]
        name = layer_from_segment(params["layer"])
        request = Request(scope, receive)
        found = await grant(request.headers.get("authorization"), ctx, document_id, name,
                            "read-document")
        raw = await read_body(request, ctx.settings.max_request_bytes)
        body = parse_sync_request(raw)
        if body.changes and found.collaboration is None:
            # (with collaboration permissions each change is checked alone: creating needs
            # ``write``, the rest what the claim grants; docs/protocol.md)
            found.require(document_id, name, "write")
        bounded = _bounded_size(raw, body.changes)
        size = page_size(ctx, None)

        def work(writer):
            # commit() may run this on the event loop thread (a small push), where the
            # answer's page is read only if small, or in a worker
            inline = INLINE_MAX_RECORDS if bounded is not None and _on_event_loop() else None
            return push(writer, body, found.user_id, size, inline, found)

        state, pushed = await commit(ctx, document_id, name, work, bounded)
        return WireJSONResponse(sync_answer(state, pushed, found, body.since))


# -- mounting -------------------------------------------------------------------------------

class HotRoute(Route):
    """A Starlette route of one of the endpoints above: it answers only ``method`` (not
    also HEAD for GET: 405 then, as for every route the OpenAPI document lists) and puts
    itself in ``scope["route"]``, whose ``path`` template names the request in metrics
    and logs (:meth:`Metrics.note_request`)."""

    def __init__(self, path: str, endpoint, method: str):
        super().__init__(path, endpoint, methods=[method], include_in_schema=False)
        self.methods = {method}
        # str and path parameters only: their values are the matched text (no conversion)
        assert {type(c).__name__ for c in self.param_convertors.values()} <= {"StringConvertor",
                                                                             "PathConvertor"}

    def matches(self, scope):
        """Starlette's :meth:`Route.matches` (the path below ``root_path``), in half the
        time: one regex match, no conversion, plus ``route`` in the child scope."""
        if scope["type"] != "http":
            return Match.NONE, {}
        path, root = scope["path"], scope.get("root_path")
        if root and path.startswith(root) and path[len(root):len(root) + 1] in ("/", ""):
            path = path[len(root):]
        found = self.path_regex.match(path)
        if found is None:
            return Match.NONE, {}
        params = found.groupdict()
        outer = scope.get("path_params")
        child_scope = {"endpoint": self.endpoint, "path_params": {**outer, **params} if outer else params,
                       "route": self}
        return (Match.FULL if scope["method"] in self.methods else Match.PARTIAL), child_scope


def hot_routes(ctx: AppContext) -> list[HotRoute]:
    """The two routes, their endpoints bound to ``ctx`` (``dependency_overrides`` do not
    reach them: they have no dependencies)."""
    return [HotRoute(LAYER_PATH + "/changes", LayerChanges(ctx), "GET"),
            HotRoute(LAYER_PATH + "/sync", LayerSync(ctx), "POST")]


# -- OpenAPI --------------------------------------------------------------------------------

def _path_parameters() -> list[dict]:
    return [{"name": name, "in": "path", "required": True,
             "schema": {"type": "string", "title": title}}
            for name, title in (("document_id", "Document Id"), ("layer", "Layer"))]


def _responses(model: str, description: str) -> dict:
    errors = {str(status): {"description": entry["description"], "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}}}
        for status, entry in COMMON_ERROR_RESPONSES.items()}
    return {"200": {"description": description, "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{model}"}}}}, **errors}


_OPENAPI_PATH = "/sync/v1/documents/{document_id}/layers/{layer}"

#: What ``/openapi.json`` says of the two routes (they are not FastAPI routes).
OPENAPI_PATHS = {
    _OPENAPI_PATH + "/changes": {"get": {
        "tags": ["sync"], "summary": "Layer Changes",
        "description": "Long-poll: answer at once if there are records past ``since``, else "
                       "hold up to\n``wait`` seconds (capped at ``max_wait_s``) until a commit "
                       "to the layer.",
        "operationId": "layer_changes_sync_v1_documents__document_id__layers__layer__changes_get",
        "parameters": [
            *_path_parameters(),
            {"name": "since", "in": "query", "required": False, "schema": {
                "type": "integer", "maximum": MAX_REVISION, "minimum": 0, "default": 0,
                "title": "Since"}},
            {"name": "wait", "in": "query", "required": False, "schema": {
                "type": "number", "minimum": 0, "default": 0, "title": "Wait"}},
            {"name": "limit", "in": "query", "required": False, "schema": {
                "anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "title": "Limit"}}],
        "responses": _responses("RecordPageOut", "a page of records (empty when the wait ended)")}},
    _OPENAPI_PATH + "/sync": {"post": {
        "tags": ["sync"], "summary": "Layer Sync",
        "description": "Push changes and pull server changes in one round trip (see module docs).",
        "operationId": "layer_sync_sync_v1_documents__document_id__layers__layer__sync_post",
        "parameters": _path_parameters(),
        "responses": _responses("SyncOut", "outcomes of the pushed changes, and server changes"),
        **bodies.SYNC}},
}
#: The response models :data:`OPENAPI_PATHS` refers to.
OPENAPI_MODELS = (bodies.RecordPageOut, bodies.SyncOut)
