// Reduction entries: validate axes, then map the reduction onto a row case (reduced elements contiguous) or a
// column case (reduced axis strided, innermost kept axis contiguous) without copying; anything else is made
// contiguous with the reduced axes last (one tiled copy) and reduced as rows.
#include "minitensor/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "minitensor/ops/detail/kernels.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/stream.h"

namespace mt {

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Mean:
      return "mean";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::ArgMax:
      return "argmax";
    case ReduceOp::ArgMin:
      return "argmin";
  }
  return "?";
}

namespace {

// mask[d]: dim d is reduced. Empty axes = all. A rank-0 tensor takes axis 0 or -1 and is returned as it is
// (PyTorch's rule; the graph builder and the CPU executor follow it too).
std::array<bool, kMaxDims> reduced_mask(const Shape& shape, std::span<const std::int64_t> axes,
                                        const char* op) {
  std::array<bool, kMaxDims> mask{};
  if (axes.empty()) {
    for (int d = 0; d < shape.rank(); ++d) mask[d] = true;
    return mask;
  }
  for (std::int64_t a : axes) {
    const int d = wrap_dim(a, std::max(shape.rank(), 1), op);
    MT_CHECK(!mask[d], ShapeError, op, ": axis ", a, " is repeated in ", Shape(axes), " (shape ", shape, ")");
    mask[d] = true;
  }
  return mask;
}

struct Dim {
  std::int64_t size, stride;
};

// Merges dim i into i-1 where the memory order allows (stride[i-1] == stride[i] * size[i]).
std::vector<Dim> merge_dims(const std::vector<Dim>& dims) {
  std::vector<Dim> out;
  for (const Dim& d : dims) {
    if (!out.empty() && out.back().stride == d.stride * d.size) {
      out.back() = {out.back().size * d.size, d.stride};
    } else {
      out.push_back(d);
    }
  }
  return out;
}

StridedLayout layout_of(const std::vector<Dim>& dims) {
  StridedLayout l;
  l.rank = 1;
  l.shape[0] = 1;
  l.stride[0] = 0;
  if (dims.empty()) return l;
  l.rank = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    l.shape[i] = dims[i].size;
    l.stride[i] = dims[i].stride;
  }
  return l;
}

bool is_arg(ReduceOp op) {
  return op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
}

// x permuted to (kept dims..., reduced dims...), contiguous, seen as (n_out, n_reduce).
Tensor as_rows(const Tensor& x, const std::array<bool, kMaxDims>& mask, std::int64_t n_out,
               std::int64_t n_reduce) {
  std::vector<std::int64_t> order;
  for (int d = 0; d < x.dim(); ++d)
    if (!mask[d]) order.push_back(d);
  for (int d = 0; d < x.dim(); ++d)
    if (mask[d]) order.push_back(d);
  return x.permute(order).contiguous().view({n_out, n_reduce});
}

void reduce_cuda(ReduceOp op, const Tensor& x, const std::array<bool, kMaxDims>& mask, std::int64_t n_out,
                 std::int64_t n_reduce, Tensor& out, cudaStream_t stream) {
  std::vector<Dim> kept, red;
  for (int d = 0; d < x.dim(); ++d) {
    if (x.size(d) == 1) continue;
    (mask[d] ? red : kept).push_back({x.size(d), x.stride(d)});
  }
  // The order of the reduced elements is free for the value reductions (sorted by stride, they merge more
  // often); arg-reductions report logical indices, so they keep the logical order.
  if (!is_arg(op)) {
    std::stable_sort(red.begin(), red.end(), [](const Dim& a, const Dim& b) { return a.stride > b.stride; });
  }
  red = merge_dims(red);
  kept = merge_dims(kept);
  const auto* xp = static_cast<const float*>(x.data_ptr());
  if (red.empty() || (red.size() == 1 && red[0].stride == 1)) {
    detail::launch_reduce_rows(op, xp, layout_of(kept), n_out, n_reduce, out.data_ptr(), stream);
    return;
  }
  // Column case: worth it when a warp's 32 lanes find enough contiguous columns.
  if (red.size() == 1 && !kept.empty() && kept.back().stride == 1 && kept.back().size >= 8) {
    const std::int64_t n_cols = kept.back().size;
    kept.pop_back();
    detail::launch_reduce_cols(op, xp, layout_of(kept), n_out / n_cols, n_reduce, red[0].stride, n_cols,
                               out.data_ptr(), stream);
    return;
  }
  const Tensor rows = as_rows(x, mask, n_out, n_reduce);
  StridedLayout l;
  l.rank = 1;
  l.shape[0] = n_out;
  l.stride[0] = n_reduce;
  detail::launch_reduce_rows(op, static_cast<const float*>(rows.data_ptr()), l, n_out, n_reduce,
                             out.data_ptr(), stream);
  detail::record_stream(rows, stream);
}

}  // namespace

Shape reduced_shape(const Shape& shape, std::span<const std::int64_t> axes, bool keepdim, const char* op) {
  const auto mask = reduced_mask(shape, axes, op);
  Shape out;
  for (int d = 0; d < shape.rank(); ++d) {
    if (!mask[d]) {
      out.push_back(shape[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

Tensor reduce(ReduceOp op, const Tensor& x, std::span<const std::int64_t> axes, bool keepdim) {
  const char* name = op_name(op);
  x.check_defined(name);
  MT_CHECK(x.dtype() == DType::F32, DTypeError, name, ": dtype ", x.dtype(),
           " is not supported (float32 only)");
  MT_CHECK(!is_arg(op) || axes.size() <= 1, InvalidArgument, name, ": takes one axis or none, got ",
           axes.size(), " axes ", Shape(axes));
  const auto mask = reduced_mask(x.shape(), axes, name);
  const Shape out_shape = reduced_shape(x.shape(), axes, keepdim, name);
  std::int64_t n_reduce = 1;
  for (int d = 0; d < x.dim(); ++d)
    if (mask[d]) n_reduce *= x.size(d);
  const std::int64_t n_out = out_shape.numel();
  Tensor out = empty(out_shape, is_arg(op) ? DType::I32 : DType::F32, x.device());
  if (n_out == 0) return out;
  if (n_reduce == 0) {
    MT_CHECK(op == ReduceOp::Sum || op == ReduceOp::Mean, ShapeError, name,
             ": cannot reduce over zero elements (shape ", x.shape(), ", axes ", Shape(axes), ")");
    return out.fill_(op == ReduceOp::Sum ? 0.0 : std::numeric_limits<double>::quiet_NaN());
  }
  MT_CHECK(!is_arg(op) || n_reduce <= std::numeric_limits<std::int32_t>::max(), InvalidArgument, name, ": ",
           n_reduce, " elements per result exceed the int32 index range");
  if (x.is_cpu()) {
    const Tensor r = detail::cpu_reduce_rows(op, as_rows(x, mask, n_out, n_reduce));
    return r.view(out_shape);
  }
  DeviceGuard guard(x.device());
  cudaStream_t stream = current_stream(x.device().index());
  reduce_cuda(op, x, mask, n_out, n_reduce, out, stream);
  detail::record_stream(x, stream);
  return out;
}

}  // namespace mt
