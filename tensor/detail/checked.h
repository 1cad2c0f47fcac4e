// Checked int64 arithmetic for extents, strides, offsets, element and byte counts: one helper for every such
// computation, so that an overflow is a ShapeError naming the values instead of a wrapped (UB) result that a
// later bounds check would then accept.
#pragma once

#include <cstdint>

#include "minitensor/runtime/error.h"

namespace mt::detail {

// a * b; ShapeError naming `what`, a and b when the product does not fit in int64.
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  MT_CHECK(!__builtin_mul_overflow(a, b, &r), ShapeError, what, ": ", a, " * ", b, " overflows int64");
  return r;
}

// a + b; ShapeError naming `what`, a and b when the sum does not fit in int64.
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  MT_CHECK(!__builtin_add_overflow(a, b, &r), ShapeError, what, ": ", a, " + ", b, " overflows int64");
  return r;
}

}  // namespace mt::detail
