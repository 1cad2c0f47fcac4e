// SGEMM against the float64 Eigen reference: every kernel of the ladder, the dispatcher, layouts (transposed,
// strided, unaligned), batches with broadcasting, alpha/beta, K = 0, the fused epilogue, TF32 modes, the
// Hopper wgmma kernels (launched directly), errors.
//
// Tolerance: |C - ref| <= c * (K + 2) * eps * (|alpha| |A||B| + |beta| |C0| + |bias|) per element, the
// classic bound on a float32 dot product of length K (eps = 2^-23); any NaN or Inf where the reference is
// finite fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>

#include "minitensor/ops/functors.h"
#include "minitensor/ops/gemm.h"
#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/ops/gemm/detail/pack.h"
#include "minitensor/ops/gemm/detail/tune.h"
#include "minitensor/ops/gemm/tensorcore/wgmma.h"
#include "minitensor/runtime/launch.h"
#include "minitensor/runtime/stream.h"
#include "tests/common/gpu.h"
#include "tests/common/op_harness.h"

namespace mt {
namespace {

using test::Guarded;
using test::InputSpec;
using test::Layout;
using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Values of a 2-D (or batch-selected) float tensor as float64.
MatD to_double(const Tensor& t) {
  const Tensor h = t.cpu().contiguous();
  const std::vector<float> v = h.to_vector<float>();
  MatD m(h.size(0), h.size(1));
  for (std::int64_t i = 0; i < m.size(); ++i) m.data()[i] = v[static_cast<size_t>(i)];
  return m;
}

struct ErrorStats {
  std::int64_t n_bad = 0, n_nonfinite = 0;
  double max_ratio = 0;  // max |err| / bound
  double max_norm = 0;   // max |err| / (|A||B|) : the error in units of the operands' scale
  double rms_norm = 0;   // sqrt(sum err^2 / sum (|A||B|)^2)
  std::string first_bad;
  std::string str() const {
    std::ostringstream os;
    os << "bad=" << n_bad << " nonfinite=" << n_nonfinite << " max_err/bound=" << max_ratio
       << " max_norm_err=" << max_norm << " rms_norm_err=" << rms_norm;
    if (!first_bad.empty()) os << " first: " << first_bad;
    return os.str();
  }
};

// Compares got (m, n) with the float64 product alpha * a * b + beta * c0 (+ bias, activation), elementwise
// against the K-scaled bound. `c_factor` scales the bound (1 for FP32 kernels).
void accumulate_errors(const MatD& got, const MatD& a, const MatD& b, const MatD* c0,
                       const std::vector<float>* bias, float alpha, float beta, Activation act,
                       double c_factor, ErrorStats& s, double& err2, double& scale2) {
  const MatD ab = a * b;
  const MatD abs_ab = a.cwiseAbs() * b.cwiseAbs();
  const double k = static_cast<double>(a.cols());
  for (Eigen::Index i = 0; i < got.rows(); ++i)
    for (Eigen::Index j = 0; j < got.cols(); ++j) {
      double ref = alpha * ab(i, j);
      double scale = std::fabs(alpha) * abs_ab(i, j);
      if (beta != 0.f) ref += beta * (*c0)(i, j), scale += std::fabs(beta) * std::fabs((*c0)(i, j));
      if (bias) ref += (*bias)[static_cast<size_t>(j)], scale += std::fabs((*bias)[static_cast<size_t>(j)]);
      if (act == Activation::Relu) ref = ref > 0 ? ref : 0;
      if (act == Activation::Gelu) ref = fn::gelu(static_cast<float>(ref)), scale += std::fabs(ref);
      if (act == Activation::GeluTanh) ref = fn::gelu_tanh(static_cast<float>(ref)), scale += std::fabs(ref);
      const double g = got(i, j);
      const double bound = c_factor * (k + 2) * FLT_EPSILON * scale + 1e-30;
      const double err = std::fabs(g - ref);
      const bool finite = std::isfinite(g);
      if (!finite) ++s.n_nonfinite;
      if (!finite || err > bound) {
        if (s.n_bad++ == 0) {
          std::ostringstream os;
          os << "(" << i << ", " << j << "): got " << g << ", expected " << ref << ", bound " << bound;
          s.first_bad = os.str();
        }
      }
      if (finite) {
        s.max_ratio = std::max(s.max_ratio, err / bound);
        if (abs_ab(i, j) > 0) s.max_norm = std::max(s.max_norm, err / abs_ab(i, j));
        err2 += err * err;
        scale2 += abs_ab(i, j) * abs_ab(i, j);
      }
    }
}

struct GemmCase {
  GemmCase(std::int64_t m_, std::int64_t n_, std::int64_t k_, bool ta = false, bool tb = false,
           Layout la = Layout::Contiguous, Layout lb = Layout::Contiguous)
      : m(m_), n(n_), k(k_), trans_a(ta), trans_b(tb), layout_a(la), layout_b(lb) {}
  std::int64_t m, n, k;
  bool trans_a = false, trans_b = false;
  Layout layout_a = Layout::Contiguous, layout_b = Layout::Contiguous;
  float alpha = 1.f, beta = 0.f;
  bool bias = false;
  Activation act = Activation::None;
  std::optional<MathMode> math;
  double c_factor = 1.0;
  std::uint64_t seed = 42;
};

std::string describe(const GemmCase& c) {
  std::ostringstream os;
  os << c.m << "x" << c.n << "x" << c.k << " trans_a=" << c.trans_a << " trans_b=" << c.trans_b
     << " a=" << test::layout_name(c.layout_a) << " b=" << test::layout_name(c.layout_b)
     << " alpha=" << c.alpha << " beta=" << c.beta << " bias=" << c.bias << " act=" << static_cast<int>(c.act)
     << " seed=" << c.seed;
  return os.str();
}

// Runs mt::gemm on `device` into a guarded C (NaN-filled when beta == 0) and checks it against float64.
ErrorStats run_gemm_case(const GemmCase& c, Device device) {
  SCOPED_TRACE(describe(c));
  const Shape sa = c.trans_a ? Shape{c.k, c.m} : Shape{c.m, c.k};
  const Shape sb = c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n};
  const Tensor a = test::make_input(InputSpec{sa, c.layout_a}, c.seed, device);
  const Tensor b = test::make_input(InputSpec{sb, c.layout_b}, c.seed + 1, device);
  const Tensor c0 = test::make_input(InputSpec{Shape{c.m, c.n}}, c.seed + 2, device);
  const Tensor bias = c.bias ? test::make_input(InputSpec{Shape{c.n}}, c.seed + 3, device) : Tensor();
  Guarded g(Shape{c.m, c.n}, DType::F32, device);
  if (c.beta != 0.f) g.view().copy_(c0);  // else: NaN from Guarded, must not leak
  GemmOptions o;
  o.alpha = c.alpha, o.beta = c.beta, o.activation = c.act, o.math = c.math;
  gemm(a, b, g.view(), c.trans_a, c.trans_b, o, bias);
  EXPECT_EQ(g.check(), "");
  ErrorStats s;
  double err2 = 0, scale2 = 0;
  MatD ad = to_double(a), bd = to_double(b);
  if (c.trans_a) ad.transposeInPlace();
  if (c.trans_b) bd.transposeInPlace();
  const MatD cd = to_double(c0);
  const std::vector<float> bv = c.bias ? bias.to_vector<float>() : std::vector<float>();
  accumulate_errors(to_double(g.view()), ad, bd, &cd, c.bias ? &bv : nullptr, c.alpha, c.beta, c.act,
                    c.c_factor, s, err2, scale2);
  s.rms_norm = scale2 > 0 ? std::sqrt(err2 / scale2) : 0;
  EXPECT_EQ(s.n_bad, 0) << s.str();
  return s;
}

// Expects got == a @ b (no epilogue) within the K-scaled bound; `what` names the case in a failure.
void expect_product(const MatD& got, const MatD& a, const MatD& b, const std::string& what = "") {
  ErrorStats s;
  double e2 = 0, s2 = 0;
  accumulate_errors(got, a, b, nullptr, nullptr, 1.f, 0.f, Activation::None, 1.0, s, e2, s2);
  EXPECT_EQ(s.n_bad, 0) << what << s.str();
}

// Checks the entries `batches` of the batched product c = a @ b (3-D, no epilogue) against float64.
void expect_batches_match(const Tensor& c, const Tensor& a, const Tensor& b,
                          std::initializer_list<std::int64_t> batches) {
  for (std::int64_t i : batches)
    expect_product(to_double(c.select(0, i)), to_double(a.select(0, i)), to_double(b.select(0, i)),
                   "batch " + std::to_string(i) + ": ");
}

// Runs f and expects an E whose message holds every one of `parts`.
template <class E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// The Problem of c = a @ b for 2-D tensors of any strides (no epilogue: alpha 1, beta 0).
detail::gemm::Problem problem_2d(const Tensor& a, const Tensor& b, const Tensor& c) {
  detail::gemm::Problem p;
  p.m = static_cast<int>(a.size(0)), p.n = static_cast<int>(b.size(1)), p.k = static_cast<int>(a.size(1));
  p.a = a.data<float>(), p.a_sm = a.stride(0), p.a_sk = a.stride(1);
  p.b = b.data<float>(), p.b_sk = b.stride(0), p.b_sn = b.stride(1);
  p.c = c.data<float>(), p.c_sm = c.stride(0), p.c_sn = c.stride(1);
  return p;
}

// Each entry e of the batched C against p's epilogue over entry e of `a` and of `c0`, with `b` broadcast.
void expect_entries_match(const Tensor& c, const Tensor& a, const Tensor& b, const Tensor& c0,
                          const std::vector<float>* bias, const detail::gemm::Problem& p) {
  const MatD bd = to_double(b);
  for (std::int64_t e = 0; e < c.size(0); ++e) {
    const MatD cd = to_double(c0.select(0, e));
    ErrorStats s;
    double e2 = 0, s2 = 0;
    accumulate_errors(to_double(c.select(0, e)), to_double(a.select(0, e)), bd, &cd, bias, p.alpha, p.beta,
                      p.act, 1.0, s, e2, s2);
    EXPECT_EQ(s.n_bad, 0) << "entry " << e << ": " << s.str();
  }
}

// The CPU half, then the GPU half; without a GPU the case reports SKIPPED (GTEST_SKIP in a helper marks the
// test skipped), never PASSED on the CPU half alone.
void run_both(const GemmCase& c) {
  run_gemm_case(c, Device::cpu());
  MT_REQUIRE_GPU();
  run_gemm_case(c, Device::cuda(0));
}

// ---------------------------------------------------------------- shapes and layouts through the dispatcher

TEST(Gemm, F32_Shapes) {
  const std::int64_t shapes[][3] = {{1, 1, 1},        {1, 7, 3},       {5, 1, 9},       {7, 13, 17},
                                    {31, 37, 41},     {64, 64, 64},    {127, 129, 255}, {128, 128, 8},
                                    {257, 130, 1000}, {2, 3001, 2048}, {300, 40, 5000}, {61, 517, 1031},
                                    {129, 67, 3}};
  for (const auto& s : shapes) run_both(GemmCase(s[0], s[1], s[2]));
}

TEST(Gemm, F32_Layouts_127x129x255) {
  const Layout layouts[] = {Layout::Contiguous, Layout::Offset1, Layout::Strided};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (Layout la : layouts)
        for (Layout lb : layouts) {
          GemmCase c{127, 129, 255, ta, tb, la, lb};
          run_both(c);
        }
  // Transposed views (no copy) through the plain form.
  run_both(GemmCase(127, 129, 255, false, false, Layout::Transposed, Layout::Transposed));
  run_both(GemmCase(64, 128, 256, false, false, Layout::Transposed, Layout::Contiguous));
}

TEST(Gemm, F32_AlphaBeta_NaNFilledC) {
  for (float alpha : {0.f, 1.f, -1.5f})
    for (float beta : {0.f, 1.f, -1.5f}) {
      GemmCase c{67, 131, 129};
      c.alpha = alpha, c.beta = beta;
      run_both(c);
    }
}

TEST(Gemm, F32_K0_GivesBetaC) {
  for (float beta : {0.f, 1.f, -1.5f})
    for (bool bias : {false, true}) {
      GemmCase c{9, 11, 0};
      c.beta = beta, c.bias = bias;
      run_both(c);
    }
}

TEST(Gemm, F32_Epilogue_BiasActivation) {
  for (Activation act : {Activation::None, Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
    GemmCase c{129, 257, 300};
    c.bias = true, c.act = act,
    c.beta = act == Activation::Gelu       ? -1.5f
             : act == Activation::GeluTanh ? 0.5f
                                           : 0.f;
    run_both(c);
  }
}

TEST(Gemm, F32_4095x4097x1023) {
  MT_REQUIRE_GPU();
  run_gemm_case(GemmCase(4095, 4097, 1023), Device::cuda(0));
}

// Batched products through the dispatcher with `vectors` on the thin side: a batch of (300 x 1000) matrices
// against `vectors` columns each, and a batch of `vectors` rows against one (1000 x 700) weight broadcast
// over the batch.
void expect_batched_vectors(Device d, std::int64_t vectors) {
  const Tensor a = randn({5, 300, 1000}, 7, d), x = randn({5, 1000, vectors}, 8, d);
  expect_batches_match(matmul(a, x), a, x, {0, 2, 4});
  const Tensor r = randn({6, vectors, 1000}, 9, d), w = randn({1000, 700}, 10, d);
  const Tensor y = matmul(r, w);  // w broadcast over the batch
  for (std::int64_t e : {0, 5})
    expect_product(to_double(y.select(0, e)), to_double(r.select(0, e)), to_double(w),
                   "entry " + std::to_string(e));
}

// Matrix-vector products (the vector kernel, Kernel::Gemv): the matrix along K (dot kernel) or along the
// outputs (column kernel) by transposes, offset and strided views, K split over blocks (long K), alpha/beta
// over a NaN-filled C, bias and activations, the TF32 modes (computed in fp32), batches and broadcasts.
TEST(Gemm, F32_MatrixVector) {
  const std::int64_t shapes[][3] = {{1, 1, 1},      {1, 1, 100003},  {1, 3072, 768}, {768, 1, 768},
                                    {64, 1, 16384}, {1, 768, 16384}, {1, 37, 5},     {513, 1, 3},
                                    {3, 2000, 777}, {2000, 6, 777}};  // the last two: thin products
  for (const auto& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) run_both(GemmCase(s[0], s[1], s[2], ta, tb));
  for (Layout l : {Layout::Offset1, Layout::Strided}) {
    run_both(GemmCase(1, 300, 1001, false, true, l, l));
    run_both(GemmCase(300, 1, 1001, false, false, l, l));
  }
  for (Activation act : {Activation::None, Activation::Relu, Activation::Gelu})
    for (bool column : {false, true}) {
      GemmCase c = column ? GemmCase(1, 257, 4100) : GemmCase(257, 1, 4100, true, false);
      c.bias = true, c.act = act, c.alpha = -1.5f, c.beta = act == Activation::Gelu ? 0.5f : 0.f;
      run_both(c);
    }
  for (MathMode m : {MathMode::TF32, MathMode::TF32x3}) {
    GemmCase c{1, 1000, 3000, false, true};
    c.math = m;
    run_both(c);
  }
  MT_REQUIRE_GPU();
  expect_batched_vectors(Device::cuda(0), 1);
}

// The operands of alpha * op(a) @ op(b) + beta * c0 + bias for a sweep of configurations over one shape: a
// (at offset 1 where `la` says so) and b as the transposes ask, with float64 copies for the check.
struct SweepOperands {
  std::int64_t m, n, k;
  Tensor a, b, bias, c0;
  MatD ad, bd, cd;
  std::vector<float> bv;
};

SweepOperands sweep_operands(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, Layout la,
                             std::uint64_t seed, Device d) {
  SweepOperands o{m, n, k};
  const Tensor a0 = test::make_input(InputSpec{ta ? Shape{k, m} : Shape{m, k}, la}, seed, d);
  const Tensor b0 = test::make_input(InputSpec{tb ? Shape{n, k} : Shape{k, n}}, seed + 1, d);
  o.a = ta ? a0.t() : a0, o.b = tb ? b0.t() : b0;
  o.bias = test::make_input(InputSpec{Shape{n}}, seed + 2, d);
  o.c0 = test::make_input(InputSpec{Shape{m, n}}, seed + 3, d);
  o.ad = to_double(o.a), o.bd = to_double(o.b), o.cd = to_double(o.c0);
  o.bv = o.bias.to_vector<float>();
  return o;
}

// Launches `cfg` on p (o's operands into g's guarded C, with p's epilogue; g is set to c0 where beta != 0,
// else to NaN, which must not leak) and checks C against float64, the bound scaled by `c_factor`.
void expect_config_matches(const SweepOperands& o, Guarded& g, const detail::gemm::Problem& p,
                           const detail::gemm::Config& cfg, double c_factor, Device d) {
  using namespace detail::gemm;
  if (p.beta != 0.f)
    g.view().copy_(o.c0);
  else
    g.view().fill_(std::numeric_limits<double>::quiet_NaN());
  ASSERT_TRUE(can_implement(p, cfg));
  launch(p, cfg, detail::stream_for(d));
  EXPECT_EQ(g.check(), "");
  ErrorStats st;
  double e2 = 0, s2 = 0;
  accumulate_errors(to_double(g.view()), o.ad, o.bd, &o.cd, p.bias ? &o.bv : nullptr, p.alpha, p.beta, p.act,
                    c_factor, st, e2, s2);
  EXPECT_EQ(st.n_bad, 0) << st.str();
}

// The correctness matrix the configuration tests share: each m x n x k of `shapes`, both operands plain or
// transposed, A contiguous or at offset 1, beta 0 (C NaN-filled by expect_config_matches) and beta 1, alpha
// -1.5 with relu, and the bias where `bias`. `body(o, g, p, label)` runs the configurations under test on
// each case; label names the case for SCOPED_TRACE.
template <class Body>
void for_each_matrix_case(std::initializer_list<std::array<std::int64_t, 3>> shapes, std::uint64_t seed,
                          bool bias, Device d, Body&& body) {
  for (const auto& [m, n, k] : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (Layout la : {Layout::Contiguous, Layout::Offset1}) {
          const SweepOperands o = sweep_operands(m, n, k, ta, tb, la, seed, d);
          for (float beta : {0.f, 1.f}) {
            Guarded g(Shape{m, n}, DType::F32, d);
            detail::gemm::Problem p = problem_2d(o.a, o.b, g.view());
            if (bias) p.bias = o.bias.data<float>();
            p.alpha = -1.5f, p.beta = beta, p.act = Activation::Relu;
            const std::string label = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                                      (ta ? " trans_a" : "") + (tb ? " trans_b" : "") +
                                      " a=" + test::layout_name(la) + " beta " + std::to_string(beta);
            body(o, g, p, label);
          }
        }
}

// Thin products on the vector kernel (2 to kGemvMaxRows vectors, forced): either side thin, both matrix
// layouts (the dot kernel or dot tile, and the column kernel) by transposes, an operand at offset 1 (scalar
// loads), a short K (dot groups under a warp), a long K (split over blocks, the partial sums laid out as C;
// the dot tile's staged vectors bound its K per split), alpha and beta over a NaN-filled C, bias and an
// activation; then batches through the dispatcher, one with a weight broadcast.
TEST(Gemm, F32_ThinProducts_TheVectorKernel) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const Device d = Device::cuda(0);
  // The last two: 4 and 2 rows a group in the dot tile (the block count), rows past the last in its last
  // block.
  const std::int64_t shapes[][3] = {{2, 300, 777},   {3, 1000, 36},  {5, 129, 4100}, {8, 64, 1000},
                                    {9, 515, 300},   {16, 700, 128}, {13, 37, 9000}, {16, 16, 16},
                                    {6, 33000, 520}, {12, 9000, 700}};
  int ran = 0;
  for (const auto& s : shapes)
    for (bool n_thin : {false, true}) {
      const std::int64_t m = n_thin ? s[1] : s[0], n = n_thin ? s[0] : s[1], k = s[2];
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (Layout la : {Layout::Contiguous, Layout::Offset1}) {
            const SweepOperands o = sweep_operands(m, n, k, ta, tb, la, 91, d);
            for (float beta : {0.f, 1.f}) {
              SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                           (ta ? " trans_a" : "") + (tb ? " trans_b" : "") + " a=" + test::layout_name(la) +
                           " beta " + std::to_string(beta));
              Guarded g(Shape{m, n}, DType::F32, d);
              Problem p = problem_2d(o.a, o.b, g.view());
              p.alpha = -1.5f, p.beta = beta;
              if (beta != 0.f) p.bias = o.bias.data<float>(), p.act = Activation::Relu;
              expect_config_matches(o, g, p, Config{Kernel::Gemv}, 1.0, d);
              ++ran;
            }
          }
    }
  EXPECT_EQ(ran, 10 * 2 * 8 * 2);
  expect_batched_vectors(d, 6);
}

// Packed operands on the TMA kernel, K split 2 in a cluster, C in odd rows (the dispatcher's pick on 132
// SMs).
TEST(Gemm, F32_2047x2049x2047) {
  MT_REQUIRE_GPU();
  run_gemm_case(GemmCase(2047, 2049, 2047), Device::cuda(0));
}

// ---------------------------------------------------------------- every kernel of the ladder, directly

// Two shapes: 127x129x255 (every edge odd: no 16-byte runs), and 132x136x260, whose contiguous operands run
// in whole 16-byte runs (the register-staged kernels' straight-line main loop, with edge tiles along m and n
// and a partial last k tile).
TEST(Gemm, F32_EveryKernel_EveryLayout) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  std::vector<Config> configs = {
      {Kernel::Naive}, {Kernel::SmemTiled}, {Kernel::RegTiled}, {Kernel::WarpTiled}};
  for (Kernel k : simt_kernels())
    for (Staging st : {Staging::Registers, Staging::CpAsync, Staging::CpAsync16, Staging::Tma}) {
      configs.push_back({k, 1, MathMode::FP32, SplitReduce::Kernel, st});
      for (SplitReduce r : {SplitReduce::Cluster, SplitReduce::Kernel})
        configs.push_back({k, 3, MathMode::FP32, r, st});
    }
  for (Kernel k : simt_kernels()) {  // unaligned operands copied to aligned scratch first
    configs.push_back({k, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers, true});
    configs.push_back({k, 3, MathMode::FP32, SplitReduce::Cluster, Staging::Registers, true});
  }
  for (Kernel k : tensor_kernels())
    for (MathMode m : {MathMode::TF32, MathMode::TF32x3}) {
      configs.push_back({k, 1, m});
      // The mma.sync kernels reduce split K with the second kernel, the wgmma kernel that way or in a
      // cluster.
      configs.push_back({k, 2, m, SplitReduce::Kernel});
      if (k == Kernel::Wgmma) configs.push_back({k, 3, m, SplitReduce::Cluster});
    }
  // Both operands contiguous along k or along m / n, 16-byte aligned or at offset 1 (the register-staged
  // loaders' vector and scalar paths, transposing or not).
  const std::int64_t shapes[2][3] = {{127, 129, 255}, {132, 136, 260}};
  for (const auto& mnk : shapes)
    for (bool ta : {false, true})
      for (Layout la : {Layout::Contiguous, Layout::Offset1})
        for (bool tb : {false, true})
          for (Layout lb : {Layout::Contiguous, Layout::Offset1}) {
            const std::int64_t m = mnk[0], n = mnk[1], k = mnk[2];
            const Tensor a0 =
                test::make_input(InputSpec{ta ? Shape{k, m} : Shape{m, k}, la}, 5, Device::cuda(0));
            const Tensor b =
                test::make_input(InputSpec{tb ? Shape{n, k} : Shape{k, n}, lb}, 6, Device::cuda(0));
            const Tensor bias = test::make_input(InputSpec{Shape{n}}, 7, Device::cuda(0));
            const Tensor c0 = test::make_input(InputSpec{Shape{m, n}}, 8, Device::cuda(0));
            const Tensor a = ta ? a0.t() : a0;
            const Tensor bt = tb ? b.t() : b;
            for (const Config& cfg : configs) {
              SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " +
                           config_name(cfg) + (ta ? " trans_a" : "") + " a=" + test::layout_name(la) +
                           (tb ? " trans_b" : "") + " b=" + test::layout_name(lb));
              Guarded g(Shape{m, n}, DType::F32, Device::cuda(0));
              g.view().copy_(c0);
              Problem p = problem_2d(a, bt, g.view());
              p.bias = bias.data<float>();
              p.alpha = -1.5f, p.beta = 1.f, p.act = Activation::Relu;
              if (!can_implement(p, cfg)) {
                // The tiles built without the 4-byte ring refuse it; the whole-run tile (64x256) refuses
                // operands without whole 16-byte runs (every case but 132x136x260 at offset 0) unless it
                // packs them; the 16-byte ring takes A along k and B along n in aligned rows, on the tiles
                // built with it; TMA staging is the TMA kernel's only one, for the same layouts in rows of
                // whole 16-byte runs.
                const bool whole_runs = m == 132 && la == Layout::Contiguous && lb == Layout::Contiguous;
                const bool tma = is_tma_kernel(cfg.kernel);
                EXPECT_TRUE(
                    cfg.staging == Staging::CpAsync ||
                    (cfg.staging == Staging::CpAsync16 && (!ring16_ready(p) || !has_ring16(cfg.kernel))) ||
                    (cfg.kernel == Kernel::Simt64x256 && !whole_runs && !cfg.pack) ||
                    tma != (cfg.staging == Staging::Tma) || (tma && (!tma_ready(p) || cfg.pack)));
                EXPECT_FALSE(cfg.staging == Staging::CpAsync16 && whole_runs && !ta && !tb &&
                             has_ring16(cfg.kernel));
                EXPECT_FALSE(cfg.staging == Staging::Tma && tma && whole_runs && !ta && !tb && !cfg.pack);
                continue;
              }
              launch(p, cfg, detail::stream_for(Device::cuda(0)));
              EXPECT_EQ(g.check(), "");
              ErrorStats s;
              double e2 = 0, s2 = 0;
              const MatD cd = to_double(c0);
              const std::vector<float> bv = bias.to_vector<float>();
              // TF32 rounds each operand to 11 bits: bound 2^-10 of the scale instead of K eps.
              const double cf =
                  cfg.math == MathMode::TF32 ? 2.0 * std::ldexp(1.0, -10) / ((k + 2) * FLT_EPSILON) : 1.0;
              accumulate_errors(to_double(g.view()), to_double(a), to_double(bt), &cd, &bv, p.alpha, p.beta,
                                p.act, cf, s, e2, s2);
              EXPECT_EQ(s.n_bad, 0) << s.str();
            }
          }
}

