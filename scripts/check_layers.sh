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
[ $status -eq 0 ] && echo "layering: no upward include in ${layers[*]}"
exit $status
