#include "minitensor/memory/stream_scratch.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "minitensor/memory/allocator.h"
#include "minitensor/runtime/error.h"

namespace mt {
namespace {

// One (device, stream, captured) entry: a buffer per slot, and the captured buffers that were outgrown.
struct Entry {
  std::map<ScratchSlot, Allocation> slots;
  std::vector<Allocation> retired;
};

std::recursive_mutex& registry_mutex() {
  static std::recursive_mutex m;
  return m;
}

std::map<std::tuple<int, cudaStream_t, bool>, Entry>& registry() {
  // Leaked on purpose: process-exit destruction would run after the CUDA runtime has gone.
  static auto* r = new std::map<std::tuple<int, cudaStream_t, bool>, Entry>();
  return *r;
}

// Relaxes the calling thread's stream-capture mode while alive (where `on`): allocating is not allowed while
// a stream of the thread is captured in the global or thread-local mode.
class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(bool on) : m_on(on) {
    if (m_on) MT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&m_mode));
  }
  ~RelaxedCaptureMode() {
    if (m_on) MT_CUDA_CHECK_NOTHROW(cudaThreadExchangeStreamCaptureMode(&m_mode));
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  bool m_on;
  cudaStreamCaptureMode m_mode = cudaStreamCaptureModeRelaxed;
};

}  // namespace

StreamScratchLock::StreamScratchLock() : m_lock(registry_mutex()) {}

void* stream_scratch(ScratchSlot slot, std::size_t bytes, cudaStream_t stream,
                     const ScratchOptions& options) {
  if (bytes == 0) return nullptr;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  MT_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  const bool captured = status != cudaStreamCaptureStatusNone;
  if (captured && options.eager_only) return nullptr;
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::recursive_mutex> lock(registry_mutex());
  Entry& entry = registry()[{device, stream, captured}];
  Allocation& a = entry.slots[slot];
  if (a && a.size() >= bytes) return a.data();
  const RelaxedCaptureMode relaxed(captured);
  if (captured && a) entry.retired.push_back(std::move(a));
  a.reset();  // release first: the old buffer's users are ordered on the stream before the new one's
  a = cuda_allocator(device).allocate(std::max(bytes, options.min_bytes), stream);
  if (options.zero_on_allocate) MT_CUDA_CHECK(cudaMemsetAsync(a.data(), 0, a.size(), stream));
  return a.data();
}

void release_capture_scratch(int device, cudaStream_t stream) noexcept {
  Entry released;  // freed after the lock is let go
  {
    const std::lock_guard<std::recursive_mutex> lock(registry_mutex());
    auto it = registry().find({device, stream, true});
    if (it == registry().end()) return;
    released = std::move(it->second);
    registry().erase(it);
  }
}

}  // namespace mt
