"""The ``layersync`` command (also ``python -m layersync``): a LayerSync client for shells
and scripts. Run ``layersync --help`` for the commands, examples and exit statuses.

Human-readable output goes to stdout, progress bars and messages to stderr; ``--json``
makes stdout machine-readable (one JSON document, or one JSON object per line for
``listen``) and errors a JSON object on stderr. Exit statuses are in :data:`EXIT_CODES`.
"""
from __future__ import annotations

import argparse
import base64
import collections
import importlib
import mimetypes
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence, TextIO

from . import _ffi
from ._library import LibraryLoadError, get_library
from .client import Client, Document, Event
from .document import _xfdf_codec, record_content
from .errors import (AccessDeniedError, AttachmentNotLoadedError, InvalidDocumentError, InvalidJWTError,
                     LayerSyncError, NoSuchAnnotationError, NoSuchAttachmentError, RequestFailedError,
                     UserIDMismatchError)

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_ERROR", "EXIT_USAGE", "EXIT_NETWORK",
           "EXIT_AUTH", "EXIT_NOT_FOUND", "EXIT_REJECTED", "EXIT_INTERRUPTED", "EXIT_CODES",
           "INSTANT_JSON_FORMAT"]

#: Success.
EXIT_OK = 0
#: Any other LayerSync error (its code name and number are printed), no library, or a
#: missing package a command needs (layersync-formats for ``xfdf``; the message says how
#: to install it).
EXIT_ERROR = 1
#: Bad command line or bad input (argparse's convention).
EXIT_USAGE = 2
#: The server could not be reached or did not answer in time (REQUEST_FAILED, timeout).
EXIT_NETWORK = 3
#: The JWT was refused or is malformed (ACCESS_DENIED, INVALID_JWT, USER_ID_MISMATCH).
EXIT_AUTH = 4
#: No such annotation or attachment, or no such document/layer on the server.
EXIT_NOT_FOUND = 5
#: The command synced and the server rejected some of the changes it sent (each one's
#: server version was kept; the conflict reports stay stored: ``layersync rejected``).
EXIT_REJECTED = 6
#: Interrupted by Ctrl-C (SIGINT), as shells report it.
EXIT_INTERRUPTED = 130

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_ERROR: "a LayerSync error not listed below (code name and number printed), no library, "
                "or a missing package (`xfdf` needs layersync-formats: pip install ./formats)",
    EXIT_USAGE: "usage error: bad arguments or input that is not JSON",
    EXIT_NETWORK: "network: server unreachable or no answer in time (REQUEST_FAILED, timeout); "
                  "local edits stay stored and pending",
    EXIT_AUTH: "authentication: JWT rejected or malformed (ACCESS_DENIED, INVALID_JWT, USER_ID_MISMATCH)",
    EXIT_NOT_FOUND: "not found: no such annotation, attachment, document or layer",
    EXIT_REJECTED: "rejected: the sync ran and the server refused some of the changes it sent "
                   "(its versions kept; the reasons are printed, `layersync rejected` lists them)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}

#: The ``format`` of an Instant JSON document (``layersync export``).
INSTANT_JSON_FORMAT = "https://pspdfkit.com/instant-json/v1"

_DESCRIPTION = """\
LayerSync command-line client: download a PDF's annotation layer from a LayerSync
server, edit it offline, sync it, and watch other clients' changes live.

Every command needs the server URL, a JWT granting the document and layer (from your
app's backend, or `layersync-server mint-token` in development) and a local storage
directory; give them as options or environment variables. Commands that read or edit
annotations download the document first if needed and work offline afterwards."""

_EPILOG = """\
examples:
  export LAYERSYNC_SERVER=http://127.0.0.1:8000 LAYERSYNC_JWT=@token.jwt
  layersync download                                # PDF + layer, with a progress bar
  layersync annotations list --page 0 --type pspdfkit/note
  layersync annotations add '{"type": "pspdfkit/note", "pageIndex": 0, "bbox": [10, 10, 24, 24],
                             "text": {"format": "plain", "value": "hello"}}'
  layersync annotations update 01JC0… '{"text": {"format": "plain", "value": "edited"}}'
  layersync annotations rm 01JC0…
  layersync annotations search "zebra cross" --json   # full-text, offline
  layersync comments add 01JC0… "Looks good" --creator alice
  layersync comments list 01JC0…
  layersync attachments add photo.png                # prints the id (SHA-256), uploads it
  layersync attachments get 3f2a… -o photo.png       # downloads it if needed
  layersync history 01JC0…                           # versions the server keeps
  layersync rollback 01JC0… 3                        # make revision 3 current again
  layersync deleted                                  # deleted records (server)
  layersync restore 01JC0…
  layersync sync                                    # two-way: send pending edits, receive others'
  layersync rejected                                # local changes the server refused; --ack-all clears
  layersync listen --json | jq .                    # one JSON line per change until Ctrl-C
  layersync status --json
  layersync default-group review                    # new annotations go to group "review"
  layersync export -o layer.json                    # Instant JSON of the local layer
  layersync xfdf export -o layer.xfdf               # ... as XFDF; `xfdf import FILE` applies one

environment:
  LAYERSYNC_SERVER, LAYERSYNC_JWT (a JWT or @FILE), LAYERSYNC_STORAGE (default
  $XDG_DATA_HOME/layersync or ~/.local/share/layersync), LAYERSYNC_LIBRARY (path of
  liblayersync.so; default: the copy bundled in the package, then the system).

`status` counts pending local changes and shows when the layer last finished a sync
(`last_sync`, local time; in --json `last_sync_time`, seconds since the Unix epoch, null if never).

exit status:
""" + "\n".join(f"  {code:<4}{text}" for code, text in EXIT_CODES.items())


