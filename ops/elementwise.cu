// Elementwise kernels: one generic map over one or two inputs, instantiated per op with the math of
// ops/functors.h, in two shapes:
//   - contiguous: 16-byte packs (4 floats / 4 int32 / 16 uint8) with a scalar prologue that brings the output
//     to a 128-byte boundary (so that a warp's 512-byte pack access covers whole cache lines, never a partial
//     line at each end) and a scalar epilogue for the remainder. An input with the output's misalignment
//     modulo 16 is read in packs too; one with another misalignment is read as scalars (still coalesced:
//     consecutive threads, consecutive addresses); a broadcast scalar input is read once.
//   - strided: N-d index arithmetic over the operands' jointly coalesced layouts (broadcast = stride 0).
//
// Napkin maths (float32): a unary op moves 8 bytes per element, a binary op 12. The heaviest math here (gelu,
// pow) costs ~20-40 instructions per element, far below what an H100 issues per byte of HBM bandwidth, so the
// target is the device's copy bandwidth.
#include <cstdint>
#include <type_traits>

#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/functors.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail {
namespace {

constexpr int kThreads = 256;
// The output is brought to this boundary by the scalar prologue: one cache line.
constexpr int kLineBytes = 128;

// How the contiguous kernel walks the packs: UNROLL 16-byte packs per thread, all loaded before the first
// store (UNROLL * inputs independent loads in flight per thread), one block per 256 * UNROLL packs and one
// step per thread, the hardware scheduler handing out blocks (an SM that runs ahead takes more of them). A
// block's loads fall in one short run per operand, where a grid-stride loop spreads a thread's loads
// megabytes apart: fewer DRAM pages open at once beats more bytes in flight per thread (bench/ops/TRIED.md).
// Unary ops take 2 packs, binary 4.
template <int UNROLL>
struct Schedule {
  static constexpr int kUnroll = UNROLL;
};
using UnarySchedule = Schedule<2>;
using BinarySchedule = Schedule<4>;
template <int N>
using DefaultSchedule = std::conditional_t<N == 1, UnarySchedule, BinarySchedule>;

template <class T>
union Pack {
  static constexpr int V = 16 / sizeof(T);
  uint4 raw;
  T v[V];
};

// How the contiguous kernel reads an input.
enum Access : int {
  kVec = 0,        // 16-byte packs (same misalignment as the output)
  kUnaligned = 1,  // scalars (another misalignment)
  kBcast = 2,      // one value for every element (stride 0 everywhere)
};

template <class T, int N>
struct Inputs {
  const T* p[N];
};
template <int N>
struct Layouts {
  StridedLayout l[N];
};

// ---- the ops, as functors over the shared math
template <class T, UnaryOp OP>
struct UnaryF {
  __device__ __forceinline__ T operator()(T x) const {
    if constexpr (OP == UnaryOp::Neg) return fn::neg(x);
    if constexpr (OP == UnaryOp::Abs) return fn::abs(x);
    if constexpr (OP == UnaryOp::Relu) return fn::relu(x);
    if constexpr (OP == UnaryOp::Square) return fn::square(x);
    if constexpr (OP == UnaryOp::Sigmoid) return fn::sigmoid(x);
    if constexpr (OP == UnaryOp::Tanh) return fn::tanh(x);
    if constexpr (OP == UnaryOp::Exp) return fn::exp(x);
    if constexpr (OP == UnaryOp::Log) return fn::log(x);
    if constexpr (OP == UnaryOp::Sqrt) return fn::sqrt(x);
    if constexpr (OP == UnaryOp::Rsqrt) return fn::rsqrt(x);
    if constexpr (OP == UnaryOp::Gelu) return fn::gelu(x);
    if constexpr (OP == UnaryOp::GeluTanh) return fn::gelu_tanh(x);
    if constexpr (OP == UnaryOp::Reciprocal) return fn::reciprocal(x);
  }
};

template <class T, BinaryOp OP>
struct BinaryF {
  __device__ __forceinline__ T operator()(T a, T b) const {
    if constexpr (OP == BinaryOp::Add) return fn::add(a, b);
    if constexpr (OP == BinaryOp::Sub) return fn::sub(a, b);
    if constexpr (OP == BinaryOp::Mul) return fn::mul(a, b);
    if constexpr (OP == BinaryOp::Div) return fn::div(a, b);
    if constexpr (OP == BinaryOp::Maximum) return fn::maximum(a, b);
    if constexpr (OP == BinaryOp::Minimum) return fn::minimum(a, b);
    if constexpr (OP == BinaryOp::Pow) return fn::pow(a, b);
  }
};

template <class T, BinaryOp OP, bool SCALAR_FIRST>
struct ScalarF {
  T s;
  __device__ __forceinline__ T operator()(T x) const {
    return SCALAR_FIRST ? BinaryF<T, OP>{}(s, x) : BinaryF<T, OP>{}(x, s);
  }
};

// Integer division by a tensor: a zero divisor raises *flag (read by the op after the kernel; any thread may
// store the same 1, so no atomic is needed) and gives 0 (fn::div).
template <class T>
struct IntDivF {
  int* flag;
  __device__ __forceinline__ T operator()(T a, T b) const {
    if (b == T(0)) *flag = 1;
    return fn::div(a, b);
  }
};

// s / x for integers: x is the divisor.
template <class T>
struct IntScalarDivF {
  T s;
  int* flag;
  __device__ __forceinline__ T operator()(T x) const {
    if (x == T(0)) *flag = 1;
    return fn::div(s, x);
  }
};

template <class T>
struct ClampF {
  T lo, hi;
  __device__ __forceinline__ T operator()(T x) const { return fn::clamp(x, lo, hi); }
};

struct InvertRgbaF {
  __device__ __forceinline__ unsigned int operator()(unsigned int x) const { return fn::invert_rgba(x); }
};

template <class F, class T, int N>
__device__ __forceinline__ T apply(const F& f, const T (&x)[N]) {
  if constexpr (N == 1) {
    return f(x[0]);
  } else {
    return f(x[0], x[1]);
  }
}

// ---- kernels

__device__ __forceinline__ uint4 load_pack(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ void store_pack(void* p, uint4 v) {
  *reinterpret_cast<uint4*>(p) = v;
}

// out[0, n) = f(in...), contiguous. `head` leading elements are done as scalars so that out + head is
// 128-byte aligned; inputs read as kVec share the output's misalignment modulo 16 (the launcher checked), so
// they are 16-byte aligned from there on. Packs i0, i0 + step, ..., i0 + (UNROLL - 1) * step of a step are
// loaded together, then computed and stored.
template <class S, class F, class T, int N, int A0, int A1>
__global__ void __launch_bounds__(kThreads)
    map_contiguous_kernel(T* __restrict__ out, Inputs<T, N> in, std::int64_t n, int head, F f) {
  using P = Pack<T>;
  constexpr int V = P::V;
  constexpr int U = S::kUnroll;
  constexpr int access[2] = {A0, A1};
  const std::int64_t tid = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  const std::int64_t n_vec = (n - head) / V;
  const std::int64_t tail = head + n_vec * V;

  auto scalar_at = [&](std::int64_t e) {
    T x[N];
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] = access[k] == kBcast ? in.p[k][0] : in.p[k][e];
    out[e] = apply(f, x);
  };
  if (tid < head) scalar_at(tid);
  if (tid < n - tail) scalar_at(tail + tid);

  T bcast[N];
#pragma unroll
  for (int k = 0; k < N; ++k) bcast[k] = access[k] == kBcast ? in.p[k][0] : T(0);

  auto step = [&](std::int64_t i0, std::int64_t stride) {
    P v[U][N];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::int64_t i = i0 + u * stride;
      if (i >= n_vec) break;
      const std::int64_t e = head + i * V;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (access[k] == kVec) {
          v[u][k].raw = load_pack(in.p[k] + e);
        } else if (access[k] == kUnaligned) {
#pragma unroll
          for (int j = 0; j < V; ++j) v[u][k].v[j] = in.p[k][e + j];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::int64_t i = i0 + u * stride;
      if (i >= n_vec) break;
      P r;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        T x[N];
#pragma unroll
        for (int k = 0; k < N; ++k) x[k] = access[k] == kBcast ? bcast[k] : v[u][k].v[j];
        r.v[j] = apply(f, x);
      }
      store_pack(out + head + i * V, r.raw);
    }
  };
  step(blockIdx.x * std::int64_t(U * kThreads) + threadIdx.x, kThreads);
}

