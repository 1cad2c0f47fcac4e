// The production FP32 SGEMMs fed by the Tensor Memory Accelerator (Kernel::SimtTma*, Staging::Tma): a
// producer warp copies each BMx32 tile of A and 32xBN tile of B into a ring of shared-memory stages with one
// TMA instruction per operand, and 4 consumer warps run the outer products (8x8 per thread) as soon as a
// stage lands. Stages are handed over through mbarriers, so no block-wide barrier stops the math between
// tiles and the consumers issue no loads to global memory at all. Batches (strided, or an operand broadcast)
// are the tensor maps' third dimension.
//
// Built for the tall skinny product where A streams from DRAM (16384x64x4096, 128x64 tiles). There the
// register-staged 128x64x16 kernel spent its tile turns with no eligible warp: storing the staged tile, then
// the barrier (see bench/gemm/DESIGN.md (TMA)). Here the turn is one
// mbarrier wait per stage. The same warps side by side along N (64x128 tiles) take the small-M product where
// B streams (64x4096x4096).
//
// Shared memory, per stage: A as [BM rows][32 k] with the TMA's 128-byte swizzle (16-byte chunk c of row r
// lands at chunk c ^ (r % 8)), then B as [32 k][BN n], dense. A thread reads 4 k-steps of a row as one
// float4; the 8 rows a warp reads at once are consecutive, so the swizzle puts them in 8 distinct 16-byte
// bank groups and the reads are conflict free without padding (which TMA cannot write).
#include <cuda.h>
#include <cuda_runtime.h>

#include "minitensor/ops/gemm/detail/device.cuh"
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/ops/gemm/detail/tensor_map.h"
#include "minitensor/ops/gemm/simt/kernel.cuh"
#include "minitensor/runtime/device.h"

