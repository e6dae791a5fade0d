"""Admin API under ``/api`` (server to server), shaped like Nutrient Document Engine.

Auth: ``Authorization: Token token="<secret>"`` (401 missing, 403 wrong). Responses
wrap their payload in ``{"data": ...}``; errors use the common envelope.

One module per resource: :mod:`.documents`, :mod:`.layers`, :mod:`.annotations`,
:mod:`.exports` (Instant JSON and PDF), :mod:`.xfdf` (XFDF), :mod:`.tokens`; :mod:`.common` holds what they
share. :data:`ROUTERS` lists their routers in the order their routes are matched and
listed (``app.ROUTERS`` includes them).
"""

# (no ``from __future__ import annotations`` here: it would shadow the submodule's name)
from layersync_server.routes.admin import annotations, documents, exports, layers, tokens, xfdf

ROUTERS = tuple(resource.router for resource in (documents, layers, annotations, exports, xfdf, tokens))
