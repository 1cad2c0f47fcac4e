// Work (asynchronous collectives) and Group (ncclGroupStart / ncclGroupEnd).
#if MT_HAS_NCCL

#include "minitensor/dist/work.h"

#include <utility>

#include "minitensor/dist/collectives.h"
#include "minitensor/dist/detail/call.h"
#include "minitensor/runtime/error.h"

namespace mt::dist {
namespace {

detail::WorkState& launched(const std::shared_ptr<detail::WorkState>& state, const char* what) {
  MT_CHECK(state->launched, InvalidArgument, "Work::", what, ": ", state->op,
           " was issued inside a Group that has not ended yet");
  return *state;
}

}  // namespace

bool Work::is_completed() const {
  if (!m_state) return true;
  detail::WorkState& work = launched(m_state, "is_completed");
  DeviceGuard guard(work.device);
  if (work.done.query()) return true;
  detail::CommState& comm = *work.comm;
  if (comm.comm) {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm.comm, &async);
    if (result != ncclSuccess) detail::fail(comm, result, work.op);
    if (async != ncclSuccess && async != ncclInProgress) detail::fail(comm, async, work.op);
  }
  return false;
}

void Work::wait() const {
  if (!m_state) return;
  wait(current_stream(m_state->device));
}

void Work::wait(cudaStream_t stream) const {
  if (!m_state) return;
  detail::WorkState& work = launched(m_state, "wait");
  DeviceGuard guard(work.device);
  work.done.wait(stream);
}

void Work::synchronize() const {
  if (!m_state) return;
  synchronize(m_state->comm->timeout);
}

void Work::synchronize(std::chrono::milliseconds timeout) const {
  if (!m_state) return;
  detail::WorkState& work = launched(m_state, "synchronize");
  DeviceGuard guard(work.device);
  detail::poll_until(*work.comm, work.op, timeout, [&] { return work.done.query(); });
}

Group::Group() {
  const ncclResult_t result = ncclGroupStart();
  if (result != ncclSuccess) {
    m_open = false;
    throw DistError(::mt::detail::str("ncclGroupStart failed: ", ncclGetErrorString(result)),
                    static_cast<int>(result), "Group", -1, 0);
  }
  ++detail::group_state().depth;
}

Group::~Group() {
  if (!m_open) return;
  try {
    end();
  } catch (const std::exception& e) {
    ::mt::detail::log_error(::mt::detail::str("ending a dist::Group: ", e.what()));
  }
}

void Group::end() {
  if (!m_open) return;
  m_open = false;
  detail::GroupState& group = detail::group_state();
  --group.depth;
  if (group.depth > 0) {  // nested: the outermost group launches
    const ncclResult_t result = ncclGroupEnd();
    if (result != ncclSuccess && result != ncclInProgress && !group.comms.empty())
      detail::fail(*group.comms.front(), result, "Group::end");
    return;
  }
  std::vector<std::shared_ptr<detail::CommState>> comms;
  std::vector<std::function<void()>> after;
  comms.swap(group.comms);
  after.swap(group.after);
  // The outermost end launches every queued operation; blocking communicators do it here, under the
  // watchdog, and may wait for peers.
  std::vector<detail::CommState*> states;
  for (auto& comm : comms) states.push_back(comm.get());
  const ncclResult_t result = detail::watched(states, "Group::end", [] { return ncclGroupEnd(); });
  if (result != ncclSuccess && result != ncclInProgress) {
    if (comms.empty()) {
      throw DistError(::mt::detail::str("ncclGroupEnd failed: ", ncclGetErrorString(result)),
                      static_cast<int>(result), "Group::end", -1, 0);
    }
    detail::fail(*comms.front(), result, "Group::end");
  }
  // Nonblocking communicators: each one must be ready before its streams take more work.
  for (auto& comm : comms) {
    if (!comm->comm) continue;
    DeviceGuard guard(comm->device);
    detail::wait_ready(*comm, "Group::end");
  }
  for (auto& fn : after) fn();
}

}  // namespace mt::dist

#endif  // MT_HAS_NCCL
