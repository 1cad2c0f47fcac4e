#!/usr/bin/env bash
# The GPU check, run from the repo root on a machine with a CUDA GPU: builds everything with all cores, runs the
# whole test suite, runs compute-sanitizer memcheck over the tests (caching allocator bypassed so every
# out-of-bounds access is seen), runs the benchmarks, and prints one summary table.
#
#   bash scripts/gpu_check.sh                 # everything
#   MT_CHECK_STEPS="build tests" bash ...     # a subset of: build tests memcheck racecheck synccheck initcheck
#                                             # bench demo (default: all but racecheck/synccheck/initcheck)
#   MT_BENCH_FILTER=regex                     # passed to every benchmark binary as --benchmark_filter
#   MT_BENCHES="bench_ops bench_gemm"         # which benchmark binaries (default: all)
#   MT_MEMCHECK_FILTER=gtest-filter           # default: all but the 2^31-element, 4095x4097x1023 and 500-graph tests
#                                             (minutes each under the sanitizer; the plain run covers them)
# Logs and JSON go to $OUT (when set) or out/gpu_check.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out="${OUT:-out/gpu_check}"
mkdir -p "$out"
steps="${MT_CHECK_STEPS:-build tests memcheck bench demo}"
has() { [[ " $steps " == *" $1 "* ]]; }
# The executables of a build folder (not ctest's side files).
binaries() { for f in "$@"; do [[ -f "$f" && -x "$f" && "$f" != *.cmake ]] && echo "$f"; done; }
export MT_KERNEL_CACHE_DIR="${MT_KERNEL_CACHE_DIR:-/tmp/mt_kernels}"

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
  for bin in $(binaries build/tests/mt_tests_*); do
    name=$(basename "$bin")
    timeout 900 "$bin" --gtest_output="xml:$out/$name.xml" > "$out/$name.log" 2>&1
    echo "  $name: exit $?"
  done
fi

# compute-sanitizer: memcheck (memory-access errors only: the out-of-memory tests make CUDA API calls fail on
# purpose), racecheck, synccheck and initcheck, each over every test binary with the caching allocator bypassed
# so that every access is checked against its own allocation. MT_<TOOL>_FILTER (gtest filter) narrows a tool;
# MT_SANITIZER_SHARDS=N splits each binary into N gtest shards run side by side, each its own process on the
# one GPU (racecheck over the ops suite takes minutes in one process).
sanitize() {  # sanitize TOOL FILTER
  local tool="$1" filter="$2" shards="${MT_SANITIZER_SHARDS:-1}"
  echo "== $tool"
  for bin in $(binaries build/tests/mt_tests_*); do
    name=$(basename "$bin")
    local f="$filter"
    # NCCL reads user buffers in 16-byte blocks, never past the block that holds a buffer's last byte: memcheck
    # flags the uint8 all-reduce of 1001 bytes (exact-size allocations here), which the plain run checks.
    [[ $name == mt_tests_dist ]] && f="$f:*IntegerDTypes*"
    for ((i = 0; i < shards; i++)); do
      GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i MT_DISABLE_CACHING=1 timeout 900 \
        compute-sanitizer --tool "$tool" --report-api-errors no --print-limit 20 \
        "$bin" --gtest_filter="$f" > "$out/${tool}_$name.$i.log" 2>&1 &
    done
    wait
    cat "$out/${tool}_$name".*.log > "$out/${tool}_$name.log" && rm -f "$out/${tool}_$name".*.log
    echo "  $name: $(grep -o 'ERROR SUMMARY: [0-9]* error' "$out/${tool}_$name.log" | awk '{s += $3} END {print s + 0}') errors, $(grep -c 'ERROR SUMMARY' "$out/${tool}_$name.log")/$shards summaries"
  done
}
slow='*Huge*:*4095x4097*:*RandomGraphsDifferential*:*RandomGraphsCudaGraph*'
has memcheck && sanitize memcheck "${MT_MEMCHECK_FILTER:-*:-$slow}"
has racecheck && sanitize racecheck "${MT_RACECHECK_FILTER:-*:-$slow}"
has synccheck && sanitize synccheck "${MT_SYNCCHECK_FILTER:-*:-$slow}"
has initcheck && sanitize initcheck "${MT_INITCHECK_FILTER:-*:-$slow}"

if has bench; then
  echo "== benchmarks"
  export MT_BLOCK_DUMP="$out/blocks"  # bench_graph's transformer blocks, for torch_block.py
  mkdir -p "$MT_BLOCK_DUMP"
  for bin in $(binaries build/bench/bench_*); do
    name=$(basename "$bin")
    [[ -n "${MT_BENCHES:-}" && " $MT_BENCHES " != *" $name "* ]] && continue
    timeout 900 "$bin" --benchmark_filter="${MT_BENCH_FILTER:-.}" --benchmark_out="$out/$name.json" \
      --benchmark_out_format=json > "$out/$name.log" 2>&1
    echo "  $name: exit $?"
  done
  # PyTorch's MLP (eager and CUDA graph) beside ours, in the same run, where torch is installed.
  if [ -f "$out/bench_graph.json" ] && python3 -c "import torch" 2>/dev/null; then
    timeout 300 python3 bench/graph/torch_mlp.py --mt-json "$out/bench_graph.json" --json "$out/torch_mlp.json" > "$out/torch_mlp.log" 2>&1
    echo "  torch_mlp.py: exit $?"
  fi
  if [ -f "$out/bench_graph.json" ] && python3 -c "import torch" 2>/dev/null; then
    timeout 500 python3 -u bench/graph/torch_block.py --mt-json "$out/bench_graph.json" --dump "$MT_BLOCK_DUMP" \
      ${MT_TORCH_NO_COMPILE:+--no-compile} > "$out/torch_block.log" 2>&1
    echo "  torch_block.py: exit $?"
  fi
  if [ -f "$out/bench_ops.json" ] && python3 -c "import torch" 2>/dev/null; then
    timeout 300 python3 bench/ops/torch_attention.py --mt-json "$out/bench_ops.json" > "$out/torch_attention.log" 2>&1
    echo "  torch_attention.py: exit $?"
  fi
fi

if has demo; then
  echo "== demo"
  (cd "$out" && timeout 120 "$OLDPWD/build/examples/mlp_demo" > demo.log 2>&1; echo "  mlp_demo: exit $?")
fi

python3 scripts/summarize.py "$out"
[ -f "$out/torch_mlp.log" ] && { echo; echo "PyTorch side by side (bench/graph/torch_mlp.py)"; tail -n 20 "$out/torch_mlp.log"; }
[ -f "$out/torch_block.log" ] && { echo; echo "PyTorch transformer block side by side (bench/graph/torch_block.py)"; grep -v "^W\|warn" "$out/torch_block.log" | tail -n 12; }
[ -f "$out/torch_attention.log" ] && { echo; echo "PyTorch SDPA side by side (bench/ops/torch_attention.py)"; cat "$out/torch_attention.log"; }
exit 0
