#!/usr/bin/env bash
# One pass on a GPU machine for the graph layer: build, graph tests, benchmark + PyTorch baseline, demo, memcheck
# on a reduced filter. Logs under $OUT (default out/graph_gpu); prints a short summary.
set -uo pipefail
cd "$(dirname "$0")/../.."
O="${OUT:-out/graph_gpu}"; mkdir -p "$O"
export MT_KERNEL_CACHE_DIR="${MT_KERNEL_CACHE_DIR:-/tmp/mt_kernels}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$O/gpu.txt"
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > "$O/cfg.log" 2>&1 &&
  timeout "${MT_BUILD_TIMEOUT:-200}" ninja -C build mt_tests_graph bench_graph mlp_demo > "$O/build.log" 2>&1; } ||
  { tail -40 "$O/build.log"; echo BUILD FAILED; exit 1; }
echo "== tests"; t0=$(date +%s)
timeout "${MT_TEST_TIMEOUT:-110}" ./build/tests/mt_tests_graph > "$O/tests.log" 2>&1; echo "rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "^\[  FAILED  \]|^\[  PASSED|^\[  SKIPPED \] [0-9]|Failure" -A6 "$O/tests.log" | head -70
grep -E "^\[       OK \]" "$O/tests.log" | grep -E "[0-9]{4,} ms" | head
echo "== bench"
timeout 130 ./build/bench/bench_graph --benchmark_out="$O/bench_graph.json" --benchmark_out_format=json > "$O/bench.log" 2>&1
echo "rc=$?"; grep -E "MLP|HostAdd|ERROR|error" "$O/bench.log" | head -30
echo "== torch"
timeout 60 python3 bench/graph/torch_mlp.py --mt-json "$O/bench_graph.json" > "$O/torch.log" 2>&1; echo "rc=$?"; cat "$O/torch.log" | tail -25
echo "== demo"
( cd "$O" && timeout 30 "$OLDPWD/build/examples/mlp_demo" 256 1024 mt_trace.json > demo.log 2>&1; echo "rc=$?" )
sed -n '/== check/,$p' "$O/demo.log" | head -40
echo "== memcheck"
timeout 60 compute-sanitizer --tool memcheck --print-limit 10 ./build/tests/mt_tests_graph \
  --gtest_filter='GraphCuda.MlpFused*:GraphCuda.Elementwise*:GraphCuda.MultiStream*:GraphCuda.CudaGraph*:GraphCuda.HostInputs*:GraphCuda.NvrtcFailure*' \
  > "$O/memcheck.log" 2>&1; echo "rc=$? $(grep -o 'ERROR SUMMARY: [0-9]* error' "$O/memcheck.log" | tail -1)"
