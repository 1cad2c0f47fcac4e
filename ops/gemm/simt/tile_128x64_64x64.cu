// Instantiates the production SGEMM for the 128x64 and 64x64 tiles (64x64 held to 128 registers: 4 blocks per
// SM) (simt/kernel.cuh).
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/ops/gemm/simt/kernel.cuh"

namespace mt::detail::gemm {

// One named configuration per line (simt/kernel.cuh documents the fields).
// clang-format off
struct Shape128x64 {
  static constexpr SimtShape value{.BM = 128, .BN = 64, .BK = 8, .WM = 64, .WN = 32, .TM = 8, .TN = 8, .stages = 4};
};
struct Shape64x64 {
  static constexpr SimtShape value{.BM = 64, .BN = 64, .BK = 8, .WM = 32, .WN = 32, .TM = 8, .TN = 4, .stages = 4, .min_blocks = 4, .ring16 = true, .lanes = kLanesAny};
};
// clang-format on

void launch_simt_128x64(const Problem& p, const Config& c, cudaStream_t stream) {
  launch_simt<Shape128x64>(p, c.split_k, c.reduce, c.staging, stream);
}
void launch_simt_64x64(const Problem& p, const Config& c, cudaStream_t stream) {
  launch_simt<Shape64x64>(p, c.split_k, c.reduce, c.staging, stream);
}

}  // namespace mt::detail::gemm
