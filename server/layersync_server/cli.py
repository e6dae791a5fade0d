"""``layersync-server`` command line: serve, keygen, mint-token, upload, export.

Every ``serve`` flag can also come from ``LAYERSYNC_SERVER_<NAME>`` (see
:mod:`layersync_server.settings`); flags win. Exit status:

- 0 on success; for ``serve``: stopped cleanly by SIGTERM or SIGINT;
- 1 on other failures (message on stderr); for ``serve`` also a forced stop: requests
  still in flight at ``--shutdown-timeout-s`` (abandoned), a second SIGINT, or a stop
  the watchdog ended (error on stderr; see :mod:`layersync_server.server`);
- 2 on usage errors;
- 3 when ``serve`` fails in uvicorn's start-up (lifespan).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from layersync_server import __version__
from layersync_server.permissions import ClaimError, parse_claim
from layersync_server.settings import ENV_PREFIX, Settings
from layersync_server.tokens import SUPPORTED_ALGORITHMS, generate_keypair, mint_token


def _env(name: str, default=None):
    return os.environ.get(ENV_PREFIX + name, default)


def _admin_arguments(command: argparse.ArgumentParser) -> None:
    """``--url`` and ``--admin-token`` (default ``LAYERSYNC_SERVER_ADMIN_TOKEN``) of a command
    that talks to a running server's admin API."""
    command.add_argument("--url", required=True, help="server base URL")
    command.add_argument("--admin-token", default=_env("ADMIN_TOKEN"), required=_env("ADMIN_TOKEN") is None)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="layersync-server", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the sync server")
    serve.add_argument("--host", default=_env("HOST", "127.0.0.1"))
    serve.add_argument("--port", type=int, default=int(_env("PORT", "8787")),
                       help="TCP port; 0 picks a free one (default 8787)")
    serve.add_argument("--port-file", type=Path, default=_env("PORT_FILE"),
                       help="write the bound port to this file once ready")
    serve.add_argument("--config", type=Path, help="TOML config file (flags and environment win)")
    serve.add_argument("--db", help="SQLite file (default layersync.sqlite) or a PostgreSQL URL "
                                    "postgresql://user@host:port/db")
    serve.add_argument("--public-key", type=Path, help="PEM public key verifying client JWTs")
    serve.add_argument("--admin-token", help="secret of the admin API")
    serve.add_argument("--max-request-bytes", type=int)
    serve.add_argument("--max-wait-s", type=int)
    serve.add_argument("--max-upload-bytes", type=int)
    serve.add_argument("--history-versions", type=int, help="versions kept per record (default 20)")
    serve.add_argument("--jwt-leeway-s", type=int)
    serve.add_argument("--shutdown-timeout-s", type=float,
                       help="on SIGTERM/SIGINT, seconds requests in flight may take to finish "
                            "(default 5); parked long-polls answer at once; past it they "
                            "are abandoned and the exit status is 1")
    serve.add_argument("--admin-max-failures", type=int,
                       help="wrong admin secrets one client address may send per window before "
                            "429 (default 10; 0: no limit)")
    serve.add_argument("--admin-failure-window-s", type=float, help="that window, seconds (default 60)")
    serve.add_argument("--log-level", default=_env("LOG_LEVEL", "warning"))

    keygen = sub.add_parser("keygen", help="write private.pem and public.pem")
    keygen.add_argument("--out", type=Path, required=True, help="directory to write to")
    keygen.add_argument("--alg", choices=SUPPORTED_ALGORITHMS, default="ES256")

    mint = sub.add_parser("mint-token", help="print a client JWT")
    mint.add_argument("--private-key", type=Path, required=True)
    mint.add_argument("--document-id", required=True)
    mint.add_argument("--layer", help="layer name (default: the default layer)")
    mint.add_argument("--user-id")
    mint.add_argument("--permissions", nargs="*", help="e.g. read-document write download")
    mint.add_argument("--expires-in", type=int, default=3600, help="seconds (default 3600)")
    mint.add_argument("--alg", choices=SUPPORTED_ALGORITHMS)
    # Both flags add to one list, in the order given; the claim's entries are checked
    # before signing. A group or user id may hold a comma, so only the singular flag takes
    # every entry as it is.
    mint.add_argument("--collaboration-permission", dest="collaboration_permissions",
                      action="append", metavar="ENTRY",
                      help="one collaboration_permissions entry <content-type>:<action>:<scope>, "
                           "taken as it is (commas included, e.g. "
                           "'annotations:view:group=Smith, Jones'); repeatable")
    mint.add_argument("--collaboration-permissions", dest="collaboration_permissions",
                      action="extend", type=_comma_separated, metavar="ENTRIES",
                      help="collaboration_permissions entries, comma-separated (e.g. "
                           "annotations:view:all,annotations:edit:self); repeatable; an entry "
                           "holding a comma needs --collaboration-permission")
    mint.add_argument("--default-group", help="default_group claim: the group of new records")
    mint.add_argument("--creator-name", help="creator_name claim: forced as their creatorName")

    upload = sub.add_parser("upload", help="upload a PDF through the admin API")
    upload.add_argument("file", type=Path)
    _admin_arguments(upload)
    upload.add_argument("--document-id")
    upload.add_argument("--title")
    upload.add_argument("--xfdf", type=Path, metavar="FILE",
                        help="XFDF whose annotations replace the PDF's (Document Engine's 'attachment')")
    upload.add_argument("--keep-current-annotations", action="store_true",
                        help="with --xfdf: apply the XFDF over the PDF's own annotations")

    export = sub.add_parser("export", help="download a PDF with a layer's synced annotations written in "
                                           "(admin API), or its Instant JSON with --json, XFDF with --xfdf")
    export.add_argument("document_id")
    _admin_arguments(export)
    export.add_argument("--layer", default="", help="layer name (default: the default layer)")
    formats = export.add_mutually_exclusive_group()
    formats.add_argument("--json", action="store_true", help="the layer as Instant JSON instead of a PDF")
    formats.add_argument("--xfdf", action="store_true", help="the layer as XFDF (ISO 19444-1) instead of a PDF")
    export.add_argument("-o", "--output", type=Path, required=True, help="file to write ('-': stdout)")
    return parser


