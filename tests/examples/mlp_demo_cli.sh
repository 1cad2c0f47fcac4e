#!/usr/bin/env bash
# The demo's command line (ctest label `examples`): --help, usage errors with exit status 2 and never a crash,
# and a small run that writes the trace and the graph.
#
#   mlp_demo_cli.sh MLP_DEMO help|bad_args|small_run WORK_DIR
set -uo pipefail
demo="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")" mode="$2" work="$3"
fail() { echo "FAIL: $*"; exit 1; }

case "$mode" in
  help)
    out=$("$demo" --help) || fail "--help exited $?"
    [[ "$out" == *"usage: mlp_demo"* && "$out" == *"--batch"* && "$out" == *"--out-dir"* ]] ||
      fail "--help does not print the usage: $out"
    ;;
  bad_args)
    # Each line is one command line that must be refused.
    while IFS= read -r line; do
      read -r -a argv <<< "$line"
      err=$("$demo" "${argv[@]}" 2>&1 >/dev/null)
      rc=$?
      [ "$rc" -eq 2 ] || fail "mlp_demo $line: exit $rc, expected 2 (stderr: $err)"
      [[ "$err" == *"usage: mlp_demo"* ]] || fail "mlp_demo $line: no usage on stderr: $err"
      echo "ok: mlp_demo $line -> exit 2: ${err%%$'\n'*}"
    done <<'ARGS'
0
-3
abc
12x
99999999999999999999999
256 0
8 16 trace.json extra
--batch 0
--batch -1
--batch two
--batch 2097152
--hidden 100000
--hidden
--batch=1048576 --hidden=16384
--frobnicate
--trace=
--gpus 0
--gpus two
--gpus 2 --cpu
--gpus 3 --hidden 16
--model blok
--model
--model block --heads 5
--model block --tokens 0
--model block --tokens 70000
--model block --gpus 2
--model block --batch 4096 --tokens 4096
ARGS
    ;;
  small_run)
    rm -rf "$work" && mkdir -p "$work" || fail "cannot make $work"
    "$demo" --batch 8 --hidden 16 --cpu --out-dir "$work" || fail "small CPU run exited $?"
    for f in mt_trace.json mt_graph.dot; do
      [ -s "$work/$f" ] || fail "$work/$f was not written"
    done
    grep -q '"traceEvents"' "$work/mt_trace.json" || fail "mt_trace.json is not a Chrome trace"
    grep -q '^digraph' "$work/mt_graph.dot" || fail "mt_graph.dot is not a DOT graph"
    # The positional form still works.
    (cd "$work" && "$demo" 4 8 positional_trace.json --cpu) || fail "positional form exited $?"
    [ -s "$work/positional_trace.json" ] || fail "the positional trace path was not used"
    # The transformer block, small, on the CPU: the executor against the eager block.
    out=$("$demo" --model block --batch 2 --tokens 9 --hidden 64 --heads 2 --cpu --out-dir "$work/block") ||
      fail "small block run exited $?"
    [[ "$out" == *"max abs difference"* ]] || fail "the block run printed no comparison: $out"
    [ -s "$work/block/mt_graph.dot" ] || fail "the block's graph was not written"
    ;;
  *) fail "unknown mode $mode" ;;
esac
echo PASS
