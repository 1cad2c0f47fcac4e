#include "minitensor/tensor/layout.h"

namespace mt {

StridedLayout make_layout(const Shape& shape, const Shape& strides) {
  StridedLayout l;
  l.rank = shape.rank();
  for (int d = 0; d < shape.rank(); ++d) {
    l.shape[d] = shape[d];
    l.stride[d] = strides[d];
  }
  coalesce_layouts(&l, 1);
  return l;
}

void coalesce_layouts(StridedLayout* layouts, int n) {
  if (n <= 0) return;
  const int rank = layouts[0].rank;
  // Drop size-1 dims (they contribute nothing to any offset), unless everything is size 1.
  int out = 0;
  for (int d = 0; d < rank; ++d) {
    if (layouts[0].shape[d] == 1) continue;
    for (int k = 0; k < n; ++k) {
      layouts[k].shape[out] = layouts[k].shape[d];
      layouts[k].stride[out] = layouts[k].stride[d];
    }
    ++out;
  }
  // Merge dim d into d-1 when, for every operand, stride[d-1] == stride[d] * shape[d].
  int merged = 0;
  for (int d = 0; d < out; ++d) {
    bool can_merge = merged > 0;
    for (int k = 0; k < n && can_merge; ++k) {
      const StridedLayout& l = layouts[k];
      can_merge = l.stride[merged - 1] == l.stride[d] * l.shape[d];
    }
    for (int k = 0; k < n; ++k) {
      StridedLayout& l = layouts[k];
      if (can_merge) {
        l.shape[merged - 1] *= l.shape[d];
        l.stride[merged - 1] = l.stride[d];
      } else {
        l.shape[merged] = l.shape[d];
        l.stride[merged] = l.stride[d];
      }
    }
    if (!can_merge) ++merged;
  }
  for (int k = 0; k < n; ++k) {
    StridedLayout& l = layouts[k];
    for (int d = merged; d < kMaxDims; ++d) {
      l.shape[d] = 0;
      l.stride[d] = 0;
    }
    l.rank = merged;
    if (merged == 0) {  // all-size-1 or rank 0: one element
      l.rank = 1;
      l.shape[0] = 1;
      l.stride[0] = 1;
    }
  }
}

}  // namespace mt
