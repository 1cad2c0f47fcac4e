// Tensor-core SGEMM: mma.sync m16n8k8 with TF32 inputs (plain sm_80/sm_90 PTX), then its launcher.
//
// MathMode::TF32: each operand rounded to TF32 (10-bit mantissa, round to nearest), products accumulated in
// FP32 inside the tensor core. About 1e-3 relative error. MathMode::TF32x3: each operand split as x = big +
// small with big = tf32(x), small = tf32(x - big) (22 of the 24 mantissa bits kept), and a * b ~ a_small *
// b_big + a_big * b_small + a_big * b_big (small * small, ~2^-22 relative, dropped). The three products of
// one k-step of 8 go into a zeroed accumulator that is then added to the running sum with an FP32
// (round-to-nearest) add: the tensor core truncates its own accumulation, and truncating the long running sum
// would bias the error with K (Ootomo & Yokota 2022). FP32-class accuracy at 3 tensor-core products per FMA;
// the tensor cores run ~7x faster than the FP32 pipes on H100/H200.
//
// Shared memory keeps the SIMT kernels' layout, [k][m] and [k][n] (x contiguous), so the same cp.async
// loaders fill it. Fragment reads are 32-bit: lane (g = lane/4, t = lane%4) reads row k = t (and t + 4) at
// column g, and a row stride of x + 8 floats (8 mod 32 banks) puts the 32 lanes on 32 distinct banks.
// (Hopper's wgmma would want both operands K-major in shared memory; mma.sync only needs the registers
// right.)
#include <type_traits>

#include "minitensor/ops/gemm/detail/device.cuh"
#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/ops/gemm/simt/loaders.cuh"
#include "minitensor/runtime/detail/device_primitives.cuh"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail::gemm {

constexpr int kMmaPad = 8;  // shared rows of x + 8 floats: fragment reads (8t + g) cover the 32 banks once

// Tiling parameters: BM x BN x BK block tile (BK: two k-steps of 8 per stage), WM x WN warp tile made of
// (WM/16) x (WN/8) mma tiles, STAGES-deep cp.async ring.
template <int BM, int BN, int BK, int WM, int WN, int STAGES>
struct MmaShape {
  static constexpr int kWarpsM = BM / WM, kWarpsN = BN / WN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kMI = WM / 16, kNI = WN / 8;
  static constexpr int kStageA = BK * (BM + kMmaPad), kStageB = BK * (BN + kMmaPad);
  static constexpr std::size_t kSmemBytes = sizeof(float) * STAGES * (kStageA + kStageB);
  static_assert(BM % WM == 0 && BN % WN == 0, "the warp tile must divide the block tile");
  static_assert(WM % 16 == 0 && WN % 8 == 0, "warp tiles are made of m16n8 mma tiles");
  static_assert(BK % 8 == 0, "a stage holds whole k-steps of 8");
  static_assert(STAGES >= 2, "the pipeline needs at least one tile in flight while one is computed");
};

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool B_VEC, bool X3>
__global__ void __launch_bounds__(MmaShape<BM, BN, BK, WM, WN, STAGES>::kThreads)
    gemm_mma(Problem p, int k_per_split, float* ws, bool a_kfast, bool b_kfast) {
  using S = MmaShape<BM, BN, BK, WM, WN, STAGES>;
  constexpr int NT = S::kThreads, MI = S::kMI, NI = S::kNI;
  extern __shared__ float4 smem4[];
  float* sA = reinterpret_cast<float*>(smem4);
  float* sB = sA + STAGES * S::kStageA;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t4 = lane % 4;
  const int wm = (warp / S::kWarpsN) * WM, wn = (warp % S::kWarpsN) * WN;
  const BlockTile bt = block_tile<BM, BN, BK>(p, k_per_split);
  const int m0 = bt.m0, n0 = bt.n0, b = bt.b, split = bt.split;
  const int k_begin = bt.k_begin, k_end = bt.k_end, n_tiles = bt.n_tiles;

  ScalarLoader<BM, BK, kMmaPad, NT, 4> la;
  la.init(p.a + b * p.a_sb, p.a_sm, p.a_sk, m0, p.m, k_begin, a_kfast, tid);
  using LoaderB =
      std::conditional_t<B_VEC, VecLoader<BN, BK, kMmaPad, NT>, ScalarLoader<BN, BK, kMmaPad, NT, 4>>;
  LoaderB lb;
  lb.init(p.b + b * p.b_sb, p.b_sn, p.b_sk, n0, p.n, k_begin, b_kfast, tid);

  auto fill = [&](int stage, int tile) {
    la.load(sA + stage * S::kStageA, k_begin + tile * BK, k_end, tid);
    lb.load(sB + stage * S::kStageB, k_begin + tile * BK, k_end, tid);
  };
  ring_prologue<STAGES>(n_tiles, fill);

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

  for (int t = 0; t < n_tiles; ++t) {
    ring_advance<STAGES>(t, n_tiles, fill);
    const float* As = sA + (t % STAGES) * S::kStageA;
    const float* Bs = sB + (t % STAGES) * S::kStageB;
#pragma unroll
    for (int ks = 0; ks < BK; ks += 8) {
      const float* a_lo = As + (ks + t4) * (BM + kMmaPad) + wm + g;
      const float* a_hi = a_lo + 4 * (BM + kMmaPad);
      const float* b_lo = Bs + (ks + t4) * (BN + kMmaPad) + wn + g;
      const float* b_hi = b_lo + 4 * (BN + kMmaPad);
      std::uint32_t a_big[MI][4], b_big[NI][2];
      std::uint32_t a_small[X3 ? MI : 1][4], b_small[X3 ? NI : 1][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const float x[4] = {a_lo[i * 16], a_lo[i * 16 + 8], a_hi[i * 16], a_hi[i * 16 + 8]};
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          a_big[i][r] = tf32_bits(x[r]);
          if constexpr (X3) a_small[i][r] = tf32_bits(x[r] - __uint_as_float(a_big[i][r]));
        }
      }
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        const float y[2] = {b_lo[j * 8], b_hi[j * 8]};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          b_big[j][r] = tf32_bits(y[r]);
          if constexpr (X3) b_small[j][r] = tf32_bits(y[r] - __uint_as_float(b_big[j][r]));
        }
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          if constexpr (X3) {
            float d[4] = {0.f, 0.f, 0.f, 0.f};
            mma_tf32_m16n8k8(d, a_small[i], b_big[j]);
            mma_tf32_m16n8k8(d, a_big[i], b_small[j]);
            mma_tf32_m16n8k8(d, a_big[i], b_big[j]);
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] += d[r];
          } else {
            mma_tf32_m16n8k8(acc[i][j], a_big[i], b_big[j]);
          }
        }
    }
  }
  cp_async_wait<0>();

  // Accumulator r of tile (i, j): row wm + 16i + g + 8 (r / 2), column wn + 8j + 2 t4 + r % 2.
  if (ws) {
    pdl_launch_dependents();  // the reduce kernel's launch may overlap these stores (it waits to read them)
    float* w = ws + (static_cast<std::int64_t>(split) * gridDim.y + b) * p.m * p.n;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        const int row = m0 + wm + 16 * i + g, col = n0 + wn + 8 * j + 2 * t4;
        store_partial<2>(w, p.m, p.n, row, col, &acc[i][j][0]);
        store_partial<2>(w, p.m, p.n, row + 8, col, &acc[i][j][2]);
      }
  } else {
    float* C = p.c + b * p.c_sb;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        const int row = m0 + wm + 16 * i + g, col = n0 + wn + 8 * j + 2 * t4;
        store_run<2>(p, C, row, col, &acc[i][j][0], false);
        store_run<2>(p, C, row + 8, col, &acc[i][j][2], false);
      }
  }
}

