// Transposes and permutes: views, and their materialising copies (tensor/'s tiled copy on CUDA).
#include "minitensor/ops/transpose.h"

namespace mt {

Tensor transpose(const Tensor& x, std::int64_t d0, std::int64_t d1) {
  x.check_defined("transpose");
  return x.transpose(d0, d1);
}

Tensor permute(const Tensor& x, std::span<const std::int64_t> dims) {
  x.check_defined("permute");
  return x.permute(dims);
}

Tensor transpose_copy(const Tensor& x, std::int64_t d0, std::int64_t d1) {
  x.check_defined("transpose_copy");
  return x.transpose(d0, d1).clone();
}

Tensor permute_copy(const Tensor& x, std::span<const std::int64_t> dims) {
  x.check_defined("permute_copy");
  return x.permute(dims).clone();
}

}  // namespace mt
