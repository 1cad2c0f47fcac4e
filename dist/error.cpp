#include "minitensor/dist/error.h"

#include <utility>

namespace mt {
namespace {

std::string describe(const std::string& what, const std::string& op, int rank, int world_size) {
  if (rank < 0) return detail::str("mt::dist ", op, ": ", what);
  return detail::str("mt::dist ", op, " (rank ", rank, " of ", world_size, "): ", what);
}

}  // namespace

DistError::DistError(const std::string& what, int code, std::string op, int rank, int world_size)
    : Error(describe(what, op, rank, world_size)),
      m_code(code),
      m_op(std::move(op)),
      m_rank(rank),
      m_world_size(world_size) {}

DistUnavailable::DistUnavailable(const std::string& op)
    : DistError(
          "NCCL was not found at build time, so minitensor was built without mt::dist (install NCCL, or "
          "point "
          "NCCL_ROOT at it, and reconfigure with -DMT_WITH_NCCL=ON)",
          kNoCode, op, -1, 0) {}

}  // namespace mt
