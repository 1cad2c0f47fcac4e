// The teaching ladder of the SGEMM, slowest first. Every rung handles every problem (any strides, batches,
// the fused epilogue); dispatch never picks one, bench/gemm times them all as baselines.
//
// Napkin maths (one m x n x k problem): 2mnk FLOPs; at least 4(mk + kn + mn) bytes of DRAM traffic. At 4096^3
// that is 137 GFLOP over 201 MB: 680 FLOP/byte, far above the H100/H200 balance point (datasheet peak ~67
// TFLOPS FP32 FMA vs 3.3-4.8 TB/s), so the big shapes are bound by FMA issue and shared-memory bandwidth, not
// DRAM. A block tile BM x BN reads (BM + BN) * BK floats from shared memory per BM * BN * BK FMAs; a thread
// tile TM x TN reads TM + TN registers' worth per TM * TN FMAs, which is why 8x8 (4 FMAs per loaded float) is
// the working size.
//
//   gemm_naive       one thread per element of C, operands straight from global memory (L1/L2 do the caching)
//   gemm_smem_tiled  32x32 tiles staged in shared memory, one thread per element: 32x fewer global loads
//   gemm_reg_tiled   128x128x8 tiles, 8x8 outputs per thread from an outer product over registers
//   gemm_warp_tiled  the same tiles in 64x32 warp tiles (float4 fragment reads), two shared buffers, the next
//                    tile's global loads staged in registers during this tile's math: one barrier per tile
//   production       ops/gemm/simt/kernel.cuh: multi-stage cp.async or register pipelines, split K, packing,
//                    clusters, TMA (ops/gemm/simt/tma.cu); tensor cores in ops/gemm/tensorcore/
#include <cuda_runtime.h>

#include "minitensor/ops/gemm/detail/device.cuh"
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/runtime/error.h"

namespace mt::detail::gemm {

namespace {

// Rung 1. Threads along x walk n, so B reads and C writes coalesce; A(i, p) is a warp-wide broadcast.
__global__ void gemm_naive(Problem p) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int b = blockIdx.z;
  if (i >= p.m || j >= p.n) return;
  const float* a = a_batch(p, b) + i * p.a_sm;
  const float* bb = b_batch(p, b) + j * p.b_sn;
  float acc = 0.f;
  for (int q = 0; q < p.k; ++q) acc = fmaf(a[q * p.a_sk], bb[q * p.b_sk], acc);
  store_run<1>(p, c_batch(p, b), i, j, &acc, false);
}

// Rung 2. Each element loaded from global memory is reused 32 times from shared memory. The +1 column of
// padding keeps the column reads of As conflict-free.
constexpr int kTile2 = 32;
__global__ void __launch_bounds__(kTile2* kTile2) gemm_smem_tiled(Problem p) {
  __shared__ float As[kTile2][kTile2 + 1], Bs[kTile2][kTile2 + 1];
  const int tx = threadIdx.x, ty = threadIdx.y, b = blockIdx.z;
  const int i = blockIdx.y * kTile2 + ty, j = blockIdx.x * kTile2 + tx;
  const float* A = a_batch(p, b);
  const float* B = b_batch(p, b);
  float acc = 0.f;
  for (int k0 = 0; k0 < p.k; k0 += kTile2) {
    As[ty][tx] = (i < p.m && k0 + tx < p.k) ? A[i * p.a_sm + (k0 + tx) * p.a_sk] : 0.f;
    Bs[ty][tx] = (k0 + ty < p.k && j < p.n) ? B[(k0 + ty) * p.b_sk + j * p.b_sn] : 0.f;
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kTile2; ++q) acc = fmaf(As[ty][q], Bs[q][tx], acc);
    __syncthreads();
  }
  if (j < p.n) store_run<1>(p, c_batch(p, b), i, j, &acc, false);
}

