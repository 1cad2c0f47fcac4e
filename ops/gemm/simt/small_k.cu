// Products with a short K (up to a few dozen): bound by writing C, not by the math. Each element of C costs
// 2K FLOPs against the 4 bytes it writes (8 with beta != 0), so while 2K FLOPs take less time than 4 bytes of
// store (the FP32 rate over the memory's: bench/gemm/DESIGN.md), the store of C holds it; a tiled k-loop
// built for reuse spends itself on a pipeline that never fills there. Two designs: the tiles (below) and,
// for the shortest K, the rows kernel (further below). In the tiles each block owns one BM x BN tile
// of C, stages its rows of A and columns of B for KC of K at a time (the whole K in one round up to KC) in
// shared memory, each thread computes a TM x TN register block over the whole K and writes it in float4 runs
// where C takes them. Reads per tile: (BM + BN) * K floats, mostly from L2 (A's rows are read by every column
// of tiles, B's columns by every row), against BM * BN floats written.
//
// Any strides (each operand is read in the order its contiguous dimension gives), alpha/beta, bias and the
// activation (store_run: C is not read when beta == 0). Plain fp32 FMAs over k in order: exact fp32, so it
// serves every math mode.
#include <cstdint>

#include "minitensor/ops/gemm/detail/device.cuh"
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/runtime/error.h"

