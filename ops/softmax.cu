// Softmax and log-softmax kernels, one fused pass each: the row is read once, its max and sum of exponentials
// found together, and the result written.
//   - rows (the axis is innermost): a warp per row up to 32 * V * kCache elements, held in registers; aligned
//     rows of 16 KiB up to where three fit in shared memory stream through a ring of stages filled by the
//     bulk-copy engine, one block per SM taking rows from a queue (the lean ring); other aligned rows up to
//     96 KiB in shared memory (copied in by cp.async, several blocks per SM); else a block per row in
//     registers up to 1024 * V * kCache; longer rows are read twice (the second read mostly hits L2). The
//     cached paths move 8 bytes of HBM traffic per element.
//   - columns (the axis is strided): a thread per (outer, inner) column, coalesced across the inner dim, two
//     passes over the column.
// Statistics merge as (max, sum) pairs: s = s1 * exp(m1 - m) + s2 * exp(m2 - m) with m = max(m1, m2), so no
// exponential overflows whatever the inputs. NaN anywhere in a row gives a NaN row; +Inf too (Inf - Inf), as
// the float64 reference does.
// Napkin maths: 8 bytes and one expf (~10 instructions) per element: bandwidth-bound on H100.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "memory/allocator.h"
#include "ops/functors.h"
#include "ops/kernels.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/launch.h"

namespace mt::detail {
namespace {

constexpr int kCache = 8;  // vectors per thread kept in registers (V = 4: 32 floats)

struct Stats {
  float m, s;
};

__device__ __forceinline__ Stats merge(Stats a, Stats b) {
  const float m = fn::maximum(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// One element into running statistics.
__device__ __forceinline__ void update(Stats& st, float v) {
  if (v != v || v > st.m) {
    st.s = st.s * expf(st.m - v) + 1.f;
    st.m = v;
  } else if (v != -INFINITY) {
    st.s += expf(v - st.m);
  }
}

__device__ __forceinline__ Stats warp_merge(Stats st) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    Stats o{__shfl_xor_sync(0xffffffffu, st.m, d), __shfl_xor_sync(0xffffffffu, st.s, d)};
    st = merge(st, o);
  }
  return st;
}

// Every thread of the block gets the block's statistics.
__device__ Stats block_merge(Stats st) {
  __shared__ Stats partial[32];
  __shared__ Stats total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  st = warp_merge(st);
  if (lane == 0) partial[warp] = st;
  __syncthreads();
  if (warp == 0) {
    st = lane < int(blockDim.x / 32) ? partial[lane] : Stats{-INFINITY, 0.f};
    st = warp_merge(st);
    if (lane == 0) total = st;
  }
  __syncthreads();
  st = total;
  __syncthreads();  // `total` is rewritten for the next row
  return st;
}

template <bool LOG>
__device__ __forceinline__ float finish(float v, float m, float s_or_log) {
  return LOG ? v - m - s_or_log : expf(v - m) * s_or_log;
}

// +Inf in a row makes the row NaN (Inf - Inf), as in the reference; the merged sum says so.
template <bool LOG>
__device__ __forceinline__ float scale(Stats st) {
  const float s = st.m == INFINITY ? NAN : st.s;
  return LOG ? logf(s) : 1.f / s;
}

template <int V>
struct Vec;
template <>
struct Vec<1> {
  static __device__ __forceinline__ void load(const float* p, float (&v)[1]) { v[0] = __ldg(p); }
  static __device__ __forceinline__ void store(float* p, const float (&v)[1]) { *p = v[0]; }
};
template <>
struct Vec<4> {
  static __device__ __forceinline__ void load(const float* p, float (&v)[4]) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  }
  static __device__ __forceinline__ void store(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  }
};

// Rows held in registers. WARP: a warp per row; else a block per row. Vector j of the row (V floats) belongs
// to thread j % group, slot j / group. Row length is a multiple of V (V = 4: and the rows are 16-byte
// aligned).
template <bool LOG, int V, bool WARP>
__global__ void __launch_bounds__(1024)
    softmax_rows_cached_kernel(const float* __restrict__ x, float* __restrict__ out, std::int64_t n_rows,
                               std::int64_t row_len) {
  const int group = WARP ? 32 : blockDim.x;
  const int t = WARP ? threadIdx.x % 32 : threadIdx.x;
  const std::int64_t first =
      WARP ? blockIdx.x * std::int64_t(blockDim.x / 32) + threadIdx.x / 32 : blockIdx.x;
  const std::int64_t step = WARP ? std::int64_t(gridDim.x) * (blockDim.x / 32) : gridDim.x;
  const std::int64_t n_vec = row_len / V;
  for (std::int64_t r = first; r < n_rows; r += step) {
    const float* xr = x + r * row_len;
    float v[kCache][V];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < kCache; ++k) {
      const std::int64_t j = t + std::int64_t(k) * group;
      if (j < n_vec) {
        Vec<V>::load(xr + j * V, v[k]);
#pragma unroll
        for (int q = 0; q < V; ++q) m = fn::maximum(m, v[k][q]);
      }
    }
    float s = 0.f;
    if (m != -INFINITY) {
#pragma unroll
      for (int k = 0; k < kCache; ++k) {
        if (t + std::int64_t(k) * group < n_vec) {
#pragma unroll
          for (int q = 0; q < V; ++q) s += expf(v[k][q] - m);
        }
      }
    }
    Stats st{m, s};
    st = WARP ? warp_merge(st) : block_merge(st);
    const float sc = scale<LOG>(st);
    float* yr = out + r * row_len;
#pragma unroll
    for (int k = 0; k < kCache; ++k) {
      const std::int64_t j = t + std::int64_t(k) * group;
      if (j < n_vec) {
#pragma unroll
        for (int q = 0; q < V; ++q) v[k][q] = finish<LOG>(v[k][q], st.m, sc);
        Vec<V>::store(yr + j * V, v[k]);
      }
    }
  }
}

