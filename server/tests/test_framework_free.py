"""The server's rules are free of the web framework (issue 13, item 5).

The modules that decide (sync rules, JSON rules, ids, auth, the error envelope,
storage, the PDF package, long-poll wake-ups, settings) must import neither FastAPI
nor Starlette, directly or through another module: the web framework's side lives in
``routes/``, ``app.py``, ``context.py``, ``json_http.py`` and ``errors_http.py``. Each
check imports the modules in a fresh interpreter, since this test process has the
framework loaded already.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: The framework-free modules; every module of these packages too.
RULE_MODULES = [
    "layersync_server.errors",
    "layersync_server.ids",
    "layersync_server.wire_json",
    "layersync_server.changes",
    "layersync_server.permissions",
    "layersync_server.auth",
    "layersync_server.tokens",
    "layersync_server.settings",
    "layersync_server.notify",
]
RULE_PACKAGES = ["layersync_server.storage", "layersync_server.pdf"]

FRAMEWORKS = ("fastapi", "starlette")

#: Imports the modules given as JSON in argv[1] (packages in argv[2], with all their
#: modules), in order, and prints which one first loaded a framework module.
_PROBE = """
import importlib, json, pkgutil, sys

FRAMEWORKS = tuple(json.loads(sys.argv[3]))

def framework_modules():
    return sorted(name for name in sys.modules if name.split(".")[0] in FRAMEWORKS)

imported, culprit = [], None

def load(name):
    global culprit
    module = importlib.import_module(name)
    imported.append(name)
    if culprit is None and framework_modules():
        culprit = name
    return module

for name in json.loads(sys.argv[1]):
    load(name)
for package in json.loads(sys.argv[2]):
    for info in pkgutil.walk_packages(load(package).__path__, package + "."):
        load(info.name)
print(json.dumps({"imported": imported, "culprit": culprit, "loaded": framework_modules()}))
"""


def _probe(modules: list[str], packages: list[str] = ()) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(modules), json.dumps(list(packages)),
         json.dumps(FRAMEWORKS)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_rule_modules_import_no_web_framework():
    found = _probe(RULE_MODULES, RULE_PACKAGES)
    # Every package module was reached (a walk that found nothing would pass vacuously).
    for module in ("layersync_server.storage.sql", "layersync_server.storage.sqlite",
                   "layersync_server.storage.postgres", "layersync_server.pdf.import_",
                   "layersync_server.pdf.export", "layersync_server.pdf.appearance"):
        assert module in found["imported"]
    assert found["culprit"] is None, (
        f"importing {found['culprit']} loads the web framework "
        f"({', '.join(found['loaded'][:5])}, ...): rules must not import fastapi/starlette, "
        "directly or through another module")
    assert found["loaded"] == []


def test_probe_sees_the_framework_through_another_module():
    """The check can fail: errors_http imports FastAPI, json_http Starlette, and a module
    importing them is caught as well."""
    for module in ("layersync_server.errors_http", "layersync_server.json_http",
                   "layersync_server.context"):
        found = _probe(["layersync_server.errors", module])
        assert found["culprit"] == module
        assert any(name.split(".")[0] in FRAMEWORKS for name in found["loaded"])