namespace {

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool X3>
void launch_mma(const Problem& p, int split, int k_per_split, float* ws, cudaStream_t stream) {
  using S = MmaShape<BM, BN, BK, WM, WN, STAGES>;
  const bool bvec = p.b_sn == 1 && p.b_sk % 4 == 0 && (p.b_sb % 4 == 0 || p.batch == 1) &&
                    (reinterpret_cast<std::uintptr_t>(p.b) & 15u) == 0;
  auto kernel =
      bvec ? gemm_mma<BM, BN, BK, WM, WN, STAGES, true, X3> : gemm_mma<BM, BN, BK, WM, WN, STAGES, false, X3>;
  use_max_dynamic_smem(reinterpret_cast<const void*>(kernel));  // per device
  const int tiles = ((p.m + BM - 1) / BM) * ((p.n + BN - 1) / BN);
  const dim3 grid(tiles, p.batch, split);
  const bool a_kfast = p.a_sk == 1 && p.a_sm != 1;
  const bool b_kfast = p.b_sk == 1 && p.b_sn != 1;
  kernel<<<grid, S::kThreads, S::kSmemBytes, stream>>>(p, k_per_split, ws, a_kfast, b_kfast);
  MT_CUDA_CHECK_LAUNCH();
}

void launch_tiles(const Problem& p, Kernel kernel, bool x3, int split, int k_per_split, float* ws,
                  cudaStream_t stream) {
  MT_CHECK(k_per_split % 16 == 0, InvalidArgument, "gemm: tensor-core split of ", k_per_split,
           " is not a multiple of 16");
  switch (kernel) {
    case Kernel::Tensor128x128:
      return x3 ? launch_mma<128, 128, 16, 64, 32, 4, true>(p, split, k_per_split, ws, stream)
                : launch_mma<128, 128, 16, 64, 32, 4, false>(p, split, k_per_split, ws, stream);
    case Kernel::Tensor128x64:
      return x3 ? launch_mma<128, 64, 16, 32, 32, 4, true>(p, split, k_per_split, ws, stream)
                : launch_mma<128, 64, 16, 32, 32, 4, false>(p, split, k_per_split, ws, stream);
    case Kernel::Tensor64x64:
      return x3 ? launch_mma<64, 64, 16, 32, 32, 4, true>(p, split, k_per_split, ws, stream)
                : launch_mma<64, 64, 16, 32, 32, 4, false>(p, split, k_per_split, ws, stream);
    default:
      MT_THROW(InvalidArgument, "gemm: ", kernel_name(kernel), " is not a tensor-core kernel");
  }
}

}  // namespace

void launch_tensor(const Problem& p, const Config& c, cudaStream_t stream) {
  const int split = c.split_k;
  float* ws = nullptr;
  if (split > 1)
    ws = split_scratch(sizeof(float) * static_cast<std::size_t>(split) * p.batch * p.m * p.n, stream);
  launch_tiles(p, c.kernel, c.math == MathMode::TF32x3, split, k_per_split(p, split, 16), ws, stream);
  if (split > 1) launch_splitk_reduce(p, ws, split, stream, /*overlap=*/true);
}

}  // namespace mt::detail::gemm