// Issues the cp.async copies of one row (n_vec float4) into shared memory: 16 bytes each, the whole row in
// flight at once, no registers held.
__device__ __forceinline__ void load_row_async(float4* row, const float4* src, int n_vec) {
  for (int j = threadIdx.x; j < n_vec; j += blockDim.x) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(row + j));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src + j));
  }
}

// Softmax of one row staged in shared memory, written to `dst`. For softmax the exponentials stay in shared
// memory between the sum and the output (one expf per element). Every thread of the block calls it.
template <bool LOG>
__device__ void softmax_row_in_smem(float4* row, int n_vec, float4* __restrict__ dst) {
  float m = -INFINITY;
  for (int j = threadIdx.x; j < n_vec; j += blockDim.x) {
    const float4 v = row[j];
    m = fn::maximum(fn::maximum(m, v.x), fn::maximum(fn::maximum(v.y, v.z), v.w));
  }
  // Every thread needs the row max before the exponentials: merge the maxima first (sums are zero).
  m = block_merge(Stats{m, 0.f}).m;
  float s = 0.f;
  if (m != -INFINITY) {
    for (int j = threadIdx.x; j < n_vec; j += blockDim.x) {
      float4 v = row[j];
      v = make_float4(expf(v.x - m), expf(v.y - m), expf(v.z - m), expf(v.w - m));
      s += (v.x + v.y) + (v.z + v.w);
      if (!LOG) row[j] = v;
    }
  }
  Stats st{m, 0.f};
  st.s = block_merge(Stats{m, s}).s;
  const float sc = scale<LOG>(st);
  for (int j = threadIdx.x; j < n_vec; j += blockDim.x) {
    float4 v = row[j];
    if (LOG || m == -INFINITY) {
      v = make_float4(finish<LOG>(v.x, m, sc), finish<LOG>(v.y, m, sc), finish<LOG>(v.z, m, sc),
                      finish<LOG>(v.w, m, sc));
    } else {
      v = make_float4(v.x * sc, v.y * sc, v.z * sc, v.w * sc);
    }
    dst[j] = v;
  }
}

// Rows in shared memory (dynamic, row_len floats), one buffer per block: several blocks per SM so that one
// block's compute overlaps another's loads. Row length a multiple of 4, rows 16-byte aligned.
template <bool LOG>
__global__ void __launch_bounds__(512)
    softmax_rows_smem_kernel(const float* __restrict__ x, float* __restrict__ out, std::int64_t n_rows,
                             std::int64_t row_len) {
  extern __shared__ float4 row[];
  const int n_vec = static_cast<int>(row_len / 4);
  for (std::int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    load_row_async(row, reinterpret_cast<const float4*>(x + r * row_len), n_vec);
    asm volatile("cp.async.wait_all;\n" ::);
    __syncthreads();
    softmax_row_in_smem<LOG>(row, n_vec, reinterpret_cast<float4*>(out + r * row_len));
    __syncthreads();  // the row buffer is refilled for the next row
  }
}

// Double-buffered: a block's next row is copied in while it computes the current one, so its loads never
// stop. Dynamic shared memory: 2 * row_len floats.
template <bool LOG>
__global__ void __launch_bounds__(1024)
    softmax_rows_pipelined_kernel(const float* __restrict__ x, float* __restrict__ out, std::int64_t n_rows,
                                  std::int64_t row_len) {
  extern __shared__ float4 buf[];
  const int n_vec = static_cast<int>(row_len / 4);
  if (blockIdx.x < n_rows)
    load_row_async(buf, reinterpret_cast<const float4*>(x + blockIdx.x * row_len), n_vec);
  asm volatile("cp.async.commit_group;\n" ::);
  int k = 0;
  for (std::int64_t r = blockIdx.x; r < n_rows; r += gridDim.x, k ^= 1) {
    const std::int64_t next = r + gridDim.x;
    if (next < n_rows) {
      load_row_async(buf + (k ^ 1) * n_vec, reinterpret_cast<const float4*>(x + next * row_len), n_vec);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 1;\n" ::);  // all but the newest group: the current row has landed
    __syncthreads();
    softmax_row_in_smem<LOG>(buf + k * n_vec, n_vec, reinterpret_cast<float4*>(out + r * row_len));
    __syncthreads();  // buffer k is refilled by the next iteration's prefetch
  }
  asm volatile("cp.async.wait_all;\n" ::);
}

// ---- rows streamed through a ring of shared-memory stages by the bulk-copy engine (sm_90)

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(std::uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// Arms `bar` for one arrival and `bytes` of bulk copies, then copies [src, src + bytes) into dst in chunks of
// at most 16 KiB, each completing its bytes on `bar`. One thread issues; 16-byte aligned, bytes % 16 == 0.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, std::uint64_t* bar) {
  // The stage was last read by ordinary loads (ordered before this by a barrier); the copy engine writes it.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
  constexpr unsigned kChunk = 16 * 1024;
  for (unsigned off = 0; off < bytes; off += kChunk) {
    const unsigned size = bytes - off < kChunk ? bytes - off : kChunk;
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
            smem_addr(static_cast<char*>(dst) + off)),
        "l"(static_cast<const char*>(src) + off), "r"(size), "r"(smem_addr(bar))
        : "memory");
  }
}

