// bench_gemm: cuBLAS (row 0, the baseline; linked here only) against every rung of the SGEMM ladder, the
// dispatched FP32 kernel, the TF32 / 3xTF32 tensor-core modes (mma.sync) and the Hopper wgmma kernels
// (ops/gemm/tensorcore/wgmma.cu, on compute capability 9.0 only; pack pass included in the time), on the
// shapes of bench/gemm/DESIGN.md.
//
//   bench_gemm [google-benchmark flags]          the table (Google Benchmark rows + a summary with ratios)
//   bench_gemm --sweep=M,N,K[,BATCH[,LAYOUT]] [--sweep=...] [--math=fp32|tf32|tf32x3] [--only=REGEX]
//                                                every configuration the dispatcher could pick, each
//                                                timed interleaved with cuBLAS (--only: those whose name
//                                                REGEX matches somewhere, and the dispatcher's pick); each
//                                                row is printed as it is timed, then all of them ranked;
//                                                LAYOUT NN (default), NT, TN or TT: T stores that operand
//                                                transposed (A as k x m, B as n x k)
//   bench_gemm --sweep-all                       the sweep over every benchmark shape (builds the dispatch
//                                                table)
//   bench_gemm --space[=N] [--seed=S] [--math=…] [--json=PATH] [--tune]
//                                                N random shapes users bring (space.cu), each against cuBLAS
//
// Method: inputs N(0,1); every kernel's result is validated against cuBLAS before it is timed; 2 warm-up
// runs; each iteration is timed with CUDA events on its own stream; the counters report the median; operands
// rotate over enough copies to exceed the 50 MB L2, so small shapes are not timed from cache. FLOPs = 2 * M *
// N * K * batch. The dispatched fp32 row is also timed with its samples interleaved with cuBLAS's
// (vs_cublas_fp32_interleaved): the card's clocks drift over a run under its power limit, and the cuBLAS row
// runs first. A target counts as met when both ratios meet it.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "harness.h"
#include "minitensor/ops/gemm.h"
#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/ops/gemm/tensorcore/wgmma.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/stream.h"
#include "minitensor/tensor/tensor.h"

