// Allocator benchmarks: allocate + release pairs through
//   (a) cudaMalloc / cudaFree                                   -- the baseline, row 0
//   (b) cudaMallocAsync / cudaFreeAsync, warm default pool with release threshold = max
//   (c) the caching allocator (its cached hit path)
// single-threaded and with 8 threads (one stream each). Counters: us_per_pair, and on (c) the speedups over
// (a) and (b) at the same thread count. Then a small graph run's allocation trace repeated 10,000 times
// through (b) and (c), and the fragmentation (reserved / peak allocated) of the allocator on a fuzz trace.
//
// Host wall clock is what is measured: allocation is host work (the device does nothing for a cached pair).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "memory/caching.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/stream.h"

namespace {

using mt::Allocation;
using mt::CachingDeviceAllocator;
using clock_type = std::chrono::steady_clock;

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

// Mixed sizes, 512 B to 64 MiB, roughly log-spaced: every pool and the dedicated-segment path.
const std::vector<std::size_t> kSizes = {512,       1536,     4 * KiB,     10 * KiB, 48 * KiB, 128 * KiB,
                                         300 * KiB, MiB,      3 * MiB / 2, 3 * MiB,  6 * MiB,  12 * MiB,
                                         20 * MiB,  32 * MiB, 48 * MiB,    64 * MiB};

// us per pair of the baselines, by thread count, for the ratios.
std::mutex g_mutex;
std::map<std::string, double> g_us;

void put(const std::string& key, double us) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_us[key] = us;
}
double get(const std::string& key) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_us.find(key);
  return it == g_us.end() ? 0.0 : it->second;
}

bool have_gpu(benchmark::State& state) {
  if (mt::cuda_available()) return true;
  state.SkipWithError("no CUDA device");
  return false;
}

// One stream per benchmark thread, made once and kept (benchmarks run several times).
cudaStream_t thread_stream(int index) {
  static std::mutex mutex;
  static std::vector<cudaStream_t> streams;
  std::lock_guard<std::mutex> lock(mutex);
  while (static_cast<int>(streams.size()) <= index) {
    mt::DeviceGuard guard(0);
    cudaStream_t s = nullptr;
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    streams.push_back(s);
  }
  return streams[static_cast<std::size_t>(index)];
}

// The allocator under test: a process-lifetime instance of its own, so its stats are the benchmark's.
CachingDeviceAllocator& bench_allocator() {
  static CachingDeviceAllocator* a = new CachingDeviceAllocator(mt::make_cuda_backend(0));
  return *a;
}

double report(benchmark::State& state, const std::string& what, clock_type::duration elapsed) {
  const double us =
      std::chrono::duration<double, std::micro>(elapsed).count() / static_cast<double>(state.iterations());
  state.counters["us_per_pair"] = benchmark::Counter(us, benchmark::Counter::kAvgThreads);
  state.SetItemsProcessed(state.iterations());
  // Each thread reports; the average is what the ratio uses.
  static std::mutex mutex;
  static std::map<std::string, std::pair<double, int>> sums;
  std::lock_guard<std::mutex> lock(mutex);
  auto& [sum, n] = sums[what + std::to_string(state.threads())];
  sum += us;
  if (++n == state.threads()) {
    put(what + std::to_string(state.threads()), sum / n);
    sum = 0;
    n = 0;
  }
  return us;
}

void BM_Pairs_cudaMalloc(benchmark::State& state) {
  if (!have_gpu(state)) return;
  mt::DeviceGuard guard(0);
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 5;
  const auto t0 = clock_type::now();
  for (auto _ : state) {
    void* p = nullptr;
    MT_CUDA_CHECK(cudaMalloc(&p, kSizes[i++ % kSizes.size()]));
    MT_CUDA_CHECK(cudaFree(p));
  }
  report(state, "malloc", clock_type::now() - t0);
}

void warm_async_pool() {
  static std::once_flag once;
  std::call_once(once, [] {
    mt::DeviceGuard guard(0);
    cudaMemPool_t pool = nullptr;
    MT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    std::uint64_t threshold = UINT64_MAX;
    MT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    cudaStream_t s = thread_stream(0);
    std::vector<void*> ps;
    for (int rep = 0; rep < 8; ++rep)
      for (std::size_t size : kSizes) {
        void* p = nullptr;
        MT_CUDA_CHECK(cudaMallocAsync(&p, size, s));
        ps.push_back(p);
      }
    for (void* p : ps) MT_CUDA_CHECK(cudaFreeAsync(p, s));
    MT_CUDA_CHECK(cudaStreamSynchronize(s));
  });
}