// Waits until the phase of `bar` with the given parity has completed (acquire: the copied bytes are visible).
// CLUSTER: cluster-scope acquire, so that bytes other blocks of the cluster stored are visible too.
template <bool CLUSTER = false>
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  do {
    if constexpr (CLUSTER)
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
          "selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(smem_addr(bar)), "r"(parity)
          : "memory");
    else
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, "
          "p;\n}\n"
          : "=r"(done)
          : "r"(smem_addr(bar)), "r"(parity)
          : "memory");
  } while (!done);
}

// fmaxf: NaN elements are skipped here; they still make the row NaN through the sum (exp of NaN).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}

// 2^x on the special-function unit (relative error ~2^-22; results below 2^-126 flush to 0). With the
// argument (x - m) * log2(e) this is e^(x - m) to ~1e-6 relative for |x - m| < 10, where the terms that
// matter live, in 2 instructions instead of expf's ~8.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

constexpr int kMaxStages = 8;

// One block per SM streams its rows (blockIdx.x, + gridDim.x, ...) through `n_stages` shared-memory buffers
// of one row each: thread 0 keeps n_stages - 1 rows in flight on the bulk-copy engine while the block
// computes the current one, so the block's loads never stop for its arithmetic (the single-buffer kernel's
// blocks load, then compute, then load, in step with each other). Each thread copies its K float4 of the row
// from shared memory to registers once; the stage is refilled as soon as the block max is merged (every
// thread holds its part by then); the exponentials stay in registers, and the row is written from them. 8
// bytes of HBM traffic and one exponential (ex2 on the SFU) per element; two block-wide merges per row. n_vec
// <= K * blockDim.x.
template <bool LOG, int K, bool STREAMING>
__global__ void __launch_bounds__(1024, 1)
    softmax_rows_bulk_kernel(const float* __restrict__ x, float* __restrict__ out, std::int64_t n_rows,
                             int n_vec, int n_stages) {
  extern __shared__ __align__(128) float4 stages[];
  __shared__ __align__(8) std::uint64_t full[kMaxStages];
  __shared__ float part_max[32], part_sum[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  const unsigned row_bytes = static_cast<unsigned>(n_vec) * 16u;
  const std::int64_t n_mine =
      n_rows > blockIdx.x ? (n_rows - blockIdx.x + gridDim.x - 1) / gridDim.x : std::int64_t(0);
  auto row_of = [&](std::int64_t i) { return blockIdx.x + i * std::int64_t(gridDim.x); };

  if (threadIdx.x == 0) {
    for (int s = 0; s < n_stages; ++s) mbar_init(&full[s], 1);
    // The initialised barriers must be visible to the copy engine before it completes bytes on them.
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int s = 0; s < n_stages && s < n_mine; ++s) {
      bulk_load(stages + std::int64_t(s) * n_vec, x + row_of(s) * (std::int64_t(n_vec) * 4), row_bytes,
                &full[s]);
    }
  }
  __syncthreads();

  for (std::int64_t i = 0; i < n_mine; ++i) {
    const int s = static_cast<int>(i % n_stages);
    mbar_wait(&full[s], static_cast<unsigned>((i / n_stages) & 1));
    const float4* row = stages + std::int64_t(s) * n_vec;
    // Slots past the row end hold -Inf (they change neither the max nor the sum), so the K loads issue
    // together, unpredicated.
    float v[K][4];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      const float4 q = row[j < n_vec ? j : 0];
      const bool in = j < n_vec;
      v[k][0] = in ? q.x : -INFINITY, v[k][1] = in ? q.y : -INFINITY;
      v[k][2] = in ? q.z : -INFINITY, v[k][3] = in ? q.w : -INFINITY;
    }
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < K; ++k) m = fmaxf(m, fmaxf(fmaxf(v[k][0], v[k][1]), fmaxf(v[k][2], v[k][3])));
    m = warp_max(m);
    if (lane == 0) part_max[warp] = m;
    __syncthreads();
    // Every thread has its part of the row in registers: refill the stage with the row n_stages ahead.
    // (part_max / part_sum need no second barrier: a warp rewrites one only after every warp has passed the
    // barrier that follows its last read.)
    if (threadIdx.x == 0 && i + n_stages < n_mine) {
      bulk_load(stages + std::int64_t(s) * n_vec, x + row_of(i + n_stages) * (std::int64_t(n_vec) * 4),
                row_bytes, &full[s]);
    }
    m = warp_max(lane < n_warps ? part_max[lane] : -INFINITY);

    float sum = 0.f;
    if (m != -INFINITY) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float e = exp2_approx((v[k][q] - m) * 1.44269504088896341f);
          sum += e;
          if (!LOG) v[k][q] = e;
        }
      }
    }
    sum = warp_sum(sum);
    if (lane == 0) part_sum[warp] = sum;
    __syncthreads();
    sum = warp_sum(lane < n_warps ? part_sum[lane] : 0.f);

    const float sc = scale<LOG>(Stats{m, sum});
    float4* y = reinterpret_cast<float4*>(out + row_of(i) * (std::int64_t(n_vec) * 4));
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < n_vec) {
        float r[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          // A row of -Inf only (it skipped the exponentials) is NaN, as in finish() and the reference.
          r[q] = m == -INFINITY ? NAN : LOG ? v[k][q] - m - sc : v[k][q] * sc;
        }
        const float4 w = make_float4(r[0], r[1], r[2], r[3]);
        if constexpr (STREAMING) {
          __stcs(y + j, w);
        } else {
          y[j] = w;
        }
      }
    }
  }
}

