"""Ways of garbling a real server answer, for the fuzz suite (test_answer_fuzz.py) and the
convergence test: remove a key, retype a value, negate a number, swap ids, truncate the body,
lie about its length, duplicate an entry. Each mutation picks its target at random from the
answer's protocol fields (the envelope, its lists and the record envelopes: ``id``,
``revision``, ``deleted``, ``content`` as a whole and ``content.id``), never from inside a
record's content: a different but well-formed annotation cannot be told from the real one
without a checksum, which the protocol does not have (protocol.md "What a client checks").
"""
from __future__ import annotations

import json
import random
from typing import Any, Callable

from faultproxy import Action

Path = tuple[Any, ...]
KINDS = ("remove_key", "retype", "negate", "swap_ids", "truncate", "lie_length", "duplicate")
_RECORD_KEYS = ("id", "revision", "deleted", "content", "last_content")


def _paths(value: Any, path: Path = (), depth: int = 0) -> list[Path]:
    """Paths of the protocol fields of an answer (not inside a record's content)."""
    out: list[Path] = []
    if isinstance(value, dict):
        is_record = "revision" in value and "id" in value and ("content" in value or "deleted" in value)
        for key, child in value.items():
            if is_record and key not in _RECORD_KEYS:
                continue
            out.append(path + (key,))
            if key in ("content", "last_content", "server_record") and isinstance(child, dict):
                if key == "server_record":
                    out += _paths(child, path + (key,), depth + 1)
                elif "id" in child:
                    out.append(path + (key, "id"))
                continue
            if depth < 4:
                out += _paths(child, path + (key,), depth + 1)
    elif isinstance(value, list):
        for index, child in enumerate(value[:8]):
            out.append(path + (index,))
            if depth < 4:
                out += _paths(child, path + (index,), depth + 1)
    return out


def _get(root: Any, path: Path) -> Any:
    for key in path:
        root = root[key]
    return root


def _set(root: Any, path: Path, value: Any) -> None:
    _get(root, path[:-1])[path[-1]] = value


def _retyped(value: Any, rng: random.Random) -> Any:
    choices: list[Any] = ["7", 7, -3, 1.5, True, None, [], {}]
    return rng.choice([c for c in choices if type(c) is not type(value)])


def garble_json(body: bytes, kind: str, rng: random.Random) -> bytes | None:
    """``body`` garbled by ``kind``, or None when that kind finds nothing to garble."""
    if kind == "truncate":
        return body[: rng.randrange(0, max(1, len(body)))] if body else None
    try:
        root = json.loads(body)
    except ValueError:
        return None
    paths = _paths(root)
    if kind == "remove_key":
        keyed = [p for p in paths if isinstance(p[-1], str)]
        if not keyed:
            return None
        path = rng.choice(keyed)
        del _get(root, path[:-1])[path[-1]]
    elif kind == "retype":
        if not paths:
            return None
        path = rng.choice(paths)
        _set(root, path, _retyped(_get(root, path), rng))
    elif kind == "negate":
        numbers = [p for p in paths if isinstance(_get(root, p), int) and not isinstance(_get(root, p), bool)]
        if not numbers:
            return None
        path = rng.choice(numbers)
        _set(root, path, -max(1, abs(_get(root, path))))
    elif kind == "swap_ids":
        ids = [p for p in paths if p[-1] in ("id", "change_id", "epoch") and isinstance(_get(root, p), str)]
        if len(ids) >= 2:
            first, second = rng.sample(ids, 2)
            a, b = _get(root, first), _get(root, second)
            if a == b:
                _set(root, first, a + "-swapped")
            else:
                _set(root, first, b)
                _set(root, second, a)
        elif ids:
            _set(root, ids[0], _get(root, ids[0]) + "-swapped")
        else:
            return None
    elif kind == "duplicate":
        lists = [p for p in [()] + paths if isinstance(_get(root, p), list) and _get(root, p)]
        if not lists:
            return None
        items = _get(root, rng.choice(lists))
        items.insert(rng.randrange(len(items) + 1), rng.choice(items))
    else:
        raise ValueError(kind)
    out = json.dumps(root).encode()
    return out if out != body else None


def random_mutation(rng: random.Random, kinds: tuple[str, ...] = KINDS) -> Action:
    """An action that garbles one answer with one of ``kinds``, its target chosen by ``rng``
    (lie_length is a header lie; the others rewrite the body)."""
    kind = rng.choice(kinds)
    if kind == "lie_length":
        return Action.lie_length(rng.choice([-7, -1, 1, 50]))

    def change(status: int, headers: dict[str, str], body: bytes) -> bytes:
        garbled = garble_json(body, kind, rng)
        return body[:-1] if garbled is None and body else (garbled or body)
    return Action.mutate(change)


def mutating_rule(endpoints: set[str], rng: random.Random,
                  kinds: tuple[str, ...] = KINDS) -> Callable[[Any], Action]:
    """A proxy rule that garbles every answer of ``endpoints`` and forwards the rest."""
    from faultproxy import FORWARD

    def rule(request: Any) -> Action:
        return random_mutation(rng, kinds) if request.endpoint in endpoints else FORWARD
    return rule
