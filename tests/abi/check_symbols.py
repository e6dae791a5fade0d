#!/usr/bin/env python3
"""Checks that the library exports exactly the functions the public header declares.

    check_symbols.py --header include/layersync.h --library build/lib/liblayersync.so [--nm nm]

Both directions (docs/architecture.md §6):
  - every `layersync_*` function declared in the header is a defined dynamic symbol of the
    library (`nm -D --defined-only`, type T/t/W/i), and
  - every `layersync_*` symbol the library exports is declared in the header.
Exit status 0 when they match, 1 with a list of differences otherwise, 2 on usage errors.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

# A declaration `ret name(params);` of a function (not a typedef'd callback `(*name)`).
FUNCTION_DECL = re.compile(r"\b(layersync_[A-Za-z0-9_]+)\s*\(")


def header_functions(header: Path) -> set[str]:
    text = header.read_text(encoding="utf-8")
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)   # block comments
    text = re.sub(r"//[^\n]*", " ", text)                  # line comments
    text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)      # preprocessor lines
    names: set[str] = set()
    for stmt in text.split(";"):
        # Keep what follows the last closing brace: the end of a struct/enum typedef
        # ("} name") or a declaration after `extern "C" {`.
        stmt = " ".join(stmt.rsplit("}", 1)[-1].split())
        if stmt.startswith("typedef") or "(*" in stmt:
            continue  # callback typedefs `typedef void (*layersync_x_cb)(...)`
        m = FUNCTION_DECL.search(stmt)
        if m:
            names.add(m.group(1))
    return names


def library_exports(library: Path, nm: str) -> set[str]:
    out = subprocess.run([nm, "-D", "--defined-only", str(library)],
                         check=True, capture_output=True, text=True).stdout
    names: set[str] = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        sym_type, name = parts[-2], parts[-1]
        name = name.split("@", 1)[0]  # strip symbol versions
        if name.startswith("layersync_"):
            if sym_type not in ("T", "t", "W", "i"):
                print(f"warning: exported layersync_ symbol {name} is not a function (nm type {sym_type})")
            names.add(name)
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--header", required=True, type=Path)
    ap.add_argument("--library", required=True, type=Path)
    ap.add_argument("--nm", default="nm")
    args = ap.parse_args()
    if not args.header.is_file():
        print(f"error: header {args.header} not found", file=sys.stderr)
        return 2
    if not args.library.is_file():
        print(f"error: library {args.library} not found (build it first)", file=sys.stderr)
        return 2

    declared = header_functions(args.header)
    exported = library_exports(args.library, args.nm)
    if not declared:
        print(f"error: no layersync_ functions found in {args.header}", file=sys.stderr)
        return 2

    missing = sorted(declared - exported)
    undeclared = sorted(exported - declared)
    print(f"{len(declared)} functions declared in {args.header.name}, "
          f"{len(exported)} layersync_ symbols exported by {args.library.name}")
    for name in missing:
        print(f"MISSING   declared in the header, not exported by the library: {name}")
    for name in undeclared:
        print(f"UNDECLARED exported by the library, not declared in the header: {name}")
    return 1 if (missing or undeclared) else 0


if __name__ == "__main__":
    sys.exit(main())
