// Variants of the 16-byte tiled transpose (tensor/transpose.cu), as benchmark rungs for bench_ops: which
// tile shape, block order, cache operator and register cap moves a large 2-D transpose closest to the copy
// bandwidth. launch_copy_tiled and TransposeKernel::Best use the measured winner.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mt::detail {

// TRxTC: tiles of 32 x 32 per block (each thread moves TR * TC float4 each way; 2x2: 8 blocks of 256 threads
// resident per SM, 2x4 and 4x2: 4). Grouped: blocks ordered in panels of 2048 source rows walked column by
// column (a near-square resident region) instead of row-major. Streaming: evict-first loads and stores.
enum class TransposeTiles {
  Tiles2x2,
  Tiles2x2Grouped,
  Tiles2x2Streaming,
  Tiles2x2GroupedStreaming,
  Tiles2x4,
  Tiles4x2,
  Tiles4x2Grouped,
  Tiles2x4Streaming
};

// dst (n_cols, n_rows) = src (n_rows, n_cols)^T, both contiguous float32; dims divisible by 4 and 16-byte
// aligned pointers (InvalidArgument otherwise).
void launch_transpose_vec4_rung(TransposeTiles tiles, float* dst, const float* src, std::int64_t n_rows,
                                std::int64_t n_cols, cudaStream_t stream);

}  // namespace mt::detail
