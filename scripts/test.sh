#!/usr/bin/env bash
# The test command: installs what is missing, configures (CI preset: sm_90, library + tests), builds, runs ctest
# (the package tests included). GPU tests skip with a reason on machines without a CUDA device. Ends with one
# line, "N passed, M failed, K skipped (no CUDA device: <reason>)", and exits with ctest's status.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/install_deps.sh
cmake --preset ci
cmake --build --preset ci -j "$(nproc)"

junit="$PWD/build-ci/Testing/ctest_junit.xml"
rm -f "$junit"
set +e
ctest --preset ci -j "$(nproc)" --output-junit "$junit"
status=$?
set -e

# Counts from the attributes of ctest's JUnit report (its "% tests passed" counts skipped tests as passed); the
# reason for skips from the tests' own message ("no CUDA device: <mt::cuda_unavailable_reason()>", e.g. "no
# NVIDIA driver found (libcuda.so.1 not loadable)").
attr() { sed -n "s/^[[:space:]]*$1=\"\([0-9]*\)\".*/\1/p" "$junit" | head -n 1; }
if [ -f "$junit" ]; then
  total="$(attr tests)" failed="$(attr failures)" skipped=$(($(attr skipped) + $(attr disabled)))
  counts="$((total - failed - skipped)) passed, $failed failed, $skipped skipped"
else
  counts="0 passed, 0 failed, 0 skipped (ctest wrote no report)"
fi
reason="$(grep -h -m 1 -o 'no CUDA device: .*' build-ci/Testing/Temporary/LastTest*.log 2>/dev/null | head -n 1 |
  sed -E 's/^no CUDA device: CUDA devices: none \((.*)\)$/\1/; s/^no CUDA device: //' || true)"
if [ -n "$reason" ]; then
  echo "$counts (no CUDA device: $reason)"
else
  echo "$counts"
fi
exit "$status"
