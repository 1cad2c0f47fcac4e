// Materialising transposes: the result is a new contiguous tensor (Tensor::transpose / permute are views).
// The kernels are tensor/'s copy kernels (tiled through shared memory for the 2-D case).
#pragma once

#include <initializer_list>
#include <span>

#include "minitensor/tensor/tensor.h"

namespace mt {

Tensor transpose(const Tensor& x, std::int64_t d0, std::int64_t d1);
Tensor permute(const Tensor& x, std::span<const std::int64_t> dims);
inline Tensor permute(const Tensor& x, std::initializer_list<std::int64_t> dims) {
  return permute(x, std::span<const std::int64_t>(dims.begin(), dims.size()));
}

}  // namespace mt
