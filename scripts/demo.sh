#!/usr/bin/env bash
# The main job: installs what is missing, builds and runs the MLP graph demo (on the GPU, or on the CPU with a
# notice when there is none): check against Eigen, timings, and a Chrome trace in mt_trace.json.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/install_deps.sh
cmake --preset demo
cmake --build --preset demo -j "$(nproc)"
./build-demo/examples/mlp_demo "$@"
