#include "minitensor/dist/shard.h"

#include "minitensor/runtime/error.h"

namespace mt::dist {

Tensor shard(const Tensor& t, std::int64_t dim, int rank, int world) {
  t.check_defined("dist::shard");
  MT_CHECK(world >= 1 && rank >= 0 && rank < world, InvalidArgument, "dist::shard: rank ", rank,
           " is not in [0, ", world, ")");
  MT_CHECK(t.dim() >= 1, ShapeError, "dist::shard: needs rank >= 1, got ", t.shape());
  const int d = wrap_dim(dim, t.dim(), "dist::shard");
  MT_CHECK(t.size(d) % world == 0, ShapeError, "dist::shard: extent ", t.size(d), " of dim ", d, " of ",
           t.shape(), " is not a multiple of the world size ", world);
  const std::int64_t block = t.size(d) / world;
  return t.narrow(d, rank * block, block).clone();
}

}  // namespace mt::dist
