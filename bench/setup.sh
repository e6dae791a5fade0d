#!/usr/bin/env bash
# Creates bench/.venv-peers with the peer systems of scenario 7 (Kinto + kinto-http,
# pycrdt + pycrdt-websocket). Kept apart from the repo's .venv because their pinned
# dependencies (pyramid, SQLAlchemy, anyio, websockets) may conflict with ours.
# Idempotent: a stamp file holds the hash of peers-requirements.txt.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${LAYERSYNC_PEERS_VENV:-.venv-peers}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
stamp="$VENV/.bench-setup"
# peers-constraints.txt pins the versions of a passing run (LAYERSYNC_UNPINNED=1: newest).
CONSTRAINTS=(-c peers-constraints.txt)
[ "${LAYERSYNC_UNPINNED:-}" = 1 ] && CONSTRAINTS=()
hash=$( (cat peers-requirements.txt peers-constraints.txt; echo "unpinned=${LAYERSYNC_UNPINNED:-}") | sha256sum | cut -d" " -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$hash" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "${CONSTRAINTS[@]}" -r peers-requirements.txt
  echo "$hash" > "$stamp"
fi
"$VENV/bin/python" -c "import kinto, kinto_http, pycrdt, pycrdt.websocket; print('peers ok')"