class _UsageError(Exception):
    """Bad input detected after argument parsing (exit status 2)."""


def _version_text() -> str:
    text = f"layersync {_ffi.VERSION} (bindings ABI {_ffi.ABI_VERSION})"
    try:
        lib = get_library()
        text += f"; library {lib.layersync_version().decode()} at {getattr(lib, '_layersync_path', '?')}"
    except LibraryLoadError as exc:
        text += f"; library not loaded: {exc}"
    return text


class _VersionAction(argparse.Action):
    """``--version``: prints both versions; exits 1 when the library does not load, so that
    ``layersync --version`` doubles as an installation check."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        try:
            get_library()
            status = 0
        except LibraryLoadError:
            status = 1
        print(_version_text())
        parser.exit(status)


def _default_storage() -> str:
    if os.environ.get("LAYERSYNC_STORAGE"):
        return os.environ["LAYERSYNC_STORAGE"]
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "layersync")


def _common_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connection")
    g.add_argument("--server", metavar="URL", default=os.environ.get("LAYERSYNC_SERVER"),
                   help="sync server base URL (env LAYERSYNC_SERVER)")
    g.add_argument("--jwt", metavar="JWT|@FILE", default=os.environ.get("LAYERSYNC_JWT"),
                   help="JWT granting the document and layer, or @FILE to read it (env LAYERSYNC_JWT)")
    g.add_argument("--storage", metavar="DIR", default=_default_storage(),
                   help="local storage directory (env LAYERSYNC_STORAGE; default %(default)s)")
    g.add_argument("--allow-insecure-http", action="store_true",
                   help="allow plain http:// to a non-loopback host")
    g.add_argument("--timeout", metavar="S", type=float, default=120.0,
                   help="seconds to wait for the server per step (default %(default)s)")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="machine-readable JSON on stdout (and errors on stderr)")
    o.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="show progress bars even when stderr is not a terminal")
    o.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    o.add_argument("-v", "--verbose", action="store_true", help="log the library's events to stderr")
    return p


def _read_file_argument(value: str, what: str) -> str:
    """The UTF-8 text of the file an ``@FILE`` argument names; a usage error naming ``what``
    when it can not be read."""
    try:
        return Path(value[1:]).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _UsageError(f"cannot read {what}: {exc}") from None


def _json_arg(text: str) -> Any:
    if text == "-":
        text = sys.stdin.read()
    elif text.startswith("@"):
        text = _read_file_argument(text, "the JSON file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        try:  # a file name given without its @
            hint = f" (to read the file, write @{text})" if len(text) < 4096 and Path(text).is_file() else ""
        except (OSError, ValueError):  # name too long, NUL byte
            hint = ""
        raise _UsageError(f"not JSON: {exc}{hint}") from None


def build_parser() -> argparse.ArgumentParser:
    """The ``argparse`` parser of the ``layersync`` command."""
    common = _common_options()
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="layersync", description=_DESCRIPTION, epilog=_EPILOG,
                                     formatter_class=fmt)
    parser.add_argument("--version", action=_VersionAction,
                        help="print the bindings' and the library's versions; exit 1 if the library cannot be loaded")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(sp: Any, name: str, help_text: str, epilog: str = "") -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sp.add_parser(name, parents=[common], help=help_text,
                                                   description=help_text, epilog=epilog or None,
                                                   formatter_class=fmt)
        return p

    add(sub, "download", "download the document's PDF and layer (prints the PDF's local path)",
        "example:\n  layersync download --server URL --jwt @token.jwt")
    add(sub, "sync", "run a two-way sync cycle: send pending local edits, receive server changes",
        "output (--json): the status (`layersync status`) and \"rejected\": [{\"report_id\", \"id\",\n"
        "  \"reason\", \"code\"}], the changes of this sync the server refused (exit status 6 if any)\n"
        "example:\n  layersync sync --json   # {\"state\": \"CLEAN\", \"pending_changes\": false, ...}")
    add(sub, "listen", "print server changes live until Ctrl-C (exit status 130)",
        "output: one line per created/updated/deleted annotation; with --json one object per\n"
        "event: {\"event\": \"changes\", \"created\": [ids], \"updated\": [ids], \"deleted\": [ids], \"time\": ISO-8601}\n"
        "example:\n  layersync listen --json | jq -r .created[]")
    add(sub, "status", "show the local state: downloaded, sync state, pending changes, last sync, annotation count",
        "output (--json): {\"document_id\", \"layer\", \"user_id\", \"downloaded\", \"state\",\n"
        "  \"pending_changes\": bool, \"pending_change_count\": int,\n"
        "  \"last_sync_time\": seconds since the Unix epoch or null (never synced), \"pdf_path\"?, \"annotations\"?}\n"
        "The human form shows last_sync as local time, or \"never\".\n"
        "example:\n  layersync status --json | jq .pending_change_count")
    p = add(sub, "default-group", "show or set the group new annotations get (collaboration permissions)",
            "Without arguments prints the current default group (the override, else the JWT's\n"
            "default_group; empty when none). NAME overrides it for this document (kept in the local\n"
            "store, Instant's overrideDefaultGroup); --reset goes back to the JWT's (resetDefaultGroup).\n"
            "output (--json): {\"default_group\": NAME or null}\n"
            "example:\n  layersync default-group review\n  layersync default-group --reset")
    p.add_argument("name", metavar="NAME", nargs="?", help="the group to use from now on")
    p.add_argument("--reset", action="store_true", help="go back to the JWT's default_group")
    p = add(sub, "export", "write the local layer as an Instant JSON document",
            f"output: {{\"format\": \"{INSTANT_JSON_FORMAT}\", \"annotations\": [Instant JSON v2 ...]}}\n"
            "example:\n  layersync export -o layer.json")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    xf = sub.add_parser("xfdf", help="write the local layer as XFDF, or apply XFDF to it as local edits",
                        description="XFDF (ISO 19444-1), as Acrobat, Apryse and Foxit exchange annotations; "
                                    "the mapping is the server's (docs/protocol.md, \"XFDF and Instant JSON\").")
    xsub = xf.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = add(xsub, "export", "write the local layer (annotations, comments as replies, form field values) as XFDF",
            "example:\n  layersync xfdf export -o layer.xfdf")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p = add(xsub, "import", "apply an XFDF document (plain or <add>/<modify>/<delete> commands) as local edits, "
                           "then sync them",
            "output (--json): {\"created\", \"updated\", \"deleted\": the local edits the file made,\n"
            "  \"synced\": bool (false with --no-sync: the edits are queued, sent by the next sync),\n"
            "  \"rejected\": [{\"report_id\", \"id\", \"reason\", \"code\"}] the server refused}\n"
            "Exit status 6 when the server rejected any of them (their server versions are kept);\n"
            "`layersync rejected` lists the reports.\n"
            "example:\n  layersync xfdf import review.xfdf")
    p.add_argument("file", metavar="FILE|-", help="XFDF file, or - for stdin")
    p.add_argument("--no-sync", action="store_true", help="only store the edits locally (they stay pending)")

    ann = sub.add_parser("annotations", help="list, read, add, update or remove annotations",
                         description="Annotations of the local layer (Instant JSON v2 objects). "
                                     "Edits are stored durably, then synced (unless --no-sync).")
    asub = ann.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = add(asub, "list", "list annotations (a table, or a JSON array with --json)",
            "example:\n  layersync annotations list --page 0 --type pspdfkit/ink --json")
    p.add_argument("--page", metavar="N", type=int, help="only this page index (0-based)")
    p.add_argument("--type", metavar="TYPE", help="only this Instant JSON type, e.g. pspdfkit/note")
    p.add_argument("--creator", metavar="NAME", help="only this creatorName")
    p.add_argument("--limit", metavar="N", type=int, help="at most N annotations")
    p.add_argument("--offset", metavar="N", type=int, help="skip the first N annotations")
    p = add(asub, "get", "print one annotation as JSON",
            "example:\n  layersync annotations get 01JC0ZQ4W5Y1G8KX0J5S6ZB1QK")
    p.add_argument("id", help="annotation id")
    p = add(asub, "add", "create an annotation and sync it (prints its id, or the stored JSON with --json)",
            "example:\n  layersync annotations add @note.json\n"
            "  echo '{\"type\": \"pspdfkit/note\", \"pageIndex\": 0, \"bbox\": [1, 1, 24, 24]}' | layersync annotations add -")
    p.add_argument("annotation", metavar="JSON|@FILE|-", help="Instant JSON annotation (a missing id is generated)")
    p.add_argument("--no-sync", action="store_true", help="only store it locally (it stays pending)")
    p = add(asub, "update", "change an annotation: the JSON object's keys replace the stored ones",
            "example:\n  layersync annotations update 01JC0… '{\"text\": {\"format\": \"plain\", \"value\": \"new\"}}'")
    p.add_argument("id", help="annotation id")
    p.add_argument("changes", metavar="JSON|@FILE|-", help="JSON object of top-level keys to replace")
    p.add_argument("--no-sync", action="store_true", help="only store it locally (it stays pending)")
    p = add(asub, "rm", "delete annotations (and their comments)",
            "example:\n  layersync annotations rm 01JC0… 01JC1…")
    p.add_argument("ids", metavar="id", nargs="+", help="annotation id")
    p.add_argument("--no-sync", action="store_true", help="only delete locally (it stays pending)")
    p = add(asub, "search", "full-text search of the local layer (works offline), best match first",
            "Each word must occur as a word prefix (case- and accent-insensitive).\n"
            "example:\n  layersync annotations search zeb cross --limit 5 --json")
    p.add_argument("words", metavar="WORD", nargs="+", help="words to find")
    p.add_argument("--limit", metavar="N", type=int, help="at most N results (default 100)")

    com = sub.add_parser("comments", help="list or add comments of an annotation",
                         description="Comments (pspdfkit/comment records) of a root annotation.")
    csub = com.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = add(csub, "list", "list the comments of an annotation, oldest first",
            "example:\n  layersync comments list 01JC0… --json")
    p.add_argument("root_id", metavar="ROOT_ID", help="id of the annotation")
    p = add(csub, "add", "add a comment to an annotation and sync it (prints its id, or the stored JSON with --json)",
            "example:\n  layersync comments add 01JC0… 'Looks good 👍' --creator alice\n"
            "  layersync comments add 01JC0… --data '{\"text\": {\"format\": \"plain\", \"value\": \"hi\"}}'")
    p.add_argument("root_id", metavar="ROOT_ID", help="id of the annotation")
    p.add_argument("text", metavar="TEXT", nargs="?", help="plain text of the comment")
    p.add_argument("--data", metavar="JSON|@FILE|-", help="the comment as Instant JSON instead of TEXT")
    p.add_argument("--creator", metavar="NAME", help="creatorName")
    p.add_argument("--no-sync", action="store_true", help="only store it locally (it stays pending)")

    att = sub.add_parser("attachments", help="add or get attachments (images, files)",
                         description="Attachments: bytes referenced by records (imageAttachmentId, ...).")
    tsub = att.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = add(tsub, "add", "store a file as an attachment and upload it (prints its id, the SHA-256)",
            "output (--json): {\"attachment_id\", \"content_type\", \"size_bytes\"}\n"
            "example:\n  layersync attachments add photo.png\n  cat x.bin | layersync attachments add - --content-type application/octet-stream")
    p.add_argument("file", metavar="FILE|-", help="file to add, or - for stdin")
    p.add_argument("--content-type", metavar="TYPE", help="MIME type (default: guessed from FILE's name)")
    p.add_argument("--no-sync", action="store_true", help="only store it locally (uploaded by the next sync)")
    p = add(tsub, "get", "write an attachment's bytes to FILE or stdout, downloading it first if needed",
            "output (--json): {\"attachment_id\", \"content_type\", \"size_bytes\", \"path\"} with -o,\n"
            "  else also \"data_base64\"\n"
            "example:\n  layersync attachments get 3f2a… -o photo.png")
    p.add_argument("id", help="attachment id (64 hex digits)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--no-download", action="store_true", help="fail (exit 1, ATTACHMENT_NOT_LOADED) if not downloaded yet")

    p = add(sub, "history", "list the versions of an annotation the server keeps, newest first",
            "output (--json): [{\"id\", \"revision\", \"deleted\", \"content\"}]\n"
            "example:\n  layersync history 01JC0…")
    p.add_argument("id", help="annotation id")
    p = add(sub, "rollback", "make a kept version of an annotation its current one (on the server and locally)",
            "Exit status 1 with CONFLICT when the record changed on the server meanwhile: sync and retry.\n"
            "example:\n  layersync rollback 01JC0… 3 --json")
    p.add_argument("id", help="annotation id")
    p.add_argument("revision", type=int, help="a revision from `layersync history`")
    add(sub, "deleted", "list the layer's deleted annotations the server knows, oldest deletion first",
        "output (--json): [{\"id\", \"revision\", \"last_content\"}]\n"
        "example:\n  layersync deleted --json | jq -r .[].id")
    p = add(sub, "restore", "bring a deleted annotation back with its last content (on the server and locally)",
            "example:\n  layersync restore 01JC0…")
    p.add_argument("id", help="annotation id")
    p = add(sub, "rejected", "list the local changes the server rejected (conflict reports), or acknowledge them",
            "A change the server refuses (a conflict, a taken id, the collaboration permissions) is\n"
            "replaced by the server's version and a report is kept until acknowledged. Reads the\n"
            "local store only.\n"
            "output (--json): [{\"report_id\", \"change_id\", \"id\", \"reason\", \"code\", \"local\",\n"
            "  \"server\", \"delivered\"}], oldest first; with --ack/--ack-all {\"acknowledged\": [report ids]}\n"
            "example:\n  layersync rejected\n  layersync rejected --ack-all")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ack", metavar="REPORT_ID", nargs="+", help="acknowledge (delete) these reports")
    g.add_argument("--ack-all", action="store_true", help="acknowledge every listed report")
    return parser


# ---------------------------------------------------------------------------------------


class _Output:
    def __init__(self, args: argparse.Namespace) -> None:
        self.json = bool(args.json)
        wanted = args.progress
        self.progress = (not self.json and sys.stderr.isatty()) if wanted is None else bool(wanted)

    def data(self, value: Any, human: str | None = None) -> None:
        if self.json or human is None:
            sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=None if self.json else 2) + "\n")
        else:
            sys.stdout.write(human + "\n")
        sys.stdout.flush()

    def note(self, text: str) -> None:
        if not self.json:
            print(text, file=sys.stderr, flush=True)


def _tqdm() -> Any:
    """tqdm's class, imported on first use (the CLI's only dependency)."""
    return importlib.import_module("tqdm").tqdm


def _read_jwt(value: str | None) -> str:
    if not value:
        raise _UsageError("a JWT is required: --jwt JWT|@FILE or LAYERSYNC_JWT")
    if value.startswith("@"):
        return _read_file_argument(value, "the JWT file").strip()
    return value.strip()


def _open(args: argparse.Namespace) -> tuple[Client, Document]:
    if not args.server:
        raise _UsageError("a server URL is required: --server URL or LAYERSYNC_SERVER")
    jwt = _read_jwt(args.jwt)
    client = Client(args.server, args.storage, allow_insecure_http=args.allow_insecure_http,
                    sync_delay_s=None)  # the CLI syncs explicitly
    try:
        return client, client.document_for_jwt(jwt)
    except BaseException:
        client.close()
        raise


def _wait_validated(client: Client, timeout: float) -> None:
    client.wait_validated(timeout=timeout)


def _download(client: Client, doc: Document, out: _Output, timeout: float) -> bool:
    """Downloads unless already downloaded; returns whether it downloaded."""
    if doc.is_downloaded:
        return False
    _wait_validated(client, timeout)
    bar: Any = None
    if out.progress:
        bar = _tqdm()(total=None, unit="B", unit_scale=True, unit_divisor=1024,
                      desc=f"download {doc.id}", file=sys.stderr, dynamic_ncols=True)

    def progress(done: int, total: int) -> None:
        if bar is None:
            return
        if total > 0 and bar.total != total:
            bar.total = total
            bar.refresh()
        bar.update(done - bar.n)

    try:
        doc.download(wait=True, timeout=timeout, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    return True


def _sync(client: Client, doc: Document, out: _Output, timeout: float) -> None:
    """One sync cycle; a status line appears if it takes longer than half a second."""
    bar: Any = None
    remove: Callable[[], None] | None = None
    if out.progress:
        bar = _tqdm()(total=None, desc=f"sync {doc.id}", file=sys.stderr, delay=0.5,
                      bar_format="{desc} [{elapsed}]")

        def on_state(d: Document, state: Any) -> None:
            if d is doc:
                name = getattr(state, "name", str(state)).lower().replace("_", " ")
                bar.set_description_str(f"sync {doc.id}: {name}")
        remove = client.on("did_change_sync_state", on_state)
    try:
        doc.sync(wait=True, timeout=timeout)
    finally:
        if remove is not None:
            remove()
        if bar is not None:
            bar.close()


def _pending_count(client: Client, doc: Document) -> int | None:
    """The number of queued local changes of ``doc``'s layer (from the local store)."""
    for layer in client.local_documents().get(doc.id, []):
        if layer.get("layer_name") == doc.layer_name and not layer.get("locked"):
            return int(layer.get("pending_changes") or 0)
    return None


