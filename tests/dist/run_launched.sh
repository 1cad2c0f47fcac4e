#!/usr/bin/env bash
# A ctest of mt::dist across processes: runs a test binary as N processes through scripts/launch.sh.
#   run_launched.sh N HAVE_NCCL(0|1) test-binary [gtest args...]
# Exits 77 (ctest's skip) with the reason when minitensor was built without NCCL or fewer than N GPUs are
# visible, else with the launcher's status.
set -u
n="$1"
have_nccl="$2"
shift 2
root="$(cd "$(dirname "$0")/../.." && pwd)"
if [ "$have_nccl" != 1 ]; then
  echo "SKIPPED: minitensor was built without NCCL"
  exit 77
fi
# Visible GPUs: CUDA_VISIBLE_DEVICES when set, else what nvidia-smi lists.
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
  found=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c '[^[:space:]]')
else
  found=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
fi
if [ "$found" -lt "$n" ]; then
  echo "SKIPPED: needs $n CUDA devices, found $found"
  exit 77
fi
export NCCL_NVLS_ENABLE=0
exec bash "$root/scripts/launch.sh" "$n" "$@"
