#!/usr/bin/env bash
# The device kernels' compiler launcher (src/kernels/CMakeLists.txt): runs the compile it is given
# (its arguments, ccache included where the build uses it) and fails it when ptxas reports WGMMAs
# it serialises ("Potential Performance Loss", C75xx), which ptxas prints as information only, so
# that a change which serialises a kernel's WGMMAs fails the build (and CI, which has no GPU to
# time it) as a spill does (--warn-on-spills with --warning-as-error). The compiler's messages pass
# through unchanged.
set -uo pipefail
messages=$(mktemp)
trap 'rm -f "$messages"' EXIT
"$@" 2>"$messages"
status=$?
cat "$messages" >&2
if [ "$status" -eq 0 ] && grep -q "Potential Performance Loss" "$messages"; then
  echo "ptxas_guard: ptxas serialised WGMMAs (above); keep accumulator reads out of WGMMA pipelines" >&2
  exit 1
fi
exit "$status"
