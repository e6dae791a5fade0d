"""The package's modules import each other one way: each imports (at run time) only modules
listed before it in LAYERS. Imports under ``if TYPE_CHECKING:`` are for annotations only
and may point either way."""
from __future__ import annotations

import ast
from pathlib import Path

import layersync

PACKAGE = Path(layersync.__file__).parent

#: Lowest first. A module may import only modules before it (and the standard library).
LAYERS = ["_ffi", "_library", "errors", "_convert", "_callbacks", "_handle", "events", "observer",
          "document", "client", "aio", "devserver", "cli", "__init__", "__main__"]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_imports(module: str) -> set[str]:
    """The package modules ``module`` imports when it runs (anywhere in it, functions included)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1 or base == "layersync" or base.startswith("layersync."):
                base = base.removeprefix("layersync").lstrip(".")
                if base:
                    found.add(base.split(".")[0])
                else:  # from . import x / from layersync import x
                    found.update(a.name for a in node.names if (PACKAGE / f"{a.name}.py").exists())
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("layersync."):
                    found.add(a.name.split(".")[1])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(module)
    return found


def test_every_module_has_a_layer():
    assert sorted(p.stem for p in PACKAGE.glob("*.py")) == sorted(LAYERS)


def test_imports_go_one_way():
    backwards = []
    for i, module in enumerate(LAYERS):
        for imported in sorted(runtime_imports(module)):
            if imported not in LAYERS[:i]:
                backwards.append(f"{module} imports {imported}")
    assert backwards == []


def test_the_checker_sees_a_back_edge(tmp_path, monkeypatch):
    # The check can fail: a module importing one above it is reported.
    (tmp_path / "events.py").write_text("from .document import Document\n"
                                        "if TYPE_CHECKING:\n    from .client import Client\n")
    monkeypatch.setitem(globals(), "PACKAGE", tmp_path)
    assert runtime_imports("events") == {"document"}
