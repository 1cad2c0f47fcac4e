// Per-stream scratch of the SGEMM launches (ops/gemm/scratch.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace mt::detail::gemm {

// Split-K partials (split * batch * m * n floats, `partial_bytes`) per (device, stream), grown on demand and
// kept: work on one stream is ordered, so reuse needs no sync and no per-call allocation. Launches being
// captured into a CUDA graph get scratch of their own, never freed.
float* split_scratch(std::size_t partial_bytes, cudaStream_t stream);
// Scratch for operand copies (Config::pack, the wgmma pack pass), per stream like split_scratch.
float* pack_scratch(std::size_t bytes, cudaStream_t stream);

}  // namespace mt::detail::gemm
