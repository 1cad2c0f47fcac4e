// Matrix-vector and thin products (min(M, N) <= kGemvMaxRows, batched too): bound by reading the big matrix
// once, so they take one streaming pass over it at full bandwidth, not a tiled k-loop built for a reuse that
// a few vectors do not have.
//
// The product is seen as `rows` vectors against a matrix of `len` outputs,
// out(r, i) = sum_p mat(i, p) vec(r, p):
//   N thin: mat = A (i along m), the vectors are B's columns;   M thin: mat = B^T (i along n), A's rows.
// Three kernels by the matrix's layout and the vector count:
//   dot       the matrix contiguous along K (A row-major, or an nn.Linear weight used as B^T), up to 8
//             vectors over a small matrix (dispatch.h, kThinTileMinMatrix), else 1-2: a group of G threads
//             per output reads its row in 16-byte loads, each load feeding every vector from L1, and adds
//             with shuffles;
//   dot tile  the same layout, the other vector counts: the block stages its K range of the vectors in
//             shared memory and a group of 8 lanes takes O rows, so each vector run read feeds O rows;
//   column    the matrix contiguous along the outputs: a thread takes 4 outputs (one 16-byte load a K step)
//             and 4 K steps at a time, the vectors' elements the same for the whole warp.
// Napkin maths: 4 bytes of matrix per `rows` FMAs (vectors and C are small beside it). With the vectors read
// per lane once per 16-byte matrix load, 16 vectors make L1 the bound near half the DRAM rate (the dot
// kernel's limit); the tile reads a vector run from shared memory once per O matrix loads of a lane.
// K is split over blocks (gridDim.y) when the outputs alone would not fill the card; the partial sums then go
// through the split-K workspace and the reduce kernel, which runs the epilogue in split order
// (deterministic). Unsplit, the kernels run the epilogue themselves.
#include <algorithm>
#include <cstdint>
#include <type_traits>

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
    const std::int64_t e =
        g.over_n ? static_cast<std::int64_t>(r) * g.len + i : static_cast<std::int64_t>(i) * g.rows + r;
    ws[(static_cast<std::int64_t>(blockIdx.y) * p.batch + b) * (static_cast<std::int64_t>(g.len) * g.rows) +
       e] = acc;
    return;
  }
  float* c = c_batch(p, b) + i * g.s_o + r * g.s_or;
  *c = epilogue_value(p, acc, c, g.over_n ? i : r);
}

// Vector r's base (rows past the last never load: their guard is uniform across the block).
__device__ __forceinline__ const float* vec_row(const Gemv& g, int b, int r) {
  return g.vec + b * g.vec_sb + r * g.s_r;
}

