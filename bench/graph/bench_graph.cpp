// bench_graph: the MLP y = softmax(relu(x W1 + b1) W2 + b2) end to end in four modes, and the host pipeline.
//
//   MLP/<batch>x<hidden>/eager            the eager ops, one call per op (6 launches)
//   MLP/<batch>x<hidden>/exec_unfused     executor, no fusion (10 launches), no CUDA graph
//   MLP/<batch>x<hidden>/exec_fused       executor, fused (2 steps: each GEMM with its epilogue, the softmax
//                                         in the second GEMM's split-K reduction where it splits)
//   MLP/<batch>x<hidden>/exec_fused_graph executor, fused, replayed as a CUDA graph
//   MLP/<batch>x<hidden>/exec_fused_graph_tf32x3
//                                         the same with the GEMMs in 3xTF32 (3 tensor-core products per
//                                         operand pair: float32-class accuracy, checked against the eager
//                                         ops)
//   Block/d<d>/<batch>x<tokens>/{fp32,tf32x3}  a GPT-2 style transformer block (d / 64 heads) through the
//                                         executor, fused and replayed as a CUDA graph (bench/graph/
//                                         torch_block.py: the same block in PyTorch)
//   Block/d<d>/<batch>x<tokens>/fp32_unfolded  the same with view folding and linear merging off (head
//                                         permutes copied, q / k / v as three GEMMs)
//   HostAdd/<n>/{ideal_h2d,ideal_d2h,serial,pipelined}: c = a + b over pinned host arrays, back to the host
//   HostAdd/<n>/ideal_both                the H2D and D2H copies at once on two streams, no compute: the
//                                         link with both directions busy (on hosts where they share
//                                         bandwidth, the pipeline's copies run slower than either alone)
//   HostAdd/<n>/pipelined_chunk<C>M_streams<S>  the pipeline at other chunk sizes and stream counts (the
//                                         defaults are 4 M floats on 4 streams)
//
// Time is per run (wall clock over a batch of back-to-back runs, then one synchronise), which is what a
// serving loop sees. Counters: host_us (the launch path's host time per run), single_us (one run alone
// between two events), launches (executor steps), and in the graph modes graph_edges / pdl_edges (the
// captured graph's dependency edges, and those that let a kernel start while the one before it finishes);
// the Block rows also kernels (the captured graph's kernels: a step may launch more than one).
// PyTorch's numbers for the same MLP come from bench/graph/torch_mlp.py, run in the same session; it reads
// this binary's JSON and prints the ratios. FLOPs per MLP run: 2 * 2 * batch * hidden^2.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "minitensor/graph/graph.h"
#include "minitensor/minitensor.h"

namespace {

using namespace mt;
using Clock = std::chrono::steady_clock;

Tensor uniform(const Shape& s, std::uint64_t seed, double lo, double hi, Device d) {
  std::vector<float> v = rand(s, seed).to_vector<float>();
  for (float& f : v) f = static_cast<float>(lo + (hi - lo) * f);
  return from_vector(v, s, d);
}

struct MlpSetup {
  std::int64_t batch, hidden;
  Tensor x, w1, b1, w2, b2;
  Graph g;
  MlpSetup(std::int64_t b, std::int64_t h) : batch(b), hidden(h) {
    const Device d = Device::cuda(0);
    const double s = 1.0 / std::sqrt(static_cast<double>(h));
    x = uniform({b, h}, 1, -1, 1, d);
    w1 = uniform({h, h}, 2, -s, s, d);
    b1 = uniform({h}, 3, -0.1, 0.1, d);
    w2 = uniform({h, h}, 4, -s, s, d);
    b2 = uniform({h}, 5, -0.1, 0.1, d);
    auto xn = g.input("x", {b, h});
    auto hn = g.relu(g.matmul(xn, g.parameter("w1", w1)) + g.parameter("b1", b1));
    auto logits = g.matmul(hn, g.parameter("w2", w2)) + g.parameter("b2", b2);
    auto e = g.exp(logits - g.max(logits, -1, true));
    g.output("y", e / g.sum(e, -1, true));
  }
};

Tensor eager_mlp(const MlpSetup& m) {
  const Tensor h = relu(matmul(m.x, m.w1) + m.b1);
  return softmax(matmul(h, m.w2) + m.b2, -1);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<float>(), vb = b.to_vector<float>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(va[i] - vb[i])));
  return m;
}