// Row queue of the dynamically scheduled ring: the next row ticket and the count of finished blocks, both
// zero between launches.
struct RowQueue {
  unsigned long long next;
  unsigned n_finished;
};

// ---- the lean ring: one block-wide merge per row, rows optionally split over a cluster of C blocks (sm_90)

constexpr float kLog2e = 1.44269504088896341f;

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// Every thread of every block of the cluster arrives; release / acquire: shared-memory writes before it are
// visible to the cluster after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}

// Stores the pair (a, b) at `local`'s offset in block `rank` of the cluster and completes its 8 bytes on the
// barrier at `bar`'s offset there.
__device__ __forceinline__ void store_pair_remote(const void* local, const std::uint64_t* bar, unsigned rank,
                                                  float a, float b) {
  asm volatile(
      "{\n.reg .b32 dst, rbar;\n"
      "mapa.shared::cluster.u32 dst, %0, %4;\n"
      "mapa.shared::cluster.u32 rbar, %1, %4;\n"
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [dst], {%2, %3}, [rbar];\n}\n" ::"r"(
          smem_addr(local)),
      "r"(smem_addr(bar)), "f"(a), "f"(b), "r"(rank)
      : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(std::uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// Merges (max, sum) pairs held one per lane, the sum relative to its max (a -Inf max holds a sum of 0, or NaN
// from NaN elements); every lane gets the result.
__device__ __forceinline__ Stats merge_lane_pairs(float m, float s) {
  const float mx = warp_max(m);
  // mx == -Inf: every pair is (-Inf, 0 or NaN), and exp2(-Inf - -Inf) would turn the zeros into NaN.
  const float w = mx == -INFINITY ? s : s * exp2_approx((m - mx) * kLog2e);
  return {mx, warp_sum(w)};
}

// Rows of n_vec float4 streamed through n_stages shared-memory stages by the bulk-copy engine, like
// softmax_rows_bulk_kernel, with one block-wide step per row instead of two and no per-element branches:
//   - each warp takes its max and its sum of exponentials relative to that max (one ex2 per element, kept for
//     the output), and the warps' (max, sum) pairs are merged once, every warp merging all of them (one pair
//     per lane): one __syncthreads per row, and the stage is refilled right after it;
//   - the stage holds K * blockDim.x float4; slots past the slice end are set to -Inf once (the copy engine
//     never writes them), so the K shared-memory loads are unpredicated;
//   - C > 1: a cluster of C blocks shares each row, block `rank` taking float4 [n_vec * rank / C,
//     n_vec * (rank + 1) / C); lane 0 of each warp also stores its pair into the other blocks' `pairs`
//     (st.async, completing on their `peers_in` barrier), so the cluster merges without a cluster barrier.
//     C blocks of 1024 / C threads share an SM with C times fewer bytes each: a block's barrier and merge no
//     longer leave the SM idle.
// The pair buffers and their barriers alternate with the row's parity: a block stores row i + 2's pairs into
// another block only after that block sent all of its row i + 1 pairs, each warp after reading row i's.
// Per element: 8 bytes of HBM traffic, one max, one subtract, two multiplies, one add and one ex2.
template <bool LOG, int K, int C>
__global__ void __launch_bounds__(1024 / C, C)
    softmax_rows_lean_kernel(const float* __restrict__ x, float* __restrict__ out, std::int64_t n_rows,
                             int n_vec, int n_stages, RowQueue* __restrict__ queue) {
  static_assert(C == 1 || C == 2 || C == 4, "clusters of 1, 2 or 4 blocks: at most 32 warp pairs per row");
  extern __shared__ __align__(128) float4 stages[];
  __shared__ __align__(8) std::uint64_t full[kMaxStages];
  __shared__ __align__(8) std::uint64_t peers_in[2];
  __shared__ __align__(8) float2 pairs[2][32];    // [row parity][rank * n_warps + warp]
  __shared__ std::int64_t stage_row[kMaxStages];  // the row a stage holds; -1: no more rows
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  const int stage_vec = K * blockDim.x;
  const unsigned rank = C > 1 ? cluster_rank() : 0u;
  const std::int64_t cl = blockIdx.x / C, n_cl = gridDim.x / C;
  const int lo = static_cast<int>(std::int64_t(n_vec) * rank / C);
  const int n_here = static_cast<int>(std::int64_t(n_vec) * (rank + 1) / C) - lo;
  const std::int64_t row_floats = std::int64_t(n_vec) * 4;
  const unsigned bytes_here = static_cast<unsigned>(n_here) * 16u;
  const unsigned peer_bytes = (C - 1) * n_warps * 8u;  // the other blocks' pairs of one row

  // Thread 0's row sequence. Round k < n_stages is static (row k * n_cl + cl); later rows are cl + k * n_cl
  // without a queue, else taken from the queue in order of request: the ticket for the next one is requested
  // a row ahead, so its latency hides behind a row of work. The sequence only grows, so once it passes the
  // end every later stage is empty too, and no request is left in flight then.
  std::int64_t n_taken = 0, ticket = 0;
  bool queueing = queue != nullptr && std::int64_t(n_stages) * n_cl < n_rows;
  auto take = [&]() -> std::int64_t {
    const std::int64_t k = n_taken++;
    if (queue == nullptr || k < n_stages) {
      const std::int64_t r = cl + k * n_cl;
      return r < n_rows ? r : -1;
    }
    if (!queueing) return -1;
    const std::int64_t r = std::int64_t(n_stages) * n_cl + ticket;
    if (r >= n_rows) {
      queueing = false;
      return -1;
    }
    ticket = static_cast<std::int64_t>(atomicAdd(&queue->next, 1ull));
    return r;
  };
  // Fills stage s with row r (thread 0), or marks it empty: its barrier completes with no bytes.
  auto fill = [&](int s, std::int64_t r) {
    stage_row[s] = r;
    if (r >= 0) {
      bulk_load(stages + s * stage_vec, x + r * row_floats + std::int64_t(lo) * 4, bytes_here, &full[s]);
    } else {
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(&full[s])) : "memory");
    }
  };

  for (int j = n_here + threadIdx.x; j < stage_vec; j += blockDim.x) {
    for (int s = 0; s < n_stages; ++s) {
      stages[s * stage_vec + j] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
  }
  if (threadIdx.x == 0) {
    for (int s = 0; s < n_stages; ++s) mbar_init(&full[s], 1);
    mbar_init(&peers_in[0], 1);
    mbar_init(&peers_in[1], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    if (C > 1 && cl < n_rows) mbar_expect_tx(&peers_in[0], peer_bytes);
    if (queueing) ticket = static_cast<std::int64_t>(atomicAdd(&queue->next, 1ull));
  }
  // Every block's barriers are initialised before any copy completes on them or any pair arrives.
  if constexpr (C > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    for (int s = 0; s < n_stages; ++s) fill(s, take());
  }

  int s = 0;
  unsigned parity = 0;
  for (std::int64_t i = 0;; ++i) {
    mbar_wait(&full[s], parity);
    const std::int64_t row = stage_row[s];
    if (row < 0) break;
    const float4* stage = stages + s * stage_vec;
    float v[K][4];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float4 q = stage[threadIdx.x + k * blockDim.x];
      v[k][0] = q.x, v[k][1] = q.y, v[k][2] = q.z, v[k][3] = q.w;
    }
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < K; ++k) m = fmaxf(m, fmaxf(fmaxf(v[k][0], v[k][1]), fmaxf(v[k][2], v[k][3])));
    m = warp_max(m);
    // A warp of -Inf only takes its exponentials relative to 0 (all 0, or NaN from NaN elements).
    const float off = m == -INFINITY ? 0.f : m;
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float e = exp2_approx((v[k][q] - off) * kLog2e);
        sum += e;
        if (!LOG) v[k][q] = e;
      }
    }
    sum = warp_sum(sum);
    const int b = static_cast<int>(i & 1);
    if (lane == 0) {
      // Row i + 1's pairs can arrive once the other blocks have all of row i's, so thread 0 arms their
      // barrier before it sends its own row i pair (the barrier's row i - 1 phase, which it waited for, is
      // over). The cluster's blocks follow the same static row sequence.
      if (C > 1 && threadIdx.x == 0 && cl + (i + 1) * n_cl < n_rows)
        mbar_expect_tx(&peers_in[b ^ 1], peer_bytes);
      const int slot = static_cast<int>(rank) * n_warps + warp;
      pairs[b][slot] = make_float2(m, sum);
#pragma unroll
      for (int p = 1; p < C; ++p) store_pair_remote(&pairs[b][slot], &peers_in[b], (rank + p) % C, m, sum);
    }
    // The block's pairs are in `pairs`, and every thread holds its part of the stage (and has read its row):
    // refill it.
    __syncthreads();
    if (threadIdx.x == 0) fill(s, take());
    if constexpr (C > 1) mbar_wait<true>(&peers_in[b], static_cast<unsigned>(i >> 1) & 1u);
    const float2 pr = lane < C * n_warps ? pairs[b][lane] : make_float2(-INFINITY, 0.f);
    const Stats st = merge_lane_pairs(pr.x, pr.y);

    // A row of -Inf only is NaN, as in the reference; a row holding +Inf or NaN has a NaN sum.
    float a;
    if constexpr (LOG) {
      a = st.m == -INFINITY ? NAN : logf(st.s);
    } else {
      a = st.m == -INFINITY ? NAN : __fdividef(exp2_approx((m - st.m) * kLog2e), st.s);
    }
    float4* y = reinterpret_cast<float4*>(out + row * row_floats) + lo;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      float r[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) r[q] = LOG ? (v[k][q] - st.m) - a : v[k][q] * a;
      if (j < n_here) y[j] = make_float4(r[0], r[1], r[2], r[3]);
    }
    if (++s == n_stages) s = 0, parity ^= 1u;
  }
  // No block leaves while another may still store into its shared memory.
  if constexpr (C > 1) cluster_sync();
  // The last block to finish resets the queue for the next launch on the stream (every request has been
  // answered: each block stops requesting before it counts itself finished).
  if (queue != nullptr && threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&queue->n_finished, 1u) == gridDim.x - 1) {
      atomicExch(&queue->next, 0ull);
      atomicExch(&queue->n_finished, 0u);
    }
  }
}

