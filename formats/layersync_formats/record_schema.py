"""The record schema check (docs/protocol.md, "Record schema"): a record of a ``pspdfkit/...``
type must have the fields Instant JSON requires for that type, each of the JSON type and in
the range the format gives; unknown extra fields and ``customData``'s contents are never
checked. A ``pspdfkit/...`` type the schema does not know is refused; a type outside the
``pspdfkit/`` namespace is an application's own and is not checked.

The tables come from api/record-schema.json (``record_schema_generated``, written by
tools/gen_api.py); the engine walks the same tables in Sources/LayerSyncModel/RecordSchema.swift
and words its messages the same way. Here they are compiled once, at import, into Python
functions (:class:`_Compiler`) that make the walk's checks in the walk's order: a push checks
every record it carries, and walking the tables per record cost ~20 us of a note's ~30 us.
"""

from __future__ import annotations

import json

from layersync_formats.record_schema_generated import DEFAULT_VERSION, NODES, RECORDS

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


_HEX = frozenset("0123456789abcdefABCDEF")  # a color is "#" and 6 of them


def _position(items: list, item: object) -> int:
    """The index of the array item a check refused: the first that is ``item`` (an
    earlier item that is the same object would have been refused first)."""
    return next(position for position, candidate in enumerate(items) if candidate is item)


def _accepted_types(types: int) -> frozenset:
    """The Python types whose every value has a JSON type in ``types`` (a float only when
    ``types`` takes every number: an integer-only node looks at its value)."""
    accepted = {python_type for python_type, bits in _KIND_OF_TYPE.items() if bits & types}
    if types & 8:
        accepted.add(float)
    return frozenset(accepted)


def _type_problem(types: int, where) -> str:
    wanted = " or ".join(name for bit, name in _KINDS if types & bit and not (bit == 4 and types & 8))
    return f'"{_path(where)}" must be {wanted}'


def _message(where, problem: str) -> str:
    return f'"{_path(where)}"{problem}'


def _enum_problem(enum: tuple, where) -> str:
    return f'"{_path(where)}" must be one of {", ".join(json.dumps(e) for e in enum)}'


def _in_enum(value: object, enum: tuple) -> bool:
    """``value`` is one of ``enum`` (a boolean matches only a boolean)."""
    return any(value == e and isinstance(value, bool) == isinstance(e, bool) for e in enum)