def _status(doc: Document) -> dict[str, Any]:
    status: dict[str, Any] = {
        "document_id": doc.id, "layer": doc.layer_name, "user_id": doc.user_id,
        "downloaded": doc.is_downloaded, "state": doc.state.name,
        "pending_changes": doc.has_unsynced_changes,
        "pending_change_count": _pending_count(doc.client, doc) if doc.is_downloaded else 0,
        "last_sync_time": doc.last_sync_time,
    }
    if doc.is_downloaded:
        status["pdf_path"] = doc.pdf_path
        status["annotations"] = len(doc.list_annotations())
    return status


def _sync_after_edit(client: Client, doc: Document, out: _Output, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Syncs the edit just made (unless ``--no-sync``). Returns the conflict reports the sync
    stored (``Document.rejected_changes`` not there before: the changes the server refused),
    ``[{"report_id", "id", "reason", "code"}]``; the caller reports them (:func:`_rejected_exit`)."""
    if args.no_sync:
        return []
    try:
        return _sync_rejected(client, doc, out, args.timeout)
    except (RequestFailedError, TimeoutError):
        out.note("layersync: the edit is stored locally and pending; it is sent by the next `layersync sync`")
        raise


def _sync_rejected(client: Client, doc: Document, out: _Output, timeout: float) -> list[dict[str, Any]]:
    """:func:`_sync`, then the conflict reports it stored: ``[{"report_id", "id", "reason",
    "code"}]``, the changes the server refused (reports already stored before are not its;
    a report another process's sync of this layer stored meanwhile can not be: one process
    owns a layer's store, rules.md rule 8)."""
    before = {r.get("report_id") for r in doc.rejected_changes()}
    _sync(client, doc, out, timeout)
    return [{k: r.get(k) for k in ("report_id", "id", "reason", "code")}
            for r in doc.rejected_changes() if r.get("report_id") not in before]


def _rejected_exit(out: _Output, rejected: list[dict[str, Any]], in_output: bool = False) -> int:
    """Tells what the server refused (stderr: a count by reason and one line per record;
    with --json one object ``{"rejected": [...]}``, unless ``in_output``: the command's JSON
    output carries them) and gives the exit status: EXIT_REJECTED when anything was, else
    EXIT_OK."""
    if not rejected:
        return EXIT_OK
    if out.json and in_output:
        return EXIT_REJECTED
    if out.json:
        print(json.dumps({"rejected": rejected}, ensure_ascii=False), file=sys.stderr, flush=True)
        return EXIT_REJECTED
    reasons = [str(r.get("reason") or "conflict") for r in rejected]
    by_reason = ", ".join(f"{n} {reason}" for reason, n in collections.Counter(reasons).items())
    noun = "change" if len(rejected) == 1 else "changes"
    print(f"layersync: the server rejected {len(rejected)} {noun} ({by_reason}); its versions are kept "
          "(`layersync rejected` lists the reports, `--ack-all` clears them):", file=sys.stderr)
    for r, reason in list(zip(rejected, reasons))[:20]:
        print(f"  {r.get('id')}: {reason}", file=sys.stderr)
    if len(rejected) > 20:
        print(f"  ... and {len(rejected) - 20} more", file=sys.stderr)
    sys.stderr.flush()
    return EXIT_REJECTED


def _short(value: Any) -> str:
    text = value.get("value", "") if isinstance(value, dict) else str(value or "")
    text = " ".join(str(text).split())
    return text if len(text) <= 40 else text[:39] + "…"


def _grid(headers: Sequence[str], rows: Sequence[Sequence[str]], noun: str) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in [headers, *rows]]
    plural = noun + ("es" if noun.endswith(("s", "ch", "sh", "x")) else "s")
    lines.append(f"{len(rows)} {noun if len(rows) == 1 else plural}")
    return "\n".join(lines)


def _table(items: list[dict[str, Any]], noun: str = "annotation") -> str:
    rows = [(str(a.get("id", "")), str(a.get("type", "")), str(a.get("pageIndex", "")),
             str(a.get("creatorName") or ""), _short(a.get("text") or a.get("contents")))
            for a in items]
    return _grid(("ID", "TYPE", "PAGE", "CREATOR", "TEXT"), rows, noun)


def _content_text(record: Any) -> str:
    return _short(record.get("text") or record.get("contents")) if isinstance(record, dict) else ""


def _attachments(client: Client, doc: Document, out: _Output, args: argparse.Namespace) -> int:
    if args.action == "add":
        if args.file == "-":
            data = sys.stdin.buffer.read()
            name = ""
        else:
            try:
                data = Path(args.file).read_bytes()
            except OSError as exc:
                raise _UsageError(f"cannot read {args.file}: {exc}") from None
            name = args.file
        ctype = args.content_type or (mimetypes.guess_type(name)[0] if name else None) or "application/octet-stream"
        att_id = doc.add_attachment(data, ctype)
        out.data({"attachment_id": att_id, "content_type": ctype, "size_bytes": len(data)}, att_id)
        return _rejected_exit(out, _sync_after_edit(client, doc, out, args))
    try:
        att = doc.attachment(args.id)
    except AttachmentNotLoadedError:
        if args.no_download:
            raise
        _wait_validated(client, args.timeout)
        doc.download_attachment(args.id, timeout=args.timeout)
        att = doc.attachment(args.id)
    meta: dict[str, Any] = {"attachment_id": att.id, "content_type": att.content_type,
                            "size_bytes": len(att.data), "path": args.output}
    if args.output:
        Path(args.output).write_bytes(att.data)
        out.note(f"wrote {len(att.data)} bytes ({att.content_type}) to {args.output}")
        if out.json:
            out.data(meta)
    elif out.json:
        out.data({**meta, "data_base64": base64.b64encode(att.data).decode("ascii")})
    else:
        sys.stdout.buffer.write(att.data)
        sys.stdout.flush()
    return EXIT_OK


def _history_commands(client: Client, doc: Document, out: _Output, args: argparse.Namespace) -> int:
    _wait_validated(client, args.timeout)
    if args.command == "history":
        versions = doc.annotation_history(args.id, timeout=args.timeout)
        rows: list[tuple[str, ...]] = [(str(v.get("revision", "")), "yes" if v.get("deleted") else "", _content_text(v.get("content")))
                for v in versions]
        out.data(versions, _grid(("REVISION", "DELETED", "TEXT"), rows, "version"))
    elif args.command == "rollback":
        record = doc.rollback_annotation(args.id, args.revision, timeout=args.timeout)
        out.data(record, str(record.get("id", args.id)))
    elif args.command == "deleted":
        items = doc.list_deleted_annotations(timeout=args.timeout)
        rows = [(str(d.get("id", "")), str(d.get("revision", "")),
                 str((d.get("last_content") or {}).get("type", "")), _content_text(d.get("last_content")))
                for d in items]
        out.data(items, _grid(("ID", "REVISION", "TYPE", "TEXT"), rows, "deleted annotation"))
    else:  # restore
        record = doc.restore_annotation(args.id, timeout=args.timeout)
        out.data(record, str(record.get("id", args.id)))
    return EXIT_OK


def _listen(client: Client, doc: Document, out: _Output) -> int:
    """Prints changes until Ctrl-C (KeyboardInterrupt, handled by main) or an auth failure."""
    since = client.mark()
    doc.start_listening()
    out.note(f"listening for changes to {doc.id} layer {doc.layer_name!r} (Ctrl-C to stop)")
    if out.json:  # tells scripts (and tests) that the long-poll runs
        print(json.dumps({"event": "listening", "document_id": doc.id, "layer": doc.layer_name}),
              file=sys.stderr, flush=True)
    names = ("did_receive_changes", "did_reject_changes", "did_fail_authentication")
    while True:
        event: Event = client.wait_for(names, since=since, document=doc, timeout=None)
        since = event.seq
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime())
        if event.name == "did_fail_authentication":
            raise event.args[0] if isinstance(event.args[0], LayerSyncError) else AccessDeniedError("JWT rejected")
        if event.name == "did_reject_changes":
            rejected = event.args[0] if isinstance(event.args[0], list) else []
            if out.json:
                out.data({"event": "rejected", "changes": rejected, "time": stamp})
            else:
                for r in rejected:
                    out.data(None, f"{stamp} rejected {r.get('id')} ({r.get('reason', 'conflict')}): server version kept")
            continue
        changes = event.args[0] if isinstance(event.args[0], dict) else {}
        if out.json:
            out.data({"event": "changes", "created": changes.get("created", []),
                      "updated": changes.get("updated", []), "deleted": changes.get("deleted", []),
                      "time": stamp})
            continue
        for kind in ("created", "updated", "deleted"):
            for ann_id in changes.get(kind, []):
                detail = ""
                if kind != "deleted":
                    try:
                        a = doc.get_annotation(ann_id)
                        detail = f" {a.get('type', '')} page {a.get('pageIndex', '?')} {_short(a.get('text'))}".rstrip()
                    except LayerSyncError:
                        pass
                out.data(None, f"{stamp} {kind} {ann_id}{detail}")


