// What both fused attention kernels (ops/attention.cu on the CUDA cores, ops/attention_tc.cu on the tensor
// cores) share: loading a tile of rows of q, k or v into shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mt::detail {

// Whether a (b, h) slice's rows start 16-byte aligned (row stride a multiple of 4 floats): float4 loads.
__device__ __forceinline__ bool attn_rows16(const float* p, std::int64_t st) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0 && st % 4 == 0;
}

// Rows [row0, row0 + ROWS) of one operand (t < t_len) into shared memory rows of LD floats, zeros past the
// end; 16-byte loads where the rows are 16-byte aligned (`vec`). Every one of the block's THREADS calls it.
template <int D, int LD, int ROWS, int THREADS>
__device__ __forceinline__ void attn_load_rows(float* dst, const float* src, std::int64_t st, int row0,
                                               int t_len, bool vec) {
  if (vec) {
    for (int e = threadIdx.x; e < ROWS * D / 4; e += THREADS) {
      const int r = e / (D / 4), c = 4 * (e % (D / 4));
      const float4 v = row0 + r < t_len ? __ldg(reinterpret_cast<const float4*>(src + (row0 + r) * st + c))
                                        : make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(dst + r * LD + c) = v;
    }
    return;
  }
  for (int e = threadIdx.x; e < ROWS * D; e += THREADS) {
    const int r = e / D, c = e % D;
    dst[r * LD + c] = row0 + r < t_len ? __ldg(src + (row0 + r) * st + c) : 0.f;
  }
}

}  // namespace mt::detail
