// The global -> shared tile loaders of the SIMT kernels (ops/gemm/simt/kernel.cuh) and the mma.sync kernels
// (ops/gemm/tensorcore/mma_tf32.cu), and the cp.async ring over k tiles.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "minitensor/ops/gemm/detail/device.cuh"

namespace mt::detail::gemm {

// A run of 4 floats of which the first n (0..4) are read from src (16-byte aligned when n == 4) and the rest
// zero-filled: one 16-byte copy when whole or empty, else one 4-byte copy per element, so no byte past the
// run's in-range part is read. `valid`: any readable address.
__device__ __forceinline__ void cp_async_run(float* dst, const float* src, int n, const float* valid) {
  if (n == 4 || n == 0) {
    cp_async16(dst, n ? src : valid, 4 * n);
  } else {
#pragma unroll
    for (int c = 0; c < 4; ++c) cp_async4(dst + c, c < n ? src + c : valid, c < n ? 4 : 0);
  }
}

// ---------------------------------------------------------------- tile loaders
//
// An operand tile is stored in shared memory as [BK][BX + PAD]: x (m for A, n for B) contiguous, so A is
// stored transposed and both operands are read along x by the inner loop. The global operand is addressed as
// g[x * sx + k * sk] with any strides.

// Scalar loader: 4-byte cp.async per element; works for every stride and alignment. `k_fast` (runtime) walks
// k fastest across lanes, for operands that are contiguous along k (row-major A, transposed B), in groups of
// KG k-values, so that a warp covers 32/KG rows: global reads stay in few sectors and the transposing
// shared-memory stores hit distinct banks when (BX + PAD) * KG spans the 32 banks.
template <int BX, int BK, int PAD, int NT, int KG>
struct ScalarLoader {
  static constexpr int kElems = BX * BK / NT;
  static_assert((BX * BK) % NT == 0, "a tile must split evenly over the block's threads");
  static_assert(BK % KG == 0 && 32 % KG == 0, "k groups must tile BK and a warp");

  const float* base;   // element (x0, k of the next tile)
  const float* valid;  // any readable address, given to cp.async when it copies 0 bytes
  std::int64_t step;   // BK * sk
  int goff[kElems];    // x * sx + k * sk within the tile (32-bit: can_implement checks it fits)
  int soff[kElems];
  unsigned xmask;  // bit i: element i's x is inside the matrix
  bool k_fast;

  __device__ __forceinline__ static void coords(int e, bool kf, int& x, int& k) {
    if (kf) {
      x = (e / KG) % BX;
      k = (e / (KG * BX)) * KG + e % KG;
    } else {
      x = e % BX;
      k = e / BX;
    }
  }

  __device__ __forceinline__ void init(const float* g, std::int64_t sx, std::int64_t sk, int x0, int n_x,
                                       int k0, bool kf, int tid) {
    k_fast = kf;
    valid = g;
    base = g + static_cast<std::int64_t>(x0) * sx + static_cast<std::int64_t>(k0) * sk;
    step = static_cast<std::int64_t>(BK) * sk;
    xmask = 0;
#pragma unroll
    for (int i = 0; i < kElems; ++i) {
      int x, k;
      coords(tid + i * NT, kf, x, k);
      goff[i] = static_cast<int>(x * sx + k * sk);
      soff[i] = k * (BX + PAD) + x;
      xmask |= (x0 + x < n_x ? 1u : 0u) << i;
    }
  }

