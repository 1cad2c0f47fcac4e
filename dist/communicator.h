// Communicator: RAII over one NCCL communicator (one rank, one CUDA device).
//
// Two ways to make them:
//   - one process, several GPUs: Communicator::local({0, 1, 2, 3}) gives one communicator per device, driven
//     from one thread with dist::Group, or from one thread per GPU (then build every rank's buffers before
//     any rank's first collective: graph/parallel.h says why);
//   - one process per GPU (and so several hosts): Communicator::init(rank, world, id), where rank 0's
//     UniqueId reaches the others through a file or the environment; Communicator::from_env() reads what
//     scripts/launch.sh sets (RANK, WORLD_SIZE, LOCAL_RANK, MT_NCCL_ID_FILE).
//
// Every wait inside mt::dist is bounded by the communicator's timeout: waits on the GPU and on NCCL's
// progress poll NCCL's asynchronous error state, and an NCCL call that may wait for peers inside NCCL runs
// under a watchdog that aborts the communicator when the timeout passes. A peer that dies or diverges gives
// a DistError (and an aborted communicator), not a hang. An aborted communicator throws DistError from every
// call until it is rebuilt. A communicator, and the Works it returns, are used
// from one thread at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "minitensor/dist/error.h"
#include "minitensor/dist/unique_id.h"

namespace mt::dist {

// True when minitensor was built with NCCL; without it every entry point throws mt::DistUnavailable.
bool nccl_available() noexcept;
// The version of the NCCL linked ("2.28.9"); "" without NCCL.
std::string nccl_version();

// MT_DIST_TIMEOUT_S (seconds, may be fractional) when set, else 5 minutes.
std::chrono::milliseconds default_timeout();
// MT_DIST_CHECK=1 or 0 when set, else on in debug builds (NDEBUG undefined).
bool default_checked();
// MT_DIST_BLOCKING=1 or 0 when set, else true.
bool default_blocking();

struct CommOptions {
  // How long any wait (init, Work::synchronize, barrier, checked mode) may take before the communicator is
  // aborted and DistError thrown.
  std::chrono::milliseconds timeout = default_timeout();
  // Checked mode: before each collective the ranks all-gather the shapes, dtypes and arguments and throw a
  // typed error (ShapeError, DTypeError, InvalidArgument) on a mismatch. Costs a host wait per collective;
  // skipped inside a Group and during CUDA-graph capture. Every rank must use the same setting.
  bool checked = default_checked();
  // Blocking NCCL communicators (the default): NCCL launches a group's kernels in the calling thread. A
  // nonblocking communicator returns from every call at once and hands the launch to a thread NCCL starts
  // per group (tens of microseconds per group, which is what an 8 MiB collective takes on NVLink). Both keep
  // the timeout: a blocking communicator is made nonblocking and split into a blocking one (so init is
  // polled), and its calls that may wait for peers (the first collective between two ranks connects them)
  // run under the watchdog (dist/detail/watchdog.h). Every rank must use the same setting.
  bool blocking = default_blocking();
};

namespace detail {
struct CommState;
}

class Communicator {
 public:
  Communicator() = default;  // holds no communicator: defined() is false, collectives throw InvalidArgument
  ~Communicator();  // waits (bounded by the timeout) for the work it issued, then destroys; aborts on failure
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // One communicator per device, rank i on devices[i]. DeviceError for a device that does not exist,
  // InvalidArgument for an empty list or a device named twice.
  static std::vector<Communicator> local(const std::vector<int>& devices, const CommOptions& options = {});
  // Rank `rank` of `world_size` on `device` (-1: the calling thread's current device). Every rank calls it
  // with the same id; returns once all have joined, or throws DistError after the timeout.
  static Communicator init(int rank, int world_size, const UniqueId& id, int device = -1,
                           const CommOptions& options = {});
  // RANK and WORLD_SIZE (required), LOCAL_RANK (the device; default RANK modulo the device count), and the id
  // from MT_NCCL_ID (hex) or else MT_NCCL_ID_FILE (UniqueId::exchange_file). InvalidArgument naming what is
  // missing.
  static Communicator from_env(const CommOptions& options = {});

  // Tears the communicator down without waiting for peers (ncclCommAbort): kernels of pending collectives
  // exit, their results are undefined. Afterwards every call throws DistError until rebuild().
  void abort() noexcept;
  bool aborted() const noexcept;
  // A new communicator for the same rank, world size, device and options, from a fresh id (an id serves one
  // communicator). Collective: every rank calls it. Aborts the current one first unless already aborted.
  void rebuild(const UniqueId& id);
  // The same for communicators made together by local(): all of them, from one thread.
  static void rebuild_local(std::vector<Communicator>& comms);

  bool defined() const noexcept { return m_state != nullptr; }
  int rank() const;
  int size() const;    // the world size
  int device() const;  // the CUDA device index
  std::chrono::milliseconds timeout() const;
  void set_timeout(std::chrono::milliseconds timeout);
  bool checked() const;
  void set_checked(bool checked);

  // The ranks of one local() set meet on the host: returns once every rank of the set has called it (their
  // threads), DistError after the timeout. A no-op for a communicator of init() (its peers are other
  // processes). What it is for: in one process, a CUDA call on one GPU can wait for that GPU's queue to
  // drain (the first launch of a kernel loads it, lazily) while holding a lock a peer thread needs to launch
  // its part of a collective already spinning on that GPU: a deadlock. So no rank launches its first
  // collective before every rank is ready (the executor meets here at its first run, graph/parallel.h).
  void meet_local();

  // The communicator's own stream, where async collectives run (created on first use; non-blocking).
  cudaStream_t stream();
  // Blocks the host until every collective issued through this communicator so far has finished, polling for
  // asynchronous errors; DistError (and abort) on an error or after the timeout.
  void synchronize();

  // The implementation's state (dist/detail/comm_state.h), shared with the Works this communicator returned.
  explicit Communicator(std::shared_ptr<detail::CommState> state) : m_state(std::move(state)) {}
  const std::shared_ptr<detail::CommState>& state() const noexcept { return m_state; }

 private:
  std::shared_ptr<detail::CommState> m_state;
};

}  // namespace mt::dist