namespace mt::detail::gemm {

namespace {

// A TMA configuration: WM x WN consumer warps of 64x32 warp tiles (8x8 per thread) and a producer warp, BK =
// 32 (one 128-byte swizzle span of A per row), S stages, MIN_BLOCKS blocks per SM (launch bounds).
template <int WM_, int WN_, int S_, int MIN_BLOCKS_>
struct TmaShape {
  static constexpr int WM = WM_, WN = WN_, S = S_, kMinBlocks = MIN_BLOCKS_;
  static constexpr int BM = 64 * WM, BN = 32 * WN, BK = 32;
  static constexpr int kConsumerWarps = WM * WN;
  static constexpr int kThreads = 32 * (kConsumerWarps + 1);  // + the producer warp
  static constexpr int kABytes = BM * BK * 4, kBBytes = BK * BN * 4;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // The split-K partial tile (cluster reduction) reuses the ring: rows of BN + 4 floats, so the 8 rows a warp
  // writes at once fall in distinct bank groups.
  static constexpr int kPartLd = BN + 4;
  // 1024 bytes of slack to align the ring to the swizzle atom, then the ring, then full and empty mbarriers.
  static constexpr std::size_t kSmemBytes = 1024 + S * kStageBytes + 2 * S * 8;
  static_assert(BM * kPartLd * 4 <= S * kStageBytes, "the partial tile must fit the ring");
  static_assert(BM <= 256 && BN <= 256, "a TMA box spans at most 256 elements per dim");
  static_assert(BK * 4 == 128, "A's rows of one stage are one 128-byte swizzle span");
};
// The configurations built (Kernel::SimtTma*; kernel_name() gives each tile).
using Tma128x64 = TmaShape<2, 2, 3, 2>;
using Tma64x128 = TmaShape<1, 4, 3, 2>;

// SPLIT: K split over gridDim.z; the splits of a tile reduce in their cluster (ws == nullptr) or store raw
// partials to ws for launch_splitk_reduce. The splits take the 32-deep k-tiles in turn (split s: k-tiles s,
// s + splits, s + 2 * splits, ...), not a contiguous k range each: the splits of a tile run at the same time,
// so they fetch neighbouring 128-byte runs of each row of A together instead of runs a K range apart, which
// is faster where A streams from DRAM (see bench/gemm/DESIGN.md (TMA)). Each split still adds its k-tiles in
// order and the reduction adds the splits in order, so results do not depend on timing.
template <class T, bool SPLIT>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    gemm_simt_tma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                  Problem p, float* ws, bool c_vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int BM = T::BM, BN = T::BN, BK = T::BK, S = T::S, CW = T::kConsumerWarps;
  constexpr int kStageBytes = T::kStageBytes, kABytes = T::kABytes;
  pdl_wait();  // launched to overlap the previous kernel: its writes (A, B, C, bias) first
  extern __shared__ unsigned char smem_raw[];
  // Offsets from the shared array keep the compiler's loads in the shared window (LDS, not generic loads).
  unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const std::uint32_t ring = smem_u32(smem);
  const std::uint32_t full = ring + S * kStageBytes, empty = full + 8 * S;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const BlockTile bt = block_tile<BM, BN, BK>(p, 0);  // the tile and split (not its k range: see above)
  const int m0 = bt.m0, n0 = bt.n0, splits = gridDim.z;
  const int n_tiles =
      ((p.k + BK - 1) / BK - bt.split + splits - 1) / splits;  // k-tiles split, split + splits..
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full + 8 * s, 1);    // the producer's arrival; the TMA bytes complete the phase
      mbar_init(empty + 8 * s, CW);  // one arrival per consumer warp
    }
    fence_mbar_init();
  }
  __syncthreads();

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
  // Consumer warp (wm, wn) holds rows wm * 64 + lm + 8 i (i < 8) and columns wn * 32 + ln * 4 + {0..3} and
  // + 16 of that; lanes with the same lm share A's reads, those with the same ln B's.
  const int wm = warp / (BN / 32), wn = warp % (BN / 32);
  const int lm = lane / 4, ln = lane % 4;
  const int row0 = wm * 64 + lm, col0 = wn * 32 + ln * 4;

  if (warp == CW) {
    // Producer: one thread refills each stage as soon as every consumer warp has released it.
    if (lane == 0) {
      const int ba = p.a_sb != 0 ? bt.b : 0, bb = p.b_sb != 0 ? bt.b : 0;  // a broadcast operand: entry 0
      for (int t = 0; t < n_tiles; ++t) {
        const int s = t % S, k0 = (bt.split + t * splits) * BK;
        mbar_wait(empty + 8 * s, ((t / S) & 1) ^ 1);  // a fresh barrier passes parity 1 at once
        mbar_expect_tx(full + 8 * s, kStageBytes);
        const std::uint32_t a_dst = ring + s * kStageBytes;
        tma_load_3d(a_dst, &map_a, k0, m0, ba, full + 8 * s);
        tma_load_3d(a_dst + kABytes, &map_b, n0, k0, bb, full + 8 * s);
      }
    }
  } else {
    for (int t = 0; t < n_tiles; ++t) {
      const int s = t % S;
      mbar_wait(full + 8 * s, (t / S) & 1);
      const unsigned char* As = smem + s * kStageBytes;
      const float* Bs = reinterpret_cast<const float*>(As + kABytes);
      // Fragments: A's next 4 k-steps load while these 4 run, B's one k-step ahead.
      float ra[2][8][4], rb[2][8];
      auto load_a = [&](int buf, int chunk) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int r = row0 + 8 * i;  // r % 8 == lm
          const float4 v = *reinterpret_cast<const float4*>(As + r * 128 + ((chunk ^ lm) << 4));
          ra[buf][i][0] = v.x, ra[buf][i][1] = v.y, ra[buf][i][2] = v.z, ra[buf][i][3] = v.w;
        }
      };
      auto load_b = [&](int buf, int q) {
        const float4 x = *reinterpret_cast<const float4*>(Bs + q * BN + col0);
        const float4 y = *reinterpret_cast<const float4*>(Bs + q * BN + col0 + 16);
        rb[buf][0] = x.x, rb[buf][1] = x.y, rb[buf][2] = x.z, rb[buf][3] = x.w;
        rb[buf][4] = y.x, rb[buf][5] = y.y, rb[buf][6] = y.z, rb[buf][7] = y.w;
      };
      load_a(0, 0);
      load_b(0, 0);
