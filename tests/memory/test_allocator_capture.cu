// The caching allocator while a stream is being captured into a CUDA graph: releases and cross-stream
// searches that would record an event on the capturing stream (and later poll it) must leave the capture
// valid; the blocks held back come back once the capture has ended.
#include <gtest/gtest.h>

#include "minitensor/memory/detail/caching.h"
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

}  // namespace
}  // namespace mt
