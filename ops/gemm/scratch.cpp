// Per-stream scratch of the SGEMM launches: split-K partials and packed operands.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "memory/allocator.h"
#include "ops/gemm/detail/scratch.h"
#include "runtime/error.h"

namespace mt::detail::gemm {

namespace {
// The scratch of one stream: split-K partials and packed operands. Grown on demand and kept: work on one
// stream is ordered, so reuse needs no sync and no per-call allocation.
//
// Launches captured into a CUDA graph run again at every replay, perhaps while eager launches on the same
// stream run elsewhere (a graph replays on the stream it is launched on). So they get scratch of their own,
// keyed apart from the stream's eager scratch, and allocated with the thread's capture mode relaxed (the
// allocation is not part of the graph; the buffer outlives it). A graph keeps the pointers it captured, so
// their buffers are never freed: an outgrown one is retired, not released. Graphs captured from one stream
// share its capture scratch, so they must not be replayed concurrently with each other.
struct StreamScratch {
  Allocation partials, packed;
  std::vector<Allocation> retired;
};
std::mutex g_scratch_mutex;
// Never destroyed: freeing at static destruction could outlive the allocators it came from.
auto& g_scratch = *new std::map<std::tuple<int, cudaStream_t, bool>, StreamScratch>();

// Relaxes the calling thread's stream-capture mode while alive (where `on`).
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

// The scratch of `stream` on the current device, under g_scratch_mutex.
class ScratchSlot {
 public:
  explicit ScratchSlot(cudaStream_t stream) : m_lock(g_scratch_mutex), m_stream(stream) {
    MT_CUDA_CHECK(cudaGetDevice(&m_device));
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    MT_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
    m_captured = status != cudaStreamCaptureStatusNone;
    m_entry = &g_scratch[{m_device, stream, m_captured}];
  }
  StreamScratch& operator*() const { return *m_entry; }
  // Makes `a` (a member of this slot) at least `bytes`, at least `min_bytes` when (re)allocated; true then.
  bool grow(Allocation& a, std::size_t bytes, std::size_t min_bytes) {
    if (a && a.size() >= bytes) return false;
    const RelaxedCaptureMode relaxed(m_captured);
    if (m_captured && a) m_entry->retired.push_back(std::move(a));
    a.reset();
    a = cuda_allocator(m_device).allocate(std::max(bytes, min_bytes), m_stream);
    return true;
  }

 private:
  std::lock_guard<std::mutex> m_lock;
  cudaStream_t m_stream;
  int m_device = 0;
  bool m_captured = false;
  StreamScratch* m_entry = nullptr;
};
}  // namespace

float* split_scratch(std::size_t partial_bytes, cudaStream_t stream) {
  ScratchSlot slot(stream);
  StreamScratch& e = *slot;
  slot.grow(e.partials, partial_bytes, std::size_t{1} << 20);
  return static_cast<float*>(e.partials.data());
}

float* pack_scratch(std::size_t bytes, cudaStream_t stream) {
  ScratchSlot slot(stream);
  StreamScratch& e = *slot;
  slot.grow(e.packed, bytes, std::size_t{1} << 20);
  return static_cast<float*>(e.packed.data());
}

}  // namespace mt::detail::gemm
