"""The dashboard: HTML pages for people at ``/dashboard`` (documents, layers, records,
pages with their annotations, live; operations), behind the admin secret.

Server-rendered Jinja2 templates (autoescaped) and one small plain-JavaScript file;
see :mod:`.router` for the pages, :mod:`.session` for the login cookie and CSRF
tokens, :mod:`.backend` for what it reuses of the admin API and the PDF exporter,
:mod:`.render` for the page images (PDFium through pypdfium2).
"""

from layersync_server.dashboard.router import router

__all__ = ["router"]
