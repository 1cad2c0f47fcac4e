// Matrix-vector and thin products (min(M, N) <= kGemvMaxRows, batched too): bound by reading the big matrix
// once, so they take one streaming pass over it at full bandwidth, not a tiled k-loop built for a reuse that
// a few vectors do not have.
//
// The product is seen as `rows` vectors against a matrix of `len` outputs, out(r, i) = sum_p mat(i, p) vec(r, p):
//   N thin: mat = A (i along m), the vectors are B's columns;   M thin: mat = B^T (i along n), A's rows.
// Two kernels by the matrix's layout:
//   dot     the matrix contiguous along K (A row-major, or an nn.Linear weight used as B^T): a group of G
//           threads per output reads its row in 16-byte loads, each load feeding every vector, and adds with
//           shuffles;
//   column  the matrix contiguous along the outputs: a thread per output, each K step one coalesced row and
//           a broadcast element of each vector.
// Napkin maths: 4 bytes of matrix per `rows` FMAs (vectors and C are small beside it). The column kernel's
// vector reads are warp-uniform (one load serves the warp); the dot kernel's are per lane from L1, so at 16
// rows it is bound by L1 (about 17 loads per 16-byte matrix load) near half the DRAM rate.
// K is split over blocks (gridDim.y) when the outputs alone would not fill the card; the partial sums then go
// through the split-K workspace and the reduce kernel, which runs the epilogue in split order
// (deterministic). Unsplit, the kernels run the epilogue themselves.
#include <algorithm>
#include <cstdint>

#include "minitensor/ops/gemm/detail/device.cuh"
#include "minitensor/ops/gemm/detail/dispatch.h"
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
  std::int64_t s_v, s_r, vec_sb;  // vec(r, p) = vec[b * vec_sb + r * s_r + p * s_v]
  std::int64_t s_o, s_or;         // out(r, i) = C[b * c_sb + i * s_o + r * s_or]
  int len, rows;
  bool over_n;      // outputs along n (the bias index is i) or along m (the bias index is r)
  int k_per_split;  // K range of blockIdx.y
};

// The thinner side gives the vectors (N when M == N).
Gemv gemv_of(const Problem& p) {
  if (p.n <= p.m)
    return {p.a, p.a_sm, p.a_sk, p.a_sb, p.b, p.b_sk, p.b_sn, p.b_sb, p.c_sm, p.c_sn, p.m, p.n, false, p.k};
  return {p.b, p.b_sn, p.b_sk, p.b_sb, p.a, p.a_sk, p.a_sm, p.a_sb, p.c_sn, p.c_sm, p.n, p.m, true, p.k};
}

// Output (r, i)'s epilogue (unsplit) or its raw partial sum in split plane blockIdx.y, laid out as C is
// ([split][batch][m][n]) for the reduce kernel.
__device__ __forceinline__ void finish(const Problem& p, const Gemv& g, float acc, int r, int i, int b,
                                       float* ws) {
  if (ws) {
    const std::int64_t e = g.over_n ? static_cast<std::int64_t>(r) * g.len + i
                                    : static_cast<std::int64_t>(i) * g.rows + r;
    ws[(static_cast<std::int64_t>(blockIdx.y) * p.batch + b) * (static_cast<std::int64_t>(g.len) * g.rows) + e] =
        acc;
    return;
  }
  float* c = c_batch(p, b) + i * g.s_o + r * g.s_or;
  *c = epilogue_value(p, acc, c, g.over_n ? i : r);
}

// Vector r's base (rows past the last never load: their guard is uniform across the block).
__device__ __forceinline__ const float* vec_row(const Gemv& g, int b, int r) {
  return g.vec + b * g.vec_sb + r * g.s_r;
}

// Independent accumulator chains per vector: four for one or two vectors, else the vectors themselves.
template <int R>
constexpr int kChains = R >= 4 ? 1 : 4;