// out[ol(i)] = f(in[il(i)]...), all layouts of one (coalesced) shape.
template <class F, class T, int N>
__global__ void __launch_bounds__(kThreads)
    map_strided_kernel(T* __restrict__ out, StridedLayout ol, Inputs<T, N> in, Layouts<N> il, std::int64_t n,
                       F f) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    // One index decomposition serves every operand (they share the shape).
    std::int64_t rem = i, o = 0, off[N] = {};
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d < ol.rank) {
        const std::int64_t extent = ol.shape[d];
        const std::int64_t idx = rem % extent;
        rem /= extent;
        o += idx * ol.stride[d];
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += idx * il.l[k].stride[d];
      }
    }
    T x[N];
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] = in.p[k][off[k]];
    out[o] = apply(f, x);
  }
}

// The seed's add: one float per thread, one pass, no vectors. Kept as the benchmark's baseline row.
__global__ void add_naive_kernel(float* out, const float* a, const float* b, std::int64_t n) {
  const std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

// ---- launchers

template <class S, class F, class T, int N, int A0, int A1>
void launch_contiguous(const F& f, T* out, const Inputs<T, N>& in, std::int64_t n, int head,
                       cudaStream_t stream) {
  constexpr int V = Pack<T>::V;
  auto* kernel = map_contiguous_kernel<S, F, T, N, A0, A1>;
  const std::int64_t n_vec = (n - head) / V;
  const std::int64_t per_block = std::int64_t(kThreads) * S::kUnroll;
  // At least one block: the scalar prologue and epilogue (< kLineBytes elements) run on the first threads. At
  // most n / 1024 blocks: far below the 2^31 - 1 limit for any tensor that fits in device memory.
  const std::int64_t grid = std::max<std::int64_t>(1, (n_vec + per_block - 1) / per_block);
  kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(out, in, n, head, f);
  MT_CUDA_CHECK_LAUNCH();
}

int misalignment(const void* p) {
  return static_cast<int>(reinterpret_cast<std::uintptr_t>(p) % 16);
}

// Picks the contiguous kernel (every operand contiguous or a broadcast scalar) or the strided one.
template <class F, class T, int N, class S = DefaultSchedule<N>>
void map_launch(const F& f, T* out, const StridedLayout& ol, const Inputs<T, N>& in, const StridedLayout* il,
                std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  StridedLayout ls[N + 1];
  ls[0] = ol;
  for (int k = 0; k < N; ++k) ls[k + 1] = il[k];
  coalesce_layouts(ls, N + 1);

  bool contiguous = ls[0].rank == 1 && ls[0].stride[0] == 1;
  int access[2] = {kVec, kVec};
  for (int k = 0; k < N && contiguous; ++k) {
    const StridedLayout& l = ls[k + 1];
    if (l.rank == 1 && l.stride[0] == 1) {
      access[k] = misalignment(in.p[k]) == misalignment(out) ? kVec : kUnaligned;
    } else if (l.rank == 1 && l.stride[0] == 0) {
      access[k] = kBcast;
    } else {
      contiguous = false;
    }
  }
  if (!contiguous) {
    Layouts<N> lk;
    for (int k = 0; k < N; ++k) lk.l[k] = ls[k + 1];
    auto* kernel = map_strided_kernel<F, T, N>;
    const int grid = grid_stride_blocks(kernel, kThreads, n, kThreads);
    kernel<<<grid, kThreads, 0, stream>>>(out, ls[0], in, lk, n, f);
    MT_CUDA_CHECK_LAUNCH();
    return;
  }
  // Elements up to the output's next cache-line boundary (out is at least sizeof(T)-aligned).
  const int to_line =
      static_cast<int>((kLineBytes - reinterpret_cast<std::uintptr_t>(out) % kLineBytes) % kLineBytes);
  const int head = static_cast<int>(std::min<std::int64_t>(n, to_line / static_cast<int>(sizeof(T))));
  if constexpr (N == 1) {
    switch (access[0]) {
      case kVec:
        return launch_contiguous<S, F, T, 1, kVec, 0>(f, out, in, n, head, stream);
      case kUnaligned:
        return launch_contiguous<S, F, T, 1, kUnaligned, 0>(f, out, in, n, head, stream);
      default:
        return launch_contiguous<S, F, T, 1, kBcast, 0>(f, out, in, n, head, stream);
    }
  } else {
    switch (access[0] * 3 + access[1]) {
      case 0:
        return launch_contiguous<S, F, T, 2, kVec, kVec>(f, out, in, n, head, stream);
      case 1:
        return launch_contiguous<S, F, T, 2, kVec, kUnaligned>(f, out, in, n, head, stream);
      case 2:
        return launch_contiguous<S, F, T, 2, kVec, kBcast>(f, out, in, n, head, stream);
      case 3:
        return launch_contiguous<S, F, T, 2, kUnaligned, kVec>(f, out, in, n, head, stream);
      case 4:
        return launch_contiguous<S, F, T, 2, kUnaligned, kUnaligned>(f, out, in, n, head, stream);
      case 5:
        return launch_contiguous<S, F, T, 2, kUnaligned, kBcast>(f, out, in, n, head, stream);
      case 6:
        return launch_contiguous<S, F, T, 2, kBcast, kVec>(f, out, in, n, head, stream);
      case 7:
        return launch_contiguous<S, F, T, 2, kBcast, kUnaligned>(f, out, in, n, head, stream);
      default:
        return launch_contiguous<S, F, T, 2, kBcast, kBcast>(f, out, in, n, head, stream);
    }
  }
}

template <class T, class Body>
void with_unary(UnaryOp op, Body&& body) {
  switch (op) {
    case UnaryOp::Neg:
      return body(UnaryF<T, UnaryOp::Neg>{});
    case UnaryOp::Abs:
      return body(UnaryF<T, UnaryOp::Abs>{});
    case UnaryOp::Relu:
      return body(UnaryF<T, UnaryOp::Relu>{});
    case UnaryOp::Square:
      return body(UnaryF<T, UnaryOp::Square>{});
    default:
      break;
  }
  if constexpr (std::is_same_v<T, float>) {
    switch (op) {
      case UnaryOp::Sigmoid:
        return body(UnaryF<T, UnaryOp::Sigmoid>{});
      case UnaryOp::Tanh:
        return body(UnaryF<T, UnaryOp::Tanh>{});
      case UnaryOp::Exp:
        return body(UnaryF<T, UnaryOp::Exp>{});
      case UnaryOp::Log:
        return body(UnaryF<T, UnaryOp::Log>{});
      case UnaryOp::Sqrt:
        return body(UnaryF<T, UnaryOp::Sqrt>{});
      case UnaryOp::Rsqrt:
        return body(UnaryF<T, UnaryOp::Rsqrt>{});
      case UnaryOp::Gelu:
        return body(UnaryF<T, UnaryOp::Gelu>{});
      case UnaryOp::GeluTanh:
        return body(UnaryF<T, UnaryOp::GeluTanh>{});
      case UnaryOp::Reciprocal:
        return body(UnaryF<T, UnaryOp::Reciprocal>{});
      default:
        break;
    }
  }
  MT_THROW(DTypeError, op_name(op), ": dtype ", dtype_v<T>, " is not supported");
}

// Calls body(std::integral_constant<BinaryOp, OP>) for the ops defined on T.
template <class T, class Body>
void with_binary(BinaryOp op, Body&& body) {
  using B = BinaryOp;
  switch (op) {
    case B::Add:
      return body(std::integral_constant<B, B::Add>{});
    case B::Sub:
      return body(std::integral_constant<B, B::Sub>{});
    case B::Mul:
      return body(std::integral_constant<B, B::Mul>{});
    case B::Div:
      return body(std::integral_constant<B, B::Div>{});
    case B::Maximum:
      return body(std::integral_constant<B, B::Maximum>{});
    case B::Minimum:
      return body(std::integral_constant<B, B::Minimum>{});
    default:
      break;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (op == B::Pow) return body(std::integral_constant<B, B::Pow>{});
  }
  MT_THROW(DTypeError, op_name(op), ": dtype ", dtype_v<T>, " is not supported");
}

}  // namespace

