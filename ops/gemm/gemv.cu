// Matrix-vector products (N == 1 or M == 1, batched too): bound by reading the matrix once, so they take one
// streaming pass over it at full bandwidth, not a tiled k-loop built for reuse that a vector does not have.
//
// The product is seen as len outputs, out(i) = sum_p mat(i, p) vec(p), p < K:
//   N == 1: mat = A (i along m), vec = B's column;   M == 1: mat = B^T (i along n), vec = A's row.
// Two kernels by the matrix's layout:
//   dot     the matrix contiguous along K (A row-major, or an nn.Linear weight used as B^T): a group of G
//           threads per output reads its row in 16-byte loads and adds with shuffles;
//   column  the matrix contiguous along the outputs: a thread per output, each K step one coalesced row.
// K is split over blocks (gridDim.y) when the outputs alone would not fill the card; the partial sums then go
// through the split-K workspace and the reduce kernel, which runs the epilogue in split order
// (deterministic). Unsplit, the kernels run the epilogue themselves.
#include <algorithm>
#include <cstdint>

#include "minitensor/ops/gemm/detail/device.cuh"
#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/ops/gemm/detail/scratch.h"
#include "minitensor/runtime/detail/device_primitives.cuh"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail::gemm {

namespace {

constexpr int kThreads = 256;

struct Gemv {
  const float* mat;
  std::int64_t s_i, s_p, mat_sb;  // mat(i, p) = mat[b * mat_sb + i * s_i + p * s_p]
  const float* vec;
  std::int64_t s_v, vec_sb;  // vec(p) = vec[b * vec_sb + p * s_v]
  std::int64_t s_o;          // out(i) = C[b * c_sb + i * s_o]
  int len;
  bool over_n;      // outputs along n (the bias index is i) or along m (the bias index is 0)
  int k_per_split;  // K range of blockIdx.y
};

Gemv gemv_of(const Problem& p) {
  if (p.n == 1) return {p.a, p.a_sm, p.a_sk, p.a_sb, p.b, p.b_sk, p.b_sb, p.c_sm, p.m, false, p.k};
  return {p.b, p.b_sn, p.b_sk, p.b_sb, p.a, p.a_sk, p.a_sb, p.c_sn, p.n, true, p.k};
}

// The output's epilogue (unsplit) or its raw partial sum in split plane blockIdx.y ([split][batch][len]).
__device__ __forceinline__ void finish(const Problem& p, const Gemv& g, float acc, int i, int b, float* ws) {
  if (ws) {
    ws[(static_cast<std::int64_t>(blockIdx.y) * p.batch + b) * g.len + i] = acc;
    return;
  }
  float* c = c_batch(p, b) + i * g.s_o;
  *c = epilogue_value(p, acc, c, g.over_n ? i : 0);
}

// G threads per output (a power of two, 32..256), kThreads / G outputs per block.
template <int G>
__global__ void __launch_bounds__(kThreads) gemv_dot(Problem p, Gemv g, float* ws) {
  __shared__ float part[kThreads / 32];
  const int b = blockIdx.z;
  const int lane = threadIdx.x % G;
  const int i = blockIdx.x * (kThreads / G) + threadIdx.x / G;
  const int p0 = blockIdx.y * g.k_per_split, p1 = min(p.k, p0 + g.k_per_split);
  float acc = 0.f;
  if (i < g.len) {
    const float* row = g.mat + b * g.mat_sb + i * g.s_i;
    const float* v = g.vec + b * g.vec_sb;
    float a4[4] = {0.f, 0.f, 0.f, 0.f};
    int q = p0;
    // 16-byte loads where the row and the vector allow them (p0 is a multiple of 4: see the launcher).
    const bool vec4 = g.s_v == 1 && (reinterpret_cast<std::uintptr_t>(row + p0) & 15u) == 0 &&
                      (reinterpret_cast<std::uintptr_t>(v + p0) & 15u) == 0;
    if (vec4) {
      const int n4 = (p1 - p0) / 4;
      const float4* r4 = reinterpret_cast<const float4*>(row + p0);
      const float4* v4 = reinterpret_cast<const float4*>(v + p0);
#pragma unroll 4
      for (int t = lane; t < n4; t += G) {
        const float4 x = __ldcs(r4 + t), y = __ldg(v4 + t);
        a4[0] = fmaf(x.x, y.x, a4[0]), a4[1] = fmaf(x.y, y.y, a4[1]);
        a4[2] = fmaf(x.z, y.z, a4[2]), a4[3] = fmaf(x.w, y.w, a4[3]);
      }
      q = p0 + 4 * n4;
    }
    for (int t = q + lane; t < p1; t += G) a4[0] = fmaf(__ldcs(row + t), __ldg(v + t * g.s_v), a4[0]);
    acc = (a4[0] + a4[1]) + (a4[2] + a4[3]);
  }
  acc = warp_sum(acc);
  if constexpr (G > 32) {
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = acc;
    __syncthreads();
    if (lane != 0) return;
    acc = 0.f;
    for (int w = 0; w < G / 32; ++w) acc += part[threadIdx.x / 32 + w];
  } else if (lane != 0) {
    return;
  }
  if (i < g.len) finish(p, g, acc, i, b, ws);
}

// A thread per output; each K step reads one coalesced run of the matrix and one broadcast vector element.
__global__ void __launch_bounds__(kThreads) gemv_column(Problem p, Gemv g, float* ws) {
  const int b = blockIdx.z;
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= g.len) return;
  const int p0 = blockIdx.y * g.k_per_split, p1 = min(p.k, p0 + g.k_per_split);
  const float* m = g.mat + b * g.mat_sb + i * g.s_i;
  const float* v = g.vec + b * g.vec_sb;
  float a4[4] = {0.f, 0.f, 0.f, 0.f};
  int t = p0;
  for (; t + 4 <= p1; t += 4) {
#pragma unroll
    for (int u = 0; u < 4; ++u) a4[u] = fmaf(__ldcs(m + (t + u) * g.s_p), __ldg(v + (t + u) * g.s_v), a4[u]);
  }
  for (; t < p1; ++t) a4[0] = fmaf(__ldcs(m + t * g.s_p), __ldg(v + t * g.s_v), a4[0]);
  finish(p, g, (a4[0] + a4[1]) + (a4[2] + a4[3]), i, b, ws);
}

