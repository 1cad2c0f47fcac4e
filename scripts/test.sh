#!/usr/bin/env bash
# The test command: installs what is missing, then runs two suites, each configured from its preset, built and
# run with ctest. GPU tests skip with a reason on machines without a CUDA device.
#   release  the ci preset (sm_90, library, tests, examples and the package tests): build-ci/
#   asan     the asan preset (ASan + UBSan on host code, RelWithDebInfo; library and tests only): build-asan/
#            MT_TEST_ASAN=0 leaves it out (a developer's quick run).
# Prints one line per suite, then the total as its last line, "N passed, M failed, K skipped (no CUDA device:
# <reason>)"; exits non-zero when a suite fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/install_deps.sh

jobs="$(nproc)"
suites=(ci)
if [ "${MT_TEST_ASAN:-1}" != 0 ]; then suites+=(asan); fi

# Counts from the attributes of ctest's JUnit report (its "% tests passed" counts skipped tests as passed).
attr() { sed -n "s/^[[:space:]]*$1=\"\([0-9]*\)\".*/\1/p" "$2" | head -n 1; }

status=0 passed=0 failed=0 skipped=0 lines=()
for preset in "${suites[@]}"; do
  dir="build-$preset"
  cmake --preset "$preset"
  cmake --build --preset "$preset" -j "$jobs"
  junit="$PWD/$dir/Testing/ctest_junit.xml"
  rm -f "$junit"
  set +e
  ctest --preset "$preset" -j "$jobs" --output-junit "$junit"
  rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then status="$rc"; fi
  name="$preset"
  if [ "$preset" = ci ]; then name=release; fi
  if [ -f "$junit" ]; then
    total="$(attr tests "$junit")" f="$(attr failures "$junit")"
    s=$(($(attr skipped "$junit") + $(attr disabled "$junit")))
    p=$((total - f - s))
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    lines+=("$name suite: $p passed, $f failed, $s skipped")
  else
    lines+=("$name suite: ctest wrote no report")
    if [ "$status" -eq 0 ]; then status=1; fi
  fi
done

# The reason for skips, from the tests' own message ("no CUDA device: <mt::cuda_unavailable_reason()>", e.g.
# "no NVIDIA driver found (libcuda.so.1 not loadable)").
reason="$(grep -h -m 1 -o 'no CUDA device: .*' build-ci/Testing/Temporary/LastTest*.log 2>/dev/null | head -n 1 |
  sed -E 's/^no CUDA device: CUDA devices: none \((.*)\)$/\1/; s/^no CUDA device: //' || true)"
printf '%s\n' "${lines[@]}"
counts="$passed passed, $failed failed, $skipped skipped"
if [ -n "$reason" ]; then
  echo "$counts (no CUDA device: $reason)"
else
  echo "$counts"
fi
exit "$status"
