// Instantiates the production SGEMM for the one-sided tiles of skinny, small-M and short-K batched problems:
// 64 rows by 128 (8x8 per thread, 3 blocks per SM) and the 16x8-per-thread tiles of 64x256 and 256x64, 4
// warps and two blocks per SM, register-staged only (ops/gemm_simt.cuh). 64x256 is built for whole 16-byte
// runs only: its split-K scalar-run variant for m-contiguous A and k-contiguous B would spill (12 bytes at
// the 255-register cap).
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
void launch_simt_256x64(const Problem& p, int split, SplitReduce reduce, Staging staging,
                        cudaStream_t stream) {
  launch_simt<256, 64, 8, 64, 64, 16, 8, 3, 2, false>(p, split, reduce, staging, stream);
}

}  // namespace mt::detail::gemm
