// Softmax / log-softmax through the op harness: warp-, block- and two-pass row paths, the strided-axis path,
// layouts, large inputs (stability), -Inf / NaN rows; error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/reduce.h"
#include "minitensor/ops/softmax.h"
#include "minitensor/runtime/stream.h"
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
                   detail::SoftmaxKernel::TwoPass, detail::SoftmaxKernel::BulkLean,
                   detail::SoftmaxKernel::BulkLeanStatic}) {
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
      for (auto k : {detail::SoftmaxKernel::Auto, detail::SoftmaxKernel::BulkLean,
                     detail::SoftmaxKernel::BulkLeanStatic}) {
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

constexpr detail::SoftmaxKernel kLeanKernels[] = {detail::SoftmaxKernel::BulkLean,
                                                  detail::SoftmaxKernel::BulkLeanStatic};

Tolerance softmax_tol(bool log) {
  return log ? Tolerance::close(2e-5, 2e-6) : Tolerance::close(1e-7, 2e-5);
}

// Runs kernel k on x (rows of x.size(1)) into a buffer filled with a marker and compares with the reference.
void expect_kernel_matches(detail::SoftmaxKernel k, bool log, const Tensor& x, const char* what) {
  const std::int64_t n_rows = x.size(0), row_len = x.size(1);
  const Tensor xg = x.is_cpu() ? x.to(Device::cuda(0)) : x;
  const Tensor ref = log ? log_softmax(xg.cpu()) : softmax(xg.cpu());
  Tensor y = full(x.shape(), -7.0, DType::F32, Device::cuda(0));
  detail::launch_softmax(log, xg.data<float>(), y.data<float>(), n_rows, row_len, 1, current_stream(0), k);
  const auto r = test::compare(y, ref, softmax_tol(log));
  EXPECT_TRUE(r.ok) << what << ": kernel " << static_cast<int>(k) << (log ? " log " : " ") << x.shape() << " "
                    << r.summary();
}

// The lean ring, queued and static: one row, rows of one float4, odd float4 counts, rows that leave threads
// idle, more rows than blocks x stages (every stage and pair buffer reused), long rows (8 float4 per thread,
// two stages), the longest rows each kernel takes.
TEST(Softmax, Cuda_LeanRing_RowShapes) {
  MT_REQUIRE_GPU();
  const std::vector<Shape> shapes = {{1, 16384}, {3, 4},     {5, 12},     {7, 4004}, {1000, 1024},
                                     {2, 24576}, {3, 28672}, {700, 2052}, {2, 32768}};
  for (bool log : {false, true}) {
    for (const Shape& s : shapes) {
      const Tensor x = randn(s, 23, Device::cuda(0)) * 5.0;
      for (auto k : kLeanKernels) {
        // Rows of 128 KiB do not fit two stages of one block.
        if ((k == detail::SoftmaxKernel::BulkLean || k == detail::SoftmaxKernel::BulkLeanStatic) &&
            s[1] == 32768) {
          continue;
        }
        expect_kernel_matches(k, log, x, "shape");
      }
    }
  }
}

// Special values: a row of -Inf only (NaN), a row whose first half is -Inf only, one +Inf (NaN row), one NaN
// (NaN row), -Inf elements in a finite row, huge magnitudes, values near 1e4 (exponent arguments that an fma
// would round), a row where a single element is finite.
TEST(Softmax, Cuda_LeanRing_Specials) {
  MT_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  const std::int64_t n = 8192;
  std::vector<float> h = randn({9, n}, 31).to_vector<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    h[i] = -inf;
    if (i < n / 2) h[n + i] = -inf;
    h[5 * n + i] *= 1e30f;
    h[6 * n + i] = 1e4f + h[6 * n + i] * 1e-3f;
    h[8 * n + i] = -inf;
  }
  h[2 * n + 5] = inf;
  h[3 * n + 4000] = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t i = 0; i < n; i += 3) h[4 * n + i] = -inf;
  h[5 * n + 17] = -inf;
  h[8 * n + 6000] = 2.5f;
  const Tensor x = from_vector<float>(h, Shape{9, n});
  for (bool log : {false, true}) {
    for (auto k : kLeanKernels) expect_kernel_matches(k, log, x, "specials");
    expect_kernel_matches(detail::SoftmaxKernel::Auto, log, x, "specials");
  }
  // Through the op, with an offset-1 view (copied to an aligned buffer first) and a transposed one.
  for (bool log : {false, true}) {
    run_softmax(log, Shape{64, 8192}, -1, Layout::Offset1, -3.0, 3.0, 0.0005);
    run_softmax(log, Shape{64, 16384}, -1, Layout::Transposed, -3.0, 3.0, 0.0005);
  }
}

