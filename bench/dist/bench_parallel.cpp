// bench_dist, parallel recipes: the Megatron MLP forward (tensor parallel), the data-parallel MLP and the
// tensor-parallel SGEMM, each on 1, 2 and 4 GPUs of this process (one thread per rank, Communicator::local).
// The 1-GPU row of each family is the baseline (the same recipe at world 1: the unsplit graph); the
// efficiency counter is t1 / (N tN) for tensor parallel, throughput / (N x 1-GPU throughput) for data
// parallel. bench/dist/torch_mlp_tp.py times the same Megatron MLP in PyTorch (bench/dist/DESIGN.md).
//
//   Parallel/megatron_mlp/<math>/<tokens>x<d>/gpus:<N>    y = gelu(x W1 + b1) W2 + b2, FFN 4d, 1 chunk
//   Parallel/data_parallel_mlp/4096x4096/gpus:<N>         4096 rows per GPU, FFN 4d
//   Parallel/tp_sgemm/16384/gpus:<N>                      C = A B, B split along N, C all-gathered
//
// FLOPs: MLP 2 * tokens * d * 4d * 2 (two GEMMs); SGEMM 2 m n k. Counters: ms (median batch, slowest rank),
// TFLOPs (of the whole problem), efficiency. Validated once against the 1-GPU executor before timing.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "minitensor/minitensor.h"