// G threads per output (a power of two, 8..256), kThreads / G outputs per block; R >= g.rows vectors.
template <int G, int R>
__global__ void __launch_bounds__(kThreads) gemv_dot(Problem p, Gemv g, float* ws) {
  constexpr int C = kChains<R>;
  __shared__ float part[kThreads / 32][R];
  const int b = blockIdx.z;
  const int lane = threadIdx.x % G;
  const int i = blockIdx.x * (kThreads / G) + threadIdx.x / G;
  const int p0 = blockIdx.y * g.k_per_split, p1 = min(p.k, p0 + g.k_per_split);
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  if (i < g.len) {
    const float* row = g.mat + b * g.mat_sb + i * g.s_i;
    float a[R][C];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) a[r][c] = 0.f;
    int q = p0;
    // 16-byte loads where the row and every vector allow them (p0 is a multiple of 4: see the launcher).
    const bool vec4 = g.s_v == 1 && (g.rows == 1 || g.s_r % 4 == 0) &&
                      (reinterpret_cast<std::uintptr_t>(row + p0) & 15u) == 0 &&
                      (reinterpret_cast<std::uintptr_t>(vec_row(g, b, 0) + p0) & 15u) == 0;
    if (vec4) {
      const int n4 = (p1 - p0) / 4;
      const float4* r4 = reinterpret_cast<const float4*>(row + p0);
#pragma unroll(R <= 4 ? 4 : 2)
      for (int t = lane; t < n4; t += G) {
        const float4 x = __ldcs(r4 + t);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (R > 1 && r >= g.rows) break;
          const float4 y = __ldg(reinterpret_cast<const float4*>(vec_row(g, b, r) + p0) + t);
          a[r][0] = fmaf(x.x, y.x, a[r][0]), a[r][1 % C] = fmaf(x.y, y.y, a[r][1 % C]);
          a[r][2 % C] = fmaf(x.z, y.z, a[r][2 % C]), a[r][3 % C] = fmaf(x.w, y.w, a[r][3 % C]);
        }
      }
      q = p0 + 4 * n4;
    }
    for (int t = q + lane; t < p1; t += G) {
      const float x = __ldcs(row + t);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (R > 1 && r >= g.rows) break;
        a[r][0] = fmaf(x, __ldg(vec_row(g, b, r) + t * g.s_v), a[r][0]);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = C == 4 ? (a[r][0] + a[r][1 % C]) + (a[r][2 % C] + a[r][3 % C]) : a[r][0];
  }
  // Every lane reaches the shuffles (lanes past the last output add zeros).
  if constexpr (G < 32) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int off = G / 2; off > 0; off /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    if (lane != 0) return;
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = warp_sum(acc[r]);
    if constexpr (G > 32) {
      if (threadIdx.x % 32 == 0)
#pragma unroll
        for (int r = 0; r < R; ++r) part[threadIdx.x / 32][r] = acc[r];
      __syncthreads();
      if (lane != 0) return;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        acc[r] = 0.f;
        for (int w = 0; w < G / 32; ++w) acc[r] += part[threadIdx.x / 32 + w][r];
      }
    } else if (lane != 0) {
      return;
    }
  }
  if (i < g.len)
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r < g.rows) finish(p, g, acc[r], r, i, b, ws);
}

// A thread per output; each K step reads one coalesced run of the matrix and, per vector, one element that
// is the same for the whole warp (a 16-byte load of four steps where the vectors run along K in aligned rows).
template <int R>
__global__ void __launch_bounds__(kThreads) gemv_column(Problem p, Gemv g, float* ws) {
  constexpr int C = kChains<R>;
  const int b = blockIdx.z;
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= g.len) return;
  const int p0 = blockIdx.y * g.k_per_split, p1 = min(p.k, p0 + g.k_per_split);
  const float* m = g.mat + b * g.mat_sb + i * g.s_i;
  float a[R][C];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) a[r][c] = 0.f;
  const bool vec4 = g.s_v == 1 && (g.rows == 1 || g.s_r % 4 == 0) &&
                    (reinterpret_cast<std::uintptr_t>(vec_row(g, b, 0) + p0) & 15u) == 0;
  int t = p0;
  for (; t + 4 <= p1; t += 4) {
    float x[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) x[u] = __ldcs(m + (t + u) * g.s_p);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (R > 1 && r >= g.rows) break;
      const float* v = vec_row(g, b, r);
      float y[4];
      if (vec4) {
        const float4 y4 = __ldg(reinterpret_cast<const float4*>(v + t));
        y[0] = y4.x, y[1] = y4.y, y[2] = y4.z, y[3] = y4.w;
      } else {
#pragma unroll
        for (int u = 0; u < 4; ++u) y[u] = __ldg(v + (t + u) * g.s_v);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) a[r][u % C] = fmaf(x[u], y[u], a[r][u % C]);
    }
  }
  for (; t < p1; ++t) {
    const float x = __ldcs(m + t * g.s_p);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (R > 1 && r >= g.rows) break;
      a[r][0] = fmaf(x, __ldg(vec_row(g, b, r) + t * g.s_v), a[r][0]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r < g.rows)
      finish(p, g, C == 4 ? (a[r][0] + a[r][1 % C]) + (a[r][2 % C] + a[r][3 % C]) : a[r][0], r, i, b, ws);
}

