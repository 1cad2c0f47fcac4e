// The Eigen reference of scaled dot-product attention: per query row in float64, the scores, the causal and
// additive masks, the softmax (zeros for a row with no visible key), then the weighted sum of V.
#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <vector>

#include "minitensor/ops/detail/attention.h"

namespace mt::detail {

Tensor cpu_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                     double scale) {
  const std::int64_t tq = q.size(-2), tk = k.size(-2), d = q.size(-1), dv = v.size(-1);
  const std::int64_t heads = tq ? q.numel() / (tq * d) : 0;
  using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  auto load = [](const Tensor& t, std::int64_t rows, std::int64_t cols) {
    const std::vector<float> f = t.contiguous().to_vector<float>();
    return Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(f.data(),
                                                                                                   rows, cols)
        .cast<double>()
        .eval();
  };
  const Matrix Q = load(q, heads * tq, d), K = load(k, heads * tk, d), V = load(v, heads * tk, dv);
  const Matrix M = mask.defined() ? load(mask, heads * tq, tk) : Matrix();
  std::vector<float> out(static_cast<size_t>(heads * tq * dv));
  const double inf = std::numeric_limits<double>::infinity();
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t i = 0; i < tq; ++i) {
      Eigen::VectorXd s = K.middleRows(h * tk, tk) * Q.row(h * tq + i).transpose() * scale;
      if (mask.defined()) s += M.row(h * tq + i).transpose();
      if (causal)
        for (std::int64_t j = i + 1; j < tk; ++j) s(j) = -inf;
      const double m = s.size() ? s.maxCoeff() : -inf;
      Eigen::RowVectorXd o = Eigen::RowVectorXd::Zero(dv);
      if (m != -inf || std::isnan(m)) {
        const Eigen::VectorXd e = (s.array() - m).exp().matrix();
        o = (e.transpose() * V.middleRows(h * tk, tk)) / e.sum();
      }
      for (std::int64_t c = 0; c < dv; ++c)
        out[static_cast<size_t>((h * tq + i) * dv + c)] = static_cast<float>(o(c));
    }
  Shape shape = q.shape();
  shape[shape.rank() - 1] = dv;
  return from_vector(out, shape);
}

}  // namespace mt::detail