// Rows too long for registers: online statistics in one read, then a second read to write.
template <bool LOG, int V>
__global__ void __launch_bounds__(1024)
    softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ out, std::int64_t n_rows,
                        std::int64_t row_len) {
  const std::int64_t n_vec = row_len / V;
  for (std::int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    const float* xr = x + r * row_len;
    Stats st{-INFINITY, 0.f};
    for (std::int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {
      float v[V];
      Vec<V>::load(xr + j * V, v);
#pragma unroll
      for (int q = 0; q < V; ++q) update(st, v[q]);
    }
    st = block_merge(st);
    const float sc = scale<LOG>(st);
    float* yr = out + r * row_len;
    for (std::int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {
      float v[V];
      Vec<V>::load(xr + j * V, v);
#pragma unroll
      for (int q = 0; q < V; ++q) v[q] = finish<LOG>(v[q], st.m, sc);
      Vec<V>::store(yr + j * V, v);
    }
  }
}

// Strided axis: thread per (outer o, inner c); element r of the column at (o * n_axis + r) * n_inner + c.
template <bool LOG>
__global__ void __launch_bounds__(256)
    softmax_cols_kernel(const float* __restrict__ x, float* __restrict__ out, std::int64_t n_outer,
                        std::int64_t n_axis, std::int64_t n_inner) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n_outer * n_inner;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t o = i / n_inner, c = i % n_inner;
    const float* xc = x + o * n_axis * n_inner + c;
    Stats st{-INFINITY, 0.f};
    for (std::int64_t r = 0; r < n_axis; ++r) update(st, __ldg(xc + r * n_inner));
    const float sc = scale<LOG>(st);
    float* yc = out + o * n_axis * n_inner + c;
    for (std::int64_t r = 0; r < n_axis; ++r)
      yc[r * n_inner] = finish<LOG>(__ldg(xc + r * n_inner), st.m, sc);
  }
}

