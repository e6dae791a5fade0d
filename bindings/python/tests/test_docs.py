"""Every public name of the package has a docstring (shapes, units, errors, threading)."""
from __future__ import annotations

import inspect

import layersync
import layersync.aio
from layersync import _callbacks, _convert, _handle, cli, client, document, errors, events, observer


def _public_members(obj: object) -> list[tuple[str, object]]:
    return [(n, m) for n, m in vars(obj).items() if not n.startswith("_")
            and (inspect.isfunction(m) or isinstance(m, property))]


def test_every_public_name_is_documented():
    missing = []
    modules = [layersync, layersync.aio, cli, client, errors, events, observer, document,
               _convert, _callbacks, _handle]
    for module in modules:
        if not (module.__doc__ or "").strip():
            missing.append(module.__name__)
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                if not (value.__doc__ or "").strip():
                    missing.append(f"{module.__name__}.{name}")
                if inspect.isclass(value):
                    for member, m in _public_members(value):
                        if not (m.__doc__ or "").strip():
                            missing.append(f"{module.__name__}.{name}.{member}")
    assert missing == []
