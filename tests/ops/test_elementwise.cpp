// Elementwise ops through the op harness: every op, awkward shapes, all five layouts, broadcasting patterns,
// special values; the reference checked against scalar float64 math; error paths; one > 2^31-element run.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/elementwise.h"
#include "minitensor/ops/functors.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/stream.h"
#include "tests/common/gpu.h"
#include "tests/common/op_harness.h"

namespace mt {
namespace {

using test::InputSpec;
using test::Layout;
using test::OpCase;
using test::Tolerance;

const Layout kLayouts[] = {Layout::Contiguous, Layout::Offset1, Layout::Transposed, Layout::Strided,
                           Layout::Expanded};
const UnaryOp kFloatUnary[] = {UnaryOp::Neg,       UnaryOp::Abs,  UnaryOp::Relu,     UnaryOp::Sigmoid,
                               UnaryOp::Tanh,      UnaryOp::Exp,  UnaryOp::Log,      UnaryOp::Sqrt,
                               UnaryOp::Rsqrt,     UnaryOp::Gelu, UnaryOp::GeluTanh, UnaryOp::Square,
                               UnaryOp::Reciprocal};
const BinaryOp kBinary[] = {BinaryOp::Add,     BinaryOp::Sub,     BinaryOp::Mul, BinaryOp::Div,
                            BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Pow};

std::vector<Shape> unary_shapes() {
  return {Shape{}, Shape{0}, Shape{1}, Shape{7}, Shape{13, 17}, Shape{3, 5, 31}, Shape{(1 << 20) + 3}};
}

Tolerance unary_tolerance(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
    case UnaryOp::Abs:
    case UnaryOp::Relu:
    case UnaryOp::Square:
      return Tolerance::exactly();
    case UnaryOp::Sqrt:
    case UnaryOp::Rsqrt:
    case UnaryOp::Reciprocal:
      return Tolerance::close(0, 1e-6);
    default:
      return Tolerance::close(1e-6, 2e-6);
  }
}

TEST(Elementwise, UnaryF32_AllOps_AllLayouts_Specials) {
  for (UnaryOp op : kFloatUnary) {
    for (const Shape& shape : unary_shapes()) {
      for (Layout layout : kLayouts) {
        OpCase c;
        c.name = op_name(op);
        InputSpec in{shape, layout, DType::F32, -3.0, 3.0, 0.05};
        if (op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt)
          in.lo = -0.5;  // mostly in domain
        c.inputs = {in};
        c.tol = unary_tolerance(op);
        c.run = [op](const std::vector<Tensor>& x) { return unary(op, x[0]); };
        c.run_out = [op](const std::vector<Tensor>& x, Tensor& out) { unary(op, x[0], out); };
        test::run_case(c);
      }
    }
  }
}

TEST(Elementwise, UnaryIntegers_I32_U8) {
  for (DType dt : {DType::I32, DType::U8}) {
    for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu, UnaryOp::Square}) {
      for (const Shape& shape : {Shape{1}, Shape{37}, Shape{7, 45}, Shape{(1 << 20) + 3}}) {
        for (Layout layout : kLayouts) {
          OpCase c;
          c.name = op_name(op);
          c.inputs = {InputSpec{shape, layout, dt, dt == DType::U8 ? 0.0 : -1000.0,
                                dt == DType::U8 ? 255.0 : 1000.0}};
          c.tol = Tolerance::exactly();
          c.run = [op](const std::vector<Tensor>& x) { return unary(op, x[0]); };
          test::run_case(c);
        }
      }
    }
  }
}

struct Pattern {
  Shape a, b;
};
const Pattern kPatterns[] = {
    {{5, 4}, {5, 4}},       {{5, 4}, {4}},
    {{5, 4}, {1, 4}},       {{5, 4}, {5, 1}},
    {{5, 1}, {1, 4}},       {{4}, {5, 4}},
    {{}, {5, 4}},           {{5, 4}, {}},
    {{3, 1, 7}, {1, 6, 1}}, {{2, 3, 4, 5}, {3, 1, 5}},
    {{0, 4}, {4}},          {{1}, {1}},
    {{129, 67}, {129, 67}}, {{(1 << 20) + 3}, {(1 << 20) + 3}},
    {{257, 33}, {33}},      {{1000, 3}, {1000, 1}},
};

