// The watchdog: one thread per process that runs a callback when a watched call outlives its timeout.
//
// What it is for: a blocking NCCL communicator's calls (a collective outside a group, ncclGroupEnd) launch
// in the calling thread and may wait there for peers; the first collective between two ranks connects them,
// and a peer that never comes would hold the call for ever. dist/ makes such a call under a Watch whose
// callback aborts the communicators (ncclCommAbort sets NCCL's abort flag first, which every wait inside
// NCCL polls), so the call returns an error and the caller throws DistError (detail::watched in
// comm_state.h). Waits that dist/ makes itself (events, ncclInProgress) poll in the calling thread
// (detail::Poller) and need no watchdog.
//
// NCCL-free, so that it builds, and is tested, without NCCL.
#pragma once

#include <chrono>
#include <functional>

namespace mt::dist::detail {

struct WatchEntry;

// Arms the watchdog until destroyed: if `timeout` passes first, the watchdog thread runs `on_timeout` once.
// The destructor waits for a callback in progress, so fired() read after it is final. Cheap: a mutex and a
// list insertion (the thread is woken only for a deadline sooner than the one it sleeps towards). Used from
// one thread.
class Watch {
 public:
  Watch(std::chrono::milliseconds timeout, std::function<void()> on_timeout);
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
  // Whether the timeout passed and the callback ran (or is running).
  bool fired() const;
  // Disarms now (what the destructor does); fired() stays readable.
  void disarm();

 private:
  WatchEntry* m_entry;
  bool m_armed = true;
};

}  // namespace mt::dist::detail
