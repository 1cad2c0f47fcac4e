#!/usr/bin/env bash
# The GPU check, run from the repo root on a machine with a CUDA GPU: builds everything with all cores, runs the
# whole test suite, runs compute-sanitizer memcheck over the tests (caching allocator bypassed so every
# out-of-bounds access is seen), runs the benchmarks, and prints one summary table.
#
#   bash scripts/gpu_check.sh                 # everything
#   MT_CHECK_STEPS="build tests" bash ...     # a subset of: build tests memcheck bench
#   MT_BENCH_FILTER=regex                     # passed to every benchmark binary as --benchmark_filter
#   MT_MEMCHECK_FILTER=gtest-filter           # default: all tests except those named *Huge*
# Logs and JSON go to $OUT (when set) or out/gpu_check.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out="${OUT:-out/gpu_check}"
mkdir -p "$out"
steps="${MT_CHECK_STEPS:-build tests memcheck bench}"
has() { [[ " $steps " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1 || true

if has build; then
  echo "== build"
  if ! { cmake --preset default > "$out/configure.log" 2>&1 && cmake --build --preset default -j "$(nproc)" > "$out/build.log" 2>&1; }; then
    tail -n 60 "$out/configure.log" "$out/build.log"
    echo "BUILD FAILED"
    exit 1
  fi
fi

if has tests; then
  echo "== tests"
  for bin in build/tests/mt_tests_*; do
    name=$(basename "$bin")
    timeout 900 "$bin" --gtest_output="xml:$out/$name.xml" > "$out/$name.log" 2>&1
    echo "  $name: exit $?"
  done
fi

if has memcheck; then
  echo "== memcheck"
  for bin in build/tests/mt_tests_*; do
    name=$(basename "$bin")
    MT_DISABLE_CACHING=1 timeout 900 compute-sanitizer --tool memcheck --print-limit 20 \
      "$bin" --gtest_filter="${MT_MEMCHECK_FILTER:-*:-*Huge*}" > "$out/memcheck_$name.log" 2>&1
    echo "  $name: exit $? ($(grep -o 'ERROR SUMMARY: [0-9]* error' "$out/memcheck_$name.log" | tail -1))"
  done
fi

if has bench; then
  echo "== benchmarks"
  for bin in build/bench/bench_*; do
    name=$(basename "$bin")
    timeout 900 "$bin" --benchmark_filter="${MT_BENCH_FILTER:-.}" --benchmark_out="$out/$name.json" \
      --benchmark_out_format=json > "$out/$name.log" 2>&1
    echo "  $name: exit $?"
  done
fi

python3 scripts/summarize.py "$out"