#pragma unroll
      for (int q = 0; q < BK; ++q) {
        if (q % 4 == 0 && q + 4 < BK) load_a((q / 4 + 1) & 1, q / 4 + 1);
        if (q + 1 < BK) load_b((q + 1) & 1, q + 1);
          // Odd rows backwards: consecutive FMAs share an operand (the operand reuse cache).
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int jj = 0; jj < 8; ++jj) {
            const int j = i % 2 ? 7 - jj : jj;
            acc[i][j] = fmaf(ra[(q / 4) & 1][i][q % 4], rb[q & 1][j], acc[i][j]);
          }
      }
      __syncwarp();  // the warp's reads of this stage are done
      if (lane == 0) mbar_arrive(empty + 8 * s);
    }
  }

  float* C = c_batch(p, bt.b);
  if constexpr (SPLIT) {
    if (ws != nullptr) {
      // Raw sums to this split's plane; the reduce kernel (launched to overlap this one) adds the planes.
      pdl_launch_dependents();
      if (warp == CW) return;
      float* w = ws + (static_cast<std::int64_t>(bt.split) * gridDim.y + bt.b) * p.m * p.n;
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          store_partial<4>(w, p.m, p.n, m0 + row0 + 8 * i, n0 + col0 + 16 * h, &acc[i][4 * h]);
      return;
    }
    // Cluster reduction: every block parks its partial tile in its ring (all stages consumed, so no copy is
    // in flight), then each adds a slice of the tile across the cluster in split order.
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    float* red = reinterpret_cast<float*>(smem);
    __syncthreads();
    if (warp < CW) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<float4*>(red + (row0 + 8 * i) * T::kPartLd + col0 + 16 * h) =
              make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
    }
    cluster.sync();
    cluster_reduce_store<BM, BN, T::kPartLd, T::kThreads>(p, C, red, m0, n0, c_vec, tid);
    cluster.sync();  // no block leaves while a peer may still read its shared memory
  } else {
    if (warp == CW) return;
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        store_run<4>(p, C, m0 + row0 + 8 * i, n0 + col0 + 16 * h, &acc[i][4 * h], c_vec);
  }
#endif
}

}  // namespace

bool tma_kernels_usable() {
  if (!tensor_map_encoder_reachable()) return false;
  // The kernel must have been compiled for sm_90 or later: an older target leaves its body empty, also when
  // its PTX is compiled for this device at load time (binaryVersion 90, ptxVersion that of the PTX).
  static const bool built = [] {
    cudaFuncAttributes attr;
    const bool ok = cudaFuncGetAttributes(&attr, gemm_simt_tma<Tma128x64, false>) == cudaSuccess &&
                    attr.binaryVersion >= 90 && attr.ptxVersion >= 90;
    if (!ok) (void)cudaGetLastError();
    return ok;
  }();
  return built;
}

namespace {

template <class T>
void launch_tma(const Problem& p, int split, SplitReduce reduce, cudaStream_t stream) {
  const std::int64_t lda = tma_lda(p), ldb = tma_ldb(p);
  const CUtensorMap map_a =
      tensor_map(p.a, p.m, p.k, lda, p.batch, p.a_sb, T::BM, T::BK, CU_TENSOR_MAP_SWIZZLE_128B);
  const CUtensorMap map_b =
      tensor_map(p.b, p.k, p.n, ldb, p.batch, p.b_sb, T::BK, T::BN, CU_TENSOR_MAP_SWIZZLE_NONE);
  const int tiles = ((p.m + T::BM - 1) / T::BM) * ((p.n + T::BN - 1) / T::BN);
  const bool reduce_kernel = split > 1 && reduce == SplitReduce::Kernel;
  const bool cluster = split > 1 && reduce == SplitReduce::Cluster;
  const std::size_t planes = static_cast<std::size_t>(split) * p.batch;
  float* ws = reduce_kernel ? split_scratch(sizeof(float) * planes * p.m * p.n, stream) : nullptr;
  LaunchConfig launch(dim3(tiles, p.batch, split), dim3(T::kThreads), T::kSmemBytes, stream,
                      dim3(1, 1, cluster ? split : 1));
  launch.overlap_previous_kernel();
  auto* kernel = split > 1 ? gemm_simt_tma<T, true> : gemm_simt_tma<T, false>;
  use_max_dynamic_smem(reinterpret_cast<const void*>(kernel));  // per device
  MT_CUDA_CHECK(cudaLaunchKernelEx(&launch.cfg, kernel, map_a, map_b, p, ws, c_vectorisable(p)));
  MT_CUDA_CHECK_LAUNCH();
  if (reduce_kernel) launch_splitk_reduce(p, ws, split, stream, /*overlap=*/true);
}

}  // namespace

void launch_simt_tma(const Problem& p, const Config& c, cudaStream_t stream) {
  MT_CHECK(tma_ready(p), InvalidArgument,
           "gemm: the TMA kernels need A contiguous along k and B along n, in 16-byte aligned rows and batch "
           "entries, on sm_90");
  switch (c.kernel) {
    case Kernel::SimtTma128x64:
      return launch_tma<Tma128x64>(p, c.split_k, c.reduce, stream);
    case Kernel::SimtTma64x128:
      return launch_tma<Tma64x128>(p, c.split_k, c.reduce, stream);
    default:
      MT_THROW(InvalidArgument, "gemm: ", kernel_name(c.kernel), " is not a TMA kernel");
  }
}

}  // namespace mt::detail::gemm
