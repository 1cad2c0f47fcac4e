// Communicators: made one per device in this process (local), or one per process (init, from_env).
#if MT_HAS_NCCL

#include "minitensor/dist/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "minitensor/dist/detail/comm_state.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"

namespace mt::dist {
namespace {

std::shared_ptr<detail::CommState> make_state(int rank, int world, int device, const CommOptions& options) {
  auto state = std::make_shared<detail::CommState>();
  state->rank = rank;
  state->world = world;
  state->device = device;
  state->timeout = options.timeout;
  state->checked = options.checked;
  state->blocking = false;  // until make_blocking, when options.blocking
  return state;
}

ncclUniqueId to_nccl(const UniqueId& id) {
  ncclUniqueId out;
  std::memcpy(out.internal, id.bytes().data(), UniqueId::kBytes);
  return out;
}

void check_options(const CommOptions& options, const char* op) {
  MT_CHECK(options.timeout.count() > 0, InvalidArgument, "Communicator::", op,
           ": the timeout must be positive, got ", options.timeout.count(), " ms");
}

// An integer environment variable; `fallback` when unset (or InvalidArgument when required).
int env_int(const char* name, bool required, int fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) {
    MT_CHECK(
        !required, InvalidArgument, "Communicator::from_env: ", name,
        " is not set (start the processes with scripts/launch.sh, or set RANK, WORLD_SIZE, LOCAL_RANK and "
        "MT_NCCL_ID or MT_NCCL_ID_FILE)");
    return fallback;
  }
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  MT_CHECK(end != text && *end == '\0' && value >= 0 && value < (1L << 30), InvalidArgument,
           "Communicator::from_env: ", name, "='", text, "' is not a non-negative integer");
  return static_cast<int>(value);
}

// Every communicator made together in one group: after ncclGroupEnd returned ncclInProgress, each is polled
// until ready. On failure all of them are aborted.
void finish_group_init(std::vector<std::shared_ptr<detail::CommState>>& states, ncclResult_t end_result,
                       const char* op) {
  try {
    if (end_result != ncclSuccess && end_result != ncclInProgress)
      detail::fail(*states.front(), end_result, op);
    for (auto& state : states) {
      DeviceGuard guard(state->device);
      detail::wait_ready(*state, op);
    }
  } catch (...) {
    for (auto& state : states) {
      if (state->comm) {
        (void)ncclCommAbort(state->comm);
        state->comm = nullptr;
        state->aborted = true;
      }
    }
    throw;
  }
}

// Blocking communicators are born nonblocking: NCCL's init waits for every peer, which a nonblocking
// communicator lets dist/ poll with the timeout (a blocking init would wait inside NCCL, where no handle
// exists yet for the watchdog to abort). Each one is then split, every rank in one colour and in its own
// order, into a blocking copy (the split, a collective of the nonblocking parents, is polled the same way),
// and the parent is destroyed.
void make_blocking(std::vector<std::shared_ptr<detail::CommState>>& states, const char* op) {
  std::vector<ncclComm_t> children(states.size(), nullptr);
  std::vector<ncclConfig_t> configs(states.size(), detail::comm_config(true));
  ncclResult_t first_error = ncclGroupStart();
  if (first_error == ncclSuccess) {
    for (std::size_t i = 0; i < states.size(); ++i) {
      DeviceGuard guard(states[i]->device);
      const ncclResult_t result =
          ncclCommSplit(states[i]->comm, 0, states[i]->rank, &children[i], &configs[i]);
      if (result != ncclSuccess && result != ncclInProgress && first_error == ncclSuccess)
        first_error = result;
    }
    const ncclResult_t end = ncclGroupEnd();
    if (first_error == ncclSuccess) first_error = end;
  }
  try {
    finish_group_init(states, first_error, op);
  } catch (...) {
    for (ncclComm_t child : children)
      if (child) (void)ncclCommAbort(child);
    throw;
  }
  for (std::size_t i = 0; i < states.size(); ++i) {
    detail::CommState& state = *states[i];
    DeviceGuard guard(state.device);
    const ncclResult_t result = ncclCommDestroy(state.comm);
    if (result != ncclSuccess && result != ncclInProgress) {
      ::mt::detail::log_error(::mt::detail::str("ncclCommDestroy of the nonblocking parent failed on rank ",
                                                state.rank, ": ", ncclGetErrorString(result)));
    }
    state.comm = children[i];
    state.blocking = true;
  }
}

}  // namespace

Communicator::~Communicator() = default;
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;

