// Fork/join: run independent work on side streams and bring it back to the origin stream, ordered by events.
//
//   {
//     ForkJoin fj(origin, device, 2);   // the branches wait for everything queued on origin so far
//     launch_a(fj.branch(0));
//     launch_b(fj.branch(1));
//   }                                    // origin waits for both branches (no host block)
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "minitensor/runtime/event.h"

namespace mt {

class ForkJoin {
 public:
  // Branch i runs on pool stream (first_pool_slot + i) of `device`.
  ForkJoin(cudaStream_t origin, int device, int n_branches, int first_pool_slot = 0);
  ~ForkJoin();  // joins if join() was not called; never throws
  ForkJoin(const ForkJoin&) = delete;
  ForkJoin& operator=(const ForkJoin&) = delete;

  int n_branches() const noexcept { return static_cast<int>(m_branches.size()); }
  cudaStream_t branch(int i) const;
  cudaStream_t origin() const noexcept { return m_origin; }
  void join();  // the origin stream waits for every branch; idempotent

 private:
  cudaStream_t m_origin;
  std::vector<cudaStream_t> m_branches;
  std::vector<Event> m_done;
  bool m_joined = false;
};

}  // namespace mt
