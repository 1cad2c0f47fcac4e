// The caching allocators on a real GPU (skipped without one).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "minitensor/memory/detail/caching.h"
#include "minitensor/memory/detail/pinned.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/event.h"
#include "minitensor/runtime/stream.h"
#include "tests/common/gpu.h"

namespace mt {
namespace {

constexpr std::size_t MiB = 1024 * 1024;

// Fill and check are bandwidth-bound: 4 bytes written (or read) per thread-iteration, no reuse.
__global__ void fill_words(std::uint32_t* p, std::size_t n, std::uint32_t pattern) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = pattern ^ static_cast<std::uint32_t>(i);
}

__global__ void check_words(const std::uint32_t* p, std::size_t n, std::uint32_t pattern, int* errors) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    if (p[i] != (pattern ^ static_cast<std::uint32_t>(i))) atomicAdd(errors, 1);
}

// Keeps a stream busy for about `cycles` SM clocks.
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

unsigned grid_for(std::size_t n) {
  return static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 1024));
}

void launch_fill(void* p, std::size_t bytes, std::uint32_t pattern, cudaStream_t s) {
  const std::size_t n = bytes / 4;
  if (!n) return;
  fill_words<<<grid_for(n), 256, 0, s>>>(static_cast<std::uint32_t*>(p), n, pattern);
  MT_CUDA_CHECK_LAUNCH();
}

void launch_check(const void* p, std::size_t bytes, std::uint32_t pattern, int* errors, cudaStream_t s) {
  const std::size_t n = bytes / 4;
  if (!n) return;
  check_words<<<grid_for(n), 256, 0, s>>>(static_cast<const std::uint32_t*>(p), n, pattern, errors);
  MT_CUDA_CHECK_LAUNCH();
}

bool caching_from_env() {
  const char* e = std::getenv("MT_DISABLE_CACHING");
  return !(e && *e && std::string(e) != "0");
}

TEST(GpuAllocator, RegistryHandsOutTheCachingAllocators) {
  MT_REQUIRE_GPU();
  EXPECT_NE(dynamic_cast<CachingDeviceAllocator*>(&cuda_allocator(0)), nullptr);
  EXPECT_NE(dynamic_cast<CachingHostAllocator*>(&pinned_allocator()), nullptr);
  EXPECT_EQ(&cuda_allocator(0), &caching_cuda_allocator(0));
}

TEST(GpuAllocator, FuzzWithKernelsOnSeveralStreams) {
  MT_REQUIRE_GPU();
  CachingDeviceAllocator alloc(make_cuda_backend(0), caching_from_env());
  DeviceGuard guard(0);
  std::vector<Stream> streams;
  for (int i = 0; i < 4; ++i) streams.emplace_back(0);
  int* errors = nullptr;
  MT_CUDA_CHECK(cudaMalloc(&errors, sizeof(int)));
  MT_CUDA_CHECK(cudaMemset(errors, 0, sizeof(int)));
  struct Live {
    Allocation a;
    std::uint32_t pattern;
  };
  std::vector<Live> live;
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int step = 0; step < 4000; ++step) {
    const double r = unit(rng);
    if ((r < 0.45 && live.size() < 64) || live.empty()) {
      const auto bytes =
          static_cast<std::size_t>(std::exp(unit(rng) * std::log(16.0 * MiB))) & ~std::size_t(3);
      cudaStream_t s = streams[rng() % streams.size()];
      Allocation a = alloc.allocate(bytes, s);
      const auto pattern = static_cast<std::uint32_t>(rng());
      launch_fill(a.data(), bytes, pattern, s);
      live.push_back({std::move(a), pattern});
    } else if (r < 0.85) {
      const std::size_t i = rng() % live.size();
      launch_check(live[i].a.data(), live[i].a.size(), live[i].pattern, errors, live[i].a.stream());
      live[i] = std::move(live.back());
      live.pop_back();
    } else if (r < 0.99) {
      // Read it on another stream too, ordered after the writes; the allocator must keep it until then.
      Live& l = live[rng() % live.size()];
      cudaStream_t other = streams[rng() % streams.size()];
      Event written;
      written.record(l.a.stream());
      written.wait(other);
      launch_check(l.a.data(), l.a.size(), l.pattern, errors, other);
      alloc.record_stream(l.a, other);
    } else {
      alloc.empty_cache();
    }
  }
  for (Live& l : live) launch_check(l.a.data(), l.a.size(), l.pattern, errors, l.a.stream());
  live.clear();
  MT_CUDA_CHECK(cudaDeviceSynchronize());
  int host_errors = -1;
  MT_CUDA_CHECK(cudaMemcpy(&host_errors, errors, sizeof(int), cudaMemcpyDeviceToHost));
  MT_CUDA_CHECK(cudaFree(errors));
  EXPECT_EQ(host_errors, 0);
  const MemoryStats st = alloc.stats();
  EXPECT_EQ(st.allocated_bytes.current, 0);
  if (alloc.caching_enabled()) EXPECT_GT(st.cache_hits, 500);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved_bytes.current, 0);
}