// Every configuration the autotuner may time and keep (tune_candidates on this device) against float64:
// shapes of each class (edge tiles with and without 16-byte runs, a short K, a small-M projection, a vector
// operand), both operands plain or transposed and aligned or at offset 1, alpha/beta with bias and relu,
// beta = 0 over a NaN-filled C; fp32 and TF32 (the TF32 bound for the latter). Guard bands intact.
TEST(Gemm, F32_TuneCandidates_PassTheMatrix) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  int ran = 0;
  for_each_matrix_case(
      {{127, 129, 255}, {132, 136, 260}, {349, 517, 7}, {64, 1536, 768}, {300, 1, 777}}, 61, true,
      Device::cuda(0), [&](const SweepOperands& o, Guarded& g, const Problem& p, const std::string& label) {
        for (MathMode math : {MathMode::FP32, MathMode::TF32}) {
          const double cf =
              math == MathMode::TF32 ? 2.0 * std::ldexp(1.0, -10) / ((o.k + 2) * FLT_EPSILON) : 1.0;
          for (const Config& cfg : tune_candidates(p, math, DeviceModel::current())) {
            SCOPED_TRACE(label + " " + config_name(cfg));
            expect_config_matches(o, g, p, cfg, cf, Device::cuda(0));
            ++ran;
          }
        }
      });
  EXPECT_GT(ran, 5 * 8 * 2 * 2);  // more than one candidate per case on average
}

// The swapped configurations a test runs on p: the dispatcher's pick where it swaps, then one per staging
// and reduction (registers, the 4-byte and 16-byte rings, packed, split K added by the second kernel or in a
// cluster) on the small-M tiles, those that can run p.
std::vector<detail::gemm::Config> swap_configs(const detail::gemm::Problem& p) {
  using namespace detail::gemm;
  std::vector<Config> out;
  const Config pick = choose(p, MathMode::FP32);
  if (pick.swap) out.push_back(pick);
  for (Config c :
       {Config{Kernel::Simt32x128, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync},
        Config{Kernel::Simt32x128, 3, MathMode::FP32, SplitReduce::Kernel, Staging::Registers},
        Config{Kernel::Simt32x64, 4, MathMode::FP32, SplitReduce::Cluster, Staging::CpAsync16},
        Config{Kernel::Simt64x64, 2, MathMode::FP32, SplitReduce::Cluster, Staging::CpAsync},
        Config{Kernel::Simt64x128, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers, true},
        Config{Kernel::Simt128x64, 16, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync}}) {
    c.swap = true;
    if (can_implement(p, c)) out.push_back(c);
  }
  return out;
}

// The transposed product (Config::swap: C^T = B^T A^T on the small-M tiles) for skinny N: the dispatcher's
// swapped pick and swapped tiles of each staging against float64 over edge tiles, a split K, both operands
// plain or transposed, A at offset 1, alpha/beta with relu, beta = 0 over a NaN-filled C, a batch with B
// broadcast, and the batched rule's swapped pick; guard bands intact. A bias (along C's rows) refuses the
// swap, and launch says so.
TEST(Gemm, F32_SwappedProduct_PassesTheMatrix) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const Device d = Device::cuda(0);
  int ran = 0;
  for_each_matrix_case(
      {{300, 20, 777}, {517, 33, 129}, {1000, 17, 2100}, {129, 64, 40}}, 81, false, d,
      [&](const SweepOperands& o, Guarded& g, const Problem& p, const std::string& label) {
        for (const Config& cfg : swap_configs(p)) {
          SCOPED_TRACE(label + " " + config_name(cfg));
          expect_config_matches(o, g, p, cfg, 1.0, d);
          ++ran;
        }
        Problem biased = p;
        biased.bias = o.bias.data<float>();
        const Config swap{
            Kernel::Simt32x128, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync, false, true};
        EXPECT_FALSE(can_implement(biased, swap));
        expect_error<InvalidArgument>([&] { launch(biased, swap, detail::stream_for(d)); },
                                      {"_swapped", "cannot run"});
      });
  EXPECT_GT(ran, 4 * 8 * 2 * 3);
  // A batch of 3 with B broadcast.
  const Tensor a = randn({3, 700, 300}, 82, d), b = randn({300, 24}, 83, d);
  Tensor c = zeros({3, 700, 24}, DType::F32, d);
  Problem p = problem_2d(a.select(0, 0), b, c.select(0, 0));
  p.batch = 3;
  p.a_sb = a.stride(0), p.b_sb = 0, p.c_sb = c.stride(0);
  int batched = 0;
  for (const Config& cfg : swap_configs(p)) {
    SCOPED_TRACE(config_name(cfg));
    c.fill_(std::numeric_limits<double>::quiet_NaN());
    launch(p, cfg, detail::stream_for(d));
    for (std::int64_t i = 0; i < 3; ++i)
      expect_product(to_double(c.select(0, i)), to_double(a.select(0, i)), to_double(b));
    ++batched;
  }
  EXPECT_GT(batched, 0);
  // A batch of small products with a narrow N, which the batched rule runs swapped (9 x 495x87x320 on 32x64
  // tiles over C^T), over a NaN-filled C.
  const Tensor a9 = randn({9, 495, 320}, 84, d), b9 = randn({9, 320, 87}, 85, d);
  Tensor c9 = zeros({9, 495, 87}, DType::F32, d);
  Problem p9 = problem_2d(a9.select(0, 0), b9.select(0, 0), c9.select(0, 0));
  p9.batch = 9;
  p9.a_sb = a9.stride(0), p9.b_sb = b9.stride(0), p9.c_sb = c9.stride(0);
  const Config pick9 = choose(p9, MathMode::FP32);
  EXPECT_TRUE(pick9.swap) << config_name(pick9);
  c9.fill_(std::numeric_limits<double>::quiet_NaN());
  launch(p9, pick9, detail::stream_for(d));
  for (std::int64_t i = 0; i < 9; ++i)
    expect_product(to_double(c9.select(0, i)), to_double(a9.select(0, i)), to_double(b9.select(0, i)));
}

// Splits past 32 (a C of a few tiles over a long K, tiny_c_long_k): the dispatcher's pick and the 32x64 and
// 32x128 tiles split 48 and 64 on the 4-byte ring, 32x64 split 64 on the 16-byte ring where it runs (added by
// the second kernel; 48 leaves a ragged last split), over the matrix of for_each_matrix_case with the bias,
// against float64; guard bands intact.
TEST(Gemm, F32_DeepSplit_PassesTheMatrix) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const Device d = Device::cuda(0);
  int ran = 0;
  for_each_matrix_case(
      {{11, 80, 14832}, {51, 27, 11677}, {3, 17, 9022}}, 91, true, d,
      [&](const SweepOperands& o, Guarded& g, const Problem& p, const std::string& label) {
        std::vector<Config> configs = {choose(p, MathMode::FP32)};
        EXPECT_EQ(configs.front().split_k, 64) << config_name(configs.front());
        for (Kernel kernel : {Kernel::Simt32x64, Kernel::Simt32x128})
          for (int split : {48, 64})
            configs.push_back(Config{kernel, split, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync});
        const Config ring16{Kernel::Simt32x64, 64, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync16};
        if (can_implement(p, ring16)) configs.push_back(ring16);
        for (const Config& cfg : configs) {
          SCOPED_TRACE(label + " " + config_name(cfg));
          expect_config_matches(o, g, p, cfg, 1.0, d);
          ++ran;
        }
      });
  EXPECT_GE(ran, 3 * 8 * 2 * 5);
}

// B along k copied along n first (Config::b_along_n): the dispatcher's pick where it copies (2048 rows), the
// register-staged tiles of 128x128 and over unsplit and split (added by the second kernel and in a cluster)
// and the TMA kernel's 128x64 tile split (which reads B along n only),
// over the matrix of for_each_matrix_case with the bias where B is stored n x k, against float64; guard bands
// intact. Then batches with B per entry and broadcast, and a B along n, which refuses the copy.
TEST(Gemm, F32_BAlongN_PassesTheMatrix) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const Device d = Device::cuda(0);
  auto configs_for = [](const Problem& p) {
    std::vector<Config> out;
    const Config pick = choose(p, MathMode::FP32);
    if (pick.b_along_n) out.push_back(pick);
    for (const Config& c : {Config{Kernel::Simt256x128k16, 1, MathMode::FP32, SplitReduce::Kernel},
                            Config{Kernel::Simt256x128, 3, MathMode::FP32, SplitReduce::Kernel},
                            Config{Kernel::Simt128x128k16, 2, MathMode::FP32, SplitReduce::Cluster},
                            Config{Kernel::Simt128x128x2, 4, MathMode::FP32, SplitReduce::Kernel},
                            Config{Kernel::Simt64x256, 1, MathMode::FP32, SplitReduce::Kernel},
                            Config{Kernel::SimtTma128x64, 2, MathMode::FP32, SplitReduce::Kernel,
                                   Staging::Tma}}) {
      Config bn = c;
      bn.b_along_n = true;
      if (can_implement(p, bn)) out.push_back(bn);
    }
    return out;
  };
  int ran = 0, picked = 0;
  for_each_matrix_case(
      {{127, 129, 255}, {300, 517, 64}, {2048, 264, 520}}, 93, true, d,
      [&](const SweepOperands& o, Guarded& g, const Problem& p, const std::string& label) {
        const std::vector<Config> configs = configs_for(p);
        if (!b_repackable(p)) {
          EXPECT_TRUE(configs.empty()) << label;
          return;
        }
        if (p.m >= kBAlongNMinRows) {
          EXPECT_TRUE(choose(p, MathMode::FP32).b_along_n) << label;
          ++picked;
        }
        for (const Config& cfg : configs) {
          SCOPED_TRACE(label + " " + config_name(cfg));
          expect_config_matches(o, g, p, cfg, 1.0, d);
          ++ran;
        }
      });
  // 3 shapes x trans_a x both betas (B stored n x k, A in place), 3 configurations or more each.
  EXPECT_GE(ran, 3 * 2 * 2 * 3);
  EXPECT_GT(picked, 0);
  // Batches of 3 over B stored n x k, per entry and broadcast, over a NaN-filled C.
  const Tensor a = randn({3, 300, 260}, 94, d), bt = randn({3, 136, 260}, 95, d);
  Tensor c = zeros({3, 300, 136}, DType::F32, d);
  for (bool broadcast : {false, true}) {
    Problem p = problem_2d(a.select(0, 0), bt.select(0, 0).t(), c.select(0, 0));
    p.batch = 3;
    p.a_sb = a.stride(0), p.b_sb = broadcast ? 0 : bt.stride(0), p.c_sb = c.stride(0);
    const std::vector<Config> configs = configs_for(p);
    EXPECT_GE(configs.size(), 3u);
    for (const Config& cfg : configs) {
      SCOPED_TRACE(config_name(cfg) + (broadcast ? " B broadcast" : ""));
      c.fill_(std::numeric_limits<double>::quiet_NaN());
      launch(p, cfg, detail::stream_for(d));
      for (std::int64_t i = 0; i < 3; ++i)
        expect_product(to_double(c.select(0, i)), to_double(a.select(0, i)),
                       to_double(bt.select(0, broadcast ? 0 : i).t()));
    }
  }
  // B along n: nothing to copy; the configuration cannot run, and launching it says so.
  Problem along_n = problem_2d(a.select(0, 0), randn({260, 136}, 96, d), c.select(0, 0));
  Config bn{Kernel::Simt128x128x2, 1, MathMode::FP32, SplitReduce::Kernel};
  bn.b_along_n = true;
  EXPECT_FALSE(can_implement(along_n, bn));
  expect_error<InvalidArgument>([&] { launch(along_n, bn, detail::stream_for(d)); }, {"_bn", "cannot run"});
}

