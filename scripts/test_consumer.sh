#!/usr/bin/env bash
# The package tests: builds and runs examples/consumer, a separate CMake project that uses minitensor as a user's
# project would, in a fresh temporary directory (nothing shared with the main build).
#   test_consumer.sh find_package <build-dir>  installs <build-dir> (already built) into a temporary prefix, then
#                                              builds the consumer with find_package(minitensor CONFIG), and with
#                                              pkg-config where it is installed
#   test_consumer.sh subdir                    builds the consumer with add_subdirectory(<this source tree>): the
#                                              library is compiled again, as the consumer's only dependency
# Honours CMAKE_GENERATOR, CUDACXX, MT_CONSUMER_JOBS (default: nproc) and MT_CONSUMER_KEEP=1 (keep the work dir).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/scripts/env.sh"
mode="${1:?usage: test_consumer.sh find_package <build-dir> | subdir}"
jobs="${MT_CONSUMER_JOBS:-$(nproc)}"
work="$(mktemp -d "${TMPDIR:-/tmp}/mt_consumer.XXXXXX")"
if [ "${MT_CONSUMER_KEEP:-0}" = 1 ]; then echo "test_consumer: work dir $work"; else trap 'rm -rf "$work"' EXIT; fi
generator=()
if [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi

case "$mode" in
  find_package)
    build="${2:?usage: test_consumer.sh find_package <build-dir>}"
    cmake --install "$build" --prefix "$work/prefix" >/dev/null
    cmake -S "$root/examples/consumer" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix"
    cmake --build "$work/build" -j "$jobs"
    "$work/build/minitensor_consumer"
    if command -v pkg-config >/dev/null; then
      pc_dir="$(dirname "$(find "$work/prefix" -name minitensor.pc | head -n 1)")"
      # shellcheck disable=SC2046  # pkg-config's output is a list of flags
      c++ -std=c++20 -O1 "$root/examples/consumer/main.cpp" -o "$work/consumer_pc" \
        $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs minitensor)
      "$work/consumer_pc"
    else
      echo "test_consumer: pkg-config not installed, minitensor.pc not checked"
    fi
    ;;
  subdir)
    cmake -S "$root/examples/consumer" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DMT_CONSUMER_SUBDIR="$root"
    cmake --build "$work/build" -j "$jobs" --target minitensor_consumer
    "$work/build/minitensor_consumer"
    ;;
  *)
    echo "test_consumer: unknown mode '$mode' (find_package or subdir)" >&2
    exit 2
    ;;
esac
