// Instantiates the production SGEMM for the 128x64 and 64x64 tiles (64x64 held to 128 registers: 4 blocks per
// SM) (ops/gemm_simt.cuh).
#include "ops/gemm_simt.cuh"

namespace mt::detail::gemm {

void launch_simt_128x64(const Problem& p, int split, SplitReduce reduce, Staging staging,
                        cudaStream_t stream) {
  launch_simt<128, 64, 8, 64, 32, 8, 8, 4>(p, split, reduce, staging, stream);
}
void launch_simt_64x64(const Problem& p, int split, SplitReduce reduce, Staging staging,
                       cudaStream_t stream) {
  launch_simt<64, 64, 8, 32, 32, 8, 4, 4, 4, true, true, true>(p, split, reduce, staging, stream);
}

}  // namespace mt::detail::gemm