def _run(args: argparse.Namespace, out: _Output) -> int:
    client, doc = _open(args)
    with client:
        if args.command == "status":
            status = _status(doc)
            width = max(len(k) for k in status) + 2
            shown = dict(status)
            when = shown.pop("last_sync_time")
            shown["last_sync"] = "never" if when is None else time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(when))
            if not shown.get("layer"):
                shown["layer"] = "(default)"  # the default layer's name is empty (--json keeps "")
            width = max(len(k) for k in shown) + 2
            human = "\n".join(f"{k:<{width}}{'' if v is None else v}" for k, v in shown.items())
            out.data(status, human)
            return EXIT_OK
        if args.command == "default-group":
            if args.reset and args.name is not None:
                raise _UsageError("give NAME or --reset, not both")
            if args.reset or args.name is not None:
                doc.default_group = None if args.reset else args.name
            group = doc.default_group
            out.data({"default_group": group}, group or "")
            return EXIT_OK
        if args.command == "rejected":
            return _rejected(doc, out, args)
        if args.command == "xfdf":
            _xfdf_codec()  # a missing layersync-formats is told before any download
        downloaded_now = _download(client, doc, out, args.timeout)
        if args.command == "download":
            if not downloaded_now:
                out.note(f"layersync: {doc.id} is already downloaded")
            out.data({"document_id": doc.id, "layer": doc.layer_name, "pdf_path": doc.pdf_path,
                      "downloaded": downloaded_now}, doc.pdf_path)
            return EXIT_OK
        if args.command == "sync":
            _wait_validated(client, args.timeout)
            rejected = _sync_rejected(client, doc, out, args.timeout)
            status = _status(doc)
            out.data({**status, "rejected": rejected},
                     f"synced {doc.id}: {status['state']}, {status['annotations']} annotations")
            return _rejected_exit(out, rejected, in_output=True)
        if args.command == "listen":
            return _listen(client, doc, out)
        if args.command in ("history", "rollback", "deleted", "restore"):
            return _history_commands(client, doc, out, args)
        if args.command == "attachments":
            return _attachments(client, doc, out, args)
        if args.command == "comments":
            if args.action == "list":
                comments = doc.list_comments(args.root_id)
                out.data(comments, _table(comments, "comment"))
                return EXIT_OK
            if (args.text is None) == (args.data is None):
                raise _UsageError("give the comment as TEXT or as --data JSON (exactly one)")
            body: Any = args.text
            if args.data is not None:
                body = _json_arg(args.data)
                if not isinstance(body, dict):
                    raise _UsageError("the comment must be a JSON object")
            comment = doc.create_comment(args.root_id, body, creator_name=args.creator)
            out.data(comment, str(comment.get("id")))
            return _rejected_exit(out, _sync_after_edit(client, doc, out, args))
        if args.command == "export":
            # An Instant JSON document holds the records' content (no ownership, no flags).
            document = {"format": INSTANT_JSON_FORMAT,
                        "annotations": [record_content(r) for r in doc.list_annotations()]}
            text = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
            if args.output:
                Path(args.output).write_text(text, "utf-8")
                out.note(f"wrote {len(document['annotations'])} annotations to {args.output}")
            else:
                sys.stdout.write(text)
            return EXIT_OK
        if args.command == "xfdf":
            return _xfdf(client, doc, out, args)
        # annotations
        if args.action == "list":
            items = doc.list_annotations(page_index=args.page, type=args.type, creator_name=args.creator,
                                         limit=args.limit, offset=args.offset)
            out.data(items, _table(items))
        elif args.action == "get":
            out.data(doc.get_annotation(args.id))
        elif args.action == "add":
            value = _json_arg(args.annotation)
            if not isinstance(value, dict):
                raise _UsageError("the annotation must be a JSON object")
            stored = doc.create_annotation(value)
            out.data(stored, str(stored.get("id")))
            return _rejected_exit(out, _sync_after_edit(client, doc, out, args))
        elif args.action == "update":
            changes = _json_arg(args.changes)
            if not isinstance(changes, dict):
                raise _UsageError("the changes must be a JSON object")
            current = doc.get_annotation(args.id)
            stored = doc.update_annotation({**current, **changes, "id": args.id})
            out.data(stored, str(stored.get("id")))
            return _rejected_exit(out, _sync_after_edit(client, doc, out, args))
        elif args.action == "search":
            found = doc.search_annotations(" ".join(args.words), limit=args.limit)
            out.data(found, _table(found, "match"))
        elif args.action == "rm":
            for ann_id in args.ids:
                doc.delete_annotation(ann_id)
            out.data({"deleted": args.ids}, "\n".join(args.ids))
            return _rejected_exit(out, _sync_after_edit(client, doc, out, args))
        return EXIT_OK