// GemmOptions::tune: the first call times the shortlist and records the winner in the file
// ($MT_GEMM_TUNE_FILE), the result is the product either way, a second call takes the recorded choice (the
// same bits); inside a CUDA graph capture the dispatcher's pick is returned and nothing is recorded.
TEST(Gemm, F32_Tune_OptionRecordsTheWinner) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const std::string path =
      std::filesystem::temp_directory_path() / ("mt_gemm_tune_test_" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(path);
  ::setenv("MT_GEMM_TUNE_FILE", path.c_str(), 1);  // read when the process's cache is first made: here
  const Device d = Device::cuda(0);
  for (const auto& [m, n, k] : {std::array<std::int64_t, 3>{349, 517, 7}, {64, 1536, 768}}) {
    const Tensor a = randn({m, k}, 71, d), b = randn({k, n}, 72, d);
    Tensor c1 = zeros({m, n}, DType::F32, d), c2 = zeros({m, n}, DType::F32, d);
    GemmOptions o;
    o.tune = true;
    gemm(a, b, c1, false, false, o);
    expect_product(to_double(c1), to_double(a), to_double(b));
    gemm(a, b, c2, false, false, o);
    EXPECT_EQ(c1.cpu().to_vector<float>(), c2.cpu().to_vector<float>());
    Problem p = problem_2d(a, b, c1);
    TuneCache file(path, TuneDevice::current());
    const std::optional<Config> rec = file.find(tune_key(p, MathMode::FP32));
    ASSERT_TRUE(rec) << path;
    EXPECT_TRUE(can_implement(p, *rec));
    EXPECT_EQ(file.warnings(), 0);
  }
  // Inside a capture: the dispatcher's pick, nothing timed or recorded.
  const Tensor a = randn({200, 9}, 73, d), b = randn({9, 300}, 74, d);
  Tensor c = zeros({200, 300}, DType::F32, d);
  const Problem p = problem_2d(a, b, c);
  const Stream stream(0);  // a stream of its own (the legacy default stream cannot be captured)
  const StreamGuard on_stream(stream, 0);
  MT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Config got = tuned_choice(p, MathMode::FP32, stream);
  cudaGraph_t graph = nullptr;
  MT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  if (graph) MT_CUDA_CHECK(cudaGraphDestroy(graph));
  EXPECT_EQ(config_name(got), config_name(choose(p, MathMode::FP32)));
  EXPECT_FALSE(TuneCache(path, TuneDevice::current()).find(tune_key(p, MathMode::FP32)));
  std::filesystem::remove(path);
}

// C in rows without float4 runs (a view at offset 1 into rows of n + 3) and C transposed (rows of stride 1)
// through every SIMT kernel, unsplit (the compact epilogue's scalar stores on interior tiles) and split, with
// B aligned or not (the cp.async ring's scalar-B variant). 300x260x40 leaves interior and edge tiles for
// every tile size. The columns around the view must stay untouched; beta = 0 must not read the NaN-filled C.
TEST(Gemm, F32_EveryKernel_COddRowsAndTransposed) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const std::int64_t m = 300, n = 260, k = 40;
  const Tensor a = test::make_input(InputSpec{Shape{m, k}}, 11, Device::cuda(0));
  const Tensor bias = test::make_input(InputSpec{Shape{n}}, 13, Device::cuda(0));
  const Tensor c0 = test::make_input(InputSpec{Shape{m, n}}, 14, Device::cuda(0));
  const MatD cd = to_double(c0);
  const std::vector<float> bv = bias.to_vector<float>();
  struct Epi {
    float beta;
    Activation act;
    bool bias;
  };
  const Epi epis[] = {{0.f, Activation::None, false},
                      {1.f, Activation::Relu, true},
                      {-1.5f, Activation::Gelu, true},
                      {0.5f, Activation::GeluTanh, true}};
  std::vector<Config> configs;
  for (Kernel kern : simt_kernels())
    for (Staging st : {Staging::Registers, Staging::CpAsync, Staging::CpAsync16, Staging::Tma})
      for (int split : {1, 3})
        for (SplitReduce r : {SplitReduce::Cluster, SplitReduce::Kernel})
          if (split > 1 || r == SplitReduce::Cluster) configs.push_back({kern, split, MathMode::FP32, r, st});
  // B aligned (the float4 loaders) or at offset 1 (the ring's scalar-B variant, built for one block per SM).
  for (Layout lb : {Layout::Contiguous, Layout::Offset1}) {
    const Tensor b = test::make_input(InputSpec{Shape{k, n}, lb}, 12, Device::cuda(0));
    for (const Config& cfg : configs)
      for (bool transposed : {false, true})
        for (const Epi& e : epis) {
          SCOPED_TRACE(config_name(cfg) + " b=" + test::layout_name(lb) +
                       (transposed ? " C transposed" : " C in rows of n + 3, offset 1") +
                       " beta=" + std::to_string(e.beta) + " act=" + std::to_string(static_cast<int>(e.act)));
          // Rows of n + 3 with the view at column 1, or C = (n x m)^T.
          Guarded g(transposed ? Shape{n, m} : Shape{m, n + 3}, DType::F32, Device::cuda(0));
          g.view().fill_(7.25);
          Tensor c = transposed ? g.view().t() : g.view().narrow(1, 1, n);
          if (e.beta != 0.f)
            c.copy_(c0);
          else
            c.fill_(std::numeric_limits<double>::quiet_NaN());
          Problem p = problem_2d(a, b, c);
          p.bias = e.bias ? bias.data<float>() : nullptr;
          p.alpha = -1.5f, p.beta = e.beta, p.act = e.act;
          if (!can_implement(p, cfg)) {
            // A tile built without the 4-byte ring, the whole-run tile with B at offset 1, the 16-byte
            // ring with B at offset 1 or on a tile built without it, TMA staging on another kernel (or
            // another staging on the TMA kernel), or TMA with B at offset 1.
            const bool tma = is_tma_kernel(cfg.kernel);
            EXPECT_TRUE(
                cfg.staging == Staging::CpAsync ||
                (cfg.staging == Staging::CpAsync16 && (lb == Layout::Offset1 || !has_ring16(cfg.kernel))) ||
                (cfg.kernel == Kernel::Simt64x256 && lb == Layout::Offset1) ||
                tma != (cfg.staging == Staging::Tma) || (tma && lb == Layout::Offset1));
            continue;
          }
          launch(p, cfg, detail::stream_for(Device::cuda(0)));
          EXPECT_EQ(g.check(), "");
          if (!transposed) {
            const MatD wide = to_double(g.view());
            for (Eigen::Index i = 0; i < m; ++i)
              for (Eigen::Index j : {Eigen::Index{0}, Eigen::Index{n + 1}, Eigen::Index{n + 2}})
                ASSERT_EQ(wide(i, j), 7.25) << "column " << j << " of row " << i << " outside C was written";
          }
          ErrorStats s;
          double e2 = 0, s2 = 0;
          accumulate_errors(to_double(c), to_double(a), to_double(b), &cd, e.bias ? &bv : nullptr, p.alpha,
                            p.beta, p.act, 1.0, s, e2, s2);
          EXPECT_EQ(s.n_bad, 0) << s.str();
        }
  }
}

// The 256x128x8 tile's ROWS_C kernels (C in contiguous rows that are not 16-byte aligned: float4 stores of
// values shifted across lanes): C a view at column offset 1 or 2 in rows of n + 1 or n + 2, so the rows start
// at every misalignment, in a batch of 3 whose entries start at different ones too; edge tiles along m and n;
// B in odd rows (the scalar-run loaders); beta 0 over NaN and beta 1 with a bias and relu. The columns beside
// C must stay untouched. (Rows of n + 3 at offset 1 with B aligned, the whole-run loaders: the test above.)
TEST(Gemm, F32_RowsC_EveryAlignment_Batched) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const std::int64_t batch = 3, m = 259, n = 261, k = 40;
  const Tensor a = test::make_input(InputSpec{Shape{batch, m, k}}, 31, Device::cuda(0));
  const Tensor b = test::make_input(InputSpec{Shape{k, n}}, 32, Device::cuda(0));
  const Tensor bias = test::make_input(InputSpec{Shape{n}}, 33, Device::cuda(0));
  const Tensor c0 = test::make_input(InputSpec{Shape{batch, m, n}}, 34, Device::cuda(0));
  const std::vector<float> bv = bias.to_vector<float>();
  const Config cfg{Kernel::Simt256x128, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers};
  for (std::int64_t pad = 1; pad <= 2; ++pad)
    for (std::int64_t off = 1; off <= pad; ++off)
      for (float beta : {0.f, 1.f}) {
        SCOPED_TRACE(config_name(cfg) + " rows of n + " + std::to_string(pad) + ", offset " +
                     std::to_string(off) + ", beta " + std::to_string(beta));
        Guarded g(Shape{batch, m, n + pad}, DType::F32, Device::cuda(0));
        g.view().fill_(7.25);
        Tensor c = g.view().narrow(2, off, n);
        if (beta != 0.f)
          c.copy_(c0);
        else
          c.fill_(std::numeric_limits<double>::quiet_NaN());
        Problem p = problem_2d(a.select(0, 0), b, c.select(0, 0));
        p.batch = static_cast<int>(batch);
        p.a_sb = a.stride(0), p.b_sb = 0, p.c_sb = c.stride(0);
        p.alpha = -1.5f, p.beta = beta;
        if (beta != 0.f) p.bias = bias.data<float>(), p.act = Activation::Relu;
        ASSERT_NE(p.c_sm % 4, 0);  // rows not 16-byte aligned: the ROWS_C kernels
        ASSERT_TRUE(can_implement(p, cfg));
        launch(p, cfg, detail::stream_for(Device::cuda(0)));
        EXPECT_EQ(g.check(), "");
        for (std::int64_t e = 0; e < batch; ++e) {
          const MatD wide = to_double(g.view().select(0, e));
          for (Eigen::Index i = 0; i < m; ++i)
            for (Eigen::Index j = 0; j < n + pad; ++j)
              if (j < off || j >= off + n) {
                ASSERT_EQ(wide(i, j), 7.25)
                    << "column " << j << " of row " << i << " of entry " << e << " outside C was written";
              }
        }
        expect_entries_match(c, a, b, c0, beta != 0.f ? &bv : nullptr, p);
      }
}

// The tiles built with lane loaders (Staging::CpAsync unsplit: LaneLoaderK / X) and the layouts each takes
// them in: the 256x128 and 32x128 tiles A along k and B along n only, the 64x64 and 32x64 tiles every
// layout of operands contiguous along one dimension (A along k or m, B along n or k; lanes_layout).
struct LaneTile {
  detail::gemm::Kernel kernel;
  bool every_layout;
};
constexpr LaneTile kLaneTiles[] = {{detail::gemm::Kernel::Simt256x128, false},
                                   {detail::gemm::Kernel::Simt32x128, false},
                                   {detail::gemm::Kernel::Simt64x64, true},
                                   {detail::gemm::Kernel::Simt32x64, true}};

// The lane-loader ring on every tile and layout built with it, at every edge it handles: K below one tile, K
// ending inside a tile, fewer tiles than ring slots; edge tiles along m and n whose outside rows and columns
// read the tile before them (m0, n0 >= the tile) or the last row and column (a single tile), among them
// one-row and one-column tiles; operands at offset 1 in odd rows, or transposed (odd leading dimensions);
// C in rows with float4 runs (n % 4 == 0) or without (store_rows); a batch of 2 with B broadcast; beta 0
// over a NaN-filled C, or beta -1.5 with a bias and relu.
TEST(Gemm, F32_LaneRing_EdgesAndKTails) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const Device d = Device::cuda(0);
  struct Case {
    std::int64_t m, n, k;
    Layout layout;
    int batch;
  };
  const Case cases[] = {{1, 1, 1, Layout::Offset1, 1},         {1, 129, 9, Layout::Offset1, 1},
                        {255, 1, 8, Layout::Contiguous, 1},    {257, 129, 1, Layout::Offset1, 1},
                        {300, 257, 7, Layout::Offset1, 2},     {513, 385, 23, Layout::Offset1, 1},
                        {511, 129, 17, Layout::Contiguous, 2}, {260, 132, 31, Layout::Offset1, 1},
                        {260, 132, 48, Layout::Contiguous, 1}, {767, 641, 100, Layout::Offset1, 1}};
  for (const LaneTile& tile : kLaneTiles)
    for (const int lanes : {0, 1, 2, 3}) {
      if (lanes != 0 && !tile.every_layout) continue;
      const Config cfg{tile.kernel, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync};
      for (const Case& t : cases)
        for (float beta : {0.f, -1.5f}) {
          SCOPED_TRACE(std::string(kernel_name(tile.kernel)) + " lanes layout " + std::to_string(lanes) +
                       " " + std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k) +
                       " batch " + std::to_string(t.batch) + " " + test::layout_name(t.layout) + " beta " +
                       std::to_string(beta));
          const Layout la = lanes & 1 ? Layout::Transposed : t.layout;
          const Layout lb = lanes & 2 ? Layout::Transposed : t.layout;
          const Tensor a = test::make_input(InputSpec{Shape{t.batch, t.m, t.k}, la}, 91, d);
          const Tensor b = test::make_input(InputSpec{Shape{t.k, t.n}, lb}, 92, d);
          const Tensor bias = test::make_input(InputSpec{Shape{t.n}}, 93, d);
          const Tensor c0 = test::make_input(InputSpec{Shape{t.batch, t.m, t.n}}, 94, d);
          Guarded g(Shape{t.batch, t.m, t.n}, DType::F32, d);  // NaN-filled
          if (beta != 0.f) g.view().copy_(c0);
          Problem p = problem_2d(a.select(0, 0), b, g.view().select(0, 0));
          p.batch = t.batch;
          p.a_sb = a.stride(0), p.b_sb = 0, p.c_sb = g.view().stride(0);
          p.alpha = -1.5f, p.beta = beta;
          if (beta != 0.f) p.bias = bias.data<float>(), p.act = Activation::Relu;
          // A one-row or one-column operand has unit strides along both dimensions and reads as the plain
          // layout.
          if (t.m > 1 && t.n > 1 && t.k > 1) {
            ASSERT_EQ(lanes_layout(p), lanes);
          }
          ASSERT_TRUE(can_implement(p, cfg));
          launch(p, cfg, detail::stream_for(d));
          EXPECT_EQ(g.check(), "");
          const std::vector<float> bv = bias.to_vector<float>();
          expect_entries_match(g.view(), a, b, c0, beta != 0.f ? &bv : nullptr, p);
        }
    }
}

// An Inf in A's last row and a NaN in B's last column, both read in the tile that holds the end of K, reach
// only that row and column of C through the lane-loader ring, on every tile and layout built with it: the
// rows and columns the edge tiles read from inside the matrix in place of the outside ones, and the zeros
// past K, carry them nowhere else.
TEST(Gemm, F32_LaneRing_NonFiniteStayInTheirRowAndColumn) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const Device d = Device::cuda(0);
  const std::int64_t m = 513, n = 257, k = 21;
  for (const LaneTile& tile : kLaneTiles)
    for (const int lanes : {0, 1, 2, 3}) {
      if (lanes != 0 && !tile.every_layout) continue;
      SCOPED_TRACE(std::string(kernel_name(tile.kernel)) + " lanes layout " + std::to_string(lanes));
      const Config cfg{tile.kernel, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync};
      Tensor a =
          test::make_input(InputSpec{Shape{m, k}, lanes & 1 ? Layout::Transposed : Layout::Offset1}, 95, d);
      Tensor b =
          test::make_input(InputSpec{Shape{k, n}, lanes & 2 ? Layout::Transposed : Layout::Offset1}, 96, d);
      a.narrow(0, m - 1, 1).narrow(1, k - 2, 1).fill_(std::numeric_limits<double>::infinity());
      b.narrow(0, k - 1, 1).narrow(1, n - 1, 1).fill_(std::numeric_limits<double>::quiet_NaN());
      Guarded g(Shape{m, n}, DType::F32, d);
      Problem p = problem_2d(a, b, g.view());
      ASSERT_EQ(lanes_layout(p), lanes);
      ASSERT_TRUE(can_implement(p, cfg));
      launch(p, cfg, detail::stream_for(d));
      EXPECT_EQ(g.check(), "");
      const MatD got = to_double(g.view());
      for (Eigen::Index j = 0; j < n; ++j) EXPECT_FALSE(std::isfinite(got(m - 1, j))) << "row " << m - 1;
      for (Eigen::Index i = 0; i < m; ++i) EXPECT_TRUE(std::isnan(got(i, n - 1))) << "row " << i;
      // The rest against float64 over the finite part of the operands.
      const MatD ad = to_double(a).topRows(m - 1), bd = to_double(b).leftCols(n - 1);
      ErrorStats s;
      double e2 = 0, s2 = 0;
      accumulate_errors(MatD(got.topLeftCorner(m - 1, n - 1)), ad, bd, nullptr, nullptr, 1.f, 0.f,
                        Activation::None, 1.0, s, e2, s2);
      EXPECT_EQ(s.n_bad, 0) << s.str();
    }
}

