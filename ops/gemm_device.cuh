// Device-side pieces shared by the SGEMM kernels of ops/gemm.cu, ops/gemm_simt.cuh and ops/gemm_tf32.cu:
// cp.async wrappers, the global -> shared tile loaders, tile rasterisation and the fused epilogue. Included
// by those files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <cooperative_groups.h>

#include "ops/functors.h"
#include "ops/gemm_launch.h"

namespace mt::detail::gemm {

// Operand and result bases of batch entry b (a batch stride of 0 broadcasts the operand).
__device__ __forceinline__ const float* a_batch(const Problem& p, int b) {
  return p.a + b * p.a_sb;
}
__device__ __forceinline__ const float* b_batch(const Problem& p, int b) {
  return p.b + b * p.b_sb;
}
__device__ __forceinline__ float* c_batch(const Problem& p, int b) {
  return p.c + b * p.c_sb;
}

// ---------------------------------------------------------------- cp.async (sm_80+, plain sm_90 is enough)

// Copies `bytes` (0 or 4) bytes and zero-fills the rest of the 4-byte word: predicated loads without
// branches.
__device__ __forceinline__ void cp_async4(float* dst, const float* src, int bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(bytes));
}
// 4 bytes, all read.
__device__ __forceinline__ void cp_async4_whole(float* dst, const float* src) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src));
}
// 16 bytes, of which the first `bytes` (0..16, a multiple of 4) come from global memory. Bypasses L1 (.cg):
// every byte of a tile is read once per block. compute-sanitizer counts a partial copy as a read of all 16
// bytes: callers use one only where the whole run lies in the operand's padded row (cp_async_run otherwise).
__device__ __forceinline__ void cp_async16(float* dst, const float* src, int bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes));
}
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
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---------------------------------------------------------------- programmatic dependent launch (sm_90)

// Lets the next kernel in the stream, if launched to overlap this one
// (LaunchConfig::overlap_previous_kernel), start its blocks once every block of this grid has called this or
// exited.
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
// Waits until the kernels this one was launched to overlap have finished and their writes are visible;
// returns at once for a kernel launched the ordinary way.
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

// ---------------------------------------------------------------- mbarriers (sm_90)
//
// The stage handshakes of the kernels fed by asynchronous copies (ops/gemm_wgmma.cu, ops/gemm_simt_tma.cu).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Arrives once and adds `bytes` to the transactions the current phase waits for.
__device__ __forceinline__ void mbar_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t ok;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, std::uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

#endif  // __CUDA_ARCH__ >= 900

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
  __device__ __forceinline__ void advance() { ptr += BK; }
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
  __device__ __forceinline__ void advance() { ptr += step; }
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

// ---------------------------------------------------------------- tiles and epilogue

// Block -> (tile_m, tile_n), grouped by 8 tile rows so that blocks running together share panels of A and B
// in L2 (the big shapes do not fit L2 otherwise).
__device__ __forceinline__ void raster(int bid, int tiles_m, int tiles_n, int& tm, int& tn) {
  constexpr int kGroup = 8;
  const int width = kGroup * tiles_n;
  const int first_m = (bid / width) * kGroup;
  const int rows = min(tiles_m - first_m, kGroup);
  tm = first_m + (bid % width) % rows;
  tn = (bid % width) / rows;
}

// What one block of the SIMT and mma.sync kernels computes: blockIdx.x the output tile (rasterised),
// blockIdx.y the batch entry, blockIdx.z the split of K.
struct BlockTile {
  int m0, n0;          // the tile's first row and column of C
  int b, split;        // batch entry, split index
  int k_begin, k_end;  // this split's k range
  int n_tiles;         // BK-deep k tiles in it
};
template <int BM, int BN, int BK>
__device__ __forceinline__ BlockTile block_tile(const Problem& p, int k_per_split) {
  BlockTile t;
  int tile_m, tile_n;
  raster(blockIdx.x, (p.m + BM - 1) / BM, (p.n + BN - 1) / BN, tile_m, tile_n);
  t.m0 = tile_m * BM, t.n0 = tile_n * BN;
  t.b = blockIdx.y, t.split = blockIdx.z;
  t.k_begin = t.split * k_per_split, t.k_end = min(p.k, t.k_begin + k_per_split);
  t.n_tiles = t.k_end > t.k_begin ? (t.k_end - t.k_begin + BK - 1) / BK : 0;
  return t;
}

