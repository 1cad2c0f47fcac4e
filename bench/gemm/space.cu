// bench_gemm --space: the dispatched SGEMM over a random sample of the shapes users bring, each validated and
// then timed interleaved with cuBLAS, summarised as the distribution of the ratios (cuBLAS time over ours,
// > 1: minitensor faster).
//
//   bench_gemm --space[=N] [--seed=S] [--math=fp32|tf32|tf32x3] [--json=PATH] [--tune] [--part=P]
//   bench_gemm --space[=N] [--seed=S] [--math=...] --picks=h100|h200
//
// --tune adds a column: the autotuner's choice (detail/tune.h; its cache file as MT_GEMM_TUNE_FILE says),
// tuned before the timing, validated and timed in the same interleaved samples. --part times only the shapes
// of one part (random, transformer or batched) of the same sample. --picks prints each shape's dispatcher
// pick on that device model and times nothing (no GPU needed): diffing two builds' lists shows which picks a
// dispatch change moves, so that only those need timing.
//
// The sample (N shapes, 300 by default; the seed is printed and reproduces the set):
//   random       M, N, K log-uniform in [1, 16384] with M*N*K <= 2^37; two thirds rounded to multiples of 16,
//                a third left odd; A and B each transposed with probability 1/4;
//   transformer  x (tokens x d) times an nn.Linear weight (stored out x in, so B is transposed):
//                d in {512, 768, 1024, 2048, 4096, 5120, 8192}, tokens in {1, 8, 64, 512, 2048, 8192}; QKV
//                (N = 3d), the output projection (N = d), FFN up (N = 4d, K = d) and FFN down (N = d, K =
//                4d);
//   batched      2-256 products of 32-512 on a side (B transposed in half of them, as in q k^T).
// fp32 is timed against cuBLAS in pedantic fp32, the TF32 modes against cuBLAS TF32. Every result is checked
// against cuBLAS fp32 first (max |err| / max |ref| <= 1e-4, 1e-2 for TF32).
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "minitensor/ops/gemm.h"
#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/ops/gemm/detail/tune.h"
#include "minitensor/runtime/device.h"
#include "minitensor/tensor/tensor.h"

