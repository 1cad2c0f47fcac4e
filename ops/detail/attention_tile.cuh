// Tile loads and the launch shared by the attention kernels (ops/attention.cu, ops/attention_tc.cu): rows of
// one (b, h) slice of q, k or v copied into shared memory by cp.async (zeros past the sequence's end), and
// the grid of query blocks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "minitensor/ops/detail/attention.h"
#include "minitensor/runtime/detail/device_primitives.cuh"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail {

// Whether a (b, h) slice's rows start 16-byte aligned (row stride a multiple of 4 floats): 16-byte copies.
__device__ __forceinline__ bool attn_rows16(const float* p, std::int64_t st) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0 && st % 4 == 0;
}

// Issues cp.async copies of rows [row0, row0 + ROWS) of one operand (rows t < t_len; zeros past the end) into
// shared memory rows of LD floats: 16-byte copies where the rows are 16-byte aligned (`vec`), else 4-byte
// ones. Every one of the block's THREADS calls it; the caller commits and waits. A zero-filled copy still
// names a readable source (the slice's first row), as compute-sanitizer checks its address.
template <int D, int LD, int ROWS, int THREADS>
__device__ __forceinline__ void attn_load_rows(float* dst, const float* src, std::int64_t st, int row0,
                                               int t_len, bool vec) {
  static_assert(ROWS * D % (4 * THREADS) == 0 && THREADS % (D / 4) == 0,
                "every thread copies the same column of rows a fixed step apart");
  if (vec) {
    // Thread x copies columns 4 (x % (D / 4)) .. + 3 of rows x / (D / 4) + i * kStep.
    constexpr int kStep = THREADS / (D / 4);
    const int r = threadIdx.x / (D / 4), c = 4 * (threadIdx.x % (D / 4));
    const float* from = src + (row0 + r) * st + c;
    float* to = dst + r * LD + c;
#pragma unroll
    for (int i = 0; i < ROWS / kStep; ++i) {
      const bool in = row0 + r + i * kStep < t_len;
      cp_async16(to + i * kStep * LD, in ? from + i * kStep * st : src, in ? 16 : 0);
    }
    return;
  }
#pragma unroll 4
  for (int i = 0; i < ROWS * D / THREADS; ++i) {
    const int e = threadIdx.x + i * THREADS;
    const int r = e / D, c = e % D;
    const bool in = row0 + r < t_len;
    cp_async4(dst + r * LD + c, in ? src + (row0 + r) * st + c : src, in ? 4 : 0);
  }
}

// Launches an attention kernel over `p` (its first parameter; `extra` the rest): one block of `threads` per
// `rows` queries of each (b0, b1) slice, `splits` of them along y, `smem` bytes of dynamic shared memory (the
// limit raised past 48 KiB). An ordinary launch: launched to overlap the kernel before it, the attention
// kernels slowed the fp32 block at 1x128 (bench/ops/TRIED.md).
template <class... Params, class... Extra>
void launch_attention_grid(void (*kernel)(Params...), int rows, int threads, std::size_t smem, int splits,
                           cudaStream_t stream, const AttnProblem& p, const Extra&... extra) {
  if (smem > 48 * 1024) use_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
  const std::int64_t blocks = static_cast<std::int64_t>((p.tq + rows - 1) / rows) * p.b0 * p.b1;
  kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(splits)), threads, smem, stream>>>(
      p, extra...);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::detail
