#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "minitensor/runtime/stream.h"
#include "minitensor/tensor/eigen.h"
#include "minitensor/tensor/overlap.h"
#include "minitensor/tensor/tensor.h"
#include "tests/common/gpu.h"

namespace mt {
namespace {

std::vector<float> iota(std::int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  return v;
}

// ---------------------------------------------------------------- shapes

TEST(Shape, BasicsAndPrinting) {
  Shape s{3, 4, 5};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 60);
  EXPECT_EQ(s.str(), "(3, 4, 5)");
  EXPECT_EQ(Shape{}.str(), "()");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ(contiguous_strides(s), (Shape{20, 5, 1}));
  EXPECT_EQ(contiguous_strides(Shape{0, 3}), (Shape{3, 1}));
  EXPECT_THROW((Shape{1, 2, 3, 4, 5, 6, 7, 8, 9}), ShapeError);
}

TEST(Shape, ValidationNamesTheProblem) {
  try {
    empty({3, -2});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("negative extent -2"), std::string::npos) << e.what();
  }
  try {
    empty({1LL << 40, 1LL << 40});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("overflows"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(empty({0, 1LL << 62}));  // zero elements: no overflow
  EXPECT_THROW(wrap_dim(2, 2, "x"), ShapeError);
  EXPECT_EQ(wrap_dim(-1, 2, "x"), 1);
}

TEST(Shape, BroadcastAndInfer) {
  EXPECT_EQ(broadcast_shapes(Shape{4, 1, 3}, Shape{5, 1}, std::string_view("x")), (Shape{4, 5, 3}));
  EXPECT_EQ(broadcast_shapes(Shape{}, Shape{2}, std::string_view("x")), (Shape{2}));
  try {
    broadcast_shapes(Shape{3, 4}, Shape{5, 4}, std::string_view("add"));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("add: cannot broadcast (3, 4) with (5, 4) (dim 0: 3 vs 5)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(infer_shape(Shape{-1, 3}, 12, Shape{12}, "view"), (Shape{4, 3}));
  EXPECT_EQ(infer_shape(Shape{2, 6}, 12, Shape{12}, "view"), (Shape{2, 6}));
  EXPECT_THROW(infer_shape(Shape{-1, -1}, 12, Shape{12}, "view"), ShapeError);
  EXPECT_THROW(infer_shape(Shape{5, -1}, 12, Shape{12}, "view"), ShapeError);
  EXPECT_THROW(infer_shape(Shape{-2, 6}, 12, Shape{12}, "view"), ShapeError);
  EXPECT_THROW(infer_shape(Shape{2, 5}, 12, Shape{12}, "view"), ShapeError);
}

// ---------------------------------------------------------------- factories

TEST(Factories, FillsAndRanges) {
  EXPECT_EQ(zeros({2, 3}).to_vector<float>(), std::vector<float>(6, 0.f));
  EXPECT_EQ(ones({4}, DType::I32).to_vector<std::int32_t>(), std::vector<std::int32_t>(4, 1));
  EXPECT_EQ(full({3}, 7, DType::U8).to_vector<std::uint8_t>(), std::vector<std::uint8_t>(3, 7));
  EXPECT_EQ(arange(5).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(1, 2, 0.25).to_vector<float>(), (std::vector<float>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(arange(5, 0, -2, DType::I32).to_vector<std::int32_t>(), (std::vector<std::int32_t>{5, 3, 1}));
  EXPECT_EQ(arange(3, 3).numel(), 0);
  EXPECT_THROW(arange(0, 1, 0), InvalidArgument);
  EXPECT_THROW(full({2}, 256, DType::U8), InvalidArgument);
  EXPECT_THROW(full({2}, 1.5, DType::I32), InvalidArgument);
  EXPECT_THROW(full({2}, -1, DType::U8), InvalidArgument);
}

TEST(Factories, SeededRandomIsReproducibleAndInRange) {
  const auto a = rand({1000}, 7).to_vector<float>();
  const auto b = rand({1000}, 7).to_vector<float>();
  const auto c = rand({1000}, 8).to_vector<float>();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0;
  for (float v : a) {
    ASSERT_GE(v, 0.f);
    ASSERT_LT(v, 1.f);
    mean += v;
  }
  EXPECT_NEAR(mean / 1000, 0.5, 0.05);
  const auto n = randn({20000}, 3).to_vector<float>();
  double m = 0, m2 = 0;
  for (float v : n) {
    ASSERT_TRUE(std::isfinite(v));
    m += v;
    m2 += double(v) * v;
  }
  m /= n.size();
  EXPECT_NEAR(m, 0.0, 0.03);
  EXPECT_NEAR(m2 / n.size() - m * m, 1.0, 0.05);
}

TEST(Factories, FromVectorChecksSize) {
  EXPECT_THROW(from_vector(std::vector<float>{1, 2, 3}, Shape{2, 2}), ShapeError);
  const Tensor t = from_vector(std::vector<std::int32_t>{1, 2, 3, 4}, Shape{2, 2});
  EXPECT_EQ(t.dtype(), DType::I32);
  EXPECT_EQ(t.select(0, 1).select(0, 0).item<std::int32_t>(), 3);
}

TEST(Factories, ItemAndDtypeChecks) {
  const Tensor t = from_vector(std::vector<float>{2.5f}, Shape{});
  EXPECT_EQ(t.dim(), 0);
  EXPECT_EQ(t.item<float>(), 2.5f);
  EXPECT_THROW(t.item<std::int32_t>(), DTypeError);
  EXPECT_THROW(t.data<std::uint8_t>(), DTypeError);
  EXPECT_THROW(zeros({2}).item<float>(), ShapeError);
  Tensor undefined;
  EXPECT_FALSE(undefined.defined());
  EXPECT_THROW(undefined.data_ptr(), InvalidArgument);
  EXPECT_THROW(undefined.clone(), InvalidArgument);
  EXPECT_EQ(undefined.str(), "Tensor(undefined)");
}

// ---------------------------------------------------------------- views

TEST(Views, TransposePermuteAgainstHandComputedStrides) {
  const Tensor x = from_vector(iota(24), Shape{2, 3, 4});
  EXPECT_EQ(x.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(x.is_contiguous());
  const Tensor t = x.transpose(0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.storage(), x.storage());
  const Tensor p = x.permute({1, 2, 0});
  EXPECT_EQ(p.shape(), (Shape{3, 4, 2}));
  EXPECT_EQ(p.strides(), (Shape{4, 1, 12}));
  // Element (i, j, k) of p is x(k, i, j) = 12k + 4i + j.
  const auto v = p.contiguous().to_vector<float>();
  EXPECT_EQ(v[0 * 8 + 1 * 2 + 1], 12 * 1 + 4 * 0 + 1);
  EXPECT_EQ(v[2 * 8 + 3 * 2 + 0], 4 * 2 + 3);
  EXPECT_THROW(x.permute({0, 1}), ShapeError);
  EXPECT_THROW(x.permute({0, 1, 1}), ShapeError);
  EXPECT_THROW(x.transpose(0, 3), ShapeError);
  EXPECT_THROW(x.t(), ShapeError);
}

TEST(Views, ViewAndReshape) {
  const Tensor x = from_vector(iota(12), Shape{3, 4});
  EXPECT_EQ(x.view({4, 3}).strides(), (Shape{3, 1}));
  EXPECT_EQ(x.view({-1}).shape(), (Shape{12}));
  EXPECT_EQ(x.view({2, -1, 2}).shape(), (Shape{2, 3, 2}));
  EXPECT_THROW(x.view({5, -1}), ShapeError);
  EXPECT_THROW(x.view({-1, -1}), ShapeError);
  EXPECT_THROW(x.view({13}), ShapeError);
  const Tensor t = x.t();  // (4, 3) strides (1, 4)
  try {
    t.view({12});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("reshape"), std::string::npos) << e.what();
  }
  // Splitting a transposed dim is possible without a copy.
  const Tensor split = t.view({2, 2, 3});
  EXPECT_EQ(split.strides(), (Shape{2, 1, 4}));
  EXPECT_EQ(split.storage(), x.storage());
  const Tensor r = t.reshape({12});  // needs a copy
  EXPECT_NE(r.storage(), x.storage());
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(x.reshape({6, 2}).storage(), x.storage());
  EXPECT_EQ(x.flatten().shape(), (Shape{12}));
}

TEST(Views, SliceNarrowSelect) {
  const Tensor x = from_vector(iota(20), Shape{4, 5});
  const Tensor s = x.slice(1, 1, 5, 2);  // columns 1, 3
  EXPECT_EQ(s.shape(), (Shape{4, 2}));
  EXPECT_EQ(s.strides(), (Shape{5, 2}));
  EXPECT_EQ(s.offset(), 1);
  EXPECT_EQ(s.contiguous().to_vector<float>(), (std::vector<float>{1, 3, 6, 8, 11, 13, 16, 18}));
  EXPECT_EQ(x.slice(0, -2, 100).shape(), (Shape{2, 5})) << "Python semantics: clamped";
  EXPECT_EQ(x.slice(0, 3, 1).shape(), (Shape{0, 5}));
  EXPECT_THROW(x.slice(0, 0, 4, 0), InvalidArgument);
  EXPECT_EQ(x.narrow(1, 2, 3).offset(), 2);
  EXPECT_THROW(x.narrow(1, 3, 3), ShapeError);
  EXPECT_THROW(x.narrow(1, -1, 1), ShapeError);
  const Tensor row = x.select(0, -1);
  EXPECT_EQ(row.shape(), (Shape{5}));
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{15, 16, 17, 18, 19}));
  EXPECT_THROW(x.select(0, 4), ShapeError);
  EXPECT_EQ(x.select(1, 2).select(0, 3).item<float>(), 17.f);
}

TEST(Views, SqueezeUnsqueezeExpand) {
  const Tensor x = from_vector(iota(3), Shape{1, 3, 1});
  EXPECT_EQ(x.squeeze().shape(), (Shape{3}));
  EXPECT_EQ(x.squeeze(0).shape(), (Shape{3, 1}));
  EXPECT_EQ(x.squeeze(1).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{1, 3, 1, 1}));
  EXPECT_EQ(x.squeeze().unsqueeze(0).shape(), (Shape{1, 3}));
  const Tensor e = x.squeeze().unsqueeze(0).expand({4, 3});
  EXPECT_EQ(e.strides(), (Shape{0, 1}));
  EXPECT_EQ(e.contiguous().to_vector<float>(), (std::vector<float>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(x.squeeze().expand({2, -1}).shape(), (Shape{2, 3}));
  try {
    x.squeeze().expand({2, 4});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(3)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(x.expand({3}), ShapeError);
}

TEST(Views, AsStridedIsBoundsChecked) {
  const Tensor x = zeros({10});
  EXPECT_NO_THROW(x.as_strided({3, 3}, {3, 1}, 1));
  EXPECT_THROW(x.as_strided({3, 4}, {4, 1}, 0), ShapeError);  // reaches element 11
  EXPECT_THROW(x.as_strided({2}, {-1}, 5), ShapeError);
  EXPECT_THROW(x.as_strided({2}, {1}, -1), ShapeError);
  EXPECT_NO_THROW(x.as_strided({0, 5}, {100, 100}, 9));
}

TEST(Views, WritesThroughViewsReachTheBase) {
  Tensor x = zeros({3, 4});
  x.slice(1, 1, 3).fill_(5);
  x.select(0, 2).fill_(1);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 5, 5, 0, 0, 5, 5, 0, 1, 1, 1, 1}));
  Tensor y = zeros({2, 3});
  y.t().copy_(from_vector(iota(6), Shape{3, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 2, 4, 1, 3, 5}));
  // Broadcasting copy.
  y.copy_(from_vector(std::vector<float>{7, 8, 9}, Shape{3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{7, 8, 9, 7, 8, 9}));
  EXPECT_THROW(y.copy_(zeros({2, 3}, DType::I32)), DTypeError);
  EXPECT_THROW(y.copy_(zeros({4})), ShapeError);
}

// ---------------------------------------------------------------- printing and Eigen

TEST(Print, HeaderAndClippedValues) {
  std::ostringstream os;
  os << from_vector(iota(100), Shape{10, 10});
  const std::string s = os.str();
  EXPECT_NE(s.find("float32, cpu, shape=(10, 10), strides=(10, 1)"), std::string::npos) << s;
  EXPECT_NE(s.find("..."), std::string::npos) << s;
  EXPECT_NE(s.find("99"), std::string::npos) << s;
  EXPECT_EQ(s.find("55"), std::string::npos) << "middle values are clipped: " << s;
  EXPECT_NE(ones({2}, DType::U8).str().find("[1, 1]"), std::string::npos);
}

TEST(Eigen, RoundTrip) {
  Eigen::MatrixXf m = Eigen::MatrixXf::Random(5, 7);
  const Tensor t = from_eigen(m);
  EXPECT_EQ(t.shape(), (Shape{5, 7}));
  EXPECT_EQ(t.select(0, 2).select(0, 3).item<float>(), m(2, 3));
  EXPECT_TRUE(to_eigen(t.t()).isApprox(m.transpose()));
  EXPECT_THROW(to_eigen(zeros({2, 2, 2})), ShapeError);
  EXPECT_THROW(to_eigen(zeros({2, 2}, DType::I32)), DTypeError);
}

// ---------------------------------------------------------------- GPU copies

TEST(TensorGpu, SeededRandomIsIdenticalOnCpuAndCuda) {
  MT_REQUIRE_GPU();
  for (std::uint64_t seed : {0ull, 1ull, 123456789ull}) {
    const Shape shape{1000003};
    const auto cu = rand(shape, seed, Device::cuda(0)).to_vector<float>();
    const auto cp = rand(shape, seed).to_vector<float>();
    ASSERT_EQ(std::memcmp(cu.data(), cp.data(), cu.size() * 4), 0) << "rand seed " << seed;
    const auto nu = randn(shape, seed, Device::cuda(0)).to_vector<float>();
    const auto np = randn(shape, seed).to_vector<float>();
    std::int64_t differ = 0;
    for (size_t i = 0; i < nu.size(); ++i) differ += nu[i] != np[i];
    EXPECT_EQ(differ, 0) << "randn seed " << seed;
  }
}

TEST(TensorGpu, FactoriesOnDevice) {
  MT_REQUIRE_GPU();
  const Device cu = Device::cuda(0);
  EXPECT_EQ(full({3, 5}, -2.5, DType::F32, cu).to_vector<float>(), std::vector<float>(15, -2.5f));
  EXPECT_EQ(full({7}, 200, DType::U8, cu).to_vector<std::uint8_t>(), std::vector<std::uint8_t>(7, 200));
  EXPECT_EQ(arange(0, 10, 3, DType::I32, cu).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{0, 3, 6, 9}));
  EXPECT_EQ(zeros({0, 4}, DType::F32, cu).numel(), 0);
  EXPECT_TRUE(empty({4}, DType::F32, cu).is_cuda());
}

class CopyRoundTrip : public testing::TestWithParam<std::int64_t> {};

TEST_P(CopyRoundTrip, PageableAndPinnedAndOffset) {
  MT_REQUIRE_GPU();
  const std::int64_t n = GetParam();
  const Tensor host = rand({n}, 99);
  const auto expect = host.to_vector<float>();
  // Pageable.
  EXPECT_EQ(host.cuda().cpu().to_vector<float>(), expect);
  // Pinned, asynchronous both ways, then wait.
  const Tensor pinned = host.pin_memory();
  EXPECT_TRUE(pinned.is_pinned());
  const Tensor dev = pinned.to(Device::cuda(0), /*non_blocking=*/true);
  Tensor back = empty_pinned({n});
  back.copy_(dev, /*non_blocking=*/true);
  synchronize_stream(current_stream(0));
  EXPECT_EQ(back.to_vector<float>(), expect);
  // Device to device, and an offset view on both sides.
  const Tensor dev2 = dev.clone();
  if (n > 0) {
    EXPECT_NE(dev2.data_ptr(), dev.data_ptr());
  }
  EXPECT_EQ(dev2.cpu().to_vector<float>(), expect);
  if (n > 1) {
    const Tensor off = dev.slice(0, 1, n);
    std::vector<float> tail(expect.begin() + 1, expect.end());
    EXPECT_EQ(off.cpu().to_vector<float>(), tail);
    Tensor dst = zeros({n + 3}, DType::F32, Device::cuda(0));
    dst.slice(0, 3, n + 2).copy_(host.slice(0, 1, n));
    const auto got = dst.to_vector<float>();
    EXPECT_TRUE(std::equal(tail.begin(), tail.end(), got.begin() + 3));
    EXPECT_EQ(got[2], 0.f);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, CopyRoundTrip, testing::Values(0, 1, 7, 4099, (1LL << 27) + 1));

TEST(TensorGpu, StridedCopiesOnDevice) {
  MT_REQUIRE_GPU();
  const Tensor x = rand({37, 53, 3}, 5);
  const Tensor xd = x.cuda();
  const std::vector<std::pair<Tensor, Tensor>> cases = {
      {x.transpose(0, 1), xd.transpose(0, 1)},
      {x.permute({2, 0, 1}), xd.permute({2, 0, 1})},
      {x.slice(1, 3, 50, 4), xd.slice(1, 3, 50, 4)},
      {x.select(2, 1).t(), xd.select(2, 1).t()},
      {x.select(1, 7).unsqueeze(1).expand({37, 9, 3}), xd.select(1, 7).unsqueeze(1).expand({37, 9, 3})},
  };
  for (const auto& [h, d] : cases) {
    const Tensor dc = d.contiguous();
    EXPECT_TRUE(dc.is_cuda());
    EXPECT_TRUE(dc.is_contiguous());
    EXPECT_EQ(dc.to_vector<float>(), h.contiguous().to_vector<float>()) << "shape " << h.shape();
  }
  // Host -> strided device destination.
  Tensor dst = zeros({53, 37}, DType::F32, Device::cuda(0));
  dst.t().copy_(x.select(2, 0));
  EXPECT_EQ(dst.to_vector<float>(), x.select(2, 0).t().contiguous().to_vector<float>());
  // Device -> strided host destination.
  Tensor hdst = zeros({53, 37});
  hdst.t().copy_(xd.select(2, 2));
  EXPECT_EQ(hdst.to_vector<float>(), x.select(2, 2).t().contiguous().to_vector<float>());
}

TEST(TensorGpu, PrintingAndFillOnViews) {
  MT_REQUIRE_GPU();
  Tensor x = zeros({4, 6}, DType::I32, Device::cuda(0));
  x.slice(1, 0, 6, 3).fill_(9);
  EXPECT_EQ(x.select(0, 3).to_vector<std::int32_t>(), (std::vector<std::int32_t>{9, 0, 0, 9, 0, 0}));
  EXPECT_NE(x.str().find("int32, cuda:0"), std::string::npos) << x.str();
}

TEST(TensorGpu, WorkOnSideStreamJoinedBackIsVisible) {
  MT_REQUIRE_GPU();
  Tensor x = zeros({1 << 20}, DType::F32, Device::cuda(0));
  cudaEvent_t fork, join;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  // Fork: the side stream waits for the zeros first. Pool streams are non-blocking, so nothing else orders
  // them after the default stream's work (a slowed-down run, as under compute-sanitizer, overwrote the 3s).
  MT_CUDA_CHECK(cudaEventRecord(fork, current_stream(0)));
  MT_CUDA_CHECK(cudaStreamWaitEvent(pool_stream(0, 2), fork, 0));
  {
    StreamGuard g(pool_stream(0, 2), 0);
    x.fill_(3);
  }
  // Join the side stream into the default one, then read on the default stream.
  MT_CUDA_CHECK(cudaEventRecord(join, pool_stream(0, 2)));
  MT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(0), join, 0));
  const auto v = x.to_vector<float>();
  MT_CUDA_CHECK(cudaEventDestroy(fork));
  MT_CUDA_CHECK(cudaEventDestroy(join));
  EXPECT_EQ(v.front(), 3.f);
  EXPECT_EQ(v.back(), 3.f);
}

TEST(TensorGpu, DeviceErrorsWithoutCrash) {
  const int n = cuda_device_count();
  EXPECT_THROW(zeros({3}, DType::F32, Device::cuda(n + 1)), DeviceError);
  EXPECT_THROW(rand({3}, 1, Device::cuda(n + 1)), DeviceError);
  EXPECT_THROW(zeros({3}).to(Device::cuda(n + 1)), DeviceError);
  if (n == 0) {
    EXPECT_THROW(empty_pinned({3}), DeviceError);
  }
  EXPECT_EQ(zeros({2}).to_vector<float>(), std::vector<float>(2, 0.f));  // still usable
}

// ---------------------------------------------------------------- hostile arguments
constexpr std::int64_t kMax64 = std::numeric_limits<std::int64_t>::max();

template <class E, class F>
std::string throws_what(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

TEST(TensorHostile, AsStridedHugeStrideOrOffsetIsRejected) {
  const Tensor t = zeros({16});
  // The furthest element wraps around in unchecked math, and used to pass the bounds check.
  const std::int64_t big = std::int64_t(1) << 62;
  const std::string what = throws_what<ShapeError>([&] { t.as_strided({2, 2}, {big, big}, 0); });
  EXPECT_NE(what.find("as_strided"), std::string::npos) << what;
  EXPECT_NE(what.find(std::to_string(big)), std::string::npos) << what;
  EXPECT_THROW(t.as_strided({4}, {big}, 0), ShapeError);
  EXPECT_THROW(t.as_strided({3}, {1}, kMax64 - 1), ShapeError);  // offset + 2 overflows
  EXPECT_THROW(t.as_strided({2}, {1}, kMax64), ShapeError);
  EXPECT_THROW(t.as_strided({1}, {1}, kMax64 / 2), ShapeError);  // offset * 4 bytes overflows
  EXPECT_THROW(t.as_strided({1}, {1}, 16), ShapeError);          // one past the end
  EXPECT_THROW(t.as_strided({-1}, {1}, 0), ShapeError);
  EXPECT_THROW(t.as_strided({2}, {-1}, 1), ShapeError);
  EXPECT_THROW(t.as_strided({2}, {1}, -1), ShapeError);
  EXPECT_THROW(t.as_strided({2}, {1, 1}, 0), ShapeError);
  EXPECT_NO_THROW(t.as_strided({0, 5}, {kMax64, 1}, 0));  // no elements: the strides are never followed
  EXPECT_EQ(t.as_strided({4, 4}, {4, 1}, 0).numel(), 16);
}

TEST(TensorHostile, ExtentsWhoseProductOverflowsAreRejected) {
  const Tensor one = zeros({1, 1});
  const std::int64_t big = std::int64_t(1) << 32;
  // Accepted before with numel() wrapped to 0 (so a sum gave 0).
  EXPECT_THROW(one.expand({big, big}), ShapeError);
  EXPECT_THROW(one.expand({kMax64, 2}), ShapeError);
  EXPECT_THROW(zeros({0}).view({big, big, 0}).expand({big, big, big}), ShapeError);
  EXPECT_THROW(one.view({big, big}), ShapeError);
  EXPECT_THROW(one.reshape({big, big, -1}), ShapeError);
  EXPECT_THROW(zeros({0}).reshape({big, big, -1}), ShapeError);  // known extents overflow before -1
  EXPECT_THROW(empty({big, big}), ShapeError);
  EXPECT_THROW((void)Shape({big, big}).numel(), ShapeError);
  EXPECT_THROW(contiguous_strides(Shape{big, big, 2}), ShapeError);
  EXPECT_EQ(Shape({big, 0, big}).numel(), 0);
}

TEST(TensorHostile, SliceWithHugeStepIsAValidView) {
  const Tensor t = from_vector(iota(10), {10});
  const Tensor s = t.slice(0, 3, 10, kMax64);
  EXPECT_EQ(s.shape(), Shape{1});
  EXPECT_EQ(s.item<float>(), 3.f);
  EXPECT_EQ(t.slice(0, 0, 10, kMax64 / 2).numel(), 1);
  EXPECT_EQ(t.slice(0, 0, 10, 3).to_vector<float>(), (std::vector<float>{0, 3, 6, 9}));
  EXPECT_EQ(t.slice(0, kMax64, kMax64).numel(), 0);
  EXPECT_EQ(t.slice(0, -kMax64, kMax64).numel(), 10);
  // Two dims: a big step over a big stride must not wrap into range.
  const Tensor m = zeros({4, 4}).as_strided({2, 2}, {8, 1}, 0);
  EXPECT_THROW(m.slice(0, 0, 2, kMax64 / 4).as_strided({2}, {kMax64 / 2}, 0), ShapeError);
  EXPECT_THROW(m.unsqueeze(0).expand({kMax64, 2, 2}), ShapeError);
}

TEST(TensorHostile, RawConstructorValidates) {
  const Tensor base = zeros({8});
  const auto& st = base.storage();
  EXPECT_NO_THROW(Tensor(st, DType::F32, {2, 4}, {4, 1}, 0));
  EXPECT_NO_THROW(Tensor(st, DType::F32, {4}, {-1}, 3));  // negative strides stay inside
  EXPECT_THROW(Tensor(st, DType::F32, {4}, {-1}, 2), ShapeError);
  EXPECT_THROW(Tensor(st, DType::F32, {-2, 4}, {4, 1}, 0), ShapeError);
  EXPECT_THROW(Tensor(st, DType::F32, {2, 4}, {4, 1}, -1), ShapeError);
  EXPECT_THROW(Tensor(st, DType::F32, {2, 4}, {4, 1}, 1), ShapeError);  // one past the end
  EXPECT_THROW(Tensor(st, DType::F32, {3}, {kMax64 / 2 + 1}, 0), ShapeError);
  EXPECT_THROW(Tensor(st, DType::F32, {2}, {1}, kMax64), ShapeError);
  EXPECT_THROW(Tensor(st, DType::I32, {2, 4}, {4}, 0), ShapeError);
  EXPECT_THROW(Tensor(nullptr, DType::F32, {1}, {1}, 0), InvalidArgument);
  // The storage's capacity is counted in elements of the view's dtype: 32 bytes = 32 uint8.
  EXPECT_NO_THROW(Tensor(st, DType::U8, {32}, {1}, 0));
  EXPECT_THROW(Tensor(st, DType::U8, {33}, {1}, 0), ShapeError);
}

TEST(TensorHostile, SelfOverlap) {
  EXPECT_FALSE(may_self_overlap({2, 3}, {3, 1}));
  EXPECT_FALSE(may_self_overlap({2, 3}, {1, 2}));
  EXPECT_FALSE(may_self_overlap({3, 1}, {1, 0}));  // extent 1: any stride
  EXPECT_FALSE(may_self_overlap({0, 5}, {0, 0}));  // no elements
  EXPECT_TRUE(may_self_overlap({2, 3}, {0, 1}));
  EXPECT_TRUE(may_self_overlap({2, 3}, {2, 1}));  // (0, 2) and (1, 0) share an element
  EXPECT_TRUE(may_self_overlap({4}, {-0}));
  EXPECT_FALSE(may_self_overlap({3}, {-1}));
  EXPECT_FALSE(may_self_overlap({2, 2}, {kMax64 / 2, 1}));
}

TEST(TensorHostile, WritingAnOverlappingViewIsRejected) {
  Tensor row = zeros({1, 3});
  Tensor bcast = row.expand({4, 3});
  const std::string what = throws_what<InvalidArgument>([&] { bcast.copy_(ones({4, 3})); });
  EXPECT_NE(what.find("copy_"), std::string::npos) << what;
  EXPECT_NE(what.find("overlaps itself"), std::string::npos) << what;
  EXPECT_NE(what.find("(4, 3)"), std::string::npos) << what;
  EXPECT_THROW(bcast.fill_(1.0), InvalidArgument);
  Tensor base = zeros({8});
  Tensor windows = base.as_strided({3, 4}, {2, 1}, 0);  // overlapping windows
  EXPECT_THROW(windows.copy_(ones({3, 4})), InvalidArgument);
  EXPECT_THROW(windows.zero_(), InvalidArgument);
  EXPECT_EQ(row.to_vector<float>(), std::vector<float>(3, 0.f));  // nothing written
  EXPECT_NO_THROW(row.copy_(ones({1, 3})));
  EXPECT_NO_THROW(ones({4, 3}).copy_(bcast));  // reading a broadcast view is fine
}

}  // namespace
}  // namespace mt