// The 16-byte cp.async ring (Staging::CpAsync16) on every tile built with it: K odd inside 16-byte aligned
// rows (A the first 257 of 260 columns, so each row's last run copies 1 float and zero-fills 3), splits
// whose k ranges start inside the matrix, a batch of 2 with B broadcast, and beta = 0 over a NaN-filled C.
// A in rows that are not 16-byte aligned, or transposed, is refused.
TEST(Gemm, F32_Ring16_OddKInAlignedRows) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const std::int64_t batch = 2, m = 70, n = 132, k = 257;
  const Tensor a_rows = test::make_input(InputSpec{Shape{batch, m, 260}}, 21, Device::cuda(0));
  const Tensor a = a_rows.narrow(2, 0, k);
  const Tensor b = test::make_input(InputSpec{Shape{k, n}}, 22, Device::cuda(0));
  int ran = 0;
  for (Kernel kern : simt_kernels()) {
    if (!has_ring16(kern)) continue;
    for (int split : {1, 3})
      for (SplitReduce r : {SplitReduce::Kernel, SplitReduce::Cluster}) {
        const Config cfg{kern, split, MathMode::FP32, r, Staging::CpAsync16};
        SCOPED_TRACE(config_name(cfg));
        Guarded g(Shape{batch, m, n}, DType::F32, Device::cuda(0));
        g.view().fill_(std::numeric_limits<double>::quiet_NaN());
        Problem p = problem_2d(a.select(0, 0), b, g.view().select(0, 0));
        p.batch = static_cast<int>(batch);
        p.a_sb = a.stride(0), p.b_sb = 0, p.c_sb = g.view().stride(0);
        ASSERT_TRUE(can_implement(p, cfg));
        launch(p, cfg, detail::stream_for(Device::cuda(0)));
        EXPECT_EQ(g.check(), "");
        for (std::int64_t e = 0; e < batch; ++e)
          expect_product(to_double(g.view().select(0, e)), to_double(a.select(0, e)), to_double(b),
                         "batch entry " + std::to_string(e) + ": ");
        ++ran;
      }
  }
  EXPECT_GT(ran, 0);
  // One row of 6 (any row stride does for m = 1), whose last run ends 8 bytes before a 16-byte boundary at
  // the end of its allocation: the partial run is copied element by element (compute-sanitizer reports any
  // read past the allocation).
  {
    const Tensor row = test::make_input(InputSpec{Shape{1, 6}}, 25, Device::cuda(0));
    const Tensor b6 = test::make_input(InputSpec{Shape{6, 132}}, 26, Device::cuda(0));
    Guarded g(Shape{1, 132}, DType::F32, Device::cuda(0));
    const Problem p = problem_2d(row, b6, g.view());
    const Config cfg{Kernel::Simt32x64, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync16};
    ASSERT_TRUE(can_implement(p, cfg));
    launch(p, cfg, detail::stream_for(Device::cuda(0)));
    EXPECT_EQ(g.check(), "");
    expect_product(to_double(g.view()), to_double(row), to_double(b6));
  }
  // Rows of 257 (not 16-byte aligned), A transposed: refused, with a message naming the ring.
  const Tensor a_odd = test::make_input(InputSpec{Shape{m, k}}, 23, Device::cuda(0));
  const Tensor a_t = test::make_input(InputSpec{Shape{k, m}}, 24, Device::cuda(0)).t();
  Tensor c = empty({m, n}, DType::F32, Device::cuda(0));
  const Config cfg{Kernel::Simt32x128, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync16};
  EXPECT_EQ(config_name(cfg), "simt_32x128x8_w32x32_t8x4_s4_cpasync16");
  for (const Tensor& bad : {a_odd, a_t}) {
    const Problem p = problem_2d(bad, b, c);
    EXPECT_FALSE(ring16_ready(p));
    EXPECT_FALSE(can_implement(p, cfg));
    expect_error<InvalidArgument>([&] { launch(p, cfg, detail::stream_for(Device::cuda(0))); },
                                  {"simt_32x128x8_w32x32_t8x4_s4_cpasync16", "cannot run"});
  }
  // The tiles built without it refuse it for any problem.
  EXPECT_FALSE(can_implement(
      problem_2d(a.select(0, 0), b, c),
      Config{Kernel::Simt256x128k16, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync16}));
}

// The TMA-fed kernels (Kernel::SimtTma*, Staging::Tma) at awkward shapes: a single row and a single k, K
// neither a multiple of the 32-deep tile nor of 4 (A the first columns of wider aligned rows: the TMA box
// reads zeros past K), edge tiles along m and n, N under the 64-wide tile, M and N just over a 64-row and a
// 256-column tile; unsplit, split in a cluster (2, 3 and 8 splits, some with empty k ranges) and through the
// second kernel; beta = 0 over a NaN-filled C with bias and gelu, beta = -1.5 with relu. Guard bands around
// C stay untouched.
TEST(Gemm, F32_Tma_AwkwardShapes) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  struct Shape3 {
    std::int64_t m, n, k, lda;
  };
  const Shape3 shapes[] = {{1, 4, 1, 4},          {5, 12, 7, 8},        {129, 68, 255, 260},
                           {300, 64, 1000, 1000}, {1000, 40, 520, 520}, {257, 132, 33, 36},
                           {65, 300, 200, 200}};
  const Kernel kernels[] = {Kernel::SimtTma128x64, Kernel::SimtTma64x128};
  int ran = 0;
  for (const Shape3& s : shapes) {
    const Tensor a_rows = test::make_input(InputSpec{Shape{s.m, s.lda}}, 41, Device::cuda(0));
    const Tensor a = a_rows.narrow(1, 0, s.k);
    const Tensor b = test::make_input(InputSpec{Shape{s.k, s.n}}, 42, Device::cuda(0));
    const Tensor bias = test::make_input(InputSpec{Shape{s.n}}, 43, Device::cuda(0));
    const Tensor c0 = test::make_input(InputSpec{Shape{s.m, s.n}}, 44, Device::cuda(0));
    const MatD ad = to_double(a), bd = to_double(b), cd = to_double(c0);
    const std::vector<float> bv = bias.to_vector<float>();
    for (int split : {1, 2, 3, 8})
      for (SplitReduce r : {SplitReduce::Cluster, SplitReduce::Kernel}) {
        if (split == 1 && r == SplitReduce::Kernel) continue;
        if (split == 8 && r == SplitReduce::Kernel) continue;
        for (float beta : {0.f, -1.5f})
          for (Kernel kernel : kernels) {
            const Config cfg{kernel, split, MathMode::FP32, r, Staging::Tma};
            SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " " +
                         config_name(cfg) + " beta " + std::to_string(beta));
            Guarded g(Shape{s.m, s.n}, DType::F32, Device::cuda(0));
            if (beta != 0.f)
              g.view().copy_(c0);
            else
              g.view().fill_(std::numeric_limits<double>::quiet_NaN());
            Problem p = problem_2d(a, b, g.view());
            p.bias = bias.data<float>();
            p.alpha = 0.75f, p.beta = beta, p.act = beta != 0.f ? Activation::Relu : Activation::Gelu;
            ASSERT_TRUE(tma_ready(p));
            ASSERT_TRUE(can_implement(p, cfg));
            launch(p, cfg, detail::stream_for(Device::cuda(0)));
            EXPECT_EQ(g.check(), "");
            ErrorStats st;
            double e2 = 0, s2 = 0;
            accumulate_errors(to_double(g.view()), ad, bd, &cd, &bv, p.alpha, p.beta, p.act, 1.0, st, e2, s2);
            EXPECT_EQ(st.n_bad, 0) << st.str();
            ++ran;
          }
      }
  }
  EXPECT_EQ(ran, 7 * 6 * 2 * 2);  // shapes x (unsplit, 2 and 3 either way, 8 in a cluster) x beta x kernel
}

// The short-K kernels, launched directly: K = 1, 2, 7, 16, 17, 31, 64, 65, 127 (one round of 16 or 32,
// several, a partial last one); M and N prime (edge tiles both ways); A and B each plain, transposed, at
// offset 1 or strided (every loader order, no 16-byte runs); C in aligned rows (float4 stores) and in odd
// rows at offset 1 (scalar stores); beta = -1.5 with bias and relu, beta = 0 over a NaN-filled C with gelu;
// then batched with B broadcast, and through the dispatcher (the rows kernel for a short K over a large C
// without float4 rows in fp32, the short-K tiles elsewhere) and in a TF32 mode (the tuner's candidates).
// Guard bands intact.
TEST(Gemm, F32_SmallK_AwkwardShapes) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const Device d = Device::cuda(0);
  const std::int64_t mn[][2] = {{37, 131}, {257, 127}, {2, 3}};
  int ran = 0;
  for (const auto& s : mn)
    for (std::int64_t k : {1, 2, 7, 16, 17, 31, 64, 65, 127})
      for (int layout = 0; layout < 4; ++layout) {
        const std::int64_t m = s[0], n = s[1];
        // 0: plain; 1: both transposed; 2: offset 1; 3: strided (stride 2 along k for A, along n for B).
        const bool trans = layout == 1;
        const Layout l = layout == 2 ? Layout::Offset1 : layout == 3 ? Layout::Strided : Layout::Contiguous;
        const Tensor a0 = test::make_input(InputSpec{trans ? Shape{k, m} : Shape{m, k}, l}, 51, d);
        const Tensor b0 = test::make_input(InputSpec{trans ? Shape{n, k} : Shape{k, n}, l}, 52, d);
        const Tensor a = trans ? a0.t() : a0, b = trans ? b0.t() : b0;
        const Tensor bias = test::make_input(InputSpec{Shape{n}}, 53, d);
        const Tensor c0 = test::make_input(InputSpec{Shape{m, n}}, 54, d);
        const MatD ad = to_double(a), bd = to_double(b), cd = to_double(c0);
        const std::vector<float> bv = bias.to_vector<float>();
        for (bool odd_c : {false, true})
          for (float beta : {0.f, -1.5f})
            for (Kernel kernel : small_k_kernels()) {
              const Config cfg{kernel, 1, MathMode::FP32};
              SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " +
                           config_name(cfg) + " layout " + std::to_string(layout) + " odd_c " +
                           std::to_string(odd_c) + " beta " + std::to_string(beta));
              // C: its own buffer, or a view at offset 1 into rows of n + 3 (columns around it guarded).
              Guarded g(Shape{m, odd_c ? n + 3 : n}, DType::F32, d);
              g.view().fill_(std::numeric_limits<double>::quiet_NaN());
              Tensor c = odd_c ? g.view().narrow(1, 1, n) : g.view();
              if (beta != 0.f) c.copy_(c0);
              Problem p = problem_2d(a, b, c);
              p.bias = bias.data<float>();
              p.alpha = 0.75f, p.beta = beta, p.act = beta != 0.f ? Activation::Relu : Activation::Gelu;
              ASSERT_TRUE(can_implement(p, cfg));
              launch(p, cfg, detail::stream_for(d));
              EXPECT_EQ(g.check(), "");
              ErrorStats st;
              double e2 = 0, s2 = 0;
              accumulate_errors(to_double(c), ad, bd, &cd, &bv, p.alpha, p.beta, p.act, 1.0, st, e2, s2);
              EXPECT_EQ(st.n_bad, 0) << st.str();
              if (odd_c) {  // the columns beside the view are untouched (still NaN)
                const std::vector<float> row = g.view().select(0, 0).cpu().to_vector<float>();
                EXPECT_TRUE(std::isnan(row[0]) && std::isnan(row[static_cast<size_t>(n) + 1]));
              }
              ++ran;
            }
      }
  EXPECT_EQ(ran, 3 * 9 * 4 * 2 * 2 * static_cast<int>(small_k_kernels().size()));
  // A batch with B broadcast (a 3-D a times a 2-D b as one batched launch), and the same through gemm().
  for (Kernel kernel : small_k_kernels()) {
    const Tensor a = randn({5, 67, 9}, 55, d), b = randn({9, 131}, 56, d);
    Tensor c = zeros({5, 67, 131}, DType::F32, d);
    c.fill_(std::numeric_limits<double>::quiet_NaN());
    Problem p;
    p.m = 67, p.n = 131, p.k = 9, p.batch = 5;
    p.a = a.data<float>(), p.a_sm = 9, p.a_sk = 1, p.a_sb = 67 * 9;
    p.b = b.data<float>(), p.b_sk = 131, p.b_sn = 1, p.b_sb = 0;
    p.c = c.data<float>(), p.c_sm = 131, p.c_sn = 1, p.c_sb = 67 * 131;
    launch(p, Config{kernel, 1, MathMode::FP32}, detail::stream_for(d));
    for (std::int64_t e : {0, 2, 4})
      expect_product(to_double(c.select(0, e)), to_double(a.select(0, e)), to_double(b),
                     std::string(kernel_name(kernel)) + " entry " + std::to_string(e) + ": ");
  }
  for (std::int64_t k : {1, 7, 64}) {
    run_gemm_case(GemmCase(349, 1001, k), d);
    GemmCase t(300, 257, k, true, true);
    t.alpha = -1.f, t.beta = 0.5f, t.bias = true, t.act = Activation::GeluTanh;
    run_gemm_case(t, d);
    // TF32x3 without a whole 128x128 tile runs the fp32 picks: the fp32 bound holds.
    GemmCase x3(127, 131, k);
    x3.math = MathMode::TF32x3;
    run_gemm_case(x3, d);
    // In a TF32 mode (the tuner's candidates) they compute in fp32 as well.
    for (Kernel kernel : small_k_kernels()) {
      const Tensor a = randn({129, k}, 57, d), b = randn({k, 131}, 58, d);
      Tensor c = zeros({129, 131}, DType::F32, d);
      const Config cfg{kernel, 1, MathMode::TF32};
      Problem p = problem_2d(a, b, c);
      ASSERT_TRUE(can_implement(p, cfg));
      launch(p, cfg, detail::stream_for(d));
      expect_product(to_double(c), to_double(a), to_double(b), config_name(cfg) + ": ");
    }
  }
}

// The TMA kernels over a batch (the tensor maps' third dimension): A's entries in padded rows a padded batch
// stride apart with B broadcast, then A broadcast with B's entries contiguous; edge tiles along m and n, a K
// that is no multiple of the 32-deep tile; unsplit, split 2 in a cluster and split 3 through the second
// kernel; beta = -1.5 with bias and relu, beta = 0 over a NaN-filled C with gelu. Every entry against
// float64, guard bands intact.
TEST(Gemm, F32_Tma_Batched) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const std::int64_t batch = 3, m = 300, n = 260, k = 100;
  const Device d = Device::cuda(0);
  // Rows of k + 4 floats, entries (m + 4) rows apart.
  const Tensor a3 =
      test::make_input(InputSpec{Shape{batch, m + 4, k + 4}}, 61, d).narrow(1, 0, m).narrow(2, 0, k);
  const Tensor a2 = test::make_input(InputSpec{Shape{m, k}}, 62, d);
  const Tensor b3 = test::make_input(InputSpec{Shape{batch, k, n}}, 63, d);
  const Tensor b2 = test::make_input(InputSpec{Shape{k, n}}, 64, d);
  const Tensor bias = test::make_input(InputSpec{Shape{n}}, 65, d);
  const Tensor c0 = test::make_input(InputSpec{Shape{batch, m, n}}, 66, d);
  const std::vector<float> bv = bias.to_vector<float>();
  struct Operands {
    const char* name;
    Tensor a, b;  // a 2-D one is broadcast
  };
  const Operands cases[] = {{"A batched, B broadcast", a3, b2}, {"A broadcast, B batched", a2, b3}};
  const std::pair<int, SplitReduce> splits[] = {
      {1, SplitReduce::Kernel}, {2, SplitReduce::Cluster}, {3, SplitReduce::Kernel}};
  int ran = 0;
  for (const Operands& o : cases)
    for (Kernel kernel : simt_kernels()) {
      if (!is_tma_kernel(kernel)) continue;
      for (const auto& [split, reduce] : splits)
        for (float beta : {0.f, -1.5f}) {
          const Config cfg{kernel, split, MathMode::FP32, reduce, Staging::Tma};
          SCOPED_TRACE(std::string(o.name) + " " + config_name(cfg) + " beta " + std::to_string(beta));
          Guarded g(Shape{batch, m, n}, DType::F32, d);
          if (beta != 0.f)
            g.view().copy_(c0);
          else
            g.view().fill_(std::numeric_limits<double>::quiet_NaN());
          const bool a_batched = o.a.dim() == 3, b_batched = o.b.dim() == 3;
          Problem p;
          p.m = m, p.n = n, p.k = k, p.batch = batch;
          p.a = o.a.data<float>(), p.a_sb = a_batched ? o.a.stride(0) : 0;
          p.a_sm = o.a.stride(a_batched ? 1 : 0), p.a_sk = o.a.stride(a_batched ? 2 : 1);
          p.b = o.b.data<float>(), p.b_sb = b_batched ? o.b.stride(0) : 0;
          p.b_sk = o.b.stride(b_batched ? 1 : 0), p.b_sn = o.b.stride(b_batched ? 2 : 1);
          p.c = g.view().data<float>(), p.c_sm = g.view().stride(1), p.c_sn = g.view().stride(2);
          p.c_sb = g.view().stride(0);
          p.bias = bias.data<float>();
          p.alpha = 0.75f, p.beta = beta, p.act = beta != 0.f ? Activation::Relu : Activation::Gelu;
          ASSERT_TRUE(tma_ready(p));
          ASSERT_TRUE(can_implement(p, cfg));
          launch(p, cfg, detail::stream_for(d));
          EXPECT_EQ(g.check(), "");
          for (std::int64_t e = 0; e < batch; ++e) {
            const MatD cd = to_double(c0.select(0, e));
            ErrorStats st;
            double e2 = 0, s2 = 0;
            accumulate_errors(to_double(g.view().select(0, e)), to_double(a_batched ? o.a.select(0, e) : o.a),
                              to_double(b_batched ? o.b.select(0, e) : o.b), &cd, &bv, p.alpha, p.beta, p.act,
                              1.0, st, e2, s2);
            EXPECT_EQ(st.n_bad, 0) << "entry " << e << ": " << st.str();
          }
          ++ran;
        }
    }
  EXPECT_EQ(ran, 2 * 2 * 3 * 2);  // operand cases x kernels x splits x beta
}

// What the TMA kernels refuse, with an error naming the configuration: A transposed, B in rows of 67 floats
// (not whole 16-byte runs), A at an offset of one float, A's batch entries one float more than a matrix apart
// (not whole 16-byte steps), B's entries overlapping; the process stays usable (a valid launch after them is
// right).
TEST(Gemm, F32_Tma_RefusesLayoutsItCannotFetch) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const std::int64_t m = 130, n = 64, k = 96;
  const Tensor a = test::make_input(InputSpec{Shape{m, k}}, 51, Device::cuda(0));
  const Tensor b = test::make_input(InputSpec{Shape{k, n}}, 52, Device::cuda(0));
  const Tensor a_t = test::make_input(InputSpec{Shape{k, m}}, 53, Device::cuda(0)).t();
  const Tensor b67 = test::make_input(InputSpec{Shape{k, 67}}, 54, Device::cuda(0)).narrow(1, 0, n);
  const Tensor a_off = test::make_input(InputSpec{Shape{m, k}, Layout::Offset1}, 55, Device::cuda(0));
  Tensor c = empty({m, n}, DType::F32, Device::cuda(0));
  EXPECT_EQ(config_name(Config{Kernel::SimtTma128x64, 2, MathMode::FP32, SplitReduce::Cluster, Staging::Tma}),
            "simt_128x64x32_w64x32_t8x8_s3_tma_splitk2_dsmem");
  const Tensor a_two = test::make_input(InputSpec{Shape{2 * m * k + 1}}, 56, Device::cuda(0));
  const Tensor c_two = empty({2, m, n}, DType::F32, Device::cuda(0));
  Problem odd_step = problem_2d(a_two.narrow(0, 0, m * k).view(Shape{m, k}), b, c_two.select(0, 0));
  odd_step.batch = 2, odd_step.a_sb = m * k + 1, odd_step.b_sb = 0, odd_step.c_sb = m * n;
  Problem overlap = odd_step;
  overlap.a_sb = m * k, overlap.b_sb = (k - 1) * n;
  for (Kernel kernel : simt_kernels()) {
    if (!is_tma_kernel(kernel)) continue;
    const Config cfg{kernel, 2, MathMode::FP32, SplitReduce::Cluster, Staging::Tma};
    SCOPED_TRACE(config_name(cfg));
    for (const Problem& p :
         {problem_2d(a_t, b, c), problem_2d(a, b67, c), problem_2d(a_off, b, c), odd_step, overlap}) {
      EXPECT_FALSE(tma_ready(p));
      EXPECT_FALSE(can_implement(p, cfg));
      expect_error<InvalidArgument>([&] { launch(p, cfg, detail::stream_for(Device::cuda(0))); },
                                    {kernel_name(kernel), "cannot run"});
    }
    Guarded g(Shape{m, n}, DType::F32, Device::cuda(0));
    launch(problem_2d(a, b, g.view()), cfg, detail::stream_for(Device::cuda(0)));
    EXPECT_EQ(g.check(), "");
    expect_product(to_double(g.view()), to_double(a), to_double(b));
  }
}

