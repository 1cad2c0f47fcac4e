// What bench_gemm's table (bench_gemm.cu) and its shape-space run (space.cu) share: the cuBLAS handles on
// the benchmark stream, the cuBLAS call, and the interleaved timer.
#pragma once

#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/stream.h"

#define CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                      \
    const cublasStatus_t s_ = (expr);                                                       \
    if (s_ != CUBLAS_STATUS_SUCCESS) MT_THROW(Error, #expr, " failed: cublas status ", s_); \
  } while (0)

namespace gemm_bench {

using mt::detail::gemm::Problem;

// cuBLAS in pedantic fp32 (the fp32 baseline) and in TF32 (the TF32 modes' baseline), both on the stream
// the benchmark times.
struct Handles {
  cublasHandle_t pedantic = nullptr, tf32 = nullptr;
  cudaStream_t stream = nullptr;
  Handles() {
    stream = mt::default_stream(0);
    CUBLAS_CHECK(cublasCreate(&pedantic));
    CUBLAS_CHECK(cublasSetMathMode(pedantic, CUBLAS_PEDANTIC_MATH));
    CUBLAS_CHECK(cublasSetStream(pedantic, stream));
    CUBLAS_CHECK(cublasCreate(&tf32));
    CUBLAS_CHECK(cublasSetMathMode(tf32, CUBLAS_TF32_TENSOR_OP_MATH));
    CUBLAS_CHECK(cublasSetStream(tf32, stream));
  }
};
inline Handles& handles() {
  static Handles h;
  return h;
}

// cuBLAS's SGEMM on p (alpha 1, beta 0; no epilogue), its transposes read from the strides. Row-major C = A B
// is column-major C^T = B^T A^T: an operand stored as its row-major matrix goes as CUBLAS_OP_N, one stored
// transposed (A along m, B along k) as CUBLAS_OP_T.
inline void cublas_gemm(cublasHandle_t h, const Problem& p) {
  const float alpha = 1.f, beta = 0.f;
  const bool ta = p.a_sk != 1, tb = p.b_sn != 1;
  const std::int64_t lda = ta ? p.a_sk : std::max<std::int64_t>(p.a_sm, p.k);
  const std::int64_t ldb = tb ? p.b_sn : std::max<std::int64_t>(p.b_sk, p.n);
  CUBLAS_CHECK(cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         p.n, p.m, p.k, &alpha, p.b, static_cast<int>(ldb), p.b_sb, p.a,
                                         static_cast<int>(lda), p.a_sb, &beta, p.c, p.n, p.c_sb, p.batch));
}

// Median ms per launch of each of `fns`, their samples interleaved (sample i of every fn, then sample i + 1),
// so that drifts of the card's state over the run (its clocks under the power limit) fall on all of them
// alike. Sample i, launch r runs on operand copy `at((i * reps + r) % copies)`, so that small shapes are not
// timed from L2.
inline std::vector<double> time_interleaved(int iters, int copies, const std::function<Problem(int)>& at,
                                            const std::vector<std::function<void(const Problem&)>>& fns,
                                            std::vector<double>* all = nullptr) {
  cudaStream_t st = handles().stream;
  for (const auto& fn : fns)
    for (int w = 0; w < 2; ++w) fn(at(w % copies));
  cudaEvent_t e0, e1;
  MT_CUDA_CHECK(cudaEventCreate(&e0));
  MT_CUDA_CHECK(cudaEventCreate(&e1));
  // Short kernels are timed as bursts of back-to-back launches (operands still rotating), so host launch
  // cost and idle gaps between synchronised single launches do not count: a GEMM inside a graph or a layer
  // stack runs back to back too.
  auto sample = [&](const std::function<void(const Problem&)>& fn, int i, int reps) {
    MT_CUDA_CHECK(cudaEventRecord(e0, st));
    for (int r = 0; r < reps; ++r) fn(at((i * reps + r) % copies));
    MT_CUDA_CHECK(cudaEventRecord(e1, st));
    MT_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    MT_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    return static_cast<double>(t) / reps;
  };
  // One burst length for all of them (bursts while any single launch takes under 0.2 ms), so that they are
  // timed alike.
  double first = 1e30;
  for (const auto& fn : fns) first = std::min(first, sample(fn, 0, 1));
  const int reps = first < 0.2 ? 20 : 1;
  std::vector<std::vector<double>> ms(fns.size());
  for (int i = 0; i < iters; ++i)
    for (std::size_t f = 0; f < fns.size(); ++f) ms[f].push_back(sample(fns[f], i, reps));
  MT_CUDA_CHECK(cudaEventDestroy(e0));
  MT_CUDA_CHECK(cudaEventDestroy(e1));
  if (all) *all = ms[0];
  std::vector<double> med;
  for (auto& m : ms) {
    std::sort(m.begin(), m.end());
    med.push_back(m[m.size() / 2]);
  }
  return med;
}

// The shape-space run (space.cu): `bench_gemm --space[=N] [--seed=S] [--math=...] [--json=PATH]`.
int run_space(int argc, char** argv);

}  // namespace gemm_bench
