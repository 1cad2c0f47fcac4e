// Work: an asynchronous collective (async_op = true), running on its communicator's own stream.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <utility>

namespace mt::dist {

namespace detail {
struct WorkState;
}

class Work {
 public:
  Work() =
      default;  // finished: what a collective without async_op returns (its work is on the caller's stream)
  explicit Work(std::shared_ptr<detail::WorkState> state) : m_state(std::move(state)) {}

  // True once the collective has finished on the device (no wait). DistError when NCCL reports an
  // asynchronous error (the communicator is then aborted).
  bool is_completed() const;
  // Makes the calling thread's current stream on the communicator's device (or `stream`) wait for the
  // collective; the host does not block. Its outputs may then be used on that stream. InvalidArgument when
  // the Group that issued it has not ended yet.
  void wait() const;
  void wait(cudaStream_t stream) const;
  // Blocks the host until the collective has finished, polling NCCL's asynchronous error state; on an error,
  // or once `timeout` (default: the communicator's) has passed, aborts the communicator and throws DistError.
  void synchronize() const;
  void synchronize(std::chrono::milliseconds timeout) const;

  bool pending() const noexcept { return m_state != nullptr; }  // false for a finished default Work

 private:
  std::shared_ptr<detail::WorkState> m_state;
};

}  // namespace mt::dist
