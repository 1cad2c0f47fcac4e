// The production FP32 SGEMM kernel (the top of the ladder in ops/gemm/ladder.cu) and its launcher template,
// both parameterised by one named configuration (SimtShape). Included by ops/gemm/simt/tile_*.cu, each of
// which instantiates a group of tile configurations (so they compile in parallel).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include <cooperative_groups.h>

#include "minitensor/ops/gemm/detail/device.cuh"
#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/ops/gemm/detail/problem.h"
#include "minitensor/ops/gemm/simt/loaders.cuh"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail::gemm {

// A kernel asking for more than 48 KiB of dynamic shared memory needs its limit raised, on each device (the
// attribute is per device: a process-wide once would leave every other GPU at the default).
template <class Kern>
void allow_smem(Kern* kernel, std::size_t bytes) {
  if (bytes > 48 * 1024) use_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
}

// Rung 4, production FP32.
//
// Tiling parameters (all compile-time):
//   BM x BN   block tile of C; BK  the k-depth of one pipeline stage
//   WM x WN   warp tile; (BM/WM) x (BN/WN) warps per block
//   TM x TN   thread tile: TM/4 x TN/4 float4 fragments, spread over the warp tile so that a warp's fragment
//             reads are broadcast-friendly float4 loads and its stores write float4 runs
//   STAGES    cp.async ring depth: STAGES-1 tiles in flight while one is computed
// LOAD picks how tiles reach shared memory:
//   kLoadKMajorA  the ring of 16-byte copies only (Staging::CpAsync16): A, contiguous along k, kept k-major
//                 in shared memory ([BM][BK + kSimtPad]; a thread reads one float4 = 4 k-steps of a row, and
//                 loads the next 4 k-steps' rows while it uses these); B takes float4 loads
//   kLoadRegs + layout bits (bit 0: A contiguous along k, bit 1: B contiguous along k) [+ kScalarRuns]
//                 (the default) both operands through registers (RegLoader), with the layout fixed at compile
//                 time; needs each operand contiguous along k or along x. Tile t + 1 is stored to the other
//                 of two shared buffers after tile t's math, one barrier per tile. While the tile after next
//                 lies inside the matrix along k, each tile is one straight-line block: unconditional loads
//                 issued right after the barrier, fixed stores (per-run branches cost the big shapes
//                 dearly); the last tiles take a general loop that loads before the math and predicates
//                 on k. Runs are one 16-byte load each (vector_runs), or with kScalarRuns 4 scalar loads.
// Shared memory per block: STAGES (2 for kLoadRegs) * BK * (BM + BN + 2 * kPad) * 4 bytes, with A's stage
// BM * (BK + kPad) for kLoadKMajorA.
//   kLoadLanes + lanes_layout (bit 0: A contiguous along m, bit 1: B contiguous along k)
//                 the ring of 4-byte copies for operands each contiguous along one dimension, any leading
//                 dimension and alignment (LaneLoaderK / LaneLoaderX: the lanes along each operand's
//                 contiguous dimension, no predicate inside K), turned early like the register-staged loop:
//                 tile t + 1's wait and barrier come once tile t's last k-row's fragments are loaded, and
//                 tile t's first k-rows issue tile t + STAGES - 1 into tile t - 1's slot. Unsplit only.
constexpr int kLoadScalarB = 0, kLoadVecB = 1, kLoadKMajorA = 2, kLoadRegs = 4, kScalarRuns = 4,
              kLoadLanes = 12;
// Rows of BM + 4 floats: 4 k-rows of a transposing store land on distinct banks. k-major A rows of BK + 4
// (12 or 20 floats, an odd number of float4s): the 8 consecutive rows a warp reads at once (trow) sit in
// distinct bank quads.
constexpr int kSimtPad = 4;

// A named configuration of gemm_simt and launch_simt (a class-type template parameter: the fields are
// compile-time constants). The tiling parameters are documented above; the flags say which variants of the
// configuration are built:
//   ring         the 4-byte cp.async ring variants (Staging::CpAsync, any strides); without them
//                can_implement refuses CpAsync for it (KernelInfo::registers_only)
//   scalar_runs  the register-staged variants for operands without whole 16-byte runs; without them the
//                configuration takes vector_runs(p) problems only (KernelInfo::whole_runs_only), for tiles
//                whose scalar-run variants would spill
//   ring16       the ring of 16-byte copies with A k-major (Staging::CpAsync16, for ring16_ready(p) problems)
//   rows_c       the unsplit register-staged kernels for C in unaligned contiguous rows (gemm_simt's ROWS_C),
//                taken for such a C; without them that C gets scalar stores
//   lanes        bit l: the unsplit 4-byte ring takes the lane loaders (kLoadLanes + l) where
//                lanes_layout(p) == l (kLanesNN: A along k and B along n only; kLanesAny: every layout), each
//                with its ROWS_C kernel: small tiles over C in unaligned rows are mostly edge tiles, whose
//                scalar stores write each 32-byte sector in pieces
constexpr int kLanesNN = 1, kLanesAny = 15;  // SimtShape::lanes
struct SimtShape {
  int BM, BN, BK;      // block tile of C; k-depth of one pipeline stage
  int WM, WN;          // warp tile
  int TM, TN;          // thread tile
  int stages;          // cp.async ring depth
  int min_blocks = 1;  // blocks per SM the launch bounds ask for (the register budget)
  bool ring = true;    // the flags above
  bool scalar_runs = true;
  bool ring16 = false;
  bool rows_c = false;
  int lanes = 0;