TEST(Elementwise, BinaryF32_AllOps_BroadcastPatterns_Layouts) {
  for (BinaryOp op : kBinary) {
    for (const Pattern& p : kPatterns) {
      for (Layout la : kLayouts) {
        for (Layout lb : {Layout::Contiguous, Layout::Offset1, Layout::Transposed}) {
          OpCase c;
          c.name = op_name(op);
          const bool pow = op == BinaryOp::Pow;
          c.inputs = {InputSpec{p.a, la, DType::F32, pow ? 0.1 : -3.0, 3.0, pow ? 0.0 : 0.03},
                      InputSpec{p.b, lb, DType::F32, pow ? -2.0 : -3.0, 3.0, pow ? 0.0 : 0.03}};
          c.tol = (op == BinaryOp::Pow) ? Tolerance::close(1e-6, 2e-6) : Tolerance::exactly();
          c.run = [op](const std::vector<Tensor>& x) { return binary(op, x[0], x[1]); };
          c.run_out = [op](const std::vector<Tensor>& x, Tensor& out) { binary(op, x[0], x[1], out); };
          test::run_case(c);
        }
      }
    }
  }
}

TEST(Elementwise, BinaryIntegers_I32_U8) {
  for (DType dt : {DType::I32, DType::U8}) {
    for (BinaryOp op :
         {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum, BinaryOp::Minimum}) {
      for (const Pattern& p :
           {Pattern{{7, 45}, {7, 45}}, Pattern{{7, 45}, {45}}, Pattern{{(1 << 20) + 3}, {1}}}) {
        for (Layout la : {Layout::Contiguous, Layout::Offset1, Layout::Transposed}) {
          OpCase c;
          c.name = op_name(op);
          const double lo = dt == DType::U8 ? 0.0 : -500.0, hi = dt == DType::U8 ? 255.0 : 500.0;
          // Divisors stay away from zero.
          c.inputs = {InputSpec{p.a, la, dt, lo, hi},
                      InputSpec{p.b, Layout::Contiguous, dt, op == BinaryOp::Div ? 1.0 : lo, hi}};
          c.tol = Tolerance::exactly();
          c.run = [op](const std::vector<Tensor>& x) { return binary(op, x[0], x[1]); };
          test::run_case(c);
        }
      }
    }
  }
}

TEST(Elementwise, ScalarForms_Clamp_AllLayouts) {
  for (BinaryOp op : kBinary) {
    for (Layout layout : kLayouts) {
      for (bool first : {false, true}) {
        OpCase c;
        c.name = std::string(op_name(op)) + (first ? "_scalar_first" : "_scalar_second");
        const bool pow = op == BinaryOp::Pow;
        c.inputs = {InputSpec{Shape{37, 29}, layout, DType::F32, pow ? 0.1 : -3.0, 3.0}};
        c.tol = pow ? Tolerance::close(1e-6, 2e-6) : Tolerance::exactly();
        const double s = pow ? 1.7 : -1.25;
        c.run = [=](const std::vector<Tensor>& x) {
          return first ? scalar_binary(op, s, x[0]) : binary_scalar(op, x[0], s);
        };
        test::run_case(c);
      }
    }
  }
  for (DType dt : {DType::F32, DType::I32, DType::U8}) {
    for (Layout layout : kLayouts) {
      OpCase c;
      c.name = "clamp";
      c.inputs = {InputSpec{Shape{(1 << 20) + 3}, layout, dt, dt == DType::U8 ? 0.0 : -100.0, 100.0,
                            dt == DType::F32 ? 0.05 : 0.0}};
      c.tol = Tolerance::exactly();
      c.run = [](const std::vector<Tensor>& x) { return clamp(x[0], 3, 60); };
      c.run_out = [](const std::vector<Tensor>& x, Tensor& out) { clamp(x[0], 3, 60, out); };
      test::run_case(c);
    }
  }
  for (DType dt : {DType::I32, DType::U8}) {
    OpCase c;
    c.name = "int_scalar_ops";
    c.inputs = {InputSpec{Shape{1001}, Layout::Offset1, dt, 0.0, 200.0}};
    c.tol = Tolerance::exactly();
    c.run = [](const std::vector<Tensor>& x) { return (x[0] * 3.0 + 7.0) / 2.0 - 1.0; };
    test::run_case(c);
  }
}