// TMA staging belongs to the TMA kernels alone, on any machine.
TEST(Gemm, Tma_StagingBelongsToTheTmaKernel) {
  using namespace detail::gemm;
  Problem p;
  p.m = 256, p.n = 64, p.k = 128;
  p.a_sm = 128, p.a_sk = 1, p.b_sk = 64, p.b_sn = 1, p.c_sm = 64, p.c_sn = 1;
  int tma_kernels = 0;
  for (Kernel kernel : simt_kernels()) {
    SCOPED_TRACE(kernel_name(kernel));
    if (!is_tma_kernel(kernel)) {
      EXPECT_FALSE(can_implement(p, Config{kernel, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Tma}));
      continue;
    }
    ++tma_kernels;
    EXPECT_FALSE(
        can_implement(p, Config{kernel, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers}));
    EXPECT_FALSE(can_implement(p, Config{kernel, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync}));
    EXPECT_FALSE(can_implement(p, Config{kernel, 9, MathMode::FP32, SplitReduce::Cluster,
                                         Staging::Tma}));  // over the portable cluster size
    EXPECT_EQ(can_implement(p, Config{kernel, 2, MathMode::FP32, SplitReduce::Cluster, Staging::Tma}),
              tma_ready(p));
  }
  EXPECT_EQ(tma_kernels, 2);
}

// The register-staged loaders need each operand contiguous along one of its dims; the cp.async ring takes
// any strides, and the dispatcher falls back to it.
TEST(Gemm, Staging_Registers_NeedsAContiguousDim) {
  using namespace detail::gemm;
  Problem p;
  p.m = p.n = p.k = 8;
  p.a_sm = 16, p.a_sk = 2;  // every other element of a 8x16 matrix: neither dim contiguous
  p.b_sk = 8, p.b_sn = 1;
  p.c_sm = 8, p.c_sn = 1;
  const Config regs{Kernel::Simt64x64, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers};
  const Config ring{Kernel::Simt64x64, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync};
  EXPECT_FALSE(can_implement(p, regs));
  EXPECT_TRUE(can_implement(p, ring));
  p.a_sk = 1;  // row-major A
  EXPECT_TRUE(can_implement(p, regs));
  p.b_sk = 2, p.b_sn = 16;  // B strided both ways
  EXPECT_FALSE(can_implement(p, regs));
  EXPECT_EQ(config_name(ring), "simt_64x64x8_w32x32_t8x4_s4_cpasync");
  // The tile whose cp.async variants would spill is built register-staged only.
  p.b_sk = 8, p.b_sn = 1;
  EXPECT_TRUE(can_implement(
      p, Config{Kernel::Simt256x128k16, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers}));
  EXPECT_FALSE(can_implement(
      p, Config{Kernel::Simt256x128k16, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync}));
}

// Packing (Config::pack) copies each operand without whole 16-byte runs into aligned scratch with padded
// rows, keeping its contiguous dim (k for A strided both ways, n for B); aligned operands stay in place. The
// packed problem always has whole runs.
TEST(Gemm, Pack_Shape) {
  using namespace detail::gemm;
  alignas(16) static const float storage[4] = {};  // never read: only the pointers' alignment matters
  Problem p;
  p.m = 7, p.n = 9, p.k = 11, p.batch = 3;
  p.a = storage + 1, p.b = storage;
  p.a_sm = 11, p.a_sk = 1, p.a_sb = 0;    // row-major A, rows of 11, broadcast over the batch
  p.b_sk = 12, p.b_sn = 1, p.b_sb = 132;  // B in 16-byte rows, but n = 9: the last run straddles the edge
  p.c_sm = 9, p.c_sn = 1, p.c_sb = 63;
  ASSERT_TRUE(needs_pack(p));
  const Problem q = pack_shape(p);
  EXPECT_EQ(q.a, nullptr);
  EXPECT_EQ(q.a_sm, 12);
  EXPECT_EQ(q.a_sk, 1);
  EXPECT_EQ(q.a_sb, 0);  // still broadcast: packed once
  EXPECT_FALSE(q.a_padded);
  EXPECT_EQ(q.b, nullptr);
  EXPECT_EQ(q.b_sn, 1);
  EXPECT_EQ(q.b_sk, 12);  // n = 9 padded to 12, so the last run of each row loads whole
  EXPECT_TRUE(q.b_padded);
  EXPECT_EQ(q.b_sb, 11 * 12);
  EXPECT_FALSE(needs_pack(q));  // whole 16-byte runs everywhere
  Problem t = p;  // A contiguous along m (a transposed view), rows of 7: padded to 8, still along m
  t.a_sm = 1, t.a_sk = 7, t.a_sb = 77;
  const Problem tq = pack_shape(t);
  EXPECT_EQ(tq.a_sm, 1);
  EXPECT_EQ(tq.a_sk, 8);
  EXPECT_EQ(tq.a_sb, 11 * 8);
  EXPECT_TRUE(tq.a_padded);
  t.a_sm = 22, t.a_sk = 2;  // strided both ways: along k
  EXPECT_EQ(pack_shape(t).a_sk, 1);
  EXPECT_EQ(pack_shape(t).a_sm, 12);
  p.b_sk = 1, p.b_sn = 12;  // B contiguous along k in 16-byte rows: used in place
  const Problem r = pack_shape(p);
  EXPECT_EQ(r.b, p.b);
  EXPECT_EQ(r.b_sn, 12);
  EXPECT_EQ(r.b_sb, 132);
  const Config packed{Kernel::Simt64x256, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers, true};
  EXPECT_EQ(config_name(packed), "simt_64x256x8_w64x64_t16x8_s3_packed");
  EXPECT_FALSE(can_implement(p, Config{Kernel::Simt64x256}));
  EXPECT_TRUE(can_implement(p, packed));
  EXPECT_FALSE(can_implement(p, Config{Kernel::Naive, 1, MathMode::FP32, SplitReduce::Kernel,
                                       Staging::Registers, true}));  // only the SIMT kernels pack
}

// Packed operands through the kernels: strided both ways, offset 1, odd rows, transposed, batched with A
// broadcast; a few tiles and splits, against float64, launched twice (the scratch is reused).
TEST(Gemm, F32_PackedOperands) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const std::int64_t m = 131, n = 70, k = 301, batch = 3;
  const Device d = Device::cuda(0);
  struct Operands {
    Tensor a, b;  // (batch, m, k), (batch, k, n) views
  };
  const Tensor a_base = test::make_input(InputSpec{Shape{batch, m, 2 * k}}, 71, d);
  const Tensor b_base = test::make_input(InputSpec{Shape{batch, n, k}, Layout::Offset1}, 72, d);
  const Tensor a_one = test::make_input(InputSpec{Shape{1, m, k}, Layout::Offset1}, 73, d);
  const Tensor b_rows = test::make_input(InputSpec{Shape{batch, k, n}}, 74, d);
  const Tensor a_cols = test::make_input(InputSpec{Shape{batch, k, m}, Layout::Offset1}, 75, d);
  const Tensor b_base2 = test::make_input(InputSpec{Shape{batch, k, 3 * n}}, 76, d);
  const std::vector<std::pair<std::string, Operands>> cases = {
      {"a strided both ways, b transposed at offset 1",
       {a_base.slice(2, 0, 2 * k, 2), b_base.transpose(1, 2)}},
      {"a broadcast at offset 1, b rows of 70", {a_one.expand({batch, m, k}), b_rows}},
      {"a transposed at offset 1 (rows of 131), b strided both ways",
       {a_cols.transpose(1, 2), b_base2.slice(2, 0, 3 * n, 3)}},
  };
  const Config configs[] = {
      {Kernel::Simt128x128x2, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers, true},
      {Kernel::Simt256x128k16, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers, true},
      {Kernel::Simt64x256, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers, true},
      {Kernel::Simt64x64, 4, MathMode::FP32, SplitReduce::Kernel, Staging::Registers, true},
      {Kernel::Simt128x128k16, 3, MathMode::FP32, SplitReduce::Cluster, Staging::Registers, true}};
  for (const auto& [name, ops] : cases)
    for (const Config& cfg : configs) {
      SCOPED_TRACE(name + " " + config_name(cfg));
      const Tensor c = empty(Shape{batch, m, n}, DType::F32, d);
      Problem p;
      p.m = m, p.n = n, p.k = k, p.batch = batch;
      p.a = ops.a.data<float>(), p.a_sm = ops.a.stride(1), p.a_sk = ops.a.stride(2), p.a_sb = ops.a.stride(0);
      p.b = ops.b.data<float>(), p.b_sk = ops.b.stride(1), p.b_sn = ops.b.stride(2), p.b_sb = ops.b.stride(0);
      p.c = c.data<float>(), p.c_sm = n, p.c_sn = 1, p.c_sb = m * n;
      ASSERT_TRUE(needs_pack(p));
      ASSERT_TRUE(can_implement(p, cfg));
      const cudaStream_t stream = detail::stream_for(d);
      launch(p, cfg, stream);
      const std::vector<float> first = c.to_vector<float>();
      launch(p, cfg, stream);
      EXPECT_EQ(c.to_vector<float>(), first);
      expect_batches_match(c, ops.a.contiguous(), ops.b.contiguous(), {0, batch - 1});
    }
}

// Packed rows longer than one copy warp's 1024 columns (the row copy splits them: 1030 -> ld 1032 in two
// pieces, 2501 -> 2504 in three), both operands in one copy launch, over a batch.
TEST(Gemm, F32_PackedLongRows) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const std::int64_t m = 37, n = 2501, k = 1030, batch = 2;
  const Device d = Device::cuda(0);
  const Tensor a = test::make_input(InputSpec{Shape{batch, m, k}, Layout::Offset1}, 81, d);
  const Tensor b = test::make_input(InputSpec{Shape{batch, k, n}, Layout::Offset1}, 82, d);
  const Tensor c = empty(Shape{batch, m, n}, DType::F32, d);
  Problem p;
  p.m = m, p.n = n, p.k = k, p.batch = batch;
  p.a = a.data<float>(), p.a_sm = a.stride(1), p.a_sk = a.stride(2), p.a_sb = a.stride(0);
  p.b = b.data<float>(), p.b_sk = b.stride(1), p.b_sn = b.stride(2), p.b_sb = b.stride(0);
  p.c = c.data<float>(), p.c_sm = n, p.c_sn = 1, p.c_sb = m * n;
  ASSERT_TRUE(needs_pack(p));
  const Config cfg{Kernel::Simt128x128x2, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers, true};
  ASSERT_TRUE(can_implement(p, cfg));
  launch(p, cfg, detail::stream_for(d));
  expect_batches_match(c, a.contiguous(), b.contiguous(), {0, batch - 1});
}

// The dispatcher's picks (which configuration runs which problem on an H100 / H200 / A100-like device) are
// tested on the CPU in tests/ops/gemm/test_dispatch.cpp.

// A launch captured into a CUDA graph keeps scratch of its own (split-K partials, packed operands). Eager
// launches on the same stream that outgrow the stream's scratch free its old buffers, fresh tensors take
// them, and the graph's replay neither writes into those tensors nor loses its result. The split kernel's
// partials are added by the second kernel, launched to overlap it (captured with its overlap attribute): a
// SIMT kernel and an mma.sync one.
TEST(Gemm, CapturedLaunches_KeepTheirScratch) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const Device d = Device::cuda(0);
  const Stream simt_stream(0), tensor_stream(0);  // both alive: distinct streams, each without scratch yet
  for (bool tensor : {false, true}) {
    const Stream& stream = tensor ? tensor_stream : simt_stream;
    const StreamGuard on_stream(stream, 0);
    // Split 4: partials of 640 KB, in 1 MiB buffers; the SIMT launch packed first (A at offset 1).
    const Config cfg =
        tensor ? Config{Kernel::Tensor64x64, 4, MathMode::TF32x3}
               : Config{Kernel::Simt64x64, 4, MathMode::FP32, SplitReduce::Kernel, Staging::Registers, true};
    SCOPED_TRACE(config_name(cfg));
    const Tensor a = test::make_input(InputSpec{Shape{200, 515}, Layout::Offset1}, 81, d);
    const Tensor b = test::make_input(InputSpec{Shape{515, 200}}, 82, d);
    Tensor c = empty(Shape{200, 200}, DType::F32, d);
    const Problem p = problem_2d(a, b, c);
    ASSERT_TRUE(needs_pack(p));
    launch(p, cfg, stream);  // eager first, as the graph executor does before it captures
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    MT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    launch(p, cfg, stream);
    MT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    MT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

    // 512 x 512 x 1030 outgrows both eager buffers (4 MiB of partials, 2 MiB packed).
    const Tensor a2 = test::make_input(InputSpec{Shape{512, 1030}, Layout::Offset1}, 83, d);
    const Tensor b2 = test::make_input(InputSpec{Shape{1030, 512}}, 84, d);
    const Tensor c2 = empty(Shape{512, 512}, DType::F32, d);
    launch(problem_2d(a2, b2, c2), cfg, stream);
    std::vector<Tensor> fillers;
    for (int i = 0; i < 8; ++i) fillers.push_back(full(Shape{1 << 18}, 7.0, DType::F32, d));  // 1 MiB each
    c.fill_(std::numeric_limits<double>::quiet_NaN());
    MT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    stream.synchronize();
    for (const Tensor& f : fillers) {
      const std::vector<float> v = f.to_vector<float>();
      EXPECT_EQ(std::count(v.begin(), v.end(), 7.f), static_cast<std::ptrdiff_t>(v.size()));
    }
    expect_product(to_double(c), to_double(a), to_double(b));
    expect_product(to_double(c2), to_double(a2), to_double(b2), "eager 512x512x1030: ");
    MT_CUDA_CHECK(cudaGraphExecDestroy(exec));
    MT_CUDA_CHECK(cudaGraphDestroy(graph));
  }
}

// ---------------------------------------------------------------- batches

TEST(Gemm, F32_Batched_Matmul_Broadcast) {
  struct B {
    Shape a, b;
  };
  const B cases[] = {
      {{4, 33, 65}, {4, 65, 47}},        // plain batch
      {{1, 33, 65}, {4, 65, 47}},        // A broadcast over the batch
      {{4, 33, 65}, {65, 47}},           // B 2-D, broadcast
      {{2, 1, 17, 19}, {1, 3, 19, 23}},  // batch dims that do not collapse: looped
      {{3, 2, 5, 7}, {7, 9}},
  };
  for (Device dev : {Device::cpu(), Device::cuda(0)}) {
    if (dev.is_cuda()) MT_REQUIRE_GPU();  // the CPU half ran: the case reports SKIPPED without a GPU
    for (const auto& cs : cases) {
      SCOPED_TRACE(detail::str(cs.a, " @ ", cs.b, " on ", dev));
      const Tensor a = test::make_input(InputSpec{cs.a}, 11, dev);
      const Tensor b = test::make_input(InputSpec{cs.b}, 12, dev);
      const Tensor c = matmul(a, b);
      // Reference: each batch element separately, 2-D.
      const Shape& cshape = c.shape();
      ASSERT_EQ(cshape.back(), cs.b.back());
      const Tensor cf = c.reshape({-1, c.size(-2), c.size(-1)});
      const std::int64_t nb = cf.size(0);
      // Broadcast both inputs to the output batch shape and flatten.
      Shape ea = cshape, eb = cshape;
      ea[ea.rank() - 1] = a.size(-1);
      eb[eb.rank() - 2] = b.size(-2);
      const Tensor af = a.expand(ea).contiguous().reshape({nb, a.size(-2), a.size(-1)});
      const Tensor bf = b.expand(eb).contiguous().reshape({nb, b.size(-2), b.size(-1)});
      for (std::int64_t i = 0; i < nb; ++i)
        expect_product(to_double(cf.select(0, i)), to_double(af.select(0, i)), to_double(bf.select(0, i)),
                       "batch " + std::to_string(i) + ": ");
    }
  }
}

TEST(Gemm, F32_Batched_Gemm_TransposedViews) {
  for (Device dev : {Device::cpu(), Device::cuda(0)}) {
    if (dev.is_cuda()) MT_REQUIRE_GPU();  // the CPU half ran: the case reports SKIPPED without a GPU
    // a: (5, 40, 31) viewed transposed; c a strided view into a larger buffer.
    const Tensor a = test::make_input(InputSpec{Shape{5, 31, 40}, Layout::Contiguous}, 21, dev);
    const Tensor b = test::make_input(InputSpec{Shape{5, 31, 50}, Layout::Contiguous}, 22, dev);
    Tensor big = zeros(Shape{5, 40, 64}, DType::F32, dev);
    Tensor c = big.slice(2, 3, 53);
    GemmOptions o;
    gemm(a, b, c, /*trans_a=*/true, false, o);
    for (int i = 0; i < 5; ++i) {
      std::ostringstream what;
      what << dev << " batch " << i << ": ";
      expect_product(to_double(c.select(0, i)), to_double(a.select(0, i)).transpose(),
                     to_double(b.select(0, i)), what.str());
    }
    EXPECT_EQ(to_double(big.slice(2, 0, 3).reshape({-1, 3})).cwiseAbs().maxCoeff(), 0.0) << "wrote outside c";
  }
}

TEST(Gemm, F32_Batch64_256Cubed) {
  MT_REQUIRE_GPU();
  const Tensor a = test::make_input(InputSpec{Shape{64, 256, 256}}, 31, Device::cuda(0));
  const Tensor b = test::make_input(InputSpec{Shape{64, 256, 256}}, 32, Device::cuda(0));
  expect_batches_match(matmul(a, b), a, b, {0, 17, 63});
}

// The shapes of the dispatcher's rules for M of 33-64 with a long K, skinny N under a tall M, short K over
// many tiles and few tiles on the 16-byte ring (whose picks tests/ops/gemm/test_dispatch.cpp checks), each
// run through mt::gemm with a fused bias and ReLU against float64. The shapes follow the GPU's SM count so
// that each rule applies on any GPU.
TEST(Gemm, F32_Dispatch_SmallM_SkinnyN_ShortKBatched) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const int sms = current_sm_count();
  const std::int64_t wide_n = 32 * 128 + 4;
  const std::int64_t tall_m = 128 * ((3 * sms + 3) / 4) + 1;
  const std::int64_t batch = (sms + 3) / 4;
  for (const auto& [m, n, k] : {std::array<std::int64_t, 3>{48, wide_n, 2048},
                                {48, wide_n + 1, 2048},
                                {256, 1024, 1024},
                                {tall_m, 40, 520},
                                {512, 512, 512},
                                {64, 512, 512}}) {
    GemmCase c{m, n, k};
    c.bias = true, c.act = Activation::Relu, c.beta = 0.f;
    run_gemm_case(c, Device::cuda(0));
  }
  const Tensor a = test::make_input(InputSpec{Shape{batch, 100, 68}}, 51, Device::cuda(0));
  const Tensor b = test::make_input(InputSpec{Shape{batch, 68, 260}}, 52, Device::cuda(0));
  expect_batches_match(matmul(a, b), a, b, {0, batch - 1});
  // Batches of small products under 64 wide and in unaligned rows (the batched rule's 64x64 and 32x64 tiles
  // on the 4-byte ring, in place).
  for (const auto& [bs, m, n, k] :
       {std::array<std::int64_t, 4>{136, 189, 53, 68}, {254, 89, 32, 101}, {40, 495, 87, 320}}) {
    const Tensor x = test::make_input(InputSpec{Shape{bs, m, k}}, 53, Device::cuda(0));
    const Tensor y = test::make_input(InputSpec{Shape{bs, k, n}}, 54, Device::cuda(0));
    expect_batches_match(matmul(x, y), x, y, {0, bs / 2, bs - 1});
  }
}

