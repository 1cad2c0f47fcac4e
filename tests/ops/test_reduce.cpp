// Reductions through the op harness: every op over all / one / several axes with keepdim, row and column
// cases, awkward shapes and layouts, special values; determinism, float64-class accuracy at 2^28, > 2^31
// elements.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "minitensor/ops/reduce.h"
#include "minitensor/runtime/device.h"
#include "tests/common/gpu.h"
#include "tests/common/op_harness.h"

namespace mt {
namespace {

using test::InputSpec;
using test::Layout;
using test::OpCase;
using test::Tolerance;

const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Mean,   ReduceOp::Max,
                         ReduceOp::Min, ReduceOp::ArgMax, ReduceOp::ArgMin};
const Layout kLayouts[] = {Layout::Contiguous, Layout::Offset1, Layout::Transposed, Layout::Strided,
                           Layout::Expanded};

Tolerance tolerance(ReduceOp op) {
  return (op == ReduceOp::Sum || op == ReduceOp::Mean) ? Tolerance::close(1e-5, 1e-6) : Tolerance::exactly();
}

struct Axes {
  Shape shape;
  std::vector<std::int64_t> axes;
};

void run_reduce(ReduceOp op, const Axes& a, Layout layout, bool keepdim, double special) {
  OpCase c;
  c.name = std::string(op_name(op)) + " axes=" + Shape(a.axes).str() + (keepdim ? " keepdim" : "");
  c.inputs = {InputSpec{a.shape, layout, DType::F32, -2.0, 2.0, special}};
  c.tol = tolerance(op);
  const std::vector<std::int64_t> axes = a.axes;
  c.run = [=](const std::vector<Tensor>& x) { return reduce(op, x[0], axes, keepdim); };
  test::run_case(c);
}

TEST(Reduce, AllOps_ShapesAxesLayouts) {
  const std::vector<Axes> cases = {
      {{1}, {}},           {{7}, {}},         {{7}, {0}},        {{(1 << 20) + 3}, {}}, {{13, 17}, {}},
      {{13, 17}, {1}},     {{13, 17}, {0}},   {{13, 17}, {-1}},  {{64, 4099}, {1}},     {{64, 4099}, {0}},
      {{4099, 64}, {0}},   {{4099, 64}, {1}}, {{3, 5, 7}, {1}},  {{3, 5, 7}, {0}},      {{3, 5, 7}, {2}},
      {{2, 3, 4, 5}, {3}}, {{16, 8195}, {1}}, {{5000, 33}, {0}}, {{1, 1, 9}, {2}},      {{6, 1, 9}, {1}},
  };
  for (ReduceOp op : kOps) {
    for (const Axes& a : cases) {
      for (Layout layout : kLayouts) {
        for (bool keepdim : {false, true}) run_reduce(op, a, layout, keepdim, 0.0);
      }
    }
  }
}

TEST(Reduce, ValueOps_SeveralAxes) {
  const std::vector<Axes> cases = {
      {{3, 5, 7}, {0, 2}},    {{3, 5, 7}, {2, 0}},    {{3, 5, 7}, {0, 1}},          {{3, 5, 7}, {1, 2}},
      {{2, 3, 4, 5}, {0, 2}}, {{2, 3, 4, 5}, {1, 3}}, {{2, 3, 4, 5}, {0, 1, 2, 3}}, {{33, 2, 300}, {0, 2}},
  };
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
    for (const Axes& a : cases) {
      for (Layout layout : kLayouts) {
        for (bool keepdim : {false, true}) run_reduce(op, a, layout, keepdim, 0.0);
      }
    }
  }
}

TEST(Reduce, SpecialValues_NaN_Inf_SignedZero) {
  for (ReduceOp op : kOps) {
    for (const Axes& a : {Axes{{2000}, {}}, Axes{{40, 50}, {1}}, Axes{{40, 50}, {0}}}) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) run_reduce(op, a, layout, false, 0.02);
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor z = from_vector<float>({-0.f, 0.f, -0.f});
  EXPECT_FALSE(std::signbit(max(z).item<float>()));
  EXPECT_TRUE(std::signbit(min(z).item<float>()));
  const Tensor x = from_vector<float>({1.f, 5.f, nan, 5.f, nan});
  EXPECT_TRUE(std::isnan(max(x).item<float>()));
  EXPECT_EQ(argmax(x).item<std::int32_t>(), 2);  // NaN counts as the maximum; first occurrence
  EXPECT_EQ(argmin(x).item<std::int32_t>(), 2);
  EXPECT_EQ(argmax(from_vector<float>({1.f, 5.f, 5.f})).item<std::int32_t>(), 1);
}

