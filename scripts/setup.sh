#!/usr/bin/env bash
# Installs everything `make demo` and `make test` need on a fresh Debian machine that has
# only the Swift toolchain, Python and root. Idempotent: re-running does nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(libsqlite3-dev libjansson-dev libcurl4-openssl-dev cmake pkg-config
              clang postgresql sqlite3 curl binutils luajit valgrind
              chromium chromium-driver)  # the dashboard's browser tests
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

VENV=${LAYERSYNC_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating Python virtualenv $VENV"
  python3 -m venv "$VENV"
fi
stamp="$VENV/.layersync-setup"
# scripts/constraints.txt pins every package to the versions of a passing run, so a fresh
# machine tests what CI tested (the server relies on some uvicorn/Starlette internals);
# LAYERSYNC_UNPINNED=1 installs the newest versions the ranges allow instead
# (scripts/refresh-constraints.sh does that to refresh the pins).
CONSTRAINTS=(-c scripts/constraints.txt)
[ "${LAYERSYNC_UNPINNED:-}" = 1 ] && CONSTRAINTS=()
# (the module names of formats/ count too: its strict editable install links each module)
req_hash=$( (cat formats/pyproject.toml server/pyproject.toml bindings/python/pyproject.toml scripts/requirements-dev.txt \
             scripts/constraints.txt 2>/dev/null || true; ls formats/layersync_formats;
             echo "unpinned=${LAYERSYNC_UNPINNED:-}") | sha256sum | cut -d" " -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$req_hash" ]; then
  echo "setup: installing Python packages into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "${CONSTRAINTS[@]}" -r scripts/requirements-dev.txt
  # formats/ first: layersync-formats (value rules of PDF and XFDF, the XFDF codec) that
  # server and bindings both import.
  # Strict editable mode (links in formats/build/) so mypy --strict on the bindings finds
  # it; a new module in formats/ changes req_hash, so the next setup links it.
  # (setuptools warns at length about every editable install, on stderr of the build
  # backend: that warning alone is silenced, through the environment the backend inherits.)
  export PYTHONWARNINGS="ignore:Editable installation"
  "$VENV/bin/python" -m pip install -q "${CONSTRAINTS[@]}" -e formats --config-settings editable_mode=strict
  for pkg in server bindings/python; do
    if [ -f "$pkg/pyproject.toml" ]; then "$VENV/bin/python" -m pip install -q "${CONSTRAINTS[@]}" -e "$pkg"; fi
  done
  unset PYTHONWARNINGS
  echo "$req_hash" > "$stamp"
fi
