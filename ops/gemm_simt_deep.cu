// Instantiates the production SGEMM for the deeper-k and larger tiles (ops/gemm_simt.cuh).
#include "ops/gemm_simt.cuh"

namespace mt::detail::gemm {

void launch_simt_128x128k16(const Problem& p, int split, SplitReduce reduce, Staging staging,
                            cudaStream_t stream) {
  launch_simt<128, 128, 16, 64, 32, 8, 8, 3>(p, split, reduce, staging, stream);
}
void launch_simt_256x128(const Problem& p, int split, SplitReduce reduce, Staging staging,
                         cudaStream_t stream) {
  launch_simt<256, 128, 8, 64, 64, 16, 8, 3, 1, true, true, false, true, true>(p, split, reduce, staging, stream);
}

void launch_simt_256x128k16(const Problem& p, int split, SplitReduce reduce, Staging staging,
                            cudaStream_t stream) {
  launch_simt<256, 128, 16, 64, 64, 16, 8, 3, 1, false>(p, split, reduce, staging, stream);
}

}  // namespace mt::detail::gemm
