// Allocator benchmarks: allocate + release pairs through
//   (a) cudaMalloc / cudaFree                                   -- the baseline, row 0
//   (b) cudaMallocAsync / cudaFreeAsync, warm default pool with release threshold = max
//   (c) the caching allocator (its cached hit path)
// single-threaded and with 8 threads (one stream each). Counters: us_per_pair (each thread's own pairs, mean
// over the threads), and on (c) the speedups over (a) and (b) at the same thread count and, with 8 threads,
// vs_single_thread (over the median single-thread run). The same pairs on FakeBackend: one allocator shared
// by the threads (a stream each), a private allocator per thread (the control: what the machine itself gives
// 8 threads running this code), and every thread on one stream. Then a small graph run's allocation trace
// repeated 10,000 times through (b) and (c), and the fragmentation (reserved / peak allocated) of the
// allocator on a fuzz trace. MT_BENCH_THREAD_CACHE=0 runs the caching rows without per-thread caches.
//
// Host wall clock is what is measured: allocation is host work (the device does nothing for a cached pair).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "minitensor/memory/detail/caching.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/stream.h"

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

// MT_BENCH_THREAD_CACHE=0: the allocators under test without their per-thread caches (the pool path alone),
// to compare both in one run.
void configure(CachingDeviceAllocator& alloc) {
  const char* env = std::getenv("MT_BENCH_THREAD_CACHE");
  if (env && std::strcmp(env, "0") == 0) alloc.set_thread_cache_enabled(false);
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
  static CachingDeviceAllocator* a = [] {
    auto* alloc = new CachingDeviceAllocator(mt::make_cuda_backend(0));
    configure(*alloc);
    return alloc;
  }();
  return *a;
}

// The threads of one benchmark run meet here (runs follow one another, so one barrier serves them all).
class Barrier {
 public:
  void arrive_and_wait(int n) {
    std::unique_lock<std::mutex> lock(m_mutex);
    const std::uint64_t generation = m_generation;
    if (++m_arrived == n) {
      m_arrived = 0;
      ++m_generation;
      m_cv.notify_all();
      return;
    }
    m_cv.wait(lock, [&] { return m_generation != generation; });
  }

 private:
  std::mutex m_mutex;
  std::condition_variable m_cv;
  int m_arrived = 0;
  std::uint64_t m_generation = 0;
};
Barrier g_barrier;

// Each thread's own figures of the current run, by thread index.
std::vector<double> g_own_us(64), g_wait_us(64);

// Runs of this key that lasted long enough to be reported (the framework's short runs that pick the iteration
// count are left out), us per pair.
std::map<std::string, std::vector<double>> g_runs;

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Times this thread's own allocate + release pairs, `pair(k)` for k = 0, 1, ...: the time from when every
// thread has started (after the warm-up of all) to this thread's last pair, over its pairs. Waiting for the
// other threads, at the start or the end, is no pair of this thread's and is left out (it is reported apart,
// as us_incl_wait). Every thread runs the same number of pairs over the same size mix.
//
// Counters: us_per_pair, the mean over the threads; on thread 0, slowest_thread_us, us_incl_wait (thread 0's
// time from the common start to the end of the slowest thread, per pair), and vs_single_thread: us_per_pair
// over the median of this benchmark's single-thread runs. Returns the mean (thread 0) or 0.
template <class Pair>
double timed_pairs(benchmark::State& state, const std::string& what, Pair&& pair) {
  const int threads = state.threads();
  const auto index = static_cast<std::size_t>(state.thread_index());
  g_barrier.arrive_and_wait(threads);  // every thread is warm before any starts
  const auto start = clock_type::now();
  const benchmark::IterationCount n = state.max_iterations;
  clock_type::duration own{};
  // One batch of all the iterations: the framework's own start and stop barriers stay outside `own`.
  while (state.KeepRunningBatch(n)) {
    const auto t0 = clock_type::now();
    for (benchmark::IterationCount k = 0; k < n; ++k) pair(static_cast<std::size_t>(k));
    own = clock_type::now() - t0;
  }
  // After the framework's stop barrier: every thread is done.
  const auto incl_wait = clock_type::now() - start;
  const double pairs = static_cast<double>(n);
  g_own_us[index] = std::chrono::duration<double, std::micro>(own).count() / pairs;
  g_wait_us[index] = std::chrono::duration<double, std::micro>(incl_wait).count() / pairs;
  state.counters["us_per_pair"] = benchmark::Counter(g_own_us[index], benchmark::Counter::kAvgThreads);
  state.SetItemsProcessed(state.iterations());
  g_barrier.arrive_and_wait(threads);  // every thread's figure is in
  if (index != 0) return 0.0;
  double sum = 0, slowest = 0;
  for (int t = 0; t < threads; ++t) {
    sum += g_own_us[static_cast<std::size_t>(t)];
    slowest = std::max(slowest, g_own_us[static_cast<std::size_t>(t)]);
  }
  const double mean = sum / threads;
  const std::string key = what + std::to_string(threads);
  put(key, mean);
  if (std::chrono::duration<double>(own).count() >= 0.1) g_runs[key].push_back(mean);
  state.counters["us_incl_wait"] = g_wait_us[0];
  if (threads > 1) {
    state.counters["slowest_thread_us"] = slowest;
    const double single = median(g_runs[what + "1"]);
    if (single > 0) state.counters["vs_single_thread"] = mean / single;
  }
  return mean;
}