  constexpr SimtShape with_min_blocks(int blocks) const {
    SimtShape s = *this;
    s.min_blocks = blocks;
    return s;
  }
  constexpr int threads() const { return 32 * (BM / WM) * (BN / WN); }
};

// The kernel and launcher take a configuration as a type whose `value` is its SimtShape (a named struct per
// configuration, simt/tile_*.cu): nvcc's host stubs cannot spell a class-type template argument.
template <class C, int MIN_BLOCKS>
struct SimtMinBlocks {  // C held to another number of blocks per SM
  static constexpr SimtShape value = C::value.with_min_blocks(MIN_BLOCKS);
};

// What follows from a SimtShape: warps, lanes, stage sizes, shared memory.
template <SimtShape S>
struct SimtGeometry {
  static constexpr int kWarpsM = S.BM / S.WM, kWarpsN = S.BN / S.WN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kLanesM = S.WM / S.TM, kLanesN = S.WN / S.TN;  // lanes of a warp along m and n
  static constexpr int kStageA = S.BK * (S.BM + kSimtPad), kStageB = S.BK * (S.BN + kSimtPad);
  static constexpr int kStageAK = S.BM * (S.BK + kSimtPad);  // k-major A (kLoadKMajorA)
  static constexpr std::size_t pipe_bytes(Staging st) {
    switch (st) {
      case Staging::Registers:
        return sizeof(float) * 2 * (kStageA + kStageB);
      case Staging::CpAsync16:
        return sizeof(float) * S.stages * (kStageAK + kStageB);
      default:
        return sizeof(float) * S.stages * (kStageA + kStageB);
    }
  }
  // The cluster split-K variant reuses the pipeline's buffers for the BM x BN tile of partial sums.
  static constexpr std::size_t smem_bytes(Staging st, bool cluster_split) {
    const std::size_t pipe = pipe_bytes(st);
    const std::size_t tile = sizeof(float) * S.BM * S.BN;
    return cluster_split && tile > pipe ? tile : pipe;
  }

  static_assert(S.BM % S.WM == 0 && S.BN % S.WN == 0, "the warp tile must divide the block tile");
  static_assert(S.TM % 4 == 0 && S.TN % 4 == 0, "thread tiles are made of float4 fragments");
  static_assert(S.WM % S.TM == 0 && S.WN % S.TN == 0, "the thread tile must divide the warp tile");
  static_assert(kLanesM * kLanesN == 32,
                "a warp's 32 lanes must cover its warp tile exactly: (WM/TM)*(WN/TN) == 32");
  static_assert(S.BK % 8 == 0, "the k-fast scalar loader walks k in groups of 8");
  static_assert(S.stages >= 2, "the pipeline needs at least one tile in flight while one is computed");
  static_assert(kThreads <= 1024, "too many threads per block");
  static_assert(S.min_blocks >= 1, "the launch bounds ask for at least one block per SM");
  static_assert(S.lanes == 0 || S.ring, "the lane loaders are a variant of the 4-byte ring");
};

