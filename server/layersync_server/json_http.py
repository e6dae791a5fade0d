"""The web framework's side of :mod:`layersync_server.wire_json`: the response class
every JSON answer uses (Starlette) and the route class of every FastAPI router."""

from __future__ import annotations

import typing

from fastapi.datastructures import Default, DefaultPlaceholder
from fastapi.routing import APIRoute
from starlette.responses import JSONResponse

from layersync_server.wire_json import encode_response


class WireJSONResponse(JSONResponse):
    """JSON response encoded by :func:`~layersync_server.wire_json.encode_response`
    (every JSON answer of the server)."""

    def render(self, content: typing.Any) -> bytes:
        return encode_response(content)


class WireRoute(APIRoute):
    """Route class of every router: a route without an explicit ``response_model``
    gets none, so its return value is encoded by :class:`WireJSONResponse` (orjson or
    the stdlib encoder) rather than pydantic, whose serializer has a depth limit of its own."""

    def __init__(self, path: str, endpoint, *, response_model: typing.Any = Default(None),
                 **kwargs):
        if isinstance(response_model, DefaultPlaceholder):
            response_model = None
        super().__init__(path, endpoint, response_model=response_model, **kwargs)
