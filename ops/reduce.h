// Reductions over all elements, one axis or a list of axes, with keepdim. Deterministic (no floating-point
// atomics decide a result) and accurate (tree accumulation). float32 input; sum/mean/max/min return float32,
// argmax/argmin return int32 indices (the first occurrence; NaN counts as the maximum/minimum).
#pragma once

#include <initializer_list>
#include <span>
#include <vector>

#include "minitensor/tensor/tensor.h"

namespace mt {

enum class ReduceOp { Sum, Mean, Max, Min, ArgMax, ArgMin };
const char* op_name(ReduceOp op);

// axes empty = all axes. Negative axes count from the end; a repeated axis is a ShapeError.
// argmax/argmin take exactly one axis, or none (flat index over all elements).
Tensor reduce(ReduceOp op, const Tensor& x, std::span<const std::int64_t> axes = {}, bool keepdim = false);

inline Tensor sum(const Tensor& x, std::span<const std::int64_t> axes = {}, bool keepdim = false) {
  return reduce(ReduceOp::Sum, x, axes, keepdim);
}
inline Tensor mean(const Tensor& x, std::span<const std::int64_t> axes = {}, bool keepdim = false) {
  return reduce(ReduceOp::Mean, x, axes, keepdim);
}
inline Tensor max(const Tensor& x, std::span<const std::int64_t> axes = {}, bool keepdim = false) {
  return reduce(ReduceOp::Max, x, axes, keepdim);
}
inline Tensor min(const Tensor& x, std::span<const std::int64_t> axes = {}, bool keepdim = false) {
  return reduce(ReduceOp::Min, x, axes, keepdim);
}
inline Tensor argmax(const Tensor& x, std::span<const std::int64_t> axes = {}, bool keepdim = false) {
  return reduce(ReduceOp::ArgMax, x, axes, keepdim);
}
inline Tensor argmin(const Tensor& x, std::span<const std::int64_t> axes = {}, bool keepdim = false) {
  return reduce(ReduceOp::ArgMin, x, axes, keepdim);
}
// Single-axis conveniences: sum(x, 1), max(x, -1, true).
inline Tensor sum(const Tensor& x, std::int64_t axis, bool keepdim = false) {
  return sum(x, {&axis, 1}, keepdim);
}
inline Tensor mean(const Tensor& x, std::int64_t axis, bool keepdim = false) {
  return mean(x, {&axis, 1}, keepdim);
}
inline Tensor max(const Tensor& x, std::int64_t axis, bool keepdim = false) {
  return max(x, {&axis, 1}, keepdim);
}
inline Tensor min(const Tensor& x, std::int64_t axis, bool keepdim = false) {
  return min(x, {&axis, 1}, keepdim);
}
inline Tensor argmax(const Tensor& x, std::int64_t axis, bool keepdim = false) {
  return argmax(x, {&axis, 1}, keepdim);
}
inline Tensor argmin(const Tensor& x, std::int64_t axis, bool keepdim = false) {
  return argmin(x, {&axis, 1}, keepdim);
}

// Result shape of reducing `shape` over `axes` (validated; empty = all).
Shape reduced_shape(const Shape& shape, std::span<const std::int64_t> axes, bool keepdim, const char* op);

}  // namespace mt