def _serve(args) -> int:
    # imports uvicorn; keep other commands light
    from layersync_server.server import FORCED_EXIT_STATUS, exit_now, serve
    settings = Settings.from_env(config_file=args.config, db_path=args.db,
                                 public_key_path=args.public_key,
                                 admin_token=args.admin_token,
                                 max_request_bytes=args.max_request_bytes,
                                 max_upload_bytes=args.max_upload_bytes,
                                 max_wait_s=args.max_wait_s,
                                 history_versions=args.history_versions,
                                 jwt_leeway_s=args.jwt_leeway_s,
                                 shutdown_timeout_s=args.shutdown_timeout_s,
                                 admin_max_failures=args.admin_max_failures,
                                 admin_failure_window_s=args.admin_failure_window_s)
    if serve(settings, host=args.host, port=args.port, port_file=args.port_file,
             log_level=args.log_level):
        return 0
    # Forced: worker threads may still run abandoned requests, and the interpreter's exit
    # would wait for them (the stop's watchdog is cancelled once serve() returns).
    exit_now(FORCED_EXIT_STATUS)
    return FORCED_EXIT_STATUS  # not reached


def _keygen(args) -> int:
    private_pem, public_pem = generate_keypair(args.alg)
    args.out.mkdir(parents=True, exist_ok=True)
    private_path, public_path = args.out / "private.pem", args.out / "public.pem"
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private_pem)
    public_path.write_bytes(public_pem)
    print(json.dumps({"alg": args.alg, "private_key": str(private_path),
                      "public_key": str(public_path)}))
    return 0


