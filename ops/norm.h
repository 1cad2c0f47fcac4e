// Row normalisations over the last axis, as PyTorch defines them; float32, one fused pass over each row on
// CUDA (the row kept on chip), the float64 Eigen reference on the CPU. The result has x's shape, contiguous.
#pragma once

#include "minitensor/tensor/tensor.h"

namespace mt {

// torch.nn.functional.layer_norm(x, (d,), weight, bias, eps): y = (x - mean) / sqrt(var + eps) * weight +
// bias over the last axis (d = x.size(-1)), var the biased variance. weight and bias, each (d) or undefined
// (none), are on x's device.
Tensor layer_norm(const Tensor& x, const Tensor& weight = {}, const Tensor& bias = {}, double eps = 1e-5);

// The default eps of torch.nn.functional.rms_norm for float32: the type's machine epsilon.
inline constexpr double kRmsNormEps = 1.1920928955078125e-07;

// torch.nn.functional.rms_norm(x, (d,), weight, eps): y = x / sqrt(mean(x^2) + eps) * weight over the last
// axis; weight (d) or undefined (none).
Tensor rms_norm(const Tensor& x, const Tensor& weight = {}, double eps = kRmsNormEps);

// Whether rows of d elements run the fused kernel on a GPU (longer rows are composed from eager ops, which
// allocate).
inline bool row_norm_is_fused(std::int64_t d) {
  return d <= 32768;
}

}  // namespace mt