namespace {

using namespace mt;

int n_visible() {
  int n = cuda_device_count();
  if (const char* env = std::getenv("MT_BENCH_DIST_GPUS")) n = std::min(n, std::atoi(env));
  return n;
}

// One communicator per rank for the first n GPUs, made once per n and kept for the process.
std::vector<dist::Communicator>& comms_of(int n) {
  static auto* all = new std::map<int, std::vector<dist::Communicator>>();
  auto it = all->find(n);
  if (it == all->end()) {
    std::vector<int> devices;
    for (int i = 0; i < n; ++i) devices.push_back(i);
    it = all->emplace(n, dist::Communicator::local(devices)).first;
  }
  return it->second;
}

// Runs fn(r) on a thread per rank. `meet`, when given, is the ranks' barrier: a rank that throws drops out
// of it, so the others are not left waiting at it.
void on_ranks(int n, const std::function<void(int)>& fn, std::barrier<>* meet = nullptr) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        DeviceGuard guard(r);
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        if (meet) meet->arrive_and_drop();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `n` ranks each running its executor: per batch, `reps` runs between CUDA events on every rank; the
// batch's time per run is the slowest rank's; returns the median over the batches, in ms. build(r) makes
// rank r's graph; input(r) its input "x" (on cuda:r). Every rank builds (its graph, executor and input)
// before any rank runs, and copies to the host only once every device is idle (graph/parallel.h: one process
// driving several GPUs).
double time_ranks(benchmark::State& state, int n, const std::function<Graph(int)>& build,
                  const std::function<Tensor(int)>& input, MathMode math, int reps,
                  std::vector<float>* first_output) {
  std::vector<std::unique_ptr<Executor>> execs(static_cast<size_t>(n));
  std::vector<Tensor> xs(static_cast<size_t>(n));
  std::vector<dist::Communicator>* comms = n > 1 ? &comms_of(n) : nullptr;  // made before the threads
  std::barrier<> meet(n);
  on_ranks(
      n,
      [&](int r) {
        ExecOptions o;
        o.device = Device::cuda(r);
        o.compile.math = math;
        if (comms) o.comm = &(*comms)[static_cast<size_t>(r)];
        const Graph g = build(r);
        execs[static_cast<size_t>(r)] = std::make_unique<Executor>(g, o);
        xs[static_cast<size_t>(r)] = input(r);
        meet.arrive_and_wait();
        const TensorMap out = execs[static_cast<size_t>(r)]->run({{"x", xs[static_cast<size_t>(r)]}});
        for (int w = 0; w < 2; ++w) execs[static_cast<size_t>(r)]->run({{"x", xs[static_cast<size_t>(r)]}});
        synchronize(Device::cuda(r));
        meet.arrive_and_wait();
        if (r == 0 && first_output) *first_output = out.begin()->second.cpu().to_vector<float>();
      },
      &meet);
  std::vector<double> batches;
  for (auto _ : state) {
    std::vector<double> ms(static_cast<size_t>(n));
    on_ranks(n, [&](int r) {
      Event start(true), stop(true);
      const cudaStream_t s = current_stream(r);
      start.record(s);
      for (int i = 0; i < reps; ++i) execs[static_cast<size_t>(r)]->run({{"x", xs[static_cast<size_t>(r)]}});
      stop.record(s);
      stop.synchronize();
      ms[static_cast<size_t>(r)] = Event::elapsed_ms(start, stop) / reps;
    });
    const double t = *std::max_element(ms.begin(), ms.end());
    batches.push_back(t);
    state.SetIterationTime(t * 1e-3);
  }
  return median(batches);
}

bool skip_unless(benchmark::State& state, int n) {
  if (n_visible() < n) {
    state.SkipWithError(
        ("needs " + std::to_string(n) + " CUDA devices, found " + std::to_string(n_visible())).c_str());
    return true;
  }
  if (n > 1 && !dist::nccl_available()) {
    state.SkipWithError("minitensor was built without NCCL");
    return true;
  }
  return false;
}

// The 1-GPU time of each family and shape, for the efficiency counters of the N-GPU rows (the 1-GPU rows are
// registered, so run, first).
std::map<std::string, double>& one_gpu_ms() {
  static auto* m = new std::map<std::string, double>();
  return *m;
}
std::map<std::string, std::vector<float>>& one_gpu_out() {
  static auto* m = new std::map<std::string, std::vector<float>>();
  return *m;
}

// max |got - want| <= 1e-3 max |want| (fp32 and 3xTF32 are both float32-class)
bool close(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  double err = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return err <= 1e-3 * scale;
}

void report(benchmark::State& state, const std::string& key, int n, double ms, double flops,
            const std::vector<float>& out) {
  if (n == 1) {
    one_gpu_ms()[key] = ms;
    one_gpu_out()[key] = out;
  } else if (one_gpu_out().count(key) && !close(out, one_gpu_out()[key])) {
    state.SkipWithError("validation failed: the N-GPU output differs from the 1-GPU executor's");
    return;
  }
  state.counters["gpus"] = n;
  state.counters["ms"] = ms;
  state.counters["TFLOPs"] = flops / (ms * 1e-3) * 1e-12;
  if (one_gpu_ms().count(key)) state.counters["efficiency"] = one_gpu_ms()[key] / (n * ms);
}

MlpWeights mlp_weights(std::int64_t d, int device) {
  MlpWeights w;
  const double s1 = 1 / std::sqrt(double(d)), s2 = 1 / std::sqrt(4.0 * double(d));
  w.w1 = randn({d, 4 * d}, 1, Device::cuda(device)) * s1;
  w.b1 = randn({4 * d}, 2, Device::cuda(device));
  w.w2 = randn({4 * d, d}, 3, Device::cuda(device)) * s2;
  w.b2 = randn({d}, 4, Device::cuda(device));
  return w;
}

void BM_MegatronMlp(benchmark::State& state, MathMode math, std::int64_t tokens, std::int64_t d, int n) {
  if (skip_unless(state, n)) return;
  // One chunk (the recipe's default) unless MT_BENCH_MLP_CHUNKS says otherwise: bench/dist/DESIGN.md has the
  // 1 / 2 / 4-chunk comparison behind that default.
  const char* chunks_env = std::getenv("MT_BENCH_MLP_CHUNKS");
  const int chunks = chunks_env && *chunks_env ? std::max(1, std::atoi(chunks_env)) : 1;
  std::vector<float> out;
  // Every rank shards the weights on its own device.
  const double ms = time_ranks(
      state, n,
      [&](int r) {
        Graph g;
        g.set_world_size(n);
        g.output("y", megatron_mlp(g, g.input("x", {tokens, d}), mlp_weights(d, r), r, {.chunks = chunks}));
        return g;
      },
      [&](int r) {
        return randn({tokens, d}, 9, Device::cuda(r));
      },
      math, tokens >= 4096 ? 3 : 20, &out);
  report(state, std::string("mlp/") + math_mode_name(math) + std::to_string(tokens) + "x" + std::to_string(d),
         n, ms, 2.0 * 2.0 * double(tokens) * double(d) * 4.0 * double(d), out);
}

void BM_DataParallelMlp(benchmark::State& state, int n) {
  if (skip_unless(state, n)) return;
  const std::int64_t rows = 4096, d = 4096;
  Graph replica;
  replica.output("y", mlp(replica, replica.input("x", {rows, d}), mlp_weights(d, 0)));
  DataParallel dp(replica, [&] {
    std::vector<int> v;
    for (int i = 0; i < n; ++i) v.push_back(i);
    return v;
  }());
  const Tensor x = randn({rows * n, d}, 9, Device::cuda(0));
  std::vector<float> out;
  {
    const Tensor y = dp.run({{"x", x}}).at("y");
    out = y.narrow(0, 0, rows).cpu().to_vector<float>();  // replica 0's block: the 1-GPU row's output
  }
  for (int w = 0; w < 2; ++w) dp.run({{"x", x}});
  std::vector<double> batches;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 3; ++i) dp.run({{"x", x}});  // run() waits for every replica
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 3;
    batches.push_back(ms);
    state.SetIterationTime(ms * 1e-3);
  }
  const double ms = median(batches);
  const std::string key = "dp_mlp";
  report(state, key, n, ms, 2.0 * 2.0 * double(rows * n) * double(d) * 4.0 * double(d), out);
  // Weak scaling: n times the rows in the same time is an efficiency of 1.
  if (one_gpu_ms().count(key)) state.counters["efficiency"] = one_gpu_ms()[key] / ms;
  state.counters["rows_per_s"] = double(rows * n) / (ms * 1e-3);
}

