// mlp_demo: build a 2-layer MLP with softmax as a graph, run it on the GPU (or the CPU), check it against the
// Eigen reference node by node, time it in every executor mode, and write a Chrome trace (mt_trace.json).
//
//   mlp_demo [batch] [hidden] [trace.json]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "minitensor/graph/graph.h"
#include "minitensor/minitensor.h"

using namespace mt;

namespace {

Tensor uniform(const Shape& s, std::uint64_t seed, double lo, double hi) {
  std::vector<float> v = rand(s, seed).to_vector<float>();
  for (float& f : v) f = static_cast<float>(lo + (hi - lo) * f);
  return from_vector(v, s);
}

template <class F>
double us_per_run(F&& fn, Device d, int reps) {
  for (int i = 0; i < 3; ++i) fn();
  synchronize(d);
  double best = 1e300;
  for (int k = 0; k < 5; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) fn();
    synchronize(d);
    best = std::min(
        best,
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t batch = argc > 1 ? std::atoll(argv[1]) : 256;
  const std::int64_t hidden = argc > 2 ? std::atoll(argv[2]) : 1024;
  const std::string trace_path = argc > 3 ? argv[3] : "mt_trace.json";
  try {
    std::cout << "== devices\n" << device_report() << "\n";
    const bool gpu = cuda_available();
    const Device device = gpu ? Device::cuda(0) : Device::cpu();
    if (!gpu)
      std::cout << "NOTICE: no CUDA device found: running the graph on the CPU (Eigen reference ops). "
                   "No fusion, CUDA graphs, GPU timings or trace.\n\n";

    // y = softmax(relu(x W1 + b1) W2 + b2), the softmax spelled out so the compiler has a pattern to find.
    const double s = 1.0 / std::sqrt(static_cast<double>(hidden));
    Graph g;
    auto x = g.input("x", {batch, hidden});
    const Tensor W1 = uniform({hidden, hidden}, 2, -s, s), B1 = uniform({hidden}, 3, -0.1, 0.1);
    const Tensor W2 = uniform({hidden, hidden}, 4, -s, s), B2 = uniform({hidden}, 5, -0.1, 0.1);
    auto w1 = g.parameter("w1", W1);
    auto b1 = g.parameter("b1", B1);
    auto w2 = g.parameter("w2", W2);
    auto b2 = g.parameter("b2", B2);
    auto h = g.relu(g.matmul(x, w1) + b1).named("hidden");
    auto logits = (g.matmul(h, w2) + b2).named("logits");
    auto e = g.exp(logits - g.max(logits, -1, true)).named("e");
    g.output("y", (e / g.sum(e, -1, true)).named("probs"));
    std::cout << "== graph (" << batch << " x " << hidden << ")\n" << g.dump() << "\n";

    const Tensor x_host = uniform({batch, hidden}, 1, -1, 1);
    ExecOptions base;
    base.device = device;

    if (!gpu) {
      Executor exec(g, base);
      const auto t0 = std::chrono::steady_clock::now();
      const TensorMap out = exec.run({{"x", x_host}});
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const std::vector<float> y = out.at("y").to_vector<float>();
      double row0 = 0;
      for (std::int64_t j = 0; j < hidden; ++j) row0 += y[static_cast<size_t>(j)];
      std::cout << "CPU run: " << ms << " ms; softmax row 0 sums to " << row0 << "\n";
      return 0;
    }

    Executor exec(g, base);
    std::cout << "== compiled\n" << exec.summary() << "\n";

    std::cout << "== check against the Eigen reference (per node, then end to end)\n";
    const CheckReport report = check(g, {{"x", x_host}}, base);
    std::cout << report << "\n";

    std::cout << "== timing (us per run, " << device_properties(0).name << ")\n";
    const Tensor x_dev = x_host.cuda();
    const TensorMap in = {{"x", x_dev}};
    const Tensor w1d = W1.cuda(), b1d = B1.cuda(), w2d = W2.cuda(), b2d = B2.cuda();
    const int reps = hidden >= 4096 ? 5 : 100;
    struct Mode {
      const char* name;
      ExecOptions o;
    };
    ExecOptions unfused = base, fused = base, graphed = base, graphed_x3 = base;
    graphed_x3.compile.math = MathMode::TF32x3;
    unfused.compile.fuse_elementwise = unfused.compile.fuse_gemm_epilogue = unfused.compile.fuse_softmax =
        false;
    unfused.run.cuda_graph = fused.run.cuda_graph = false;
    std::printf("%-34s %10s %9s\n", "mode", "us/run", "launches");
    const double eager_us = us_per_run(
        [&] { (void)softmax(matmul(relu(matmul(x_dev, w1d) + b1d), w2d) + b2d, -1); }, device, reps);
    std::printf("%-34s %10.1f %9d\n", "eager ops", eager_us, 6);
    for (const Mode& m :
         {Mode{"executor, no fusion", unfused}, Mode{"executor, fused", fused},
          Mode{"executor, fused + CUDA graph", graphed}, Mode{"  ... with TF32x3 GEMMs", graphed_x3}}) {
      Executor e(g, m.o);
      const double us = us_per_run([&] { (void)e.run(in); }, device, reps);
      std::printf("%-34s %10.1f %9d\n", m.name, us, e.n_launches());
    }

    std::cout << "\n== profile (one run, per-step device time)\n";
    ExecOptions prof = base;
    prof.run.profile = true;
    Executor profiled(g, prof);
    profiled.run({{"x", x_host}});  // a host input: the trace shows its copy
    profiled.run({{"x", x_host}});
    std::cout << profiled.profile_table();
    profiled.write_trace(trace_path);
    std::cout << "trace written to " << trace_path
              << " (open in https://ui.perfetto.dev or chrome://tracing)\n";
    return report.ok ? 0 : 2;
  } catch (const Error& e) {
    std::cerr << "mlp_demo: " << e.what() << "\n";
    return 1;
  }
}