  // Loads the tile whose first k is `k0` (tiles are loaded in order) into `s`; k >= k_end reads as 0.
  __device__ __forceinline__ void load(float* s, int k0, int k_end, int tid) {
    if (k0 + BK <= k_end) {
#pragma unroll
      for (int i = 0; i < kElems; ++i) {
        const bool ok = (xmask >> i) & 1u;
        cp_async4(s + soff[i], ok ? base + goff[i] : valid, ok ? 4 : 0);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kElems; ++i) {
        int x, k;
        coords(tid + i * NT, k_fast, x, k);
        const bool ok = ((xmask >> i) & 1u) && k0 + k < k_end;
        cp_async4(s + soff[i], ok ? base + goff[i] : valid, ok ? 4 : 0);
      }
    }
    base += step;
  }
};

// Lane loaders (the kLoadLanes ring): 4-byte cp.async per element for row-major operands at any leading
// dimension and alignment, the lanes of a warp along the operand's contiguous dimension, each copy's shared
// address a fixed offset from the thread's first. Rows and columns past the matrix's edge read the row or
// column one tile width before them instead (edge_index; their products land only in rows and columns of C
// that are never stored), so a tile that lies inside K copies with no predicate; the tile that holds the end
// of K zero-fills past it in both operands (an Inf or NaN of the operand never meets the other's padding).
// Reading the matrix's last row or column instead made a one-column edge tile's 128 copies per warp and
// k-tile hit one address, and that tile took about 1.5x an inner tile's time (4096x4097x1024, H100).

// Index x (from the tile's first, x0) of a tile BX wide, moved inside [0, n_x - x0) when past the edge: one
// tile width back, where that stays in the matrix, else onto its last row or column.
template <int BX>
__device__ __forceinline__ int edge_index(int x, int x0, int n_x) {
  return x0 + x < n_x ? x : x0 >= BX ? x - BX : n_x - 1 - x0;
}

// LaneLoaderK: an operand contiguous along k (A, row-major) into [BK][BX + PAD]. Lane group of BK threads per
// row: a warp reads 32 / BK rows of BK consecutive elements each, and thread element j sits j * (NT / BK)
// rows below element 0. With (BX + PAD) % 32 == 4 and BK == 8, the transposing stores of a warp hit 32
// distinct banks.
template <int BX, int BK, int PAD, int NT>
struct LaneLoaderK {
  static constexpr int kRowsPerPass = NT / BK;
  static constexpr int kElems = BX / kRowsPerPass;
  static_assert(NT % BK == 0 && BX % kRowsPerPass == 0, "the block's threads must tile BX x BK");

  const float* ptr;    // row x0 of the tile, the thread's k of the next tile
  const float* valid;  // any readable address, given to cp.async when it copies 0 bytes
  int roff[kElems];    // edge_index(row) * sx: 32-bit within a tile (can_implement checks it fits)
  int soff;            // k * (BX + PAD) + row of element 0
  int k;               // the thread's k within a tile

  __device__ __forceinline__ void init(const float* g, std::int64_t sx, int x0, int n_x, int k0, int tid) {
    k = tid % BK;
    const int row = tid / BK;
    valid = g;
    ptr = g + static_cast<std::int64_t>(x0) * sx + k0 + k;
    soff = k * (BX + PAD) + row;
#pragma unroll
    for (int j = 0; j < kElems; ++j)
      roff[j] =
          static_cast<int>(static_cast<std::int64_t>(edge_index<BX>(row + j * kRowsPerPass, x0, n_x)) * sx);
  }
  // Element j of the next tile, which lies inside K, into `s`; advance() once all are issued.
  __device__ __forceinline__ void copy(float* s, int j) const {
    cp_async4_whole(s + soff + j * kRowsPerPass, ptr + roff[j]);
  }
  __device__ __forceinline__ void advance() {
    ptr += BK;
  }
  // The whole next tile (first k `k0`) into `s`; elements at k >= k_end read as 0.
  __device__ __forceinline__ void load(float* s, int k0, int k_end) {
    const bool ok = k0 + k < k_end;
#pragma unroll
    for (int j = 0; j < kElems; ++j)
      cp_async4(s + soff + j * kRowsPerPass, ok ? ptr + roff[j] : valid, ok ? 4 : 0);
    advance();
  }
};

// LaneLoaderX: an operand contiguous along x (B, row-major) into [BK][BX + PAD]. A warp reads one k-row, its
// lanes 32 consecutive elements; thread element j sits 32 * (j % (BX / 32)) columns right of and
// (NT / 32) * (j / (BX / 32)) k-rows below element 0.
template <int BX, int BK, int PAD, int NT>
struct LaneLoaderX {
  static constexpr int kRunsX = BX / 32, kWarps = NT / 32;
  static constexpr int kElems = BX * BK / NT;
  static_assert(BX % 32 == 0 && NT % 32 == 0 && BK % kWarps == 0, "the block's warps must tile BK x BX");

