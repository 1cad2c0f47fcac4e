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

#include "minitensor/memory/stream_scratch.h"
#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/functors.h"
#include "minitensor/runtime/detail/device_primitives.cuh"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

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
    cp_async16_whole(row + j, src + j);
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
    cp_async_wait_all();
    __syncthreads();
    softmax_row_in_smem<LOG>(row, n_vec, reinterpret_cast<float4*>(out + r * row_len));
    __syncthreads();  // the row buffer is refilled for the next row
  }
}

// ---- rows streamed through a ring of shared-memory stages by the bulk-copy engine (sm_90)

constexpr int kMaxStages = 8;
constexpr float kLog2e = 1.44269504088896341f;

// Merges (max, sum) pairs held one per lane, the sum relative to its max (a -Inf max holds a sum of 0, or NaN
// from NaN elements); every lane gets the result. warp_max skips NaN maxima; they still make the row NaN
// through the sum.
__device__ __forceinline__ Stats merge_lane_pairs(float m, float s) {
  const float mx = warp_max(m);
  // mx == -Inf: every pair is (-Inf, 0 or NaN), and exp2(-Inf - -Inf) would turn the zeros into NaN.
  const float w = mx == -INFINITY ? s : s * exp2_approx((m - mx) * kLog2e);
  return {mx, warp_sum(w)};
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Arms `bar` for one arrival and `bytes` of bulk copies, then copies [src, src + bytes) into dst in chunks of
// at most 16 KiB, each completing its bytes on `bar`. One thread issues; 16-byte aligned, bytes % 16 == 0.
__device__ __forceinline__ void bulk_load_row(void* dst, const void* src, unsigned bytes,
                                              std::uint64_t* bar) {
  // The stage was last read by ordinary loads (ordered before this by a barrier); the copy engine writes it.
  fence_proxy_async();
  mbar_expect_tx(smem_u32(bar), bytes);
  constexpr unsigned kChunk = 16 * 1024;
  for (unsigned off = 0; off < bytes; off += kChunk) {
    const unsigned size = bytes - off < kChunk ? bytes - off : kChunk;
    bulk_load(smem_u32(static_cast<char*>(dst) + off), static_cast<const char*>(src) + off, size,
              smem_u32(bar));
  }
}
#endif  // __CUDA_ARCH__ >= 900

// Row queue of the dynamically scheduled ring: the next row ticket and the count of finished blocks, both
// zero between launches.
struct RowQueue {
  unsigned long long next;
  unsigned n_finished;
};

// Rows of n_vec float4 streamed through n_stages shared-memory stages by the bulk-copy engine, one block per
// SM keeping n_stages - 1 rows in flight while it computes the current one (thread 0 issues the copies), so
// the block's loads never stop for its arithmetic. One block-wide step per row and no per-element branches:
//   - each warp takes its max and its sum of exponentials relative to that max (one ex2 per element, kept for
//     the output), and the warps' (max, sum) pairs are merged once, every warp merging all of them (one pair
//     per lane): one __syncthreads per row, and the stage is refilled right after it;
//   - the stage holds K * blockDim.x float4; slots past the row end are set to -Inf once (the copy engine
//     never writes them), so the K shared-memory loads are unpredicated.
// The pair buffers alternate with the row's parity: a warp rewrites row i + 2's pairs only after every warp
// has passed the barrier of row i + 1, which follows their reads of row i's.
// Per element: 8 bytes of HBM traffic, one max, one subtract, two multiplies, one add and one ex2.
template <bool LOG, int K>
__global__ void __launch_bounds__(1024, 1)
    softmax_rows_lean_kernel(const float* __restrict__ x, float* __restrict__ out, std::int64_t n_rows,
                             int n_vec, int n_stages, RowQueue* __restrict__ queue) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) float4 stages[];
  __shared__ __align__(8) std::uint64_t full[kMaxStages];
  __shared__ __align__(8) float2 pairs[2][32];    // [row parity][warp]
  __shared__ std::int64_t stage_row[kMaxStages];  // the row a stage holds; -1: no more rows
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  const int stage_vec = K * blockDim.x;
  const std::int64_t row_floats = std::int64_t(n_vec) * 4;
  const unsigned row_bytes = static_cast<unsigned>(n_vec) * 16u;

  // Thread 0's row sequence. Round k < n_stages is static (row k * gridDim.x + blockIdx.x); later rows are
  // blockIdx.x + k * gridDim.x without a queue, else taken from the queue in order of request: the ticket for
  // the next one is requested a row ahead, so its latency hides behind a row of work. The sequence only
  // grows, so once it passes the end every later stage is empty too, and no request is left in flight then.
  const std::int64_t n_blocks = gridDim.x;
  std::int64_t n_taken = 0, ticket = 0;
  bool queueing = queue != nullptr && std::int64_t(n_stages) * n_blocks < n_rows;
  auto take = [&]() -> std::int64_t {
    const std::int64_t k = n_taken++;
    if (queue == nullptr || k < n_stages) {
      const std::int64_t r = blockIdx.x + k * n_blocks;
      return r < n_rows ? r : -1;
    }
    if (!queueing) return -1;
    const std::int64_t r = std::int64_t(n_stages) * n_blocks + ticket;
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
      bulk_load_row(stages + s * stage_vec, x + r * row_floats, row_bytes, &full[s]);
    } else {
      mbar_arrive(smem_u32(&full[s]));
    }
  };

  for (int j = n_vec + threadIdx.x; j < stage_vec; j += blockDim.x) {
    for (int s = 0; s < n_stages; ++s) {
      stages[s * stage_vec + j] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
  }
  if (threadIdx.x == 0) {
    for (int s = 0; s < n_stages; ++s) mbar_init(smem_u32(&full[s]), 1);
    fence_mbar_init();
    if (queueing) ticket = static_cast<std::int64_t>(atomicAdd(&queue->next, 1ull));
  }
  // The barriers are initialised before any copy completes on them.
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int s = 0; s < n_stages; ++s) fill(s, take());
  }

  int s = 0;
  unsigned parity = 0;
  for (std::int64_t i = 0;; ++i) {
    mbar_wait(smem_u32(&full[s]), parity);
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
    if (lane == 0) pairs[b][warp] = make_float2(m, sum);
    // The block's pairs are in `pairs`, and every thread holds its part of the stage (and has read its row):
    // refill it.
    __syncthreads();
    if (threadIdx.x == 0) fill(s, take());
    const float2 pr = lane < n_warps ? pairs[b][lane] : make_float2(-INFINITY, 0.f);
    const Stats st = merge_lane_pairs(pr.x, pr.y);

    // A row of -Inf only is NaN, as in the reference; a row holding +Inf or NaN has a NaN sum.
    float a;
    if constexpr (LOG) {
      a = st.m == -INFINITY ? NAN : logf(st.s);
    } else {
      a = st.m == -INFINITY ? NAN : __fdividef(exp2_approx((m - st.m) * kLog2e), st.s);
    }
    float4* y = reinterpret_cast<float4*>(out + row * row_floats);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      float r[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) r[q] = LOG ? (v[k][q] - st.m) - a : v[k][q] * a;
      if (j < n_vec) y[j] = make_float4(r[0], r[1], r[2], r[3]);
    }
    if (++s == n_stages) s = 0, parity ^= 1u;
  }
  // The last block to finish resets the queue for the next launch on the stream (every request has been
  // answered: each block stops requesting before it counts itself finished).
  if (queue != nullptr && threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&queue->n_finished, 1u) == gridDim.x - 1) {
      atomicExch(&queue->next, 0ull);
      atomicExch(&queue->n_finished, 0u);
    }
  }
