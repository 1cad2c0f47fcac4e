// Errors of mt::dist: NCCL failures, waits that timed out, communicators used after abort(), and a build
// without NCCL.
#pragma once

#include <string>

#include "minitensor/runtime/error.h"

namespace mt {

// A collective or communicator operation failed: an NCCL error (its code, NCCL's text and its last message),
// a wait that timed out (a peer that died or diverged), or a communicator used after abort(). The message
// names the op, the rank and the world size: "mt::dist all_reduce (rank 1 of 4): ...".
class DistError : public Error {
 public:
  static constexpr int kNoCode = -1;  // code() of a failure that is not an NCCL return code (a timeout)

  // rank < 0: no communicator yet (reading a unique id); the message then names the op only.
  DistError(const std::string& what, int code, std::string op, int rank, int world_size);

  int code() const noexcept { return m_code; }  // the ncclResult_t, or kNoCode
  const std::string& op() const noexcept { return m_op; }
  int rank() const noexcept { return m_rank; }
  int world_size() const noexcept { return m_world_size; }

 private:
  int m_code;
  std::string m_op;
  int m_rank, m_world_size;
};

// minitensor was built without NCCL (MT_WITH_NCCL=OFF, or AUTO and NCCL was not found at build time): every
// mt::dist entry point that needs NCCL throws this.
class DistUnavailable : public DistError {
 public:
  explicit DistUnavailable(const std::string& op);
};

}  // namespace mt
