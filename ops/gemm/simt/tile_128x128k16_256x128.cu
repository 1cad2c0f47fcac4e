// Instantiates the production SGEMM for the deeper-k and larger tiles (simt/kernel.cuh): 128x128x16, and
// 256x128 of 16x8 threads, 8 deep (with the lane-loader ring and the unaligned-rows C kernels) and 16 deep
// (register-staged only).
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/ops/gemm/simt/kernel.cuh"

namespace mt::detail::gemm {

// One named configuration per line (simt/kernel.cuh documents the fields).
// clang-format off
struct Shape128x128k16 {
  static constexpr SimtShape value{.BM = 128, .BN = 128, .BK = 16, .WM = 64, .WN = 32, .TM = 8, .TN = 8, .stages = 3};
};
struct Shape256x128 {
  static constexpr SimtShape value{.BM = 256, .BN = 128, .BK = 8, .WM = 64, .WN = 64, .TM = 16, .TN = 8, .stages = 3, .rows_c = true, .lanes = kLanesNN};
};
struct Shape256x128k16 {
  static constexpr SimtShape value{.BM = 256, .BN = 128, .BK = 16, .WM = 64, .WN = 64, .TM = 16, .TN = 8, .stages = 3, .ring = false};
};
// clang-format on

void launch_simt_128x128k16(const Problem& p, const Config& c, cudaStream_t stream) {
  launch_simt<Shape128x128k16>(p, c.split_k, c.reduce, c.staging, stream);
}
void launch_simt_256x128(const Problem& p, const Config& c, cudaStream_t stream) {
  launch_simt<Shape256x128>(p, c.split_k, c.reduce, c.staging, stream);
}
void launch_simt_256x128k16(const Problem& p, const Config& c, cudaStream_t stream) {
  launch_simt<Shape256x128k16>(p, c.split_k, c.reduce, c.staging, stream);
}

}  // namespace mt::detail::gemm