// The transformer block's products that the aligned wave model gives the TMA kernel's 128x64 tile (split by
// the second kernel; with B stored n x k under 2048 rows or more, after B is copied along n), and one the
// two-wave wave model gives the two-per-SM 128x128 tile (the picks: test_dispatch.cpp,
// F32_MidGridsWeighTheTmaTile and F32_TwoWaveGridsTakeTheWaveModel).
struct EpilogueShape {
  std::int64_t m, n, k;
  bool b_along_k;
};

// Each shape through mt::gemm with a fused bias and GELU against float64, over a C first filled with NaN
// (beta 0), then with beta 0.5.
void run_bias_gelu_cases(std::initializer_list<EpilogueShape> shapes) {
  for (const EpilogueShape& s : shapes) {
    for (float beta : {0.f, 0.5f}) {
      GemmCase c{s.m, s.n, s.k, false, s.b_along_k};
      c.bias = true, c.act = Activation::Gelu, c.beta = beta;
      run_gemm_case(c, Device::cuda(0));
    }
  }
}

TEST(Gemm, F32_Dispatch_MidGridsOnTheTmaTile) {
  MT_REQUIRE_GPU();
  run_bias_gelu_cases({{1024, 3072, 768, false},
                       {1024, 768, 3072, false},
                       {1280, 1280, 1280, false},
                       {2048, 768, 768, true},
                       {2048, 3072, 768, false}});
}

// Grids of at most two waves of 256x128 tiles that leave SMs idle take the wave model's two-per-SM tiles
// (dispatch.cpp, the big rule): the TMA tile split 2 and 4 (edge tiles at 2000x2300), the 128x128 tile
// unsplit on B copied along n (x W^T), the TMA tile split 4 there.
TEST(Gemm, F32_Dispatch_TwoWaveGridsOnTheWaveModel) {
  MT_REQUIRE_GPU();
  run_bias_gelu_cases({{2560, 2048, 512, false},
                       {2000, 2300, 1000, false},
                       {2048, 3072, 768, true},
                       {2048, 2304, 768, true}});
}

// Both operands along k (x W^T under 2048 rows, B not copied along n; dispatch.cpp, both_along_k): the
// 256x128 tile 16 deep split 4 by the second kernel (512x2048x2048) and split 2 in a cluster
// (512x4096x1024), 8 deep unsplit (1024x4096x1024), and 8 deep split 3 in a cluster where C's rows do not
// take float4 stores (767x6145x1024).
TEST(Gemm, F32_Dispatch_BothOperandsAlongK) {
  MT_REQUIRE_GPU();
  run_bias_gelu_cases(
      {{512, 2048, 2048, true}, {512, 4096, 1024, true}, {1024, 4096, 1024, true}, {767, 6145, 1024, true}});
}

TEST(Gemm, WholeRunTile_RefusesUnalignedOperands) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const std::int64_t m = 64, n = 256, k = 64;
  const Tensor a = test::make_input(InputSpec{Shape{m, k}, Layout::Offset1}, 61, Device::cuda(0));
  const Tensor b = test::make_input(InputSpec{Shape{k, n}}, 62, Device::cuda(0));
  Guarded g(Shape{m, n}, DType::F32, Device::cuda(0));
  Problem p = problem_2d(a, b, g.view());
  const Config cfg{Kernel::Simt64x256, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers};
  EXPECT_FALSE(can_implement(p, cfg));
  expect_error<InvalidArgument>([&] { launch(p, cfg, detail::stream_for(Device::cuda(0))); },
                                {"simt_64x256", "cannot run", "64x256x64"});
  EXPECT_EQ(g.check(), "");
  const Tensor a16 = test::make_input(InputSpec{Shape{m, k}}, 61, Device::cuda(0));  // offset 0
  p.a = a16.data<float>(), p.a_sm = k, p.a_sk = 1;
  ASSERT_TRUE(can_implement(p, cfg));
  launch(p, cfg, detail::stream_for(Device::cuda(0)));
  EXPECT_EQ(g.check(), "");
  expect_product(to_double(g.view()), to_double(a16), to_double(b));
}

// Split K reduced inside the launch (one thread-block cluster per tile): batched, split counts up to the
// cluster limit (odd ones too, whose last split gets a short or empty K range), launched twice in a row on
// one stream with bit-identical results (the reduction order is fixed). Beyond the limit the SIMT kernels
// refuse.
TEST(Gemm, F32_SplitK_Batched_RepeatedLaunches_Deterministic) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  const std::int64_t batch = 3, m = 70, n = 133, k = 515;
  const Tensor a = test::make_input(InputSpec{Shape{batch, m, k}}, 41, Device::cuda(0));
  const Tensor b = test::make_input(InputSpec{Shape{batch, k, n}}, 42, Device::cuda(0));
  const Tensor bias = test::make_input(InputSpec{Shape{n}}, 43, Device::cuda(0));
  const std::vector<float> bv = bias.to_vector<float>();
  for (Kernel kern : {Kernel::Simt64x64, Kernel::Simt32x64, Kernel::Simt32x128, Kernel::Simt128x128x2})
    for (int split : {2, 5, 7, 8, 16}) {
      std::vector<float> kernel_result;  // the cluster reduction adds in the same order: bit-identical
      for (SplitReduce reduce : {SplitReduce::Kernel, SplitReduce::Cluster}) {
        const Config cfg{kern, split, MathMode::FP32, reduce};
        SCOPED_TRACE(config_name(cfg));
        if (reduce == SplitReduce::Cluster && split > kMaxClusterSplit) {
          EXPECT_FALSE(can_implement(Problem{}, cfg));
          continue;
        }
        std::vector<float> first;
        for (int rep = 0; rep < 2; ++rep) {
          Guarded g(Shape{batch, m, n}, DType::F32, Device::cuda(0));
          Problem p;
          p.m = m, p.n = n, p.k = k, p.batch = batch;
          p.a = a.data<float>(), p.a_sm = k, p.a_sk = 1, p.a_sb = m * k;
          p.b = b.data<float>(), p.b_sk = n, p.b_sn = 1, p.b_sb = k * n;
          p.c = g.view().data<float>(), p.c_sm = n, p.c_sn = 1, p.c_sb = m * n;
          p.bias = bias.data<float>();
          p.act = Activation::Relu;
          ASSERT_TRUE(can_implement(p, cfg));
          launch(p, cfg, detail::stream_for(Device::cuda(0)));
          EXPECT_EQ(g.check(), "");
          const std::vector<float> got = g.view().to_vector<float>();
          if (rep == 0) {
            first = got;
            for (int i : {0, 2}) {
              ErrorStats s;
              double e2 = 0, s2 = 0;
              accumulate_errors(to_double(g.view().select(0, i)), to_double(a.select(0, i)),
                                to_double(b.select(0, i)), nullptr, &bv, 1.f, 0.f, Activation::Relu, 1.0, s,
                                e2, s2);
              EXPECT_EQ(s.n_bad, 0) << "batch " << i << ": " << s.str();
            }
          } else {
            EXPECT_EQ(std::memcmp(first.data(), got.data(), sizeof(float) * got.size()), 0)
                << "second launch differs from the first";
          }
        }
        if (reduce == SplitReduce::Kernel) {
          kernel_result = first;
        } else {
          ASSERT_EQ(kernel_result.size(), first.size());
          EXPECT_EQ(std::memcmp(kernel_result.data(), first.data(), sizeof(float) * first.size()), 0)
              << "the cluster reduction differs from the second kernel's";
        }
      }
    }
}

// ---------------------------------------------------------------- fused epilogue == matmul + eager ops

// ---------------------------------------------------------------- softmax in the epilogue
// (GemmOptions::softmax)

// Row softmax of act(alpha * a * b + beta * c0 + bias) in float64, and per element the tolerance: an error d
// in a logit moves its probability p by about p * d, and d is at most (K + 2) * eps times the row's largest
// |alpha| |A||B| + |beta| |C0| + |bias|; 1e-6 relative more for the float exponential and division.
void expect_softmax_rows(const MatD& got, const MatD& a, const MatD& b, const MatD* c0,
                         const std::vector<float>* bias, float alpha, float beta, Activation act,
                         const std::string& what = "") {
  const MatD prod = a * b, mag = a.cwiseAbs() * b.cwiseAbs();
  std::int64_t bad = 0;
  std::string first;
  for (Eigen::Index i = 0; i < got.rows(); ++i) {
    std::vector<double> v(static_cast<size_t>(got.cols()));
    double scale = 0, mx = -INFINITY;
    bool nan_row = false;
    for (Eigen::Index j = 0; j < got.cols(); ++j) {
      double x = alpha * prod(i, j), s = std::abs(alpha) * mag(i, j);
      if (beta != 0.f) x += beta * (*c0)(i, j), s += std::abs(beta * (*c0)(i, j));
      if (bias) x += (*bias)[static_cast<size_t>(j)], s += std::abs((*bias)[static_cast<size_t>(j)]);
      x = static_cast<double>(detail::gemm::activate(static_cast<float>(x), act));
      v[static_cast<size_t>(j)] = x;
      nan_row = nan_row || std::isnan(x) || x == INFINITY;
      mx = std::max(mx, x);
      scale = std::max(scale, s);
    }
    double sum = 0;
    for (double x : v) sum += std::exp(x - mx);
    const double d = (a.cols() + 2) * static_cast<double>(FLT_EPSILON) * scale;
    for (Eigen::Index j = 0; j < got.cols(); ++j) {
      const double ref = nan_row ? NAN : std::exp(v[static_cast<size_t>(j)] - mx) / sum;
      const double g = got(i, j);
      const bool ok =
          nan_row ? std::isnan(g) : std::isfinite(g) && std::abs(g - ref) <= ref * (4 * d + 1e-6) + 1e-30;
      if (!ok && bad++ == 0) first = detail::str("(", i, ", ", j, "): got ", g, ", reference ", ref);
    }
  }
  EXPECT_EQ(bad, 0) << what << "first of " << bad << " bad: " << first;
}

// gemm with the softmax on the CPU and on the GPU (the dispatcher's kernels), against float64: rows of 1, of
// a length that is not a multiple of 4, of one run per thread, of several runs per thread (4100), and longer
// than the kernel keeps in registers (16390, read again for each step); alpha, beta with C read, bias, ReLU;
// beta = 0 over a NaN-filled C; guard bands around C.
TEST(Gemm, Softmax_Epilogue_MatchesReference) {
  const std::int64_t shapes[][3] = {{3, 1, 5},     {5, 7, 33},    {17, 1024, 64},
                                    {4, 4100, 20}, {2, 16390, 9}, {300, 260, 2048}};
  for (Device dev : {Device::cpu(), Device::cuda(0)}) {
    if (dev.is_cuda()) MT_REQUIRE_GPU();  // the CPU half ran: the case reports SKIPPED without a GPU
    for (const auto& mnk : shapes)
      for (float beta : {0.f, 1.f}) {
        const std::int64_t m = mnk[0], n = mnk[1], k = mnk[2];
        SCOPED_TRACE(detail::str(dev, " ", m, "x", n, "x", k, " beta ", beta));
        const Tensor a = test::make_input(InputSpec{Shape{m, k}}, 61, dev);
        const Tensor b = test::make_input(InputSpec{Shape{k, n}}, 62, dev);
        const Tensor bias = test::make_input(InputSpec{Shape{n}}, 63, dev);
        Guarded g(Shape{m, n}, DType::F32, dev);
        if (beta == 0.f)
          g.view().fill_(std::numeric_limits<double>::quiet_NaN());
        else
          g.view().copy_(test::make_input(InputSpec{Shape{m, n}}, 64, dev));
        const MatD c0 = to_double(g.view());
        GemmOptions o;
        o.alpha = -1.5f, o.beta = beta, o.activation = Activation::Relu, o.softmax = true;
        gemm(a, b, g.view(), false, false, o, bias);
        EXPECT_EQ(g.check(), "");
        const std::vector<float> bv = bias.to_vector<float>();
        expect_softmax_rows(to_double(g.view()), to_double(a), to_double(b), &c0, &bv, o.alpha, beta,
                            Activation::Relu);
      }
  }
}

// Every kernel with the softmax, launched directly: where split K is added by the second kernel the softmax
// runs in it; everywhere else (no split, the cluster reduction, wgmma, the ladder) the product goes through
// scratch first: with its epilogue into the softmax kernel where C is not read and its rows are contiguous,
// else raw into the reduce kernel. C in odd rows (offset 1, rows of n + 3) or transposed with beta = 1, or
// contiguous with beta = 0 over NaN. In the first two layouts the cluster reduction and the second kernel add
// the splits in the same order, so their results with the softmax are bit-identical.
TEST(Gemm, Softmax_EveryKernel) {
  MT_REQUIRE_GPU();
  using namespace detail::gemm;
  std::vector<Config> configs = {
      {Kernel::Naive}, {Kernel::SmemTiled}, {Kernel::RegTiled}, {Kernel::WarpTiled}};
  for (Kernel k : simt_kernels()) {
    configs.push_back({k, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers});
    configs.push_back({k, 3, MathMode::FP32, SplitReduce::Kernel, Staging::Registers});
    configs.push_back({k, 3, MathMode::FP32, SplitReduce::Cluster, Staging::Registers});
  }
  for (Kernel k : tensor_kernels()) {
    configs.push_back({k, 1, MathMode::TF32x3});
    configs.push_back({k, 2, MathMode::TF32x3, SplitReduce::Kernel});
    if (k == Kernel::Wgmma) {  // both reductions at split 3: bit-identical below
      configs.push_back({k, 3, MathMode::TF32x3, SplitReduce::Kernel});
      configs.push_back({k, 3, MathMode::TF32x3, SplitReduce::Cluster});
    }
  }
  const Device d = Device::cuda(0);
  const std::int64_t m = 130, n = 260, k = 264;
  const Tensor a = test::make_input(InputSpec{Shape{m, k}}, 71, d);
  const Tensor b = test::make_input(InputSpec{Shape{k, n}}, 72, d);
  const Tensor bias = test::make_input(InputSpec{Shape{n}}, 73, d);
  const std::vector<float> bv = bias.to_vector<float>();
  const Tensor c_init = test::make_input(InputSpec{Shape{m, n}}, 74, d);
  const MatD c0 = to_double(c_init);
  const char* layouts[] = {"C in rows of n + 3", "C transposed", "C contiguous, beta 0"};
  int ran = 0;
  for (int layout = 0; layout < 3; ++layout) {
    std::map<std::string, std::vector<float>> by_split;  // results of the split-3 configurations, by kernel
    for (const Config& cfg : configs) {
      SCOPED_TRACE(config_name(cfg) + ", " + layouts[layout]);
      Guarded g(layout == 1 ? Shape{n, m} : Shape{m, n + (layout == 0 ? 3 : 0)}, DType::F32, d);
      Tensor c = layout == 1 ? g.view().transpose(0, 1) : layout == 0 ? g.view().narrow(1, 1, n) : g.view();
      if (layout == 2)
        c.fill_(std::numeric_limits<double>::quiet_NaN());
      else
        c.copy_(c_init);
      Problem p = problem_2d(a, b, c);
      p.alpha = 0.5f, p.beta = layout == 2 ? 0.f : 1.f, p.bias = bias.data<float>(), p.softmax = true;
      if (!can_implement(p, cfg)) continue;
      launch(p, cfg, detail::stream_for(d));
      EXPECT_EQ(g.check(), "");
      expect_softmax_rows(to_double(c), to_double(a), to_double(b), &c0, &bv, p.alpha, p.beta,
                          Activation::None);
      if (cfg.split_k == 3 && layout != 2) {
        const auto [it, first] = by_split.emplace(kernel_name(cfg.kernel), c.contiguous().to_vector<float>());
        if (!first) {
          EXPECT_EQ(it->second, c.contiguous().to_vector<float>()) << "the two reductions differ";
        }
      }
      ++ran;
    }
  }
  EXPECT_GT(ran, 60);
}

