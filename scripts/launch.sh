#!/usr/bin/env bash
# Starts N processes of one program on this host, one per GPU, for mt::dist::Communicator::from_env():
#
#   scripts/launch.sh N prog [args...]
#
# Each process gets RANK (global), WORLD_SIZE, LOCAL_RANK (its GPU on this host), MT_NCCL_ID_FILE (where rank 0
# writes the NCCL unique id and the others read it; a fresh temporary file unless already set) and
# NCCL_NVLS_ENABLE=0 (NVLink multicast stays off on the shared GPU hosts). The launcher waits for all of them;
# when one fails it stops the others (TERM, then KILL after MT_LAUNCH_GRACE_S seconds, default 10) and exits
# with the failed one's status. Ctrl-C stops them all.
#
# Two hosts (or more): run the launcher on each host with the same N, the number of hosts, this host's index,
# and an id file on a path both hosts see (a shared file system); NCCL connects the hosts itself (set
# NCCL_SOCKET_IFNAME if it picks the wrong network interface):
#
#   host A:  MT_NNODES=2 MT_NODE_RANK=0 MT_NCCL_ID_FILE=/shared/job42.ncclid scripts/launch.sh 4 prog args...
#   host B:  MT_NNODES=2 MT_NODE_RANK=1 MT_NCCL_ID_FILE=/shared/job42.ncclid scripts/launch.sh 4 prog args...
#
# Ranks 0-3 run on host A and 4-7 on host B (RANK = MT_NODE_RANK * N + LOCAL_RANK, WORLD_SIZE = N * MT_NNODES).
# Use a new id file path for every run: a file left by an earlier run would hand out a stale id.
#
# Exit status: 2 for a usage error, else 0 when every process succeeded, else the first failure's status.
set -u

usage() {
  echo "usage: launch.sh N prog [args...]   (N processes on this host; see the header of this script)" >&2
  exit 2
}

is_count() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 1024 ]; }

[ $# -ge 2 ] || usage
n_local="$1"
shift
is_count "$n_local" || { echo "launch.sh: N must be a positive integer, got '$n_local'" >&2; usage; }
n_nodes="${MT_NNODES:-1}"
node_rank="${MT_NODE_RANK:-0}"
is_count "$n_nodes" || { echo "launch.sh: MT_NNODES must be a positive integer, got '$n_nodes'" >&2; exit 2; }
[[ "$node_rank" =~ ^[0-9]+$ ]] && [ "$node_rank" -lt "$n_nodes" ] ||
  { echo "launch.sh: MT_NODE_RANK must be in [0, $n_nodes), got '$node_rank'" >&2; exit 2; }
[ "$n_nodes" -eq 1 ] || [ -n "${MT_NCCL_ID_FILE:-}" ] ||
  { echo "launch.sh: with MT_NNODES > 1, set MT_NCCL_ID_FILE to a path every host can read" >&2; exit 2; }
prog="$1"
command -v "$prog" >/dev/null 2>&1 || { echo "launch.sh: '$prog' is not a program that can be run" >&2; exit 2; }
grace="${MT_LAUNCH_GRACE_S:-10}"

tmp_dir=""
if [ -z "${MT_NCCL_ID_FILE:-}" ]; then
  tmp_dir="$(mktemp -d "${TMPDIR:-/tmp}/mt_launch.XXXXXX")"
  MT_NCCL_ID_FILE="$tmp_dir/nccl_id"
fi

pids=()
stop_all() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  local waited=0
  while [ "$waited" -lt "$grace" ]; do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && return
    sleep 1
    waited=$((waited + 1))
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
}
cleanup() { [ -n "$tmp_dir" ] && rm -rf "$tmp_dir"; }
trap cleanup EXIT
trap 'echo "launch.sh: interrupted, stopping every rank" >&2; stop_all; exit 130' INT TERM

world=$((n_local * n_nodes))
for ((local_rank = 0; local_rank < n_local; local_rank++)); do
  RANK=$((node_rank * n_local + local_rank)) WORLD_SIZE="$world" LOCAL_RANK="$local_rank" \
    MT_NCCL_ID_FILE="$MT_NCCL_ID_FILE" NCCL_NVLS_ENABLE=0 "$@" &
  pids+=("$!")
done

status=0
remaining=${#pids[@]}
while [ "$remaining" -gt 0 ]; do
  wait -n
  rc=$?
  remaining=$((remaining - 1))
  if [ "$rc" -ne 0 ]; then
    status=$rc
    echo "launch.sh: a rank exited with status $rc, stopping the others" >&2
    stop_all
    wait 2>/dev/null
    break
  fi
done
exit "$status"
