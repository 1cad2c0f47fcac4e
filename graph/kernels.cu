// Reductions and softmax over the middle extent of a contiguous (outer, n, inner) float32 tensor.
//
// Napkin maths: both are bandwidth bound. Reduce reads 4 B per input element and writes 4 B per output;
// softmax reads a row twice (the second read mostly hits L2/L1 for rows up to a few hundred KB) and writes it
// once: ~12 B per element, no FLOP worth counting.
#include <cfloat>
#include <cmath>

#include "graph/kernels.h"
#include "runtime/error.h"

namespace mt::detail {

namespace {

constexpr int kRowThreads = 256;

// (max, scaled sum) pairs of the online softmax, merged exactly: S = s1 e^(m1-M) + s2 e^(m2-M).
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  if (a.m != a.m || b.m != b.m) return {NAN, NAN};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// A warp shuffle of any 4-byte-multiple struct, word by word (bit-exact).
template <class T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask) {
  static_assert(sizeof(T) % 4 == 0, "shuffled state must be whole 32-bit words");
  T out;
  const auto* pv = reinterpret_cast<const unsigned*>(&v);
  auto* po = reinterpret_cast<unsigned*>(&out);
  for (int k = 0; k < static_cast<int>(sizeof(T) / 4); ++k)
    po[k] = __shfl_xor_sync(0xffffffffu, pv[k], lane_mask);
  return out;
}

template <class T, class F>
__device__ T block_reduce(T v, T identity, F f) {  // identity: f(identity, x) == x
  __shared__ T shared[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    v = f(v, shfl_xor(v, o));
  }
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int n_warps = (blockDim.x + 31) >> 5;
  if (warp == 0) {
    v = lane < n_warps ? shared[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) {
      v = f(v, shfl_xor(v, o));
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  v = shared[0];
  __syncthreads();  // shared[] may be reused by a following call
  return v;
}

// One block per row (inner == 1): online max/sum in one read, then one read + one write.
template <bool LOG>
__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, std::int64_t outer,
                                    std::int64_t n) {
  for (std::int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const float* xr = x + row * n;
    float* yr = y + row * n;
    MaxSum acc{-INFINITY, 0.f};
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) acc = combine(acc, MaxSum{xr[j], 1.f});
    acc = block_reduce(acc, MaxSum{-INFINITY, 0.f}, [](MaxSum a, MaxSum b) { return combine(a, b); });
    const float m = acc.m, inv = 1.f / acc.s, log_s = logf(acc.s);
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float v = xr[j] - m;
      yr[j] = LOG ? v - log_s : expf(v) * inv;
    }
  }
}

// One thread per (outer, inner) pair, walking n with stride inner (coalesced across inner).
template <bool LOG>
__global__ void softmax_strided_kernel(const float* __restrict__ x, float* __restrict__ y, std::int64_t outer,
                                       std::int64_t n, std::int64_t inner) {
  const std::int64_t total = outer * inner;
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < total;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t o = t / inner, i = t % inner;
    const float* xr = x + o * n * inner + i;
    float* yr = y + o * n * inner + i;
    MaxSum acc{-INFINITY, 0.f};
    for (std::int64_t j = 0; j < n; ++j) acc = combine(acc, MaxSum{xr[j * inner], 1.f});
    const float inv = 1.f / acc.s, log_s = logf(acc.s);
    for (std::int64_t j = 0; j < n; ++j) {
      const float v = xr[j * inner] - acc.m;
      yr[j * inner] = LOG ? v - log_s : expf(v) * inv;
    }
  }
}

// Reduction state: sums in double (accurate for long rows), extrema with the first index reaching them. NaN
// wins for max/min and their arg forms (the first NaN).
struct Acc {
  double sum;
  float val;
  int idx;
};

template <int OP>  // ReduceOp as int
__device__ __forceinline__ Acc acc_init() {
  if (OP == int(ReduceOp::Max) || OP == int(ReduceOp::ArgMax)) return {0.0, -INFINITY, 0x7fffffff};
  if (OP == int(ReduceOp::Min) || OP == int(ReduceOp::ArgMin)) return {0.0, INFINITY, 0x7fffffff};
  return {0.0, 0.f, 0x7fffffff};
}

template <int OP>
__device__ __forceinline__ Acc acc_merge(Acc a, Acc b) {
  if (OP == int(ReduceOp::Sum) || OP == int(ReduceOp::Mean)) return {a.sum + b.sum, 0.f, 0};
  const bool a_nan = a.val != a.val, b_nan = b.val != b.val;
  if (a_nan || b_nan) {
    if (a_nan && b_nan) return a.idx <= b.idx ? a : b;
    return a_nan ? a : b;
  }
  const bool is_max = OP == int(ReduceOp::Max) || OP == int(ReduceOp::ArgMax);
  if (a.val == b.val) return a.idx <= b.idx ? a : b;
  return (is_max ? a.val > b.val : a.val < b.val) ? a : b;
}