// Rung 3. 128x128x8 block tile, 256 threads as 16x16, 8x8 outputs each. Thread (ty, tx) owns rows ty + 16r
// and columns tx + 16c (interleaved), so each store instruction writes 16 consecutive columns. A is stored
// transposed (As[k][m]) so the inner loop reads both operands along the tile. Per k: 16 shared loads feed 64
// FMAs. One stage: loads and compute do not overlap (the next rung fixes that).
constexpr int kRegBM = 128, kRegBN = 128, kRegBK = 8;
__global__ void __launch_bounds__(256) gemm_reg_tiled(Problem p) {
  __shared__ float As[kRegBK][kRegBM], Bs[kRegBK][kRegBN];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16, b = blockIdx.z;
  const int m0 = blockIdx.y * kRegBM, n0 = blockIdx.x * kRegBN;
  const float* A = a_batch(p, b);
  const float* B = b_batch(p, b);
  float acc[8][8] = {};
  for (int k0 = 0; k0 < p.k; k0 += kRegBK) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // 1024 elements of each tile, 4 per thread
      const int e = tid + r * 256;
      const int am = e / kRegBK, ak = e % kRegBK;  // k fastest: row-major A reads 32-byte runs
      As[ak][am] = (m0 + am < p.m && k0 + ak < p.k) ? A[(m0 + am) * p.a_sm + (k0 + ak) * p.a_sk] : 0.f;
      const int bk = e / kRegBN, bn = e % kRegBN;
      Bs[bk][bn] = (k0 + bk < p.k && n0 + bn < p.n) ? B[(k0 + bk) * p.b_sk + (n0 + bn) * p.b_sn] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kRegBK; ++q) {
      float ra[8], rb[8];
#pragma unroll
      for (int r = 0; r < 8; ++r) ra[r] = As[q][ty + 16 * r];
#pragma unroll
      for (int c = 0; c < 8; ++c) rb[c] = Bs[q][tx + 16 * c];
#pragma unroll
      for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[r][c] = fmaf(ra[r], rb[c], acc[r][c]);
    }
    __syncthreads();
  }
  float* C = c_batch(p, b);
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int c = 0; c < 8; ++c)
      if (n0 + tx + 16 * c < p.n) store_run<1>(p, C, m0 + ty + 16 * r, n0 + tx + 16 * c, &acc[r][c], false);
}

// Rung 4. 128x128x8 block tile, 256 threads as 2 x 4 warps of 64x32 warp tiles, 8x8 outputs per thread in
// float4 fragments: lane (lane_m, lane_n) of the 8 x 4 lanes owns rows wm0 + 32g + 4 lane_m + r and columns
// wn0 + 16h + 4 lane_n + c (g, h in {0, 1}; r, c < 4), so every fragment read from shared memory is one
// float4 and a warp's reads of a k-row are broadcasts over few rows. Two shared buffers: tile t + 1's global
// loads are issued into registers before tile t's math (their latency hides behind it) and stored to the
// other buffer after it, so one barrier per tile suffices. Per k: 4 float4 shared loads feed 64 FMAs.
constexpr int kWarpBM = 128, kWarpBN = 128, kWarpBK = 8, kWarpPad = 4;
static_assert(kWarpBM * kWarpBK == 4 * 256 && kWarpBN * kWarpBK == 4 * 256,
              "each of the 256 threads loads one run of 4 of each operand tile");
static_assert(kWarpPad % 4 == 0, "shared rows stay 16-byte aligned for float4 fragment reads");

