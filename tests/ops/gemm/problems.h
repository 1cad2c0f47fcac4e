// Problem descriptors of the GEMM dispatch and tuner tests (no device memory: only the shapes and strides
// that choose(), can_implement() and the tuner read).
#pragma once

#include <cstdint>
#include <string>

#include "minitensor/ops/gemm/detail/problem.h"

namespace mt::detail::gemm::test {

// "MxNxK", or "Bx(MxNxK)" for a batch: the problem's name in a test's trace, as bench_gemm names shapes.
inline std::string shape_name(const Problem& p) {
  const std::string s = std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k);
  return p.batch > 1 ? std::to_string(p.batch) + "x(" + s + ")" : s;
}

// A row-major m x n x k problem in dense rows.
inline Problem dense_rows(int m, int n, int k) {
  Problem p;
  p.m = m, p.n = n, p.k = k;
  p.a_sm = k, p.a_sk = 1, p.b_sk = n, p.b_sn = 1, p.c_sm = n, p.c_sn = 1;
  return p;
}
// Row-major with leading dimensions lda, ldb.
inline Problem rows(int m, int n, int k, std::int64_t lda, std::int64_t ldb) {
  Problem p;
  p.m = m, p.n = n, p.k = k;
  p.a_sm = lda, p.a_sk = 1, p.b_sk = ldb, p.b_sn = 1, p.c_sm = n, p.c_sn = 1;
  return p;
}
// A dense batch of row-major problems.
inline Problem dense(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch) {
  Problem p;
  p.m = static_cast<int>(m), p.n = static_cast<int>(n), p.k = static_cast<int>(k);
  p.batch = static_cast<int>(batch);
  p.a_sm = k, p.a_sk = 1, p.a_sb = m * k;
  p.b_sk = n, p.b_sn = 1, p.b_sb = k * n;
  p.c_sm = n, p.c_sn = 1, p.c_sb = m * n;
  return p;
}

}  // namespace mt::detail::gemm::test
