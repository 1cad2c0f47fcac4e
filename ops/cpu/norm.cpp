// The Eigen reference of layer_norm and rms_norm: each row in float64 (mean, then the biased variance of the
// centred row, or the mean square), scaled and shifted in float64, rounded once to float32.
#include <Eigen/Core>
#include <cmath>
#include <vector>

#include "minitensor/ops/detail/norm.h"

namespace mt::detail {

Tensor cpu_row_norm(RowNorm kind, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const Tensor rows = x.contiguous();
  const Eigen::Index d = x.size(-1), n_rows = d ? x.numel() / d : 0;
  Tensor y = empty(x.shape(), DType::F32, Device::cpu());
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const Matrix> in(static_cast<const float*>(rows.data_ptr()), n_rows, d);
  Eigen::Map<Matrix> out(static_cast<float*>(y.data_ptr()), n_rows, d);
  auto as_array = [&](const Tensor& t, double fill) {
    if (!t.defined()) return Eigen::ArrayXd::Constant(d, fill).eval();
    const std::vector<float> v = t.contiguous().to_vector<float>();
    return Eigen::Map<const Eigen::ArrayXf>(v.data(), d).cast<double>().eval();
  };
  const Eigen::ArrayXd w = as_array(weight, 1.0), b = as_array(bias, 0.0);
  for (Eigen::Index r = 0; r < n_rows; ++r) {
    const Eigen::ArrayXd v = in.row(r).transpose().cast<double>().array();
    Eigen::ArrayXd z;
    if (kind == RowNorm::Layer) {
      const Eigen::ArrayXd c = v - v.mean();
      z = c / std::sqrt(c.square().mean() + eps) * w + b;
    } else {
      z = v / std::sqrt(v.square().mean() + eps) * w;
    }
    out.row(r) = z.cast<float>().transpose();
  }
  return y;
}

}  // namespace mt::detail
