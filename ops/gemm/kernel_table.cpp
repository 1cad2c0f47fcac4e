// The kernel table: one row per SGEMM kernel. Adding a kernel is its enum value (detail/kernel_table.h), its
// row here and its launcher (detail/launchers.h).
#include <array>

#include "minitensor/ops/gemm/detail/kernel_table.h"
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/runtime/error.h"

namespace mt::detail::gemm {

namespace {

using F = KernelFamily;

// Rows in Kernel order (checked below). Names spell the tile: BMxBNxBK, warp tile, thread tile, stages.
// clang-format off
constexpr KernelInfo kTable[] = {
    // name, family, tile, is_tma, registers_only, whole_runs_only, has_ring16, launcher
    {Kernel::Naive, "gemm_naive", F::Rung, {128, 128, 8}, false, false, false, false, launch_rung},
    {Kernel::SmemTiled, "gemm_smem_tiled", F::Rung, {128, 128, 8}, false, false, false, false, launch_rung},
    {Kernel::RegTiled, "gemm_reg_tiled", F::Rung, {128, 128, 8}, false, false, false, false, launch_rung},
    {Kernel::WarpTiled, "gemm_warp_tiled", F::Rung, {128, 128, 8}, false, false, false, false, launch_rung},
    {Kernel::Simt128x128, "simt_128x128x8_w64x32_t8x8_s4", F::Simt, {128, 128, 8}, false, false, false, false,
     launch_simt_128x128},
    {Kernel::Simt128x128k16, "simt_128x128x16_w64x32_t8x8_s3", F::Simt, {128, 128, 16}, false, false, false,
     false, launch_simt_128x128k16},
    {Kernel::Simt128x128x2, "simt_128x128x8_w64x32_t8x8_s4_2cta", F::Simt, {128, 128, 8}, false, false, false,
     false, launch_simt_128x128x2},
    {Kernel::Simt256x128, "simt_256x128x8_w64x64_t16x8_s3", F::Simt, {256, 128, 8}, false, false, false, false,
     launch_simt_256x128},
    {Kernel::Simt256x128k16, "simt_256x128x16_w64x64_t16x8_s3", F::Simt, {256, 128, 16}, false, true, false,
     false, launch_simt_256x128k16},
    {Kernel::Simt128x64, "simt_128x64x8_w64x32_t8x8_s4", F::Simt, {128, 64, 8}, false, false, false, false,
     launch_simt_128x64},
    {Kernel::Simt64x64, "simt_64x64x8_w32x32_t8x4_s4", F::Simt, {64, 64, 8}, false, false, false, true,
     launch_simt_64x64},
    {Kernel::Simt32x128, "simt_32x128x8_w32x32_t8x4_s4", F::Simt, {32, 128, 8}, false, false, false, true,
     launch_simt_32x128},
    {Kernel::Simt32x64, "simt_32x64x8_w32x32_t8x4_s4", F::Simt, {32, 64, 8}, false, false, false, true,
     launch_simt_32x64},
    {Kernel::Simt64x128, "simt_64x128x8_w64x32_t8x8_s4", F::Simt, {64, 128, 8}, false, false, false, false,
     launch_simt_64x128},
    {Kernel::Simt64x256, "simt_64x256x8_w64x64_t16x8_s3", F::Simt, {64, 256, 8}, false, true, true, false,
     launch_simt_64x256},
    {Kernel::Simt128x64k16, "simt_128x64x16_w64x32_t8x8", F::Simt, {128, 64, 16}, false, true, false, false,
     launch_simt_128x64k16},
    {Kernel::SimtTma128x64, "simt_128x64x32_w64x32_t8x8_s3_tma", F::Simt, {128, 64, 32}, true, false, false,
     false, launch_simt_tma},
    {Kernel::SimtTma64x128, "simt_64x128x32_w64x32_t8x8_s3_tma", F::Simt, {64, 128, 32}, true, false, false,
     false, launch_simt_tma},
    {Kernel::Tensor128x128, "mma_128x128x16_w64x32_s4", F::Tensor, {128, 128, 16}, false, false, false, false,
     launch_tensor},
    {Kernel::Tensor128x64, "mma_128x64x16_w32x32_s4", F::Tensor, {128, 64, 16}, false, false, false, false,
     launch_tensor},
    {Kernel::Tensor64x64, "mma_64x64x16_w32x32_s4", F::Tensor, {64, 64, 16}, false, false, false, false,
     launch_tensor},
    {Kernel::Wgmma, "wgmma", F::Tensor, {128, 128, 32}, false, false, false, false, launch_wgmma_kernel},
    {Kernel::SmallK128x128, "small_k_128x128_t8x8", F::SmallK, {128, 128, 32}, false, false, false, false,
     launch_small_k_128x128},
    {Kernel::SmallK64x64, "small_k_64x64_t4x4", F::SmallK, {64, 64, 32}, false, false, false, false,
     launch_small_k_64x64},
    {Kernel::SmallKRows, "small_k_rows_32x128_t8x4", F::SmallK, {32, 128, 16}, false, false, false, false,
     launch_small_k_rows},
    {Kernel::Gemv, "gemv", F::Vector, {1, 1, 4}, false, false, false, false, launch_gemv},
};
// clang-format on

constexpr bool in_kernel_order() {
  for (std::size_t i = 0; i < std::size(kTable); ++i)
    if (static_cast<std::size_t>(kTable[i].kernel) != i) return false;
  return static_cast<std::size_t>(Kernel::Gemv) + 1 == std::size(kTable);
}
static_assert(in_kernel_order(), "kTable must hold one row per Kernel, in Kernel order");

std::vector<Kernel> of_family(KernelFamily f) {
  std::vector<Kernel> out;
  for (const KernelInfo& k : kTable)
    if (k.family == f) out.push_back(k.kernel);
  return out;
}

}  // namespace

std::span<const KernelInfo> kernel_table() {
  return kTable;
}

const KernelInfo& kernel_info(Kernel k) {
  const auto i = static_cast<std::size_t>(k);
  MT_CHECK(i < std::size(kTable), InvalidArgument, "gemm: unknown kernel ", static_cast<int>(k));
  return kTable[i];
}

std::vector<Kernel> rung_kernels() {
  return of_family(KernelFamily::Rung);
}
std::vector<Kernel> simt_kernels() {
  return of_family(KernelFamily::Simt);
}
std::vector<Kernel> tensor_kernels() {
  return of_family(KernelFamily::Tensor);
}
std::vector<Kernel> small_k_kernels() {
  return of_family(KernelFamily::SmallK);
}

std::string config_name(const Config& c) {
  std::string s = kernel_name(c.kernel);
  if (c.split_k > 1) s += "_splitk" + std::to_string(c.split_k);
  if (c.split_k > 1 && c.reduce == SplitReduce::Cluster) s += "_dsmem";
  if (c.split_k > 1 && c.reduce == SplitReduce::Kernel) s += "_reducekernel";
  if (is_simt(c.kernel) && c.staging == Staging::CpAsync) s += "_cpasync";
  if (is_simt(c.kernel) && c.staging == Staging::CpAsync16) s += "_cpasync16";
  if (c.pack) s += "_packed";
  if (c.swap) s += "_swapped";
  if (c.b_along_n) s += "_bn";
  if (c.math != MathMode::FP32) s += std::string("_") + math_mode_name(c.math);
  return s;
}

}  // namespace mt::detail::gemm