int pow2_at_least(std::int64_t n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// Blocks for `items` equal work items (`per_block` per block per round) on a full wave of resident blocks:
// every block gets the same number of rounds, so the last round is not a partial wave.
template <class Kernel>
int balanced_grid(Kernel* kernel, int threads, std::int64_t items, int per_block = 1) {
  const std::int64_t wave =
      std::int64_t(resident_blocks_per_sm(reinterpret_cast<const void*>(kernel), threads)) *
      current_sm_count() * per_block;
  const std::int64_t rounds = (items + wave - 1) / wave;
  const std::int64_t slots = (items + rounds - 1) / rounds;
  return static_cast<int>(std::max<std::int64_t>(1, (slots + per_block - 1) / per_block));
}

// Rows up to this many bytes are staged in shared memory (two or more blocks per SM).
constexpr std::int64_t kSmemRowBytes = 96 * 1024;
// Rows from this many bytes on, aligned, stream through the bulk-copy ring when three stages fit.
constexpr std::int64_t kBulkMinRowBytes = 16 * 1024;

// Stages of the bulk ring for rows of row_bytes (0: fewer than two fit in one block's shared memory).
int bulk_stages(std::int64_t row_bytes) {
  const std::int64_t avail = device_properties(current_device()).smem_per_block_optin - 1024;
  return static_cast<int>(std::min<std::int64_t>(kMaxStages, std::max<std::int64_t>(avail / row_bytes, 0)));
}

template <bool LOG, bool STREAMING>
void launch_bulk(const float* x, float* out, std::int64_t n_rows, std::int64_t row_len, cudaStream_t stream) {
  const int n_vec = static_cast<int>(row_len / 4);
  const int n_stages = bulk_stages(row_len * 4);
  MT_CHECK(n_stages >= 2 && n_vec <= 8 * 1024, InvalidArgument, "softmax: rows of ", row_len,
           " floats do not fit two stages of the bulk-copy kernel");
  // 4 float4 per thread where a block of 1024 holds the row that way, else 8.
  const int threads = std::clamp(pow2_at_least((n_vec + 3) / 4), 128, 1024);
  const std::size_t smem = static_cast<std::size_t>(n_stages) * n_vec * 16;
  auto launch = [&](auto* kernel) {
    MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const std::int64_t resident =
        std::int64_t(resident_blocks_per_sm(reinterpret_cast<const void*>(kernel), threads, smem)) *
        current_sm_count();
    const int grid = static_cast<int>(std::min<std::int64_t>(n_rows, resident));
    kernel<<<grid, threads, smem, stream>>>(x, out, n_rows, n_vec, n_stages);
  };
  if (n_vec <= 4 * threads) {
    launch(softmax_rows_bulk_kernel<LOG, 4, STREAMING>);
  } else {
    launch(softmax_rows_bulk_kernel<LOG, 8, STREAMING>);
  }
}

// Blocks (C == 1) or clusters of C blocks of `kernel` resident at once with `threads` threads and `smem`
// bytes, cached per kernel, shape and device so that a launch makes no driver queries. Raises the kernel's
// dynamic shared-memory limit to the device's opt-in maximum on first use.
template <class Kernel>
std::int64_t resident_groups(Kernel* kernel, int C, int threads, std::size_t smem) {
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  using Key = std::tuple<const void*, int, std::size_t, int>;
  static std::mutex mutex;
  static std::map<Key, std::int64_t> cache;
  const Key key{reinterpret_cast<const void*>(kernel), threads, smem, device};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  // The dynamic limit plus the kernel's static shared memory may not pass the opt-in maximum.
  cudaFuncAttributes attrs{};
  MT_CUDA_CHECK(cudaFuncGetAttributes(&attrs, kernel));
  MT_CUDA_CHECK(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
      int(device_properties(device).smem_per_block_optin - std::int64_t(attrs.sharedSizeBytes))));
  std::int64_t groups = 0;
  if (C == 1) {
    int blocks = 0;
    MT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
    groups = std::int64_t(blocks) * device_properties(device).sm_count;
  } else {
    const LaunchConfig launch(dim3(C, 1, 1), dim3(threads, 1, 1), smem, nullptr, dim3(C, 1, 1));
    int clusters = 0;
    MT_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.cfg));
    groups = clusters;
  }
  groups = std::max<std::int64_t>(groups, 1);
  std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, groups);
  return groups;
}