  const float* ptr;  // k-row of element 0 in the next tile, column x0
  const float* valid;
  std::int64_t step;  // BK * sk
  std::int64_t pass;  // kWarps * sk
  int xoff[kRunsX];   // edge_index(column) of each run
  int soff;           // k * (BX + PAD) + lane of element 0
  int k;              // the k-row of element 0 within a tile

  __device__ __forceinline__ void init(const float* g, std::int64_t sk, int x0, int n_x, int k0, int tid) {
    const int lane = tid % 32;
    k = tid / 32;
    valid = g;
    ptr = g + x0 + static_cast<std::int64_t>(k0 + k) * sk;
    step = static_cast<std::int64_t>(BK) * sk;
    pass = static_cast<std::int64_t>(kWarps) * sk;
    soff = k * (BX + PAD) + lane;
#pragma unroll
    for (int r = 0; r < kRunsX; ++r) xoff[r] = edge_index<BX>(lane + 32 * r, x0, n_x);
  }
  // Element e of the next tile, which lies inside K, into `s`; advance() once all are issued.
  __device__ __forceinline__ void copy(float* s, int e) const {
    const int kp = e / kRunsX, r = e % kRunsX;
    cp_async4_whole(s + soff + kp * kWarps * (BX + PAD) + 32 * r, ptr + kp * pass + xoff[r]);
  }
  __device__ __forceinline__ void advance() {
    ptr += step;
  }
  // The whole next tile (first k `k0`) into `s`; elements at k >= k_end read as 0.
  __device__ __forceinline__ void load(float* s, int k0, int k_end) {
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const int kp = e / kRunsX, r = e % kRunsX;
      const bool ok = k0 + k + kp * kWarps < k_end;
      cp_async4(s + soff + kp * kWarps * (BX + PAD) + 32 * r, ok ? ptr + kp * pass + xoff[r] : valid,
                ok ? 4 : 0);
    }
    advance();
  }
};

// Vector loader: 16-byte cp.async; needs sx == 1, sk % 4 == 0 and a 16-byte aligned base (checked on the
// host). A partial float4 at the right edge copies only its in-range bytes and zero-fills the rest: the
// whole float4 lies within the row's stride (a multiple of 4 floats), which is inside the allocation except
// for a view whose storage ends within its last row's stride.
template <int BX, int BK, int PAD, int NT>
struct VecLoader {
  static constexpr int kVecs = BX * BK / (4 * NT);
  static_assert((BX * BK) % (4 * NT) == 0, "BX*BK must be a multiple of 4*threads to vectorise loads");
  static_assert(BX % 4 == 0 && PAD % 4 == 0, "float4 stores need 16-byte aligned shared rows");

  const float* base;
  const float* valid;
  std::int64_t step;
  int goff[kVecs];
  int bytes[kVecs];  // in-range bytes of each float4 along x

  __device__ __forceinline__ void init(const float* g, std::int64_t /*sx*/, std::int64_t sk, int x0, int n_x,
                                       int k0, bool /*k_fast*/, int tid) {
    valid = g;
    base = g + x0 + static_cast<std::int64_t>(k0) * sk;
    step = static_cast<std::int64_t>(BK) * sk;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int f = tid + i * NT;
      const int x = (f % (BX / 4)) * 4, k = f / (BX / 4);
      goff[i] = static_cast<int>(x + k * sk);
      bytes[i] = 4 * max(0, min(4, n_x - x0 - x));
    }
  }

  __device__ __forceinline__ void load(float* s, int k0, int k_end, int tid) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int f = tid + i * NT;
      const int x = (f % (BX / 4)) * 4, k = f / (BX / 4);
      const int nb = k0 + k < k_end ? bytes[i] : 0;
      cp_async16(s + k * (BX + PAD) + x, nb ? base + goff[i] : valid, nb);
    }
    base += step;
  }
};

// k-major vector loader: 16-byte cp.async of 4 consecutive k, for an operand contiguous along k (row-major
// A) whose rows, batches and base are 16-byte aligned (checked on the host). The tile stays k-major in shared
// memory, [BX][BK + PAD], so no copy transposes; the kernel reads it one float4 (4 k-steps of one row) at a
// time. Runs past k_end copy only their in-range elements and zero-fill the rest; rows past n_x read as 0.
template <int BX, int BK, int PAD, int NT>
struct KVecLoader {
  static constexpr int kRuns = BX * BK / 4;
  static constexpr int kVecs = (kRuns + NT - 1) / NT;  // the last may be idle in some threads
  static constexpr bool kEven = kRuns % NT == 0;
  static_assert(BK % 4 == 0 && PAD % 4 == 0, "16-byte runs along k; 16-byte shared rows");

