// Instantiates the production SGEMM for the small-M tiles (ops/gemm_simt.cuh).
#include "ops/gemm_simt.cuh"

namespace mt::detail::gemm {

void launch_simt_32x128(const Problem& p, int split, SplitReduce reduce, Staging staging,
                        cudaStream_t stream) {
  launch_simt<32, 128, 8, 32, 32, 8, 4, 4, 4, true, true, true>(p, split, reduce, staging, stream);
}
void launch_simt_32x64(const Problem& p, int split, SplitReduce reduce, Staging staging,
                       cudaStream_t stream) {
  launch_simt<32, 64, 8, 32, 32, 8, 4, 4, 1, true, true, true>(p, split, reduce, staging, stream);
}

}  // namespace mt::detail::gemm
