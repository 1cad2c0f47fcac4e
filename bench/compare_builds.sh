#!/usr/bin/env bash
# Times two builds of the benchmarks against each other on one card, in one command: each benchmark binary of
# build A, then of build B, alternating which goes first every round, so that clock drift over the run falls
# on both. Writes A/ and B/ folders of Google Benchmark JSON (bench_X.rN.json) under OUT_DIR and prints
# scripts/summarize.py --compare A B (A's time over B's: > 1 means B is faster).
#
#   bash bench/compare_builds.sh BUILD_A BUILD_B OUT_DIR [ROUNDS=2] [BENCHES="bench_ops bench_graph bench_gemm"]
#
# Used to check that a change keeps speed: build the commit before it into BUILD_A and the change into
# BUILD_B (cmake -S <tree> -B <build> -DCMAKE_BUILD_TYPE=Release -DMT_BUILD_BENCHMARKS=ON).
set -uo pipefail
a="$1" b="$2" out="$3" rounds="${4:-2}" benches="${5:-bench_ops bench_graph bench_gemm}"
here="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$out/A" "$out/B"
run() {  # run BUILD SIDE BENCH ROUND
  "$1/bench/$3" --benchmark_out="$out/$2/$3.r$4.json" --benchmark_out_format=json > "$out/$2/$3.r$4.log" 2>&1 ||
    echo "compare_builds: $1/bench/$3 exited $?" >&2
}
for r in $(seq 1 "$rounds"); do
  for bench in $benches; do
    if (( r % 2 )); then run "$a" A "$bench" "$r"; run "$b" B "$bench" "$r";
    else run "$b" B "$bench" "$r"; run "$a" A "$bench" "$r"; fi
  done
done
python3 "$here/scripts/summarize.py" --compare "$out/A" "$out/B"