// NaN and Inf: a +Inf bias makes every row NaN (Inf - Inf, as softmax does); a NaN in C (beta != 0) makes its
// row NaN and no other; -Inf masks columns out, and a row of only -Inf is NaN; K = 0 gives the softmax of
// beta * C + bias. CPU and GPU.
TEST(Gemm, Softmax_NonFiniteRowsAndEmptyK) {
  for (Device dev : {Device::cpu(), Device::cuda(0)}) {
    if (dev.is_cuda()) MT_REQUIRE_GPU();  // the CPU half ran: the case reports SKIPPED without a GPU
    SCOPED_TRACE(detail::str(dev));
    const std::int64_t m = 6, n = 9, k = 40;
    const Tensor a = test::make_input(InputSpec{Shape{m, k}}, 81, dev);
    const Tensor b = test::make_input(InputSpec{Shape{k, n}}, 82, dev);
    GemmOptions o;
    o.softmax = true;
    {
      std::vector<float> bv(static_cast<size_t>(n), 0.f);
      bv[3] = INFINITY;
      const Tensor bias = from_vector(bv, Shape{n}).to(dev);
      Tensor c = empty(Shape{m, n}, DType::F32, dev);
      gemm(a, b, c, false, false, o, bias);
      for (float v : c.to_vector<float>()) EXPECT_TRUE(std::isnan(v));
    }
    {
      std::vector<float> cv(static_cast<size_t>(m * n), 0.25f);
      cv[2 * n + 5] = NAN;
      Tensor c = from_vector(cv, Shape{m, n}).to(dev);
      GemmOptions ob = o;
      ob.beta = 1.f;
      gemm(a, b, c, false, false, ob);
      const std::vector<float> got = c.to_vector<float>();
      for (std::int64_t i = 0; i < m; ++i) {
        double row_sum = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          const float v = got[static_cast<size_t>(i * n + j)];
          EXPECT_EQ(std::isnan(v), i == 2) << i << ", " << j;
          row_sum += v;
        }
        if (i != 2) {
          EXPECT_NEAR(row_sum, 1.0, 1e-5);
        }
      }
    }
    {
      // -Inf masks: columns 4-7 (a whole run of 4 of one GPU thread) get exp(-Inf - max) = 0 and the row's
      // other columns its softmax; a row of only -Inf (from C, beta 1) is NaN, as exp(-Inf - -Inf) is.
      std::vector<float> bv(static_cast<size_t>(n), 0.f);
      for (std::int64_t j = 4; j < 8; ++j) bv[static_cast<size_t>(j)] = -INFINITY;
      const Tensor bias = from_vector(bv, Shape{n}).to(dev);
      std::vector<float> cv(static_cast<size_t>(m * n), 0.f);
      for (std::int64_t j = 0; j < n; ++j) cv[static_cast<size_t>(3 * n + j)] = -INFINITY;
      Tensor c = from_vector(cv, Shape{m, n}).to(dev);
      GemmOptions ob = o;
      ob.beta = 1.f;
      gemm(a, b, c, false, false, ob, bias);
      const std::vector<float> got = c.to_vector<float>();
      const MatD ref = to_double(a) * to_double(b);
      for (std::int64_t i = 0; i < m; ++i) {
        double mx = -INFINITY, sum = 0;
        for (std::int64_t j = 0; j < n; ++j)
          if (j < 4 || j >= 8) mx = std::max(mx, ref(i, j));
        for (std::int64_t j = 0; j < n; ++j)
          if (j < 4 || j >= 8) sum += std::exp(ref(i, j) - mx);
        for (std::int64_t j = 0; j < n; ++j) {
          const float v = got[static_cast<size_t>(i * n + j)];
          if (i == 3)
            EXPECT_TRUE(std::isnan(v)) << i << ", " << j;
          else if (j >= 4 && j < 8)
            EXPECT_EQ(v, 0.f) << i << ", " << j;
          else
            EXPECT_NEAR(v, std::exp(ref(i, j) - mx) / sum, 1e-5) << i << ", " << j;
        }
      }
    }
    {
      const Tensor a0 = empty(Shape{m, 0}, DType::F32, dev), b0 = empty(Shape{0, n}, DType::F32, dev);
      const Tensor c_init = test::make_input(InputSpec{Shape{m, n}}, 83, dev);
      const Tensor bias = test::make_input(InputSpec{Shape{n}}, 84, dev);
      Tensor c = c_init.clone();
      GemmOptions ob = o;
      ob.beta = 2.f;
      gemm(a0, b0, c, false, false, ob, bias);
      const MatD c0 = to_double(c_init);
      const std::vector<float> bv = bias.to_vector<float>();
      expect_softmax_rows(to_double(c), MatD::Zero(m, 0), MatD::Zero(0, n), &c0, &bv, 1.f, 2.f,
                          Activation::None, "K = 0: ");
    }
  }
}

TEST(Gemm, Linear_FusedEpilogueEqualsEagerOps) {
  for (Device dev : {Device::cpu(), Device::cuda(0)}) {
    if (dev.is_cuda()) MT_REQUIRE_GPU();  // the CPU half ran: the case reports SKIPPED without a GPU
    for (Activation act : {Activation::None, Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
      SCOPED_TRACE(detail::str(dev, " act ", static_cast<int>(act)));
      const Tensor x = test::make_input(InputSpec{Shape{3, 43, 96}}, 41, dev);
      const Tensor w = test::make_input(InputSpec{Shape{96, 77}}, 42, dev);
      const Tensor bias = test::make_input(InputSpec{Shape{77}}, 43, dev);
      const Tensor y = linear(x, w, bias, act);
      ASSERT_EQ(y.shape(), (Shape{3, 43, 77}));
      // Eager: matmul, then bias add and activation with the functors (on the host).
      const std::vector<float> mm = matmul(x, w).to_vector<float>();
      const std::vector<float> bv = bias.to_vector<float>();
      std::vector<float> eager(mm.size());
      for (size_t i = 0; i < mm.size(); ++i) {
        const float v = mm[i] + bv[i % 77];
        eager[i] = act == Activation::Relu       ? fn::relu(v)
                   : act == Activation::Gelu     ? fn::gelu(v)
                   : act == Activation::GeluTanh ? fn::gelu_tanh(v)
                                                 : v;
      }
      const Tensor ref = from_vector(eager, Shape{3, 43, 77});
      // Bit-exact except the GELUs on the GPU, where the device erff / tanhf may differ from the host's by an
      // ulp or two.
      const test::Tolerance tol = (dev.is_cuda() && (act == Activation::Gelu || act == Activation::GeluTanh))
                                      ? test::Tolerance::close(1e-6, 1e-6)
                                      : test::Tolerance::exactly();
      const test::Comparison r = test::compare(y, ref, tol);
      EXPECT_TRUE(r.ok) << r.summary();
    }
  }
}

// The epilogue's GELUs are PyTorch's: Gelu the exact erf form, GeluTanh the tanh approximation. x (6, 1)
// times w = [[1]]: the epilogue sees x itself.
TEST(Gemm, Linear_EpilogueGelu_PyTorchValues) {
  const Tensor x = from_vector<float>({1.f, -1.f, 3.f, -3.f, 0.5f, 0.f}, Shape{6, 1});
  const Tensor w = from_vector<float>({1.f}, Shape{1, 1});
  const std::vector<double> exact = {0.8413447460685429,   -0.15865525393145707, 2.99595030590511,
                                     -0.00404969409489031, 0.34573123063700656,  0.0};
  const std::vector<double> approx = {0.8411919906082768,     -0.15880800939172324, 2.996362607918227,
                                      -0.0036373920817729943, 0.34571400982514394,  0.0};
  const std::vector<float> g = linear(x, w, Tensor(), Activation::Gelu).to_vector<float>();
  const std::vector<float> t = linear(x, w, Tensor(), Activation::GeluTanh).to_vector<float>();
  for (size_t i = 0; i < exact.size(); ++i) {
    EXPECT_NEAR(g[i], exact[i], 1e-6) << "gelu, row " << i;
    EXPECT_NEAR(t[i], approx[i], 1e-6) << "gelu_tanh, row " << i;
  }
}

TEST(Gemm, Linear_Shapes) {
  for (Device dev : {Device::cpu(), Device::cuda(0)}) {
    if (dev.is_cuda()) MT_REQUIRE_GPU();  // the CPU half ran: the case reports SKIPPED without a GPU
    const Tensor w = test::make_input(InputSpec{Shape{8, 5}}, 51, dev);
    EXPECT_EQ(linear(test::make_input(InputSpec{Shape{8}}, 52, dev), w).shape(), (Shape{5}));
    // Non-collapsible leading dims (a transposed batch view) still work.
    const Tensor xt = test::make_input(InputSpec{Shape{4, 3, 8}}, 53, dev).transpose(0, 1);
    const Tensor y = linear(xt, w);
    EXPECT_EQ(y.shape(), (Shape{3, 4, 5}));
    const test::Comparison r = test::compare(y, linear(xt.contiguous(), w), test::Tolerance::exactly());
    EXPECT_TRUE(r.ok) << r.summary();
  }
}

TEST(Gemm, Matmul_OneDimensionalOperands) {
  for (Device dev : {Device::cpu(), Device::cuda(0)}) {
    if (dev.is_cuda()) MT_REQUIRE_GPU();  // the CPU half ran: the case reports SKIPPED without a GPU
    const Tensor v = test::make_input(InputSpec{Shape{6}}, 61, dev);
    const Tensor m = test::make_input(InputSpec{Shape{6, 4}}, 62, dev);
    const Tensor mt = test::make_input(InputSpec{Shape{4, 6}}, 63, dev);
    EXPECT_EQ(matmul(v, m).shape(), (Shape{4}));
    EXPECT_EQ(matmul(mt, v).shape(), (Shape{4}));
    const Tensor d = matmul(v, v);
    EXPECT_EQ(d.dim(), 0);
    const std::vector<float> vv = v.to_vector<float>();
    double ref = 0;
    for (float x : vv) ref += double(x) * x;
    EXPECT_NEAR(d.item<float>(), ref, 1e-5 * ref);
  }
}

// ---------------------------------------------------------------- TF32 modes

TEST(Gemm, TF32Modes_ErrorReportedAndBounded) {
  MT_REQUIRE_GPU();
  for (std::int64_t k : {64, 256, 1024, 4096}) {
    GemmCase base{256, 320, k};
    base.seed = 77 + static_cast<std::uint64_t>(k);
    GemmCase c32 = base, ctf = base, c3x = base;
    c32.math = MathMode::FP32;
    ctf.math = MathMode::TF32;
    ctf.c_factor = 2.0 * std::ldexp(1.0, -10) / ((k + 2) * FLT_EPSILON);  // |err| <= 2^-9 |A||B|
    c3x.math = MathMode::TF32x3;
    c3x.c_factor = 2.0;
    const ErrorStats e32 = run_gemm_case(c32, Device::cuda(0));
    const ErrorStats etf = run_gemm_case(ctf, Device::cuda(0));
    const ErrorStats e3x = run_gemm_case(c3x, Device::cuda(0));
    std::printf(
        "[ tf32 err ] K=%5lld  rms/max normalised error: fp32 %.3g / %.3g   tf32 %.3g / %.3g   tf32x3 %.3g / "
        "%.3g\n",
        static_cast<long long>(k), e32.rms_norm, e32.max_norm, etf.rms_norm, etf.max_norm, e3x.rms_norm,
        e3x.max_norm);
    if (k >= 256) {
      EXPECT_LE(e3x.rms_norm, 2.0 * e32.rms_norm) << "3xTF32 must stay within 2x the fp32 error";
    }
    EXPECT_GT(etf.rms_norm, e3x.rms_norm) << "TF32 should be visibly less accurate than 3xTF32";
  }
}

TEST(Gemm, DefaultMathMode_IsFP32AndSettable) {
  EXPECT_EQ(default_math_mode(), MathMode::FP32);
  set_default_math_mode(MathMode::TF32x3);
  EXPECT_EQ(default_math_mode(), MathMode::TF32x3);
  if (cuda_available()) {
    GemmCase c{100, 200, 512};
    c.c_factor = 2.0;
    run_gemm_case(c, Device::cuda(0));
  }
  set_default_math_mode(MathMode::FP32);
  EXPECT_STREQ(math_mode_name(MathMode::TF32x3), "tf32x3");
  MT_REQUIRE_GPU();  // the GPU half did not run
}

// ---------------------------------------------------------------- errors

// ---------------------------------------------------------------- Hopper wgmma kernels (launched directly)

struct WgCase {
  WgCase(std::int64_t m_, std::int64_t n_, std::int64_t k_) : m(m_), n(n_), k(k_) {}
  std::int64_t m, n, k, batch = 1;
  Layout la = Layout::Contiguous, lb = Layout::Contiguous;  // Expanded: broadcast over the batch
  bool c_transposed = false;                                // C stored column-major (c_sm = 1)
  float alpha = 1.f, beta = 0.f;
  bool bias = false;
  Activation act = Activation::None;
  MathMode math = MathMode::TF32x3;
  detail::gemm::WgmmaConfig config;  // zeros: the launcher's choice
  std::uint64_t seed = 7;
};

std::string describe(const WgCase& c) {
  std::ostringstream os;
  os << c.batch << "x(" << c.m << "x" << c.n << "x" << c.k << ") a=" << test::layout_name(c.la)
     << " b=" << test::layout_name(c.lb) << " c_t=" << c.c_transposed << " alpha=" << c.alpha
     << " beta=" << c.beta << " bias=" << c.bias << " act=" << static_cast<int>(c.act) << " "
     << detail::gemm::wgmma_config_name(c.config, c.math) << " seed=" << c.seed;
  return os.str();
}

// The error bound of a math mode in units of (K + 2) eps |A||B|: TF32 rounds each operand to 11 bits (bound
// 2^-9 of the scale); 3xTF32 is held to twice the float32 dot-product bound.
double wg_c_factor(MathMode math, std::int64_t k) {
  return math == MathMode::TF32 ? 2.0 * std::ldexp(1.0, -10) / ((k + 2) * FLT_EPSILON) : 2.0;
}

// Runs launch_wgmma on device 0 into a guarded C (NaN-filled when beta == 0) and checks every batch element
// against float64; returns the error statistics over the whole batch.
ErrorStats run_wgmma_case(const WgCase& c) {
  SCOPED_TRACE(describe(c));
  using namespace detail::gemm;
  const Device dev = Device::cuda(0);
  const bool batched = c.batch > 1 || c.la == Layout::Expanded || c.lb == Layout::Expanded;
  auto shape3 = [&](std::int64_t r, std::int64_t cols) {
    return batched ? Shape{c.batch, r, cols} : Shape{r, cols};
  };
  const Tensor a = test::make_input(InputSpec{shape3(c.m, c.k), c.la}, c.seed, dev);
  const Tensor b = test::make_input(InputSpec{shape3(c.k, c.n), c.lb}, c.seed + 1, dev);
  const Tensor c0 = test::make_input(InputSpec{shape3(c.m, c.n)}, c.seed + 2, dev);
  const Tensor bias = c.bias ? test::make_input(InputSpec{Shape{c.n}}, c.seed + 3, dev) : Tensor();
  // C: row-major, or stored as (batch, n, m) and viewed transposed.
  Guarded g(c.c_transposed ? shape3(c.n, c.m) : shape3(c.m, c.n), DType::F32, dev);
  Tensor cv = c.c_transposed ? g.view().transpose(-1, -2) : g.view();
  if (c.beta != 0.f) cv.copy_(c0);
  const int r = batched ? 1 : 0;
  Problem p;
  p.m = static_cast<int>(c.m), p.n = static_cast<int>(c.n), p.k = static_cast<int>(c.k);
  p.batch = static_cast<int>(c.batch);
  p.a = a.data<float>(), p.a_sm = a.stride(r), p.a_sk = a.stride(r + 1), p.a_sb = batched ? a.stride(0) : 0;
  p.b = b.data<float>(), p.b_sk = b.stride(r), p.b_sn = b.stride(r + 1), p.b_sb = batched ? b.stride(0) : 0;
  p.c = cv.data<float>(), p.c_sm = cv.stride(r), p.c_sn = cv.stride(r + 1),
  p.c_sb = batched ? cv.stride(0) : 0;
  p.bias = c.bias ? bias.data<float>() : nullptr;
  p.alpha = c.alpha, p.beta = c.beta, p.act = c.act;
  EXPECT_TRUE(wgmma_can_implement(p, c.math));
  launch_wgmma(p, c.math, c.config, detail::stream_for(dev));
  EXPECT_EQ(g.check(), "");
  ErrorStats s;
  double err2 = 0, scale2 = 0;
  const std::vector<float> bv = c.bias ? bias.to_vector<float>() : std::vector<float>();
  for (std::int64_t i = 0; i < c.batch; ++i) {
    auto pick = [&](const Tensor& t) { return batched ? t.select(0, i) : t; };
    const MatD cd = to_double(pick(c0));
    accumulate_errors(to_double(pick(cv)), to_double(pick(a)), to_double(pick(b)), &cd,
                      c.bias ? &bv : nullptr, c.alpha, c.beta, c.act, wg_c_factor(c.math, c.k), s, err2,
                      scale2);
  }
  s.rms_norm = scale2 > 0 ? std::sqrt(err2 / scale2) : 0;
  EXPECT_EQ(s.n_bad, 0) << s.str();
  return s;
}

// Every built configuration of both modes, with K split over clusters of 2, 3, 6 and 8 CTAs.
std::vector<std::pair<MathMode, detail::gemm::WgmmaConfig>> wg_configs() {
  // Split K in a cluster ({128, s}) and added by the reduce kernel ({128, s, true}).
  return {{MathMode::TF32x3, {128, 1}},       {MathMode::TF32x3, {128, 3}}, {MathMode::TF32x3, {128, 8}},
          {MathMode::TF32x3, {128, 16, true}}, {MathMode::TF32, {128, 1}},   {MathMode::TF32, {256, 1}},
          {MathMode::TF32, {128, 2}},         {MathMode::TF32, {128, 6}},   {MathMode::TF32, {128, 5, true}}};
}

TEST(Gemm, Wgmma_OddShapes_EveryConfig) {
  MT_REQUIRE_SM90();
  const std::int64_t shapes[][3] = {{1, 1, 1},        {1, 7, 3},       {5, 1, 9},      {7, 13, 17},
                                    {31, 37, 41},     {127, 129, 255}, {128, 128, 32}, {129, 257, 33},
                                    {257, 130, 1000}, {61, 517, 1031}, {300, 40, 2049}};
  for (const auto& [math, cfg] : wg_configs())
    for (const auto& s : shapes) {
      WgCase c{s[0], s[1], s[2]};
      c.math = math, c.config = cfg;
      run_wgmma_case(c);
    }
}

TEST(Gemm, Wgmma_Layouts_127x129x255) {
  MT_REQUIRE_SM90();
  const Layout layouts[] = {Layout::Contiguous, Layout::Offset1, Layout::Strided, Layout::Transposed};
  for (MathMode math : {MathMode::TF32, MathMode::TF32x3})
    for (Layout la : layouts)
      for (Layout lb : layouts) {
        WgCase c{127, 129, 255};
        c.la = la, c.lb = lb, c.math = math;
        run_wgmma_case(c);
      }
  // C written through a transposed view (n-stride m, m-stride 1): the scalar store path.
  for (MathMode math : {MathMode::TF32, MathMode::TF32x3}) {
    WgCase c{127, 129, 255};
    c.c_transposed = true, c.beta = -1.5f, c.math = math;
    run_wgmma_case(c);
  }
}

TEST(Gemm, Wgmma_Batched_Broadcast) {
  MT_REQUIRE_SM90();
  for (const auto& [math, cfg] : wg_configs()) {
    for (auto [la, lb] :
         {std::pair{Layout::Contiguous, Layout::Contiguous}, std::pair{Layout::Expanded, Layout::Contiguous},
          std::pair{Layout::Contiguous, Layout::Expanded},
          std::pair{Layout::Transposed, Layout::Transposed}}) {
      WgCase c{130, 67, 100};
      c.batch = 3, c.la = la, c.lb = lb, c.math = math, c.config = cfg, c.bias = true;
      c.act = Activation::Relu, c.beta = 1.f;
      run_wgmma_case(c);
    }
  }
}

// TF32 fetches an A contiguous along k in 16-byte aligned rows raw (a TMA descriptor) and rounds it on its
// way into registers; any other A is packed first. Both round alike (to nearest) from the same layout, so the
// same values give bit-identical C: every configuration of both modes (3xTF32 always packs), edge tiles in M
// and K (k padded to whole 16-byte rows), one row, batched and broadcast A, an infinity and a NaN, bias and
// beta.
TEST(Gemm, Wgmma_AFetchedRawEqualsAPacked) {
  MT_REQUIRE_SM90();
  using namespace detail::gemm;
  const Device dev = Device::cuda(0);
  struct Case {
    std::int64_t batch, m, n, k;
    bool broadcast_a, nonfinite;
  };
  const Case cases[] = {{1, 1, 7, 3, false, false},        {1, 129, 257, 33, false, true},
                        {1, 257, 130, 1000, false, false}, {1, 300, 40, 2049, false, false},
                        {1, 128, 768, 3072, false, false}, {1, 200, 300, 36, false, false},
                        {3, 130, 67, 100, false, true},    {3, 130, 67, 101, true, false}};
  for (const auto& [math, cfg] : wg_configs())
    for (const Case& cs : cases) {
      SCOPED_TRACE(std::to_string(cs.batch) + "x(" + std::to_string(cs.m) + "x" + std::to_string(cs.n) + "x" +
                   std::to_string(cs.k) + ") broadcast_a=" + std::to_string(cs.broadcast_a) + " " +
                   wgmma_config_name(cfg, math));
      const std::int64_t ab = cs.broadcast_a ? 1 : cs.batch, ld = (cs.k + 3) / 4 * 4;
      // Rows of ld floats (16-byte steps: fetched raw) and rows of ld + 1 one float in (packed), holding the
      // same values.
      Tensor a_raw = test::make_input(InputSpec{Shape{ab, cs.m, ld}}, 31, dev).narrow(2, 0, cs.k);
      if (cs.nonfinite) {
        a_raw.narrow(1, cs.m - 1, 1).narrow(2, 1, 1).fill_(std::numeric_limits<double>::infinity());
        a_raw.narrow(1, 0, 1).narrow(2, cs.k - 1, 1).fill_(std::numeric_limits<double>::quiet_NaN());
      }
      Tensor a_packed = empty({ab, cs.m, ld + 1}, DType::F32, dev).narrow(2, 1, cs.k);
      a_packed.copy_(a_raw);
      const Tensor b = test::make_input(InputSpec{Shape{cs.batch, cs.k, cs.n}}, 32, dev);
      const Tensor bias = test::make_input(InputSpec{Shape{cs.n}}, 33, dev);
      const Tensor c0 = test::make_input(InputSpec{Shape{cs.batch, cs.m, cs.n}}, 34, dev);
      std::vector<float> results[2];
      for (int packed = 0; packed < 2; ++packed) {
        const Tensor& a = packed ? a_packed : a_raw;
        Tensor c = c0.clone();
        Problem p;
        p.m = static_cast<int>(cs.m), p.n = static_cast<int>(cs.n), p.k = static_cast<int>(cs.k);
        p.batch = static_cast<int>(cs.batch);
        p.a = a.data<float>(), p.a_sm = a.stride(1), p.a_sk = a.stride(2), p.a_sb = ab > 1 ? a.stride(0) : 0;
        p.b = b.data<float>(), p.b_sk = b.stride(1), p.b_sn = b.stride(2), p.b_sb = b.stride(0);
        p.c = c.data<float>(), p.c_sm = c.stride(1), p.c_sn = c.stride(2), p.c_sb = c.stride(0);
        p.bias = bias.data<float>(), p.beta = -0.5f;
        EXPECT_EQ(tma_a_ok(p), packed == 0);
        launch_wgmma(p, math, cfg, detail::stream_for(dev));
        results[packed] = c.to_vector<float>();
      }
      EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), sizeof(float) * results[0].size()), 0);
    }
}