class _Compiler:
    """The tables as Python source, compiled once at import: one function per record
    schema, per ``anyOf`` node and per alternative of one (``_n<index>(value, where)``:
    why ``value`` breaks it, or None); the checks of every other node, objects and arrays
    included, are written inline where its parent reads the value (a Python call costs
    more than most checks). Field paths are formatted only for a message (:func:`_path`;
    an array item's index is found then, :func:`_position`). The checks and their order
    are those of the table walk the engine does (RecordSchema.swift)."""

    def __init__(self) -> None:
        self.constants: dict[str, object] = {}
        self.functions: dict[int, list[str]] = {}
        self.names = 0

    def constant(self, value: object) -> str:
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def limits(self, measured: str, where: str, low: object, high: object,
               low_words: str | None, high_words: str | None) -> list[str]:
        """Lines returning ``low_words`` when ``measured`` (an expression) is below ``low`` and
        ``high_words`` when above ``high``; a bound of None is not checked."""
        lines: list[str] = []
        for bound, op, words in ((low, "<", low_words), (high, ">", high_words)):
            if bound is not None:
                lines += [f"if {measured} {op} {bound!r}:",
                          f"    return _message({where}, {self.constant(words)})"]
        return lines

    def local(self) -> str:
        self.names += 1
        return f"x{self.names}"

    @staticmethod
    def needs_function(index: int) -> bool:
        return bool(NODES[index][10])  # an anyOf node: its alternatives are called

    def function(self, index: int) -> str:
        if index not in self.functions:
            self.functions[index] = []  # reserved (the tables are acyclic: tests/test_record_schema.py)
            lines = [f"def _n{index}(value, where):"]
            lines += self.checks(index, "value", "where", "    ")
            lines.append("    return None")
            self.functions[index] = lines
        return f"_n{index}"

    def checks(self, index: int, value: str, where: str, pad: str) -> list[str]:
        """Lines that return the problem of ``value`` (an expression naming a local)
        against node ``index``; ``where``: an expression for its path."""
        types, enum, minimum, maximum, min_items, max_items, color, items, props, required, any_of = NODES[index]
        out = []
        if types:
            accepted = _accepted_types(types)
            if len(accepted) == 1:  # one identity test, cheaper than a set lookup
                test = f"type({value}) is not {self.constant(next(iter(accepted)))}"
            else:
                test = f"type({value}) not in {self.constant(accepted)}"
            out.append(f"{pad}if {test} and not _kind({value}) & {types}:")
            out.append(f"{pad}    return _type_problem({types}, {where})")
        if enum is not None:
            if any(isinstance(e, bool) for e in enum):
                test = f"_in_enum({value}, {self.constant(enum)})"
            else:  # a plain str/int/float compares by hash; anything else as the walk does
                members = self.constant(frozenset(enum))
                test = (f"({value} in {members} if type({value}) in _HASHED "
                        f"else _in_enum({value}, {self.constant(enum)}))")
            out.append(f"{pad}if not {test}:")
            out.append(f"{pad}    return _enum_problem({self.constant(enum)}, {where})")
        branches = []  # (kind test, lines): at most one applies to a value
        if minimum is not None or maximum is not None:
            lines = self.limits(value, where, minimum, maximum,
                                None if minimum is None else f" must be ≥ {_number_text(minimum)}",
                                None if maximum is None else f" must be ≤ {_number_text(maximum)}")
            branches.append(("& 8", 12, lines))
        if color:
            branches.append(("== 16", 16, [f"if not (len({value}) == 7 and {value}[0] == '#' "
                                           f"and _HEX.issuperset({value}[1:])):",
                                           f"    return _message({where}, ' must be a color \"#rrggbb\"')"]))
        if min_items is not None or max_items is not None or items is not None:
            lines = self.limits(f"len({value})", where, min_items, max_items,
                                f" must have at least {min_items} items", f" must have at most {max_items} items")
            if items is not None:  # (no enumerate: the index is found for a message only)
                element = self.local()
                lines.append(f"for {element} in {value}:")
                lines += [line[len(pad):] for line in
                          self.child(items, element, f"({where}, _position({value}, {element}))",
                                     pad + "    ")]
            branches.append(("== 32", 32, lines))
        if props or required:
            lines = []
            for name in required:
                lines += [f"if {name!r} not in {value}:",
                          f"    return _message(({where}, {name!r}), ' is required')"]
            for name, child in props:  # ``in`` and a subscript: no method call
                member = self.local()
                lines.append(f"if {name!r} in {value}:")
                lines.append(f"    {member} = {value}[{name!r}]")
                lines += [line[len(pad):] for line in
                          self.child(child, member, f"({where}, {name!r})", pad + "    ")]
            branches.append(("== 64", 64, lines))
        if branches:
            # After the type check the node's types say which branch a value takes, unless
            # they allow several (then by its kind, as the walk does).
            if len(branches) == 1 and types and types & ~branches[0][1] == 0:
                out += [pad + line for line in branches[0][2]]
            else:
                kind = self.local()
                out.append(f"{pad}{kind} = _kind({value})")
                for test, _, lines in branches:
                    out.append(f"{pad}if {kind} {test}:")
                    out += [pad + "    " + line for line in lines]
        if any_of:
            alternatives = " and ".join(f"{self.function(a)}({value}, {where})" for a in any_of)
            out.append(f"{pad}if {alternatives}:")
            out.append(f"{pad}    return _message({where}, ' matches none of its allowed forms')")
        return out

    def child(self, index: int, value: str, where: str, pad: str) -> list[str]:
        """Lines checking a member or element: a call for a node with a function, else inline."""
        if self.needs_function(index):
            problem = self.local()
            return [f"{pad}{problem} = {self.function(index)}({value}, {where})",
                    f"{pad}if {problem}:", f"{pad}    return {problem}"]
        return self.checks(index, value, where, pad)

    def compile(self) -> dict[str, dict[str, object]]:
        roots = {record_type: {version: self.function(index) for version, index in versions.items()}
                 for record_type, versions in RECORDS.items()}
        source = "\n\n".join("\n".join(lines) for lines in self.functions.values())
        namespace = {"_kind": _kind, "_path": _path, "_type_problem": _type_problem,
                     "_enum_problem": _enum_problem, "_message": _message, "_in_enum": _in_enum,
                     "_HEX": _HEX, "_position": _position,
                     "_ABSENT": _ABSENT, "_HASHED": frozenset((str, int, float)), **self.constants}
        exec(compile(source, "<record schema>", "exec"), namespace)
        self.source = source
        return {record_type: {version: namespace[name] for version, name in versions.items()}
                for record_type, versions in roots.items()}


_ABSENT = object()
_DEFAULT_VERSION = int(DEFAULT_VERSION)
#: Each record schema's check, by type and ``v``: ``check(content, "")``.
_CHECKS = _Compiler().compile()


def record_schema_problem(content: dict) -> str | None:
    """Why ``content`` (a record's JSON object) breaks the record schema, naming the field;
    None when it passes. ``v`` defaults to 2, as it is stored. Content without a string
    ``type`` or of a type outside ``pspdfkit/`` is not checked (as before the schema)."""
    record_type = content.get("type")
    versions = _CHECKS.get(record_type) if isinstance(record_type, str) else None
    if versions is None:  # no string type (the engine's API requires one): not checked
        if isinstance(record_type, str) and record_type.startswith("pspdfkit/"):
            return f'"type": {json.dumps(record_type)} is not an Instant JSON record type'
        return None
    version = content.get("v", _DEFAULT_VERSION)
    if type(version) is int:
        key = str(version)
    else:
        key = str(version) if _kind(version) & 4 and not isinstance(version, bool) else None
        if key is not None and isinstance(version, float):
            key = str(int(version))
    check = versions.get(key) if key is not None else None
    if check is None:
        check = versions.get("*")
    if check is None:
        return f'"v" must be one of {", ".join(sorted(versions))} for {record_type} records'
    problem = check(content, "")
    if problem and problem.endswith(" is required"):
        return f"{problem} for {record_type} records"
    return problem
