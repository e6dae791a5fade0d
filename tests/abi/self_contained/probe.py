"""Python half of check_self_contained.sh: the bindings load the installed library (via
LAYERSYNC_LIBRARY), pass the ABI check, create and close a client, and nothing of the Swift
toolchain ends up mapped into the interpreter.  argv: <storage-dir> <hidden-dir>"""
import sys

import layersync
from layersync import _library

storage, hidden = sys.argv[1], sys.argv[2]
lib = _library.get_library()
with layersync.Client("http://127.0.0.1:9", storage) as client:
    pass
with open("/proc/self/maps") as maps:
    bad = [line for line in maps
           if hidden in line or "libswift" in line or "libFoundation" in line or "libdispatch" in line]
if bad:
    sys.exit("mapped:\n" + "".join(bad))
print("python: layersync", lib.layersync_version().decode(), "self-contained")
