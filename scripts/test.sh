#!/usr/bin/env bash
# The test command: installs what is missing, configures (CI preset: sm_90, library + tests), builds, runs ctest.
# GPU tests skip with a reason on machines without a CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/install_deps.sh
cmake --preset ci
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci -j "$(nproc)"