#endif  // __CUDA_ARCH__ >= 900
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

// Rows up to this many bytes are staged in shared memory (two or more blocks per SM).
constexpr std::int64_t kSmemRowBytes = 96 * 1024;
// Rows from this many bytes on, aligned, stream through the bulk-copy ring when three stages fit.
constexpr std::int64_t kBulkMinRowBytes = 16 * 1024;

// Stages of the bulk ring for rows of row_bytes (0: fewer than two fit in one block's shared memory).
int bulk_stages(std::int64_t row_bytes) {
  const std::int64_t avail = device_properties(current_device()).smem_per_block_optin - 1024;
  return static_cast<int>(std::min<std::int64_t>(kMaxStages, std::max<std::int64_t>(avail / row_bytes, 0)));
}

// The row queue of `stream` on the current device, made zero once; launches on one stream run in order, and
// each leaves it zero for the next. Null while the stream is being captured into a CUDA graph (a captured
// launch could later run alongside an eager one on the same stream: they would share the queue), so captured
// launches keep the static row order.
RowQueue* row_queue(cudaStream_t stream) {
  ScratchOptions options;
  options.zero_on_allocate = true;
  options.eager_only = true;
  return static_cast<RowQueue*>(
      stream_scratch(ScratchSlot::SoftmaxRowQueue, sizeof(RowQueue), stream, options));
}

