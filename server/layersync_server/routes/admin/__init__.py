"""Admin API under ``/api`` (server to server), answering as Nutrient Document Engine's
published OpenAPI description defines its routes (``../shared/vendor/document-engine/``;
``tests/test_document_engine_conformance.py`` checks it).

Auth: ``Authorization: Token token="<secret>"`` (401 missing or wrong). Responses
wrap their payload in ``{"data": ...}`` where the spec does; errors use the common
envelope; the response shaping every module shares is in :mod:`.common`.

One module per resource: :mod:`.documents`, :mod:`.layers`, :mod:`.annotations`,
from layersync_server.routes.admin import (annotations, bookmarks, comments, copies, documents, exports,
                                           form_fields, layers, pages, tokens, xfdf)

ROUTERS = tuple(resource.router for resource in (documents, layers, annotations, exports, xfdf, tokens,
                                                 comments, form_fields, pages, bookmarks, copies))
listed (``app.ROUTERS`` includes them).
"""

# (no ``from __future__ import annotations`` here: it would shadow the submodule's name)
from layersync_server.routes.admin import (annotations, bookmarks, comments, copies, documents, exports,
                                           form_fields, layers, pages, tokens, xfdf)

ROUTERS = tuple(resource.router for resource in (documents, layers, annotations, exports, xfdf, tokens,
                                                 comments, form_fields, pages, bookmarks, copies))