// Whether vector r (< R, the compile-time bound) is one of the product's. The loops over vectors run all R,
// loading zeros past g.rows: a predicated load, where a branch out of the loop would keep the compiler from
// issuing the next vector's load before the FMAs on this one (a round trip to L1 per vector).
template <int R>
__device__ __forceinline__ bool live_row(const Gemv& g, int r) {
  return R == 1 || r < g.rows;
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
          const float4 y = live_row<R>(g, r)
                               ? __ldg(reinterpret_cast<const float4*>(vec_row(g, b, r) + p0) + t)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
          a[r][0] = fmaf(x.x, y.x, a[r][0]), a[r][1 % C] = fmaf(x.y, y.y, a[r][1 % C]);
          a[r][2 % C] = fmaf(x.z, y.z, a[r][2 % C]), a[r][3 % C] = fmaf(x.w, y.w, a[r][3 % C]);
        }
      }
      q = p0 + 4 * n4;
    }
    for (int t = q + lane; t < p1; t += G) {
      const float x = __ldcs(row + t);
#pragma unroll
      for (int r = 0; r < R; ++r)
        a[r][0] = fmaf(x, live_row<R>(g, r) ? __ldg(vec_row(g, b, r) + t * g.s_v) : 0.f, a[r][0]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
      acc[r] = C == 4 ? (a[r][0] + a[r][1 % C]) + (a[r][2 % C] + a[r][3 % C]) : a[r][0];
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

// The matrix along K with 3 or more vectors: reading each vector from L1 once per 16-byte load of the matrix
// (gemv_dot) makes L1 the bound. Here a group of 8 lanes takes O rows of the matrix at once, so each 16-byte
// run of a vector feeds O rows, and the block first stages its K range of every vector in shared memory,
// where the warp's four groups read the same runs (one wavefront). 32 groups a block, 32 * O rows.
constexpr int kTileLanes = 8;
constexpr int kTileGroups = kThreads / kTileLanes;
// Shared memory for the staged vectors (floats): rows x k_per_split stays within it.
constexpr int kTileVectorFloats = 12288;

template <int R, int O, bool V4>
__global__ void __launch_bounds__(kThreads) gemv_dot_tile(Problem p, Gemv g, float* ws) {
  extern __shared__ float4 staged4[];  // [g.rows][ld / 4]
  float* staged = reinterpret_cast<float*>(staged4);
  const int b = blockIdx.z;
  const int p0 = blockIdx.y * g.k_per_split, n = min(p.k, p0 + g.k_per_split) - p0;
  const int ld = g.k_per_split;  // a multiple of 4 (the launcher's)
  // Staged as one flat loop over every vector, so that each thread has several loads in flight (16-byte
  // ones where the vectors run along K in aligned rows); zeros past the split's end.
  const int runs = ld / 4;
  if (g.s_v == 1 && (g.rows == 1 || g.s_r % 4 == 0) &&
      (reinterpret_cast<std::uintptr_t>(vec_row(g, b, 0) + p0) & 15u) == 0) {
#pragma unroll 4
    for (int e = threadIdx.x; e < g.rows * runs; e += kThreads) {
      const int r = e / runs, t = 4 * (e % runs);
      const float* v = vec_row(g, b, r) + p0 + t;
      float4 y;
      if (t + 4 <= n) {
        y = __ldg(reinterpret_cast<const float4*>(v));
      } else {
        y.x = t < n ? __ldg(v) : 0.f, y.y = t + 1 < n ? __ldg(v + 1) : 0.f;
        y.z = t + 2 < n ? __ldg(v + 2) : 0.f, y.w = t + 3 < n ? __ldg(v + 3) : 0.f;
      }
      staged4[e] = y;
    }
  } else {
#pragma unroll 4
    for (int e = threadIdx.x; e < g.rows * ld; e += kThreads) {
      const int r = e / ld, t = e % ld;
      staged[e] = t < n ? __ldg(vec_row(g, b, r) + static_cast<std::int64_t>(p0 + t) * g.s_v) : 0.f;
    }
  }
  __syncthreads();
  const int j = threadIdx.x % kTileLanes;
  const int i0 = (blockIdx.x * kTileGroups + threadIdx.x / kTileLanes) * O;
  // Rows past the last read the last row (no branch in the loop); their sums are dropped.
  const float* row[O];
#pragma unroll
  for (int o = 0; o < O; ++o)
    row[o] = g.mat + b * g.mat_sb + static_cast<std::int64_t>(min(i0 + o, g.len - 1)) * g.s_i + p0;
  float acc[O][R];
#pragma unroll
  for (int o = 0; o < O; ++o)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[o][r] = 0.f;
  int q = 0;
  if constexpr (V4) {
    const int n4 = n / 4;
#pragma unroll 2
    for (int t = j; t < n4; t += kTileLanes) {
      float4 x[O];
#pragma unroll
      for (int o = 0; o < O; ++o) x[o] = __ldcs(reinterpret_cast<const float4*>(row[o]) + t);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r >= g.rows) break;
        const float4 y = staged4[r * runs + t];
#pragma unroll
        for (int o = 0; o < O; ++o) {
          acc[o][r] = fmaf(x[o].x, y.x, acc[o][r]), acc[o][r] = fmaf(x[o].y, y.y, acc[o][r]);
          acc[o][r] = fmaf(x[o].z, y.z, acc[o][r]), acc[o][r] = fmaf(x[o].w, y.w, acc[o][r]);
        }
      }
    }
    q = 4 * n4;
  }
#pragma unroll 4
  for (int t = q + j; t < n; t += kTileLanes) {
    float x[O];
#pragma unroll
    for (int o = 0; o < O; ++o) x[o] = __ldcs(row[o] + t);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= g.rows) break;
      const float y = staged[r * ld + t];
#pragma unroll
      for (int o = 0; o < O; ++o) acc[o][r] = fmaf(x[o], y, acc[o][r]);
    }
  }
  // The group's 8 lanes add their sums; lane j then finishes the entries (o, r) with (o * R + r) % 8 == j.