void BM_Pairs_cudaMalloc(benchmark::State& state) {
  if (!have_gpu(state)) return;
  mt::DeviceGuard guard(0);
  const std::size_t first = static_cast<std::size_t>(state.thread_index()) * 5;
  timed_pairs(state, "malloc", [&](std::size_t k) {
    void* p = nullptr;
    MT_CUDA_CHECK(cudaMalloc(&p, kSizes[(first + k) % kSizes.size()]));
    MT_CUDA_CHECK(cudaFree(p));
  });
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
  const std::size_t first = static_cast<std::size_t>(state.thread_index()) * 5;
  timed_pairs(state, "async", [&](std::size_t k) {
    void* p = nullptr;
    MT_CUDA_CHECK(cudaMallocAsync(&p, kSizes[(first + k) % kSizes.size()], s));
    MT_CUDA_CHECK(cudaFreeAsync(p, s));
  });
  MT_CUDA_CHECK(cudaStreamSynchronize(s));
}

// Pairs through `alloc` on stream `s`, after a warm-up that leaves one block of each size cached on s. On
// thread 0: the hit rate so far, and the misses during the timed pairs of all threads (0 in a steady state).
double caching_pairs(benchmark::State& state, const std::string& what, CachingDeviceAllocator& alloc,
                     cudaStream_t s, bool shared_allocator = true) {
  for (std::size_t size : kSizes) alloc.allocate(size, s);
  const bool reads_stats = state.thread_index() == 0 || !shared_allocator;
  g_barrier.arrive_and_wait(state.threads());  // every thread is warm before the count starts
  const std::int64_t misses_before = reads_stats ? alloc.stats().cache_misses : 0;
  const std::size_t first = static_cast<std::size_t>(state.thread_index()) * 5;
  const double mean = timed_pairs(state, what, [&](std::size_t k) {
    Allocation a = alloc.allocate(kSizes[(first + k) % kSizes.size()], s);
    benchmark::DoNotOptimize(a.data());
  });
  if (reads_stats) {
    const mt::MemoryStats st = alloc.stats();
    // A private allocator per thread: each thread adds its own (kAvgThreads keeps them per thread).
    state.counters["misses_in_loop"] = benchmark::Counter(
        static_cast<double>(st.cache_misses - misses_before),
        shared_allocator ? benchmark::Counter::kDefaults : benchmark::Counter::kAvgThreads);
    state.counters["hit_rate"] = benchmark::Counter(
        static_cast<double>(st.cache_hits) /
            static_cast<double>(std::max<std::int64_t>(1, st.cache_hits + st.cache_misses)),
        shared_allocator ? benchmark::Counter::kDefaults : benchmark::Counter::kAvgThreads);
  }
  return mean;
}

void BM_Pairs_Caching(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const double ours = caching_pairs(state, "caching", bench_allocator(), thread_stream(state.thread_index()));
  if (state.thread_index() == 0) {
    const std::string t = std::to_string(state.threads());
    const double a = get("malloc" + t), b = get("async" + t);
    if (ours > 0 && a > 0) state.counters["x_vs_cudaMalloc"] = a / ours;
    if (ours > 0 && b > 0) state.counters["x_vs_cudaMallocAsync"] = b / ours;
  }
}

// The same pairs on FakeBackend: the policy's own cost, no driver (runs without a GPU). One allocator, a
// stream per thread.
void BM_Pairs_CachingFake(benchmark::State& state) {
  static CachingDeviceAllocator* alloc = [] {
    auto* a = new CachingDeviceAllocator(std::make_unique<mt::FakeBackend>(std::size_t(64) << 30));
    configure(*a);
    return a;
  }();
  caching_pairs(state, "fake", *alloc, mt::FakeBackend::fake_stream(1 + state.thread_index()));
}

// Control: each thread its own allocator, so nothing at all is shared. Its vs_single_thread is what this
// machine gives 8 threads running this code; the shared allocator's cannot be expected below it.
void BM_Pairs_CachingFakePrivate(benchmark::State& state) {
  CachingDeviceAllocator alloc(std::make_unique<mt::FakeBackend>(std::size_t(8) << 30));
  configure(alloc);
  caching_pairs(state, "private", alloc, mt::FakeBackend::fake_stream(1), /*shared_allocator=*/false);
}

