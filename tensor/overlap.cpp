#include "minitensor/tensor/overlap.h"

#include <algorithm>
#include <array>
#include <limits>

#include "minitensor/tensor/detail/checked.h"

namespace mt {

bool may_self_overlap(const Shape& shape, const Shape& strides) {
  std::array<std::pair<std::int64_t, std::int64_t>, kMaxDims> dims{};  // (|stride|, extent)
  int n = 0;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 0) return false;  // no elements
    if (shape[d] == 1) continue;
    if (strides[d] == 0) return true;
    // |INT64_MIN| does not fit; such a stride cannot step past anything of a valid view anyway.
    if (strides[d] == std::numeric_limits<std::int64_t>::min()) return true;
    dims[static_cast<std::size_t>(n++)] = {strides[d] < 0 ? -strides[d] : strides[d], shape[d]};
  }
  std::sort(dims.begin(), dims.begin() + n);
  std::int64_t span = 0;  // the furthest offset the smaller dims reach
  for (int i = 0; i < n; ++i) {
    const auto [stride, extent] = dims[static_cast<std::size_t>(i)];
    if (stride <= span) return true;
    std::int64_t reach = 0;
    if (__builtin_mul_overflow(extent - 1, stride, &reach) || __builtin_add_overflow(span, reach, &span))
      return true;  // a view of real storage cannot span more than int64 elements
  }
  return false;
}

void check_no_self_overlap(const Tensor& t, const char* op, const char* what) {
  if (!may_self_overlap(t.shape(), t.strides())) return;
  bool broadcast = false;
  for (int d = 0; d < t.dim(); ++d) broadcast = broadcast || (t.strides()[d] == 0 && t.shape()[d] > 1);
  MT_THROW(InvalidArgument, op, ": ", what, " ", t.shape(), " with strides ", t.strides(), " overlaps itself",
           broadcast ? " (a broadcast view cannot be written)" : " (two indices address the same element)");
}

}  // namespace mt