#pragma unroll
  for (int o = 0; o < O; ++o)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int off = kTileLanes / 2; off > 0; off /= 2)
        acc[o][r] += __shfl_xor_sync(0xffffffffu, acc[o][r], off);
#pragma unroll
  for (int o = 0; o < O; ++o)
#pragma unroll
    for (int r = 0; r < R; ++r)
      if ((o * R + r) % kTileLanes == j && r < g.rows && i0 + o < g.len)
        finish(p, g, acc[o][r], r, i0 + o, b, ws);
}

// The matrix along the outputs: a block of tx x ty threads (tx * ty = kThreads) takes 4 * tx consecutive
// outputs; thread (x, y) reads 4 outputs (a 16-byte load where V4: the matrix is contiguous along them with
// 16-byte aligned rows) of 4 consecutive K steps at a time, at K offsets 4 y, 4 y + 4 ty, ..., so a warp
// reads whole 16-byte runs of 4 rows per step and each thread has four loads in flight. A vector's
// elements are the same for every thread of a y (one load serves them). The ty partial sums of an output
// are added through shared memory at the end.
template <int R, bool V4>
__global__ void __launch_bounds__(kThreads) gemv_column(Problem p, Gemv g, float* ws) {
  __shared__ float4 part[kThreads];
  const int tx = threadIdx.x, ty = threadIdx.y, nx = blockDim.x, ny = blockDim.y;
  const int b = blockIdx.z;
  const int i0 = (blockIdx.x * nx + tx) * 4;
  const int p0 = blockIdx.y * g.k_per_split, p1 = min(p.k, p0 + g.k_per_split);
  const float* m = g.mat + b * g.mat_sb;
  const bool full = i0 + 3 < g.len;
  const bool vec4 = g.s_v == 1 && (g.rows == 1 || g.s_r % 4 == 0) &&
                    (reinterpret_cast<std::uintptr_t>(vec_row(g, b, 0) + p0) & 15u) == 0;
  float acc[R][4];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[r][e] = 0.f;
  // Four outputs of K step t (zeros past the last output).
  auto load = [&](int t) {
    const float* at = m + static_cast<std::int64_t>(t) * g.s_p;
    if (V4 && full) {
      const float4 v = __ldcs(reinterpret_cast<const float4*>(at + i0));
      return v;
    }
    float4 v;
    v.x = i0 < g.len ? __ldcs(at + static_cast<std::int64_t>(i0) * g.s_i) : 0.f;
    v.y = i0 + 1 < g.len ? __ldcs(at + static_cast<std::int64_t>(i0 + 1) * g.s_i) : 0.f;
    v.z = i0 + 2 < g.len ? __ldcs(at + static_cast<std::int64_t>(i0 + 2) * g.s_i) : 0.f;
    v.w = i0 + 3 < g.len ? __ldcs(at + static_cast<std::int64_t>(i0 + 3) * g.s_i) : 0.f;
    return v;
  };
  auto fma4 = [](float(&a)[4], const float4& x, float y) {
    a[0] = fmaf(x.x, y, a[0]), a[1] = fmaf(x.y, y, a[1]), a[2] = fmaf(x.z, y, a[2]),
    a[3] = fmaf(x.w, y, a[3]);
  };
  int t = p0 + 4 * ty;
#pragma unroll 2
  for (; t + 4 <= p1; t += 4 * ny) {
    float4 x[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) x[u] = load(t + u);
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
        for (int u = 0; u < 4; ++u) y[u] = __ldg(v + static_cast<std::int64_t>(t + u) * g.s_v);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) fma4(acc[r], x[u], y[u]);
    }
  }
  for (; t < p1; ++t) {  // the last 1-3 K steps (one thread row)
    const float4 x = load(t);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (R > 1 && r >= g.rows) break;
      fma4(acc[r], x, __ldg(vec_row(g, b, r) + static_cast<std::int64_t>(t) * g.s_v));
    }
  }
  // Per vector: each thread's four sums into shared memory, then thread e of the first 4 * tx adds output
  // e's ty partial sums and finishes it.
  const int lin = ty * nx + tx;
  const int out = blockIdx.x * nx * 4 + lin;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (R > 1 && r >= g.rows) break;
    part[lin] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    __syncthreads();
    if (lin < 4 * nx && out < g.len) {
      const float* f = reinterpret_cast<const float*>(part);
      float s = 0.f;
      for (int y = 0; y < ny; ++y) s += f[y * 4 * nx + lin];
      finish(p, g, s, r, out, b, ws);
    }
    __syncthreads();
  }
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
void launch_dot(const Problem& p, const Gemv& g, int G, dim3 grid, float* ws, cudaStream_t stream) {
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

template <int R, bool V4>
void launch_dot_tile(const Problem& p, const Gemv& g, int O, dim3 grid, float* ws, cudaStream_t stream) {
  const std::size_t smem = sizeof(float) * static_cast<std::size_t>(g.rows) * g.k_per_split;
  if (O == 4)
    gemv_dot_tile<R, 4, V4><<<grid, kThreads, smem, stream>>>(p, g, ws);
  else if (O == 2)
    gemv_dot_tile<R, 2, V4><<<grid, kThreads, smem, stream>>>(p, g, ws);
  else
    gemv_dot_tile<R, 1, V4><<<grid, kThreads, smem, stream>>>(p, g, ws);
}

// Calls f with the vector count as a compile-time bound (1, 2, 4, 8 or 16, at least g.rows).
template <class F>
void with_rows(int rows, F&& f) {
  if (rows == 1)
    f(std::integral_constant<int, 1>{});
  else if (rows == 2)
    f(std::integral_constant<int, 2>{});
  else if (rows <= 4)
    f(std::integral_constant<int, 4>{});
  else if (rows <= 8)
    f(std::integral_constant<int, 8>{});
  else
    f(std::integral_constant<int, 16>{});
}

// The largest split of K (a power of two under 64) that keeps the blocks within about 4 per SM and at least
// min_k of K per split, and at least `min_split`.
int split_k(const Problem& p, std::int64_t blocks, std::int64_t min_k, int min_split, int sms) {
  int split = 1;
  while (blocks * p.batch * split * 2 <= 4LL * sms && p.k / (split * 2) >= min_k && split < 64) split *= 2;
  return std::max(split, min_split);
}

}  // namespace

