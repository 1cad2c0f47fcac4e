#!/usr/bin/env bash
# Installs what minitensor needs to build and is missing, from Debian packages: CMake, Ninja, Eigen 3.4,
# GoogleTest, Google Benchmark, zlib, DLPack, nlohmann-json (the tests parse the library's JSON with it). The
# CUDA toolkit (nvcc) must already be installed. Installs nothing when all is present (machines without network
# access, such as the GPU machine, have it all).
set -euo pipefail

missing=()
have_header() { [ -e "/usr/include/$1" ] || [ -e "/usr/local/include/$1" ]; }
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
have_header eigen3/Eigen/Core || missing+=(libeigen3-dev)
have_header gtest/gtest.h || missing+=(libgtest-dev googletest)
have_header benchmark/benchmark.h || missing+=(libbenchmark-dev)
have_header zlib.h || missing+=(zlib1g-dev)
have_header dlpack/dlpack.h || missing+=(libdlpack-dev)
have_header nlohmann/json.hpp || missing+=(nlohmann-json3-dev)

if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13/bin /usr/local/cuda-12/bin; do
    [ -x "$d/nvcc" ] && { echo "install_deps: nvcc found in $d (add it to PATH)"; break; }
  done
fi