def _comma_separated(value: str) -> list[str]:
    """The entries of a ``--collaboration-permissions`` value: split on commas, each
    stripped, empty ones dropped (``""`` gives no entry: an empty claim)."""
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def _mint(args) -> int:
    collaboration = args.collaboration_permissions  # None: no claim (full access)
    try:
        parse_claim(collaboration)
        token = mint_token(args.private_key.read_bytes(), args.document_id, layer=args.layer,
                           user_id=args.user_id, permissions=args.permissions,
                           expires_in_s=args.expires_in, alg=args.alg,
                           collaboration_permissions=collaboration,
                           default_group=args.default_group, creator_name=args.creator_name)
    except ClaimError as exc:
        print(f"layersync-server mint-token: {exc}", file=sys.stderr)
        return 2
    print(token)
    return 0


def _admin_request(args, path: str, query: dict, **kwargs):
    """An admin API request (``Authorization: Token token="..."``, docs/protocol.md): the
    response's headers and body, or ``None`` after printing the server's error envelope
    (``code: message``) on stderr for an HTTP error status."""
    query = {k: v for k, v in query.items() if v}
    url = args.url.rstrip("/") + path + ("?" + urllib.parse.urlencode(query) if query else "")
    headers = {"Authorization": f'Token token="{args.admin_token}"', **kwargs.pop("headers", {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers, **kwargs)) as response:
            return response.headers, response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", "replace")
        try:
            error = json.loads(body)["error"]
            body = f"{error['code']}: {error['message']} (HTTP {exc.code})"
        except (ValueError, KeyError, TypeError):
            body = f"HTTP {exc.code}: {body}"
        print(f"layersync-server: {body}", file=sys.stderr)
        return None


def _multipart(parts: list[tuple[str, str | None, bytes]]) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body of ``(name, filename or None, bytes)`` parts, and its
    Content-Type."""
    boundary = "layersync-" + os.urandom(12).hex()
    chunks = []
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        chunks.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + data + b"\r\n")
    return b"".join(chunks) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def _upload(args) -> int:
    data, content_type = args.file.read_bytes(), "application/pdf"
    if args.xfdf is not None:  # Document Engine's multipart upload with an 'attachment'
        parts = [("file", args.file.name, data), ("attachment", args.xfdf.name, args.xfdf.read_bytes())]
        if args.keep_current_annotations:
            parts.append(("keep_current_annotations", None, b"true"))
        data, content_type = _multipart(parts)
    answer = _admin_request(args, "/api/documents", {"document_id": args.document_id, "title": args.title},
                            data=data, method="POST", headers={"Content-Type": content_type})
    if answer is None:
        return 1
    print(answer[1].decode("utf-8"))
    return 0


def _export(args) -> int:
    document = urllib.parse.quote(args.document_id, safe="")
    resource = "document.json" if args.json else "document.xfdf" if args.xfdf else "pdf"
    answer = _admin_request(args, f"/api/documents/{document}/{resource}", {"layer": args.layer})
    if answer is None:
        return 1
    headers, body = answer
    to_stdout = str(args.output) == "-"
    if to_stdout:
        sys.stdout.buffer.write(body)
        sys.stdout.buffer.flush()
    else:
        tmp = args.output.with_name(args.output.name + ".part")
        tmp.write_bytes(body)
        os.replace(tmp, args.output)  # never a half-written file under the final name
    report = headers.get("LayerSync-Export")  # kept/written/removed/skipped (PDF only)
    print(f"wrote {len(body)} bytes" + ("" if to_stdout else f" to {args.output}")
          + (f"; {report}" if report else ""), file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    handler = {"serve": _serve, "keygen": _keygen, "mint-token": _mint, "upload": _upload,
               "export": _export}[args.command]
    try:
        return handler(args)
    except (OSError, ValueError) as exc:
        print(f"layersync-server: {exc}", file=sys.stderr)
        return 1
