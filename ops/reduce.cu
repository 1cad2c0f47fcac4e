// Reduction kernels: sum, mean, max, min, argmax, argmin over a contiguous axis (row case) or a strided one
// (column case). Deterministic: each thread folds a fixed set of elements in a fixed order, and partial
// results meet in fixed-shape trees (warp shuffles, then shared memory); when one row is too long for one
// block (the all-reduction), blocks write partials and a second kernel reduces them. No atomics.
//
// Accuracy: sums accumulate in float64 (one cvt + one DADD per element; an H100 SM converts 16 and adds 64
// per clock, while HBM delivers ~4 floats per SM per clock), so the sum of 2^28 floats is the float64 sum
// rounded. Napkin maths: 4 bytes read per element, a few bytes written per row: copy-class bandwidth is the
// target.
#include <cstdint>
#include <limits>

#include "minitensor/memory/stream_scratch.h"
#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/functors.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll =
    4;  // 16-byte loads in flight per thread in the row kernel (rows in the column kernel)

// ---- reducers: an accumulator type, its identity, how an element enters, how two accumulators meet, and how
// the result is stored. `combine` is order-independent for max/min/arg (see fn::max_combine), associative up
// to rounding for sums.
struct SumR {
  using Acc = double;
  static __device__ Acc identity() { return 0.0; }
  static __device__ Acc from(float v, std::int64_t) { return v; }
  static __device__ Acc combine(Acc a, Acc b) { return a + b; }
  static __device__ void store(void* out, std::int64_t i, Acc a, double) {
    static_cast<float*>(out)[i] = float(a);
  }
};
struct MeanR : SumR {
  static __device__ void store(void* out, std::int64_t i, Acc a, double count) {
    static_cast<float*>(out)[i] = float(a / count);
  }
};
struct MaxR {
  using Acc = float;
  static __device__ Acc identity() { return -INFINITY; }
  static __device__ Acc from(float v, std::int64_t) { return v; }
  static __device__ Acc combine(Acc a, Acc b) { return fn::max_combine(a, b); }
  static __device__ void store(void* out, std::int64_t i, Acc a, double) { static_cast<float*>(out)[i] = a; }
};
struct MinR {
  using Acc = float;
  static __device__ Acc identity() { return INFINITY; }
  static __device__ Acc from(float v, std::int64_t) { return v; }
  static __device__ Acc combine(Acc a, Acc b) { return fn::min_combine(a, b); }
  static __device__ void store(void* out, std::int64_t i, Acc a, double) { static_cast<float*>(out)[i] = a; }
};
struct ArgAcc {
  float v;
  long long i;
};
template <bool MAX>
struct ArgR {
  using Acc = ArgAcc;
  static constexpr int kArg = MAX ? 1 : -1;
  static constexpr long long kNone = std::numeric_limits<long long>::max();  // the identity's index
  static __device__ Acc identity() { return {MAX ? -INFINITY : INFINITY, kNone}; }
  static __device__ Acc from(float v, std::int64_t i) { return {v, i}; }
  static __device__ Acc combine(Acc a, Acc b) {
    return (MAX ? fn::argmax_wins(a.v, a.i, b.v, b.i) : fn::argmin_wins(a.v, a.i, b.v, b.i)) ? a : b;
  }
  static __device__ void store(void* out, std::int64_t i, Acc a, double) {
    static_cast<std::int32_t*>(out)[i] = static_cast<std::int32_t>(a.i);
  }
};

// Folds element (v, i) into `acc`, where i is above every index already folded into acc (a thread walks its
// elements in index order). For the arg-reducers that turns the winner test into one comparison: a later
// element never wins a tie, and a NaN wins only over a number.
template <class R>
__device__ __forceinline__ void fold_later(typename R::Acc& acc, float v, std::int64_t i) {
  if constexpr (requires { R::kArg; }) {
    const bool wins = (acc.v == acc.v && (R::kArg > 0 ? !(v <= acc.v) : !(v >= acc.v))) || acc.i == R::kNone;
    if (wins) acc = {v, i};
  } else {
    acc = R::combine(acc, R::from(v, i));
  }
}

