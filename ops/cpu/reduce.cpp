// The Eigen reference of the reductions over the rows of a contiguous (n_rows, row_len) float32 matrix:
// sums in float64 (rowwise().sum() over the float64 cast), max / min through Eigen's redux with the shared
// order-independent combines, arg-reductions by a scan with the shared tie rules.
#include <Eigen/Core>
#include <cstdint>

#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/functors.h"

namespace mt::detail {

Tensor cpu_reduce_rows(ReduceOp op, const Tensor& rows) {
  const Eigen::Index n_rows = rows.size(0), row_len = rows.size(1);
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const Matrix> m(static_cast<const float*>(rows.data_ptr()), n_rows, row_len);
  const bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  Tensor out = empty(Shape{n_rows}, arg ? DType::I32 : DType::F32, Device::cpu());
  if (n_rows == 0) return out;
  if (arg) {
    auto* o = static_cast<std::int32_t*>(out.data_ptr());
    for (Eigen::Index r = 0; r < n_rows; ++r) {
      long long best = 0;
      for (Eigen::Index c = 1; c < row_len; ++c) {
        const bool wins = op == ReduceOp::ArgMax ? fn::argmax_wins(m(r, c), c, m(r, best), best)
                                                 : fn::argmin_wins(m(r, c), c, m(r, best), best);
        if (wins) best = c;
      }
      o[r] = static_cast<std::int32_t>(best);
    }
    return out;
  }
  Eigen::Map<Eigen::VectorXf> o(static_cast<float*>(out.data_ptr()), n_rows);
  switch (op) {
    case ReduceOp::Sum:
      o = m.cast<double>().rowwise().sum().cast<float>();
      break;
    case ReduceOp::Mean:
      o = (m.cast<double>().rowwise().sum() / static_cast<double>(row_len)).cast<float>();
      break;
    case ReduceOp::Max:
      for (Eigen::Index r = 0; r < n_rows; ++r)
        o[r] = m.row(r).redux([](float a, float b) { return fn::max_combine(a, b); });
      break;
    case ReduceOp::Min:
      for (Eigen::Index r = 0; r < n_rows; ++r)
        o[r] = m.row(r).redux([](float a, float b) { return fn::min_combine(a, b); });
      break;
    default:
      break;
  }
  return out;
}

}  // namespace mt::detail
