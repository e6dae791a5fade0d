"""``python -m layersync_server`` is the same as the ``layersync-server`` command."""

from layersync_server.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
