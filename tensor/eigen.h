// Eigen interop for 2-D float32 tensors (host code only; kernels never include Eigen).
#pragma once

// Eigen stays host-only even in a .cu file that includes this header: without it, nvcc compiles Eigen's
// functions for the device too (slow, and warnings about host calls). Must precede the first Eigen include.
#ifndef EIGEN_NO_CUDA
#define EIGEN_NO_CUDA
#endif  // EIGEN_NO_CUDA
#include <Eigen/Core>

#include "minitensor/tensor/tensor.h"

namespace mt {

using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A (rows, cols) float32 tensor on `device` holding the matrix's values.
template <class Derived>
Tensor from_eigen(const Eigen::MatrixBase<Derived>& m, Device device = Device::cpu()) {
  const MatrixRM rm = m.template cast<float>();
  return from_host(rm.data(),
                   Shape{static_cast<std::int64_t>(rm.rows()), static_cast<std::int64_t>(rm.cols())}, device);
}

// The values of a 2-D float32 tensor (any device, any strides) as a row-major Eigen matrix.
inline MatrixRM to_eigen(const Tensor& t) {
  t.check_dtype(DType::F32, "to_eigen");
  MT_CHECK(t.dim() == 2, ShapeError, "to_eigen: expects a 2-D tensor, got shape ", t.shape());
  const std::vector<float> v = t.to_vector<float>();
  MatrixRM m(t.size(0), t.size(1));
  std::copy(v.begin(), v.end(), m.data());
  return m;
}

}  // namespace mt
