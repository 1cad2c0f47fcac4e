// Sharding tensors for tensor parallelism: the block of a weight that one rank holds. Pure tensor work: needs
// no NCCL (it works in a build without it) and no communicator.
#pragma once

#include <cstdint>

#include "minitensor/tensor/tensor.h"

namespace mt::dist {

// Rank `rank`'s block of `t` cut into `world` equal blocks along `dim` (dim may be negative): a contiguous
// copy on t's device. ShapeError when world does not divide t.size(dim); InvalidArgument for a rank outside
// [0, world).
//   column-parallel linear, w (in, out): shard(w, 1, r, n); its bias (out): shard(b, 0, r, n)
//   row-parallel linear, w (in, out): shard(w, 0, r, n); its bias is not split (added once)
Tensor shard(const Tensor& t, std::int64_t dim, int rank, int world);

}  // namespace mt::dist