// Every thread on one stream: one pool and its lock shared by all threads (the thread caches are not).
void BM_Pairs_CachingFakeOneStream(benchmark::State& state) {
  static CachingDeviceAllocator* alloc = [] {
    auto* a = new CachingDeviceAllocator(std::make_unique<mt::FakeBackend>(std::size_t(64) << 30));
    configure(*a);
    return a;
  }();
  caching_pairs(state, "onestream", *alloc, mt::FakeBackend::fake_stream(1));
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
    configure(alloc);
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

// The pair rows: wall-clock time per pair, 1 and 8 threads (the fake-backend rows also 2), 0.3 s each.
void pairs(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->MinTime(0.3)->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_Pairs_cudaMalloc)->Threads(1)->Threads(8)->Apply(pairs);
BENCHMARK(BM_Pairs_cudaMallocAsync)->Threads(1)->Threads(8)->Apply(pairs);
BENCHMARK(BM_Pairs_Caching)->Threads(1)->Threads(8)->Apply(pairs);
BENCHMARK(BM_Pairs_CachingFake)->Threads(1)->Threads(2)->Threads(8)->Apply(pairs);
BENCHMARK(BM_Pairs_CachingFakePrivate)->Threads(1)->Threads(2)->Threads(8)->Apply(pairs);
BENCHMARK(BM_Pairs_CachingFakeOneStream)->Threads(1)->Threads(8)->Apply(pairs);
BENCHMARK(BM_GraphTrace_cudaMallocAsync)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GraphTrace_Caching)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FuzzFragmentation_Fake)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FuzzFragmentation_Cuda)->Iterations(1)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();

// ---------------------------------------------------------------- scale (FakeBackend, no GPU)

namespace {

// Every thread on one stream, the full size mix: requests up to 1 MiB through the thread caches, the others
// through each thread's shard of the stream's pool. Its vs_single_thread (8 threads over 1, one run) is the
// figure the shards are for (bench/memory/DESIGN.md); BM_Pairs_CachingFakePrivate's is the machine's own.
void BM_Pairs_SharedStream(benchmark::State& state) {
  static CachingDeviceAllocator* alloc = [] {
    auto* a = new CachingDeviceAllocator(std::make_unique<mt::FakeBackend>(std::size_t(64) << 30));
    configure(*a);
    return a;
  }();
  caching_pairs(state, "shared", *alloc, mt::FakeBackend::fake_stream(1));
}

// Pairs on a stream while another pool holds `range(0)` releases still awaiting a busy stream
// (record_stream): own-pool pairs on the pool that holds them (they poll its pending queue) and pairs on a
// third stream.
void BM_Pairs_PendingCrossStream(benchmark::State& state) {
  const auto n_pending = static_cast<int>(state.range(0));
  auto backend = std::make_unique<mt::FakeBackend>(std::size_t(64) << 30);
  mt::FakeBackend* fake = backend.get();
  CachingDeviceAllocator alloc(std::move(backend));
  configure(alloc);
  const cudaStream_t s1 = mt::FakeBackend::fake_stream(1), s2 = mt::FakeBackend::fake_stream(2),
                     s3 = mt::FakeBackend::fake_stream(3);
  {
    std::vector<Allocation> blocks;
    for (int i = 0; i < n_pending; ++i) {
      blocks.push_back(alloc.allocate(4 * KiB, s1));
      alloc.record_stream(blocks.back(), s2);
      fake->submit(s2);
    }
  }  // released: n_pending events on s2, none done
  const bool own = state.range(1) == 0;
  const cudaStream_t s = own ? s1 : s3;
  for (std::size_t size : kSizes) alloc.allocate(size, s);
  const auto t0 = clock_type::now();
  std::size_t k = 0;
  for (auto _ : state) {
    Allocation a = alloc.allocate(kSizes[k++ % kSizes.size()], s);
    benchmark::DoNotOptimize(a.data());
  }
  const double us =
      std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / static_cast<double>(k);
  state.counters["us_per_pair"] = us;
  state.counters["events_outstanding"] = static_cast<double>(fake->n_events_outstanding());
  state.SetLabel(own ? "pairs on the pool holding them" : "pairs on another stream");
  fake->complete_all();
}

// Streams created, used and destroyed in turn (an mt::Stream's hooks): time per stream life, and the reserved
// memory after them all.
void BM_ShortLivedStreams(benchmark::State& state) {
  auto backend = std::make_unique<mt::FakeBackend>(std::size_t(64) << 30);
  mt::FakeBackend* fake = backend.get();
  CachingDeviceAllocator alloc(std::move(backend));
  configure(alloc);
  int i = 0;
  for (auto _ : state) {
    const cudaStream_t s = mt::FakeBackend::fake_stream(100 + i++);
    fake->create_stream(s);
    alloc.stream_created(s);
    {
      Allocation a = alloc.allocate(64 * KiB, s), b = alloc.allocate(3 * MiB, s);
      fake->submit(s);
    }
    alloc.stream_destroying(s);
    fake->destroy_stream(s);
  }
  state.counters["streams"] = i;
  state.counters["reserved_MiB"] = static_cast<double>(alloc.stats().reserved_bytes.current) / MiB;
}

}  // namespace

BENCHMARK(BM_Pairs_SharedStream)->Threads(1)->Threads(8)->Apply(pairs);
BENCHMARK(BM_Pairs_PendingCrossStream)
    ->Args({0, 0})
    ->Args({10000, 0})
    ->Args({10000, 1})
    ->Args({50000, 0})
    ->Args({50000, 1})
    ->UseRealTime()
    ->MinTime(0.3)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ShortLivedStreams)->Iterations(5000)->Unit(benchmark::kMicrosecond);