TEST(Elementwise, InvertRgba_U8_Layouts) {
  for (const Shape& shape : {Shape{1, 4}, Shape{7, 4}, Shape{33, 17, 4}, Shape{(1 << 18) + 3, 4}}) {
    for (Layout layout : {Layout::Contiguous, Layout::Offset1, Layout::Expanded}) {
      OpCase c;
      c.name = "invert_rgba";
      c.inputs = {InputSpec{shape, layout, DType::U8, 0.0, 255.0}};
      c.tol = Tolerance::exactly();
      c.run = [](const std::vector<Tensor>& x) { return invert_rgba(x[0]); };
      c.run_out = [](const std::vector<Tensor>& x, Tensor& out) { invert_rgba(x[0], out); };
      test::run_case(c);
    }
  }
  const Tensor px = from_vector<std::uint8_t>({10, 20, 30, 40, 0, 255, 128, 7}, Shape{2, 4});
  EXPECT_EQ(invert_rgba(px).to_vector<std::uint8_t>(),
            (std::vector<std::uint8_t>{245, 235, 225, 40, 255, 0, 127, 7}));
}

// The reference itself against scalar float64 math, special values included.
TEST(Elementwise, ReferenceMatchesScalarFloat64Math) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {-3.5f, -1.f, -0.f, 0.f,    1e-40f, -3e-39f, 0.25f,
                                1.f,   2.5f, 88.f, -100.f, inf,    -inf,    nan};
  const Tensor x = from_vector(v);
  auto check = [&](UnaryOp op, double (*f)(double), double rel) {
    const std::vector<float> got = unary(op, x).to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) {
      const double e = f(static_cast<double>(v[i]));
      const float ef = static_cast<float>(e);
      if (std::isnan(ef)) {
        EXPECT_TRUE(std::isnan(got[i])) << op_name(op) << "(" << v[i] << ") = " << got[i] << ", expected NaN";
      } else if (std::isinf(ef)) {
        EXPECT_EQ(got[i], ef) << op_name(op) << "(" << v[i] << ")";
      } else {
        EXPECT_NEAR(got[i], e, 1e-37 + rel * std::fabs(e)) << op_name(op) << "(" << v[i] << ")";
      }
    }
  };
  check(
      UnaryOp::Exp, [](double a) { return std::exp(a); }, 3e-7);
  check(
      UnaryOp::Log, [](double a) { return std::log(a); }, 3e-7);
  check(
      UnaryOp::Tanh, [](double a) { return std::tanh(a); }, 3e-7);
  check(
      UnaryOp::Sigmoid, [](double a) { return 1.0 / (1.0 + std::exp(-a)); }, 3e-7);
  check(
      UnaryOp::Sqrt, [](double a) { return std::sqrt(a); }, 1e-7);
  check(
      UnaryOp::Rsqrt, [](double a) { return 1.0 / std::sqrt(a); }, 2e-7);
  check(
      UnaryOp::Reciprocal, [](double a) { return 1.0 / a; }, 1e-7);
  check(
      UnaryOp::Gelu, [](double a) { return 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0))); }, 3e-6);
  check(
      UnaryOp::GeluTanh,
      [](double a) { return 0.5 * a * (1.0 + std::tanh(0.7978845608028654 * (a + 0.044715 * a * a * a))); },
      3e-6);
  check(
      UnaryOp::Relu, [](double a) { return std::isnan(a) ? a : (a > 0 ? a : 0.0); }, 0);
  // NaN propagation and signed zeros of the exact ops.
  const Tensor a = from_vector<float>({nan, 1.f, -0.f, 2.f}), b = from_vector<float>({1.f, nan, 0.f, -inf});
  const auto mx = maximum(a, b).to_vector<float>(), mn = minimum(a, b).to_vector<float>();
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]) && std::isnan(mn[0]) && std::isnan(mn[1]));
  EXPECT_EQ(mx[3], 2.f);
  EXPECT_EQ(mn[3], -inf);
  EXPECT_TRUE(std::signbit(neg(from_vector<float>({0.f})).item<float>()));
}