// Threads per output for the dot kernel: enough groups in flight to fill the card (about 1,024 threads per
// SM), but at least 4 elements of K per thread; under 32 only where K is too short to give each of a warp's
// lanes a 16-byte load.
int group_size(std::int64_t outputs, int k, int sms) {
  int g = 32;
  while (g < 256 && outputs * g < 1024LL * sms && 4LL * g * 2 <= k) g *= 2;
  while (g > 8 && 4LL * g > k) g /= 2;
  return g;
}

template <int R>
void launch_rows(const Problem& p, const Gemv& g, bool dot, int G, dim3 grid, float* ws, cudaStream_t stream) {
  if (!dot) {
    gemv_column<R><<<grid, kThreads, 0, stream>>>(p, g, ws);
    return;
  }
  switch (G) {
    case 8:
      gemv_dot<8, R><<<grid, kThreads, 0, stream>>>(p, g, ws);
      break;
    case 16:
      gemv_dot<16, R><<<grid, kThreads, 0, stream>>>(p, g, ws);
      break;
    case 32:
      gemv_dot<32, R><<<grid, kThreads, 0, stream>>>(p, g, ws);
      break;
    case 64:
      gemv_dot<64, R><<<grid, kThreads, 0, stream>>>(p, g, ws);
      break;
    case 128:
      gemv_dot<128, R><<<grid, kThreads, 0, stream>>>(p, g, ws);
      break;
    default:
      gemv_dot<256, R><<<grid, kThreads, 0, stream>>>(p, g, ws);
  }
}

}  // namespace

void launch_gemv(const Problem& p, const Config&, cudaStream_t stream) {
  Gemv g = gemv_of(p);
  MT_CHECK(g.rows >= 1 && g.rows <= kGemvMaxRows, InvalidArgument, "gemv: ", p.m, "x", p.n,
           " is not a thin product (at most ", kGemvMaxRows, " rows or columns)");
  const int sms = current_sm_count();
  const bool dot = g.s_p == 1 && g.s_i != 1;
  const int G = dot ? group_size(static_cast<std::int64_t>(g.len) * p.batch, p.k, sms) : 1;
  const std::int64_t blocks_x = (static_cast<std::int64_t>(g.len) * G + kThreads - 1) / kThreads;
  // Split K while the blocks fill under 4 per SM, keeping enough K per split to outweigh the reduce launch
  // (a group's row, or a thread's column, long enough to keep its loads in flight). A column thread issues
  // one coalesced row per K step, so a short column (32 steps) already streams; a dot group needs a long row.
  const int min_k = dot ? 2048 : 32;
  int split = 1;
  while (blocks_x * p.batch * split * 2 <= 4LL * sms && p.k / (split * 2) >= min_k && split < 64) split *= 2;
  g.k_per_split = (p.k + split - 1) / split;
  g.k_per_split = (g.k_per_split + 3) / 4 * 4;  // 16-byte steps stay aligned across splits
  split = (p.k + g.k_per_split - 1) / g.k_per_split;
  float* ws = split > 1 ? split_scratch(sizeof(float) * static_cast<std::size_t>(split) * p.batch * g.len *
                                            static_cast<std::size_t>(g.rows),
                                        stream)
                        : nullptr;
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(split),
                  static_cast<unsigned>(p.batch));
  if (g.rows == 1)
    launch_rows<1>(p, g, dot, G, grid, ws, stream);
  else if (g.rows == 2)
    launch_rows<2>(p, g, dot, G, grid, ws, stream);
  else if (g.rows <= 4)
    launch_rows<4>(p, g, dot, G, grid, ws, stream);
  else if (g.rows <= 8)
    launch_rows<8>(p, g, dot, G, grid, ws, stream);
  else
    launch_rows<16>(p, g, dot, G, grid, ws, stream);
  MT_CUDA_CHECK_LAUNCH();
  if (split > 1) launch_splitk_reduce(p, ws, split, stream);
}

}  // namespace mt::detail::gemm
