// Device-side pieces every SGEMM kernel family shares (ops/gemm/ladder.cu, reduce.cu, simt/, tensorcore/):
// batch addressing, tile rasterisation, the block's split-K range and the fused epilogue. The PTX
// primitives (cp.async, mbarriers, bulk copies, clusters, PDL) come from
// runtime/detail/device_primitives.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <cooperative_groups.h>

#include "minitensor/ops/functors.h"
#include "minitensor/ops/gemm/detail/kernel_table.h"
#include "minitensor/ops/gemm/detail/problem.h"
#include "minitensor/runtime/detail/device_primitives.cuh"

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

// ---------------------------------------------------------------- tiles and epilogue

// Block -> (tile_m, tile_n), grouped by 8 tile rows so that blocks running together share panels of A and B
// in L2 (the big shapes do not fit L2 otherwise).
__device__ __forceinline__ void raster(int bid, int tiles_m, int tiles_n, int& tm, int& tn) {
  constexpr int kGroup = 8;
  const int width = kGroup * tiles_n;
  const int first_m = (bid / width) * kGroup;
  const int rows = ::min(tiles_m - first_m, kGroup);
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
  t.k_begin = t.split * k_per_split, t.k_end = ::min(p.k, t.k_begin + k_per_split);
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
// with 16-byte aligned rows, so a full in-range run of 4 is one float4. kStream: that float4 is a streaming
// store (st.global.cs), for kernels whose C is written once and not read back soon.
template <int N, bool kStream = false>
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
      if constexpr (kStream)
        __stcs(dst, v);
      else
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
