// Per-stream scratch of the SGEMM launches: split-K partials and packed operands, two slots of the one
// per-stream scratch (memory/stream_scratch.h, which holds the reuse and CUDA-graph capture rules).
#include <algorithm>

#include "minitensor/memory/stream_scratch.h"
#include "minitensor/ops/gemm/detail/scratch.h"

namespace mt::detail::gemm {

namespace {
// At least 1 MiB per (re)allocation, so that growth over a run of shapes is amortised; never null, since
// callers hand the pointer to kernels that may not touch it (K == 0).
float* scratch(ScratchSlot slot, std::size_t bytes, cudaStream_t stream) {
  return static_cast<float*>(
      stream_scratch(slot, std::max<std::size_t>(bytes, 1), stream, {.min_bytes = std::size_t{1} << 20}));
}
}  // namespace

float* split_scratch(std::size_t partial_bytes, cudaStream_t stream) {
  return scratch(ScratchSlot::GemmSplitPartials, partial_bytes, stream);
}

float* pack_scratch(std::size_t bytes, cudaStream_t stream) {
  return scratch(ScratchSlot::GemmPacked, bytes, stream);
}

}  // namespace mt::detail::gemm
