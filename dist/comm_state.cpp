// The communicator's shared state, its errors and the polling loop behind every wait of dist/.
#if MT_HAS_NCCL

#include "minitensor/dist/detail/comm_state.h"

#include <algorithm>
#include <thread>

#include "minitensor/dist/error.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"

namespace mt::dist::detail {
namespace {

// Errors after which NCCL says the call had no effect and the communicator stays usable.
bool recoverable(ncclResult_t code) {
  return code == ncclInvalidArgument || code == ncclInvalidUsage;
}

void abort_comm(CommState& state) noexcept {
  if (!state.comm) return;
  const ncclResult_t result = ncclCommAbort(state.comm);
  state.comm = nullptr;
  state.aborted = true;
  if (result != ncclSuccess && result != ncclInProgress) {
    ::mt::detail::log_error(
        ::mt::detail::str("ncclCommAbort failed on rank ", state.rank, ": ", ncclGetErrorString(result)));
  }
}

}  // namespace

ncclConfig_t comm_config(bool blocking) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  return config;
}

CommState::~CommState() {
  if (!comm) return;
  try {
    DeviceGuard guard(device);
    std::vector<std::pair<cudaStream_t, Event>> events;
    {
      std::lock_guard<std::mutex> lock(pending_mutex);
      events.swap(pending);
    }
    for (const auto& entry : events)
      poll_until(*this, "~Communicator", timeout, [&] { return entry.second.query(); });
    const ncclResult_t result = ncclCommDestroy(comm);
    comm = nullptr;
    // Nonblocking: the destruction may finish in NCCL's own thread (ncclInProgress); nothing touches it
    // again.
    if (result != ncclSuccess && result != ncclInProgress) {
      ::mt::detail::log_error(
          ::mt::detail::str("ncclCommDestroy failed on rank ", rank, ": ", ncclGetErrorString(result)));
    }
  } catch (const std::exception& e) {
    ::mt::detail::log_error(::mt::detail::str("destroying the communicator of rank ", rank, ": ", e.what()));
    abort_comm(*this);
  }
}

cudaStream_t CommState::own_stream() {
  if (!stream.get()) stream = Stream(device);
  return stream.get();
}

void CommState::track(cudaStream_t s) {
  if (capturing(s)) return;
  std::lock_guard<std::mutex> lock(pending_mutex);
  for (auto& entry : pending) {
    if (entry.first == s) {
      entry.second.record(s);
      return;
    }
  }
  pending.emplace_back(s, Event());
  pending.back().second.record(s);
}

void fail(CommState& state, ncclResult_t code, const std::string& op) {
  const char* last = ncclGetLastError(state.comm);
  std::string what =
      ::mt::detail::str("NCCL error '", ncclGetErrorString(code), "' (", static_cast<int>(code), ")");
  if (last && *last) what += ::mt::detail::str(": ", last);
  if (!recoverable(code)) {
    abort_comm(state);
    what += "; the communicator was aborted (rebuild it)";
  }
  throw DistError(what, static_cast<int>(code), op, state.rank, state.world);
}

void fail_timeout(CommState& state, const std::string& op, std::chrono::milliseconds timeout) {
  abort_comm(state);
  throw DistError(
      ::mt::detail::str("timed out after ", std::chrono::duration<double>(timeout).count(),
                        " s (a peer died, diverged or never joined); the communicator was aborted "
                        "(rebuild it)"),
      DistError::kNoCode, op, state.rank, state.world);
}

void check(CommState& state, ncclResult_t code, const std::string& op) {
  if (code == ncclSuccess) return;
  if (code == ncclInProgress) {
    wait_ready(state, op);
    return;
  }
  fail(state, code, op);
}

void wait_ready(CommState& state, const std::string& op) {
  // Poller::step fails on an error state; ncclInProgress is the only state that keeps the loop going.
  poll_until(state, op, state.timeout, [&] {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(state.comm, &async);
    if (result != ncclSuccess) fail(state, result, op);
    return async == ncclSuccess;
  });
}

Poller::Poller(CommState& state, std::string op, std::chrono::milliseconds timeout)
    : m_state(state), m_op(std::move(op)), m_timeout(timeout), m_start(std::chrono::steady_clock::now()) {}

void Poller::step() {
  if (m_state.comm) {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(m_state.comm, &async);
    if (result != ncclSuccess) fail(m_state, result, m_op);
    if (async != ncclSuccess && async != ncclInProgress) fail(m_state, async, m_op);
  }
  if (std::chrono::steady_clock::now() - m_start >= m_timeout) fail_timeout(m_state, m_op, m_timeout);
  // Short collectives finish within microseconds: spin first, then sleep so a long wait costs no core.
  ++m_round;
  if (m_round < 64) {
    std::this_thread::yield();
  } else {
    const int us = std::min(1000, 10 * (m_round - 63));
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }
}

void watchdog_fired(const std::vector<CommState*>& states, const std::string& op,
                    std::chrono::milliseconds timeout) {
  for (CommState* s : states) {
    if (!s->blocking) continue;
    s->comm = nullptr;  // the watchdog aborted it
    s->aborted = true;
  }
  const CommState& first = *states.front();
  throw DistError(::mt::detail::str("timed out after ", std::chrono::duration<double>(timeout).count(),
                                    " s inside NCCL (a peer died, diverged or never joined); the watchdog "
                                    "aborted the communicator (rebuild it)"),
                  DistError::kNoCode, op, first.rank, first.world);
}

void abort_all(const std::vector<ncclComm_t>& comms) noexcept {
  for (ncclComm_t comm : comms) {
    const ncclResult_t result = ncclCommAbort(comm);
    if (result != ncclSuccess && result != ncclInProgress) {
      ::mt::detail::log_error(
          ::mt::detail::str("the dist watchdog's ncclCommAbort failed: ", ncclGetErrorString(result)));
    }
  }
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  MT_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

CommState& usable(const std::shared_ptr<CommState>& state, const char* op) {
  MT_CHECK(state != nullptr, InvalidArgument, "mt::dist ", op,
           ": the communicator holds none (default-constructed or moved from)");
  if (!state->comm) {
    throw DistError("the communicator was aborted (rebuild it: Communicator::rebuild)", DistError::kNoCode,
                    op, state->rank, state->world);
  }
  return *state;
}

}  // namespace mt::dist::detail

#endif  // MT_HAS_NCCL
