"""``python -m layersync`` is the same as the ``layersync`` command."""
from layersync.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