__global__ void __launch_bounds__(256) gemm_warp_tiled(Problem p, bool a_vec, bool b_vec, bool c_vec) {
  __shared__ __align__(16) float As[2][kWarpBK][kWarpBM + kWarpPad];  // A transposed: [k][m]
  __shared__ __align__(16) float Bs[2][kWarpBK][kWarpBN + kWarpPad];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, b = blockIdx.z;
  const int m0 = blockIdx.y * kWarpBM, n0 = blockIdx.x * kWarpBN;
  const int wm0 = (warp / 4) * 64, wn0 = (warp % 4) * 32;  // the warp's tile within the block's
  const int lane_m = lane / 4, lane_n = lane % 4;
  const float* A = a_batch(p, b);
  const float* B = b_batch(p, b);
  // This thread's runs of 4: A row am, k-values ak..ak+3; B k-row bk, columns bn..bn+3.
  const int am = tid / 2, ak = (tid % 2) * 4, bk = tid / 32, bn = (tid % 32) * 4;
  float ra_next[4], rb_next[4];
  // Tile k0's runs into registers: one float4 where the run is contiguous, aligned and inside the matrix,
  // else 4 predicated scalar loads (zeros outside the matrix).
  auto load_next = [&](int k0) {
    const int i = m0 + am, ka = k0 + ak;
    if (a_vec && i < p.m && ka + 4 <= p.k) {
      const float4 v = *reinterpret_cast<const float4*>(A + i * p.a_sm + ka);
      ra_next[0] = v.x, ra_next[1] = v.y, ra_next[2] = v.z, ra_next[3] = v.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        ra_next[e] = i < p.m && ka + e < p.k ? A[i * p.a_sm + (ka + e) * p.a_sk] : 0.f;
    }
    const int kb = k0 + bk, j = n0 + bn;
    if (b_vec && kb < p.k && j + 4 <= p.n) {
      const float4 v = *reinterpret_cast<const float4*>(B + kb * p.b_sk + j);
      rb_next[0] = v.x, rb_next[1] = v.y, rb_next[2] = v.z, rb_next[3] = v.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        rb_next[e] = kb < p.k && j + e < p.n ? B[kb * p.b_sk + (j + e) * p.b_sn] : 0.f;
    }
  };
  auto store_next = [&](int buf) {
#pragma unroll
    for (int e = 0; e < 4; ++e) As[buf][ak + e][am] = ra_next[e];
    *reinterpret_cast<float4*>(&Bs[buf][bk][bn]) =
        make_float4(rb_next[0], rb_next[1], rb_next[2], rb_next[3]);
  };

  float acc[8][8] = {};
  const int n_tiles = (p.k + kWarpBK - 1) / kWarpBK;
  if (n_tiles > 0) {
    load_next(0);
    store_next(0);
  }
  __syncthreads();
  for (int t = 0; t < n_tiles; ++t) {
    const int buf = t & 1;
    const bool more = t + 1 < n_tiles;
    if (more) load_next((t + 1) * kWarpBK);  // in flight during this tile's math
#pragma unroll
    for (int q = 0; q < kWarpBK; ++q) {
      float ra[8], rb[8];
#pragma unroll
      for (int g = 0; g < 2; ++g) {
        const float4 v = *reinterpret_cast<const float4*>(&As[buf][q][wm0 + 32 * g + 4 * lane_m]);
        ra[4 * g] = v.x, ra[4 * g + 1] = v.y, ra[4 * g + 2] = v.z, ra[4 * g + 3] = v.w;
        const float4 w = *reinterpret_cast<const float4*>(&Bs[buf][q][wn0 + 16 * g + 4 * lane_n]);
        rb[4 * g] = w.x, rb[4 * g + 1] = w.y, rb[4 * g + 2] = w.z, rb[4 * g + 3] = w.w;
      }
#pragma unroll
      for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[r][c] = fmaf(ra[r], rb[c], acc[r][c]);
    }
    // The other buffer was last read by tile t - 1, before the previous barrier.
    if (more) store_next(buf ^ 1);
    __syncthreads();
  }
  float* C = c_batch(p, b);
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int i = m0 + wm0 + 32 * (r / 4) + 4 * lane_m + r % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) store_run<4>(p, C, i, n0 + wn0 + 16 * h + 4 * lane_n, &acc[r][4 * h], c_vec);
  }
}

}  // namespace

// ---------------------------------------------------------------- launcher

void launch_rung(const Problem& p, const Config& c, cudaStream_t stream) {
  switch (c.kernel) {
    case Kernel::Naive: {
      const dim3 block(32, 8), grid((p.n + 31) / 32, (p.m + 7) / 8, p.batch);
      gemm_naive<<<grid, block, 0, stream>>>(p);
      break;
    }
    case Kernel::SmemTiled: {
      const dim3 block(kTile2, kTile2),
          grid((p.n + kTile2 - 1) / kTile2, (p.m + kTile2 - 1) / kTile2, p.batch);
      gemm_smem_tiled<<<grid, block, 0, stream>>>(p);
      break;
    }
    case Kernel::RegTiled: {
      const dim3 grid((p.n + kRegBN - 1) / kRegBN, (p.m + kRegBM - 1) / kRegBM, p.batch);
      gemm_reg_tiled<<<grid, 256, 0, stream>>>(p);
      break;
    }
    case Kernel::WarpTiled: {
      const dim3 grid((p.n + kWarpBN - 1) / kWarpBN, (p.m + kWarpBM - 1) / kWarpBM, p.batch);
      const bool a_vec =
          p.a_sk == 1 && p.a_sm % 4 == 0 && (p.a_sb % 4 == 0 || p.batch == 1) && aligned16(p.a);
      gemm_warp_tiled<<<grid, 256, 0, stream>>>(p, a_vec, b_vectorisable(p), c_vectorisable(p));
      break;
    }
    default:
      MT_THROW(InvalidArgument, "gemm: ", kernel_name(c.kernel), " is not a rung of the ladder");
  }
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::detail::gemm