// Threads per output for the dot kernel: enough groups in flight to fill the card (about 1,024 threads per
// SM), but at least 4 elements of K per thread.
int group_size(std::int64_t outputs, int k, int sms) {
  int g = 32;
  while (g < 256 && outputs * g < 1024LL * sms && 4LL * g * 2 <= k) g *= 2;
  return g;
}

}  // namespace

void launch_gemv(const Problem& p, const Config&, cudaStream_t stream) {
  Gemv g = gemv_of(p);
  const int sms = current_sm_count();
  const bool dot = g.s_p == 1 && g.s_i != 1;
  const int G = dot ? group_size(static_cast<std::int64_t>(g.len) * p.batch, p.k, sms) : 1;
  const std::int64_t blocks_x = (static_cast<std::int64_t>(g.len) * G + kThreads - 1) / kThreads;
  // Split K while the blocks fill under 4 per SM, keeping enough K per split to outweigh the reduce launch
  // (a group's row, or a thread's column, long enough to keep its loads in flight).
  const int min_k = dot ? 2048 : 32;
  int split = 1;
  while (blocks_x * p.batch * split * 2 <= 4LL * sms && p.k / (split * 2) >= min_k && split < 64) split *= 2;
  g.k_per_split = (p.k + split - 1) / split;
  g.k_per_split = (g.k_per_split + 3) / 4 * 4;  // 16-byte steps stay aligned across splits
  split = (p.k + g.k_per_split - 1) / g.k_per_split;
  float* ws = split > 1
                  ? split_scratch(sizeof(float) * static_cast<std::size_t>(split) * p.batch * g.len, stream)
                  : nullptr;
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(split),
                  static_cast<unsigned>(p.batch));
  if (!dot) {
    gemv_column<<<grid, kThreads, 0, stream>>>(p, g, ws);
  } else {
    switch (G) {
      case 32:
        gemv_dot<32><<<grid, kThreads, 0, stream>>>(p, g, ws);
        break;
      case 64:
        gemv_dot<64><<<grid, kThreads, 0, stream>>>(p, g, ws);
        break;
      case 128:
        gemv_dot<128><<<grid, kThreads, 0, stream>>>(p, g, ws);
        break;
      default:
        gemv_dot<256><<<grid, kThreads, 0, stream>>>(p, g, ws);
    }
  }
  MT_CUDA_CHECK_LAUNCH();
  if (split > 1) launch_splitk_reduce(p, ws, split, stream);
}

}  // namespace mt::detail::gemm
