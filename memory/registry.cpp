// The process-wide allocators: the caching ones, with caching switched off when MT_DISABLE_CACHING is set to
// anything but 0 (one cudaMalloc / cudaFree per allocation, for compute-sanitizer).
//
// They are created with `new` and never destroyed: tensors in static storage may be released during exit,
// after any function-local static allocator would have been destroyed.
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "minitensor/memory/allocator.h"
#include "minitensor/memory/detail/caching.h"
#include "minitensor/memory/detail/pinned.h"
#include "minitensor/memory/stats.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/stream.h"

namespace mt {

namespace {

constexpr int kMaxDevices = 64;

// -1: follow the environment; 0 / 1: set_caching_enabled() said so.
std::atomic<int> g_caching_override{-1};

bool caching_default() {
  const int o = g_caching_override.load();
  if (o >= 0) return o == 1;
  const char* env = std::getenv("MT_DISABLE_CACHING");
  return !(env && *env && std::strcmp(env, "0") != 0);
}

struct Registry {
  std::mutex mutex;
  std::array<std::atomic<CachingDeviceAllocator*>, kMaxDevices> devices{};
  std::atomic<CachingHostAllocator*> pinned{nullptr};
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// mt::Stream lifetimes, passed to the device's allocator if it exists (runtime/stream.h).
void on_stream_created(int device, cudaStream_t stream) {
  if (device < 0 || device >= kMaxDevices) return;
  if (CachingDeviceAllocator* a = registry().devices[static_cast<std::size_t>(device)].load())
    a->stream_created(stream);
}
void on_stream_destroying(int device, cudaStream_t stream) {
  if (CachingHostAllocator* p = registry().pinned.load()) p->stream_destroying(stream);
  if (device < 0 || device >= kMaxDevices) return;
  if (CachingDeviceAllocator* a = registry().devices[static_cast<std::size_t>(device)].load())
    a->stream_destroying(stream);
}

// Once per process, by the first caching allocator made.
void install_stream_hooks() {
  static std::once_flag hooks;
  std::call_once(hooks, [] { add_stream_hooks(&on_stream_created, &on_stream_destroying); });
}

}  // namespace

CachingDeviceAllocator& caching_cuda_allocator(int device) {
  check_device(Device::cuda(device));
  MT_CHECK(device < kMaxDevices, DeviceError, "cuda:", device, " is beyond the supported ", kMaxDevices,
           " devices");
  Registry& r = registry();
  auto& slot = r.devices[static_cast<std::size_t>(device)];
  if (CachingDeviceAllocator* a = slot.load(std::memory_order_acquire)) return *a;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (CachingDeviceAllocator* a = slot.load(std::memory_order_acquire)) return *a;
  install_stream_hooks();
  auto* a = new CachingDeviceAllocator(make_cuda_backend(device), caching_default());
  slot.store(a, std::memory_order_release);
  return *a;
}

CachingHostAllocator& caching_pinned_allocator() {
  Registry& r = registry();
  if (CachingHostAllocator* a = r.pinned.load(std::memory_order_acquire)) return *a;
  check_device(Device::cuda(0));
  std::lock_guard<std::mutex> lock(r.mutex);
  if (CachingHostAllocator* a = r.pinned.load(std::memory_order_acquire)) return *a;
  install_stream_hooks();
  auto* a = new CachingHostAllocator(make_pinned_backend(), caching_default());
  r.pinned.store(a, std::memory_order_release);
  return *a;
}

Allocator& cuda_allocator(int device) {
  return caching_cuda_allocator(device);
}

Allocator& pinned_allocator() {
  return caching_pinned_allocator();
}

void empty_cache() {
  Registry& r = registry();
  for (auto& slot : r.devices)
    if (CachingDeviceAllocator* a = slot.load(std::memory_order_acquire)) a->empty_cache();
  if (CachingHostAllocator* a = r.pinned.load(std::memory_order_acquire)) a->empty_cache();
}

MemoryStats memory_stats(int device) {
  return caching_cuda_allocator(device).stats();
}

void reset_peak_memory_stats(int device) {
  caching_cuda_allocator(device).reset_peak_stats();
}

std::string memory_summary(int device) {
  return caching_cuda_allocator(device).memory_summary();
}

std::vector<SegmentInfo> memory_snapshot(int device) {
  return caching_cuda_allocator(device).snapshot();
}

void set_caching_enabled(bool enabled) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  g_caching_override.store(enabled ? 1 : 0);
  for (auto& slot : r.devices)
    if (CachingDeviceAllocator* a = slot.load(std::memory_order_acquire)) a->set_caching_enabled(enabled);
  if (CachingHostAllocator* a = r.pinned.load(std::memory_order_acquire)) a->set_caching_enabled(enabled);
}

}  // namespace mt