def _xfdf(client: Client, doc: Document, out: _Output, args: argparse.Namespace) -> int:
    if args.action == "export":
        text = doc.export_xfdf()
        if args.output:
            Path(args.output).write_text(text, "utf-8")
            out.note(f"wrote the layer as XFDF to {args.output}")
        else:
            sys.stdout.write(text)
        return EXIT_OK
    data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    counts = doc.import_xfdf(data)
    edits = ", ".join(f"{v} {k}" for k, v in counts.items())
    if args.no_sync:
        out.data({**counts, "synced": False, "rejected": []},
                 f"queued {edits} locally (pending: sent by the next `layersync sync`)")
        return EXIT_OK
    rejected = _sync_after_edit(client, doc, out, args)
    sent = sum(counts.values())
    human = f"synced {edits}" if not rejected else \
        f"{edits} locally; the server rejected {len(rejected)} of the {sent} changes sent"
    out.data({**counts, "synced": True, "rejected": rejected}, human)
    return _rejected_exit(out, rejected, in_output=True)


def _rejected(doc: Document, out: _Output, args: argparse.Namespace) -> int:
    """``layersync rejected``: lists the stored conflict reports, or acknowledges them."""
    reports = doc.rejected_changes()
    if args.ack or args.ack_all:
        ids = [r["report_id"] for r in reports] if args.ack_all else list(args.ack)
        doc.acknowledge_rejected_changes(ids)
        out.data({"acknowledged": ids}, f"acknowledged {len(ids)} report{'' if len(ids) == 1 else 's'}")
        return EXIT_OK
    rows = [(str(r.get("report_id", "")), str(r.get("id", "")), str(r.get("reason", "")), str(r.get("code", "")))
            for r in reports]
    out.data(reports, _grid(("REPORT", "ID", "REASON", "CODE"), rows, "rejected change"))
    return EXIT_OK


