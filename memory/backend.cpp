#include "minitensor/memory/detail/backend.h"

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>

#include "minitensor/runtime/error.h"

namespace mt {

namespace {

// cudaEvent_t objects are cheap to record and query but not to create (and concurrent creation is slow), so
// each device keeps the ones it has made. Events never move between devices: an event must be recorded on a
// stream of the device it was created on.
struct CudaEvent {
  cudaEvent_t event;
  int device;
};

class EventPool {
 public:
  CudaEvent* acquire(int device) {
    MT_CHECK(device >= 0 && device < 64, DeviceError, "event pool: device ", device, " out of range");
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      auto& free = m_free[static_cast<std::size_t>(device)];
      if (!free.empty()) {
        CudaEvent* e = free.back();
        free.pop_back();
        return e;
      }
    }
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return new CudaEvent{e, device};
  }
  void release(CudaEvent* e) noexcept {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_free[static_cast<std::size_t>(e->device)].push_back(e);
  }

 private:
  std::mutex m_mutex;
  std::array<std::vector<CudaEvent*>, 64> m_free;
};

// The pools live as long as the process: allocators are leaked on purpose, and so are their events.
EventPool& event_pool() {
  static EventPool* pool = new EventPool;
  return *pool;
}

bool query_event(cudaEvent_t e) {
  const cudaError_t status = cudaEventQuery(e);
  if (status == cudaErrorNotReady) return false;
  MT_CUDA_CHECK(status);
  return true;
}

// Shared event handling of the CUDA backends; `device_of` says which device a stream's event must live on.
class CudaEventsBackend : public MemoryBackend {
 public:
  // A stream being captured into a CUDA graph takes no event: one recorded there is a node of the graph,
  // never "recorded" for a query, and querying it would invalidate the capture. The allocator treats the
  // refusal as a stream that cannot take an event now (the block waits; a fence is not set).
  EventHandle record_event(cudaStream_t stream) override {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    MT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) MT_CUDA_CHECK(cudaErrorStreamCaptureUnsupported);
    CudaEvent* e = event_pool().acquire(device_of(stream));
    const cudaError_t status = cudaEventRecord(e->event, stream);
    if (status != cudaSuccess) {
      event_pool().release(e);
      MT_CUDA_CHECK(status);
    }
    return e;
  }
  bool event_done(EventHandle event) override { return query_event(static_cast<CudaEvent*>(event)->event); }
  void event_wait(EventHandle event) override {
    MT_CUDA_CHECK(cudaEventSynchronize(static_cast<CudaEvent*>(event)->event));
  }
  void release_event(EventHandle event) noexcept override {
    event_pool().release(static_cast<CudaEvent*>(event));
  }

 protected:
  virtual int device_of(cudaStream_t stream) = 0;
};

class CudaBackend final : public CudaEventsBackend {
 public:
  explicit CudaBackend(int device) : m_device(device) {}

  void* allocate(std::size_t bytes) override {
    DeviceGuard guard(m_device);
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it so the caller's next checks do not see it
      return nullptr;
    }
    MT_CUDA_CHECK(status);
    return p;
  }
  void deallocate(void* ptr, std::size_t) noexcept override {
    try {
      DeviceGuard guard(m_device);
      MT_CUDA_CHECK_NOTHROW(cudaFree(ptr));
    } catch (const std::exception& e) {
      detail::log_error(std::string("cuda backend: ") + e.what());
    }
  }
  void memory_info(std::size_t& free_bytes, std::size_t& total_bytes) override {
    DeviceGuard guard(m_device);
    MT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  }
  Device device() const override { return Device::cuda(m_device); }
  std::string name() const override { return "cuda"; }

 protected:
  int device_of(cudaStream_t) override { return m_device; }

 private:
  int m_device;
};

class PinnedBackend final : public CudaEventsBackend {
 public:
  void* allocate(std::size_t bytes) override {
    check_device(Device::cuda(0));
    void* p = nullptr;
    const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    MT_CUDA_CHECK(status);
    return p;
  }
  void deallocate(void* ptr, std::size_t) noexcept override { MT_CUDA_CHECK_NOTHROW(cudaFreeHost(ptr)); }
  void memory_info(std::size_t& free_bytes, std::size_t& total_bytes) override {
    const long page = sysconf(_SC_PAGESIZE);
    total_bytes = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(page);
    free_bytes = static_cast<std::size_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<std::size_t>(page);
  }
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "pinned"; }

 protected:
  int device_of(cudaStream_t stream) override {
    int dev = 0;
    if (stream) {
      MT_CUDA_CHECK(cudaStreamGetDevice(stream, &dev));
    } else {
      MT_CUDA_CHECK(cudaGetDevice(&dev));
    }
    return dev;
  }
};

}  // namespace

std::unique_ptr<MemoryBackend> make_cuda_backend(int device) {
  check_device(Device::cuda(device));
  return std::make_unique<CudaBackend>(device);
}

std::unique_ptr<MemoryBackend> make_pinned_backend() {
  return std::make_unique<PinnedBackend>();
}

// ---------------------------------------------------------------- fake

FakeBackend::FakeBackend(std::size_t capacity_bytes, Device device)
    : m_device(device), m_capacity(capacity_bytes) {}

