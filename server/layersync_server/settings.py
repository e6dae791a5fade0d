"""Server settings: one immutable dataclass, filled from a config file, the
environment and CLI flags (flags win over the environment, which wins over the file).

Environment variables are ``LAYERSYNC_SERVER_<FIELD>`` in upper case, e.g.
``LAYERSYNC_SERVER_DB``, ``LAYERSYNC_SERVER_PUBLIC_KEY``, ``LAYERSYNC_SERVER_ADMIN_TOKEN``,
``LAYERSYNC_SERVER_MAX_REQUEST_BYTES``. The config file (``--config`` or
``LAYERSYNC_SERVER_CONFIG``) is TOML whose keys are the field names (``db``,
``public_key`` and dashes are accepted too), at top level or under ``[server]``.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

ENV_PREFIX = "LAYERSYNC_SERVER_"

#: Highest and lowest wire-protocol versions this server speaks (``LayerSync-Protocol``).
PROTOCOL_MIN = 1
PROTOCOL_MAX = 2  # 2: the change stream (docs/protocol.md); 1 is still served


@dataclass(frozen=True)
class Settings:
    """Everything :func:`layersync_server.app.create_app` needs.

    Attributes:
        db_path: SQLite database file (created if missing), or a PostgreSQL URL
            (``postgresql://user@host:port/db``) to share one database between several
            server processes. ``":memory:"`` is not supported.
        public_key_path: PEM public key (RSA or EC) that verifies client JWTs. ``None``
            means every sync request is refused with 403.
        admin_token: secret of the admin API (``Authorization: Token token="..."``);
            ``None`` disables the admin API (403).
        max_request_bytes: largest accepted sync request body, bytes (413 above).
        max_upload_bytes: largest accepted admin PDF upload, bytes (413 above).
        max_page_records: page size cap of ``records``/``changes``/``sync``.
        max_wait_s: cap of the long-poll ``wait`` parameter, seconds.
        jwt_leeway_s: clock skew tolerated on ``exp``, seconds.
        history_versions: versions kept per record for history/rollback/restore.
        shutdown_timeout_s: on SIGTERM/SIGINT, how long requests in flight (a sync
            commit, an upload) may take to finish, seconds; parked long-polls answer at
            once and idle connections close at once (how long a stop takes:
            :mod:`layersync_server.server`). Past it the remaining requests are
            cancelled (answered 500 or cut) and the stop counts as forced (exit status
            1); if the server has still not stopped
            :data:`~layersync_server.server.EXIT_GRACE_S` later, the process exits
            without waiting for its worker threads (server.py).
        protocol_min / protocol_max: supported ``LayerSync-Protocol`` range.
        stream_heartbeat_s: a change stream silent this long gets a heartbeat, seconds.
        stream_stall_s: a change stream whose client is gone (no TCP acknowledgement,
            or nothing of what is written leaves the server's buffer) is closed within
            this many seconds; ``None`` = twice ``stream_heartbeat_s`` (stream.py).
        stream_queue_pages: pages queued per stream subscription before they are
            replaced by one ``notice`` (a client that does not read).
        max_stream_subscriptions: subscriptions one stream may hold (429 past it).
        admin_max_failures / admin_failure_window_s: a client address that sent this many
            wrong admin secrets (admin API, dashboard) within this many seconds gets 429
            ``too_many_attempts`` until the oldest of them is that old
            (:class:`~layersync_server.auth.AdminSecretGuard`); 0 failures: no limit.
    """

    db_path: Path | str = Path("layersync.sqlite")
    public_key_path: Path | None = None
    admin_token: str | None = None
    max_request_bytes: int = 4 * 1024 * 1024
    max_upload_bytes: int = 256 * 1024 * 1024
    max_page_records: int = 1000
    max_wait_s: int = 60
    jwt_leeway_s: int = 30
    history_versions: int = 20
    shutdown_timeout_s: float = 5.0
    protocol_min: int = PROTOCOL_MIN
    protocol_max: int = PROTOCOL_MAX
    stream_heartbeat_s: float = 15.0
    stream_stall_s: float | None = None
    stream_queue_pages: int = 64
    max_stream_subscriptions: int = 1000
    admin_max_failures: int = 10
    admin_failure_window_s: float = 60.0

    def __post_init__(self) -> None:
        if not 0 <= self.shutdown_timeout_s < float("inf"):
            raise ValueError(f"shutdown_timeout_s must be a finite number >= 0, "
                             f"not {self.shutdown_timeout_s!r}")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides) -> "Settings":
        """Build settings from ``LAYERSYNC_SERVER_*`` variables, then ``overrides``.

        Overrides whose value is ``None`` are ignored so CLI flags that were not given
        fall through to the environment and then to the defaults.

        Raises:
            ValueError: a number does not parse, or ``shutdown_timeout_s`` is negative.
        """
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        config_file = overrides.pop("config_file", None) or environ.get(ENV_PREFIX + "CONFIG")
        if config_file:
            values.update(load_config_file(Path(config_file)))
        for field in dataclasses.fields(cls):
            raw = environ.get(ENV_PREFIX + field.name.upper())
            if field.name == "db_path" and raw is None:
                raw = environ.get(ENV_PREFIX + "DB", environ.get(ENV_PREFIX + "DATABASE_URL"))
            if field.name == "public_key_path" and raw is None:
                raw = environ.get(ENV_PREFIX + "PUBLIC_KEY")
            if raw is not None:
                values[field.name] = _convert(field.name, raw)
        for name, value in overrides.items():
            if value is not None:
                values[name] = _convert(name, value) if isinstance(value, str) else value
        return cls(**values)


_ALIASES = {"db": "db_path", "database": "db_path", "database_url": "db_path",
            "public_key": "public_key_path"}


def load_config_file(path: Path) -> dict[str, object]:
    """Settings from a TOML file (see module docs).

    Raises:
        ValueError: unknown key, bad value or not TOML. OSError: unreadable.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    data = data.get("server", data)
    names = {f.name for f in dataclasses.fields(Settings)}
    values: dict[str, object] = {}
    for key, value in data.items():
        name = _ALIASES.get(key.replace("-", "_"), key.replace("-", "_"))
        if name not in names:
            raise ValueError(f"{path}: unknown setting {key!r}")
        values[name] = _convert(name, str(value)) if not isinstance(value, bool) else value
    return values


def _convert(name: str, raw: str) -> object:
    if name == "db_path":
        return raw if raw.startswith(("postgres://", "postgresql://")) else Path(raw)
    if name == "public_key_path":
        return Path(raw)
    if name == "admin_token":
        return raw
    if name in _FLOAT_FIELDS:
        return float(raw)
    return int(raw)


_FLOAT_FIELDS = {"shutdown_timeout_s", "stream_heartbeat_s", "stream_stall_s", "admin_failure_window_s"}