// SPLIT: K is split over gridDim.z blocks (a separate instantiation, so the reduction does not cost the
// unsplit kernel registers), reduced through distributed shared memory when the launch made the splits of a
// tile one cluster (ws == nullptr), else stored raw to the L2 workspace `ws` for the second kernel
// (launch_splitk_reduce) to add.
// Runtime layout flags: a_kfast / b_kfast the operand is contiguous along k (the cp.async loaders walk k
// fastest; register-staged variants have it in LOAD); a_vec / b_vec (register staging, last tiles) its
// 4-element runs are 16-byte aligned; c_vec C takes float4 stores.
// ROWS_C: the unsplit kernel for C in contiguous rows that are not 16-byte aligned, whose epilogue is
// store_rows alone: a kernel of its own because the main loop's speed follows the epilogue's code size,
// although the loop is the same code (see bench/gemm/DESIGN.md (epilogue)).
template <class CFG, int LOAD, bool SPLIT, bool ROWS_C = false>
__global__ void __launch_bounds__(CFG::value.threads(), CFG::value.min_blocks)
    gemm_simt(Problem p, int k_per_split, float* ws, bool a_kfast, bool b_kfast, bool a_vec, bool b_vec,
              bool c_vec) {
  constexpr SimtShape SHAPE = CFG::value;
  constexpr int BM = SHAPE.BM, BN = SHAPE.BN, BK = SHAPE.BK, WM = SHAPE.WM, WN = SHAPE.WN;
  constexpr int TM = SHAPE.TM, TN = SHAPE.TN, STAGES = SHAPE.stages, MIN_BLOCKS = SHAPE.min_blocks;
  using S = SimtGeometry<SHAPE>;
  constexpr int NT = S::kThreads;
  pdl_wait();  // launched to overlap the previous kernel (launch_simt): its writes first
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* sA = smem;
  constexpr bool kRegs = LOAD >= kLoadRegs && LOAD < kLoadLanes;
  constexpr bool kVecRuns = LOAD < kLoadRegs + kScalarRuns;  // kRegs: one 16-byte load per run
  constexpr bool kKMajorA = LOAD == kLoadKMajorA;
  constexpr bool kLanes = LOAD >= kLoadLanes;
  static_assert(!kLanes || !SPLIT, "the lane-loader ring is built unsplit");
  constexpr int kStageA = kKMajorA ? S::kStageAK : S::kStageA;
  float* sB = smem + (kRegs ? 2 : STAGES) * kStageA;  // register staging: two buffers

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warp_m = warp / S::kWarpsN, warp_n = warp % S::kWarpsN;
  const int lane_m = lane / S::kLanesN, lane_n = lane % S::kLanesN;
  const BlockTile bt = block_tile<BM, BN, BK>(p, k_per_split);
  const int m0 = bt.m0, n0 = bt.n0, b = bt.b, split = bt.split;
  const int k_begin = bt.k_begin, k_end = bt.k_end, n_tiles = bt.n_tiles;

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

  const int a_col = warp_m * WM + lane_m * 4;  // + g * kLanesM * 4 for fragment g
  // Row i of the thread tile within the block tile. m-major A: fragments of 4 consecutive rows, each one
  // float4 read. k-major A: the lanes along m take consecutive rows, so the kLanesM rows a warp reads at once
  // (one float4 each, rows BK + 4 floats apart: an odd number of float4s) fall in distinct bank quads.
  auto trow = [&](int i) {
    if constexpr (kKMajorA)
      return warp_m * WM + (i / 4) * S::kLanesM * 4 + (i % 4) * S::kLanesM + lane_m;
    else
      return a_col + (i / 4) * S::kLanesM * 4 + i % 4;
  };
  const int b_col = warp_n * WN + lane_n * 4;
  // The outer product's FMAs visit the thread tile row by row, odd rows backwards: consecutive FMAs share an
  // operand, so ptxas can mark it for the operand reuse cache instead of reading the register file again
  // (also across a row change, where the column repeats; see bench/gemm/DESIGN.md (inner loop)). Each
  // accumulator still takes its k-steps in order. ptxas spills with
  // that order in a few register-starved variants (the scalar-run loaders; both operands contiguous along k
  // at 128 registers per thread), which keep the plain order.
  constexpr bool kSerpentine = !(kRegs && (!kVecRuns || (LOAD == kLoadRegs + 3 && MIN_BLOCKS * NT >= 512)));
  auto fma_col = [](int i, int jj) { return kSerpentine && i % 2 ? TN - 1 - jj : jj; };
  // The outer products of one BK-deep tile, with register double buffering: fragments of k-row q+1 load
  // while row q's outer product runs.
  float ra[2][TM], rb[2][TN];
  auto load_frags = [&](const float* As, const float* Bs, int buf, int q) {
#pragma unroll
    for (int g = 0; g < TM / 4; ++g) {
      const float4 v =
          *reinterpret_cast<const float4*>(As + q * (BM + kSimtPad) + a_col + g * S::kLanesM * 4);
      ra[buf][4 * g] = v.x, ra[buf][4 * g + 1] = v.y, ra[buf][4 * g + 2] = v.z, ra[buf][4 * g + 3] = v.w;
    }
#pragma unroll
    for (int g = 0; g < TN / 4; ++g) {
      const float4 v =
          *reinterpret_cast<const float4*>(Bs + q * (BN + kSimtPad) + b_col + g * S::kLanesN * 4);
      rb[buf][4 * g] = v.x, rb[buf][4 * g + 1] = v.y, rb[buf][4 * g + 2] = v.z, rb[buf][4 * g + 3] = v.w;
    }
  };
  // The tile's k-rows, row 0's fragments already in buffer 0. `turn` runs once the last row's fragments are
  // loaded (before the outer product of the row before it), `last_row` in place of the (absent) next row's
  // fragment loads, before the last row's outer product.
  // `each_row(q)` runs before k-row q's outer product, after the next row's fragment loads.
  auto tile_rows_with = [&](const float* As, const float* Bs, auto&& turn, auto&& last_row, auto&& each_row) {
#pragma unroll
    for (int q = 0; q < BK; ++q) {
      if (q + 1 < BK)
        load_frags(As, Bs, (q + 1) & 1, q + 1);
      else
        last_row();
      each_row(q);
      if (q + 2 == BK) turn();
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int jj = 0; jj < TN; ++jj) {
          const int j = fma_col(i, jj);
          acc[i][j] = fmaf(ra[q & 1][i], rb[q & 1][j], acc[i][j]);
        }
    }
  };
  auto tile_rows = [&](const float* As, const float* Bs, auto&& turn, auto&& last_row) {
    tile_rows_with(As, Bs, turn, last_row, [](int) {});
  };
  auto compute_tile = [&](const float* As, const float* Bs) {
    load_frags(As, Bs, 0, 0);
    const auto nothing = [] {};
    tile_rows(As, Bs, nothing, nothing);
  };

  // The same with A k-major in shared memory (kLoadKMajorA): row trow(i) of the thread is read as a float4 of
  // 4 k-steps; the next 4 k-steps' rows load while these are used, B's fragments one k-step ahead.
  auto compute_tile_kmajor = [&](const float* As, const float* Bs) {
    float ra[2][TM][4], rb[2][TN];
    auto load_a = [&](int buf, int q4) {
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const float4 v = *reinterpret_cast<const float4*>(As + trow(i) * (BK + kSimtPad) + 4 * q4);
        ra[buf][i][0] = v.x, ra[buf][i][1] = v.y, ra[buf][i][2] = v.z, ra[buf][i][3] = v.w;
      }
    };
    auto load_b = [&](int buf, int q) {
#pragma unroll
      for (int g = 0; g < TN / 4; ++g) {
        const float4 v =
            *reinterpret_cast<const float4*>(Bs + q * (BN + kSimtPad) + b_col + g * S::kLanesN * 4);
        rb[buf][4 * g] = v.x, rb[buf][4 * g + 1] = v.y, rb[buf][4 * g + 2] = v.z, rb[buf][4 * g + 3] = v.w;
      }
    };
    load_a(0, 0);
    load_b(0, 0);
