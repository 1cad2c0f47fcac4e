// Softmax / log-softmax through the op harness: warp-, block- and two-pass row paths, the strided-axis path,
// layouts, large inputs (stability), -Inf / NaN rows; error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/kernels.h"
#include "ops/reduce.h"
#include "runtime/stream.h"
#include "tests/common/gpu.h"
#include "tests/common/op_harness.h"

namespace mt {
namespace {

using test::InputSpec;
using test::Layout;
using test::OpCase;
using test::Tolerance;

void run_softmax(bool log, const Shape& shape, std::int64_t axis, Layout layout, double lo, double hi,
                 double special = 0.0) {
  OpCase c;
  c.name = std::string(log ? "log_softmax" : "softmax") + " axis=" + std::to_string(axis);
  c.inputs = {InputSpec{shape, layout, DType::F32, lo, hi, special}};
  c.tol = log ? Tolerance::close(2e-5, 2e-6) : Tolerance::close(1e-7, 2e-5);
  c.run = [=](const std::vector<Tensor>& x) { return log ? log_softmax(x[0], axis) : softmax(x[0], axis); };
  test::run_case(c);
}

TEST(Softmax, Rows_AllPaths_Layouts) {
  // 7, 33, 1000: a warp per row; 3001 and 16384: a block per row (scalar / float4), 40000: two passes.
  const std::vector<Shape> shapes = {{1},       {7},        {5, 33},    {3, 1000},
                                     {4, 3001}, {2, 16384}, {3, 40000}, {2, 3, 4, 129}};
  for (bool log : {false, true}) {
    for (const Shape& s : shapes) {
      for (Layout layout :
           {Layout::Contiguous, Layout::Offset1, Layout::Transposed, Layout::Strided, Layout::Expanded}) {
        run_softmax(log, s, -1, layout, -8.0, 8.0);
      }
    }
  }
}

TEST(Softmax, StridedAxis_AllDims) {
  for (bool log : {false, true}) {
    for (std::int64_t axis : {0, 1, 2}) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        run_softmax(log, Shape{3, 50, 7}, axis, layout, -8.0, 8.0);
        run_softmax(log, Shape{1000, 3, 2}, axis, layout, -8.0, 8.0);
      }
    }
  }
}

TEST(Softmax, LargeInputsStable_Specials) {
  for (bool log : {false, true}) {
    run_softmax(log, Shape{4, 2000}, -1, Layout::Contiguous, -1e30, 1e30);
    run_softmax(log, Shape{4, 2000}, -1, Layout::Contiguous, 1e4, 1.0001e4);
    run_softmax(log, Shape{64, 24}, -1, Layout::Contiguous, -3.0, 3.0, 0.02);
    run_softmax(log, Shape{64, 2048}, -1, Layout::Contiguous, -3.0, 3.0, 0.0005);
    run_softmax(log, Shape{24, 64}, 0, Layout::Contiguous, -3.0, 3.0, 0.02);
  }
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> y = softmax(from_vector<float>({-inf, 0.f, -inf, 0.f})).to_vector<float>();
  EXPECT_EQ(y, (std::vector<float>{0.f, 0.5f, 0.f, 0.5f}));
  EXPECT_TRUE(std::isnan(softmax(from_vector<float>({-inf, -inf})).to_vector<float>()[0]));
  EXPECT_EQ(softmax(from_vector<float>({5.f}, Shape{})).item<float>(), 1.f);
}

TEST(Softmax, Cuda_EveryRowKernelMatchesReference) {
  MT_REQUIRE_GPU();
  for (bool log : {false, true}) {
    const Tensor x = randn({37, 4096}, 9, Device::cuda(0)) * 4.0;
    const Tensor ref = log ? log_softmax(x.cpu()) : softmax(x.cpu());
    for (auto k : {detail::SoftmaxKernel::RegisterCached, detail::SoftmaxKernel::SharedCached,
                   detail::SoftmaxKernel::SharedPipelined, detail::SoftmaxKernel::TwoPass,
                   detail::SoftmaxKernel::Bulk, detail::SoftmaxKernel::BulkStreaming}) {
      Tensor y = empty({37, 4096}, DType::F32, Device::cuda(0));
      detail::launch_softmax(log, x.data<float>(), y.data<float>(), 37, 4096, 1, current_stream(0), k);
      const auto r = test::compare(y, ref, log ? Tolerance::close(2e-5, 2e-6) : Tolerance::close(1e-7, 2e-5));
      EXPECT_TRUE(r.ok) << "kernel " << static_cast<int>(k) << (log ? " log " : " ") << r.summary();
    }
  }
}