// Runs `fn` `reps` times back to back, synchronises, and reports the time per run. Counters: host_us, the
// host's time per run before the final synchronise (the launch path); single_us, one run alone between two
// events on the current stream (the device's latency for one run, launch gaps included).
template <class F>
void time_runs(benchmark::State& state, int reps, F&& fn) {
  for (int i = 0; i < 3; ++i) fn();  // warm-up (the CUDA graph captures on the second run)
  synchronize(Device::cuda(0));
  double host = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) fn();
    host += std::chrono::duration<double>(Clock::now() - t0).count() / reps;
    synchronize(Device::cuda(0));
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    state.SetIterationTime(s / reps);
  }
  state.counters["host_us"] = 1e6 * host / static_cast<double>(state.iterations());
  const cudaStream_t s = current_stream(0);
  std::vector<double> single;
  for (int i = 0; i < 9; ++i) {
    Event e0(true), e1(true);
    e0.record(s);
    fn();
    e1.record(s);
    e1.synchronize();
    single.push_back(1e3 * Event::elapsed_ms(e0, e1));
  }
  std::sort(single.begin(), single.end());
  state.counters["single_us"] = single[single.size() / 2];
}

void bm_mlp(benchmark::State& state, std::int64_t batch, std::int64_t hidden, int mode) {
  if (!cuda_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  MlpSetup m(batch, hidden);
  const int reps = hidden >= 4096 ? 5 : 200;
  const Tensor ref = eager_mlp(m);
  ExecOptions o;
  o.run.cuda_graph = mode >= 3;
  if (mode == 4) o.compile.math = MathMode::TF32x3;
  if (mode == 1) o.compile.fuse_elementwise = o.compile.fuse_gemm_epilogue = o.compile.fuse_softmax = false;
  std::unique_ptr<Executor> exec;
  if (mode > 0) {
    exec = std::make_unique<Executor>(m.g, o);
    const double err = max_abs_diff(exec->run({{"x", m.x}}).at("y"), ref);  // validate before timing
    if (err > 1e-4) {
      state.SkipWithError(("result differs from the eager ops by " + std::to_string(err)).c_str());
      return;
    }
    state.counters["launches"] = exec->n_launches();
  }
  const TensorMap in = {{"x", m.x}};
  if (mode == 0)
    time_runs(state, reps, [&] { benchmark::DoNotOptimize(eager_mlp(m)); });
  else
    time_runs(state, reps, [&] { benchmark::DoNotOptimize(exec->run(in)); });
  if (o.run.cuda_graph) {  // the captured graph's edges, and those that keep launches overlapped (PDL)
    state.counters["graph_edges"] = exec->stats().n_graph_edges;
    state.counters["pdl_edges"] = exec->stats().n_programmatic_edges;
  }
  const double flops =
      4.0 * static_cast<double>(batch) * static_cast<double>(hidden) * static_cast<double>(hidden);
  state.counters["TFLOPS"] = benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
}

// ---------------------------------------------------------------- host pipeline
constexpr std::int64_t kHostN = 100'000'000;

struct HostAdd {
  Tensor a, b;
  Graph g;
  HostAdd() {
    a = empty_pinned({kHostN});
    b = empty_pinned({kHostN});
    float* pa = a.data<float>();
    float* pb = b.data<float>();
    for (std::int64_t i = 0; i < kHostN; ++i) {
      pa[i] = static_cast<float>(i % 1000) * 0.001f;
      pb[i] = 1.0f - static_cast<float>(i % 7);
    }
    auto an = g.input("a", {kHostN});
    auto bn = g.input("b", {kHostN});
    g.output("c", an + bn);
  }
};
HostAdd& host_add() {
  static HostAdd h;
  return h;
}

enum class HostMode { IdealH2D, IdealD2H, Serial, Pipelined, IdealBoth };
constexpr const char* kHostModeNames[] = {"ideal_h2d", "ideal_d2h", "serial", "pipelined", "ideal_both"};

// chunk / streams: the pipeline's chunk size in elements and stream count (0: the RunOptions defaults).
void bm_host(benchmark::State& state, HostMode mode, std::int64_t chunk = 0, int streams = 0) {
  if (!cuda_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  HostAdd& h = host_add();
  const cudaStream_t s = current_stream(0);
  const std::size_t bytes = static_cast<std::size_t>(kHostN) * 4;
  // The copies alone, at full pinned bandwidth.
  if (mode != HostMode::Serial && mode != HostMode::Pipelined) {
    Tensor d = empty({3 * kHostN}, DType::F32, Device::cuda(0));
    Tensor out = empty_pinned({kHostN});
    char* dev = static_cast<char*>(d.data_ptr());
    const cudaStream_t s2 = pool_stream(0, 1);
    Event fork(false), join(false);
    auto h2d = [&](cudaStream_t st) {
      MT_CUDA_CHECK(cudaMemcpyAsync(dev, h.a.data_ptr(), bytes, cudaMemcpyHostToDevice, st));
      MT_CUDA_CHECK(cudaMemcpyAsync(dev + bytes, h.b.data_ptr(), bytes, cudaMemcpyHostToDevice, st));
    };
    auto d2h = [&](cudaStream_t st) {
      MT_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), dev + 2 * bytes, bytes, cudaMemcpyDeviceToHost, st));
    };
    time_runs(state, 1, [&] {
      if (mode == HostMode::IdealH2D) {
        h2d(s);
      } else if (mode == HostMode::IdealD2H) {
        d2h(s);
      } else {  // both directions at once, on two streams: what the link gives the pipeline
        fork.record(s);
        fork.wait(s2);
        d2h(s2);
        h2d(s);
        join.record(s2);
        join.wait(s);
      }
    });
    const std::size_t moved = mode == HostMode::IdealH2D   ? 2 * bytes
                              : mode == HostMode::IdealD2H ? bytes
                                                           : 3 * bytes;
    state.counters["GB/s"] =
        benchmark::Counter(static_cast<double>(moved), benchmark::Counter::kIsIterationInvariantRate);
    return;
  }
  ExecOptions o;
  o.run.host_pipeline = mode == HostMode::Pipelined;
  if (chunk > 0) o.run.pipeline_chunk = chunk;
  if (streams > 0) o.run.pipeline_streams = streams;
  o.run.cuda_graph = false;
  Executor exec(h.g, o);
  Tensor out_host = empty_pinned({kHostN});
  auto run = [&] {
    const TensorMap r = exec.run({{"a", h.a}, {"b", h.b}});
    if (mode == HostMode::Serial) out_host.copy_(r.at("c"));  // serial: all in, compute, all out
  };
  run();
  const Tensor c = mode == HostMode::Serial ? out_host : exec.run({{"a", h.a}, {"b", h.b}}).at("c");
  const float* pc = c.data<float>();
  for (std::int64_t i = 0; i < kHostN; i += 9973) {
    const float want = static_cast<float>(i % 1000) * 0.001f + (1.0f - static_cast<float>(i % 7));
    if (pc[i] != want) {
      state.SkipWithError("host pipeline result is wrong");
      return;
    }
  }
  time_runs(state, 1, run);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(3 * bytes), benchmark::Counter::kIsIterationInvariantRate);
}

