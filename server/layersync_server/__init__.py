"""LayerSync reference server: the sync API of ``docs/protocol.md`` plus an admin API.

Entry points: :func:`layersync_server.app.create_app` (ASGI app factory) and the
``layersync-server`` command line (:mod:`layersync_server.cli`).
"""

__version__ = "0.1.0"
SERVER_NAME = "layersync-server"