// The row queue of `stream` on the current device, or null where the stream is being captured into a CUDA
// graph (a captured launch could later run alongside an eager one on the same stream: they would share the
// queue). One per (device, stream), made zero once; launches on one stream run in order, and each leaves it
// zero for the next. Kept for the life of the process (destroying it at exit would outlive the runtime).
RowQueue* row_queue(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  MT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return nullptr;
  const int device = current_device();
  static std::mutex mutex;
  static auto* queues = new std::map<std::pair<int, cudaStream_t>, Allocation>();
  std::lock_guard<std::mutex> lock(mutex);
  Allocation& a = (*queues)[{device, stream}];
  if (!a) {
    a = cuda_allocator(device).allocate(sizeof(RowQueue), stream);
    MT_CUDA_CHECK(cudaMemsetAsync(a.data(), 0, sizeof(RowQueue), stream));
  }
  return static_cast<RowQueue*>(a.data());
}

// The lean ring over clusters of C blocks: 1024 / C threads at most (C * warps <= 32 pairs per row), 4 float4
// per thread where that holds the slice, else 8; as many stages as fit C blocks per SM (an SM then holds the
// same bytes in flight whatever C), or one block per SM where that leaves fewer than two.
template <bool LOG, int C>
void launch_lean(const float* x, float* out, std::int64_t n_rows, std::int64_t row_len, cudaStream_t stream,
                 bool dynamic) {
  static_assert(C >= 1);
  MT_CHECK(C == 1 || !dynamic, InvalidArgument, "softmax: clusters of blocks take their rows statically");
  const std::int64_t n_vec = row_len / 4;
  const std::int64_t slice = (n_vec + C - 1) / C;
  const int max_threads = 1024 / C;
  const int k = slice <= 4 * max_threads ? 4 : 8;
  const int threads =
      static_cast<int>(std::clamp<std::int64_t>((slice + 32 * k - 1) / (32 * k) * 32, 32, max_threads));
  const std::int64_t stage_bytes = std::int64_t(k) * threads * 16;
  const DeviceProperties& props = device_properties(current_device());
  // Stages for C blocks per SM; where that is fewer than two (long rows), for one block per SM.
  auto stages_in = [&](std::int64_t bytes) {
    return slice <= std::int64_t(k) * threads
               ? static_cast<int>(std::clamp<std::int64_t>((bytes - 2048) / stage_bytes, 0, kMaxStages))
               : 0;
  };
  int n_stages = stages_in(std::min(props.smem_per_block_optin, props.smem_per_sm / C));
  if (n_stages < 2) n_stages = stages_in(props.smem_per_block_optin);
  MT_CHECK(n_stages >= 2, InvalidArgument, "softmax: rows of ", row_len,
           " floats do not fit two stages of the bulk-copy kernel over clusters of ", C);
  const std::size_t smem = static_cast<std::size_t>(n_stages) * stage_bytes;
  auto launch = [&](auto* kernel) {
    const std::int64_t groups = std::min(n_rows, resident_groups(kernel, C, threads, smem));
    const LaunchConfig launch(dim3(static_cast<unsigned>(groups * C), 1, 1), dim3(threads, 1, 1), smem,
                              stream, dim3(C, 1, 1));
    RowQueue* queue = dynamic ? row_queue(stream) : nullptr;
    MT_CUDA_CHECK(
        cudaLaunchKernelEx(&launch.cfg, kernel, x, out, n_rows, static_cast<int>(n_vec), n_stages, queue));
  };
  if (k == 4) {
    launch(softmax_rows_lean_kernel<LOG, 4, C>);
  } else {
    launch(softmax_rows_lean_kernel<LOG, 8, C>);
  }
}