std::vector<Communicator> Communicator::local(const std::vector<int>& devices, const CommOptions& options) {
  MT_CHECK(!devices.empty(), InvalidArgument, "Communicator::local: no devices given");
  check_options(options, "local");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    check_device(Device::cuda(devices[i]));
    for (std::size_t j = 0; j < i; ++j) {
      MT_CHECK(devices[i] != devices[j], InvalidArgument, "Communicator::local: device ", devices[i],
               " is named twice (one rank per device)");
    }
  }
  const int world = static_cast<int>(devices.size());
  const ncclUniqueId id = to_nccl(UniqueId::create());
  // ncclCommInitAll has no configuration argument (its communicators would block): the grouped
  // ncclCommInitRankConfig below is what NCCL documents it to be, nonblocking (make_blocking says why).
  std::vector<ncclConfig_t> configs(devices.size(), detail::comm_config(false));
  std::vector<std::shared_ptr<detail::CommState>> states;
  for (int r = 0; r < world; ++r)
    states.push_back(make_state(r, world, devices[static_cast<std::size_t>(r)], options));
  {
    const ncclResult_t start = ncclGroupStart();
    if (start != ncclSuccess) detail::fail(*states.front(), start, "Communicator::local");
  }
  ncclResult_t first_error = ncclSuccess;
  for (int r = 0; r < world; ++r) {
    DeviceGuard guard(devices[static_cast<std::size_t>(r)]);
    const ncclResult_t result = ncclCommInitRankConfig(&states[static_cast<std::size_t>(r)]->comm, world, id,
                                                       r, &configs[static_cast<std::size_t>(r)]);
    if (result != ncclSuccess && result != ncclInProgress && first_error == ncclSuccess) first_error = result;
  }
  ncclResult_t end = ncclGroupEnd();
  if (first_error != ncclSuccess) end = first_error;
  finish_group_init(states, end, "Communicator::local");
  if (options.blocking) make_blocking(states, "Communicator::local");
  auto group = std::make_shared<detail::LocalGroup>();
  group->size = world;
  for (auto& state : states) state->local = group;
  std::vector<Communicator> out;
  out.reserve(states.size());
  for (auto& state : states) out.emplace_back(std::move(state));
  return out;
}

Communicator Communicator::init(int rank, int world_size, const UniqueId& id, int device,
                                const CommOptions& options) {
  MT_CHECK(world_size >= 1, InvalidArgument, "Communicator::init: world size ", world_size,
           " must be at least 1");
  MT_CHECK(rank >= 0 && rank < world_size, InvalidArgument, "Communicator::init: rank ", rank,
           " is outside [0, ", world_size, ")");
  check_options(options, "init");
  if (device < 0) device = current_device();
  check_device(Device::cuda(device));
  auto state = make_state(rank, world_size, device, options);
  DeviceGuard guard(device);
  ncclConfig_t config = detail::comm_config(false);
  const ncclUniqueId nccl_id = to_nccl(id);
  const ncclResult_t result = ncclCommInitRankConfig(&state->comm, world_size, nccl_id, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    if (state->comm) {
      (void)ncclCommAbort(state->comm);
      state->comm = nullptr;
    }
    const std::string last = ncclGetLastError(nullptr);
    throw DistError(::mt::detail::str("NCCL error '", ncclGetErrorString(result), "' (",
                                      static_cast<int>(result), ")", last.empty() ? "" : ": ", last),
                    static_cast<int>(result), "Communicator::init", rank, world_size);
  }
  std::vector<std::shared_ptr<detail::CommState>> states{state};
  finish_group_init(states, ncclInProgress, "Communicator::init");
  if (options.blocking) make_blocking(states, "Communicator::init");
  return Communicator(std::move(state));
}

Communicator Communicator::from_env(const CommOptions& options) {
  const int rank = env_int("RANK", true, 0);
  const int world = env_int("WORLD_SIZE", true, 0);
  const int n_devices = cuda_device_count();
  MT_CHECK(n_devices > 0, DeviceError, "Communicator::from_env: no CUDA device: ", device_report());
  const int local_rank = env_int("LOCAL_RANK", false, rank % n_devices);
  MT_CHECK(rank < world, InvalidArgument, "Communicator::from_env: RANK=", rank,
           " is not below WORLD_SIZE=", world);
  UniqueId id;
  const char* hex = std::getenv("MT_NCCL_ID");
  const char* file = std::getenv("MT_NCCL_ID_FILE");
  if (hex && *hex) {
    id = UniqueId::from_env("MT_NCCL_ID");
  } else if (file && *file) {
    id = UniqueId::exchange_file(file, rank, options.timeout);
  } else {
    MT_THROW(InvalidArgument,
             "Communicator::from_env: neither MT_NCCL_ID (the id in hex) nor MT_NCCL_ID_FILE (a "
             "path every rank can read) is set");
  }
  return init(rank, world, id, local_rank, options);
}

void Communicator::abort() noexcept {
  if (!m_state || !m_state->comm) return;
  const ncclResult_t result = ncclCommAbort(m_state->comm);
  m_state->comm = nullptr;
  m_state->aborted = true;
  if (result != ncclSuccess && result != ncclInProgress) {
    ::mt::detail::log_error(
        ::mt::detail::str("ncclCommAbort failed on rank ", m_state->rank, ": ", ncclGetErrorString(result)));
  }
}