// Which A the wgmma kernels fetch raw in TF32 mode (tma_a_ok), on any machine: contiguous along k, rows in
// 16-byte steps at least k long (any stride for one row), a 16-byte aligned start, batch entries in 16-byte
// steps that do not overlap (or a broadcast A).
TEST(Gemm, Wgmma_AFetchedRawOnlyInWholeRows) {
  using namespace detail::gemm;
  alignas(16) static float buf[4];
  Problem p;
  p.m = 130, p.n = 64, p.k = 96, p.a = buf, p.a_sm = 96, p.a_sk = 1;
  EXPECT_TRUE(tma_a_ok(p));
  Problem q = p;
  q.a_sm = 98;  // rows not in 16-byte steps
  EXPECT_FALSE(tma_a_ok(q));
  q = p, q.a_sm = 92;  // rows overlapping
  EXPECT_FALSE(tma_a_ok(q));
  q = p, q.a = buf + 1;  // start not 16-byte aligned
  EXPECT_FALSE(tma_a_ok(q));
  q = p, q.a_sm = 1, q.a_sk = 130;  // transposed: contiguous along m
  EXPECT_FALSE(tma_a_ok(q));
  q = p, q.m = 1, q.a_sm = 7;  // one row: its stride is never stepped
  EXPECT_TRUE(tma_a_ok(q));
  q = p, q.batch = 3, q.a_sb = 0;  // broadcast
  EXPECT_TRUE(tma_a_ok(q));
  q.a_sb = 130 * 96 + 4;  // entries in 16-byte steps
  EXPECT_TRUE(tma_a_ok(q));
  q.a_sb = 130 * 96 + 1;  // not
  EXPECT_FALSE(tma_a_ok(q));
  q.a_sb = 96;  // overlapping
  EXPECT_FALSE(tma_a_ok(q));
  q = p, q.k = 0;  // nothing to fetch
  EXPECT_FALSE(tma_a_ok(q));
}

TEST(Gemm, Wgmma_AlphaBeta_NaNFilledC) {
  MT_REQUIRE_SM90();
  for (MathMode math : {MathMode::TF32, MathMode::TF32x3})
    for (float alpha : {0.f, 1.f, -1.5f})
      for (float beta : {0.f, 1.f, -1.5f}) {
        WgCase c{67, 131, 129};
        c.alpha = alpha, c.beta = beta, c.math = math;
        run_wgmma_case(c);
      }
}

TEST(Gemm, Wgmma_K0_GivesBetaCPlusBias) {
  MT_REQUIRE_SM90();
  for (MathMode math : {MathMode::TF32, MathMode::TF32x3})
    for (float beta : {0.f, -1.5f}) {
      WgCase c{9, 11, 0};
      c.beta = beta, c.bias = true, c.math = math;
      run_wgmma_case(c);
    }
}

TEST(Gemm, Wgmma_Epilogue_BiasActivation) {
  MT_REQUIRE_SM90();
  for (const auto& [math, cfg] : wg_configs())
    for (Activation act : {Activation::None, Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
      WgCase c{129, 257, 300};
      c.bias = true, c.act = act,
      c.beta = act == Activation::Gelu       ? -1.5f
               : act == Activation::GeluTanh ? 0.5f
                                             : 0.f;
      c.math = math, c.config = cfg;
      run_wgmma_case(c);
    }
}

// 3xTF32 through wgmma must stay within 2x the float32 SIMT kernel's error for K >= 256 (the same bar as
// TF32Modes_ErrorReportedAndBounded, same shapes and seeds); TF32 within 2^-9 of the scale.
TEST(Gemm, Wgmma_TF32x3_WithinTwiceFP32Error) {
  MT_REQUIRE_SM90();
  for (std::int64_t k : {64, 256, 1024, 4096}) {
    GemmCase c32{256, 320, k};
    c32.seed = 77 + static_cast<std::uint64_t>(k);
    c32.math = MathMode::FP32;
    const ErrorStats e32 = run_gemm_case(c32, Device::cuda(0));
    WgCase w{256, 320, k};
    w.seed = c32.seed;
    w.math = MathMode::TF32x3;
    const ErrorStats e3x = run_wgmma_case(w);
    w.math = MathMode::TF32;
    const ErrorStats etf = run_wgmma_case(w);
    std::printf(
        "[ wgmma err ] K=%5lld  rms/max normalised error: fp32 %.3g / %.3g   wgmma tf32 %.3g / %.3g   wgmma "
        "tf32x3 %.3g / %.3g\n",
        static_cast<long long>(k), e32.rms_norm, e32.max_norm, etf.rms_norm, etf.max_norm, e3x.rms_norm,
        e3x.max_norm);
    if (k >= 256) {
      EXPECT_LE(e3x.rms_norm, 2.0 * e32.rms_norm) << "3xTF32 must stay within 2x the fp32 error";
    }
    EXPECT_GT(etf.rms_norm, e3x.rms_norm) << "TF32 should be visibly less accurate than 3xTF32";
  }
}

// Few 128x128 tiles with a long K (the 256x1024x1024 MLP layer: 16 tiles) in the TF32 modes, which the
// dispatcher gives the wgmma kernel with K split over a cluster per tile (tests/ops/gemm/test_dispatch.cpp),
// through mt::gemm's public path.
TEST(Gemm, Wgmma_Dispatch_SplitsFewTiles) {
  MT_REQUIRE_SM90();
  using namespace detail::gemm;
  for (MathMode math : {MathMode::TF32x3, MathMode::TF32}) {
    GemmCase c{256, 1024, 1024};
    c.math = math, c.bias = true, c.act = Activation::Gelu, c.beta = -1.5f;
    c.c_factor = wg_c_factor(math, c.k);
    const ErrorStats e = run_gemm_case(c, Device::cuda(0));
    if (math == MathMode::TF32x3) {
      GemmCase c32 = c;
      c32.math = MathMode::FP32, c32.c_factor = 1.0;
      EXPECT_LE(e.rms_norm, 2.0 * run_gemm_case(c32, Device::cuda(0)).rms_norm);
    }
  }
}

// pack_b: a packed B gives bit-identical results to packing it at every call (same kernel, same packed
// bytes), for split and unsplit launches, a transposed B, and the epilogue; shapes it does not apply to get
// no packed copy.
TEST(Gemm, PackB_SameResultsAsPackingEachCall) {
  MT_REQUIRE_SM90();
  const Device dev = Device::cuda(0);
  struct Case {
    std::int64_t m, n, k;
    bool trans_b;
  };
  for (MathMode math : {MathMode::TF32x3, MathMode::TF32})
    for (const Case& cs : {Case{256, 1024, 1024, false}, Case{300, 260, 700, true}, Case{129, 257, 33, false},
                           Case{2048, 512, 256, true}}) {
      SCOPED_TRACE(std::string(math_mode_name(math)) + " " + std::to_string(cs.m) + "x" +
                   std::to_string(cs.n) + "x" + std::to_string(cs.k));
      const Tensor a = test::make_input(InputSpec{Shape{cs.m, cs.k}}, 5, dev);
      const Tensor b =
          test::make_input(InputSpec{cs.trans_b ? Shape{cs.n, cs.k} : Shape{cs.k, cs.n}}, 6, dev);
      const Tensor bias = test::make_input(InputSpec{Shape{cs.n}}, 7, dev);
      const Tensor c0 = test::make_input(InputSpec{Shape{cs.m, cs.n}}, 8, dev);
      GemmOptions o;
      o.math = math, o.beta = -1.5f, o.activation = Activation::Gelu;
      Tensor want = c0.clone();
      gemm(a, b, want, false, cs.trans_b, o, bias);
      o.packed_b = pack_b(cs.trans_b ? b.transpose(0, 1) : b, cs.m, math);
      ASSERT_TRUE(o.packed_b);
      for (int rep = 0; rep < 2; ++rep) {
        Tensor got = c0.clone();
        gemm(a, b, got, false, cs.trans_b, o, bias);
        const std::vector<float> w = want.to_vector<float>(), g = got.to_vector<float>();
        EXPECT_EQ(std::memcmp(w.data(), g.data(), sizeof(float) * w.size()), 0) << "rep " << rep;
      }
    }
  const Tensor b = test::make_input(InputSpec{Shape{512, 512}}, 6, dev);
  EXPECT_FALSE(pack_b(b, 64, MathMode::TF32x3));  // m < 128: no wgmma tile, so nothing reads a packed b
  EXPECT_FALSE(pack_b(b, 512, MathMode::FP32));
}

TEST(Gemm, PackB_Errors) {
  const Tensor b3 = zeros(Shape{2, 8, 8});
  expect_error<ShapeError>([&] { pack_b(b3, 8, MathMode::TF32x3); }, {"pack_b", "(k, n)", "(2, 8, 8)"});
  expect_error<InvalidArgument>(
      [&] {
        pack_b(zeros(Shape{8, 8}), -1, MathMode::TF32x3);
      },
      {"pack_b", "m = -1"});
  expect_error<DTypeError>(
      [&] {
        pack_b(zeros(Shape{8, 8}, DType::I32), 8, MathMode::TF32x3);
      },
      {"pack_b", "float32"});
  EXPECT_FALSE(pack_b(zeros(Shape{8, 8}), 8, MathMode::TF32x3));  // a CPU tensor: nothing to pack
  if (!(cuda_available() && device_properties(0).cc_major == 9 && device_properties(0).cc_minor == 0)) return;
  // A packed copy of another b is refused, naming both, and the next call works.
  const Device dev = Device::cuda(0);
  const Tensor a = test::make_input(InputSpec{Shape{256, 384}}, 1, dev);
  const Tensor b = test::make_input(InputSpec{Shape{384, 256}}, 2, dev);
  const Tensor other = test::make_input(InputSpec{Shape{384, 256}}, 3, dev);
  GemmOptions o;
  o.math = MathMode::TF32x3;
  o.packed_b = pack_b(other, 256, MathMode::TF32x3);
  ASSERT_TRUE(o.packed_b);
  Tensor c = zeros(Shape{256, 256}, DType::F32, dev);
  expect_error<InvalidArgument>([&] { gemm(a, b, c, false, false, o); },
                                {"packed_b", "another b", "(384, 256)"});
  o.packed_b = pack_b(b, 256, MathMode::TF32x3);
  gemm(a, b, c, false, false, o);
  Tensor want = zeros(Shape{256, 256}, DType::F32, dev);
  o.packed_b = nullptr;
  gemm(a, b, want, false, false, o);
  const std::vector<float> w = want.to_vector<float>(), g = c.to_vector<float>();
  EXPECT_EQ(std::memcmp(w.data(), g.data(), sizeof(float) * w.size()), 0);
}

// Two launches on one stream in a row (the workspace is released and reused stream-ordered) give
// bit-identical results.
TEST(Gemm, Wgmma_RepeatedLaunches_Deterministic) {
  MT_REQUIRE_SM90();
  using namespace detail::gemm;
  const std::int64_t m = 300, n = 260, k = 700;
  const Tensor a = test::make_input(InputSpec{Shape{m, k}}, 91, Device::cuda(0));
  const Tensor b = test::make_input(InputSpec{Shape{k, n}}, 92, Device::cuda(0));
  for (const auto& [math, cfg] : wg_configs()) {
    SCOPED_TRACE(wgmma_config_name(cfg, math));
    std::vector<float> first;
    for (int rep = 0; rep < 2; ++rep) {
      Tensor c = zeros(Shape{m, n}, DType::F32, Device::cuda(0));
      Problem p;
      p.m = m, p.n = n, p.k = k;
      p.a = a.data<float>(), p.a_sm = k, p.a_sk = 1;
      p.b = b.data<float>(), p.b_sk = n, p.b_sn = 1;
      p.c = c.data<float>(), p.c_sm = n, p.c_sn = 1;
      launch_wgmma(p, math, cfg, detail::stream_for(Device::cuda(0)));
      const std::vector<float> got = c.to_vector<float>();
      if (rep == 0)
        first = got;
      else
        EXPECT_EQ(std::memcmp(first.data(), got.data(), sizeof(float) * got.size()), 0);
    }
  }
}

TEST(Gemm, Wgmma_Errors) {
  using namespace detail::gemm;
  Problem p;
  p.m = p.n = p.k = 8;
  EXPECT_FALSE(wgmma_can_implement(p, MathMode::FP32));
  expect_error<InvalidArgument>([&] { launch_wgmma(p, MathMode::FP32, nullptr); },
                                {"wgmma", "8x8x8", "fp32"});
  const bool sm90 =
      cuda_available() && device_properties(0).cc_major == 9 && device_properties(0).cc_minor == 0;
  EXPECT_EQ(wgmma_can_implement(p, MathMode::TF32x3), sm90);
  if (sm90) {
    // 3xTF32 has no 128 x 256 tile (three accumulator sets would not fit the registers).
    expect_error<InvalidArgument>(
        [&] {
          launch_wgmma(p, MathMode::TF32x3, WgmmaConfig{256, 1}, nullptr);
        },
        {"no wgmma kernel", "128x256"});
    expect_error<InvalidArgument>(
        [&] {
          launch_wgmma(p, MathMode::TF32, WgmmaConfig{192, 1}, nullptr);
        },
        {"no wgmma kernel"});
    // Split K: clusters of at most 8 CTAs, 128-wide tiles only.
    for (const WgmmaConfig& bad : {WgmmaConfig{128, 9}, WgmmaConfig{256, 2}})
      expect_error<InvalidArgument>([&] { launch_wgmma(p, MathMode::TF32, bad, nullptr); },
                                    {"no wgmma kernel", "splitk"});
  } else {
    expect_error<InvalidArgument>([&] { launch_wgmma(p, MathMode::TF32x3, nullptr); },
                                  {"compute capability 9.0"});
  }
}

TEST(Gemm, Errors) {
  const Tensor a = zeros(Shape{3, 4}), b = zeros(Shape{5, 6});
  expect_error<ShapeError>([&] { matmul(a, b); }, {"matmul", "(3, 4)", "(5, 6)", "inner dimensions 4 and 5"});
  expect_error<DTypeError>(
      [&] {
        matmul(zeros(Shape{3, 4}, DType::I32), zeros(Shape{4, 2}));
      },
      {"matmul", "a", "float32", "int32"});
  expect_error<ShapeError>(
      [&] {
        matmul(zeros(Shape{2, 3, 4}), zeros(Shape{3, 4, 5}));
      },
      {"batch dimensions", "(2, 3, 4)", "(3, 4, 5)"});
  Tensor c = zeros(Shape{3, 7});
  expect_error<ShapeError>([&] { gemm(a, zeros(Shape{4, 6}), c); }, {"gemm", "c (3, 7)", "(..., 3, 6)"});
  Tensor c2 = zeros(Shape{3, 6});
  expect_error<ShapeError>(
      [&] {
        gemm(a, zeros(Shape{4, 6}), c2, false, false, {}, zeros(Shape{5}));
      },
      {"bias (5)", "(6)"});
  expect_error<ShapeError>([&] { gemm(a, zeros(Shape{4, 6}), c2, true); }, {"op(a) (4, 3)", "trans_a=1"});
  Tensor cb = zeros(Shape{1, 6}).expand(Shape{3, 6});
  expect_error<InvalidArgument>([&] { gemm(a, zeros(Shape{4, 6}), cb); }, {"overlaps itself"});
  expect_error<ShapeError>(
      [&] {
        linear(zeros(Shape{2, 3}), zeros(Shape{4, 5}));
      },
      {"linear", "(2, 3)", "(4, 5)"});
  expect_error<ShapeError>([&] { matmul(zeros(Shape{}), a); }, {"matmul", "at least 1"});
  expect_error<InvalidArgument>([&] { matmul(Tensor(), a); }, {"undefined"});
  if (cuda_available()) {
    expect_error<DeviceError>(
        [&] {
          matmul(a, zeros(Shape{4, 2}, DType::F32, Device::cuda(0)));
        },
        {"matmul", "cpu", "cuda:0"});
    using namespace detail::gemm;
    Problem p;
    p.m = p.n = p.k = 8;
    EXPECT_FALSE(can_implement(p, {Kernel::Naive, 2}));
    EXPECT_FALSE(can_implement(p, {Kernel::Simt128x128, 1, MathMode::TF32}));
  }
}

}  // namespace
}  // namespace mt
