// What a Communicator and its Works share, and the one polling loop every wait of dist/ goes through.
// Included by the sources of dist/ only, and only when minitensor is built with NCCL (MT_HAS_NCCL).
#pragma once

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "minitensor/dist/detail/watchdog.h"
#include "minitensor/runtime/event.h"
#include "minitensor/runtime/stream.h"

namespace mt::dist::detail {

// The ranks of one Communicator::local set, for their meetings on the host (Communicator::meet_local).
struct LocalGroup {
  std::mutex mutex;
  std::condition_variable arrived_all;
  int size = 0;
  int arrived = 0;
  std::uint64_t generation = 0;  // meetings completed
};

struct CommState {
  ncclComm_t comm = nullptr;  // null once aborted (or never made)
  int rank = -1, world = 0, device = -1;
  std::chrono::milliseconds timeout{0};
  bool checked = false;
  bool blocking = false;  // a blocking NCCL communicator (CommOptions::blocking), set once it is one
  std::atomic<bool> aborted{false};
  std::shared_ptr<LocalGroup> local;  // the set made by Communicator::local (null for init())
  Stream stream;  // the communicator's own stream (async collectives), created on first use
  Event ready;    // reused: the caller's stream so far, for the communicator's stream to wait on

  // The last collective issued on each stream, so that destruction and Communicator::synchronize can wait
  // for the communicator's work without waiting for the whole device.
  std::mutex pending_mutex;
  std::vector<std::pair<cudaStream_t, Event>> pending;

  CommState() = default;
  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;
  // Waits (bounded) for the pending work, then ncclCommDestroy; ncclCommAbort when that wait fails. Logs.
  ~CommState();

  cudaStream_t own_stream();
  void track(cudaStream_t stream);  // records the end of what was issued on `stream` (not during capture)
};

// What a pending Work holds: its communicator, the event recorded after the collective, and whether the
// group that issued it has launched it yet.
struct WorkState {
  std::shared_ptr<CommState> comm;
  Event done;
  int device = -1;
  std::string op;
  bool launched = false;
};

// The communicator's configuration. Nonblocking: every NCCL call returns at once, ncclInProgress while it
// still needs its peers, which wait_ready then polls with the timeout; every communicator starts so.
// Blocking (CommOptions::blocking): calls launch in the calling thread and may wait for peers there, under
// the watchdog (dist/detail/watchdog.h).
ncclConfig_t comm_config(bool blocking);

// Throws DistError for `code`, naming NCCL's text and its last message, the op, rank and world size. Errors
// after which the communicator is unusable (all but invalid argument / usage) abort it first.
[[noreturn]] void fail(CommState& state, ncclResult_t code, const std::string& op);
// Aborts the communicator and throws DistError: `what` timed out after the communicator's timeout.
[[noreturn]] void fail_timeout(CommState& state, const std::string& op, std::chrono::milliseconds timeout);

// The return code of an NCCL call made outside a group: success returns, ncclInProgress waits until the
// communicator is ready (wait_ready), anything else fails.
void check(CommState& state, ncclResult_t code, const std::string& op);
// Polls the communicator's state until it is no longer ncclInProgress.
void wait_ready(CommState& state, const std::string& op);

// The polling loop: returns once done() is true. Between polls it reads NCCL's asynchronous error state (an
// error aborts and throws DistError), and gives up after `timeout` (abort and DistError). It spins briefly,
// then sleeps in steps growing to 1 ms.
class Poller {
 public:
  Poller(CommState& state, std::string op, std::chrono::milliseconds timeout);
  // One round: throws on an asynchronous error or when the time is up, else pauses.
  void step();

 private:
  CommState& m_state;
  std::string m_op;
  std::chrono::milliseconds m_timeout;
  std::chrono::steady_clock::time_point m_start;
  int m_round = 0;
};

template <class Done>
void poll_until(CommState& state, const std::string& op, std::chrono::milliseconds timeout, Done&& done) {
  Poller poller(state, op, timeout);
  while (!done()) poller.step();
}

// What the caller does after the watchdog aborted the blocking communicators among `states`: marks them
// aborted and throws DistError (the timeout, `op`, the first one's rank).
[[noreturn]] void watchdog_fired(const std::vector<CommState*>& states, const std::string& op,
                                 std::chrono::milliseconds timeout);
// ncclCommAbort on each of `comms`, logging failures: the watchdog's callback.
void abort_all(const std::vector<ncclComm_t>& comms) noexcept;

// Makes `call`, an NCCL call that may wait for peers, for the communicators `states`. Blocking ones run it
// under a Watch with the shortest of their timeouts whose callback aborts them (watchdog.h): when it fired,
// DistError, whatever the call returned. Nonblocking ones return from NCCL at once and run it bare.
// Caveat, as for every watchdog of its kind: NCCL tears an aborted communicator down while the stuck call
// unwinds (microseconds, against the teardown's milliseconds; in a Communicator::local set NCCL keeps the
// memory until every rank of the set is finalized).
template <class Fn>
ncclResult_t watched(const std::vector<CommState*>& states, const std::string& op, Fn&& call) {
  std::vector<ncclComm_t> comms;
  std::chrono::milliseconds timeout = std::chrono::milliseconds::max();
  for (CommState* s : states) {
    if (!s->blocking || !s->comm) continue;
    comms.push_back(s->comm);
    timeout = std::min(timeout, s->timeout);
  }
  if (comms.empty()) return call();
  Watch watch(timeout, [comms] { abort_all(comms); });
  const ncclResult_t result = call();
  watch.disarm();
  if (watch.fired()) watchdog_fired(states, op, timeout);
  return result;
}

// True when `stream` is being captured into a CUDA graph.
bool capturing(cudaStream_t stream);

// The communicator behind `comm`: InvalidArgument when it holds none, DistError when it was aborted.
CommState& usable(const std::shared_ptr<CommState>& state, const char* op);

}  // namespace mt::dist::detail
