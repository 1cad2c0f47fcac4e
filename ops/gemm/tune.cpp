// The autotuner's GPU half (detail/tune.h): times the shortlist on the caller's stream with CUDA events into
// scratch, keeps the fastest in the process-wide cache of the current device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/ops/gemm/detail/tune.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/version.h"
#include "minitensor/tensor/tensor.h"

namespace mt::detail::gemm {

TuneDevice TuneDevice::current() {
  const DeviceProperties& props = device_properties(current_device());
  TuneDevice d;
  d.name = props.name;
  d.sm_count = props.sm_count;
  MT_CUDA_CHECK(cudaDriverGetVersion(&d.driver));
  d.library = mt::version();
  return d;
}

namespace {

// One cache per device of the process, all on the same file (a file holds one device: see detail/tune.h).
TuneCache& process_cache(int device) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<TuneCache>> caches;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<TuneCache>& c = caches[device];
  if (!c) c = std::make_unique<TuneCache>(default_tune_path(), TuneDevice::current());
  return *c;
}

// Two events, destroyed on every path out.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    MT_CUDA_CHECK(cudaEventCreate(&start));
    MT_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

// Milliseconds per launch of `reps` back-to-back launches of `cfg`.
double time_config(const Problem& q, const Config& cfg, cudaStream_t stream, EventPair& ev, int reps) {
  MT_CUDA_CHECK(cudaEventRecord(ev.start, stream));
  for (int r = 0; r < reps; ++r) launch(q, cfg, stream);
  MT_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
  MT_CUDA_CHECK(cudaEventSynchronize(ev.stop));
  float ms = 0;
  MT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
  return static_cast<double>(ms) / reps;
}

}  // namespace

Config tuned_choice(const Problem& p, MathMode math, cudaStream_t stream) {
  const DeviceModel model = DeviceModel::current();
  const int device = current_device();
  TuneCache& cache = process_cache(device);
  const std::string key = tune_key(p, math);
  if (const std::optional<Config> hit = cache.find(key); hit && can_implement(p, *hit, model)) return *hit;
  // Inside a capture nothing may be timed or synchronised: the dispatcher's pick now, tuned by a later call.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    return choose(p, math, model);
  }
  if (capture != cudaStreamCaptureStatusNone) return choose(p, math, model);
  const std::vector<Config> shortlist = tune_candidates(p, math, model);
  if (shortlist.size() == 1 || p.m == 0 || p.n == 0 || p.k == 0) return shortlist.front();

  // Scratch for C with C's strides and its offset within 16 bytes, so every candidate sees C's alignment
  // (the caller's C is not touched; with beta != 0 the scratch's contents are read, which costs the same).
  const std::int64_t span = 1 + std::int64_t(p.m - 1) * p.c_sm + std::int64_t(p.n - 1) * p.c_sn +
                            std::int64_t(p.batch - 1) * p.c_sb;
  const std::int64_t shift = static_cast<std::int64_t>((reinterpret_cast<std::uintptr_t>(p.c) / 4) % 4);
  const Tensor scratch = empty(Shape{span + 4}, DType::F32, Device::cuda(device));
  detail::record_stream(scratch, stream);
  Problem q = p;
  q.c = scratch.data<float>() + shift;

  EventPair ev;
  Config best = shortlist.front();
  double best_ms = 1e30;
  for (const Config& cfg : shortlist) {
    try {
      // A warm-up launch (its time says how many launches a sample takes), then the best of three samples.
      const double first = time_config(q, cfg, stream, ev, 1);
      const int reps = first < 0.05 ? 10 : first < 0.5 ? 3 : 1;
      double ms = first;
      for (int s = 0; s < 3; ++s) ms = std::min(ms, time_config(q, cfg, stream, ev, reps));
      // The dispatcher's pick keeps its place unless another is faster by more than the timing noise.
      if (ms < (best_ms < 1e30 ? best_ms * 0.98 : best_ms)) best = cfg, best_ms = ms;
    } catch (const InvalidArgument&) {
      continue;  // a configuration that cannot run this problem after all (launch's own check)
    }
  }
  cache.put(key, best, best_ms);
  return best;
}

}  // namespace mt::detail::gemm