__device__ __forceinline__ double shfl_down(double v, int d) {
  return __shfl_down_sync(0xffffffffu, v, d);
}
__device__ __forceinline__ float shfl_down(float v, int d) {
  return __shfl_down_sync(0xffffffffu, v, d);
}
__device__ __forceinline__ ArgAcc shfl_down(ArgAcc a, int d) {
  return {__shfl_down_sync(0xffffffffu, a.v, d), __shfl_down_sync(0xffffffffu, a.i, d)};
}

// Lane 0 gets the warp's result.
template <class R>
__device__ __forceinline__ typename R::Acc warp_reduce(typename R::Acc a) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) a = R::combine(a, shfl_down(a, d));
  return a;
}

// Thread 0 gets the block's result. Every thread of the block must call it.
template <class R>
__device__ typename R::Acc block_reduce(typename R::Acc a) {
  __shared__ typename R::Acc partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  a = warp_reduce<R>(a);
  if (lane == 0) partial[warp] = a;
  __syncthreads();
  if (warp == 0) {
    a = lane < int(blockDim.x / 32) ? partial[lane] : R::identity();
    a = warp_reduce<R>(a);
  }
  __syncthreads();  // `partial` is reused by the caller's next row
  return a;
}

// Folds x[begin, end) of one row into `acc`, this thread being `t` of a group of `g` threads. The pointer is
// peeled to a 16-byte boundary first (scalar head), then float4 loads, then a scalar tail.
template <class R>
__device__ __forceinline__ void fold_segment(const float* __restrict__ row, std::int64_t begin,
                                             std::int64_t end, int t, int g, typename R::Acc& acc) {
  const std::int64_t len = end - begin;
  const float* p = row + begin;
  const std::int64_t head =
      std::min<std::int64_t>(len, ((16 - reinterpret_cast<std::uintptr_t>(p) % 16) % 16) / sizeof(float));
  const std::int64_t n_vec = (len - head) / 4;
  const std::int64_t tail = head + 4 * n_vec;
  if (t < head) fold_later<R>(acc, p[t], begin + t);
  const float4* pv = reinterpret_cast<const float4*>(p + head);
  for (std::int64_t j0 = t; j0 < n_vec; j0 += std::int64_t(g) * kUnroll) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t j = j0 + std::int64_t(u) * g;
      if (j < n_vec) v[u] = __ldg(pv + j);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t j = j0 + std::int64_t(u) * g;
      if (j < n_vec) {
        const std::int64_t e = begin + head + 4 * j;
        fold_later<R>(acc, v[u].x, e);
        fold_later<R>(acc, v[u].y, e + 1);
        fold_later<R>(acc, v[u].z, e + 2);
        fold_later<R>(acc, v[u].w, e + 3);
      }
    }
  }
  if (t < len - tail) fold_later<R>(acc, p[tail + t], begin + tail + t);
}

// Row case, one warp per row (short rows): 8 rows per block, grid-stride over rows.
template <class R>
__global__ void __launch_bounds__(kThreads)
    reduce_rows_warp_kernel(const float* __restrict__ x, StridedLayout rows, std::int64_t n_rows,
                            std::int64_t row_len, void* out, double count) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps_per_grid = std::int64_t(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t r = blockIdx.x * std::int64_t(blockDim.x / 32) + threadIdx.x / 32; r < n_rows;
       r += warps_per_grid) {
    typename R::Acc acc = R::identity();
    fold_segment<R>(x + rows.offset(r), 0, row_len, lane, 32, acc);
    acc = warp_reduce<R>(acc);
    if (lane == 0) R::store(out, r, acc, count);
  }
}

