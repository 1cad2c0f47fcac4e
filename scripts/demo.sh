#!/usr/bin/env bash
# The main job: installs what is missing, builds the MLP graph demo and runs it, on the GPU or, without one, on
# the CPU (Eigen reference ops, wall-clock timings) with a notice saying why. It prints the graph and the
# executor's plan, timings, and writes into out/demo/ (MT_DEMO_OUT): mt_trace.json (Chrome trace: open it in
# https://ui.perfetto.dev), mt_graph.dot, and mt_graph.png where Graphviz is installed.
#
#   bash scripts/demo.sh                         # 256 x 1024
#   bash scripts/demo.sh --batch 64 --hidden 512 # any mlp_demo option (mlp_demo --help); these come last and win
#   MT_JOBS=2 bash scripts/demo.sh               # parallel compile jobs (default: all cores)
#
# The `demo` preset builds the target mlp_demo only: no tests, no benchmarks. It still compiles the library's
# CUDA sources (nvcc is needed even without a GPU): mlp_demo links the one library, kernels included.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/install_deps.sh
cmake --preset demo
cmake --build --preset demo -j "${MT_JOBS:-$(nproc)}"
out="${MT_DEMO_OUT:-out/demo}"
./build-demo/examples/mlp_demo --out-dir "$out" "$@"
