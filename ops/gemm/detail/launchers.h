// The launcher of each row of the kernel table (ops/gemm/kernel_table.cpp), defined beside its kernels.
#pragma once

#include <cuda_runtime_api.h>

#include "minitensor/ops/gemm/detail/kernel_table.h"
#include "minitensor/ops/gemm/detail/problem.h"

namespace mt::detail::gemm {

void launch_rung(const Problem& p, const Config& c, cudaStream_t stream);  // ladder.cu

// One per production SIMT configuration (simt/tile_*.cu).
void launch_simt_128x128(const Problem& p, const Config& c, cudaStream_t stream);
void launch_simt_128x128x2(const Problem& p, const Config& c, cudaStream_t stream);
void launch_simt_128x128k16(const Problem& p, const Config& c, cudaStream_t stream);
void launch_simt_256x128(const Problem& p, const Config& c, cudaStream_t stream);
void launch_simt_256x128k16(const Problem& p, const Config& c, cudaStream_t stream);
void launch_simt_128x64(const Problem& p, const Config& c, cudaStream_t stream);
void launch_simt_64x64(const Problem& p, const Config& c, cudaStream_t stream);
void launch_simt_32x128(const Problem& p, const Config& c, cudaStream_t stream);
void launch_simt_32x64(const Problem& p, const Config& c, cudaStream_t stream);
void launch_simt_64x128(const Problem& p, const Config& c, cudaStream_t stream);
void launch_simt_64x256(const Problem& p, const Config& c, cudaStream_t stream);
void launch_simt_128x64k16(const Problem& p, const Config& c, cudaStream_t stream);
void launch_simt_tma(const Problem& p, const Config& c, cudaStream_t stream);  // simt/tma.cu

// mma.sync (tensorcore/mma_tf32.cu): split K through the L2 workspace and the reduce kernel.
void launch_tensor(const Problem& p, const Config& c, cudaStream_t stream);
// wgmma (tensorcore/wgmma.cu): split K only as chosen here (cluster reduction).
void launch_wgmma_kernel(const Problem& p, const Config& c, cudaStream_t stream);

// Short K (simt/small_k.cu): unsplit (Config::split_k is 1).
void launch_small_k_128x128(const Problem& p, const Config& c, cudaStream_t stream);
void launch_small_k_64x64(const Problem& p, const Config& c, cudaStream_t stream);
void launch_small_k_rows(const Problem& p, const Config& c, cudaStream_t stream);

// Matrix-vector products (gemv.cu): K split over blocks as the launcher sees fit (Config::split_k is 1).
void launch_gemv(const Problem& p, const Config& c, cudaStream_t stream);

// Whether the binary carries kernels that DeviceModel::current() asks about.
bool tma_kernels_usable();    // simt/tma.cu: built for sm_90+, and the TMA encoder reachable
bool wgmma_kernels_usable();  // tensorcore/wgmma.cu: the sm_90a image loadable

}  // namespace mt::detail::gemm
