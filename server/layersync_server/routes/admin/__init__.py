"""Admin API under ``/api`` (server to server), shaped like Nutrient Document Engine.

Auth: ``Authorization: Token token="<secret>"`` (401 missing, 403 wrong). Responses
wrap their payload in ``{"data": ...}``; errors use the common envelope.

One module per resource: :mod:`.documents`, :mod:`.layers`, :mod:`.annotations`,
:mod:`.exports` (Instant JSON and PDF), :mod:`.tokens`, :mod:`.comments`, :mod:`.form_fields`
(and values), :mod:`.pages` (page annotations and images, attachments), :mod:`.bookmarks`,
:mod:`.copies` (``pdf_with_instant_json``, ``copy_with_instant_json``, ``copy_document``);
:mod:`.common` holds what they share. :data:`ROUTERS` lists their routers in the order their routes are matched and
listed (``app.ROUTERS`` includes them).
"""

# (no ``from __future__ import annotations`` here: it would shadow the submodule's name)
from layersync_server.routes.admin import (annotations, bookmarks, comments, copies, documents, exports,
                                          form_fields, layers, pages, tokens)

ROUTERS = tuple(resource.router for resource in (documents, layers, annotations, exports, tokens,
                                                 comments, form_fields, pages, bookmarks, copies))
