// Transposes and permutes: the free functions are views (shared storage); their copies (transpose_copy,
// permute_copy) bit for bit: tiled (scalar and 16-byte) and element-wise copy paths, every element size,
// permutes of up to 8 dims, views feeding Tensor::contiguous(); the kernel rungs on the GPU.
#include <gtest/gtest.h>

#include <numeric>

#include "minitensor/ops/transpose.h"
#include "minitensor/runtime/stream.h"
#include "minitensor/tensor/detail/kernels.h"
#include "tests/common/gpu.h"
#include "tests/common/op_harness.h"

namespace mt {
namespace {

using test::InputSpec;
using test::Layout;
using test::OpCase;
using test::Tolerance;

TEST(Transpose, TwoD_Shapes_Layouts_DTypes) {
  const std::vector<Shape> shapes = {{0, 5},   {1, 1},    {7, 13},   {32, 32},
                                     {33, 65}, {1000, 4}, {64, 128}, {257, 1031}};
  for (DType dt : {DType::F32, DType::I32, DType::U8}) {
    for (const Shape& s : shapes) {
      for (Layout layout :
           {Layout::Contiguous, Layout::Offset1, Layout::Transposed, Layout::Strided, Layout::Expanded}) {
        OpCase c;
        c.name = "transpose";
        c.inputs = {InputSpec{s, layout, dt, 0.0, 200.0, dt == DType::F32 ? 0.02 : 0.0}};
        c.tol = Tolerance::exactly();
        c.run = [](const std::vector<Tensor>& x) { return transpose_copy(x[0], 0, 1); };
        test::run_case(c);
      }
    }
  }
}

TEST(Transpose, Permute_UpTo8Dims) {
  struct P {
    Shape shape;
    std::vector<std::int64_t> dims;
  };
  const std::vector<P> cases = {
      {{3, 64, 96}, {0, 2, 1}},
      {{3, 64, 96}, {2, 1, 0}},
      {{3, 64, 96}, {1, 0, 2}},
      {{40, 3, 50}, {2, 1, 0}},
      {{4, 5, 36, 40}, {0, 3, 2, 1}},
      {{2, 3, 2, 3, 2, 3, 2, 3}, {7, 6, 5, 4, 3, 2, 1, 0}},
      {{2, 17, 2, 3, 2, 19, 2, 3}, {1, 5, 0, 2, 3, 4, 6, 7}},
      {{2, 3, 4, 5, 6, 2, 20, 20}, {0, 1, 2, 3, 4, 5, 7, 6}},
  };
  for (const P& p : cases) {
    for (Layout layout : {Layout::Contiguous, Layout::Offset1, Layout::Transposed}) {
      for (DType dt : {DType::F32, DType::U8}) {
        OpCase c;
        c.name = "permute " + Shape(p.dims).str();
        c.inputs = {InputSpec{p.shape, layout, dt, 0.0, 250.0}};
        c.tol = Tolerance::exactly();
        const std::vector<std::int64_t> dims = p.dims;
        c.run = [dims](const std::vector<Tensor>& x) { return permute_copy(x[0], dims); };
        // Tensor::contiguous() of the permuted view takes the same path.
        c.run_out = [dims](const std::vector<Tensor>& x, Tensor& out) { out.copy_(x[0].permute(dims)); };
        test::run_case(c);
      }
    }
  }
}

TEST(Transpose, Errors) {
  EXPECT_THROW(transpose(zeros({3, 4}), 0, 2), ShapeError);
  EXPECT_THROW(permute(zeros({3, 4}), {0, 0}), ShapeError);
  EXPECT_THROW(permute(zeros({3, 4}), {0}), ShapeError);
  EXPECT_THROW(transpose_copy(zeros({3, 4}), 0, 2), ShapeError);
  EXPECT_THROW(permute_copy(zeros({3, 4}), {0, 0}), ShapeError);
  EXPECT_THROW(transpose(Tensor(), 0, 1), InvalidArgument);
}

// mt::transpose / mt::permute are views, as Tensor::transpose / permute (and PyTorch's): same storage,
// swapped strides, writes through x visible in the result. The _copy forms own new contiguous storage.
TEST(Transpose, FreeFunctionsAreViews_SharedStorage) {
  Tensor x = arange(12).view({3, 4});
  const Tensor t = transpose(x, 0, 1);
  EXPECT_EQ(t.storage(), x.storage());
  EXPECT_EQ(t.data_ptr(), x.data_ptr());
  EXPECT_EQ(t.shape(), (Shape{4, 3}));
  EXPECT_EQ(t.strides(), x.transpose(0, 1).strides());
  EXPECT_FALSE(t.is_contiguous());
  const Tensor p = permute(x, {1, 0});
  EXPECT_EQ(p.storage(), x.storage());
  EXPECT_EQ(p.strides(), t.strides());
  const Tensor tc = transpose_copy(x, 0, 1), pc = permute_copy(x, {1, 0}), mc = t.contiguous();
  for (const Tensor& c : {tc, pc, mc}) {
    EXPECT_NE(c.storage(), x.storage());
    EXPECT_TRUE(c.is_contiguous());
    EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  }
  x.fill_(5.0);  // seen through the views, not by the copies
  EXPECT_EQ(t.contiguous().to_vector<float>(), std::vector<float>(12, 5.f));
  EXPECT_EQ(p.contiguous().to_vector<float>(), std::vector<float>(12, 5.f));
  EXPECT_EQ(tc.to_vector<float>()[1], 4.f);
}

TEST(Transpose, Cuda_KernelRungsAgree) {
  MT_REQUIRE_GPU();
  const Device g = Device::cuda(0);
  for (const Shape& s : {Shape{32, 32}, Shape{100, 36}, Shape{513, 1027}, Shape{1024, 2048}}) {
    const Tensor x = randn(s, 3, g);
    const std::vector<float> expect = x.cpu().t().contiguous().to_vector<float>();
    for (auto k : {detail::TransposeKernel::Naive, detail::TransposeKernel::SharedNoPad,
                   detail::TransposeKernel::SharedPadded, detail::TransposeKernel::Best}) {
      Tensor y = empty({s[1], s[0]}, DType::F32, g);
      detail::launch_transpose_2d(k, y.data_ptr(), x.data_ptr(), s[0], s[1], current_stream(0));
      EXPECT_EQ(y.to_vector<float>(), expect) << "kernel " << static_cast<int>(k) << " shape " << s;
    }
  }
}

// The 16-byte rungs: Vec4Wide (1 x 4 tiles) and Best (2 x 4 tiles for one large matrix, 2 x 2 or 1 x 1 for
// smaller ones) at sizes that leave partial tiles; Vec4Wide refuses what it cannot take.
TEST(Transpose, Cuda_Vec4RungsAgree) {
  MT_REQUIRE_GPU();
  const Device g = Device::cuda(0);
  using K = detail::TransposeKernel;
  for (const Shape& s :
       {Shape{4, 4}, Shape{100, 36}, Shape{516, 1028}, Shape{2048, 1024}, Shape{4100, 260}}) {
    const Tensor x = randn(s, 5, g);
    const std::vector<float> expect = x.cpu().t().contiguous().to_vector<float>();
    for (K k : {K::Vec4Wide, K::Best}) {
      Tensor y = full({s[1], s[0]}, -7.0, DType::F32, g);
      detail::launch_transpose_2d(k, y.data_ptr(), x.data_ptr(), s[0], s[1], current_stream(0));
      EXPECT_EQ(y.to_vector<float>(), expect) << "kernel " << static_cast<int>(k) << " shape " << s;
    }
  }
  const Tensor x = zeros({8, 8}, DType::F32, g);
  Tensor y = zeros({8, 8}, DType::F32, g);
  EXPECT_THROW(
      detail::launch_transpose_2d(K::Vec4Wide, y.data_ptr(), x.data<float>() + 1, 4, 4, current_stream(0)),
      InvalidArgument);
  EXPECT_THROW(detail::launch_transpose_2d(K::Vec4Wide, y.data_ptr(), x.data_ptr(), 6, 4, current_stream(0)),
               InvalidArgument);
}

}  // namespace
}  // namespace mt