// Row case, one block per (row, split) item: split s covers [s * chunk, (s + 1) * chunk) of its row. With one
// split the block stores the result; otherwise it writes partial[row * n_splits + s] for the second pass.
template <class R>
__global__ void __launch_bounds__(kThreads)
    reduce_rows_block_kernel(const float* __restrict__ x, StridedLayout rows, std::int64_t n_rows,
                             std::int64_t row_len, std::int64_t n_splits, std::int64_t chunk,
                             typename R::Acc* __restrict__ partial, void* out, double count) {
  for (std::int64_t item = blockIdx.x; item < n_rows * n_splits; item += gridDim.x) {
    const std::int64_t r = item / n_splits, s = item % n_splits;
    const std::int64_t begin = s * chunk, end = std::min(row_len, begin + chunk);
    typename R::Acc acc = R::identity();
    fold_segment<R>(x + rows.offset(r), begin, end, threadIdx.x, blockDim.x, acc);
    acc = block_reduce<R>(acc);
    if (threadIdx.x == 0) {
      if (n_splits == 1) {
        R::store(out, r, acc, count);
      } else {
        partial[item] = acc;
      }
    }
  }
}

// Second pass of the row case: one block per row over its n_splits partials, in index order per thread.
template <class R>
__global__ void __launch_bounds__(kThreads)
    reduce_partials_kernel(const typename R::Acc* __restrict__ partial, std::int64_t n_rows,
                           std::int64_t n_splits, void* out, double count) {
  for (std::int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    typename R::Acc acc = R::identity();
    for (std::int64_t s = threadIdx.x; s < n_splits; s += blockDim.x)
      acc = R::combine(acc, partial[r * n_splits + s]);
    acc = block_reduce<R>(acc);
    if (threadIdx.x == 0) R::store(out, r, acc, count);
  }
}

// Column case. Block = 32 lanes x 8 warps over a tile of 32 * V columns: lane l owns columns c0 + V*l ... +
// V-1 (a warp reads 32 * V consecutive floats of one row: fully coalesced), warp w folds rows w, w + 8, ...
// of the block's split, kUnroll rows in flight. The 8 warps then meet in shared memory, in warp order. Grid:
// x = column tiles, y = splits of the reduced extent, z = outer index (grid-stride).
constexpr int kColWarps = 8;

template <class R, int V>
__global__ void __launch_bounds__(32 * kColWarps)
    reduce_cols_kernel(const float* __restrict__ x, StridedLayout outer, std::int64_t n_outer,
                       std::int64_t n_reduce, std::int64_t r_stride, std::int64_t n_cols,
                       std::int64_t rows_per_split, typename R::Acc* __restrict__ partial, void* out,
                       double count) {
  using Acc = typename R::Acc;
  __shared__ Acc tile[kColWarps][32 * V];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const std::int64_t c = (blockIdx.x * std::int64_t(32) + lane) * V;
  const std::int64_t n_splits = gridDim.y, s = blockIdx.y;
  const std::int64_t r_begin = s * rows_per_split, r_end = std::min(n_reduce, r_begin + rows_per_split);
  for (std::int64_t o = blockIdx.z; o < n_outer; o += gridDim.z) {
    const float* base = x + outer.offset(o) + c;
    Acc acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = R::identity();
    if (c < n_cols) {
      for (std::int64_t r0 = r_begin + warp; r0 < r_end; r0 += kColWarps * kUnroll) {
        float v[kUnroll][V];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const std::int64_t r = r0 + u * kColWarps;
          if (r < r_end) {
            if constexpr (V == 4) {
              const float4 q = __ldg(reinterpret_cast<const float4*>(base + r * r_stride));
              v[u][0] = q.x, v[u][1] = q.y, v[u][2] = q.z, v[u][3] = q.w;
            } else {
              v[u][0] = __ldg(base + r * r_stride);
            }
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const std::int64_t r = r0 + u * kColWarps;
          if (r < r_end) {
#pragma unroll
            for (int k = 0; k < V; ++k) acc[k] = R::combine(acc[k], R::from(v[u][k], r));
          }
        }
      }
    }
#pragma unroll
    for (int k = 0; k < V; ++k) tile[warp][lane * V + k] = acc[k];
    __syncthreads();
    if (warp == 0 && c < n_cols) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        Acc a = tile[0][lane * V + k];
        for (int w = 1; w < kColWarps; ++w) a = R::combine(a, tile[w][lane * V + k]);
        if (n_splits == 1) {
          R::store(out, o * n_cols + c + k, a, count);
        } else {
          partial[(o * n_splits + s) * n_cols + c + k] = a;
        }
      }
    }
    __syncthreads();
  }
}