// GELU as PyTorch computes it: gelu is the exact erf form (torch.nn.functional.gelu(x)), gelu_tanh the tanh
// approximation (approximate='tanh'). Values from float64 math (PyTorch's float64 results agree), checked
// on the CPU path and on the shared functors (tests/ops/test_gemm.cpp checks the GEMM epilogue's).
TEST(Elementwise, Gelu_PyTorchValues) {
  struct Known {
    float x;
    double gelu, gelu_tanh;
  };
  const Known known[] = {
      {1.f, 0.8413447460685429, 0.8411919906082768},    {-1.f, -0.15865525393145707, -0.15880800939172324},
      {3.f, 2.99595030590511, 2.996362607918227},       {-3.f, -0.00404969409489031, -0.0036373920817729943},
      {0.5f, 0.34573123063700656, 0.34571400982514394}, {0.f, 0.0, 0.0}};
  std::vector<float> xs;
  for (const Known& k : known) xs.push_back(k.x);
  const std::vector<float> exact = gelu(from_vector(xs)).to_vector<float>();
  const std::vector<float> approx = gelu_tanh(from_vector(xs)).to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const Known& k = known[i];
    EXPECT_NEAR(exact[i], k.gelu, 1e-6) << "gelu(" << k.x << ")";
    EXPECT_NEAR(approx[i], k.gelu_tanh, 1e-6) << "gelu_tanh(" << k.x << ")";
    EXPECT_NEAR(fn::gelu(k.x), k.gelu, 1e-6) << "fn::gelu(" << k.x << ")";
    EXPECT_NEAR(fn::gelu_tanh(k.x), k.gelu_tanh, 1e-6) << "fn::gelu_tanh(" << k.x << ")";
  }
  // The two forms differ by far more than the tolerance where it matters (|x| around 2-3).
  EXPECT_GT(std::fabs(exact[3] - approx[3]), 1e-4);
  EXPECT_STREQ(op_name(UnaryOp::Gelu), "gelu");
  EXPECT_STREQ(op_name(UnaryOp::GeluTanh), "gelu_tanh");
}