// The lean ring: 1024 threads at most, 4 float4 per thread where that holds the row, else 8; as many stages
// as fit one block's shared memory (one block per SM). dynamic: rows from the stream's queue after the first
// round.
template <bool LOG>
void launch_lean(const float* x, float* out, std::int64_t n_rows, std::int64_t row_len, cudaStream_t stream,
                 bool dynamic) {
  const std::int64_t n_vec = row_len / 4;
  constexpr int kMaxThreads = 1024;
  const int k = n_vec <= 4 * kMaxThreads ? 4 : 8;
  const int threads =
      static_cast<int>(std::clamp<std::int64_t>((n_vec + 32 * k - 1) / (32 * k) * 32, 32, kMaxThreads));
  const std::int64_t stage_bytes = std::int64_t(k) * threads * 16;
  const DeviceProperties& props = device_properties(current_device());
  auto stages_in = [&](std::int64_t bytes) {
    return n_vec <= std::int64_t(k) * threads
               ? static_cast<int>(std::clamp<std::int64_t>((bytes - 2048) / stage_bytes, 0, kMaxStages))
               : 0;
  };
  int n_stages = stages_in(std::min(props.smem_per_block_optin, props.smem_per_sm));
  if (n_stages < 2) n_stages = stages_in(props.smem_per_block_optin);
  MT_CHECK(n_stages >= 2, InvalidArgument, "softmax: rows of ", row_len,
           " floats do not fit two stages of the bulk-copy kernel");
  const std::size_t smem = static_cast<std::size_t>(n_stages) * stage_bytes;
  auto launch = [&](auto* kernel) {
    const void* key = reinterpret_cast<const void*>(kernel);
    use_max_dynamic_smem(key);
    const std::int64_t grid = std::min(n_rows, resident_blocks(key, threads, smem));
    RowQueue* queue = dynamic ? row_queue(stream) : nullptr;
    kernel<<<static_cast<unsigned>(grid), threads, smem, stream>>>(x, out, n_rows, static_cast<int>(n_vec),
                                                                   n_stages, queue);
  };
  if (k == 4) {
    launch(softmax_rows_lean_kernel<LOG, 4>);
  } else {
    launch(softmax_rows_lean_kernel<LOG, 8>);
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
      // The ring's loads never stop for the block's arithmetic, and the queue keeps every SM busy to the end
      // of the launch (blocks with equal row counts finish apart): closest to copy bandwidth
      // (bench/ops/DESIGN.md).
      which = SoftmaxKernel::BulkLean;
    } else if (V == 4 && row_len * 4 <= kSmemRowBytes) {
      // One row buffer per block and several blocks per SM: one block's arithmetic overlaps another's loads.
      which = SoftmaxKernel::SharedCached;
    } else if (n_vec <= 1024 * kCache) {
      which = SoftmaxKernel::RegisterCached;
    } else {
      which = SoftmaxKernel::TwoPass;
    }
  }
  if (which == SoftmaxKernel::BulkLean || which == SoftmaxKernel::BulkLeanStatic) {
    MT_CHECK(V == 4, InvalidArgument,
             "softmax: the bulk-copy kernels need 16-byte aligned rows of a multiple of 4 floats");
    launch_lean<LOG>(x, out, n_rows, row_len, stream, which == SoftmaxKernel::BulkLean);
    MT_CUDA_CHECK_LAUNCH();
    return;
  }
  const bool shared = which == SoftmaxKernel::SharedCached;
  MT_CHECK(!shared || (V == 4 && row_len * 4 <= kSmemRowBytes), InvalidArgument,
           "softmax: the shared-memory kernel needs aligned rows of at most ", kSmemRowBytes / 4, " floats");
  MT_CHECK(which != SoftmaxKernel::RegisterCached || n_vec <= 1024 * kCache, InvalidArgument,
           "softmax: rows of ", row_len, " floats do not fit in registers");
  if (shared) {
    auto* kernel = softmax_rows_smem_kernel<LOG>;
    const std::size_t smem = static_cast<std::size_t>(row_len) * sizeof(float);
    MT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemRowBytes * 2)));
    constexpr int threads = 512;
    const int grid = balanced_grid(kernel, threads, n_rows, 1, smem);
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