namespace mt::detail::gemm {

namespace {

// A named configuration of gemm_small_k.
struct SmallKShape {
  int BM, BN;  // block tile of C
  int TM, TN;  // thread tile: TM / 4 runs of 4 rows x TN / 4 runs of 4 columns
  int KC;      // K staged in shared memory per round
};
constexpr int kSmallKThreads = 256;

// Visits the outer x inner elements of a staged tile, inner fastest, spread over the block's kThreads threads
// (element e = tid + r * kThreads); the coordinates step without a division per element.
template <int kThreads, class Fn>
__device__ __forceinline__ void for_tile(int outer, int inner, int tid, Fn fn) {
  int o = tid / inner, i = tid - o * inner;
  const int d_o = kThreads / inner, d_i = kThreads - d_o * inner;
  for (int e = tid; e < outer * inner; e += kThreads) {
    fn(o, i);
    o += d_o, i += d_i;
    if (i >= inner) i -= inner, ++o;
  }
}

// Stages kc of K from k0 of the block's BM rows of A and BN columns of B into k-major shared memory (zero
// past the edges of C), each operand read along its contiguous dimension (coalesced): k for A with a_sk == 1,
// else m; n for B with b_sn == 1 (or strided both ways), else k.
template <int kThreads, int KC, int LA, int LB>
__device__ __forceinline__ void stage(const Problem& p, const float* A, const float* B, float (&As)[KC][LA],
                                      float (&Bs)[KC][LB], int m0, int n0, int k0, int kc, int tid) {
  constexpr int BM = LA - 4, BN = LB - 4;  // rows padded by 4 floats
  auto load_a = [&](int i, int q) {
    const int gi = m0 + i;
    As[q][i] = gi < p.m ? __ldg(A + static_cast<std::int64_t>(gi) * p.a_sm +
                                static_cast<std::int64_t>(k0 + q) * p.a_sk)
                        : 0.f;
  };
  auto load_b = [&](int q, int j) {
    const int gj = n0 + j;
    Bs[q][j] = gj < p.n ? __ldg(B + static_cast<std::int64_t>(k0 + q) * p.b_sk +
                                static_cast<std::int64_t>(gj) * p.b_sn)
                        : 0.f;
  };
  if (p.a_sk == 1)
    for_tile<kThreads>(BM, kc, tid, [&](int i, int q) { load_a(i, q); });
  else
    for_tile<kThreads>(kc, BM, tid, [&](int q, int i) { load_a(i, q); });
  if (p.b_sk == 1 && p.b_sn != 1)
    for_tile<kThreads>(BN, kc, tid, [&](int j, int q) { load_b(q, j); });
  else
    for_tile<kThreads>(kc, BN, tid, [&](int q, int j) { load_b(q, j); });
}

// Shape::value is the SmallKShape (a wrapper type, as simt/kernel.cuh's configurations).
template <class Shape>
__global__ void __launch_bounds__(kSmallKThreads) gemm_small_k(Problem p, bool c_vec) {
  constexpr SmallKShape S = Shape::value;
  constexpr int TX = S.BN / S.TN, TY = S.BM / S.TM;  // threads along n and along m
  static_assert(TX * TY == kSmallKThreads, "one thread per TM x TN block of the tile");
  static_assert(S.TM % 4 == 0 && S.TN % 4 == 0, "thread tiles are whole float4 runs of shared memory and C");
  // k-major stages, rows padded by 4 floats (16-byte aligned float4 reads; a transposing store of A's rows
  // spreads over banks).
  __shared__ __align__(16) float As[S.KC][S.BM + 4];
  __shared__ __align__(16) float Bs[S.KC][S.BN + 4];

  const int tiles_n = (p.n + S.BN - 1) / S.BN;
  // Consecutive blocks take consecutive tiles along n, so the stores of blocks running together are close.
  const int m0 = static_cast<int>(blockIdx.x / tiles_n) * S.BM;
  const int n0 = static_cast<int>(blockIdx.x % tiles_n) * S.BN;
  const int b = blockIdx.y;
  const float* A = a_batch(p, b);
  const float* B = b_batch(p, b);
  const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;

  float acc[S.TM][S.TN];
#pragma unroll
  for (int i = 0; i < S.TM; ++i)
#pragma unroll
    for (int j = 0; j < S.TN; ++j) acc[i][j] = 0.f;

  for (int k0 = 0; k0 < p.k; k0 += S.KC) {
    const int kc = ::min(S.KC, p.k - k0);
    if (k0 > 0) __syncthreads();  // the previous round's reads are done
    stage<kSmallKThreads>(p, A, B, As, Bs, m0, n0, k0, kc, tid);
    __syncthreads();
#pragma unroll 4
    for (int q = 0; q < kc; ++q) {
      float a[S.TM], bv[S.TN];
#pragma unroll
      for (int r = 0; r < S.TM / 4; ++r) {
        const float4 v = *reinterpret_cast<const float4*>(&As[q][r * TY * 4 + ty * 4]);
        a[4 * r] = v.x, a[4 * r + 1] = v.y, a[4 * r + 2] = v.z, a[4 * r + 3] = v.w;
      }
#pragma unroll
      for (int r = 0; r < S.TN / 4; ++r) {
        const float4 v = *reinterpret_cast<const float4*>(&Bs[q][r * TX * 4 + tx * 4]);
        bv[4 * r] = v.x, bv[4 * r + 1] = v.y, bv[4 * r + 2] = v.z, bv[4 * r + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < S.TM; ++i)
#pragma unroll
        for (int j = 0; j < S.TN; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
    }
  }

  // Row i of the thread tile is row (i / 4) * TY * 4 + ty * 4 + i % 4 of the block tile, run r of columns
  // starts at r * TX * 4 + tx * 4: a warp's store covers 16 x 16 contiguous bytes of each of its rows.
  float* C = c_batch(p, b);
#pragma unroll
  for (int i = 0; i < S.TM; ++i) {
    const int row = m0 + (i / 4) * TY * 4 + ty * 4 + i % 4;
#pragma unroll
    for (int r = 0; r < S.TN / 4; ++r)
      store_run<4>(p, C, row, n0 + r * TX * 4 + tx * 4, &acc[i][4 * r], c_vec);
  }
}

template <class Shape>
void launch_small_k(const Problem& p, cudaStream_t stream) {
  constexpr SmallKShape S = Shape::value;
  const std::int64_t tiles = static_cast<std::int64_t>((p.m + S.BM - 1) / S.BM) * ((p.n + S.BN - 1) / S.BN);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.batch));
  gemm_small_k<Shape><<<grid, kSmallKThreads, 0, stream>>>(p, c_vectorisable(p));
  MT_CUDA_CHECK_LAUNCH();
}

// 128x128: 8x8 per thread, the fewest shared-memory and L2 reads per element of C (many tiles); 64x64: 4x4
// per thread, four times the blocks for problems of few tiles.
// clang-format off
struct SmallK128x128 {
  static constexpr SmallKShape value{.BM = 128, .BN = 128, .TM = 8, .TN = 8, .KC = 32};
};
struct SmallK64x64 {
  static constexpr SmallKShape value{.BM = 64, .BN = 64, .TM = 4, .TN = 4, .KC = 32};
};
// clang-format on

// ---------------------------------------------------------------- rows: the shortest K

// For K of a few (up to about 16) the tiles above spend most of a block's life loading and syncing for a
// handful of FMAs, and two 256-thread blocks per SM leave too few stores in flight. Here a block is 4 warps
// over a 32 x 128 tile: each warp owns 8 rows and each lane 4 of the tile's columns, so every store
// instruction of a warp writes contiguous bytes of one row (streaming, st.global.cs: C is not read back by
// this kernel). Where C takes float4 stores (kVecC) a lane's columns are adjacent and a store writes 512
// bytes; else they are lane, lane + 32, lane + 64 and lane + 96, so that each scalar store still writes 128
// contiguous bytes (4 adjacent columns per lane would spread a warp's scalar store over 512 bytes in 4-byte
// pieces, a quarter of each sector). A and B for 16 of K at a time sit in shared memory, k-major: per k a
// lane reads its 4 columns of B (one float4, or 4 conflict-free scalars) and its warp's 8 rows of A as two
// broadcast float4s, then does 32 FMAs. The small block and ~64 registers per thread give 8 blocks (32
// warps) per SM.
constexpr int kRowsThreads = 128, kRowsBM = 32, kRowsBN = 128, kRowsTM = 8, kRowsKC = 16;

template <bool kVecC>
__global__ void __launch_bounds__(kRowsThreads) gemm_small_k_rows(Problem p) {
  constexpr int BM = kRowsBM, BN = kRowsBN, TM = kRowsTM, KC = kRowsKC;
  static_assert(BM == TM * kRowsThreads / 32 && BN == 4 * 32, "8 rows per warp, 4 columns per lane");
  // Rows padded by 4 floats: 16-byte aligned float4 reads, and staging stores along k spread over banks.
  __shared__ __align__(16) float As[KC][BM + 4];
  __shared__ __align__(16) float Bs[KC][BN + 4];

  const int tiles_n = (p.n + BN - 1) / BN;
  const int m0 = static_cast<int>(blockIdx.x / tiles_n) * BM;
  const int n0 = static_cast<int>(blockIdx.x % tiles_n) * BN;
  const int b = blockIdx.y;
  const float* A = a_batch(p, b);
  const float* B = b_batch(p, b);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  float acc[TM][4];
#pragma unroll
  for (int i = 0; i < TM; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  for (int k0 = 0; k0 < p.k; k0 += KC) {
    const int kc = ::min(KC, p.k - k0);
    if (k0 > 0) __syncthreads();  // the previous round's reads are done
    stage<kRowsThreads>(p, A, B, As, Bs, m0, n0, k0, kc, tid);
    __syncthreads();
#pragma unroll 4
    for (int q = 0; q < kc; ++q) {
      float4 bv;
      if constexpr (kVecC)
        bv = *reinterpret_cast<const float4*>(&Bs[q][lane * 4]);
      else
        bv = make_float4(Bs[q][lane], Bs[q][lane + 32], Bs[q][lane + 64], Bs[q][lane + 96]);
      const float4 a0 = *reinterpret_cast<const float4*>(&As[q][warp * TM]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[q][warp * TM + 4]);
      const float a[TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        acc[i][0] = fmaf(a[i], bv.x, acc[i][0]);
        acc[i][1] = fmaf(a[i], bv.y, acc[i][1]);
        acc[i][2] = fmaf(a[i], bv.z, acc[i][2]);
        acc[i][3] = fmaf(a[i], bv.w, acc[i][3]);
      }
    }
  }

  float* C = c_batch(p, b);
  if constexpr (kVecC) {
#pragma unroll
    for (int i = 0; i < TM; ++i) store_run<4, true>(p, C, m0 + warp * TM + i, n0 + lane * 4, acc[i], true);
  } else {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int row = m0 + warp * TM + i;
      if (row >= p.m) break;
      float* dst = C + static_cast<std::int64_t>(row) * p.c_sm;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int j = n0 + lane + 32 * c;
        if (j < p.n) {
          float* e = dst + static_cast<std::int64_t>(j) * p.c_sn;
          __stcs(e, epilogue_value(p, acc[i][c], e, j));
        }
      }
    }
  }
}

}  // namespace

void launch_small_k_rows(const Problem& p, const Config&, cudaStream_t stream) {
  const std::int64_t tiles =
      static_cast<std::int64_t>((p.m + kRowsBM - 1) / kRowsBM) * ((p.n + kRowsBN - 1) / kRowsBN);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.batch));
  if (c_vectorisable(p))
    gemm_small_k_rows<true><<<grid, kRowsThreads, 0, stream>>>(p);
  else
    gemm_small_k_rows<false><<<grid, kRowsThreads, 0, stream>>>(p);
  MT_CUDA_CHECK_LAUNCH();
}

void launch_small_k_128x128(const Problem& p, const Config&, cudaStream_t stream) {
  launch_small_k<SmallK128x128>(p, stream);
}
void launch_small_k_64x64(const Problem& p, const Config&, cudaStream_t stream) {
  launch_small_k<SmallK64x64>(p, stream);
}

}  // namespace mt::detail::gemm