TEST(Elementwise, OperatorsAndBroadcastShapes) {
  const Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3}), b = from_vector<float>({10, 20, 30});
  EXPECT_EQ((a + b).to_vector<float>(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ((a - 1.0).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ((2.0 * a).to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ((12.0 / a).to_vector<float>(), (std::vector<float>{12, 6, 4, 3, 2.4f, 2}));
  EXPECT_EQ((-a).to_vector<float>()[0], -1.f);
  EXPECT_EQ(broadcast_shapes(Shape{3, 1, 7}, Shape{6, 1}, "t"), (Shape{3, 6, 7}));
  EXPECT_EQ(broadcast_shapes(Shape{}, Shape{2, 2}, "t"), (Shape{2, 2}));
}

template <class E>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(Elementwise, ErrorsNameTheProblem) {
  const Tensor a = zeros({3, 4}), b = zeros({5, 4}), i = zeros({3, 4}, DType::I32),
               u = zeros({3, 4}, DType::U8);
  const std::string bc = message_of<ShapeError>([&] { add(a, b); });
  EXPECT_NE(bc.find("(3, 4)"), std::string::npos) << bc;
  EXPECT_NE(bc.find("(5, 4)"), std::string::npos) << bc;
  EXPECT_NE(bc.find("add"), std::string::npos) << bc;
  const std::string dt = message_of<DTypeError>([&] { mul(a, i); });
  EXPECT_NE(dt.find("float32"), std::string::npos) << dt;
  EXPECT_NE(dt.find("int32"), std::string::npos) << dt;
  const std::string un = message_of<DTypeError>([&] { sigmoid(i); });
  EXPECT_NE(un.find("sigmoid"), std::string::npos) << un;
  EXPECT_NE(un.find("int32"), std::string::npos) << un;
  EXPECT_THROW(pow(i, i), DTypeError);
  EXPECT_THROW(exp(u), DTypeError);
  EXPECT_THROW(invert_rgba(a), DTypeError);
  EXPECT_THROW(invert_rgba(zeros({4, 3}, DType::U8)), ShapeError);
  EXPECT_THROW(binary_scalar(BinaryOp::Add, u, 300), InvalidArgument);
  EXPECT_THROW(binary_scalar(BinaryOp::Add, i, 0.5), InvalidArgument);
  EXPECT_THROW(binary_scalar(BinaryOp::Div, i, 0), InvalidArgument);
  EXPECT_THROW(div(i, i), InvalidArgument);  // zeros: integer division by zero on the CPU
  EXPECT_THROW(clamp(a, 2, 1), InvalidArgument);
  EXPECT_THROW(unary(UnaryOp::Neg, a, zeros({4, 3})), ShapeError);
  EXPECT_THROW(unary(UnaryOp::Neg, a, zeros({3, 4}, DType::I32)), DTypeError);
  EXPECT_THROW(add(Tensor(), a), InvalidArgument);
  if (cuda_available()) {
    const Tensor g = zeros({3, 4}, DType::F32, Device::cuda(0));
    const std::string dv = message_of<DeviceError>([&] { add(a, g); });
    EXPECT_NE(dv.find("cuda:0"), std::string::npos) << dv;
    EXPECT_THROW(unary(UnaryOp::Neg, g, zeros({3, 4})), DeviceError);
  }
}

// The contiguous path at every misalignment: the scalar prologue runs up to the output's next 128-byte line,
// inputs sharing the output's misalignment modulo 16 are read in packs, others as scalars. Operands are views
// at element offsets 0..35 into larger buffers; every element of each result is checked bit for bit.
TEST(Elementwise, Cuda_ContiguousAtEveryOffset_BitExact) {
  MT_REQUIRE_GPU();
  const Device g = Device::cuda(0);
  const std::int64_t cap = 5000;
  const Tensor xa = randn({cap + 64}, 11, g), xb = randn({cap + 64}, 12, g);
  const Tensor ha = xa.cpu(), hb = xb.cpu();
  for (std::int64_t n :
       {std::int64_t(1), std::int64_t(3), std::int64_t(31), std::int64_t(33), std::int64_t(1000), cap}) {
    for (std::int64_t oo : {0, 1, 2, 3, 4, 5, 17, 31, 32, 35}) {
      for (std::int64_t oa : {oo, oo + 4, oo + 1, std::int64_t(0)}) {
        const std::int64_t ob = (oa + 8) % 36;
        Tensor out_base = full({cap + 64}, -7.0, DType::F32, g);
        Tensor out = out_base.narrow(0, oo, n);
        binary(BinaryOp::Add, xa.narrow(0, oa, n), xb.narrow(0, ob, n), out);
        const Tensor ref = add(ha.narrow(0, oa, n), hb.narrow(0, ob, n));
        EXPECT_EQ(out.to_vector<float>(), ref.to_vector<float>())
            << "add n=" << n << " out+" << oo << " a+" << oa << " b+" << ob;
        unary(UnaryOp::Relu, xa.narrow(0, oa, n), out);
        EXPECT_EQ(out.to_vector<float>(), relu(ha.narrow(0, oa, n)).to_vector<float>())
            << "relu n=" << n << " out+" << oo << " x+" << oa;
        // Nothing outside the view was written.
        const std::vector<float> all = out_base.to_vector<float>();
        for (std::int64_t i = 0; i < cap + 64; ++i) {
          if (i < oo || i >= oo + n) {
            ASSERT_EQ(all[i], -7.f) << "element " << i << " outside the view";
          }
        }
      }
    }
  }
}

// The elementwise ladder (the seed's naive add, then the 16-byte contiguous path the ops take) computes the
// same relu and add, at awkward sizes and offsets.
TEST(Elementwise, Cuda_LadderRungsAgree) {
  MT_REQUIRE_GPU();
  const Device g = Device::cuda(0);
  const std::int64_t cap = (1 << 20) + 64;
  const Tensor xa = randn({cap}, 21, g), xb = randn({cap}, 22, g);
  for (std::int64_t n : {std::int64_t(1), std::int64_t(1027), std::int64_t(1 << 20)}) {
    StridedLayout l;
    l.rank = 1;
    l.shape[0] = n;
    l.stride[0] = 1;
    for (std::int64_t off : {0, 1, 3}) {
      const Tensor a = xa.narrow(0, off, n), b = xb.narrow(0, 40, n);
      Tensor y = full({n}, -7.0, DType::F32, g);
      detail::launch_unary(UnaryOp::Relu, DType::F32, y.data_ptr(), l, a.data_ptr(), l, n, current_stream(0));
      EXPECT_EQ(y.to_vector<float>(), relu(a.cpu()).to_vector<float>())
          << "relu n=" << n << " offset " << off;
      const std::vector<float> expect = add(a.cpu(), b.cpu()).to_vector<float>();
      detail::launch_binary(BinaryOp::Add, DType::F32, y.data_ptr(), l, a.data_ptr(), l, b.data_ptr(), l, n,
                            current_stream(0));
      EXPECT_EQ(y.to_vector<float>(), expect) << "add n=" << n << " offset " << off;
      Tensor z = full({n}, -7.0, DType::F32, g);
      detail::launch_add_naive(z.data<float>(), a.data<float>(), b.data<float>(), n, current_stream(0));
      EXPECT_EQ(z.to_vector<float>(), expect) << "naive add n=" << n << " offset " << off;
    }
  }
}

TEST(Elementwise, Cuda_Huge_2Pow31Plus5_Elements) {
  MT_REQUIRE_GPU();
  const std::int64_t n = (std::int64_t(1) << 31) + 5;
  std::size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  if (free_bytes < 3 * n * sizeof(float) + (std::size_t(1) << 30)) GTEST_SKIP() << "needs ~27 GiB free";
  const Device g = Device::cuda(0);
  Tensor x = zeros({n}, DType::F32, g);
  const std::int64_t marks[] = {0, (std::int64_t(1) << 31) - 1, std::int64_t(1) << 31, n - 1};
  for (size_t k = 0; k < 4; ++k) x.narrow(0, marks[k], 1).fill_(static_cast<double>(k + 1));
  for (Tensor in : {x, x.narrow(0, 1, n - 1)}) {  // aligned, and an offset-1 view
    const Tensor y = in * 2.0 + 1.0;
    const std::int64_t shift = in.numel() == n ? 0 : 1;
    for (size_t k = 0; k < 4; ++k) {
      const std::int64_t at = marks[k] - shift;
      if (at < 0) continue;
      EXPECT_EQ(y.narrow(0, at, 1).item<float>(), 2.f * (k + 1) + 1.f) << "element " << at;
    }
    EXPECT_EQ(y.narrow(0, y.numel() - 2, 1).item<float>(), 1.f);
  }
}

// ---------------------------------------------------------------- integer semantics, overlapping outputs
constexpr std::int32_t kIntMin = std::numeric_limits<std::int32_t>::min();
constexpr std::int32_t kIntMax = std::numeric_limits<std::int32_t>::max();

// The documented int32 rules (ops/elementwise.h) on `device`.
void check_int_semantics(Device device) {
  const Tensor a = from_vector<std::int32_t>({kIntMax, kIntMin, kIntMin, 7, -7, 46341}, device);
  const Tensor b = from_vector<std::int32_t>({1, -1, 1, -2, 2, 46341}, device);
  using V = std::vector<std::int32_t>;
  EXPECT_EQ(add(a, b).to_vector<std::int32_t>(), (V{kIntMin, kIntMax, kIntMin + 1, 5, -5, 92682}));
  EXPECT_EQ(sub(a, b).to_vector<std::int32_t>(), (V{kIntMax - 1, kIntMin + 1, kIntMax, 9, -9, 0}));
  EXPECT_EQ(mul(a, b).to_vector<std::int32_t>(), (V{kIntMax, kIntMin, kIntMin, -14, -14, -2147479015}));
  EXPECT_EQ(div(a, b).to_vector<std::int32_t>(), (V{kIntMax, kIntMin, kIntMin, -3, -3, 1}));
  EXPECT_EQ(neg(a).to_vector<std::int32_t>(), (V{-kIntMax, kIntMin, kIntMin, -7, 7, -46341}));
  EXPECT_EQ(abs(a).to_vector<std::int32_t>(), (V{kIntMax, kIntMin, kIntMin, 7, 7, 46341}));
  EXPECT_EQ(square(a).to_vector<std::int32_t>(), (V{1, 0, 0, 49, 49, -2147479015}));
  EXPECT_EQ(binary_scalar(BinaryOp::Div, a, -1).to_vector<std::int32_t>(),
            (V{-kIntMax, kIntMin, kIntMin, -7, 7, -46341}));
  EXPECT_EQ((a + 1.0).to_vector<std::int32_t>()[0], kIntMin);
  const Tensor u = from_vector<std::uint8_t>({250, 3}, device);
  EXPECT_EQ((u + 10.0).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{4, 13}));
}

// Every integer division by zero, on `device`: a typed error, the same on both devices.
void check_int_div_by_zero(Device device) {
  const Tensor a = from_vector<std::int32_t>({1, 2, 3, 4}, device);
  const Tensor z = from_vector<std::int32_t>({1, 1, 0, 1}, device);
  auto expect_div_error = [](auto&& f) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("division by zero"), std::string::npos) << e.what();
    }
  };
  expect_div_error([&] { div(a, z); });
  expect_div_error([&] { div(a, z.slice(0, 2, 3)); });  // broadcast divisor
  expect_div_error([&] { a / 0.0; });
  expect_div_error([&] { 5.0 / z; });
  expect_div_error([&] {
    div(from_vector<std::uint8_t>({4, 5}, device), from_vector<std::uint8_t>({0}, device));
  });
  expect_div_error([&] { scalar_binary(BinaryOp::Div, 1.0, from_vector<std::uint8_t>({2, 0}, device)); });
  EXPECT_NO_THROW(0.0 / a);
  EXPECT_EQ(div(a, a).to_vector<std::int32_t>(), (std::vector<std::int32_t>(4, 1)));  // still usable
}

