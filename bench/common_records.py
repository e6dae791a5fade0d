"""The records every scenario uses, with no dependency outside the standard library (the
peers' virtualenv imports this too)."""
from __future__ import annotations

from typing import Any

_ULID_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def bench_id(prefix: str, n: int) -> str:
    """A 26-character ULID-shaped id, unique per (prefix, n); prefix is 1..6 Crockford chars."""
    digits = []
    for _ in range(26 - len(prefix)):
        digits.append(_ULID_ALPHABET[n % 32])
        n //= 32
    return prefix + "".join(reversed(digits))


def annotation(i: int, rid: str | None = None, **extra: Any) -> dict[str, Any]:
    """An Instant JSON v2 note of about 300 bytes (the same shape in every scenario)."""
    a: dict[str, Any] = {"v": 2, "type": "pspdfkit/note", "pageIndex": i % 10,
                         "bbox": [i % 500, i % 700, 24, 24],
                         "text": {"format": "plain", "value": f"bench note {i}"},
                         "icon": "comment", "color": "#FFD700", "creatorName": "bench",
                         "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:00Z"}
    if rid is not None:
        a["id"] = rid
    a.update(extra)
    return a



#: A reviewer's collaboration permissions (docs/protocol.md, "Collaboration permissions"):
#: sees every annotation, changes and deletes only their own, full access to comments; the
#: JWT claims ``--permissions`` adds to scenarios 2 and 3 (and ``permissions_cost.py`` uses).
REVIEWER_CLAIMS: dict[str, Any] = {
    "collaboration_permissions": ["annotations:*:self", "annotations:view:all", "comments:*:all"],
    "default_group": "review"}


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