#pragma unroll
    for (int q = 0; q < BK; ++q) {
      if (q % 4 == 0 && q + 4 < BK) load_a((q / 4 + 1) & 1, q / 4 + 1);
      if (q + 1 < BK) load_b((q + 1) & 1, q + 1);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int jj = 0; jj < TN; ++jj) {
          const int j = fma_col(i, jj);
          acc[i][j] = fmaf(ra[(q / 4) & 1][i][q % 4], rb[q & 1][j], acc[i][j]);
        }
    }
  };

  if constexpr (kRegs) {
    constexpr bool kAk = (LOAD & 1) != 0, kBk = (LOAD & 2) != 0;  // the layout
    RegLoader<BM, BK, kSimtPad, NT> la;
    RegLoader<BN, BK, kSimtPad, NT> lb;
    la.init(a_batch(p, b), p.a_sm, p.a_sk, m0, p.m, k_begin, kAk, a_vec, tid);
    lb.init(b_batch(p, b), p.b_sn, p.b_sk, n0, p.n, k_begin, kBk, b_vec, tid);
    if (n_tiles > 0) {
      la.load(k_end - k_begin);
      lb.load(k_end - k_begin);
      la.template store_as<kAk>(sA);
      lb.template store_as<kBk>(sB);
    }
    __syncthreads();
    int t = 0;
    bool next_loaded = false;  // the registers already hold tile t + 1
    // While tile t + 2 is whole: one basic block per tile, no branch but the loop's own. Tile t + 2's loads
    // go right after the barrier, where nothing can move them later: placed before the math, ptxas sank them
    // to its last fifth (register pressure), and their latency showed as long-scoreboard stalls on the
    // stores. With scalar runs, a block whose runs straddle the matrix's edge along x takes the general loop
    // throughout.
    const bool straddles =
        !kVecRuns && ((!kAk && m0 + BM > p.m && p.m % 4 != 0) || (!kBk && n0 + BN > p.n && p.n % 4 != 0));
    const int n_whole = straddles ? 0 : (k_end - k_begin) / BK;
    // The early turn: the turn to tile t + 1 (the staged tile to the other buffer, the barrier, the loads of
    // tile t + 2) comes once tile t's last k-row's fragments are in registers, before the outer product of
    // the row before it; tile t + 1's first fragments load in place of the last row's, so two rows of FMAs
    // stand between the barrier and their use instead of the whole block stalling after it. The other buffer
    // was last read before the previous turn's barrier. It pays where the block's barrier idles the SM: one
    // block per SM, or the 16x8 thread tiles; the two-block 8x8 tiles lose with it, and the split 256x128
    // tiles with both operands contiguous along k spill (see bench/gemm/DESIGN.md (early turn)).
    constexpr bool kEarlyTurn =
        (MIN_BLOCKS == 1 || TM * TN >= 128) && !(SPLIT && (LOAD & 3) == 3 && TM * TN >= 128);
    if (n_whole >= 2) {
      la.template load_whole<kVecRuns>();
      lb.template load_whole<kVecRuns>();
      next_loaded = true;
      if (kEarlyTurn && n_whole > 2) load_frags(sA, sB, 0, 0);
      for (; t + 2 < n_whole; ++t) {
        float* const nA = sA + ((t + 1) & 1) * S::kStageA;
        float* const nB = sB + ((t + 1) & 1) * S::kStageB;
        auto turn = [&] {  // the staged tile t + 1 to the other buffer, the barrier, tile t + 2's loads
          la.template store_as<kAk>(nA);
          lb.template store_as<kBk>(nB);
          __syncthreads();
          la.template load_whole<kVecRuns>();
          lb.template load_whole<kVecRuns>();
        };
        if constexpr (kEarlyTurn) {
          tile_rows(sA + (t & 1) * S::kStageA, sB + (t & 1) * S::kStageB, turn,
                    [&] { load_frags(nA, nB, 0, 0); });
        } else {
          compute_tile(sA + (t & 1) * S::kStageA, sB + (t & 1) * S::kStageB);
          turn();
        }
      }
    }
    for (; t < n_tiles; ++t) {
      const bool more = t + 1 < n_tiles;
      if (more && !next_loaded) {  // in flight during this tile's math
        const int k_left = k_end - (k_begin + (t + 1) * BK);
        la.load(k_left);
        lb.load(k_left);
      }
      next_loaded = false;
      compute_tile(sA + (t & 1) * S::kStageA, sB + (t & 1) * S::kStageB);
      if (more) {  // the other buffer was last read by tile t - 1, before the previous barrier
        la.template store_as<kAk>(sA + ((t + 1) & 1) * S::kStageA);
        lb.template store_as<kBk>(sB + ((t + 1) & 1) * S::kStageB);
      }
      __syncthreads();
    }
  } else if constexpr (kLanes) {
    constexpr bool kAm = ((LOAD - kLoadLanes) & 1) != 0, kBk = ((LOAD - kLoadLanes) & 2) != 0;
    std::conditional_t<kAm, LaneLoaderX<BM, BK, kSimtPad, NT>, LaneLoaderK<BM, BK, kSimtPad, NT>> la;
    std::conditional_t<kBk, LaneLoaderK<BN, BK, kSimtPad, NT>, LaneLoaderX<BN, BK, kSimtPad, NT>> lb;
    la.init(a_batch(p, b), kAm ? p.a_sk : p.a_sm, m0, p.m, k_begin, tid);
    lb.init(b_batch(p, b), kBk ? p.b_sn : p.b_sk, n0, p.n, k_begin, tid);
    const int n_whole = (k_end - k_begin) / BK;  // tiles that lie inside K
    // Tile i lives in slot i % STAGES. Tiles 0 .. STAGES - 2 go first, one group each; tile t's loop issues
    // tile t + STAGES - 1 into the slot of tile t - 1 (whose reads all came before tile t - 1's turn), and
    // tile t's turn waits for tile t + 1 (STAGES - 2 younger groups may stay in flight).
    auto fill = [&](int slot, int tile) {  // predicated: for tiles that may reach past K
      const int k0 = k_begin + tile * BK;
      la.load(sA + slot * S::kStageA, k0, k_end);
      lb.load(sB + slot * S::kStageB, k0, k_end);
    };
#pragma unroll
    for (int s = 0; s + 1 < STAGES; ++s) {
      if (s < n_tiles) fill(s, s);
      cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    load_frags(sA, sB, 0, 0);
    int cur = 0, prev = STAGES - 1;  // the slots of tiles t and t - 1
    auto run_tile = [&](auto&& each_row) {
      const int nxt = cur + 1 == STAGES ? 0 : cur + 1;
      const auto turn = [] {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
      };
      // Past the last tile this reads slot nxt's stale tile into fragments that are never used.
      tile_rows_with(
          sA + cur * S::kStageA, sB + cur * S::kStageB, turn,
          [&] { load_frags(sA + nxt * S::kStageA, sB + nxt * S::kStageB, 0, 0); }, each_row);
      prev = cur;
      cur = nxt;
    };
    // While the tile to issue lies inside K, its copies are spread over the first kCopyRows k-rows, a few
    // beside each row's FMAs: issued back to back, the copies' address registers were still unread when
    // ptxas reused them, and the FMAs after the burst stalled on them.
    constexpr int kCopyRows = 4;
    int t = 0;
    for (; t + STAGES - 1 < n_whole; ++t) {
      float* const fa = sA + prev * S::kStageA;
      float* const fb = sB + prev * S::kStageB;
      run_tile([&](int q) {
#pragma unroll
        for (int j = 0; j < la.kElems; ++j)
          if (j * kCopyRows / la.kElems == q) la.copy(fa, j);
#pragma unroll
        for (int e = 0; e < lb.kElems; ++e)
          if (e * kCopyRows / lb.kElems == q) lb.copy(fb, e);
        if (q == kCopyRows - 1) {
          la.advance();
          lb.advance();
          cp_async_commit();
        }
      });
    }
    for (; t < n_tiles; ++t) {
      const int slot = prev, tile = t + STAGES - 1;
      run_tile([&](int q) {
        if (q == 0) {
          if (tile < n_tiles) fill(slot, tile);
          cp_async_commit();
        }
      });
    }
    cp_async_wait<0>();
  } else {
    using LoaderA =
        std::conditional_t<kKMajorA, KVecLoader<BM, BK, kSimtPad, NT>, ScalarLoader<BM, BK, kSimtPad, NT, 8>>;
    LoaderA la;
    la.init(a_batch(p, b), p.a_sm, p.a_sk, m0, p.m, k_begin, a_kfast, tid);
    using LoaderB = std::conditional_t<LOAD != kLoadScalarB, VecLoader<BN, BK, kSimtPad, NT>,
                                       ScalarLoader<BN, BK, kSimtPad, NT, 8>>;
    LoaderB lb;
    lb.init(b_batch(p, b), p.b_sn, p.b_sk, n0, p.n, k_begin, b_kfast, tid);

    auto fill = [&](int stage, int tile) {
      la.load(sA + stage * kStageA, k_begin + tile * BK, k_end, tid);
      lb.load(sB + stage * S::kStageB, k_begin + tile * BK, k_end, tid);
    };
    ring_prologue<STAGES>(n_tiles, fill);
    for (int t = 0; t < n_tiles; ++t) {
      ring_advance<STAGES>(t, n_tiles, fill);
      if constexpr (kKMajorA)
        compute_tile_kmajor(sA + (t % STAGES) * kStageA, sB + (t % STAGES) * S::kStageB);
      else
        compute_tile(sA + (t % STAGES) * kStageA, sB + (t % STAGES) * S::kStageB);
    }
    cp_async_wait<0>();
  }

  // Epilogue: row i of the thread tile is C row m0 + trow(i).
  float* C = c_batch(p, b);
  if constexpr (SPLIT) {
    if (ws != nullptr) {
      // Split K through L2 (SplitReduce::Kernel): store this split's raw sums to its plane of `ws`; the
      // reduce kernel adds the planes in split order and runs the epilogue. It may start its blocks as this
      // grid's last blocks store (it waits for the whole grid before reading them), so its launch hides
      // behind them.
      pdl_launch_dependents();
      float* w = ws + (static_cast<std::int64_t>(split) * gridDim.y + b) * p.m * p.n;
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int g = 0; g < TN / 4; ++g)
          store_partial<4>(w, p.m, p.n, m0 + trow(i), n0 + b_col + g * S::kLanesN * 4, &acc[i][4 * g]);
      return;
    }
    // Split K over the blocks of one thread-block cluster (cluster_reduce_store).
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    float* red = smem;  // BM x BN, row-major: the pipeline's buffers are dead after the barrier below
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int g = 0; g < TN / 4; ++g)
        *reinterpret_cast<float4*>(red + trow(i) * BN + b_col + g * S::kLanesN * 4) =
            make_float4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]);
    cluster.sync();
    cluster_reduce_store<BM, BN, BN, NT>(p, C, red, m0, n0, c_vec, tid);
    cluster.sync();  // no block leaves while a peer may still read its shared memory
  } else {
    // The thread's TN bias values are loaded once, and the activation and C's layout are dispatched once per
    // tile, so the unrolled stores stay short. Edge tiles (partly outside C) check each element's row and
    // column, with the same compact code: the per-element store_run (the activation dispatched per element)
    // and a rolled loop over a local copy of the sums were both slower (see bench/gemm/DESIGN.md (epilogue)).
    //   kVecC    an interior tile of a C in 16-byte aligned rows: one float4 per fragment
    //   store_rows  (ROWS_C kernels, their only store) C in contiguous rows at any alignment (rows of odd
    //            length, an offset view), every element checked: the fragment's 4 values are shifted across
    //            lanes onto C's 16-byte boundaries, so a warp writes whole 32-byte sectors with float4 stores
    //            where scalar stores of 4 values 16 bytes apart wrote each sector in 4 pieces
    //   kScalarC, kEdgeC  C with a column stride: scalar stores, unchecked or checked
    constexpr int kScalarC = 0, kVecC = 1, kEdgeC = 2;
    const int col0 = n0 + b_col;
    auto load_bias = [&](float(&bias)[TN], bool edge) {
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int col = col0 + (j / 4) * S::kLanesN * 4 + j % 4;
        bias[j] = p.bias && (!edge || col < p.n) ? p.bias[col * p.bias_s] : 0.f;
      }
    };
    auto store_tile = [&](auto act_c, auto mode_c) {
      constexpr Activation kAct = decltype(act_c)::value;
      constexpr int kMode = decltype(mode_c)::value;
      float bias[TN];
      load_bias(bias, kMode == kEdgeC);
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int r = m0 + trow(i);
        if (kMode == kEdgeC && r >= p.m) continue;
        float* row = C + static_cast<std::int64_t>(r) * p.c_sm;
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) {
          const int col = col0 + g * S::kLanesN * 4;
          const float* a4 = &acc[i][4 * g];
          if constexpr (kMode == kVecC) {
            float4* dst = reinterpret_cast<float4*>(row + col);
            const float4 old = p.beta != 0.f ? *dst : make_float4(0.f, 0.f, 0.f, 0.f);
            *dst = make_float4(epilogue_apply(p, a4[0], old.x, bias[4 * g], kAct),
                               epilogue_apply(p, a4[1], old.y, bias[4 * g + 1], kAct),
                               epilogue_apply(p, a4[2], old.z, bias[4 * g + 2], kAct),
                               epilogue_apply(p, a4[3], old.w, bias[4 * g + 3], kAct));
          } else {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              if (kMode == kEdgeC && col + c >= p.n) continue;
              float* dst = row + static_cast<std::int64_t>(col + c) * p.c_sn;
              *dst = epilogue_apply(p, a4[c], p.beta != 0.f ? *dst : 0.f, bias[4 * g + c], kAct);
            }
          }
        }
      }
    };
    // store_rows. The lanes of a warp that share a row hold its columns in runs of 4 (lane_n, fragment g: the
    // warp's WN columns in order), and the run starting at column `col` lies `mis` floats past a 16-byte
    // boundary (the same for every run of the row). Each lane stores the aligned float4 ending inside its
    // run: the last `mis` values of the run before it (its left neighbour's, or for lane_n 0 its own of the
    // fragment before, which lane kLanesN - 1 sends) and the first 4 - mis of its own. The warp's first run
    // stores its first 4 - mis values and its last run its last mis as scalars (the neighbouring warp or
    // block writes the rest of those two float4s). Every lane takes part in every shuffle: rows and columns
    // outside C are checked at the stores only.
    auto store_rows = [&](auto act_c) {
      constexpr Activation kAct = decltype(act_c)::value;
      float bias[TN];
      load_bias(bias, true);
      const int src = lane_n == 0 ? lane + S::kLanesN - 1 : lane - 1;
      const bool first_lane = lane_n == 0, last_lane = lane_n == S::kLanesN - 1;
      const auto c_words = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(C) >> 2);
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int r = m0 + trow(i);
        const bool row_in = r < p.m;
        float* row = C + static_cast<std::int64_t>(r) * p.c_sm;
        const int mis =
            static_cast<int>((c_words + static_cast<unsigned>(static_cast<std::int64_t>(r) * p.c_sm) +
                              static_cast<unsigned>(col0)) &
                             3u);
        float before[4];  // this lane's values of the fragment before (sent by lane kLanesN - 1)
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) {
          const int col = col0 + g * S::kLanesN * 4;
          float v[4], left[4];
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const bool in = row_in && col + c < p.n;
            v[c] = epilogue_apply(p, acc[i][4 * g + c], p.beta != 0.f && in ? row[col + c] : 0.f,
                                  bias[4 * g + c], kAct);
          }
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            left[c] = __shfl_sync(0xffffffffu, last_lane && g > 0 ? before[c] : v[c], src);
            before[c] = v[c];
          }
          if (!row_in) continue;
          const bool head = first_lane && g == 0 && mis != 0;
          const bool tail = last_lane && g == TN / 4 - 1 && mis != 0;
          auto put = [&](int c0, int c1) {  // v[c0, c1) as scalars
#pragma unroll
            for (int c = 0; c < 4; ++c)
              if (c >= c0 && c < c1 && col + c < p.n) row[col + c] = v[c];
          };
          if (head) {
            put(0, 4 - mis);
          } else {
            // The aligned float4 at col - mis: left[4 - mis, 4) then v[0, 4 - mis).
            float w[4];
#pragma unroll
            for (int e = 0; e < 4; ++e)
              w[e] = mis == 0   ? v[e]
                     : mis == 1 ? (e < 1 ? left[3 + e] : v[e - 1])
                     : mis == 2 ? (e < 2 ? left[2 + e] : v[e - 2])
                                : (e < 3 ? left[1 + e] : v[e - 3]);
            float* slot = row + col - mis;
            if (col - mis + 4 <= p.n) {
              *reinterpret_cast<float4*>(slot) = make_float4(w[0], w[1], w[2], w[3]);
            } else {
#pragma unroll
              for (int e = 0; e < 4; ++e)
                if (col - mis + e < p.n) slot[e] = w[e];
            }
          }
          if (tail) put(4 - mis, 4);
        }
      }
    };
    auto by_activation = [&](auto store, auto... mode_c) {
      switch (p.act) {
        case Activation::Relu:
          store(std::integral_constant<Activation, Activation::Relu>{}, mode_c...);
          break;
        case Activation::Gelu:
          store(std::integral_constant<Activation, Activation::Gelu>{}, mode_c...);
          break;
        case Activation::GeluTanh:
          store(std::integral_constant<Activation, Activation::GeluTanh>{}, mode_c...);
          break;
        default:
          store(std::integral_constant<Activation, Activation::None>{}, mode_c...);
      }
    };
    // The 128-register scalar-loader ring variants keep the per-element path for edge tiles (the compact one
    // spills 52 bytes in one of them); the lane loaders leave the registers for it.
    constexpr bool kCompactEdge = kRegs || kLanes || MIN_BLOCKS * NT < 512;
    static_assert(!ROWS_C || ((kRegs || kLanes) && !SPLIT),
                  "store_rows is built into unsplit register-staged and lane-ring kernels");
    const bool edge = m0 + BM > p.m || n0 + BN > p.n;
    if constexpr (ROWS_C) {
      by_activation(store_rows);
    } else if (edge) {
      if constexpr (!kCompactEdge) {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int g = 0; g < TN / 4; ++g)
            store_run<4>(p, C, m0 + trow(i), n0 + b_col + g * S::kLanesN * 4, &acc[i][4 * g], c_vec);
      } else {
        by_activation(store_tile, std::integral_constant<int, kEdgeC>{});
      }
    } else if (c_vec) {
      by_activation(store_tile, std::integral_constant<int, kVecC>{});
    } else {
      by_activation(store_tile, std::integral_constant<int, kScalarC>{});
    }
  }
}