TEST(ElementwiseHostile, IntegerSemanticsCpu) {
  check_int_semantics(Device::cpu());
}
TEST(ElementwiseHostile, IntegerSemanticsCuda) {
  MT_REQUIRE_GPU();
  check_int_semantics(Device::cuda(0));
}
TEST(ElementwiseHostile, IntegerDivisionByZeroCpu) {
  check_int_div_by_zero(Device::cpu());
  // Scanned before computing: `out` keeps what it held.
  Tensor out = full({4}, 9, DType::I32);
  EXPECT_THROW(binary(BinaryOp::Div, from_vector<std::int32_t>({1, 2, 3, 4}),
                      from_vector<std::int32_t>({1, 0, 1, 1}), out),
               InvalidArgument);
  EXPECT_EQ(out.to_vector<std::int32_t>(), (std::vector<std::int32_t>(4, 9)));
}
TEST(ElementwiseHostile, IntegerDivisionByZeroCuda) {
  MT_REQUIRE_GPU();
  check_int_div_by_zero(Device::cuda(0));
  // Strided and contiguous kernels both raise the flag.
  const Tensor a = full({64, 64}, 3, DType::I32, Device::cuda(0));
  Tensor z = full({64, 64}, 1, DType::I32, Device::cuda(0));
  z.select(0, 63).select(0, 5).fill_(0);
  EXPECT_THROW(div(a, z), InvalidArgument);
  EXPECT_THROW(div(a, z.t()), InvalidArgument);
}

