// Materialising transposes: a view, then a copy into a new contiguous tensor (tensor/'s tiled copy on CUDA).
#include "minitensor/ops/transpose.h"

namespace mt {

Tensor transpose(const Tensor& x, std::int64_t d0, std::int64_t d1) {
  x.check_defined("transpose");
  return x.transpose(d0, d1).clone();
}

Tensor permute(const Tensor& x, std::span<const std::int64_t> dims) {
  x.check_defined("permute");
  return x.permute(dims).clone();
}

}  // namespace mt
