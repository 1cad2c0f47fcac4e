// Instantiates the production SGEMM for the small-M tiles (simt/kernel.cuh).
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/ops/gemm/simt/kernel.cuh"

namespace mt::detail::gemm {

// One named configuration per line (simt/kernel.cuh documents the fields).
// clang-format off
struct Shape32x128 {
  static constexpr SimtShape value{.BM = 32, .BN = 128, .BK = 8, .WM = 32, .WN = 32, .TM = 8, .TN = 4, .stages = 4, .min_blocks = 4, .ring16 = true, .lanes = kLanesNN};
};
struct Shape32x64 {
  static constexpr SimtShape value{.BM = 32, .BN = 64, .BK = 8, .WM = 32, .WN = 32, .TM = 8, .TN = 4, .stages = 4, .min_blocks = 1, .ring16 = true, .lanes = kLanesAny};
};
// clang-format on

void launch_simt_32x128(const Problem& p, const Config& c, cudaStream_t stream) {
  launch_simt<Shape32x128>(p, c.split_k, c.reduce, c.staging, stream);
}
void launch_simt_32x64(const Problem& p, const Config& c, cudaStream_t stream) {
  launch_simt<Shape32x64>(p, c.split_k, c.reduce, c.staging, stream);
}

}  // namespace mt::detail::gemm