namespace gemm_bench {
namespace {

using namespace mt;
using namespace mt::detail::gemm;

struct SpaceShape {
  int m, n, k, batch;
  bool ta, tb;
  std::string part;
  double flops() const { return 2.0 * m * n * static_cast<double>(k) * batch; }
  std::string name() const {
    std::string s = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    if (batch > 1) s = std::to_string(batch) + "x(" + s + ")";
    if (ta || tb) s += std::string(" ") + (ta ? "T" : "N") + (tb ? "T" : "N");
    return s;
  }
};

std::vector<SpaceShape> draw(int count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto log_uniform = [&](double lo, double hi) {
    return static_cast<int>(std::lround(std::exp(std::log(lo) + unit(rng) * (std::log(hi) - std::log(lo)))));
  };
  auto round16 = [](int v) { return v >= 16 ? (v + 8) / 16 * 16 : v; };
  const int n_transformer = count * 35 / 100, n_batched = count * 15 / 100;
  const int n_random = count - n_transformer - n_batched;
  std::vector<SpaceShape> out;
  while (static_cast<int>(out.size()) < n_random) {
    SpaceShape s{log_uniform(1, 16384),
                 log_uniform(1, 16384),
                 log_uniform(1, 16384),
                 1,
                 unit(rng) < 0.25,
                 unit(rng) < 0.25,
                 "random"};
    if (unit(rng) < 2.0 / 3.0) s.m = round16(s.m), s.n = round16(s.n), s.k = round16(s.k);
    if (static_cast<double>(s.m) * s.n * s.k <= std::ldexp(1.0, 37)) out.push_back(s);
  }
  const int ds[] = {512, 768, 1024, 2048, 4096, 5120, 8192};
  const int tokens[] = {1, 8, 64, 512, 2048, 8192};
  for (int i = 0; i < n_transformer; ++i) {
    const int d = ds[rng() % 7], t = tokens[rng() % 6];
    switch (rng() % 4) {
      case 0:
        out.push_back({t, 3 * d, d, 1, false, true, "transformer"});  // QKV
        break;
      case 1:
        out.push_back({t, d, d, 1, false, true, "transformer"});  // output projection
        break;
      case 2:
        out.push_back({t, 4 * d, d, 1, false, true, "transformer"});  // FFN up
        break;
      default:
        out.push_back({t, d, 4 * d, 1, false, true, "transformer"});  // FFN down
    }
  }
  for (int i = 0; i < n_batched; ++i)
    out.push_back({log_uniform(32, 512), log_uniform(32, 512), log_uniform(32, 512), log_uniform(2, 256),
                   false, unit(rng) < 0.5, "batched"});
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

// Operand copies (enough to exceed L2; each copy 16-byte aligned, so every copy takes the same kernel).
struct SpaceOperands {
  SpaceShape s;
  int copies = 1;
  std::int64_t a_elems = 0, b_elems = 0, c_elems = 0;
  Tensor a, b, c, ref;

  explicit SpaceOperands(const SpaceShape& shape) : s(shape) {
    auto padded = [](std::int64_t e) { return (e + 3) / 4 * 4; };
    a_elems = padded(std::int64_t(s.m) * s.k * s.batch);
    b_elems = padded(std::int64_t(s.k) * s.n * s.batch);
    c_elems = padded(std::int64_t(s.m) * s.n * s.batch);
    const double bytes = 4.0 * static_cast<double>(a_elems + b_elems + c_elems);
    copies = static_cast<int>(std::clamp(std::ceil(200e6 / bytes), 1.0, 16.0));
    a = randn(Shape{copies, a_elems}, 11, Device::cuda(0));
    b = randn(Shape{copies, b_elems}, 12, Device::cuda(0));
    c = zeros(Shape{copies, c_elems}, DType::F32, Device::cuda(0));
    ref = zeros(Shape{c_elems}, DType::F32, Device::cuda(0));
  }

  Problem at(int copy, float* c_out = nullptr) {
    Problem p;
    p.m = s.m, p.n = s.n, p.k = s.k, p.batch = s.batch;
    p.a = a.data<float>() + copy * a_elems;
    p.a_sm = s.ta ? 1 : s.k, p.a_sk = s.ta ? s.m : 1, p.a_sb = std::int64_t(s.m) * s.k;
    p.b = b.data<float>() + copy * b_elems;
    p.b_sk = s.tb ? 1 : s.n, p.b_sn = s.tb ? s.k : 1, p.b_sb = std::int64_t(s.k) * s.n;
    p.c = c_out ? c_out : c.data<float>() + copy * c_elems;
    p.c_sm = s.n, p.c_sn = 1, p.c_sb = std::int64_t(s.m) * s.n;
    return p;
  }
};

// The shape's problem with its layout and 16-byte aligned stand-in pointers, for the dispatcher alone.
Problem layout_of(const SpaceShape& s) {
  float* const stand_in = reinterpret_cast<float*>(std::uintptr_t{1} << 20);
  Problem p;
  p.m = s.m, p.n = s.n, p.k = s.k, p.batch = s.batch;
  p.a = stand_in;
  p.a_sm = s.ta ? 1 : s.k, p.a_sk = s.ta ? s.m : 1, p.a_sb = std::int64_t(s.m) * s.k;
  p.b = stand_in;
  p.b_sk = s.tb ? 1 : s.n, p.b_sn = s.tb ? s.k : 1, p.b_sb = std::int64_t(s.k) * s.n;
  p.c = stand_in;
  p.c_sm = s.n, p.c_sn = 1, p.c_sb = std::int64_t(s.m) * s.n;
  return p;
}

struct Result {
  SpaceShape s;
  std::string config, tuned_config;
  double cublas_ms = 0, mt_ms = 0, ratio = 0, err = 0;
  double tuned_ms = 0, tuned_ratio = 0;  // --tune
  bool valid = false;
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

void summarise(const char* label, const std::vector<Result>& rs, bool tuned = false) {
  std::vector<double> r;
  double log_sum = 0;
  for (const Result& x : rs) {
    const double ratio = tuned ? x.tuned_ratio : x.ratio;
    if (x.valid) r.push_back(ratio), log_sum += std::log(ratio);
  }
  if (r.empty()) return;
  std::printf("%-12s %4zu shapes  geomean %.3f  p10 %.3f  median %.3f  worst %.3f  (under 0.9: %ld)\n", label,
              r.size(), std::exp(log_sum / static_cast<double>(r.size())), percentile(r, 0.1),
              percentile(r, 0.5), *std::min_element(r.begin(), r.end()),
              static_cast<long>(std::count_if(r.begin(), r.end(), [](double x) { return x < 0.9; })));
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  return o;
}

}  // namespace

int run_space(int argc, char** argv) {
  int count = 300;
  std::uint64_t seed = std::random_device{}();
  MathMode math = MathMode::FP32;
  std::string json;
  bool tune = false;
  std::string part, picks;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "--tune")) tune = true;
    if (!std::strncmp(a, "--part=", 7)) part = a + 7;
    if (!std::strncmp(a, "--picks=", 8)) picks = a + 8;
    if (!std::strncmp(a, "--space=", 8)) count = std::atoi(a + 8);
    if (!std::strncmp(a, "--seed=", 7)) seed = std::strtoull(a + 7, nullptr, 10);
    if (!std::strncmp(a, "--json=", 7)) json = a + 7;
    if (!std::strncmp(a, "--math=", 7)) {
      const std::string m = a + 7;
      if (m != "fp32" && m != "tf32" && m != "tf32x3") {
        std::fprintf(stderr, "bench_gemm: --math wants fp32, tf32 or tf32x3, got '%s'\n", m.c_str());
        return 2;
      }
      math = m == "tf32" ? MathMode::TF32 : m == "tf32x3" ? MathMode::TF32x3 : MathMode::FP32;
    }
  }
  if (count < 1) {
    std::fprintf(stderr, "bench_gemm: --space wants a positive count of shapes\n");
    return 2;
  }
  if (!part.empty() && part != "random" && part != "transformer" && part != "batched") {
    std::fprintf(stderr, "bench_gemm: --part wants random, transformer or batched, got '%s'\n", part.c_str());
    return 2;
  }
  if (!picks.empty()) {
    if (picks != "h100" && picks != "h200") {
      std::fprintf(stderr, "bench_gemm: --picks wants h100 or h200, got '%s'\n", picks.c_str());
      return 2;
    }
    const DeviceModel model = picks == "h100" ? DeviceModel::h100() : DeviceModel::h200();
    std::printf("space picks: %d shapes, seed %llu, math %s, model %s\n", count,
                static_cast<unsigned long long>(seed), math_mode_name(math), picks.c_str());
    for (const SpaceShape& s : draw(count, seed))
      if (part.empty() || s.part == part)
        std::printf("%-11s %-26s %s\n", s.part.c_str(), s.name().c_str(),
                    config_name(choose(layout_of(s), math, model)).c_str());
    return 0;
  }
  if (json.empty()) json = "gemm_space_" + std::to_string(seed) + "_" + math_mode_name(math) + ".json";
  const double tol = math == MathMode::TF32 ? 1e-2 : 1e-4;
  cublasHandle_t baseline = math == MathMode::FP32 ? handles().pedantic : handles().tf32;
  std::printf("space: %d shapes, seed %llu, math %s, against cuBLAS %s (ratio = cuBLAS time / ours)\n", count,
              static_cast<unsigned long long>(seed), math_mode_name(math),
              math == MathMode::FP32 ? "fp32 (pedantic)" : "tf32");
  std::fflush(stdout);