// Second pass of the column case: thread per (outer, column), over the splits in order.
template <class R>
__global__ void __launch_bounds__(kThreads)
    reduce_cols_partials_kernel(const typename R::Acc* __restrict__ partial, std::int64_t n_outer,
                                std::int64_t n_splits, std::int64_t n_cols, void* out, double count) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n_outer * n_cols;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t o = i / n_cols, c = i % n_cols;
    typename R::Acc a = R::identity();
    for (std::int64_t s = 0; s < n_splits; ++s) a = R::combine(a, partial[(o * n_splits + s) * n_cols + c]);
    R::store(out, i, a, count);
  }
}

// ---- launchers

// The partials of two-pass reductions: the stream's ReducePartials scratch (memory/stream_scratch.h), at
// least 64 KiB, so that a reduction allocates nothing in the steady state (the benchmark and CUDA-graph
// capture rely on it). Callers hold a StreamScratchLock until both passes are enqueued: a concurrent grow on
// the same stream cannot release the buffer between pointer and launch.
template <class Acc>
Acc* partials(std::size_t bytes, cudaStream_t stream) {
  ScratchOptions options;
  options.min_bytes = std::size_t{1} << 16;
  return static_cast<Acc*>(stream_scratch(ScratchSlot::ReducePartials, bytes, stream, options));
}

template <class R>
void reduce_rows(const float* x, const StridedLayout& rows, std::int64_t n_rows, std::int64_t row_len,
                 void* out, double count, cudaStream_t stream, bool allow_split) {
  // Short rows: a warp each. A block per row from 4096 elements (64 float4 per thread in a warp would leave
  // too few warps busy when rows are few).
  if (row_len < 4096) {
    auto* kernel = reduce_rows_warp_kernel<R>;
    constexpr int warps = kThreads / 32;
    const int grid = balanced_grid(kernel, kThreads, n_rows, warps);
    kernel<<<grid, kThreads, 0, stream>>>(x, rows, n_rows, row_len, out, count);
    MT_CUDA_CHECK_LAUNCH();
    return;
  }
  auto* kernel = reduce_rows_block_kernel<R>;
  const std::int64_t wave = resident_blocks(reinterpret_cast<const void*>(kernel), kThreads);
  // Split rows when there are fewer rows than resident blocks, keeping >= 8192 elements per split; chunks are
  // multiples of 4 floats so that every split of an aligned row starts aligned.
  std::int64_t n_splits = 1;
  if (n_rows < wave && allow_split)
    n_splits = std::min((wave + n_rows - 1) / n_rows, std::max<std::int64_t>(1, row_len / 8192));
  std::int64_t chunk = (row_len + n_splits - 1) / n_splits;
  chunk = (chunk + 3) / 4 * 4;
  n_splits = (row_len + chunk - 1) / chunk;
  const std::int64_t items = n_rows * n_splits;
  const int grid = balanced_grid(items, wave);
  const StreamScratchLock lock;
  auto* partial = partials<typename R::Acc>(n_splits > 1 ? sizeof(typename R::Acc) * items : 0, stream);
  kernel<<<grid, kThreads, 0, stream>>>(x, rows, n_rows, row_len, n_splits, chunk, partial, out, count);
  MT_CUDA_CHECK_LAUNCH();
  if (n_splits > 1) {
    auto* second = reduce_partials_kernel<R>;
    const int grid2 = grid_stride_blocks(second, kThreads, n_rows, 1);
    second<<<grid2, kThreads, 0, stream>>>(partial, n_rows, n_splits, out, count);
    MT_CUDA_CHECK_LAUNCH();
  }
}

