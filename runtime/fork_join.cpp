#include "minitensor/runtime/fork_join.h"

#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/stream.h"

namespace mt {

ForkJoin::ForkJoin(cudaStream_t origin, int device, int n_branches, int first_pool_slot) : m_origin(origin) {
  MT_CHECK(n_branches >= 0 && n_branches <= kStreamPoolSize, InvalidArgument,
           "ForkJoin: n_branches = ", n_branches, " is outside [0, ", kStreamPoolSize, "]");
  DeviceGuard guard(device);
  Event forked;
  forked.record(origin);
  for (int i = 0; i < n_branches; ++i) {
    cudaStream_t s = pool_stream(device, first_pool_slot + i);
    MT_CHECK(s != origin, InvalidArgument, "ForkJoin: branch ", i, " is the origin stream itself");
    forked.wait(s);
    m_branches.push_back(s);
  }
  m_done.resize(m_branches.size());
}

cudaStream_t ForkJoin::branch(int i) const {
  MT_CHECK(i >= 0 && i < n_branches(), InvalidArgument, "ForkJoin::branch(", i, "): there are ", n_branches(),
           " branches");
  return m_branches[static_cast<size_t>(i)];
}

void ForkJoin::join() {
  if (m_joined) return;
  m_joined = true;
  for (size_t i = 0; i < m_branches.size(); ++i) {
    m_done[i].record(m_branches[i]);
    m_done[i].wait(m_origin);
  }
}

ForkJoin::~ForkJoin() {
  try {
    join();
  } catch (const std::exception& e) {
    detail::log_error(std::string("ForkJoin: join failed in destructor: ") + e.what());
  }
}

}  // namespace mt
