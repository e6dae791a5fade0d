"""The record schema check (docs/protocol.md, "Record schema"): a record of a ``pspdfkit/...``
type must have the fields Instant JSON requires for that type, each of the JSON type and in
the range the format gives; unknown extra fields and ``customData``'s contents are never
checked. A ``pspdfkit/...`` type the schema does not know is refused; a type outside the
``pspdfkit/`` namespace is an application's own and is not checked.

The tables come from api/record-schema.json (``record_schema_generated``, written by
tools/gen_api.py); the engine walks the same tables in Sources/LayerSyncModel/RecordSchema.swift
and words its messages the same way.
"""

from __future__ import annotations

import json

from layersync_server.record_schema_generated import DEFAULT_VERSION, NODES, RECORDS

_KINDS = ((1, "null"), (2, "a boolean"), (4, "an integer"), (8, "a number"), (16, "a string"),
          (32, "an array"), (64, "an object"))


#: JSON type bits by Python type (a float's integer bit depends on its value).
_KIND_OF_TYPE = {type(None): 1, bool: 2, int: 4 | 8, str: 16, list: 32, dict: 64}


def _kind(value: object) -> int:
    """The type bits ``value`` satisfies (an integral number is both integer and number)."""
    kind = _KIND_OF_TYPE.get(type(value))
    if kind is not None:
        return kind
    if isinstance(value, float):
        return (4 | 8) if value.is_integer() else 8
    for base, bits in ((bool, 2), (int, 4 | 8), (str, 16), (list, 32), (dict, 64)):
        if isinstance(value, base):  # subclasses (rare: JSON decoders make the base types)
            return bits
    return 0


def _path(where: str | tuple) -> str:
    """The field's name as messages give it: ``where`` is a name, or (parent, key) built
    without formatting while nothing is wrong (a key is a property name or an item index)."""
    if isinstance(where, str):
        return where
    parent, key = where
    parent = _path(parent)
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _is_color(value: str) -> bool:
    return (len(value) == 7 and value[0] == "#"
            and all(c in "0123456789abcdefABCDEF" for c in value[1:]))


#: Nodes that constrain nothing but the JSON type (most leaves): checked by type alone.
_TYPE_ONLY = [node[1] is None and node[2] is None and node[3] is None and node[4] is None
              and node[5] is None and not node[6] and node[7] is None and not node[8]
              and not node[9] and not node[10] for node in NODES]


def _problem(value: object, index: int, where: str | tuple) -> str | None:
    """Why ``value`` breaks node ``index`` of the tables, or None. ``where`` names the value
    (see :func:`_path`); it is formatted only for a message."""
    node = NODES[index]
    types = node[0]
    kind = _kind(value)
    if types and not kind & types:
        wanted = " or ".join(name for bit, name in _KINDS if types & bit and not (bit == 4 and types & 8))
        return f'"{_path(where)}" must be {wanted}'
    if _TYPE_ONLY[index]:
        return None
    _, enum, minimum, maximum, min_items, max_items, color, items, props, required, any_of = node
    if enum is not None and not any(value == e and isinstance(value, bool) == isinstance(e, bool)
                                    for e in enum):
        return f'"{_path(where)}" must be one of {", ".join(json.dumps(e) for e in enum)}'
    if kind & 8:
        if minimum is not None and value < minimum:
            return f'"{_path(where)}" must be ≥ {_number_text(minimum)}'
        if maximum is not None and value > maximum:
            return f'"{_path(where)}" must be ≤ {_number_text(maximum)}'
    elif kind == 16:
        if color and not _is_color(value):
            return f'"{_path(where)}" must be a color "#rrggbb"'
    elif kind == 32:
        if min_items is not None and len(value) < min_items:
            return f'"{_path(where)}" must have at least {min_items} items'
        if max_items is not None and len(value) > max_items:
            return f'"{_path(where)}" must have at most {max_items} items'
        if items is not None:
            for i, item in enumerate(value):
                problem = _problem(item, items, (where, i))
                if problem:
                    return problem
    elif kind == 64:
        for name in required:
            if name not in value:
                return f'"{_path((where, name))}" is required'
        for name, child in props:
            if name in value:
                problem = _problem(value[name], child, (where, name))
                if problem:
                    return problem
    if any_of and all(_problem(value, alternative, where) for alternative in any_of):
        return f'"{_path(where)}" matches none of its allowed forms'
    return None


def record_schema_problem(content: dict) -> str | None:
    """Why ``content`` (a record's JSON object) breaks the record schema, naming the field;
    None when it passes. ``v`` defaults to 2, as it is stored. Content without a string
    ``type`` or of a type outside ``pspdfkit/`` is not checked (as before the schema)."""
    record_type = content.get("type")
    versions = RECORDS.get(record_type) if isinstance(record_type, str) else None
    if versions is None:  # no string type (the engine's API requires one): not checked
        if isinstance(record_type, str) and record_type.startswith("pspdfkit/"):
            return f'"type": {json.dumps(record_type)} is not an Instant JSON record type'
        return None
    version = content.get("v", int(DEFAULT_VERSION))
    key = str(version) if _kind(version) & 4 and not isinstance(version, bool) else None
    if key is not None and isinstance(version, float):
        key = str(int(version))
    index = versions.get(key) if key is not None else None
    if index is None:
        index = versions.get("*")
    if index is None:
        return f'"v" must be one of {", ".join(sorted(versions))} for {record_type} records'
    problem = _problem(content, index, "")
    if problem and problem.endswith(" is required"):
        return f"{problem} for {record_type} records"
    return problem