void launch_gemv(const Problem& p, const Config&, cudaStream_t stream) {
  Gemv g = gemv_of(p);
  MT_CHECK(g.rows >= 1 && g.rows <= kGemvMaxRows, InvalidArgument, "gemv: ", p.m, "x", p.n,
           " is not a thin product (at most ", kGemvMaxRows, " rows or columns)");
  const int sms = current_sm_count();
  const bool dot = gemv_matrix_along_k(p);
  const double matrix = static_cast<double>(g.len) * p.k * p.batch;
  // The dot tile's staged vectors bound its K per split, so a K past 65,535 of those splits (the grid's y
  // limit) takes the dot kernel.
  const int tile_k = kTileVectorFloats / g.rows / 4 * 4;
  const bool tile = dot && (g.rows > kThinTileMinRows || (g.rows >= 3 && matrix >= kThinTileMinMatrix)) &&
                    (p.k + tile_k - 1) / tile_k <= 65535;
  const auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  // The split of K and the grid along the outputs, per kernel:
  //   dot       G threads an output; a group needs a long row (2,048 of K per split) to keep its loads in
  //             flight;
  //   dot tile  32 * O rows a block, O = 4 where that still gives 2 blocks per SM over splits of 256 of K
  //             (else 2, else 1); the staged vectors bound K per split;
  //   column    4 * tx outputs a block (tx threads along them: 32, or 16 / 8 for fewer outputs), at least 2
  //             steps of 4 K rows a thread per split.
  int G = 1, O = 1, split = 1, nx = 32;
  std::int64_t blocks_x = 0;
  if (tile) {
    const std::int64_t k_units = ceil_div(p.k, 256);
    for (O = 4; O > 1 && ceil_div(g.len, kTileGroups * O) * p.batch * k_units < 2LL * sms; O /= 2) {
    }
    blocks_x = ceil_div(g.len, kTileGroups * O);
    split = split_k(p, blocks_x, 256, static_cast<int>(ceil_div(p.k, tile_k)), sms);
  } else if (dot) {
    G = group_size(static_cast<std::int64_t>(g.len) * p.batch, p.k, sms);
    blocks_x = ceil_div(static_cast<std::int64_t>(g.len) * G, kThreads);
    split = split_k(p, blocks_x, 2048, 1, sms);
  } else {
    nx = g.len > 64 ? 32 : g.len > 32 ? 16 : 8;
    blocks_x = ceil_div(g.len, 4 * nx);
    split = split_k(p, blocks_x, 2 * 4 * (kThreads / nx), 1, sms);
  }
  g.k_per_split = static_cast<int>(ceil_div(ceil_div(p.k, split), 4) * 4);  // 16-byte steps stay aligned
  split = static_cast<int>(ceil_div(p.k, g.k_per_split));
  float* ws = split > 1 ? split_scratch(sizeof(float) * static_cast<std::size_t>(split) * p.batch * g.len *
                                            static_cast<std::size_t>(g.rows),
                                        stream)
                        : nullptr;
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(split),
                  static_cast<unsigned>(p.batch));
  const bool mat_runs16 = (p.batch == 1 || g.mat_sb % 4 == 0) && aligned16(g.mat);
  if (tile) {
    const bool v4 = mat_runs16 && g.s_i % 4 == 0;
    with_rows(g.rows, [&](auto r) {
      constexpr int R = decltype(r)::value;
      if constexpr (R >= 4) {
        if (v4)
          launch_dot_tile<R, true>(p, g, O, grid, ws, stream);
        else
          launch_dot_tile<R, false>(p, g, O, grid, ws, stream);
      }
    });
  } else if (dot) {
    with_rows(g.rows, [&](auto r) { launch_dot<decltype(r)::value>(p, g, G, grid, ws, stream); });
  } else {
    const bool v4 = mat_runs16 && g.s_i == 1 && g.s_p % 4 == 0;
    const dim3 block(static_cast<unsigned>(nx), static_cast<unsigned>(kThreads / nx));
    with_rows(g.rows, [&](auto r) {
      constexpr int R = decltype(r)::value;
      if (v4)
        gemv_column<R, true><<<grid, block, 0, stream>>>(p, g, ws);
      else
        gemv_column<R, false><<<grid, block, 0, stream>>>(p, g, ws);
    });
  }
  MT_CUDA_CHECK_LAUNCH();
  if (split > 1) launch_splitk_reduce(p, ws, split, stream);
}

}  // namespace mt::detail::gemm
