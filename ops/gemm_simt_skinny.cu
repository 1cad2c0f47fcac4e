// Instantiates the production SGEMM for the one-sided tiles of skinny, small-M and short-K batched problems
// (ops/gemm_simt.cuh):
// - 64 rows by 128: 8x8 per thread, 3 blocks per SM;
// - 64x256: 16x8 per thread in 4 warps, two blocks per SM, register-staged only, built for whole 16-byte runs
//   only (its split-K scalar-run variant for m-contiguous A and k-contiguous B would spill: 12 bytes at the
//   255-register cap);
// - 128x64, 16 deep: 8x8 per thread in 4 warps, two blocks per SM, register-staged only. The register-staged
//   loader issues a tile's loads one tile ahead; where A streams from DRAM (16384x64x4096), the 16-deep tile
//   has twice the math of an 8-deep one to hide them behind.
#include "ops/gemm_simt.cuh"

namespace mt::detail::gemm {

void launch_simt_64x128(const Problem& p, int split, SplitReduce reduce, Staging staging,
                        cudaStream_t stream) {
  launch_simt<64, 128, 8, 64, 32, 8, 8, 4, 3>(p, split, reduce, staging, stream);
}
void launch_simt_64x256(const Problem& p, int split, SplitReduce reduce, Staging staging,
                        cudaStream_t stream) {
  launch_simt<64, 256, 8, 64, 64, 16, 8, 3, 2, false, false>(p, split, reduce, staging, stream);
}
void launch_simt_128x64k16(const Problem& p, int split, SplitReduce reduce, Staging staging,
                           cudaStream_t stream) {
  launch_simt<128, 64, 16, 64, 32, 8, 8, 2, 2, false>(p, split, reduce, staging, stream);
}

}  // namespace mt::detail::gemm
