// The caching allocator while a stream is being captured into a CUDA graph: releases and cross-stream
// searches that would record an event on the capturing stream (and later poll it) must leave the capture
// valid; the blocks held back come back once the capture has ended. And the per-stream scratch's capture
// buffers (memory/stream_scratch.h).
#include <gtest/gtest.h>

#include "minitensor/memory/detail/caching.h"
#include "minitensor/memory/stream_scratch.h"
#include "minitensor/runtime/stream.h"
#include "tests/common/gpu.h"

namespace mt {
namespace {

// Writes only: the blocks are fresh, and reading them would be a read of uninitialised memory (initcheck).
__global__ void touch(float* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = static_cast<float>(i);
}

TEST(AllocatorCapture, ReleasesAndSearchesDuringCaptureKeepItValid) {
  MT_REQUIRE_GPU();
  CachingDeviceAllocator& alloc = caching_cuda_allocator(0);
  Stream a(0), b(0);
  constexpr int n = 1 << 16;
  const std::int64_t active_before = alloc.stats().active_bytes.current;
  // A block of stream a used on b: its release must fence b.
  Allocation x = alloc.allocate(n * sizeof(float), a.get());
  Allocation y = alloc.allocate(n * sizeof(float), b.get());  // b's pool holds a segment
  y.reset();
  ASSERT_EQ(cudaStreamBeginCapture(b.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  // Allocating may reach cudaMalloc, which only the relaxed mode allows during a capture (as stream_scratch
  // does).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  touch<<<n / 256, 256, 0, b.get()>>>(static_cast<float*>(x.data()), n);
  alloc.record_stream(x, b.get());
  x.reset();  // the release would record an event on b, which is capturing
  // An allocation on a that searches b's pool (a foreign fence on b) and one on b itself.
  Allocation z = alloc.allocate(8 << 20, a.get());
  Allocation w = alloc.allocate(n * sizeof(float), b.get());
  touch<<<n / 256, 256, 0, b.get()>>>(static_cast<float*>(w.data()), n);
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(b.get(), &graph), cudaSuccess) << "the capture was invalidated";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, b.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b.get()), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  w.reset();
  z.reset();
  // The block held back during the capture is fenced now and comes back.
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().active_bytes.current, active_before);
}

// A stream's capture scratch is kept apart from its eager scratch, and its owner can give it back (the graph
// executor does, for its own capture streams, once their graphs are gone); the eager scratch stays.
TEST(StreamScratchCapture, KeptApartAndReleasedByTheOwner) {
  MT_REQUIRE_GPU();
  CachingDeviceAllocator& alloc = caching_cuda_allocator(0);
  Stream s(0);
  constexpr std::size_t kBytes = std::size_t{3} << 20;
  void* eager = stream_scratch(ScratchSlot::GemmPacked, kBytes, s.get());
  ASSERT_NE(eager, nullptr);
  auto capture_scratch = [&] {
    EXPECT_EQ(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
    void* p = stream_scratch(ScratchSlot::GemmPacked, kBytes, s.get());
    void* again = stream_scratch(ScratchSlot::GemmPacked, kBytes, s.get());
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s.get(), &graph), cudaSuccess) << "the capture was invalidated";
    if (graph) EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_EQ(p, again);
    return p;
  };
  void* captured = capture_scratch();
  ASSERT_NE(captured, nullptr);
  EXPECT_NE(captured, eager);
  const std::int64_t active = alloc.stats().active_bytes.current;
  release_capture_scratch(0, s.get());
  EXPECT_LE(alloc.stats().active_bytes.current, active - static_cast<std::int64_t>(kBytes));
  release_capture_scratch(0, s.get());  // nothing left: a no-op
  EXPECT_EQ(stream_scratch(ScratchSlot::GemmPacked, kBytes, s.get()), eager);
  // The next capture gets a buffer of its own again.
  void* next = capture_scratch();
  EXPECT_NE(next, nullptr);
  EXPECT_NE(next, eager);
  release_capture_scratch(0, s.get());
  EXPECT_EQ(cudaStreamSynchronize(s.get()), cudaSuccess);
}

// Destroying an mt::Stream gives its eager scratch back to the allocator; its capture scratch stays, since a
// graph captured from the stream may outlive it, and such a graph still replays (on another stream) into it.
TEST(StreamScratchCapture, ADestroyedStreamGivesBackItsEagerScratchAndKeepsItsCaptureScratch) {
  MT_REQUIRE_GPU();
  CachingDeviceAllocator& alloc = caching_cuda_allocator(0);
  constexpr std::size_t kBytes = std::size_t{3} << 20;
  constexpr int n = static_cast<int>(kBytes / sizeof(float));
  const std::int64_t before = alloc.stats().active_bytes.current;
  std::int64_t eager_bytes = 0, captured_bytes = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  {
    Stream s(0);
    auto* eager = static_cast<float*>(stream_scratch(ScratchSlot::GemmPacked, kBytes, s.get()));
    ASSERT_NE(eager, nullptr);
    touch<<<n / 256, 256, 0, s.get()>>>(eager, n);
    eager_bytes = alloc.stats().active_bytes.current - before;
    EXPECT_GE(eager_bytes, static_cast<std::int64_t>(kBytes));
    ASSERT_EQ(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
    auto* captured = static_cast<float*>(stream_scratch(ScratchSlot::GemmPacked, kBytes, s.get()));
    touch<<<n / 256, 256, 0, s.get()>>>(captured, n);
    ASSERT_EQ(cudaStreamEndCapture(s.get(), &graph), cudaSuccess) << "the capture was invalidated";
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    captured_bytes = alloc.stats().active_bytes.current - before - eager_bytes;
    EXPECT_GE(captured_bytes, static_cast<std::int64_t>(kBytes));
  }
  EXPECT_EQ(alloc.stats().active_bytes.current - before, captured_bytes) << "the eager scratch came back";
  // The stream is gone; its graph replays into the capture scratch it kept.
  Stream other(0);
  ASSERT_EQ(cudaGraphLaunch(exec, other.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(other.get()), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  // A stream made after it (perhaps given the same handle) starts without scratch: asked, it allocates.
  const std::int64_t kept = alloc.stats().active_bytes.current;
  EXPECT_NE(stream_scratch(ScratchSlot::GemmPacked, kBytes, other.get()), nullptr);
  EXPECT_GE(alloc.stats().active_bytes.current - kept, static_cast<std::int64_t>(kBytes));
  EXPECT_EQ(cudaStreamSynchronize(other.get()), cudaSuccess);
}

}  // namespace
}  // namespace mt
