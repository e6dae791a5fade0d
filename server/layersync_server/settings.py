"""Server settings: one immutable dataclass, filled from CLI flags or environment.

Environment variables are ``LAYERSYNC_SERVER_<FIELD>`` in upper case, e.g.
``LAYERSYNC_SERVER_DB``, ``LAYERSYNC_SERVER_PUBLIC_KEY``, ``LAYERSYNC_SERVER_ADMIN_TOKEN``,
``LAYERSYNC_SERVER_MAX_REQUEST_BYTES``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

ENV_PREFIX = "LAYERSYNC_SERVER_"

#: Highest and lowest wire-protocol versions this server speaks (``LayerSync-Protocol``).
PROTOCOL_MIN = 1
PROTOCOL_MAX = 1


@dataclass(frozen=True)
class Settings:
    """Everything :func:`layersync_server.app.create_app` needs.

    Attributes:
        db_path: SQLite database file (created if missing). ``":memory:"`` is not
            supported because each worker thread opens its own connection.
        public_key_path: PEM public key (RSA or EC) that verifies client JWTs. ``None``
            means every sync request is refused with 403.
        admin_token: secret of the admin API (``Authorization: Token token="..."``);
            ``None`` disables the admin API (403).
        max_request_bytes: largest accepted sync request body, bytes (413 above).
        max_upload_bytes: largest accepted admin PDF upload, bytes (413 above).
        max_page_records: page size cap of ``records``/``changes``/``sync``.
        max_wait_s: cap of the long-poll ``wait`` parameter, seconds.
        jwt_leeway_s: clock skew tolerated on ``exp``, seconds.
        protocol_min / protocol_max: supported ``LayerSync-Protocol`` range.
    """

    db_path: Path = Path("layersync.sqlite")
    public_key_path: Path | None = None
    admin_token: str | None = None
    max_request_bytes: int = 4 * 1024 * 1024
    max_upload_bytes: int = 256 * 1024 * 1024
    max_page_records: int = 1000
    max_wait_s: int = 60
    jwt_leeway_s: int = 30
    protocol_min: int = PROTOCOL_MIN
    protocol_max: int = PROTOCOL_MAX

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides) -> "Settings":
        """Build settings from ``LAYERSYNC_SERVER_*`` variables, then ``overrides``.

        Overrides whose value is ``None`` are ignored so CLI flags that were not given
        fall through to the environment and then to the defaults.

        Raises:
            ValueError: an integer variable does not parse.
        """
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for field in dataclasses.fields(cls):
            raw = environ.get(ENV_PREFIX + field.name.upper())
            if field.name == "db_path" and raw is None:
                raw = environ.get(ENV_PREFIX + "DB")
            if field.name == "public_key_path" and raw is None:
                raw = environ.get(ENV_PREFIX + "PUBLIC_KEY")
            if raw is not None:
                values[field.name] = _convert(field.name, raw)
        for name, value in overrides.items():
            if value is not None:
                values[name] = _convert(name, value) if isinstance(value, str) else value
        return cls(**values)


def _convert(name: str, raw: str) -> object:
    if name in ("db_path", "public_key_path"):
        return Path(raw)
    if name == "admin_token":
        return raw
    return int(raw)
