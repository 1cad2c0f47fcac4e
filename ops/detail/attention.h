// The fused attention kernel (ops/attention.cu) and its CPU reference (ops/cpu/attention.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "minitensor/ops/gemm.h"
#include "minitensor/tensor/tensor.h"

namespace mt::detail {

// A 4-D operand (b0, b1, t, d) with element strides, contiguous along d.
struct AttnOperand {
  const float* ptr = nullptr;
  std::int64_t s0 = 0, s1 = 0, st = 0;
};

struct AttnProblem {
  int b0 = 1, b1 = 1, tq = 0, tk = 0, d = 0;
  AttnOperand q, k, v;
  const float* mask = nullptr;  // (b0, b1, tq, tk) by strides, any of them 0; nullptr: none
  std::int64_t m0 = 0, m1 = 0, mi = 0, mj = 0;
  float* out = nullptr;  // (b0, b1, tq, d) by element strides, contiguous along d
  std::int64_t o0 = 0, o1 = 0, ot = 0;
  float scale = 1.f;
  bool causal = false;
  MathMode math = MathMode::FP32;  // TF32, TF32x3: launch_attention_tc's products
};

// Each returns false where the head dim has no kernel. launch_attention runs float32 on the CUDA cores
// (ops/attention.cu; head dims 32, 64, 128), launch_attention_tc the TF32 / TF32x3 products on the tensor
// cores (ops/attention_tc.cu; head dims 32 and 64).
bool launch_attention(const AttnProblem& p, cudaStream_t stream);
bool launch_attention_tc(const AttnProblem& p, cudaStream_t stream);

// Key splits of the tensor-core kernel (ops/attention_tc.cu): where its query tiles (64 rows of one head)
// give fewer than kKvSplitMaxBlocksPerSm blocks per SM, each tile's keys are split over up to kMaxKvSplits
// blocks, each with at least kKvSplitMinKeyTiles tiles of 32 keys, as long as the blocks stay within
// kKvSplitTargetBlocksPerSm per SM; 1: no split. Pure (no device), for tests on the CPU.
inline constexpr int kMaxKvSplits = 8;
inline constexpr int kKvSplitMinKeyTiles = 8;
inline constexpr int kKvSplitMaxBlocksPerSm = 2;
inline constexpr int kKvSplitTargetBlocksPerSm = 6;
int attention_kv_splits(int tq, int tk, std::int64_t heads, int sm_count);

// float64 per query row; a fully masked row gives zeros. q, k, v and mask as for mt::attention, mask already
// expanded to (..., Tq, Tk) or undefined.
Tensor cpu_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                     double scale);

}  // namespace mt::detail