void launch_unary(UnaryOp op, DType dtype, void* out, const StridedLayout& ol, const void* x,
                  const StridedLayout& xl, std::int64_t n, cudaStream_t stream) {
  MT_DISPATCH_DTYPE(dtype, op_name(op), T, [&] {
    with_unary<T>(op, [&](auto f) {
      map_launch<decltype(f), T, 1>(f, static_cast<T*>(out), ol, Inputs<T, 1>{{static_cast<const T*>(x)}},
                                    &xl, n, stream);
    });
  });
}

void launch_binary(BinaryOp op, DType dtype, void* out, const StridedLayout& ol, const void* a,
                   const StridedLayout& al, const void* b, const StridedLayout& bl, std::int64_t n,
                   cudaStream_t stream, int* div_by_zero) {
  MT_DISPATCH_DTYPE(dtype, op_name(op), T, [&] {
    with_binary<T>(op, [&](auto op_c) {
      constexpr BinaryOp OP = decltype(op_c)::value;
      using F = BinaryF<T, OP>;
      const StridedLayout il[2] = {al, bl};
      const Inputs<T, 2> in{{static_cast<const T*>(a), static_cast<const T*>(b)}};
      if constexpr (OP == BinaryOp::Div && !std::is_same_v<T, float>) {
        if (div_by_zero)
          return map_launch<IntDivF<T>, T, 2>({div_by_zero}, static_cast<T*>(out), ol, in, il, n, stream);
      }
      map_launch<F, T, 2>(F{}, static_cast<T*>(out), ol, in, il, n, stream);
    });
  });
}

