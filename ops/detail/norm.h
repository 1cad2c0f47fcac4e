// The row-normalisation kernels (ops/norm.cu) and their CPU reference (ops/cpu/norm.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "minitensor/tensor/tensor.h"

namespace mt::detail {

enum class RowNorm { Layer, Rms };

// y (rows x d, contiguous) from x (rows x d, contiguous), weight and bias (d, contiguous; nullptr: none; no
// bias for Rms). false where the row is too long to keep on chip (the caller composes the op instead).
bool launch_row_norm(RowNorm kind, const float* x, const float* weight, const float* bias, float* y,
                     std::int64_t rows, std::int64_t d, float eps, cudaStream_t stream);

// float64 per row, rounded once to float32. x is (..., d); weight and bias (d) or undefined.
Tensor cpu_row_norm(RowNorm kind, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

}  // namespace mt::detail