TEST(GpuAllocator, OomLargerThanDeviceThenStillWorks) {
  MT_REQUIRE_GPU();
  CachingDeviceAllocator& alloc = caching_cuda_allocator(0);
  const std::size_t total = static_cast<std::size_t>(device_properties(0).total_memory);
  const cudaStream_t s = current_stream(0);
  try {
    Allocation a = alloc.allocate(total + 1024 * MiB, s);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("device free"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tried to allocate"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the refusal leaves no sticky error
  Allocation b = alloc.allocate(MiB, s);
  ASSERT_NE(b.data(), nullptr);
  launch_fill(b.data(), MiB, 7, s);
  MT_CUDA_CHECK(cudaStreamSynchronize(s));
}

// The CUDA backend, counting the bytes it hands back to the driver. Free memory as cudaMemGetInfo reports it
// is device-wide and moves with every other process on the card (sanitizer shards share one), so the test
// reads this process's own evidence: the bytes passed to cudaFree and the driver no longer knowing the block.
class CountingCudaBackend final : public MemoryBackend {
 public:
  explicit CountingCudaBackend(std::size_t* freed) : m_inner(make_cuda_backend(0)), m_freed(freed) {}
  void* allocate(std::size_t bytes) override { return m_inner->allocate(bytes); }
  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    *m_freed += bytes;
    m_inner->deallocate(ptr, bytes);
  }
  EventHandle record_event(cudaStream_t stream) override { return m_inner->record_event(stream); }
  bool event_done(EventHandle event) override { return m_inner->event_done(event); }
  void event_wait(EventHandle event) override { m_inner->event_wait(event); }
  void release_event(EventHandle event) noexcept override { m_inner->release_event(event); }
  void memory_info(std::size_t& free_bytes, std::size_t& total_bytes) override {
    m_inner->memory_info(free_bytes, total_bytes);
  }
  Device device() const override { return m_inner->device(); }
  std::string name() const override { return m_inner->name(); }

 private:
  std::unique_ptr<MemoryBackend> m_inner;
  std::size_t* m_freed;
};

TEST(GpuAllocator, EmptyCacheReturnsMemoryToTheDriver) {
  MT_REQUIRE_GPU();
  std::size_t freed = 0;
  CachingDeviceAllocator alloc(std::make_unique<CountingCudaBackend>(&freed));
  DeviceGuard guard(0);
  Stream s(0);
  void* block = nullptr;
  {
    Allocation a = alloc.allocate(512 * MiB, s);
    block = a.data();
    launch_fill(a.data(), 512 * MiB, 1, s);
  }
  s.synchronize();
  EXPECT_EQ(alloc.stats().reserved_bytes.current, static_cast<std::int64_t>(512 * MiB));
  EXPECT_EQ(freed, 0u);  // released to the cache, not to the driver
  alloc.empty_cache();
  EXPECT_EQ(freed, 512 * MiB);
  EXPECT_EQ(alloc.stats().reserved_bytes.current, 0);
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, block);
  EXPECT_TRUE(e != cudaSuccess || attr.type == cudaMemoryTypeUnregistered)
      << "the driver still knows the emptied block: " << cudaGetErrorString(e) << ", type " << attr.type;
  (void)cudaGetLastError();  // a refused query leaves no sticky error for the next test
}

// An mt::Stream that dies with work in flight and a free block cached for it: the process-wide allocator
// hears of it first (runtime/stream.h hooks), waits for that work, and lends the block to the next stream
// that asks, without touching the dead stream again.
TEST(GpuAllocator, DestroyedStreamsBlocksGoToOtherStreams) {
  MT_REQUIRE_GPU();
  if (!caching_from_env()) GTEST_SKIP() << "caching is off (MT_DISABLE_CACHING)";
  CachingDeviceAllocator& alloc = caching_cuda_allocator(0);
  DeviceGuard guard(0);
  alloc.empty_cache();  // the dead stream's segment is then the only free one of its size
  void* p = nullptr;
  {
    const Stream s(0);
    Allocation a = alloc.allocate(64 * MiB, s);
    p = a.data();
    spin<<<1, 1, 0, s>>>(20'000'000);  // ~10 ms: still running when the stream is destroyed
    MT_CUDA_CHECK_LAUNCH();
    launch_fill(a.data(), 64 * MiB, 3, s);
  }  // `a` released onto s, then s destroyed
  const Stream t(0);
  Allocation b = alloc.allocate(64 * MiB, t);
  EXPECT_EQ(b.data(), p);
  Allocation errors = alloc.allocate(sizeof(int), t);
  MT_CUDA_CHECK(cudaMemsetAsync(errors.data(), 0, sizeof(int), t));
  launch_check(b.data(), 64 * MiB, 3, static_cast<int*>(errors.data()), t);  // the fill had finished
  int n_errors = -1;
  MT_CUDA_CHECK(cudaMemcpyAsync(&n_errors, errors.data(), sizeof(int), cudaMemcpyDeviceToHost, t));
  t.synchronize();
  EXPECT_EQ(n_errors, 0);
  b.reset();
  alloc.empty_cache();
}

TEST(GpuPinned, ReuseWaitsForTheCopy) {
  MT_REQUIRE_GPU();
  CachingHostAllocator pinned(make_pinned_backend());
  DeviceGuard guard(0);
  Stream s(0);
  void* dev = nullptr;
  MT_CUDA_CHECK(cudaMalloc(&dev, 4 * MiB));
  Allocation a = pinned.allocate(4 * MiB);
  void* p = a.data();
  const int clock_khz = [] {
    int v = 0;
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, 0));
    return v;
  }();
  spin<<<1, 1, 0, s>>>(static_cast<long long>(clock_khz) * 200);  // ~200 ms ahead of the copy
  MT_CUDA_CHECK_LAUNCH();
  MT_CUDA_CHECK(cudaMemcpyAsync(dev, a.data(), 4 * MiB, cudaMemcpyHostToDevice, s));
  pinned.record_stream(a, s);
  a.reset();
  Allocation b = pinned.allocate(4 * MiB);
  EXPECT_NE(b.data(), p) << "handed out while the copy may still read it";
  s.synchronize();
  Allocation c = pinned.allocate(4 * MiB);
  EXPECT_EQ(c.data(), p);
  MT_CUDA_CHECK(cudaFree(dev));
}

}  // namespace
}  // namespace mt
