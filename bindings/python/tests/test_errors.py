"""Error codes map to exception classes; errors from the real library arrive intact."""
from __future__ import annotations

import ctypes
import socket

import pytest

import layersync
from layersync import _ffi, errors

from conftest import WAIT_S


def test_every_code_has_its_class():
    for code, name in _ffi.ERROR_CODE_NAMES.items():
        if code == 0:
            continue
        cls = errors.ERROR_CLASSES[code]
        exc = cls("m")
        assert exc.code == code and exc.code_name == name
        assert isinstance(exc, layersync.LayerSyncError)
        assert getattr(layersync, cls.__name__) is cls
    assert set(errors.ERROR_CLASSES) == set(_ffi.ERROR_CODE_NAMES) - {0}


@pytest.mark.parametrize("cls, builtin", [
    (errors.InvalidArgumentError, ValueError), (errors.InvalidJWTError, ValueError),
    (errors.RequestFailedError, ConnectionError), (errors.AccessDeniedError, PermissionError),
    (errors.NoSuchAnnotationError, LookupError), (errors.InvalidStateError, RuntimeError),
])
def test_builtin_bases(cls, builtin):
    assert issubclass(cls, builtin)


def test_code_to_class_table_is_generated():
    # errors.py writes no code -> class table: it is _ffi.ERROR_EXCEPTIONS (from api/layersync.toml).
    assert {code: cls.__name__ for code, cls in errors.ERROR_CLASSES.items()} == {
        code: name for code, (name, _doc) in _ffi.ERROR_EXCEPTIONS.items()}
    assert errors.ERROR_CLASSES[_ffi.LAYERSYNC_ERROR_INVALID_JWT] is errors.InvalidJWTError
    assert errors.ERROR_CLASSES[_ffi.LAYERSYNC_ERROR_USER_ID_MISMATCH] is errors.UserIDMismatchError


def test_a_new_code_needs_only_its_toml_entry():
    namespace = {"InvalidJWTError": errors.InvalidJWTError}
    table = errors._exception_classes(namespace, {32: ("InvalidJWTError", "Malformed."),
                                                  1006: ("BrandNewError", "Something new went wrong.")})
    new = table[1006]
    assert namespace["BrandNewError"] is new and table[32] is errors.InvalidJWTError
    assert issubclass(new, layersync.LayerSyncError) and new.__name__ == "BrandNewError"
    assert new("m").code == 1006 and "Something new went wrong." in (new.__doc__ or "")


@pytest.mark.parametrize("namespace, table", [
    ({"InvalidJWTError": errors.InvalidJWTError}, {33: ("InvalidJWTError", "")}),  # class of another code
    ({"InvalidJWTError": errors.InvalidJWTError}, {}),  # class of no code
])
def test_table_and_classes_must_agree(namespace, table):
    with pytest.raises(ImportError):
        errors._exception_classes(dict(namespace), table)


def test_unknown_code_maps_to_base():
    assert errors.error_class(4242) is layersync.LayerSyncError


def _raw_error():
    err = _ffi.layersync_error()
    err.version = _ffi.LAYERSYNC_ERROR_VERSION
    return err


def test_struct_is_mapped_and_cleared(lib, make_client):
    client = make_client()
    out = ctypes.c_void_p()
    err = _raw_error()
    rc = lib.layersync_client_document_for_jwt(client._handle.pointer, b"not-a-jwt", ctypes.byref(out), ctypes.byref(err))
    assert rc == _ffi.LAYERSYNC_ERROR_INVALID_JWT
    assert err.message
    exc = errors.exception_from_struct(lib, err, rc)
    assert type(exc) is errors.InvalidJWTError and exc.code == 32 and exc.message
    assert err.code == 0 and err.message is None and err.version == _ffi.LAYERSYNC_ERROR_VERSION


def test_malformed_jwt(make_client):
    client = make_client()
    for bad in ["not-a-jwt", "a.b", "a.b.c", "e30.e30.sig"]:  # e30 = "{}": no document_id
        with pytest.raises(layersync.InvalidJWTError) as info:
            client.document_for_jwt(bad)
        assert info.value.code == 32 and info.value.code_name == "INVALID_JWT"
        assert isinstance(info.value, ValueError)


def test_unreachable_server_fails_validation(make_client):
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = make_client(server_url=f"http://127.0.0.1:{port}", connect_timeout_s=5)
    with pytest.raises(layersync.RequestFailedError) as info:
        client.wait_validated(timeout=WAIT_S)
    assert info.value.code == _ffi.LAYERSYNC_ERROR_REQUEST_FAILED
    assert isinstance(info.value, ConnectionError)


def test_null_and_invalid_utf8_are_invalid_argument(lib, make_client):
    client = make_client()
    out = ctypes.c_void_p()
    for text in (None, b"\xff\xfe.\xc3(.x"):
        err = _raw_error()
        rc = lib.layersync_client_document_for_jwt(client._handle.pointer, text, ctypes.byref(out), ctypes.byref(err))
        exc = errors.exception_from_struct(lib, err, rc)
        assert rc == _ffi.LAYERSYNC_ERROR_INVALID_ARGUMENT, exc
        assert isinstance(exc, layersync.InvalidArgumentError)


def test_unencodable_text_refused_before_c(make_client):
    client = make_client()
    with pytest.raises(layersync.InvalidArgumentError):
        client.document_for_jwt("a\udc80.b.c")
    with pytest.raises(layersync.InvalidArgumentError):
        client.document_for_jwt("a.b\x00.c")


def test_insecure_http_refused(lib, tmp_path):
    with pytest.raises(layersync.InvalidURLError):
        layersync.Client("http://example.com", tmp_path / "s")
    with pytest.raises(layersync.InvalidURLError):
        layersync.Client("not a url", tmp_path / "s")