void BM_Pairs_cudaMallocAsync(benchmark::State& state) {
  if (!have_gpu(state)) return;
  mt::DeviceGuard guard(0);
  warm_async_pool();
  cudaStream_t s = thread_stream(state.thread_index());
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 5;
  const auto t0 = clock_type::now();
  for (auto _ : state) {
    void* p = nullptr;
    MT_CUDA_CHECK(cudaMallocAsync(&p, kSizes[i++ % kSizes.size()], s));
    MT_CUDA_CHECK(cudaFreeAsync(p, s));
  }
  const auto elapsed = clock_type::now() - t0;
  MT_CUDA_CHECK(cudaStreamSynchronize(s));
  report(state, "async", elapsed);
}

void BM_Pairs_Caching(benchmark::State& state) {
  if (!have_gpu(state)) return;
  CachingDeviceAllocator& alloc = bench_allocator();
  cudaStream_t s = thread_stream(state.thread_index());
  for (std::size_t size : kSizes) alloc.allocate(size, s);  // warm: one block of each size cached on s
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 5;
  const auto t0 = clock_type::now();
  for (auto _ : state) {
    Allocation a = alloc.allocate(kSizes[i++ % kSizes.size()], s);
    benchmark::DoNotOptimize(a.data());
  }
  const double ours = report(state, "caching", clock_type::now() - t0);
  if (state.thread_index() == 0) {
    // Thread 0's own figure: the other threads may still be reporting theirs.
    const std::string t = std::to_string(state.threads());
    const double a = get("malloc" + t), b = get("async" + t);
    if (ours > 0 && a > 0) state.counters["x_vs_cudaMalloc"] = a / ours;
    if (ours > 0 && b > 0) state.counters["x_vs_cudaMallocAsync"] = b / ours;
    const double single = get("caching1");
    if (state.threads() > 1 && single > 0) state.counters["vs_single_thread"] = ours / single;
    const mt::MemoryStats st = alloc.stats();
    state.counters["hit_rate"] =
        static_cast<double>(st.cache_hits) /
        static_cast<double>(std::max<std::int64_t>(1, st.cache_hits + st.cache_misses));
  }
}

// The same pairs on FakeBackend: the policy's own cost, no driver (runs without a GPU).
void BM_Pairs_CachingFake(benchmark::State& state) {
  static CachingDeviceAllocator* alloc =
      new CachingDeviceAllocator(std::make_unique<mt::FakeBackend>(std::size_t(64) << 30));
  cudaStream_t s = mt::FakeBackend::fake_stream(1 + state.thread_index());
  for (std::size_t size : kSizes) alloc->allocate(size, s);
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 5;
  const auto t0 = clock_type::now();
  for (auto _ : state) {
    Allocation a = alloc->allocate(kSizes[i++ % kSizes.size()], s);
    benchmark::DoNotOptimize(a.data());
  }
  report(state, "fake", clock_type::now() - t0);
}

// ---------------------------------------------------------------- a small graph run's trace

// A 2-layer MLP block forward (batch 64, width 1024, hidden 4096, fp32) as the executor allocates it:
// (+n) allocate slot n of that many bytes, (-n) release slot n.
struct TraceOp {
  int slot;  // >= 0 allocate, < 0 release slot ~slot
  std::size_t bytes;
};
const std::vector<TraceOp> kGraphTrace = {
    {0, 64 * 1024 * 4},  // x
    {1, 64 * 4096 * 4},  // x @ w1
    {2, 64 * 4096 * 4},  // gelu
    {~1, 0},
    {3, 64 * 1024 * 4},  // @ w2
    {~2, 0},
    {4, 64 * 1024 * 4},  // + x
    {~3, 0},
    {5, 64 * 2 * 4},     // layernorm mean / rstd
    {6, 64 * 1024 * 4},  // layernorm out
    {~5, 0},
    {~4, 0},
    {7, 4},  // loss scalar
    {~6, 0},
    {~0, 0},
    {~7, 0},
};
constexpr int kTraceReps = 10000;