  const float* base;  // element (x0, first k of the next tile)
  const float* valid;
  int goff[kVecs];  // x * sx + k within the tile (32-bit: can_implement checks it fits)
  int soff[kVecs];
  int kpos[kVecs];
  unsigned live;  // bit i: slot i owns a run whose row is inside the matrix

  __device__ __forceinline__ void init(const float* g, std::int64_t sx, std::int64_t /*sk*/, int x0, int n_x,
                                       int k0, bool /*k_fast*/, int tid) {
    valid = g;
    base = g + static_cast<std::int64_t>(x0) * sx + k0;
    live = 0;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int f = min(tid + i * NT, kRuns - 1);
      const int x = f / (BK / 4), k = (f % (BK / 4)) * 4;
      goff[i] = static_cast<int>(x * sx + k);
      soff[i] = x * (BK + PAD) + k;
      kpos[i] = k;
      live |= ((kEven || tid + i * NT < kRuns) && x0 + x < n_x ? 1u : 0u) << i;
    }
  }

  __device__ __forceinline__ void load(float* s, int k0, int k_end, int tid) {
    const bool whole = k0 + BK <= k_end;  // every run inside the matrix along k: no per-run count
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (!kEven && tid + i * NT >= kRuns) break;  // an idle slot stores nothing
      const bool row_in = (live >> i) & 1u;
      if (whole)
        cp_async16(s + soff[i], row_in ? base + goff[i] : valid, row_in ? 16 : 0);
      else
        cp_async_run(s + soff[i], base + goff[i], row_in ? max(0, min(4, k_end - k0 - kpos[i])) : 0, valid);
    }
    base += BK;
  }
};

// Register-staged loader: the operand must be contiguous along k (`k_contig`: row-major A, transposed B) or
// along x (transposed A, row-major B). Each thread owns kVecs runs of 4 elements along the contiguous
// dimension; load_whole() (tiles inside the matrix along k) or load() (any tile) brings the next tile's runs
// into registers (one 16-byte load per whole, aligned run; otherwise up to 4 predicated scalar loads off one
// pointer) while the current tile is computed, and store_as() writes them into shared memory afterwards (4
// transposing scalar stores per run when k is contiguous, one float4 store otherwise). No cp.async: no
// per-element address selects and no LDGSTS issue padding, which were most of the cp.async loaders' ~100
// instructions per 8-deep tile.
template <int BX, int BK, int PAD, int NT>
struct RegLoader {
  static constexpr int kRuns = BX * BK / 4;
  static constexpr int kVecs = (kRuns + NT - 1) / NT;  // the last may be idle in some threads (32-row tiles)
  static constexpr bool kEven = kRuns % NT == 0;
  static_assert(BK % 4 == 0 && BX % 4 == 0 && PAD % 4 == 0, "runs of 4 along k or x; 16-byte shared rows");

  const float* ptr[kVecs];  // the run's first element in the next tile to load (an in-range row when the
                            // run's x is out of range: never dereferenced then)
  std::int64_t step;        // elements per tile along k
  int soff[kVecs];          // shared-memory offset of the run's first element
  int kpos[kVecs];          // the run's first k within a tile
  int xn[kVecs];            // in-range elements along x: 0..4 (x-contiguous), 0 or 1 (k-contiguous)
  bool k_contig, vec;       // vec: whole runs may take one 16-byte load (aligned rows, checked on the host)
  bool live_last;           // whether this thread owns a run in its last slot (always, when kEven)
  float4 v[kVecs];

