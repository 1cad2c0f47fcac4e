// Instantiates the production SGEMM for the 128x128x8 tiles, one and two blocks per SM (simt/kernel.cuh).
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/ops/gemm/simt/kernel.cuh"

namespace mt::detail::gemm {

// One named configuration per line (simt/kernel.cuh documents the fields).
// clang-format off
struct Shape128x128 {
  static constexpr SimtShape value{.BM = 128, .BN = 128, .BK = 8, .WM = 64, .WN = 32, .TM = 8, .TN = 8, .stages = 4};
};
// clang-format on
using Shape128x128x2 = SimtMinBlocks<Shape128x128, 2>;

void launch_simt_128x128(const Problem& p, const Config& c, cudaStream_t stream) {
  launch_simt<Shape128x128>(p, c.split_k, c.reduce, c.staging, stream);
}
void launch_simt_128x128x2(const Problem& p, const Config& c, cudaStream_t stream) {
  launch_simt<Shape128x128x2>(p, c.split_k, c.reduce, c.staging, stream);
}

}  // namespace mt::detail::gemm