// act(alpha * acc + beta * c + bias[j]), the same formula as the CPU reference and as matmul followed by the
// eager bias add and activation. epilogue_apply takes C's old value and the bias already loaded (each
// ignored when unused) and the activation (a constant where the caller has dispatched on it); epilogue_value
// reads C only when beta != 0. (epilogue_value is not written in terms of epilogue_apply: that form costs the
// 128-register split-K kernels a spill.)
__device__ __forceinline__ float epilogue_apply(const Problem& p, float acc, float c, float bias,
                                                Activation act) {
  float v = p.alpha * acc;
  if (p.beta != 0.f) v = fmaf(p.beta, c, v);
  if (p.bias) v = v + bias;
  return activate(v, act);
}
__device__ __forceinline__ float epilogue_value(const Problem& p, float acc, const float* c, int j) {
  float v = p.alpha * acc;
  if (p.beta != 0.f) v = fmaf(p.beta, *c, v);
  if (p.bias) v = v + p.bias[j * p.bias_s];
  return activate(v, p.act);
}

// Writes N consecutive columns j0.. of row i of the batch's C (pointer cb). `vec`: C is contiguous along n
// with 16-byte aligned rows, so a full in-range run of 4 is one float4.
template <int N>
__device__ __forceinline__ void store_run(const Problem& p, float* cb, int i, int j0, const float* acc,
                                          bool vec) {
  if (i >= p.m) return;
  float* row = cb + static_cast<std::int64_t>(i) * p.c_sm;
  if constexpr (N == 4) {
    if (vec && j0 + 4 <= p.n) {
      float4* dst = reinterpret_cast<float4*>(row + j0);
      float4 old = make_float4(0.f, 0.f, 0.f, 0.f);
      if (p.beta != 0.f) old = *dst;
      float4 v;
      v.x = epilogue_value(p, acc[0], &old.x, j0);
      v.y = epilogue_value(p, acc[1], &old.y, j0 + 1);
      v.z = epilogue_value(p, acc[2], &old.z, j0 + 2);
      v.w = epilogue_value(p, acc[3], &old.w, j0 + 3);
      *dst = v;
      return;
    }
  }
#pragma unroll
  for (int c = 0; c < N; ++c) {
    const int j = j0 + c;
    if (j < p.n) {
      float* dst = row + static_cast<std::int64_t>(j) * p.c_sn;
      *dst = epilogue_value(p, acc[c], dst, j);
    }
  }
}

// Split K reduced inside one thread-block cluster: the gridDim.z == `splits` blocks of a tile (at most
// kMaxClusterSplit) each park their raw BM x BN sums in their own shared memory (`red`, row stride LD) and
// meet at a cluster barrier; then each block reduces a 1/splits slice of the tile, reading every block's sums
// through distributed shared memory in split order 0, 1, ... (deterministic: the order never depends on
// timing), and runs the epilogue into C. Called by the NT threads `tid` of each block that hold no other
// work; the caller puts a cluster barrier before (every block's sums written) and after (no block leaves
// while a peer may still read its shared memory). No global workspace, no atomics, no serial tail through L2.
template <int BM, int BN, int LD, int NT>
__device__ __forceinline__ void cluster_reduce_store(const Problem& p, float* C, const float* red, int m0,
                                                     int n0, bool c_vec, int tid) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int splits = static_cast<int>(gridDim.z);
  const float* peers[kMaxClusterSplit];
#pragma unroll
  for (int s = 0; s < kMaxClusterSplit; ++s) peers[s] = cluster.map_shared_rank(red, s < splits ? s : 0);
  constexpr int kRuns = BM * BN / 4;  // float4 runs of the tile
  for (int e = static_cast<int>(cluster.block_rank()) * NT + tid; e < kRuns; e += splits * NT) {
    const int row = e / (BN / 4), col = (e % (BN / 4)) * 4;
    float4 part[kMaxClusterSplit];
#pragma unroll
    for (int s = 0; s < kMaxClusterSplit; ++s)  // all loads in flight before the first add
      if (s < splits) part[s] = *reinterpret_cast<const float4*>(peers[s] + row * LD + col);
    float sum[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < kMaxClusterSplit; ++s)
      if (s < splits) sum[0] += part[s].x, sum[1] += part[s].y, sum[2] += part[s].z, sum[3] += part[s].w;
    store_run<4>(p, C, m0 + row, n0 + col, sum, c_vec);
  }
}

// Split-K partial sums: workspace [split][batch][m][n], contiguous; raw sums, the epilogue runs in the
// reduction.
template <int N>
__device__ __forceinline__ void store_partial(float* ws, int m, int n, int i, int j0, const float* acc) {
  if (i >= m) return;
  float* row = ws + static_cast<std::int64_t>(i) * n;
  if constexpr (N == 4) {
    if ((n & 3) == 0 && j0 + 4 <= n) {
      *reinterpret_cast<float4*>(row + j0) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      return;
    }
  }
#pragma unroll
  for (int c = 0; c < N; ++c)
    if (j0 + c < n) row[j0 + c] = acc[c];
}

}  // namespace mt::detail::gemm