FakeBackend::~FakeBackend() {
  for (auto& [ptr, bytes] : m_live) std::free(ptr);
}

namespace {
[[noreturn]] void fake_fault(const char* call, int device) {
  throw CudaError(cudaErrorUnknown, call, __FILE__, __LINE__, device);
}
}  // namespace

void* FakeBackend::allocate(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_fail_allocate) fake_fault("fake allocate", m_device.index());
  if (bytes > m_capacity - m_used) return nullptr;
  // 512-byte alignment, like cudaMalloc's 256 B or more; the size is rounded as aligned_alloc requires.
  void* p = std::aligned_alloc(512, (bytes + 511) / 512 * 512);
  if (!p) return nullptr;
  m_used += bytes;
  m_live.emplace(p, bytes);
  ++m_n_allocs;
  return p;
}

void FakeBackend::deallocate(void* ptr, std::size_t bytes) noexcept {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto it = m_live.find(ptr);
  if (it == m_live.end() || it->second != bytes) {
    detail::log_error(
        detail::str("fake backend: deallocate of ", ptr, " (", bytes, " bytes) that it did not hand out"));
    std::abort();
  }
  m_used -= bytes;
  m_live.erase(it);
  ++m_n_frees;
  std::free(ptr);
  for (auto& [s, q] : m_queues) q.completed = q.submitted;
}

MemoryBackend::EventHandle FakeBackend::record_event(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_fail_record) fake_fault("fake record_event", m_device.index());
  FakeEvent* e = nullptr;
  if (!m_event_pool.empty()) {
    e = m_event_pool.back();
    m_event_pool.pop_back();
  } else {
    m_events.push_back(std::make_unique<FakeEvent>());
    e = m_events.back().get();
  }
  e->stream = stream;
  e->ticket = m_queues[stream].submitted;
  ++m_n_outstanding;
  if (m_destroyed.count(stream)) ++m_n_dead_records;
  return e;
}

void FakeBackend::destroy_stream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_destroyed.insert(stream);
}

void FakeBackend::create_stream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_destroyed.erase(stream);
}

std::int64_t FakeBackend::n_events_on_destroyed_streams() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_n_dead_records;
}

bool FakeBackend::event_done(EventHandle event) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ++m_n_queries;
  if (m_fail_query) fake_fault("fake event_done", m_device.index());
  auto* e = static_cast<FakeEvent*>(event);
  return m_queues[e->stream].completed >= e->ticket;
}

void FakeBackend::event_wait(EventHandle event) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_fail_query) fake_fault("fake event_wait", m_device.index());
  auto* e = static_cast<FakeEvent*>(event);
  Queue& q = m_queues[e->stream];
  if (q.completed < e->ticket) q.completed = e->ticket;
  ++m_n_waits;
}

void FakeBackend::release_event(EventHandle event) noexcept {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_event_pool.push_back(static_cast<FakeEvent*>(event));
  --m_n_outstanding;
}

void FakeBackend::memory_info(std::size_t& free_bytes, std::size_t& total_bytes) {
  std::lock_guard<std::mutex> lock(m_mutex);
  free_bytes = m_capacity - m_used;
  total_bytes = m_capacity;
}

void FakeBackend::submit(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ++m_queues[stream].submitted;
}

void FakeBackend::complete(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(m_mutex);
  Queue& q = m_queues[stream];
  q.completed = q.submitted;
}

void FakeBackend::complete_all() {
  std::lock_guard<std::mutex> lock(m_mutex);
  for (auto& [s, q] : m_queues) q.completed = q.submitted;
}

bool FakeBackend::pending(cudaStream_t stream) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto it = m_queues.find(stream);
  return it != m_queues.end() && it->second.completed < it->second.submitted;
}

std::uint64_t FakeBackend::submitted(cudaStream_t stream) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto it = m_queues.find(stream);
  return it == m_queues.end() ? 0 : it->second.submitted;
}

std::uint64_t FakeBackend::completed(cudaStream_t stream) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto it = m_queues.find(stream);
  return it == m_queues.end() ? 0 : it->second.completed;
}

void FakeBackend::set_capacity(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_capacity = bytes < m_used ? m_used : bytes;
}

std::size_t FakeBackend::used() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_used;
}
std::int64_t FakeBackend::n_allocs() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_n_allocs;
}
std::int64_t FakeBackend::n_frees() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_n_frees;
}
std::int64_t FakeBackend::n_events_created() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return static_cast<std::int64_t>(m_events.size());
}
std::int64_t FakeBackend::n_events_outstanding() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_n_outstanding;
}
std::int64_t FakeBackend::n_event_waits() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_n_waits;
}
std::int64_t FakeBackend::n_event_queries() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_n_queries;
}
std::int64_t FakeBackend::n_live_allocations() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return static_cast<std::int64_t>(m_live.size());
}

void FakeBackend::set_fail_allocate(bool fail) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_fail_allocate = fail;
}
void FakeBackend::set_fail_record_event(bool fail) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_fail_record = fail;
}
void FakeBackend::set_fail_event_query(bool fail) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_fail_query = fail;
}

}  // namespace mt
