// StridedLayout: what a kernel needs to address a strided tensor (extents and element strides, by value).
// Host code builds it from a Tensor; device code turns a linear index into an element offset.
#pragma once

#include <cstdint>

#include "minitensor/tensor/shape.h"

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MT_HOST_DEVICE inline
#endif
#if defined(__CUDA_ARCH__)
#define MT_UNROLL _Pragma("unroll")
#else
#define MT_UNROLL
#endif

namespace mt {

struct StridedLayout {
  int rank = 0;
  std::int64_t shape[kMaxDims] = {};
  std::int64_t stride[kMaxDims] = {};

  // Element offset of the element with row-major linear index `i`.
  MT_HOST_DEVICE std::int64_t offset(std::int64_t i) const {
    std::int64_t off = 0;
    MT_UNROLL
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d < rank) {
        const std::int64_t n = shape[d];
        off += (i % n) * stride[d];
        i /= n;
      }
    }
    return off;
  }
};

// The layout of (shape, strides) with dims merged where memory order allows (fewer divisions per element) and
// size-1 dims dropped. Merging keeps the row-major enumeration order, so offset(i) is unchanged for all i.
StridedLayout make_layout(const Shape& shape, const Shape& strides);

// Merges the dims of several same-shape operands together: a dim pair is merged only where every operand
// allows it, so linear index i still names the same element in each. Used by elementwise ops over N operands.
void coalesce_layouts(StridedLayout* layouts, int n);

}  // namespace mt