template <int OP>
__device__ __forceinline__ void acc_store(Acc a, void* out, std::int64_t k, std::int64_t n) {
  if (OP == int(ReduceOp::Sum))
    static_cast<float*>(out)[k] = static_cast<float>(a.sum);
  else if (OP == int(ReduceOp::Mean))
    static_cast<float*>(out)[k] = static_cast<float>(a.sum / double(n));
  else if (OP == int(ReduceOp::Max) || OP == int(ReduceOp::Min))
    static_cast<float*>(out)[k] = a.val;
  else
    static_cast<int*>(out)[k] = a.idx == 0x7fffffff ? 0 : a.idx;
}

template <int OP>
__device__ __forceinline__ Acc acc_of(float v, std::int64_t j) {
  if (OP == int(ReduceOp::Sum) || OP == int(ReduceOp::Mean)) return {double(v), 0.f, 0};
  return {0.0, v, static_cast<int>(j)};
}

template <int OP>
__global__ void reduce_rows_kernel(const float* __restrict__ x, void* out, std::int64_t outer,
                                   std::int64_t n) {
  for (std::int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const float* xr = x + row * n;
    Acc acc = acc_init<OP>();
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) acc = acc_merge<OP>(acc, acc_of<OP>(xr[j], j));
    acc = block_reduce(acc, acc_init<OP>(), [](Acc a, Acc b) { return acc_merge<OP>(a, b); });
    if (threadIdx.x == 0) acc_store<OP>(acc, out, row, n);
  }
}

template <int OP>
__global__ void reduce_strided_kernel(const float* __restrict__ x, void* out, std::int64_t outer,
                                      std::int64_t n, std::int64_t inner) {
  const std::int64_t total = outer * inner;
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < total;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t o = t / inner, i = t % inner;
    const float* xr = x + o * n * inner + i;
    Acc acc = acc_init<OP>();
    for (std::int64_t j = 0; j < n; ++j) acc = acc_merge<OP>(acc, acc_of<OP>(xr[j * inner], j));
    acc_store<OP>(acc, out, t, n);
  }
}

int blocks_for(std::int64_t items, int per_block) {
  const std::int64_t b = (items + per_block - 1) / per_block;
  return static_cast<int>(b < 1 ? 1 : (b > (1 << 20) ? (1 << 20) : b));
}

template <int OP>
void reduce_as(const float* x, void* out, std::int64_t outer, std::int64_t n, std::int64_t inner,
               cudaStream_t stream) {
  if (inner == 1) {
    reduce_rows_kernel<OP><<<blocks_for(outer, 1), kRowThreads, 0, stream>>>(x, out, outer, n);
  } else {
    reduce_strided_kernel<OP><<<blocks_for(outer * inner, 256), 256, 0, stream>>>(x, out, outer, n, inner);
  }
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_softmax(const float* x, float* y, std::int64_t outer, std::int64_t n, std::int64_t inner,
                    bool log, cudaStream_t stream) {
  if (outer * n * inner == 0) return;
  if (inner == 1) {
    const int threads = n >= 1024 ? 256 : 128;
    if (log)
      softmax_rows_kernel<true><<<blocks_for(outer, 1), threads, 0, stream>>>(x, y, outer, n);
    else
      softmax_rows_kernel<false><<<blocks_for(outer, 1), threads, 0, stream>>>(x, y, outer, n);
  } else {
    if (log)
      softmax_strided_kernel<true><<<blocks_for(outer * inner, 256), 256, 0, stream>>>(x, y, outer, n, inner);
    else
      softmax_strided_kernel<false>
          <<<blocks_for(outer * inner, 256), 256, 0, stream>>>(x, y, outer, n, inner);
  }
  MT_CUDA_CHECK_LAUNCH();
}

void launch_reduce(ReduceOp op, const float* x, void* out, std::int64_t outer, std::int64_t n,
                   std::int64_t inner, cudaStream_t stream) {
  if (outer * inner == 0) return;
  switch (op) {
    case ReduceOp::Sum:
      return reduce_as<int(ReduceOp::Sum)>(x, out, outer, n, inner, stream);
    case ReduceOp::Mean:
      return reduce_as<int(ReduceOp::Mean)>(x, out, outer, n, inner, stream);
    case ReduceOp::Max:
      return reduce_as<int(ReduceOp::Max)>(x, out, outer, n, inner, stream);
    case ReduceOp::Min:
      return reduce_as<int(ReduceOp::Min)>(x, out, outer, n, inner, stream);
    case ReduceOp::ArgMax:
      return reduce_as<int(ReduceOp::ArgMax)>(x, out, outer, n, inner, stream);
    case ReduceOp::ArgMin:
      return reduce_as<int(ReduceOp::ArgMin)>(x, out, outer, n, inner, stream);
  }
}

}  // namespace mt::detail
