"""The ``layersync`` command: a small client for scripts and debugging.

    layersync --version
    layersync download          --server URL --storage DIR --jwt JWT
    layersync sync              --server URL --storage DIR --jwt JWT
    layersync annotations list  --server URL --storage DIR --jwt JWT [--page N] [--type T]
    layersync annotations add   --server URL --storage DIR --jwt JWT --json '{"type": ...}'

``--jwt`` may come from the environment variable ``LAYERSYNC_JWT`` and ``--server`` from
``LAYERSYNC_SERVER``. Output of ``annotations`` is JSON on stdout; progress and messages
go to stderr. Exit status: 0 success, 1 a LayerSync error, 2 usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from . import _ffi
from ._library import LibraryLoadError, get_library
from .client import Client, Document
from .errors import LayerSyncError


def _version_text() -> str:
    text = f"layersync {_ffi.VERSION} (bindings ABI {_ffi.ABI_VERSION})"
    try:
        lib = get_library()
        text += f"; library {lib.layersync_version().decode()} at {getattr(lib, '_layersync_path', '?')}"
    except LibraryLoadError as exc:
        text += f"; library not loaded: {exc}"
    return text


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", default=os.environ.get("LAYERSYNC_SERVER"),
                   help="sync server base URL (env LAYERSYNC_SERVER)")
    p.add_argument("--storage", required=True, help="local storage directory")
    p.add_argument("--jwt", default=os.environ.get("LAYERSYNC_JWT"), help="JWT (env LAYERSYNC_JWT)")
    p.add_argument("--allow-insecure-http", action="store_true",
                   help="allow http:// to a non-loopback host")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait per step (default 120)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="layersync", description="LayerSync command-line client")
    parser.add_argument("--version", action="version", version=_version_text())
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("download", help="download a document and its layer")
    _common(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("sync", help="run one two-way sync cycle")
    _common(p)

    ann = sub.add_parser("annotations", help="list or add annotations of the local layer")
    asub = ann.add_subparsers(dest="action", required=True)
    p = asub.add_parser("list", help="print the layer's annotations as a JSON array")
    _common(p)
    p.add_argument("--page", type=int, help="only this page index (0-based)")
    p.add_argument("--type", help="only this Instant JSON type, e.g. pspdfkit/note")
    p.add_argument("--creator", help="only this creatorName")
    p.add_argument("--limit", type=int)
    p.add_argument("--offset", type=int)
    p = asub.add_parser("add", help="create an annotation and sync it")
    _common(p)
    p.add_argument("--json", required=True, help="Instant JSON annotation, or @FILE")
    p.add_argument("--no-sync", action="store_true", help="only store it locally")
    return parser


def _open(args: argparse.Namespace) -> tuple[Client, Document]:
    if not args.server:
        raise SystemExit("layersync: --server (or LAYERSYNC_SERVER) is required")
    if not args.jwt:
        raise SystemExit("layersync: --jwt (or LAYERSYNC_JWT) is required")
    client = Client(args.server, args.storage, allow_insecure_http=args.allow_insecure_http)
    try:
        client.wait_validated(timeout=args.timeout)
        return client, client.document_for_jwt(args.jwt)
    except BaseException:
        client.close()
        raise


def _ensure_downloaded(doc: Document, timeout: float, show_progress: bool) -> None:
    if doc.is_downloaded:
        return
    bar: Any = None
    if show_progress:
        from tqdm import tqdm
        bar = tqdm(total=0, unit="B", unit_scale=True, desc=f"download {doc.id}", file=sys.stderr)

    def progress(done: int, total: int) -> None:
        if bar is None:
            return
        if total and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    try:
        doc.download(wait=True, timeout=timeout, progress=progress)
    finally:
        if bar is not None:
            bar.close()


def _run(args: argparse.Namespace) -> int:
    client, doc = _open(args)
    with client:
        if args.command == "download":
            _ensure_downloaded(doc, args.timeout, not args.no_progress)
            print(f"downloaded {doc.id} layer {doc.layer_name!r} to {doc.pdf_path}", file=sys.stderr)
            return 0
        _ensure_downloaded(doc, args.timeout, False)
        if args.command == "sync":
            doc.sync(wait=True, timeout=args.timeout)
            print(f"synced {doc.id}: state {doc.state.name}", file=sys.stderr)
            return 0
        if args.action == "list":
            items = doc.list_annotations(page_index=args.page, type=args.type, creator_name=args.creator,
                                         limit=args.limit, offset=args.offset)
            json.dump(items, sys.stdout, ensure_ascii=False, indent=2)
            sys.stdout.write("\n")
            return 0
        text = args.json
        if text.startswith("@"):
            with open(text[1:], encoding="utf-8") as f:
                text = f.read()
        stored = doc.create_annotation(json.loads(text))
        if not args.no_sync:
            doc.sync(wait=True, timeout=args.timeout)
        json.dump(stored, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``layersync`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except (LayerSyncError, LibraryLoadError, TimeoutError) as exc:
        print(f"layersync: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except json.JSONDecodeError as exc:
        print(f"layersync: --json is not JSON: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