// The bulk-copy ring (Auto's kernel for aligned rows of 16 KiB and more): more rows than blocks x stages, so
// every stage is refilled and its barrier phase flips; rows that leave threads idle (5000, 18000 floats);
// special values and huge magnitudes in rows of that length.
TEST(Softmax, Cuda_BulkRing_RowLengths_Specials) {
  MT_REQUIRE_GPU();
  for (bool log : {false, true}) {
    for (const Shape& s : {Shape{1100, 4096}, Shape{400, 16384}, Shape{37, 5000}, Shape{9, 18000}}) {
      const Tensor x = randn(s, 17, Device::cuda(0)) * 6.0;
      const Tensor ref = log ? log_softmax(x.cpu()) : softmax(x.cpu());
      for (auto k :
           {detail::SoftmaxKernel::Auto, detail::SoftmaxKernel::Bulk, detail::SoftmaxKernel::BulkStreaming}) {
        Tensor y = full(s, -7.0, DType::F32, Device::cuda(0));
        detail::launch_softmax(log, x.data<float>(), y.data<float>(), s[0], s[1], 1, current_stream(0), k);
        const auto r =
            test::compare(y, ref, log ? Tolerance::close(2e-5, 2e-6) : Tolerance::close(1e-7, 2e-5));
        EXPECT_TRUE(r.ok) << "kernel " << static_cast<int>(k) << (log ? " log " : " ") << s << " "
                          << r.summary();
      }
    }
    run_softmax(log, Shape{300, 6000}, -1, Layout::Contiguous, -3.0, 3.0, 0.0005);
    run_softmax(log, Shape{300, 6000}, -1, Layout::Offset1, -3.0, 3.0, 0.0005);
    run_softmax(log, Shape{140, 8192}, -1, Layout::Contiguous, -1e30, 1e30);
    run_softmax(log, Shape{140, 8192}, -1, Layout::Contiguous, 1e4, 1.0001e4);
  }
  // Rows of -Inf only are NaN; a row holding +Inf is NaN; -Inf elements elsewhere give 0.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> h(3 * 8192, 0.f);
  for (int i = 0; i < 8192; ++i) h[i] = -inf;
  h[8192 + 5] = inf;
  h[2 * 8192 + 7] = -inf;
  const Tensor x = from_vector<float>(h, Shape{3, 8192}, Device::cuda(0));
  const std::vector<float> y = softmax(x).to_vector<float>();
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[8191]));
  EXPECT_TRUE(std::isnan(y[8192]) && std::isnan(y[8192 + 5]));
  EXPECT_EQ(y[2 * 8192 + 7], 0.f);
  EXPECT_FLOAT_EQ(y[2 * 8192], 1.f / 8191.f);
}

TEST(Softmax, Cuda_BulkErrors) {
  MT_REQUIRE_GPU();
  const Tensor x = zeros({2, 65536}, DType::F32, Device::cuda(0));
  Tensor y = empty({2, 65536}, DType::F32, Device::cuda(0));
  // 256 KiB rows: not two stages in shared memory.
  EXPECT_THROW(detail::launch_softmax(false, x.data<float>(), y.data<float>(), 2, 65536, 1, current_stream(0),
                                      detail::SoftmaxKernel::Bulk),
               InvalidArgument);
  // Rows of 4097 floats are not 16-byte multiples.
  EXPECT_THROW(detail::launch_softmax(false, x.data<float>(), y.data<float>(), 2, 4097, 1, current_stream(0),
                                      detail::SoftmaxKernel::BulkStreaming),
               InvalidArgument);
}

TEST(Softmax, Errors) {
  EXPECT_THROW(softmax(zeros({3, 4}), 2), ShapeError);
  EXPECT_THROW(log_softmax(zeros({3, 4}, DType::I32)), DTypeError);
  EXPECT_THROW(softmax(Tensor()), InvalidArgument);
  EXPECT_EQ(softmax(zeros({0, 4})).shape(), (Shape{0, 4}));
}

}  // namespace
}  // namespace mt