namespace {

using namespace mt;
using namespace mt::detail::gemm;
using gemm_bench::cublas_gemm;
using gemm_bench::handles;

struct GemmShape {
  int m, n, k, batch;
  bool ta = false, tb = false;  // A stored k x m (op(A) = A^T), B stored n x k; the sweep's layouts
  std::string name() const {
    std::string s = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    if (batch > 1) s = std::to_string(batch) + "x(" + s + ")";
    return ta || tb ? s + " " + (ta ? "T" : "N") + (tb ? "T" : "N") : s;
  }
  double flops() const { return 2.0 * m * n * static_cast<double>(k) * batch; }
};

const std::vector<GemmShape> kShapes = {
    {512, 512, 512, 1},    {1024, 1024, 1024, 1}, {2048, 2048, 2048, 1}, {4096, 4096, 4096, 1},
    {8192, 8192, 8192, 1}, {4095, 4097, 1023, 1}, {64, 4096, 4096, 1},   {16384, 64, 4096, 1},
    {127, 129, 255, 1},    {256, 256, 256, 64},   {256, 1024, 1024, 1},  {64, 512, 512, 1},
};

enum class Impl {
  Cublas,
  CublasTF32,
  Naive,
  SmemTiled,
  RegTiled,
  WarpTiled,
  Dispatched,
  TF32,
  TF32x3,
  WgTF32,
  WgTF32x3
};
const char* impl_name(Impl i) {
  switch (i) {
    case Impl::Cublas:
      return "cublas_fp32";
    case Impl::CublasTF32:
      return "cublas_tf32";
    case Impl::Naive:
      return "gemm_naive";
    case Impl::SmemTiled:
      return "gemm_smem_tiled";
    case Impl::RegTiled:
      return "gemm_reg_tiled";
    case Impl::WarpTiled:
      return "gemm_warp_tiled";
    case Impl::Dispatched:
      return "mt_fp32";
    case Impl::TF32:
      return "mt_tf32";
    case Impl::TF32x3:
      return "mt_tf32x3";
    case Impl::WgTF32:
      return "wgmma_tf32";
    case Impl::WgTF32x3:
      return "wgmma_tf32x3";
  }
  return "?";
}

// Operands for one shape, `copies` of each so that the working set exceeds L2.
struct Operands {
  GemmShape s{};
  int copies = 0;
  Tensor a, b, c, ref;
  std::int64_t a_elems = 0, b_elems = 0, c_elems = 0;
};
Operands& operand_cache() {
  static Operands ops;
  return ops;
}
Operands& operands(const GemmShape& s) {
  Operands& ops = operand_cache();
  if (ops.copies && ops.s.m == s.m && ops.s.n == s.n && ops.s.k == s.k && ops.s.batch == s.batch &&
      ops.s.ta == s.ta && ops.s.tb == s.tb)
    return ops;
  ops = Operands{};
  ops.s = s;
  ops.a_elems = std::int64_t(s.m) * s.k * s.batch;
  ops.b_elems = std::int64_t(s.k) * s.n * s.batch;
  ops.c_elems = std::int64_t(s.m) * s.n * s.batch;
  const double bytes = 4.0 * (ops.a_elems + ops.b_elems + ops.c_elems);
  ops.copies = static_cast<int>(std::clamp(std::ceil(200e6 / bytes), 1.0, 64.0));
  ops.a = randn(Shape{ops.copies, ops.a_elems}, 1, Device::cuda(0));
  ops.b = randn(Shape{ops.copies, ops.b_elems}, 2, Device::cuda(0));
  ops.c = zeros(Shape{ops.copies, ops.c_elems}, DType::F32, Device::cuda(0));
  ops.ref = zeros(Shape{ops.c_elems}, DType::F32, Device::cuda(0));
  return ops;
}

Problem problem_for(Operands& o, int copy, float* c) {
  const GemmShape& s = o.s;
  Problem p;
  p.m = s.m, p.n = s.n, p.k = s.k, p.batch = s.batch;
  p.a = o.a.data<float>() + copy * o.a_elems, p.a_sb = std::int64_t(s.m) * s.k;
  p.a_sm = s.ta ? 1 : s.k, p.a_sk = s.ta ? s.m : 1;
  p.b = o.b.data<float>() + copy * o.b_elems, p.b_sb = std::int64_t(s.k) * s.n;
  p.b_sk = s.tb ? 1 : s.n, p.b_sn = s.tb ? s.k : 1;
  p.c = c ? c : o.c.data<float>() + copy * o.c_elems, p.c_sm = s.n, p.c_sn = 1,
  p.c_sb = std::int64_t(s.m) * s.n;
  return p;
}

Config config_for(Impl impl, const Problem& p) {
  switch (impl) {
    case Impl::Naive:
      return {Kernel::Naive};
    case Impl::SmemTiled:
      return {Kernel::SmemTiled};
    case Impl::RegTiled:
      return {Kernel::RegTiled};
    case Impl::WarpTiled:
      return {Kernel::WarpTiled};
    case Impl::TF32:
      return choose(p, MathMode::TF32);
    case Impl::TF32x3:
      return choose(p, MathMode::TF32x3);
    default:
      return choose(p, MathMode::FP32);
  }
}

bool is_wgmma(Impl impl) {
  return impl == Impl::WgTF32 || impl == Impl::WgTF32x3;
}
MathMode wgmma_math(Impl impl) {
  return impl == Impl::WgTF32 ? MathMode::TF32 : MathMode::TF32x3;
}

void run_impl(Impl impl, const Problem& p, const Config& cfg, const WgmmaConfig& wc) {
  if (impl == Impl::Cublas) return cublas_gemm(handles().pedantic, p);
  if (impl == Impl::CublasTF32) return cublas_gemm(handles().tf32, p);
  if (is_wgmma(impl)) return launch_wgmma(p, wgmma_math(impl), wc, handles().stream);
  launch(p, cfg, handles().stream);
}

// Max |got - ref| / max |ref| over the first copy; NaN/Inf anywhere fails.
double validate(Operands& o, const Problem& p, const std::function<void(const Problem&)>& fn) {
  Problem q = p;
  q.c = o.c.data<float>();
  MT_CUDA_CHECK(cudaMemsetAsync(q.c, 0xFF, o.c_elems * 4, handles().stream));  // NaN: unwritten shows up
  fn(q);
  Problem r = p;
  r.c = o.ref.data<float>();
  cublas_gemm(handles().pedantic, r);
  const std::vector<float> got = o.c.select(0, 0).to_vector<float>();
  const std::vector<float> ref = o.ref.to_vector<float>();
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    max_err = std::max(max_err, double(std::fabs(got[i] - ref[i])));
    max_ref = std::max(max_ref, double(std::fabs(ref[i])));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

// Median ms per launch of each of `fns`, samples interleaved (harness.h), over the shape's operand copies.
std::vector<double> time_interleaved(Operands& o, int iters,
                                     const std::vector<std::function<void(const Problem&)>>& fns,
                                     std::vector<double>* all = nullptr) {
  return gemm_bench::time_interleaved(
      iters, o.copies, [&](int copy) { return problem_for(o, copy, nullptr); }, fns, all);
}

double time_ms(Operands& o, int iters, const std::function<void(const Problem&)>& fn,
               std::vector<double>* all = nullptr) {
  return time_interleaved(o, iters, {fn}, all)[0];
}

int iterations_for(const GemmShape& s, double tflops_guess) {
  const double est = s.flops() / (tflops_guess * 1e12);
  return static_cast<int>(std::clamp(0.25 / est, 5.0, 200.0));
}

struct Row {
  std::string shape, impl, config;
  double tflops = 0, ratio = 0, ratio_tf32 = 0, err = 0;
  double ratio_interleaved = 0;  // the dispatched fp32 row: against cuBLAS fp32, samples interleaved
};
std::vector<Row> g_rows;
std::map<std::string, double> g_cublas_ms, g_cublas_tf32_ms;

// `wc`: the wgmma configuration (zeros: the launcher's choice by shape); ignored by the other kernels.
void bm_gemm(benchmark::State& state, GemmShape s, Impl impl, WgmmaConfig wc) {
  Operands& o = operands(s);
  const Problem p0 = problem_for(o, 0, nullptr);
  const Config cfg = config_for(impl, p0);
  if (is_wgmma(impl)) {
    const WgmmaConfig chosen = wgmma_choose(p0, wgmma_math(impl));
    if (wc.bn == 0) wc.bn = chosen.bn;
    if (wc.split == 0) wc.split = wc.bn == chosen.bn ? chosen.split : 1;
  }
  auto fn = [&](const Problem& p) { run_impl(impl, p, cfg, wc); };
  const bool tf32 = impl == Impl::TF32 || impl == Impl::TF32x3 || impl == Impl::CublasTF32 || is_wgmma(impl);
  const double err = validate(o, p0, fn);
  const double tol = impl == Impl::TF32 || impl == Impl::CublasTF32 || impl == Impl::WgTF32 ? 1e-2 : 1e-4;
  if (!(err <= tol)) {
    state.SkipWithError(("validation failed: max err / max ref = " + std::to_string(err)).c_str());
    return;
  }
  const bool rung =
      impl == Impl::Naive || impl == Impl::SmemTiled || impl == Impl::RegTiled || impl == Impl::WarpTiled;
  const int iters = iterations_for(s, rung ? 2.0 : tf32 ? 100.0 : 40.0);
  std::vector<double> all;
  double med = 0;
  for (auto _ : state) {
    med = time_ms(o, iters, fn, &all);
    state.SetIterationTime(med / 1e3);
  }
  const double tflops = s.flops() / (med * 1e-3) / 1e12;
  if (impl == Impl::Cublas) g_cublas_ms[s.name()] = med;
  if (impl == Impl::CublasTF32) g_cublas_tf32_ms[s.name()] = med;
  Row r{s.name(), impl_name(impl),
        impl == Impl::Cublas || impl == Impl::CublasTF32 ? ""
        : is_wgmma(impl)                                 ? wgmma_config_name(wc, wgmma_math(impl))
                                                         : config_name(cfg),
        tflops};
  r.err = err;
  if (g_cublas_ms.count(s.name())) r.ratio = g_cublas_ms[s.name()] / med;
  if (impl == Impl::Dispatched) {
    // The same two again, their samples interleaved: the cuBLAS row ran first, on a card not yet warmed
    // by the rows after it (bench/gemm/DESIGN.md, round 19).
    const std::vector<double> both =
        time_interleaved(o, iters, {[&](const Problem& p) { cublas_gemm(handles().pedantic, p); }, fn});
    r.ratio_interleaved = both[0] / both[1];
    state.counters["vs_cublas_fp32_interleaved"] = r.ratio_interleaved;
  }
  if (tf32 && g_cublas_tf32_ms.count(s.name())) r.ratio_tf32 = g_cublas_tf32_ms[s.name()] / med;
  g_rows.push_back(r);
  state.counters["TFLOPs"] = tflops;
  state.counters["ms_median"] = med;
  state.counters["vs_cublas_fp32"] = r.ratio;
  if (tf32) state.counters["vs_cublas_tf32"] = r.ratio_tf32;
  state.counters["max_rel_err"] = err;
  state.SetLabel(r.config);
}

void register_all() {
  Problem probe;
  probe.m = probe.n = probe.k = 128;
  const bool wgmma = wgmma_can_implement(probe, MathMode::TF32x3);
  auto add = [](const GemmShape& s, Impl i, const std::string& suffix, WgmmaConfig wc) {
    benchmark::RegisterBenchmark((std::string("gemm/") + s.name() + "/" + impl_name(i) + suffix).c_str(),
                                 bm_gemm, s, i, wc)
        ->UseManualTime()
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  };
  for (const GemmShape& s : kShapes) {
    std::vector<Impl> impls = {Impl::Cublas, Impl::CublasTF32};
    if (s.flops() <= 20e9)
      impls.insert(impls.end(), {Impl::Naive, Impl::SmemTiled, Impl::RegTiled, Impl::WarpTiled});
    impls.insert(impls.end(), {Impl::Dispatched, Impl::TF32, Impl::TF32x3});
    if (wgmma) impls.insert(impls.end(), {Impl::WgTF32, Impl::WgTF32x3});
    for (Impl i : impls) add(s, i, "", WgmmaConfig{});
    // Every built wgmma configuration at the big square shapes (the launcher's choice is the row above).
    if (wgmma && s.m == s.n && s.n == s.k && s.m >= 2048) {
      add(s, Impl::WgTF32x3, "_128x128", WgmmaConfig{128});
      for (int bn : {128, 256}) add(s, Impl::WgTF32, "_128x" + std::to_string(bn), WgmmaConfig{bn});
    }
  }
}

const char* target_of(const Row& r) {
  const bool big = r.shape == "2048x2048x2048" || r.shape == "4096x4096x4096" || r.shape == "8192x8192x8192";
  if (r.impl == "mt_fp32") {
    // Met when both measurements say so: timed after the cuBLAS row, and interleaved with it.
    const double need = big ? 0.90 : 1.0;
    const double ratio = r.ratio_interleaved > 0 ? std::min(r.ratio, r.ratio_interleaved) : r.ratio;
    return ratio >= need ? (big ? "met (>=0.90)" : "met (>=1.0)")
                         : (big ? "MISSED (<0.90)" : "MISSED (<1.0)");
  }
  if ((r.impl == "mt_tf32x3" || r.impl == "wgmma_tf32x3") && r.shape == "4096x4096x4096")
    return r.ratio >= 1.5 ? "met (>=1.5)" : "MISSED (<1.5)";
  return "";
}

void print_summary() {
  std::printf(
      "\n| shape | kernel | config | TFLOP/s | vs cuBLAS fp32 | interleaved with it | vs cuBLAS tf32 | "
      "target "
      "|\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---|\n");
  for (const Row& r : g_rows) {
    std::printf("| %s | %s | %s | %.2f | %.3f | %s | %s | %s |\n", r.shape.c_str(), r.impl.c_str(),
                r.config.c_str(), r.tflops, r.ratio,
                r.ratio_interleaved > 0 ? std::to_string(r.ratio_interleaved).substr(0, 5).c_str() : "",
                r.ratio_tf32 > 0 ? std::to_string(r.ratio_tf32).substr(0, 5).c_str() : "", target_of(r));
  }
}

void sweep(const GemmShape& s, MathMode math, const std::regex& only) {
  Operands& o = operands(s);
  const Problem p0 = problem_for(o, 0, nullptr);
  const std::function<void(const Problem&)> cublas = [&](const Problem& p) {
    cublas_gemm(handles().pedantic, p);
  };
  const double cub = time_ms(o, iterations_for(s, 40), cublas);
  const Config chosen = choose(p0, math);
  std::printf("sweep %s %s: cublas_fp32 %.2f TFLOP/s; dispatcher picks %s\n", s.name().c_str(),
              math_mode_name(math), s.flops() / (cub * 1e-3) / 1e12, config_name(chosen).c_str());
  struct R {
    std::string name;
    double tflops, ratio, err;
  };
  auto row = [&](const R& r) {
    char line[256];
    std::snprintf(line, sizeof line, "%-48s %8.2f TFLOP/s  %.3fx cublas (interleaved)  err %.2e%s",
                  r.name.c_str(), r.tflops, r.ratio, r.err,
                  r.err > (math == MathMode::TF32 ? 1e-2 : 1e-4) ? "  INVALID" : "");
    return std::string(line);
  };
  std::vector<R> rs;
  // The dispatcher's pick is timed first (so a sweep cut short still has it), whether or not it is among the
  // candidates; then the candidates --only selects.
  std::vector<Config> configs = candidates(p0, math);
  std::erase_if(configs, [&](const Config& c) { return config_name(c) == config_name(chosen); });
  configs.insert(configs.begin(), chosen);
  for (const Config& c : configs) {
    if (!std::regex_search(config_name(c), only) && config_name(c) != config_name(chosen)) continue;
    auto fn = [&](const Problem& p) { launch(p, c, handles().stream); };
    const double err = validate(o, p0, fn);
    // Interleaved with cuBLAS, so each ratio compares the two under the same state of the card.
    const std::vector<double> ms = time_interleaved(o, iterations_for(s, 60), {cublas, fn});
    rs.push_back({config_name(c), s.flops() / (ms[1] * 1e-3) / 1e12, ms[0] / ms[1], err});
    // As it is timed, so that a run cut short still reports what it measured.
    std::printf("  . %s\n", row(rs.back()).c_str());
    std::fflush(stdout);
  }
  std::sort(rs.begin(), rs.end(), [](const R& a, const R& b) { return a.tflops > b.tflops; });
  std::printf("ranked %s:\n", s.name().c_str());
  for (const R& r : rs) std::printf("  %s\n", row(r).c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  // The space's dispatch picks on a device model need no GPU.
  for (int i = 1; i < argc; ++i)
    if (!std::strncmp(argv[i], "--picks=", 8)) return gemm_bench::run_space(argc, argv);
  if (!mt::cuda_available()) {
    std::printf("bench_gemm: no CUDA device (%s)\n", mt::cuda_unavailable_reason().c_str());
    return 0;
  }
  std::printf("device: %s\n", mt::device_properties(0).name.c_str());
  for (int i = 1; i < argc; ++i)
    if (!std::strncmp(argv[i], "--space", 7)) return gemm_bench::run_space(argc, argv);
  MathMode math = MathMode::FP32;
  std::regex only("");
  for (int i = 1; i < argc; ++i) {
    if (!std::strncmp(argv[i], "--math=", 7))
      math = !std::strcmp(argv[i] + 7, "tf32")     ? MathMode::TF32
             : !std::strcmp(argv[i] + 7, "tf32x3") ? MathMode::TF32x3
                                                   : MathMode::FP32;
    if (!std::strncmp(argv[i], "--only=", 7)) {
      try {
        only = std::regex(argv[i] + 7);
      } catch (const std::regex_error& e) {
        std::fprintf(stderr, "bench_gemm: --only='%s' is not a regular expression: %s\n", argv[i] + 7,
                     e.what());
        return 2;
      }
    }
  }
  bool swept = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strncmp(argv[i], "--sweep=", 8)) {
      GemmShape s{0, 0, 0, 1};
      char layout[3] = "NN";
      const int got = std::sscanf(argv[i] + 8, "%d,%d,%d,%d,%2[NT]", &s.m, &s.n, &s.k, &s.batch, layout);
      if (got < 3 || (got == 5 && std::strlen(layout) != 2)) {
        std::fprintf(stderr, "bench_gemm: --sweep wants M,N,K[,BATCH[,NN|NT|TN|TT]], got '%s'\n",
                     argv[i] + 8);
        return 2;
      }
      s.ta = layout[0] == 'T', s.tb = layout[1] == 'T';
      sweep(s, math, only);
      operand_cache() = Operands{};
      swept = true;
    }
    if (!std::strcmp(argv[i], "--sweep-all")) {
      for (const GemmShape& s : kShapes) sweep(s, math, only);
      operand_cache() = Operands{};
      swept = true;
    }
  }
  if (swept) return 0;
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_summary();
  operand_cache() = Operands{};  // device memory goes back before the runtime shuts down
  return 0;
}