// What the bulk-copy kernels cannot take is an InvalidArgument, and Auto falls back: rows of a length not a
// multiple of 4 or not 16-byte aligned (offset-1 pointer), rows too long for two stages. No rows: no launch.
TEST(Softmax, Cuda_LeanRing_ErrorsAndFallbacks) {
  MT_REQUIRE_GPU();
  const Tensor x = randn({3, 65537}, 41, Device::cuda(0));
  Tensor y = empty({3, 65537}, DType::F32, Device::cuda(0));
  for (auto k : kLeanKernels) {
    EXPECT_THROW(
        detail::launch_softmax(false, x.data<float>(), y.data<float>(), 3, 4097, 1, current_stream(0), k),
        InvalidArgument);
    EXPECT_THROW(
        detail::launch_softmax(true, x.data<float>() + 1, y.data<float>(), 3, 4096, 1, current_stream(0), k),
        InvalidArgument);
    EXPECT_THROW(
        detail::launch_softmax(false, x.data<float>(), y.data<float>(), 2, 65536, 1, current_stream(0), k),
        InvalidArgument);
    EXPECT_NO_THROW(
        detail::launch_softmax(false, x.data<float>(), y.data<float>(), 0, 4096, 1, current_stream(0), k));
  }
  for (auto k : {detail::SoftmaxKernel::BulkLean, detail::SoftmaxKernel::BulkLeanStatic}) {
    EXPECT_THROW(
        detail::launch_softmax(false, x.data<float>(), y.data<float>(), 1, 32768, 1, current_stream(0), k),
        InvalidArgument);
  }
  // Auto on the same rows: offset-1 pointer (unaligned), 4097 floats (not a multiple of 4).
  for (bool log : {false, true}) {
    const Tensor ref1 = log ? log_softmax(x.cpu().view({-1}).narrow(0, 1, 3 * 4096).view({3, 4096}))
                            : softmax(x.cpu().view({-1}).narrow(0, 1, 3 * 4096).view({3, 4096}));
    Tensor y1 = empty({3, 4096}, DType::F32, Device::cuda(0));
    detail::launch_softmax(log, x.data<float>() + 1, y1.data<float>(), 3, 4096, 1, current_stream(0));
    EXPECT_TRUE(test::compare(y1, ref1, softmax_tol(log)).ok);
    const Tensor x2 = x.view({-1}).narrow(0, 0, 3 * 4097).view({3, 4097});
    expect_kernel_matches(detail::SoftmaxKernel::Auto, log, x2, "4097");
  }
}

// BulkLean's per-stream row queue: reused by launches in a row on one stream (each leaves it zero), launches
// on two streams at once (a queue each), more blocks than rows, and a launch captured into a CUDA graph
// (static rows there) replayed twice.
TEST(Softmax, Cuda_LeanRing_QueueReuseStreamsCapture) {
  MT_REQUIRE_GPU();
  const Shape s{1500, 4096};
  const Tensor x1 = randn(s, 51, Device::cuda(0)) * 4.0, x2 = randn(s, 52, Device::cuda(0)) * 4.0;
  const Tensor r1 = softmax(x1.cpu()), r2 = log_softmax(x2.cpu());
  auto run = [&](const Tensor& x, bool log, cudaStream_t stream, std::int64_t n_rows = 1500) {
    Tensor y = full(s, -7.0, DType::F32, Device::cuda(0));
    MT_CUDA_CHECK(cudaDeviceSynchronize());
    detail::launch_softmax(log, x.data<float>(), y.data<float>(), n_rows, s[1], 1, stream,
                           detail::SoftmaxKernel::BulkLean);
    return y;
  };
  auto check = [&](const Tensor& y, const Tensor& ref, bool log, const char* what) {
    MT_CUDA_CHECK(cudaDeviceSynchronize());
    const auto r = test::compare(y, ref, softmax_tol(log));
    EXPECT_TRUE(r.ok) << what << " " << r.summary();
  };
  for (int rep = 0; rep < 3; ++rep) {
    check(run(x1, false, current_stream(0)), r1, false, "same stream, softmax");
    check(run(x2, true, current_stream(0)), r2, true, "same stream, log");
  }
  const Tensor ya = run(x1, false, pool_stream(0, 1)), yb = run(x2, true, pool_stream(0, 2));
  check(ya, r1, false, "stream 1");
  check(yb, r2, true, "stream 2");
  // 3 rows: fewer than the blocks' first round.
  const Tensor y3 = run(x1, false, current_stream(0), 3);
  check(y3.narrow(0, 0, 3), r1.narrow(0, 0, 3), false, "3 rows");

  Stream stream(0);
  Tensor yg = full(s, -7.0, DType::F32, Device::cuda(0));
  MT_CUDA_CHECK(cudaDeviceSynchronize());
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  detail::launch_softmax(true, x2.data<float>(), yg.data<float>(), s[0], s[1], 1, stream,
                         detail::SoftmaxKernel::BulkLean);
  MT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 2; ++rep) {
    MT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MT_CUDA_CHECK(cudaStreamSynchronize(stream));
    check(yg, r2, true, "graph replay");
  }
  MT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MT_CUDA_CHECK(cudaGraphDestroy(graph));
  // The eager queue of that stream still works after the capture.
  check(run(x1, false, stream), r1, false, "after capture");
}

TEST(Softmax, Cuda_BulkErrors) {
  MT_REQUIRE_GPU();
  const Tensor x = zeros({2, 65536}, DType::F32, Device::cuda(0));
  Tensor y = empty({2, 65536}, DType::F32, Device::cuda(0));
  // 256 KiB rows: not two stages in shared memory.
  EXPECT_THROW(detail::launch_softmax(false, x.data<float>(), y.data<float>(), 2, 65536, 1, current_stream(0),
                                      detail::SoftmaxKernel::BulkLeanStatic),
               InvalidArgument);
  // Rows of 4097 floats are not 16-byte multiples.
  EXPECT_THROW(detail::launch_softmax(false, x.data<float>(), y.data<float>(), 2, 4097, 1, current_stream(0),
                                      detail::SoftmaxKernel::BulkLeanStatic),
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
