#!/usr/bin/env bash
# The layering rule, as a test: graph -> dist -> ops -> tensor -> memory -> runtime, arrows down only. A file of
# a lower layer that includes a higher one's header fails it (ctest: lint.layers).
set -u
cd "$(dirname "$0")/.."
layers=(runtime memory tensor ops dist graph)
status=0
for ((i = 0; i < ${#layers[@]}; i++)); do
  low=${layers[$i]}
  [ -d "$low" ] || continue
  for ((j = i + 1; j < ${#layers[@]}; j++)); do
    high=${layers[$j]}
    hits=$(grep -rnE "#[[:space:]]*include[[:space:]]*[\"<](minitensor/)?${high}/" "$low" 2>/dev/null)
    if [ -n "$hits" ]; then
      echo "layering: $low/ includes $high/ (arrows point down only):"
      echo "$hits"
      status=1
    fi
  done
done
# NCCL is a private dependency of the library: dist/'s public headers (its top level) never include nccl.h, so
# users compile without NCCL's headers.
if [ -d dist ]; then
  hits=$(grep -nE "#[[:space:]]*include[[:space:]]*[\"<]nccl\.h" dist/*.h 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "layering: a public header of dist/ includes nccl.h (only dist/detail/ and the sources may):"
    echo "$hits"
    status=1
  fi
fi
[ $status -eq 0 ] && echo "layering: no upward include in ${layers[*]}"
exit $status