bool Communicator::aborted() const noexcept {
  return m_state && m_state->aborted;
}

void Communicator::rebuild(const UniqueId& id) {
  MT_CHECK(m_state != nullptr, InvalidArgument, "Communicator::rebuild: the communicator holds none");
  const CommOptions options{m_state->timeout, m_state->checked, m_state->blocking};
  const int rank = m_state->rank, world = m_state->world, device = m_state->device;
  abort();
  *this = init(rank, world, id, device, options);
}

void Communicator::meet_local() {
  detail::CommState& state = detail::usable(m_state, "Communicator::meet_local");
  if (!state.local) return;
  detail::LocalGroup& group = *state.local;
  std::unique_lock<std::mutex> lock(group.mutex);
  const std::uint64_t generation = group.generation;
  if (++group.arrived == group.size) {
    group.arrived = 0;
    ++group.generation;
    group.arrived_all.notify_all();
    return;
  }
  if (!group.arrived_all.wait_for(lock, state.timeout, [&] { return group.generation != generation; })) {
    --group.arrived;
    throw DistError(::mt::detail::str("waited ", std::chrono::duration<double>(state.timeout).count(),
                                      " s for the other ranks of this process (a rank's thread failed or "
                                      "never reached the meeting)"),
                    DistError::kNoCode, "meet_local", state.rank, state.world);
  }
}

void Communicator::rebuild_local(std::vector<Communicator>& comms) {
  MT_CHECK(!comms.empty(), InvalidArgument, "Communicator::rebuild_local: no communicators given");
  std::vector<int> devices(comms.size(), -1);
  for (std::size_t i = 0; i < comms.size(); ++i) {
    const Communicator& c = comms[i];
    MT_CHECK(c.defined(), InvalidArgument, "Communicator::rebuild_local: communicator ", i, " holds none");
    MT_CHECK(c.m_state->world == static_cast<int>(comms.size()) && c.m_state->rank == static_cast<int>(i),
             InvalidArgument, "Communicator::rebuild_local: communicator ", i, " is rank ", c.m_state->rank,
             " of ", c.m_state->world, ", not one of a set made by local() in rank order");
    devices[i] = c.m_state->device;
  }
  const CommOptions options{comms.front().m_state->timeout, comms.front().m_state->checked,
                            comms.front().m_state->blocking};
  for (Communicator& c : comms) c.abort();
  comms = local(devices, options);
}

int Communicator::rank() const {
  MT_CHECK(m_state != nullptr, InvalidArgument, "Communicator::rank: the communicator holds none");
  return m_state->rank;
}

int Communicator::size() const {
  MT_CHECK(m_state != nullptr, InvalidArgument, "Communicator::size: the communicator holds none");
  return m_state->world;
}

int Communicator::device() const {
  MT_CHECK(m_state != nullptr, InvalidArgument, "Communicator::device: the communicator holds none");
  return m_state->device;
}

std::chrono::milliseconds Communicator::timeout() const {
  MT_CHECK(m_state != nullptr, InvalidArgument, "Communicator::timeout: the communicator holds none");
  return m_state->timeout;
}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  MT_CHECK(m_state != nullptr, InvalidArgument, "Communicator::set_timeout: the communicator holds none");
  MT_CHECK(timeout.count() > 0, InvalidArgument,
           "Communicator::set_timeout: the timeout must be positive, got ", timeout.count(), " ms");
  m_state->timeout = timeout;
}

bool Communicator::checked() const {
  MT_CHECK(m_state != nullptr, InvalidArgument, "Communicator::checked: the communicator holds none");
  return m_state->checked;
}

void Communicator::set_checked(bool checked) {
  MT_CHECK(m_state != nullptr, InvalidArgument, "Communicator::set_checked: the communicator holds none");
  m_state->checked = checked;
}

cudaStream_t Communicator::stream() {
  detail::CommState& state = detail::usable(m_state, "Communicator::stream");
  return state.own_stream();
}

void Communicator::synchronize() {
  detail::CommState& state = detail::usable(m_state, "Communicator::synchronize");
  DeviceGuard guard(state.device);
  std::vector<cudaEvent_t> events;
  {
    std::lock_guard<std::mutex> lock(state.pending_mutex);
    for (const auto& entry : state.pending) events.push_back(entry.second.get());
  }
  for (cudaEvent_t event : events) {
    detail::poll_until(state, "Communicator::synchronize", state.timeout, [&] {
      const cudaError_t status = cudaEventQuery(event);
      if (status == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return false;
      }
      MT_CUDA_CHECK(status);
      return true;
    });
  }
}

}  // namespace mt::dist

#endif  // MT_HAS_NCCL