// ---------------------------------------------------------------- a transformer block (GPT-2 style)
// graph/models.h: x -> layer_norm -> q, k, v linears (heads) -> causal attention -> projection + residual ->
// layer_norm -> linear + GELU (tanh) -> linear + residual, weights drawn as nn.Linear draws them. With
// MT_BLOCK_DUMP set to a folder, the fp32 run writes x, every weight and y there as .npy files and the 3xTF32
// run its y as y_tf32x3 (bench/graph/torch_block.py builds the same block in PyTorch from them and reports
// both differences).
struct BlockSetup {
  Graph g;
  BlockWeights weights;
  Tensor x;
  BlockSetup(std::int64_t b, std::int64_t t, std::int64_t d, std::int64_t h)
      : weights(random_block_weights(d, 100, Device::cuda(0))) {
    x = uniform({b * t, d}, 1, -1, 1, Device::cuda(0));
    g.output("y", transformer_block(g, g.input("x", {b * t, d}), {.batch = b, .tokens = t, .heads = h}, weights));
  }
};

// unfolded: the permutes materialised and the q, k, v linears separate (the compiler's view folding and
// linear merging off), the same binary's baseline for them.
void bm_block(benchmark::State& state, std::int64_t b, std::int64_t t, std::int64_t d, std::int64_t h,
              bool tf32x3, bool unfolded = false) {
  if (!cuda_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  BlockSetup m(b, t, d, h);
  ExecOptions o;
  o.device = Device::cuda(0);
  o.run.cuda_graph = true;
  if (tf32x3) o.compile.math = MathMode::TF32x3;
  if (unfolded) o.compile.fold_views = o.compile.merge_linears = false;
  Executor exec(m.g, o);
  const TensorMap in = {{"x", m.x}};
  const Tensor y = exec.run(in).at("y");
  if (const char* dir = std::getenv("MT_BLOCK_DUMP"); dir && !unfolded) {
    const std::string base = std::string(dir) + "/block_" + std::to_string(b) + "x" + std::to_string(t) +
                             "_" + std::to_string(d) + "_";
    if (tf32x3) {  // the same x and weights (the same seeds); only y differs
      save_npy(base + "y_tf32x3.npy", y.cpu());
    } else {
      save_npy(base + "x.npy", m.x.cpu());
      save_npy(base + "y.npy", y.cpu());
      for (const auto& [name, w] : m.weights.named()) save_npy(base + name + ".npy", w.cpu());
    }
  }
  state.counters["launches"] = exec.n_launches();
  time_runs(state, 20, [&] { benchmark::DoNotOptimize(exec.run(in)); });
  state.counters["kernels"] = exec.stats().n_graph_kernels;  // of the captured graph
}

void register_all() {
  const std::pair<std::int64_t, std::int64_t> sizes[] = {{64, 512}, {256, 1024}, {4096, 4096}};
  const char* modes[] = {"eager", "exec_unfused", "exec_fused", "exec_fused_graph",
                         "exec_fused_graph_tf32x3"};
  for (auto [b, h] : sizes) {
    for (int mode = 0; mode < 5; ++mode) {
      const std::string name = "MLP/" + std::to_string(b) + "x" + std::to_string(h) + "/" + modes[mode];
      benchmark::RegisterBenchmark(name.c_str(),
                                   [b, h, mode](benchmark::State& st) { bm_mlp(st, b, h, mode); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(h >= 4096 ? 3 : 20);  // each iteration is a batch of runs (see time_runs)
    }
  }
  const std::int64_t block_shapes[][2] = {{1, 128}, {8, 128}, {4, 512}, {1, 1024}};
  for (auto [d, h] : {std::pair<std::int64_t, std::int64_t>{768, 12}, {1024, 16}})
    for (const auto& bt : block_shapes)
      for (bool x3 : {false, true}) {
        const std::string name = "Block/d" + std::to_string(d) + "/" + std::to_string(bt[0]) + "x" +
                                 std::to_string(bt[1]) + (x3 ? "/tf32x3" : "/fp32");
        benchmark::RegisterBenchmark(name.c_str(),
                                     [=](benchmark::State& st) { bm_block(st, bt[0], bt[1], d, h, x3); })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->Iterations(10);
      }
  for (auto [d, h] : {std::pair<std::int64_t, std::int64_t>{768, 12}, {1024, 16}})
    for (const auto& bt : block_shapes) {
      const std::string name = "Block/d" + std::to_string(d) + "/" + std::to_string(bt[0]) + "x" +
                               std::to_string(bt[1]) + "/fp32_unfolded";
      benchmark::RegisterBenchmark(
          name.c_str(), [=](benchmark::State& st) { bm_block(st, bt[0], bt[1], d, h, false, true); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(10);
    }
  for (int m = 0; m < 5; ++m) {
    const auto mode = static_cast<HostMode>(m);
    const std::string name = std::string("HostAdd/100M/") + kHostModeNames[m];
    benchmark::RegisterBenchmark(name.c_str(), [mode](benchmark::State& st) { bm_host(st, mode); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(10);
  }
  // The pipeline's chunk size (M floats) and stream count, around the defaults (4 M, 4 streams).
  for (std::int64_t mega : {1, 2, 4, 8, 16})
    for (int streams : {2, 3, 4}) {
      const std::string name =
          "HostAdd/100M/pipelined_chunk" + std::to_string(mega) + "M_streams" + std::to_string(streams);
      benchmark::RegisterBenchmark(
          name.c_str(),
          [mega, streams](benchmark::State& st) { bm_host(st, HostMode::Pipelined, mega << 20, streams); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(10);
    }
}

}  // namespace

int main(int argc, char** argv) {
  std::cout << device_report() << "\n";
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
