// Instantiates the production SGEMM for the 128x128x8 tiles, one and two blocks per SM (ops/gemm_simt.cuh).
#include "ops/gemm_simt.cuh"

namespace mt::detail::gemm {

void launch_simt_128x128(const Problem& p, int split, SplitReduce reduce, Staging staging,
                         cudaStream_t stream) {
  launch_simt<128, 128, 8, 64, 32, 8, 8, 4>(p, split, reduce, staging, stream);
}
void launch_simt_128x128x2(const Problem& p, int split, SplitReduce reduce, Staging staging,
                           cudaStream_t stream) {
  launch_simt<128, 128, 8, 64, 32, 8, 8, 4, 2>(p, split, reduce, staging, stream);
}

}  // namespace mt::detail::gemm