void launch_binary_scalar(BinaryOp op, DType dtype, void* out, const StridedLayout& ol, const void* x,
                          const StridedLayout& xl, double s, bool scalar_first, std::int64_t n,
                          cudaStream_t stream, int* div_by_zero) {
  MT_DISPATCH_DTYPE(dtype, op_name(op), T, [&] {
    with_binary<T>(op, [&](auto op_c) {
      constexpr BinaryOp OP = decltype(op_c)::value;
      const Inputs<T, 1> in{{static_cast<const T*>(x)}};
      if constexpr (OP == BinaryOp::Div && !std::is_same_v<T, float>) {
        if (scalar_first && div_by_zero) {
          return map_launch<IntScalarDivF<T>, T, 1>({static_cast<T>(s), div_by_zero}, static_cast<T*>(out),
                                                    ol, in, &xl, n, stream);
        }
      }
      if (scalar_first) {
        map_launch<ScalarF<T, OP, true>, T, 1>({static_cast<T>(s)}, static_cast<T*>(out), ol, in, &xl, n,
                                               stream);
      } else {
        map_launch<ScalarF<T, OP, false>, T, 1>({static_cast<T>(s)}, static_cast<T*>(out), ol, in, &xl, n,
                                                stream);
      }
    });
  });
}

void launch_clamp(DType dtype, void* out, const StridedLayout& ol, const void* x, const StridedLayout& xl,
                  double lo, double hi, std::int64_t n, cudaStream_t stream) {
  MT_DISPATCH_DTYPE(dtype, "clamp", T, [&] {
    map_launch<ClampF<T>, T, 1>({static_cast<T>(lo), static_cast<T>(hi)}, static_cast<T*>(out), ol,
                                Inputs<T, 1>{{static_cast<const T*>(x)}}, &xl, n, stream);
  });
}

void launch_invert_rgba(std::uint8_t* out, const std::uint8_t* x, std::int64_t n_pixels,
                        cudaStream_t stream) {
  StridedLayout l;
  l.rank = 1;
  l.shape[0] = n_pixels;
  l.stride[0] = 1;
  using W = unsigned int;
  map_launch<InvertRgbaF, W, 1>(InvertRgbaF{}, reinterpret_cast<W*>(out), l,
                                Inputs<W, 1>{{reinterpret_cast<const W*>(x)}}, &l, n_pixels, stream);
}

void launch_add_naive(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  MT_CHECK(blocks <= 0x7fffffff, InvalidArgument, "add_naive: ", n, " elements need too many blocks");
  add_naive_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(out, a, b, n);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::detail
