// Transposes and permutes, as in PyTorch: transpose and permute return views that share x's storage (the same
// as Tensor::transpose / Tensor::permute; a free function and the method of the same name do the same thing).
// Materialising is explicit: .contiguous() (a copy only when the view is not contiguous already), or
// transpose_copy / permute_copy (always a new contiguous tensor, as torch.transpose_copy / permute_copy).
// The copies run tensor/'s copy kernels: on CUDA the tiled shared-memory transpose (tensor/transpose.cu,
// whose teaching ladder of rungs is detail::launch_transpose_2d).
#pragma once

#include <initializer_list>
#include <span>

#include "minitensor/tensor/tensor.h"

namespace mt {

// Views: x with dims d0 and d1 swapped / x's dims reordered (result dim i is x's dim dims[i]).
Tensor transpose(const Tensor& x, std::int64_t d0, std::int64_t d1);
Tensor permute(const Tensor& x, std::span<const std::int64_t> dims);
inline Tensor permute(const Tensor& x, std::initializer_list<std::int64_t> dims) {
  return permute(x, std::span<const std::int64_t>(dims.begin(), dims.size()));
}

// Copies: the same result in a new contiguous tensor on x's device.
Tensor transpose_copy(const Tensor& x, std::int64_t d0, std::int64_t d1);
Tensor permute_copy(const Tensor& x, std::span<const std::int64_t> dims);
inline Tensor permute_copy(const Tensor& x, std::initializer_list<std::int64_t> dims) {
  return permute_copy(x, std::span<const std::int64_t>(dims.begin(), dims.size()));
}

}  // namespace mt