TEST(ElementwiseHostile, FunctorsAreTheRule) {
  EXPECT_EQ(fn::add(kIntMax, 1), kIntMin);
  EXPECT_EQ(fn::sub(kIntMin, 1), kIntMax);
  EXPECT_EQ(fn::mul(kIntMin, -1), kIntMin);
  EXPECT_EQ(fn::neg(kIntMin), kIntMin);
  EXPECT_EQ(fn::div(kIntMin, -1), kIntMin);
  EXPECT_EQ(fn::div(7, 0), 0);
  EXPECT_EQ(fn::div(std::uint8_t(7), std::uint8_t(0)), 0);
  EXPECT_EQ(fn::div(-7, 2), -3);
  EXPECT_TRUE(std::isinf(fn::div(1.f, 0.f)));
}

TEST(ElementwiseHostile, OverlappingOutIsRejected) {
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = zeros({1, 3});
  Tensor bcast = row.expand({2, 3});
  try {
    unary(UnaryOp::Neg, x, bcast);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("neg"), std::string::npos) << what;
    EXPECT_NE(what.find("overlaps itself"), std::string::npos) << what;
  }
  EXPECT_THROW(binary(BinaryOp::Add, x, x, bcast), InvalidArgument);
  EXPECT_THROW(binary_scalar(BinaryOp::Mul, x, 2.0, bcast), InvalidArgument);
  EXPECT_THROW(scalar_binary(BinaryOp::Sub, 2.0, x, bcast), InvalidArgument);
  EXPECT_THROW(clamp(x, 0, 1, bcast), InvalidArgument);
  Tensor windows = zeros({8}).as_strided({2, 3}, {2, 1}, 0);
  EXPECT_THROW(unary(UnaryOp::Relu, x, windows), InvalidArgument);
  const Tensor px = zeros({2, 4}, DType::U8);
  EXPECT_THROW(invert_rgba(px, zeros({1, 4}, DType::U8).expand({2, 4})), InvalidArgument);
  EXPECT_EQ(row.to_vector<float>(), std::vector<float>(3, 0.f));
  Tensor ok = zeros({3, 2}).t();  // a transposed out does not overlap
  EXPECT_NO_THROW(unary(UnaryOp::Neg, x, ok));
  EXPECT_EQ(ok.contiguous().to_vector<float>(), (std::vector<float>{-1, -2, -3, -4, -5, -6}));
}

}  // namespace
}  // namespace mt
