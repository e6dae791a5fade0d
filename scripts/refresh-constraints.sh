#!/usr/bin/env bash
# Refreshes scripts/constraints.txt and bench/peers-constraints.txt: builds both virtualenvs
# afresh in a temporary directory with the newest versions the requirement ranges allow
# (LAYERSYNC_UNPINNED=1), and writes their pip freeze. Run `make test` (and `make bench-smoke`)
# with the new pins before committing them: a new uvicorn or Starlette may break the server's
# shutdown or hot-route code, which uses some of their internals.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
LAYERSYNC_UNPINNED=1 LAYERSYNC_VENV="$work/venv" bash scripts/setup.sh
LAYERSYNC_UNPINNED=1 LAYERSYNC_PEERS_VENV="$work/peers" bash bench/setup.sh
freeze() { "$1/bin/python" -m pip freeze --exclude-editable | grep -v -i '^layersync'; }
{ sed -n '/^#/p' scripts/constraints.txt; freeze "$work/venv"; } > "$work/constraints.txt"
{ sed -n '/^#/p' bench/peers-constraints.txt; freeze "$work/peers"; } > "$work/peers-constraints.txt"
mv "$work/constraints.txt" scripts/constraints.txt
mv "$work/peers-constraints.txt" bench/peers-constraints.txt
git --no-pager diff --stat -- scripts/constraints.txt bench/peers-constraints.txt