void BM_GraphTrace_cudaMallocAsync(benchmark::State& state) {
  if (!have_gpu(state)) return;
  mt::DeviceGuard guard(0);
  warm_async_pool();
  cudaStream_t s = thread_stream(0);
  void* slots[8] = {};
  const auto t0 = clock_type::now();
  for (auto _ : state)
    for (int rep = 0; rep < kTraceReps; ++rep)
      for (const TraceOp& op : kGraphTrace) {
        if (op.slot >= 0)
          MT_CUDA_CHECK(cudaMallocAsync(&slots[op.slot], op.bytes, s));
        else
          MT_CUDA_CHECK(cudaFreeAsync(slots[~op.slot], s));
      }
  const auto elapsed = clock_type::now() - t0;
  MT_CUDA_CHECK(cudaStreamSynchronize(s));
  const double pairs = static_cast<double>(state.iterations()) * kTraceReps * 8;
  const double us = std::chrono::duration<double, std::micro>(elapsed).count() / pairs;
  put("trace_async", us);
  state.counters["us_per_pair"] = us;
  state.counters["ms_per_10000_runs"] = us * 8 * kTraceReps / 1000.0;
}

void BM_GraphTrace_Caching(benchmark::State& state) {
  if (!have_gpu(state)) return;
  CachingDeviceAllocator& alloc = bench_allocator();
  cudaStream_t s = thread_stream(0);
  Allocation slots[8];
  const auto t0 = clock_type::now();
  for (auto _ : state)
    for (int rep = 0; rep < kTraceReps; ++rep)
      for (const TraceOp& op : kGraphTrace) {
        if (op.slot >= 0)
          slots[op.slot] = alloc.allocate(op.bytes, s);
        else
          slots[~op.slot].reset();
      }
  const double pairs = static_cast<double>(state.iterations()) * kTraceReps * 8;
  const double us = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / pairs;
  state.counters["us_per_pair"] = us;
  state.counters["ms_per_10000_runs"] = us * 8 * kTraceReps / 1000.0;
  if (const double b = get("trace_async"); b > 0) state.counters["x_vs_cudaMallocAsync"] = b / us;
}

// ---------------------------------------------------------------- fragmentation

// 10,000 random steps: allocate (log-uniform 512 B .. 64 MiB) or release, at most 64 live blocks, one stream.
// Fragmentation = peak reserved / peak allocated (1.0 is perfect).
void run_fuzz_trace(CachingDeviceAllocator& alloc, cudaStream_t s) {
  std::mt19937_64 rng(2024);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<Allocation> live;
  for (int step = 0; step < 10000; ++step) {
    if ((unit(rng) < 0.5 && live.size() < 64) || live.empty()) {
      const auto bytes = static_cast<std::size_t>(512.0 * std::exp(unit(rng) * std::log(64.0 * MiB / 512.0)));
      live.push_back(alloc.allocate(bytes, s));
    } else {
      const std::size_t i = rng() % live.size();
      live[i] = std::move(live.back());
      live.pop_back();
    }
  }
}

void fragmentation(benchmark::State& state, std::unique_ptr<mt::MemoryBackend> (*make)()) {
  double ratio = 0, reserved = 0, peak = 0;
  for (auto _ : state) {
    CachingDeviceAllocator alloc(make());
    run_fuzz_trace(alloc, mt::cuda_available() ? thread_stream(0) : mt::FakeBackend::fake_stream(1));
    const mt::MemoryStats st = alloc.stats();
    reserved = static_cast<double>(st.reserved_bytes.peak);
    peak = static_cast<double>(st.allocated_bytes.peak);
    ratio = reserved / peak;
  }
  state.counters["fragmentation"] = ratio;
  state.counters["peak_reserved_MiB"] = reserved / MiB;
  state.counters["peak_allocated_MiB"] = peak / MiB;
}

void BM_FuzzFragmentation_Fake(benchmark::State& state) {
  fragmentation(
      state, [] { return std::unique_ptr<mt::MemoryBackend>(new mt::FakeBackend(std::size_t(64) << 30)); });
}

void BM_FuzzFragmentation_Cuda(benchmark::State& state) {
  if (!have_gpu(state)) return;
  fragmentation(state, [] { return mt::make_cuda_backend(0); });
}

}  // namespace

BENCHMARK(BM_Pairs_cudaMalloc)
    ->Threads(1)
    ->Threads(8)
    ->UseRealTime()
    ->MinTime(0.3)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Pairs_cudaMallocAsync)
    ->Threads(1)
    ->Threads(8)
    ->UseRealTime()
    ->MinTime(0.3)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Pairs_Caching)
    ->Threads(1)
    ->Threads(8)
    ->UseRealTime()
    ->MinTime(0.3)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Pairs_CachingFake)
    ->Threads(1)
    ->Threads(2)
    ->Threads(8)
    ->UseRealTime()
    ->MinTime(0.3)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GraphTrace_cudaMallocAsync)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GraphTrace_Caching)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FuzzFragmentation_Fake)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FuzzFragmentation_Cuda)->Iterations(1)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
