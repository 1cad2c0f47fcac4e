// The executor's own precompiled kernels: reductions and softmax writing into a given buffer (the arena), so
// that a run allocates nothing and can be captured. Contiguous float32 input viewed as (outer, n, inner).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/reduce.h"

namespace mt::detail {

// y = softmax(x) (or log_softmax) along the middle extent of (outer, n, inner).
void launch_softmax(const float* x, float* y, std::int64_t outer, std::int64_t n, std::int64_t inner,
                    bool log, cudaStream_t stream);

// out[o, i] = op over r of x[o, r, i]. out is float32, or int32 for ArgMax / ArgMin.
void launch_reduce(ReduceOp op, const float* x, void* out, std::int64_t outer, std::int64_t n,
                   std::int64_t inner, cudaStream_t stream);

// Generic elementwise fallback does not exist here: unfused elementwise steps call the eager ops with out=.

}  // namespace mt::detail
