// layer_norm / rms_norm through the op harness: a warp per row, a block of 256 or 1024 per row (16-byte and
// scalar loads), the composed path for rows too long to keep on chip; layouts, weight and bias present or
// absent, large offsets (cancellation), NaN / Inf; PyTorch's values; error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "minitensor/ops/norm.h"
#include "tests/common/gpu.h"
#include "tests/common/op_harness.h"

namespace mt {
namespace {

using test::InputSpec;
using test::Layout;
using test::OpCase;
using test::Tolerance;

// x of `shape` in `layout`; weight and bias (last dim) when asked.
void run_norm(bool rms, const Shape& shape, Layout layout, bool weight, bool bias, double lo = -2,
              double hi = 2, double special = 0.0) {
  OpCase c;
  c.name = std::string(rms ? "rms_norm" : "layer_norm") + (weight ? " weight" : "") + (bias ? " bias" : "");
  const Shape ps{shape.empty() ? 1 : shape.back()};
  c.inputs = {InputSpec{shape, layout, DType::F32, lo, hi, special}, InputSpec{ps, Layout::Contiguous},
              InputSpec{ps, Layout::Offset1}};
  c.tol = Tolerance::close(2e-5, 2e-5);
  c.run = [=](const std::vector<Tensor>& in) {
    const Tensor w = weight ? in[1] : Tensor(), b = bias ? in[2] : Tensor();
    return rms ? rms_norm(in[0], w) : layer_norm(in[0], w, b);
  };
  test::run_case(c);
}

TEST(Norm, Rows_AllPaths_Layouts) {
  // 7, 33, 768, 1000: a warp per row; 1023, 3001: 256 threads, scalar; 8192: 256 threads, float4; 20000: 1024
  // threads; 40000: composed from eager ops. Grids under a wave load the weight and bias with the row, wider
  // ones after the reductions: (2000, 768) and (300, 3001) take a block per SM or more.
  const std::vector<Shape> shapes = {{1},        {7},        {5, 33},       {64, 768},   {2000, 768},
                                     {3, 1000},  {2, 1023},  {4, 3001},     {300, 3001}, {3, 8192},
                                     {2, 20000}, {2, 40000}, {2, 3, 4, 129}};
  for (bool rms : {false, true})
    for (const Shape& s : shapes)
      for (Layout layout :
           {Layout::Contiguous, Layout::Offset1, Layout::Transposed, Layout::Strided, Layout::Expanded})
        run_norm(rms, s, layout, true, !rms);
}

TEST(Norm, WeightAndBiasOptional) {
  for (bool rms : {false, true})
    for (bool w : {false, true})
      for (bool b : {false, true}) {
        if (rms && b) continue;
        run_norm(rms, {9, 256}, Layout::Contiguous, w, b);
        run_norm(rms, {9, 255}, Layout::Contiguous, w, b);
      }
}

TEST(Norm, LargeOffsetNoCancellation_Specials) {
  for (bool rms : {false, true}) {
    run_norm(rms, {16, 768}, Layout::Contiguous, true, !rms, 1000.0, 1000.5);   // mean >> spread
    run_norm(rms, {16, 768}, Layout::Contiguous, true, !rms, -2.0, 2.0, 0.01);  // NaN / Inf rows
  }
}

// Values from torch.nn.functional.layer_norm / rms_norm (float32) on x = [1, 2, 3, 4].
TEST(Norm, MatchesPyTorch) {
  const Tensor x = from_vector(std::vector<float>{1, 2, 3, 4}, Shape{1, 4});
  const std::vector<float> ln = layer_norm(x).to_vector<float>();
  const float ln_ref[] = {-1.3416355f, -0.4472118f, 0.4472118f, 1.3416355f};
  const std::vector<float> rn = rms_norm(x).to_vector<float>();
  const float rn_ref[] = {0.3651484f, 0.7302967f, 1.0954452f, 1.4605935f};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(ln[i], ln_ref[i], 1e-6) << i;
    EXPECT_NEAR(rn[i], rn_ref[i], 1e-6) << i;
  }
}

TEST(Norm, Errors) {
  const Tensor x = rand({4, 8}, 1);
  EXPECT_THROW(layer_norm(zeros({4, 8}, DType::I32)), DTypeError);
  EXPECT_THROW(layer_norm(x, rand({7}, 2)), ShapeError);
  EXPECT_THROW(layer_norm(x, rand({8}, 2), rand({8, 1}, 3)), ShapeError);
  EXPECT_THROW(rms_norm(x, zeros({8}, DType::I32)), DTypeError);
  EXPECT_THROW(layer_norm(x, {}, {}, -1.0), InvalidArgument);
  EXPECT_THROW(layer_norm(x, {}, {}, std::numeric_limits<double>::quiet_NaN()), InvalidArgument);
  EXPECT_THROW(layer_norm(Tensor()), Error);
  EXPECT_THROW(layer_norm(full({}, 1.0)), ShapeError);
  EXPECT_EQ(layer_norm(rand({0, 8}, 1)).shape(), (Shape{0, 8}));
  if (cuda_available()) {
    EXPECT_THROW(layer_norm(x.cuda(), rand({8}, 2)), DeviceError);  // weight on another device
  }
}

}  // namespace
}  // namespace mt