void BM_TpSgemm(benchmark::State& state, std::int64_t size, int n) {
  if (skip_unless(state, n)) return;
  std::vector<float> out;
  const double ms = time_ranks(
      state, n,
      [&](int r) {
        Graph g;
        g.set_world_size(n);
        Node a = g.input("x", {size, size});
        g.output("c", tensor_parallel_matmul(g, a, randn({size, size}, 2, Device::cuda(r)), r));
        return g;
      },
      [&](int r) {
        return randn({size, size}, 1, Device::cuda(r));
      },
      MathMode::FP32, 3, &out);
  // Validate on a sample: the whole of C is 1 GiB on the host.
  out.resize(std::min<size_t>(out.size(), size_t(1) << 22));
  report(state, "tp_sgemm", n, ms, 2.0 * double(size) * double(size) * double(size), out);
}

[[maybe_unused]] const bool registered = [] {
  for (auto [tokens, d] : {std::pair<std::int64_t, std::int64_t>{8192, 8192}, {1024, 4096}})
    for (MathMode math : {MathMode::FP32, MathMode::TF32x3})
      for (int n : {1, 2, 4}) {
        const std::string name = std::string("Parallel/megatron_mlp/") + math_mode_name(math) + "/" +
                                 std::to_string(tokens) + "x" + std::to_string(d) +
                                 "/gpus:" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), BM_MegatronMlp, math, tokens, d, n)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(5);
      }
  for (int n : {1, 2, 4}) {
    benchmark::RegisterBenchmark(("Parallel/data_parallel_mlp/4096x4096/gpus:" + std::to_string(n)).c_str(),
                                 BM_DataParallelMlp, n)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(5);
  }
  for (int n : {1, 2, 4}) {
    benchmark::RegisterBenchmark(("Parallel/tp_sgemm/16384/gpus:" + std::to_string(n)).c_str(), BM_TpSgemm,
                                 std::int64_t{16384}, n)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(3);
  }
  return true;
}();

}  // namespace
