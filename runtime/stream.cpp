#include "minitensor/runtime/stream.h"

#include <array>
#include <atomic>
#include <mutex>
#include <utility>

#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"

namespace mt {

namespace {

struct StreamHooks {
  static constexpr int kMax = 8;
  std::mutex mutex;  // registration only: hooks are read through `n`
  std::array<std::pair<StreamHook, StreamHook>, kMax> hooks{};
  std::atomic<int> n{0};
};
StreamHooks& stream_hooks() {
  static auto* h = new StreamHooks;  // never destroyed: streams may die during exit
  return *h;
}

// Creation in registration order, destruction in reverse (runtime/stream.h says why).
void run_hooks(bool created, int device, cudaStream_t stream) noexcept {
  StreamHooks& h = stream_hooks();
  const int n = h.n.load(std::memory_order_acquire);
  for (int j = 0; j < n; ++j) {
    const int i = created ? j : n - 1 - j;
    const StreamHook f =
        created ? h.hooks[static_cast<size_t>(i)].first : h.hooks[static_cast<size_t>(i)].second;
    if (f) f(device, stream);
  }
}

void destroy(cudaStream_t stream, int device) noexcept {
  run_hooks(false, device, stream);
  MT_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream));
}

}  // namespace

void add_stream_hooks(StreamHook created, StreamHook destroying) {
  StreamHooks& h = stream_hooks();
  std::lock_guard<std::mutex> lock(h.mutex);
  const int n = h.n.load(std::memory_order_relaxed);
  MT_CHECK(n < StreamHooks::kMax, InvalidArgument, "add_stream_hooks: more than ", StreamHooks::kMax,
           " hook pairs");
  h.hooks[static_cast<size_t>(n)] = {created, destroying};
  h.n.store(n + 1, std::memory_order_release);
}

Stream::Stream(int device, int priority) : m_device(device) {
  DeviceGuard guard(device);
  MT_CUDA_CHECK(cudaStreamCreateWithPriority(&m_stream, cudaStreamNonBlocking, priority));
  run_hooks(true, device, m_stream);
}

Stream::~Stream() {
  if (m_stream) destroy(m_stream, m_device);
}

Stream::Stream(Stream&& other) noexcept
    : m_stream(std::exchange(other.m_stream, nullptr)), m_device(std::exchange(other.m_device, -1)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (m_stream) destroy(m_stream, m_device);
    m_stream = std::exchange(other.m_stream, nullptr);
    m_device = std::exchange(other.m_device, -1);
  }
  return *this;
}

void Stream::synchronize() const {
  synchronize_stream(m_stream);
}

bool Stream::query() const {
  const cudaError_t status = cudaStreamQuery(m_stream);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  MT_CUDA_CHECK(status);
  return true;
}

namespace {

constexpr int kMaxDevices = 64;

// Streams of one device. Created lazily under the mutex and deliberately never destroyed: they must outlive
// every static object that might still enqueue work during exit.
struct DevicePool {
  std::once_flag once;
  cudaStream_t main = nullptr;
  std::array<cudaStream_t, kStreamPoolSize> side{};
  std::atomic<unsigned> next{0};
};

DevicePool& pool_for(int device) {
  check_device(Device::cuda(device));
  MT_CHECK(device < kMaxDevices, DeviceError, "device cuda:", device, " is beyond the supported ",
           kMaxDevices);
  static std::array<DevicePool, kMaxDevices> pools;
  DevicePool& pool = pools[static_cast<size_t>(device)];
  std::call_once(pool.once, [&] {
    DeviceGuard guard(device);
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&pool.main, cudaStreamNonBlocking));
    for (auto& s : pool.side) MT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  });
  return pool;
}

thread_local std::array<cudaStream_t, kMaxDevices> t_current{};

}  // namespace

cudaStream_t default_stream(int device) {
  return pool_for(device).main;
}

cudaStream_t pool_stream(int device, int i) {
  const int slot = ((i % kStreamPoolSize) + kStreamPoolSize) % kStreamPoolSize;
  return pool_for(device).side[static_cast<size_t>(slot)];
}

cudaStream_t next_pool_stream(int device) {
  DevicePool& pool = pool_for(device);
  return pool.side[pool.next.fetch_add(1, std::memory_order_relaxed) % kStreamPoolSize];
}

cudaStream_t current_stream(int device) {
  check_device(Device::cuda(device));
  cudaStream_t s = t_current[static_cast<size_t>(device)];
  return s ? s : default_stream(device);
}

StreamGuard::StreamGuard(cudaStream_t stream, int device) : m_device(device) {
  check_device(Device::cuda(device));
  m_previous = t_current[static_cast<size_t>(device)];
  t_current[static_cast<size_t>(device)] = stream;
}

StreamGuard::~StreamGuard() {
  t_current[static_cast<size_t>(m_device)] = m_previous;
}

void synchronize_stream(cudaStream_t stream) {
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace mt