def _exit_code(exc: BaseException) -> int:
    if isinstance(exc, (RequestFailedError, TimeoutError)):
        return EXIT_NETWORK
    if isinstance(exc, (AccessDeniedError, InvalidJWTError, UserIDMismatchError)):
        return EXIT_AUTH
    if isinstance(exc, (NoSuchAnnotationError, NoSuchAttachmentError, InvalidDocumentError)):
        return EXIT_NOT_FOUND
    return EXIT_ERROR


def _jwt_hint(exc: BaseException, jwt: str | None) -> str | None:
    """For a malformed JWT given as is (not ``@FILE``) that looks like a file name, the
    hint to write ``@FILE``: when it names an existing file or has no dot at all (a JWT
    has two). None otherwise. The library's message stays as it is; the CLI adds this."""
    if not isinstance(exc, InvalidJWTError) or not jwt or jwt.startswith("@"):
        return None
    value = jwt.strip()
    try:
        is_file = len(value) < 4096 and Path(value).is_file()
    except (OSError, ValueError):  # name too long, NUL byte
        is_file = False
    if is_file:
        return f"to read the token from the file {value}, write @{value}"
    if "." not in value:
        return "to read the token from a file, write @FILE"
    return None


def _report(exc: BaseException, out_json: bool, stream: TextIO, hint: str | None = None) -> None:
    """Prints ``exc`` as one line (``layersync: ...``), or with --json one JSON object
    ``{"error": {...}}``; ``hint`` (what to do instead) is appended in parentheses, or is
    the object's ``"hint"``."""
    if out_json:
        body: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
        if isinstance(exc, LayerSyncError):
            body.update(code=exc.code, name=exc.code_name, message=exc.message,
                        http_status=exc.http_status or None, document_id=exc.document_id,
                        record_id=exc.record_id, attachment_id=exc.attachment_id)
        if hint:
            body["hint"] = hint
        print(json.dumps({"error": body}, ensure_ascii=False), file=stream, flush=True)
    else:
        text = f"layersync: {exc}" if isinstance(exc, LayerSyncError) else f"layersync: {type(exc).__name__}: {exc}"
        print(text + (f" ({hint})" if hint else ""), file=stream, flush=True)


def _usage_exit(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.error(message)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``layersync`` console script; returns the exit status
    (:data:`EXIT_CODES`). Usage errors exit through ``SystemExit(2)`` (argparse)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    out = _Output(args)
    try:
        return _run(args, out)
    except KeyboardInterrupt:
        out.note("layersync: interrupted")
        return EXIT_INTERRUPTED
    except _UsageError as exc:
        _usage_exit(parser, str(exc))
    except (LayerSyncError, LibraryLoadError, TimeoutError) as exc:
        _report(exc, out.json, sys.stderr, _jwt_hint(exc, args.jwt))
        return _exit_code(exc)
    except OSError as exc:  # e.g. export -o to an unwritable path
        _report(exc, out.json, sys.stderr)
        return EXIT_ERROR
    except ImportError as exc:
        if exc.name != "layersync_formats":  # the optional package (its message has the hint); not a bug's
            raise
        _report(exc, out.json, sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
