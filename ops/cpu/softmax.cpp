// The Eigen reference of softmax / log-softmax: the axis moved last, each row in float64 (max with the shared
// NaN-propagating combine, then exp(x - max) / sum, or x - max - log(sum)), rounded once to float32.
#include <Eigen/Core>
#include <vector>

#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/functors.h"

namespace mt::detail {

Tensor cpu_softmax(bool log, const Tensor& x, int axis) {
  std::vector<std::int64_t> order;
  for (int d = 0; d < x.dim(); ++d)
    if (d != axis) order.push_back(d);
  order.push_back(axis);
  const Tensor rows = x.permute(order).contiguous();
  const Eigen::Index row_len = x.size(axis), n_rows = row_len ? x.numel() / row_len : 0;
  Tensor y = empty(rows.shape(), DType::F32, Device::cpu());
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const Matrix> in(static_cast<const float*>(rows.data_ptr()), n_rows, row_len);
  Eigen::Map<Matrix> out(static_cast<float*>(y.data_ptr()), n_rows, row_len);
  for (Eigen::Index r = 0; r < n_rows; ++r) {
    const double m = in.row(r).redux([](float a, float b) { return fn::max_combine(a, b); });
    const Eigen::ArrayXd shifted = in.row(r).transpose().cast<double>().array() - m;
    const double s = shifted.exp().sum();
    out.row(r) =
        (log ? (shifted - std::log(s)).eval() : (shifted.exp() / s).eval()).cast<float>().transpose();
  }
  // Back to x's dim order (inverse of `order`), contiguous.
  std::vector<std::int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    inverse[static_cast<size_t>(order[i])] = static_cast<std::int64_t>(i);
  return y.permute(inverse).contiguous();
}

}  // namespace mt::detail