  std::vector<Result> results;
  std::vector<SpaceShape> shapes = draw(count, seed);
  if (!part.empty())
    shapes.erase(
        std::remove_if(shapes.begin(), shapes.end(), [&](const SpaceShape& s) { return s.part != part; }),
        shapes.end());
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const SpaceShape& s = shapes[i];
    Result r;
    r.s = s;
    SpaceOperands o(s);
    const Problem p0 = o.at(0);
    const Config cfg = choose(p0, math);
    r.config = config_name(cfg);
    const Config tuned = tune ? tuned_choice(p0, math, handles().stream) : cfg;
    r.tuned_config = config_name(tuned);
    auto ours = [&](const Problem& p) { launch(p, cfg, handles().stream); };
    auto ours_tuned = [&](const Problem& p) { launch(p, tuned, handles().stream); };
    auto theirs = [&](const Problem& p) { cublas_gemm(baseline, p); };
    cublas_gemm(handles().pedantic, o.at(0, o.ref.data<float>()));
    const std::vector<float> ref = o.ref.to_vector<float>();
    // Validate: `fn` over a NaN-filled C, against cuBLAS pedantic fp32.
    auto error_of = [&](const std::function<void(const Problem&)>& fn) {
      MT_CUDA_CHECK(cudaMemsetAsync(o.c.data<float>(), 0xFF, o.c_elems * 4, handles().stream));
      fn(p0);
      const std::vector<float> got = o.c.select(0, 0).to_vector<float>();
      const std::size_t used = static_cast<std::size_t>(std::int64_t(s.m) * s.n * s.batch);
      double max_err = 0, max_ref = 0;
      bool finite = true;
      for (std::size_t e = 0; e < used; ++e) {
        finite = finite && std::isfinite(got[e]);
        max_err = std::max(max_err, double(std::fabs(got[e] - ref[e])));
        max_ref = std::max(max_ref, double(std::fabs(ref[e])));
      }
      return !finite ? INFINITY : max_ref > 0 ? max_err / max_ref : max_err;
    };
    r.err = error_of(ours);
    if (tune) r.err = std::max(r.err, error_of(ours_tuned));
    r.valid = r.err <= tol;
    if (r.valid) {
      const double est_ms = s.flops() / 30e12 * 1e3;
      const int iters = static_cast<int>(std::clamp(100.0 / std::max(est_ms, 1e-3), 5.0, 30.0));
      std::vector<std::function<void(const Problem&)>> fns = {theirs, ours};
      if (tune) fns.push_back(ours_tuned);
      const std::vector<double> ms = time_interleaved(
          iters, o.copies, [&](int copy) { return o.at(copy); }, fns);
      r.cublas_ms = ms[0], r.mt_ms = ms[1], r.ratio = ms[0] / ms[1];
      r.tuned_ms = tune ? ms[2] : ms[1], r.tuned_ratio = ms[0] / r.tuned_ms;
    }
    std::printf("  [%3zu/%zu] %-11s %-26s %9.4f ms  cuBLAS %9.4f ms  %6.3fx  %s%s\n", i + 1, shapes.size(),
                s.part.c_str(), s.name().c_str(), r.mt_ms, r.cublas_ms, r.ratio, r.config.c_str(),
                r.valid ? "" : ("  INVALID (err " + std::to_string(r.err) + ")").c_str());
    if (tune && r.valid)
      std::printf("  %9s tuned %9.4f ms  %6.3fx  %s\n", "", r.tuned_ms, r.tuned_ratio,
                  r.tuned_config.c_str());
    std::fflush(stdout);
    results.push_back(r);
  }

  std::printf("\nspace summary (seed %llu, %s, %s):\n", static_cast<unsigned long long>(seed),
              math_mode_name(math), device_properties(0).name.c_str());
  for (bool tuned : {false, true}) {
    if (tuned && !tune) break;
    std::printf("%s:\n", tuned ? "tuned (autotuner's choice)" : "dispatcher");
    summarise("all", results, tuned);
    for (const char* part : {"random", "transformer", "batched"}) {
      std::vector<Result> sub;
      for (const Result& r : results)
        if (r.s.part == part) sub.push_back(r);
      summarise(part, sub, tuned);
    }
  }
  const long invalid =
      std::count_if(results.begin(), results.end(), [](const Result& r) { return !r.valid; });
  std::printf("invalid: %ld\n", invalid);
  std::vector<Result> sorted;
  for (const Result& r : results)
    if (r.valid) sorted.push_back(r);
  std::sort(sorted.begin(), sorted.end(), [](const Result& a, const Result& b) { return a.ratio < b.ratio; });
  std::printf("10 worst:\n");
  const std::size_t worst = std::min<std::size_t>(10, sorted.size());
  for (std::size_t i = 0; i < worst; ++i)
    std::printf("  %6.3fx  %-11s %-26s %9.4f ms (cuBLAS %9.4f)  %s\n", sorted[i].ratio,
                sorted[i].s.part.c_str(), sorted[i].s.name().c_str(), sorted[i].mt_ms, sorted[i].cublas_ms,
                sorted[i].config.c_str());
  // The same shapes as --sweep arguments (M,N,K,BATCH,LAYOUT), so every candidate for them can be timed next.
  if (worst > 0) {
    std::printf("their sweep: bench_gemm --math=%s", math_mode_name(math));
    for (std::size_t i = 0; i < worst; ++i) {
      const SpaceShape& w = sorted[i].s;
      std::printf(" --sweep=%d,%d,%d,%d,%c%c", w.m, w.n, w.k, w.batch, w.ta ? 'T' : 'N', w.tb ? 'T' : 'N');
    }
    std::printf("\n");
  }
  if (tune) {
    std::sort(sorted.begin(), sorted.end(),
              [](const Result& a, const Result& b) { return a.tuned_ratio < b.tuned_ratio; });
    std::printf("10 worst, tuned:\n");
    for (std::size_t i = 0; i < std::min<std::size_t>(10, sorted.size()); ++i)
      std::printf("  %6.3fx  %-11s %-26s %9.4f ms (cuBLAS %9.4f)  %s\n", sorted[i].tuned_ratio,
                  sorted[i].s.part.c_str(), sorted[i].s.name().c_str(), sorted[i].tuned_ms,
                  sorted[i].cublas_ms, sorted[i].tuned_config.c_str());
  }

  std::ofstream f(json);
  f << "{\"seed\":" << seed << ",\"math\":\"" << math_mode_name(math) << "\",\"device\":\""
    << json_escape(device_properties(0).name) << "\",\"shapes\":[";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    f << (i ? "," : "") << "{\"part\":\"" << r.s.part << "\",\"m\":" << r.s.m << ",\"n\":" << r.s.n
      << ",\"k\":" << r.s.k << ",\"batch\":" << r.s.batch << ",\"trans_a\":" << (r.s.ta ? "true" : "false")
      << ",\"trans_b\":" << (r.s.tb ? "true" : "false") << ",\"config\":\"" << json_escape(r.config)
      << "\",\"valid\":" << (r.valid ? "true" : "false") << ",\"mt_ms\":" << r.mt_ms
      << ",\"cublas_ms\":" << r.cublas_ms << ",\"ratio\":" << r.ratio;
    if (tune)
      f << ",\"tuned_config\":\"" << json_escape(r.tuned_config) << "\",\"tuned_ms\":" << r.tuned_ms
        << ",\"tuned_ratio\":" << r.tuned_ratio;
    f << "}";
  }
  f << "]}\n";
  std::printf("wrote %s\n", json.c_str());
  return invalid ? 1 : 0;
}

}  // namespace gemm_bench
