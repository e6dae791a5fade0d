#!/usr/bin/env bash
# The installed liblayersync.so needs no Swift toolchain (issue 5, docs/architecture.md §2):
#   1. installs the build into a scratch prefix;
#   2. its dynamic section NEEDs no Swift/Foundation/ICU/Dispatch library and has no
#      RPATH/RUNPATH into the toolchain;
#   3. a C program (probe.c) and Python (the bindings, probe.py) run against the installed
#      library in a private mount namespace in which the toolchain's runtime directories
#      (<toolchain>/lib/swift and lib/swift_static) are covered by an empty directory, and
#      check /proc/self/maps for any toolchain file.
# Without permission to create a mount namespace (unprivileged container) step 3 runs
# without hiding and relies on the /proc/self/maps check alone (it says so).
#
#   check_self_contained.sh BUILD_DIR WORK_DIR TOOLCHAIN_USR CC PYTHON BINDINGS_DIR READELF
set -euo pipefail
build=$1 work=$2 toolchain=$3 cc=$4 python=$5 bindings=$6 readelf=$7
here=$(cd "$(dirname "$0")/self_contained" && pwd)

rm -rf "$work"
mkdir -p "$work/storage-c" "$work/storage-py" "$work/empty"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
lib=$(find "$prefix" -name 'liblayersync.so.*.*.*' -type f | head -n1)
[ -n "$lib" ] || { echo "FAIL: no liblayersync.so.X.Y.Z installed under $prefix"; exit 1; }
libdir=$(dirname "$lib")

dyn=$("$readelf" -d "$lib")
if grep -E 'NEEDED.*(libswift|libFoundation|_FoundationICU|libicu|libdispatch|libBlocksRuntime)' <<<"$dyn"; then
  echo "FAIL: $lib NEEDs a Swift toolchain library (link with -static-stdlib)"; exit 1
fi
if grep -E '(RPATH|RUNPATH)' <<<"$dyn" | grep -F "$toolchain"; then
  echo "FAIL: $lib has an RPATH/RUNPATH into the toolchain $toolchain"; exit 1
fi
echo "NEEDED: $(grep NEEDED <<<"$dyn" | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' ')"
stripped="$work/stripped.so"
strip -o "$stripped" "$lib" 2>/dev/null && echo "size: $(stat -c %s "$lib") bytes, stripped $(stat -c %s "$stripped") bytes"

"$cc" -std=c11 -Wall -Wextra -Werror -I"$prefix/include" "$here/probe.c" -L"$libdir" -llayersync \
  -lpthread "-Wl,-rpath,$libdir" -o "$work/probe"

hidden="$toolchain/lib/swift"
run_probes() {
  "$work/probe" "$work/storage-c" "$hidden"
  LAYERSYNC_LIBRARY="$lib" PYTHONPATH="$bindings" LD_LIBRARY_PATH="" \
    "$python" "$here/probe.py" "$work/storage-py" "$hidden"
}
export -f run_probes
export work hidden lib bindings python here

if unshare -m --propagation private true 2>/dev/null; then
  unshare -m --propagation private bash -c '
    set -euo pipefail
    for d in "'"$toolchain"'/lib/swift" "'"$toolchain"'/lib/swift_static"; do
      [ -d "$d" ] && mount --bind "$work/empty" "$d"
    done
    if [ -n "$(ls -A "$hidden")" ]; then echo "FAIL: could not hide $hidden"; exit 1; fi
    echo "toolchain runtime hidden: $hidden is empty in this namespace"
    run_probes'
else
  echo "NOTE: no mount namespace here (unshare -m refused); running without hiding $hidden," \
       "relying on the /proc/self/maps check"
  run_probes
fi