// Launches gemm_simt for the configuration CFG (CFG::value a SimtShape): picks the variant for the problem's
// layout, staging and split.
template <class CFG>
void launch_simt(const Problem& p, int split, SplitReduce reduce, Staging staging, cudaStream_t stream) {
  constexpr SimtShape SHAPE = CFG::value;
  using S = SimtGeometry<SHAPE>;
  constexpr int BM = SHAPE.BM, BN = SHAPE.BN, BK = SHAPE.BK;
  constexpr bool RING = SHAPE.ring, SCALAR_RUNS = SHAPE.scalar_runs, RING16 = SHAPE.ring16;
  constexpr bool ROWS_C = SHAPE.rows_c;
  constexpr int LANES = SHAPE.lanes;
  // The scalar B loader needs more registers than a 2-blocks-per-SM budget leaves (it would spill), so that
  // variant always runs one block per SM; so does the 128x128 tile's split variant with float4 B (held to
  // 128 registers it spills).
  using OneBlock = SimtMinBlocks<CFG, 1>;
  using SplitVec = SimtMinBlocks<CFG, BM * BN >= 128 * 128 ? 1 : SHAPE.min_blocks>;
  const bool regs = staging == Staging::Registers;
  MT_CHECK(staging != Staging::CpAsync || RING, InvalidArgument,
           "gemm: this SIMT configuration has no cp.async ring");
  MT_CHECK(staging != Staging::CpAsync16 || (RING16 && ring16_ready(p)), InvalidArgument,
           "gemm: the 16-byte cp.async ring needs this configuration built for it, A contiguous along k and "
           "B along n, in 16-byte aligned rows");
  MT_CHECK(!regs || SCALAR_RUNS || vector_runs(p), InvalidArgument,
           "gemm: this SIMT configuration needs every operand in whole 16-byte runs");
  using Kern = decltype(&gemm_simt<CFG, kLoadRegs, false>);
  // [(A k-contiguous) + 2 * (B k-contiguous) + kScalarRuns unless vector_runs][split > 1].
  auto row = [](auto load) {
    constexpr int kLoad = kLoadRegs + decltype(load)::value;
    return std::array<Kern, 2>{gemm_simt<CFG, kLoad, false>, gemm_simt<CFG, kLoad, true>};
  };
  using std::integral_constant;
  constexpr int kRuns = SCALAR_RUNS ? kScalarRuns : 0;  // without them, the scalar-run rows are never taken
  static const std::array<std::array<Kern, 2>, 8> reg_kernels = {
      row(integral_constant<int, 0>{}),         row(integral_constant<int, 1>{}),
      row(integral_constant<int, 2>{}),         row(integral_constant<int, 3>{}),
      row(integral_constant<int, kRuns + 0>{}), row(integral_constant<int, kRuns + 1>{}),
      row(integral_constant<int, kRuns + 2>{}), row(integral_constant<int, kRuns + 3>{})};
  // k-fast loads for operands that are contiguous along k (row-major A, transposed B).
  const bool a_kfast = p.a_sk == 1 && p.a_sm != 1;
  const bool b_kfast = p.b_sk == 1 && p.b_sn != 1;
  const int layout = (a_kfast ? 1 : 0) + (b_kfast ? 2 : 0) + (vector_runs(p) ? 0 : kScalarRuns);
  Kern kernel = reg_kernels[layout][split > 1 ? 1 : 0];
  if constexpr (ROWS_C) {
    auto rows = [](auto load) { return gemm_simt<CFG, kLoadRegs + decltype(load)::value, false, true>; };
    static const std::array<Kern, 8> rows_kernels = {
        rows(integral_constant<int, 0>{}),         rows(integral_constant<int, 1>{}),
        rows(integral_constant<int, 2>{}),         rows(integral_constant<int, 3>{}),
        rows(integral_constant<int, kRuns + 0>{}), rows(integral_constant<int, kRuns + 1>{}),
        rows(integral_constant<int, kRuns + 2>{}), rows(integral_constant<int, kRuns + 3>{})};
    if (split == 1 && p.c_sn == 1 && !c_vectorisable(p)) kernel = rows_kernels[layout];
  }
  if constexpr (RING) {
    // [B takes float4 loads][split > 1].
    static const Kern ring_kernels[2][2] = {
        {gemm_simt<OneBlock, kLoadScalarB, false>, gemm_simt<OneBlock, kLoadScalarB, true>},
        {gemm_simt<CFG, kLoadVecB, false>, gemm_simt<SplitVec, kLoadVecB, true>}};
    if (staging == Staging::CpAsync) kernel = ring_kernels[b_vectorisable(p) ? 1 : 0][split > 1 ? 1 : 0];
  }
  if constexpr (LANES != 0) {
    // [lanes_layout(p)][C in unaligned contiguous rows (store_rows)]; null for the layouts not built.
    auto lanes = [](auto layout) {
      constexpr int kLayout = decltype(layout)::value;
      if constexpr (((LANES >> kLayout) & 1) != 0)
        return std::array<Kern, 2>{gemm_simt<CFG, kLoadLanes + kLayout, false>,
                                   gemm_simt<CFG, kLoadLanes + kLayout, false, true>};
      else
        return std::array<Kern, 2>{nullptr, nullptr};
    };
    static const std::array<std::array<Kern, 2>, 4> lanes_kernels = {
        lanes(integral_constant<int, 0>{}), lanes(integral_constant<int, 1>{}),
        lanes(integral_constant<int, 2>{}), lanes(integral_constant<int, 3>{})};
    const int layout_l = lanes_layout(p);
    if (staging == Staging::CpAsync && split == 1 && layout_l >= 0 && lanes_kernels[layout_l][0] != nullptr)
      kernel = lanes_kernels[layout_l][p.c_sn == 1 && !c_vectorisable(p) ? 1 : 0];
  }
  if constexpr (RING16) {
    static const Kern ring16_kernels[2] = {gemm_simt<CFG, kLoadKMajorA, false>,
                                           gemm_simt<CFG, kLoadKMajorA, true>};
    if (staging == Staging::CpAsync16) kernel = ring16_kernels[split > 1 ? 1 : 0];
  }
  const int tiles = ((p.m + BM - 1) / BM) * ((p.n + BN - 1) / BN);
  const int kps = k_per_split(p, split, BK);
  const bool c_vec = c_vectorisable(p);
  const bool reduce_kernel = split > 1 && reduce == SplitReduce::Kernel;
  float* ws =
      reduce_kernel
          ? split_scratch(sizeof(float) * static_cast<std::size_t>(split) * p.batch * p.m * p.n, stream)
          : nullptr;
  // With the cluster reduction, the splits of a tile form one cluster.
  const bool cluster = split > 1 && reduce == SplitReduce::Cluster;
  LaunchConfig launch(dim3(tiles, p.batch, split), dim3(S::kThreads), S::smem_bytes(staging, cluster), stream,
                      dim3(1, 1, cluster ? split : 1));
  // Blocks may start while the previous kernel finishes (a split-K reduce signals at its start: the MLP's
  // second layer after its first), hiding this launch; the kernel waits for that kernel's writes first.
  launch.overlap_previous_kernel();
  allow_smem(kernel, S::smem_bytes(staging, cluster));
  MT_CUDA_CHECK(cudaLaunchKernelEx(&launch.cfg, kernel, p, kps, ws, a_kfast, b_kfast, regs && a_runs16(p),
                                   regs && b_runs16(p), c_vec));
  MT_CUDA_CHECK_LAUNCH();
  if (reduce_kernel) launch_splitk_reduce(p, ws, split, stream, /*overlap=*/true);
}

}  // namespace mt::detail::gemm