  __device__ __forceinline__ void init(const float* g, std::int64_t sx, std::int64_t sk, int x0, int n_x,
                                       int k0, bool kc, bool vector_ok, int tid) {
    k_contig = kc;
    vec = vector_ok;
    step = kc ? BK : BK * sk;
    live_last = kEven || tid + (kVecs - 1) * NT < kRuns;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int f = min(tid + i * NT, kRuns - 1);  // an idle slot loads nothing and is never stored
      int x, k;
      if (kc) {
        x = f / (BK / 4), k = (f % (BK / 4)) * 4;
        xn[i] = x0 + x < n_x ? 1 : 0;
      } else {
        k = f / (BX / 4), x = (f % (BX / 4)) * 4;
        xn[i] = max(0, min(4, n_x - x0 - x));
      }
      if (!kEven && tid + i * NT >= kRuns) xn[i] = 0;  // idle: loads nothing
      kpos[i] = k;
      soff[i] = k * (BX + PAD) + x;
      const std::int64_t xg = xn[i] > 0 ? x0 + x : 0;
      ptr[i] = g + xg * sx + static_cast<std::int64_t>(k0 + k) * sk;
    }
  }

  // Loads the next tile (tiles are loaded in order); `k_left` = k_end minus the tile's first k. Elements at
  // k >= k_end or x >= n_x read as 0.
  __device__ __forceinline__ void load(int k_left) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int n = k_contig ? xn[i] * max(0, min(4, k_left - kpos[i])) : (kpos[i] < k_left ? xn[i] : 0);
      const float* p = ptr[i];
      if (vec && n == 4) {
        v[i] = __ldcg(reinterpret_cast<const float4*>(p));
      } else {
        v[i].x = n > 0 ? __ldcg(p) : 0.f;
        v[i].y = n > 1 ? __ldcg(p + 1) : 0.f;
        v[i].z = n > 2 ? __ldcg(p + 2) : 0.f;
        v[i].w = n > 3 ? __ldcg(p + 3) : 0.f;
      }
      ptr[i] += step;
    }
  }

  // Whole-tile loads, for the kernels' straight-line main loop: the tile lies inside the matrix along k and
  // no run straddles the matrix's edge along x (host and kernel checked). A run outside the matrix along x
  // reads row or column 0 instead (init points it there; idle slots too), whose products land only in rows
  // or columns of C that are never stored. VEC: one 16-byte load per run; otherwise 4 scalar loads through
  // L1 (the other 3 hit the line the first brought in).
  template <bool VEC>
  __device__ __forceinline__ void load_whole() {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const float* p = ptr[i];
      if constexpr (VEC)
        v[i] = __ldcg(reinterpret_cast<const float4*>(p));
      else
        v[i] = make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
      ptr[i] += step;
    }
  }

  // KC: the layout (k_contig) known at compile time.
  template <bool KC>
  __device__ __forceinline__ void store_as(float* s) const {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (!kEven && i == kVecs - 1 && !live_last) break;
      if constexpr (KC) {
        s[soff[i]] = v[i].x;
        s[soff[i] + (BX + PAD)] = v[i].y;
        s[soff[i] + 2 * (BX + PAD)] = v[i].z;
        s[soff[i] + 3 * (BX + PAD)] = v[i].w;
      } else {
        *reinterpret_cast<float4*>(s + soff[i]) = v[i];
      }
    }
  }
};

// ---------------------------------------------------------------- the cp.async ring over k tiles

// A STAGES-deep ring of shared-memory stages: `fill(stage, tile)` issues the cp.async loads of k tile `tile`
// into ring slot `stage`. Prologue: tiles 0 .. STAGES-2 in flight. Then, before computing tile t,
// ring_advance waits for it and refills the slot that tile t-1 just freed with tile t + STAGES - 1. Every
// call commits one group (empty past the last tile), so the wait count stays STAGES - 2.
template <int STAGES, class Fill>
__device__ __forceinline__ void ring_prologue(int n_tiles, Fill&& fill) {
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < n_tiles) fill(s, s);
    cp_async_commit();
  }
}
template <int STAGES, class Fill>
__device__ __forceinline__ void ring_advance(int t, int n_tiles, Fill&& fill) {
  cp_async_wait<STAGES - 2>();
  __syncthreads();  // tile t has landed for every thread; slot (t-1) % STAGES is free to refill
  const int tn = t + STAGES - 1;
  if (tn < n_tiles) fill(tn % STAGES, tn);
  cp_async_commit();
}

}  // namespace mt::detail::gemm
