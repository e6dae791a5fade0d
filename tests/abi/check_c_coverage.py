#!/usr/bin/env python3
"""Every function declared in include/layersync.h, and every callback field of its callback
tables, is used by at least one C test in Tests/c/ (issue 5: "every exported function, every
callback"). A function added to api/layersync.toml without a C test fails this check.

    check_c_coverage.py --header include/layersync.h --tests Tests/c
"""
import argparse
import re
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--header", required=True)
    ap.add_argument("--tests", required=True)
    args = ap.parse_args()
    header = Path(args.header).read_text()
    header = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    functions = set(re.findall(r"\b(layersync_[a-z0-9_]+)\s*\(", header))
    # Callback fields: `<type>_cb name;` inside structs.
    callbacks = set(re.findall(r"\blayersync_[a-z0-9_]+_cb\s+([a-z0-9_]+)\s*;", header))
    sources = "\n".join(p.read_text() for p in sorted(Path(args.tests).glob("*.c")))
    missing = sorted(f for f in functions if not re.search(rf"\b{f}\b", sources))
    missing += sorted(f"callback field .{c}" for c in callbacks if not re.search(rf"\.{c}\b", sources))
    if missing:
        print("not used by any C test in", args.tests)
        for m in missing:
            print("  ", m)
        return 1
    print(f"{len(functions)} functions and {len(callbacks)} callback fields are used by the C tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
