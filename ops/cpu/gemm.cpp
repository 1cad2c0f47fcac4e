// CPU reference SGEMM (Eigen): operands widened to float64, multiplied and accumulated in float64, then the
// float32 epilogue the kernels use (alpha, beta, bias, activation from ops/functors.h), then the row softmax
// where asked (Problem::softmax). CPU tensors run this.
#include <Eigen/Core>

#include <cmath>
#include <vector>

#include "minitensor/ops/functors.h"
#include "minitensor/ops/gemm/detail/problem.h"

namespace mt::detail::gemm {

void cpu_gemm(const Problem& p) {
  using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  if (p.m == 0 || p.n == 0) return;
  MatD a(p.m, p.k), b(p.k, p.n), acc(p.m, p.n);
  for (int bi = 0; bi < p.batch; ++bi) {
    // Gathered element by element: any strides (0 included) are fine.
    const float* A = p.a + bi * p.a_sb;
    const float* B = p.b + bi * p.b_sb;
    float* C = p.c + bi * p.c_sb;
    for (int i = 0; i < p.m; ++i)
      for (int q = 0; q < p.k; ++q) a(i, q) = A[i * p.a_sm + q * p.a_sk];
    for (int q = 0; q < p.k; ++q)
      for (int j = 0; j < p.n; ++j) b(q, j) = B[q * p.b_sk + j * p.b_sn];
    if (p.k > 0)
      acc.noalias() = a * b;
    else
      acc.setZero();
    std::vector<float> row(static_cast<size_t>(p.n));
    for (int i = 0; i < p.m; ++i) {
      for (int j = 0; j < p.n; ++j) {
        const float* c = C + i * p.c_sm + j * p.c_sn;
        double v = static_cast<double>(p.alpha) * acc(i, j);
        if (p.beta != 0.f) v += static_cast<double>(p.beta) * static_cast<double>(*c);
        float f = static_cast<float>(v);
        if (p.bias) f = f + p.bias[j * p.bias_s];
        row[static_cast<size_t>(j)] = activate(f, p.act);
      }
      if (p.softmax) {  // as the softmax reference (ops/cpu/softmax.cpp): max, then float64 exponentials
        float mx = row[0];
        for (float f : row) mx = fn::max_combine(mx, f);
        double sum = 0;
        for (float f : row) sum += std::exp(static_cast<double>(f) - mx);
        for (float& f : row) f = static_cast<float>(std::exp(static_cast<double>(f) - mx) / sum);
      }
      for (int j = 0; j < p.n; ++j) C[i * p.c_sm + j * p.c_sn] = row[static_cast<size_t>(j)];
    }
  }
}

}  // namespace mt::detail::gemm
