"""The per-document events and the error classes come from the tables tools/gen_api.py
generates from api/layersync.toml into _ffi, not from lists written in the bindings."""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import layersync
from layersync import _callbacks, _ffi

TOOLS = Path(__file__).resolve().parents[3] / "tools"


def _callback_fields(struct: type[ctypes.Structure]) -> dict[str, object]:
    return {name: ctype for name, ctype in struct._fields_  # type: ignore[misc]
            if name != "release_context" and isinstance(ctype, type) and issubclass(ctype, ctypes._CFuncPtr)}


def test_event_names_are_the_observer_struct_callbacks():
    observer = _callback_fields(_ffi.layersync_document_observer)
    assert layersync.OBSERVER_EVENT_NAMES == tuple(observer) == tuple(_ffi.DOCUMENT_EVENTS)
    assert layersync.EVENT_NAMES == ("server_did_validate",) + tuple(observer)
    delegate = _callback_fields(_ffi.layersync_client_delegate)
    for name, (cb_type, _payload) in _ffi.DOCUMENT_EVENTS.items():
        assert observer[name] is cb_type and delegate[name] is cb_type


def test_every_event_type_converts():
    # An event of a callback type the trampolines cannot convert fails at import.
    made = _callbacks.document_trampolines(lambda *a: None, lambda fn: fn, _ffi.DOCUMENT_EVENTS)
    assert set(made) == set(_ffi.DOCUMENT_EVENTS)
    for name, fn in made.items():
        assert isinstance(fn, _ffi.DOCUMENT_EVENTS[name][0])


def test_trampolines_convert_their_arguments():
    got: list[tuple[str, object, tuple[object, ...]]] = []
    made = _callbacks.document_trampolines(lambda *a: got.append(a), lambda fn: fn,
                                           ["did_finish_reauthentication", "did_receive_changes",
                                            "download_progress", "did_change_sync_state", "did_finish_sync"])
    made["did_finish_reauthentication"](None, 8, b"a.b.c")
    made["did_receive_changes"](None, 8, b'{"created": ["x"]}')
    made["download_progress"](None, 8, 5, 10)
    made["did_change_sync_state"](None, 8, _ffi.LAYERSYNC_DOCUMENT_STATE_DIRTY)
    made["did_finish_sync"](None, 8)
    assert got == [("did_finish_reauthentication", 8, ("a.b.c",)),
                   ("did_receive_changes", 8, ({"created": ["x"]},)),
                   ("download_progress", 8, (5, 10)),
                   ("did_change_sync_state", 8, (layersync.DocumentState.DIRTY,)),
                   ("did_finish_sync", 8, ())]


def test_python_table_is_the_generators_event_list():
    sys.path.insert(0, str(TOOLS))
    try:
        import gen_api
    finally:
        sys.path.remove(str(TOOLS))
    import tomllib
    api = gen_api.Api(tomllib.loads(gen_api.API.read_text()))
    assert [(n, getattr(_ffi, cb), kind) for n, cb, kind in gen_api.python_event_table(api)] == [
        (n, cb, kind) for n, (cb, kind) in _ffi.DOCUMENT_EVENTS.items()]
    assert [e.name for e in gen_api.document_events(api)] == list(_ffi.DOCUMENT_EVENTS)