template <class R>
void reduce_cols(const float* x, const StridedLayout& outer, std::int64_t n_outer, std::int64_t n_reduce,
                 std::int64_t r_stride, std::int64_t n_cols, void* out, double count, cudaStream_t stream,
                 bool allow_split) {
  // 16-byte loads when every row of every outer slice starts 16-byte aligned.
  bool vec = n_cols % 4 == 0 && r_stride % 4 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
  for (int d = 0; d < outer.rank; ++d) vec = vec && (outer.shape[d] == 1 || outer.stride[d] % 4 == 0);
  auto launch = [&](auto* kernel, int v) {
    constexpr int threads = 32 * kColWarps;
    const std::int64_t tiles = (n_cols + 32 * v - 1) / (32 * v);
    const std::int64_t z = std::min<std::int64_t>(n_outer, 65535);
    const std::int64_t wave = resident_blocks(reinterpret_cast<const void*>(kernel), threads);
    // Split the reduced extent until the grid fills the device, keeping >= 64 rows per split.
    std::int64_t n_splits = std::max<std::int64_t>(1, wave / std::max<std::int64_t>(1, tiles * z));
    n_splits = std::min(n_splits, std::max<std::int64_t>(1, n_reduce / 64));
    n_splits = allow_split ? std::min<std::int64_t>(n_splits, 65535) : 1;
    const std::int64_t rows_per_split = (n_reduce + n_splits - 1) / n_splits;
    n_splits = (n_reduce + rows_per_split - 1) / rows_per_split;
    MT_CHECK(tiles <= 0x7fffffff, InvalidArgument, "reduce: ", n_cols, " columns are too many");
    const StreamScratchLock lock;
    auto* partial = partials<typename R::Acc>(
        n_splits > 1 ? sizeof(typename R::Acc) * n_outer * n_splits * n_cols : 0, stream);
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(n_splits), static_cast<unsigned>(z));
    kernel<<<grid, threads, 0, stream>>>(x, outer, n_outer, n_reduce, r_stride, n_cols, rows_per_split,
                                         partial, out, count);
    MT_CUDA_CHECK_LAUNCH();
    if (n_splits > 1) {
      auto* second = reduce_cols_partials_kernel<R>;
      const int grid2 = grid_stride_blocks(second, kThreads, n_outer * n_cols, kThreads);
      second<<<grid2, kThreads, 0, stream>>>(partial, n_outer, n_splits, n_cols, out, count);
      MT_CUDA_CHECK_LAUNCH();
    }
  };
  if (vec) {
    launch(reduce_cols_kernel<R, 4>, 4);
  } else {
    launch(reduce_cols_kernel<R, 1>, 1);
  }
}

template <class Body>
void with_reducer(ReduceOp op, Body&& body) {
  switch (op) {
    case ReduceOp::Sum:
      return body(SumR{});
    case ReduceOp::Mean:
      return body(MeanR{});
    case ReduceOp::Max:
      return body(MaxR{});
    case ReduceOp::Min:
      return body(MinR{});
    case ReduceOp::ArgMax:
      return body(ArgR<true>{});
    case ReduceOp::ArgMin:
      return body(ArgR<false>{});
  }
  MT_THROW(InvalidArgument, "reduce: unknown op ", static_cast<int>(op));
}

}  // namespace

void launch_reduce_rows(ReduceOp op, const float* x, const StridedLayout& rows, std::int64_t n_rows,
                        std::int64_t row_len, void* out, cudaStream_t stream, bool allow_split) {
  if (n_rows == 0) return;
  with_reducer(op, [&](auto r) {
    reduce_rows<decltype(r)>(x, rows, n_rows, row_len, out, static_cast<double>(row_len), stream,
                             allow_split);
  });
}

void launch_reduce_cols(ReduceOp op, const float* x, const StridedLayout& outer, std::int64_t n_outer,
                        std::int64_t n_reduce, std::int64_t r_stride, std::int64_t n_cols, void* out,
                        cudaStream_t stream, bool allow_split) {
  if (n_outer == 0 || n_cols == 0) return;
  with_reducer(op, [&](auto r) {
    reduce_cols<decltype(r)>(x, outer, n_outer, n_reduce, r_stride, n_cols, out,
                             static_cast<double>(n_reduce), stream, allow_split);
  });
}

}  // namespace mt::detail
