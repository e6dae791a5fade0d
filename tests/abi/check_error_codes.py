#!/usr/bin/env python3
"""Every error code of include/layersync.h that C can reach is triggered by some C test in
Tests/c/ (issue 5: "every error code reachable from C has a C test"). A code counts as
triggered when a test other than test_library.c (which only checks the names) mentions it;
the codes no test can trigger are listed below with the reason, and docs/threading.md §7
repeats the list. A new code in api/layersync.toml needs a test or an entry here.

    check_error_codes.py --header include/layersync.h --tests Tests/c
"""
import argparse
import re
import sys
from pathlib import Path

# Code -> why no C test triggers it.
UNREACHABLE = {
    "PERFORMING_CONTENT_MIGRATION": "only while another content migration of the same layer runs; "
                                    "migrations are local and take milliseconds, so a C test could only "
                                    "hit it by racing two threads (covered by the engine's Swift test Tests/LayerSyncCoreTests/RecordFeatureTests.swift)",
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--header", required=True)
    ap.add_argument("--tests", required=True)
    args = ap.parse_args()
    header = Path(args.header).read_text()
    codes = re.findall(r"\bLAYERSYNC_ERROR_([A-Z_]+)\s*=\s*\d+", header)
    sources = "\n".join(p.read_text() for p in sorted(Path(args.tests).glob("*.c")) if p.name != "test_library.c")
    problems = []
    for code in codes:
        used = re.search(rf"\bLAYERSYNC_ERROR_{code}\b", sources) is not None
        if code in UNREACHABLE and used:
            problems.append(f"{code} is listed as unreachable but a C test uses it: drop it from UNREACHABLE")
        elif code not in UNREACHABLE and not used:
            problems.append(f"{code}: no C test in {args.tests} triggers it (add one, or explain in UNREACHABLE)")
    for code in UNREACHABLE:
        if code not in codes:
            problems.append(f"{code} is listed as unreachable but is not in the header")
    if problems:
        print("\n".join(problems))
        return 1
    print(f"{len(codes) - len(UNREACHABLE)} of {len(codes)} error codes are triggered by the C tests; "
          f"{len(UNREACHABLE)} unreachable: {', '.join(sorted(UNREACHABLE))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
