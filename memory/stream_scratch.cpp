#include "minitensor/memory/stream_scratch.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "minitensor/memory/allocator.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/stream.h"

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

// The capture scratch of destroyed streams: graphs captured from a stream may outlive it and still use it.
std::vector<Entry>& orphans() {
  static auto* o = new std::vector<Entry>();
  return *o;
}

// An mt::Stream about to be destroyed: its eager scratch goes back to the allocator (stream-ordered on the
// stream, which still exists; this hook runs before the allocator's, which then retires the stream), and
// its capture scratch is kept apart, so a stream created later with the same handle does not share it.
void on_stream_destroying(int device, cudaStream_t stream) noexcept {
  Entry eager;  // freed after the lock is let go
  const std::lock_guard<std::recursive_mutex> lock(registry_mutex());
  if (auto it = registry().find({device, stream, false}); it != registry().end()) {
    eager = std::move(it->second);
    registry().erase(it);
  }
  if (auto it = registry().find({device, stream, true}); it != registry().end()) {
    try {
      orphans().push_back(std::move(it->second));
      registry().erase(it);
    } catch (...) {  // no memory for the list: the entry stays under the handle, shared as before
    }
  }
}

// Once per process, after the device allocator exists (it installs its own hooks when made), so that
// this hook runs first at a stream's destruction (destroying hooks run in reverse order).
void install_stream_hook() {
  static std::once_flag once;
  std::call_once(once, [] { add_stream_hooks(nullptr, &on_stream_destroying); });
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
  Allocator& allocator = cuda_allocator(device);
  install_stream_hook();
  a = allocator.allocate(std::max(bytes, options.min_bytes), stream);
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