TEST(Reduce, EmptyAndShapes) {
  EXPECT_EQ(sum(zeros({0})).item<float>(), 0.f);
  EXPECT_TRUE(std::isnan(mean(zeros({0, 3}), 0).to_vector<float>()[1]));
  EXPECT_EQ(sum(zeros({3, 0}), 0).shape(), (Shape{0}));
  EXPECT_EQ(sum(zeros({3, 4, 5}), {std::vector<std::int64_t>{0, 2}}, true).shape(), (Shape{1, 4, 1}));
  EXPECT_EQ(argmax(zeros({3, 4})).shape(), (Shape{}));
  EXPECT_EQ(reduced_shape(Shape{3, 4, 5}, std::vector<std::int64_t>{-1}, false, "t"), (Shape{3, 4}));
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(sum(x, 1).to_vector<float>(), (std::vector<float>{6, 15}));
  EXPECT_EQ(mean(x, 0).to_vector<float>(), (std::vector<float>{2.5f, 3.5f, 4.5f}));
  EXPECT_EQ(argmin(x, 1).to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 0}));
}

TEST(Reduce, ErrorsNameTheProblem) {
  const Tensor x = zeros({3, 4});
  const std::vector<std::int64_t> rep = {1, -1}, two = {0, 1};
  EXPECT_THROW(sum(x, rep), ShapeError);
  EXPECT_THROW(sum(x, 2), ShapeError);
  EXPECT_THROW(argmax(x, two), InvalidArgument);
  EXPECT_THROW(max(zeros({3, 0}), 1), ShapeError);
  EXPECT_THROW(argmin(zeros({0})), ShapeError);
  try {
    sum(zeros({3}, DType::I32));
    FAIL() << "no DTypeError";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sum"), std::string::npos) << e.what();
  }
}

TEST(Reduce, Cuda_DeterministicBitForBit) {
  MT_REQUIRE_GPU();
  const Tensor x = randn({(1 << 24) + 7}, 5, Device::cuda(0));
  const Tensor m = randn({4096, 4097}, 6, Device::cuda(0));
  for (int rep = 0; rep < 2; ++rep) {
    EXPECT_EQ(sum(x).item<float>(), sum(x).item<float>());
    EXPECT_EQ(sum(m, 0).to_vector<float>(), sum(m, 0).to_vector<float>());
    EXPECT_EQ(mean(m, 1).to_vector<float>(), mean(m, 1).to_vector<float>());
  }
}

TEST(Reduce, Cuda_Sum2Pow28_WithinFloat64Reference) {
  MT_REQUIRE_GPU();
  const std::int64_t n = std::int64_t(1) << 28;
  const Tensor g = rand({n}, 11, Device::cuda(0));
  const std::vector<float> host = g.to_vector<float>();
  double ref = 0;
  for (float v : host) ref += v;
  const double got = sum(g).item<float>();
  EXPECT_LE(std::fabs(got - ref), 1e-6 * std::fabs(ref)) << "got " << got << " float64 " << ref;
  // The offset-1 view and the column case too.
  double ref1 = ref - host[0];
  EXPECT_LE(std::fabs(sum(g.narrow(0, 1, n - 1)).item<float>() - ref1), 1e-6 * ref1);
  const std::vector<float> cols = sum(g.view({16384, 16384}), 0).to_vector<float>();
  double c0 = 0;
  for (std::int64_t r = 0; r < 16384; ++r) c0 += host[static_cast<size_t>(r * 16384)];
  EXPECT_NEAR(cols[0], c0, 1e-6 * c0);
}