template <bool LOG, int V>
void softmax_rows(SoftmaxKernel which, const float* x, float* out, std::int64_t n_rows, std::int64_t row_len,
                  cudaStream_t stream) {
  const std::int64_t n_vec = row_len / V;
  if (which == SoftmaxKernel::Auto) {
    if (n_vec <= 32 * kCache) {
      which = SoftmaxKernel::RegisterCached;
    } else if (V == 4 && row_len * 4 >= kBulkMinRowBytes && bulk_stages(row_len * 4) >= 3) {
      // Measured on H200 at 16384 x 16384 (medians of 3, same run): BulkLean 0.953 of copy (log 0.951),
      // BulkLeanStatic 0.913, Bulk 0.902, BulkCluster2 0.895, BulkCluster4 0.894. Under ncu the static rings
      // keep the SMs busy 92-93 % of the kernel (blocks with equal row counts finish tens of microseconds
      // apart; relu: 99 %), BulkLean 98 %, with DRAM throughput 80.9 -> 84.0 % of peak. An earlier run: two
      // stages instead of three 0.916 (static), evict-first L2 hints on the loads 0.85-0.88, each block
      // taking a contiguous block of rows 0.88-0.90.
      which = SoftmaxKernel::BulkLean;
    } else if (V == 4 && row_len * 4 <= kSmemRowBytes) {
      // Measured on H200 at 16384 x 16384: single buffer, 3 blocks per SM 0.83 of copy; double-buffered, one
      // block per SM 0.68; row in registers 0.68; two passes 0.67.
      which = SoftmaxKernel::SharedCached;
    } else if (n_vec <= 1024 * kCache) {
      which = SoftmaxKernel::RegisterCached;
    } else {
      which = SoftmaxKernel::TwoPass;
    }
  }
  if (which == SoftmaxKernel::BulkLean || which == SoftmaxKernel::BulkLeanStatic ||
      which == SoftmaxKernel::BulkCluster2 || which == SoftmaxKernel::BulkCluster4) {
    MT_CHECK(V == 4, InvalidArgument,
             "softmax: the bulk-copy kernels need 16-byte aligned rows of a multiple of 4 floats");
    if (which == SoftmaxKernel::BulkLean || which == SoftmaxKernel::BulkLeanStatic) {
      launch_lean<LOG, 1>(x, out, n_rows, row_len, stream, which == SoftmaxKernel::BulkLean);
    } else if (which == SoftmaxKernel::BulkCluster2) {
      launch_lean<LOG, 2>(x, out, n_rows, row_len, stream, false);
    } else {
      launch_lean<LOG, 4>(x, out, n_rows, row_len, stream, false);
    }
    MT_CUDA_CHECK_LAUNCH();
    return;
  }
  if (which == SoftmaxKernel::Bulk || which == SoftmaxKernel::BulkStreaming) {
    MT_CHECK(V == 4, InvalidArgument,
             "softmax: the bulk-copy kernel needs 16-byte aligned rows of a multiple of 4 floats");
    if (which == SoftmaxKernel::Bulk) {
      launch_bulk<LOG, false>(x, out, n_rows, row_len, stream);
    } else {
      launch_bulk<LOG, true>(x, out, n_rows, row_len, stream);
    }
    MT_CUDA_CHECK_LAUNCH();
    return;
  }
  const bool shared = which == SoftmaxKernel::SharedCached || which == SoftmaxKernel::SharedPipelined;
  MT_CHECK(!shared || (V == 4 && row_len * 4 <= kSmemRowBytes), InvalidArgument,
           "softmax: the shared-memory kernel needs aligned rows of at most ", kSmemRowBytes / 4, " floats");
  MT_CHECK(which != SoftmaxKernel::RegisterCached || n_vec <= 1024 * kCache, InvalidArgument,
           "softmax: rows of ", row_len, " floats do not fit in registers");
  if (shared) {
    const bool pipelined = which == SoftmaxKernel::SharedPipelined;
    auto* kernel = pipelined ? softmax_rows_pipelined_kernel<LOG> : softmax_rows_smem_kernel<LOG>;
    const std::size_t smem = static_cast<std::size_t>(row_len) * sizeof(float) * (pipelined ? 2 : 1);
    MT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemRowBytes * 2)));
    const int threads = pipelined ? 1024 : 512;
    const std::int64_t wave =
        std::int64_t(resident_blocks_per_sm(reinterpret_cast<const void*>(kernel), threads, smem)) *
        current_sm_count();
    const std::int64_t rounds = (n_rows + wave - 1) / wave;
    const int grid = static_cast<int>((n_rows + rounds - 1) / rounds);
    kernel<<<grid, threads, smem, stream>>>(x, out, n_rows, row_len);
  } else if (which == SoftmaxKernel::RegisterCached && n_vec <= 32 * kCache) {
    auto* kernel = softmax_rows_cached_kernel<LOG, V, true>;
    const int grid = balanced_grid(kernel, 256, n_rows, 256 / 32);
    kernel<<<grid, 256, 0, stream>>>(x, out, n_rows, row_len);
  } else if (which == SoftmaxKernel::RegisterCached) {
    auto* kernel = softmax_rows_cached_kernel<LOG, V, false>;
    const int threads = std::max(64, pow2_at_least((n_vec + kCache - 1) / kCache));
    const int grid = balanced_grid(kernel, threads, n_rows);
    kernel<<<grid, threads, 0, stream>>>(x, out, n_rows, row_len);
  } else {
    auto* kernel = softmax_rows_kernel<LOG, V>;
    const int grid = balanced_grid(kernel, 1024, n_rows);
    kernel<<<grid, 1024, 0, stream>>>(x, out, n_rows, row_len);
  }
  MT_CUDA_CHECK_LAUNCH();
}

template <bool LOG>
void softmax_any(SoftmaxKernel which, const float* x, float* out, std::int64_t n_outer, std::int64_t n_axis,
                 std::int64_t n_inner, cudaStream_t stream) {
  if (n_inner == 1) {
    const bool vec = n_axis % 4 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
                     reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
    return vec ? softmax_rows<LOG, 4>(which, x, out, n_outer, n_axis, stream)
               : softmax_rows<LOG, 1>(which, x, out, n_outer, n_axis, stream);
  }
  auto* kernel = softmax_cols_kernel<LOG>;
  const int grid = grid_stride_blocks(kernel, 256, n_outer * n_inner, 256);
  kernel<<<grid, 256, 0, stream>>>(x, out, n_outer, n_axis, n_inner);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_softmax(bool log, const float* x, float* out, std::int64_t n_outer, std::int64_t n_axis,
                    std::int64_t n_inner, cudaStream_t stream, SoftmaxKernel which) {
  if (n_outer == 0 || n_axis == 0 || n_inner == 0) return;
  if (log) {
    softmax_any<true>(which, x, out, n_outer, n_axis, n_inner, stream);
  } else {
    softmax_any<false>(which, x, out, n_outer, n_axis, n_inner, stream);
  }
}

}  // namespace mt::detail
