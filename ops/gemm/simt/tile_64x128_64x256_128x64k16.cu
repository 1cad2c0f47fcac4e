// Instantiates the production SGEMM for the one-sided tiles of skinny, small-M and short-K batched problems
// (simt/kernel.cuh):
// - 64 rows by 128: 8x8 per thread, 3 blocks per SM;
// - 64x256: 16x8 per thread in 4 warps, two blocks per SM, register-staged only, built for whole 16-byte runs
//   only (its split-K scalar-run variant for m-contiguous A and k-contiguous B would spill);
// - 128x64, 16 deep: 8x8 per thread in 4 warps, two blocks per SM, register-staged only. The register-staged
//   loader issues a tile's loads one tile ahead; where A streams from DRAM, the 16-deep tile has twice the
//   math of an 8-deep one to hide them behind.
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/ops/gemm/simt/kernel.cuh"

namespace mt::detail::gemm {

// One named configuration per line (simt/kernel.cuh documents the fields).
// clang-format off
struct Shape64x128 {
  static constexpr SimtShape value{.BM = 64, .BN = 128, .BK = 8, .WM = 64, .WN = 32, .TM = 8, .TN = 8, .stages = 4, .min_blocks = 3};
};
struct Shape64x256 {
  static constexpr SimtShape value{.BM = 64, .BN = 256, .BK = 8, .WM = 64, .WN = 64, .TM = 16, .TN = 8, .stages = 3, .min_blocks = 2, .ring = false, .scalar_runs = false};
};
struct Shape128x64k16 {
  static constexpr SimtShape value{.BM = 128, .BN = 64, .BK = 16, .WM = 64, .WN = 32, .TM = 8, .TN = 8, .stages = 2, .min_blocks = 2, .ring = false};
};
// clang-format on

void launch_simt_64x128(const Problem& p, const Config& c, cudaStream_t stream) {
  launch_simt<Shape64x128>(p, c.split_k, c.reduce, c.staging, stream);
}
void launch_simt_64x256(const Problem& p, const Config& c, cudaStream_t stream) {
  launch_simt<Shape64x256>(p, c.split_k, c.reduce, c.staging, stream);
}
void launch_simt_128x64k16(const Problem& p, const Config& c, cudaStream_t stream) {
  launch_simt<Shape128x64k16>(p, c.split_k, c.reduce, c.staging, stream);
}

}  // namespace mt::detail::gemm