TEST(Reduce, Cuda_Huge_2Pow31Plus5_Elements) {
  MT_REQUIRE_GPU();
  const std::int64_t n = (std::int64_t(1) << 31) + 5;
  std::size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  if (free_bytes < n * sizeof(float) + (std::size_t(1) << 30)) GTEST_SKIP() << "needs ~9 GiB free";
  Tensor x = zeros({n}, DType::F32, Device::cuda(0));
  // Marks on both sides of 2^31 and at the ends: a 32-bit index would lose some of them.
  x.narrow(0, 0, 3).fill_(1.0);
  x.narrow(0, (std::int64_t(1) << 31) - 1, 1).fill_(7.0);
  x.narrow(0, std::int64_t(1) << 31, 1).fill_(11.0);
  x.narrow(0, n - 4, 4).fill_(1000.0);  // n - 5 is 2^31 itself
  EXPECT_EQ(sum(x).item<float>(), 4021.f);
  EXPECT_EQ(max(x).item<float>(), 1000.f);
  x.narrow(0, n - 2, 1).fill_(2000.0);
  EXPECT_EQ(max(x).item<float>(), 2000.f);
  EXPECT_FLOAT_EQ(mean(x).item<float>(), static_cast<float>(5021.0 / static_cast<double>(n)));
}

// Rows of ties, of infinities only and of several NaNs: argmax and argmin name the first index of the winner
// (the first NaN where there is one), on the CPU and on the GPU, in the one-warp and the one-block row
// kernels.
TEST(Reduce, ArgRows_TiesInfinitiesAndNaNPickTheFirstIndex) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t len : {std::int64_t{37}, std::int64_t{1031}, std::int64_t{20000}}) {
    std::vector<float> h(static_cast<std::size_t>(6 * len));
    auto at = [&](std::int64_t r, std::int64_t i) -> float& {
      return h[static_cast<std::size_t>(r * len + i)];
    };
    for (std::int64_t i = 0; i < len; ++i) {
      at(0, i) = -inf;
      at(1, i) = inf;
      at(2, i) = 7.f;
      at(3, i) = static_cast<float>(i % 5);
      at(4, i) = -static_cast<float>(i % 3);
      at(5, i) = static_cast<float>(i);
    }
    at(3, len / 2) = nan;
    at(3, len - 1) = nan;
    at(5, 0) = nan;
    // Expected: row 3's first NaN, row 5's NaN at 0; otherwise the first maximum / minimum.
    const std::vector<std::int32_t> want_max = {0, 0, 0, static_cast<std::int32_t>(len / 2), 0, 0};
    const std::vector<std::int32_t> want_min = {0, 0, 0, static_cast<std::int32_t>(len / 2), 2, 0};
    const Tensor x = from_vector(h).view({6, len});
    EXPECT_EQ(argmax(x, 1).to_vector<std::int32_t>(), want_max) << "cpu, len " << len;
    EXPECT_EQ(argmin(x, 1).to_vector<std::int32_t>(), want_min) << "cpu, len " << len;
    if (!cuda_available()) continue;
    const Tensor g = x.to(Device::cuda(0));
    EXPECT_EQ(argmax(g, 1).to_vector<std::int32_t>(), want_max) << "gpu, len " << len;
    EXPECT_EQ(argmin(g, 1).to_vector<std::int32_t>(), want_min) << "gpu, len " << len;
  }
  MT_REQUIRE_GPU();
}

// A rank-0 tensor reduced over axis 0 or -1 is returned as it is (PyTorch's rule), on every path.
void check_rank0_axis(Device device) {
  const Tensor x = full({}, 2.5, DType::F32, device);
  for (std::int64_t axis : {0, -1}) {
    for (bool keepdim : {false, true}) {
      const Tensor s = sum(x, axis, keepdim);
      EXPECT_EQ(s.shape(), Shape{});
      EXPECT_EQ(s.item<float>(), 2.5f);
      EXPECT_EQ(max(x, axis, keepdim).item<float>(), 2.5f);
      EXPECT_EQ(mean(x, axis, keepdim).item<float>(), 2.5f);
      EXPECT_EQ(argmax(x, axis).item<std::int32_t>(), 0);
    }
  }
  EXPECT_THROW(sum(x, 1), ShapeError);
  EXPECT_THROW(sum(x, -2), ShapeError);
  const std::int64_t both[] = {0, -1};
  EXPECT_THROW(sum(x, both), ShapeError);  // the same axis twice
}

TEST(ReduceHostile, Rank0AxisCpu) {
  check_rank0_axis(Device::cpu());
}
TEST(ReduceHostile, Rank0AxisCuda) {
  MT_REQUIRE_GPU();
  check_rank0_axis(Device::cuda(0));
}

}  // namespace
}  // namespace mt
