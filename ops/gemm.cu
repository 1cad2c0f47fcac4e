// SGEMM kernels, C = act(alpha * A * B + beta * C + bias), float32, then their launchers and the dispatcher.
//
// Napkin maths (one m x n x k problem): 2mnk FLOPs; at least 4(mk + kn + mn) bytes of DRAM traffic. At 4096^3
// that is 137 GFLOP over 201 MB: 680 FLOP/byte, far above the H100/H200 balance point (~67 TFLOP/s FP32 FMA
// vs 3.3-4.8 TB/s), so the big shapes are bound by FMA issue and shared-memory bandwidth, not DRAM. A block
// tile BM x BN reads (BM + BN) * BK floats from shared memory per BM * BN * BK FMAs; a thread tile TM x TN
// reads TM + TN registers' worth per TM * TN FMAs, which is why 8x8 (4 FMAs per loaded float) is the working
// size.
//
// The ladder, slowest first (every rung handles every problem; bench/gemm times them all):
//   gemm_naive       one thread per element of C, operands straight from global memory (L1/L2 do the caching)
//   gemm_smem_tiled  32x32 tiles staged in shared memory, one thread per element: 32x fewer global loads
//   gemm_reg_tiled   128x128x8 tiles, 8x8 outputs per thread from an outer product over registers
//   gemm_simt        production: warp tiles, multi-stage cp.async pipeline, A stored transposed, padded
//                    (bank-conflict-free) shared rows, float4 loads/stores where aligned, register double
//                    buffering of fragments, split-K, fused epilogue
// gemm_simt lives in ops/gemm_simt.cuh, instantiated by ops/gemm_simt_*.cu; the tensor-core kernels (TF32,
// 3xTF32) are in ops/gemm_tf32.cu.
#include <algorithm>
#include <climits>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "memory/allocator.h"
#include "ops/gemm_device.cuh"
#include "ops/gemm_launch.h"
#include "ops/gemm_simt.cuh"
#include "ops/gemm_wgmma.h"
#include "ops/kernels.h"
#include "runtime/error.h"
#include "runtime/launch.h"

namespace mt::detail::gemm {

// ================================================================ kernels

// Rung 1. Threads along x walk n, so B reads and C writes coalesce; A(i, p) is a warp-wide broadcast.
__global__ void gemm_naive(Problem p) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int b = blockIdx.z;
  if (i >= p.m || j >= p.n) return;
  const float* a = a_batch(p, b) + i * p.a_sm;
  const float* bb = b_batch(p, b) + j * p.b_sn;
  float acc = 0.f;
  for (int q = 0; q < p.k; ++q) acc = fmaf(a[q * p.a_sk], bb[q * p.b_sk], acc);
  store_run<1>(p, c_batch(p, b), i, j, &acc, false);
}

// Rung 2. Each element loaded from global memory is reused 32 times from shared memory. The +1 column of
// padding keeps the column reads of As conflict-free.
constexpr int kTile2 = 32;
__global__ void __launch_bounds__(kTile2* kTile2) gemm_smem_tiled(Problem p) {
  __shared__ float As[kTile2][kTile2 + 1], Bs[kTile2][kTile2 + 1];
  const int tx = threadIdx.x, ty = threadIdx.y, b = blockIdx.z;
  const int i = blockIdx.y * kTile2 + ty, j = blockIdx.x * kTile2 + tx;
  const float* A = a_batch(p, b);
  const float* B = b_batch(p, b);
  float acc = 0.f;
  for (int k0 = 0; k0 < p.k; k0 += kTile2) {
    As[ty][tx] = (i < p.m && k0 + tx < p.k) ? A[i * p.a_sm + (k0 + tx) * p.a_sk] : 0.f;
    Bs[ty][tx] = (k0 + ty < p.k && j < p.n) ? B[(k0 + ty) * p.b_sk + j * p.b_sn] : 0.f;
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kTile2; ++q) acc = fmaf(As[ty][q], Bs[q][tx], acc);
    __syncthreads();
  }
  if (j < p.n) store_run<1>(p, c_batch(p, b), i, j, &acc, false);
}

// Rung 3. 128x128x8 block tile, 256 threads as 16x16, 8x8 outputs each. Thread (ty, tx) owns rows ty + 16r
// and columns tx + 16c (interleaved), so each store instruction writes 16 consecutive columns. A is stored
// transposed (As[k][m]) so the inner loop reads both operands along the tile. Per k: 16 shared loads feed 64
// FMAs. One stage: loads and compute do not overlap (the next rung fixes that).
constexpr int kRegBM = 128, kRegBN = 128, kRegBK = 8;
__global__ void __launch_bounds__(256) gemm_reg_tiled(Problem p) {
  __shared__ float As[kRegBK][kRegBM], Bs[kRegBK][kRegBN];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16, b = blockIdx.z;
  const int m0 = blockIdx.y * kRegBM, n0 = blockIdx.x * kRegBN;
  const float* A = a_batch(p, b);
  const float* B = b_batch(p, b);
  float acc[8][8] = {};
  for (int k0 = 0; k0 < p.k; k0 += kRegBK) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // 1024 elements of each tile, 4 per thread
      const int e = tid + r * 256;
      const int am = e / kRegBK, ak = e % kRegBK;  // k fastest: row-major A reads 32-byte runs
      As[ak][am] = (m0 + am < p.m && k0 + ak < p.k) ? A[(m0 + am) * p.a_sm + (k0 + ak) * p.a_sk] : 0.f;
      const int bk = e / kRegBN, bn = e % kRegBN;
      Bs[bk][bn] = (k0 + bk < p.k && n0 + bn < p.n) ? B[(k0 + bk) * p.b_sk + (n0 + bn) * p.b_sn] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kRegBK; ++q) {
      float ra[8], rb[8];
#pragma unroll
      for (int r = 0; r < 8; ++r) ra[r] = As[q][ty + 16 * r];
#pragma unroll
      for (int c = 0; c < 8; ++c) rb[c] = Bs[q][tx + 16 * c];
#pragma unroll
      for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[r][c] = fmaf(ra[r], rb[c], acc[r][c]);
    }
    __syncthreads();
  }
  float* C = c_batch(p, b);
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int c = 0; c < 8; ++c)
      if (n0 + tx + 16 * c < p.n) store_run<1>(p, C, m0 + ty + 16 * r, n0 + tx + 16 * c, &acc[r][c], false);
}

// x / d and x % d, in 32-bit arithmetic where both fit (64-bit division is a long instruction sequence).
__device__ __forceinline__ void div_mod(std::int64_t x, std::int64_t d, std::int64_t& q, std::int64_t& r) {
  if (x <= INT_MAX && d <= INT_MAX) {
    const int qi = static_cast<int>(x) / static_cast<int>(d);
    q = qi, r = x - static_cast<std::int64_t>(qi) * d;
  } else {
    q = x / d, r = x - q * d;
  }
}

// Split-K reduction (and the whole job when K == 0): sums the partials in split order, so results do not
// depend on scheduling, then runs the epilogue. Memory bound: (splits + 1 or 2) * 4 bytes per element of C.
__global__ void gemm_splitk_reduce(Problem p, const float* ws, int splits) {
  pdl_wait();               // the split kernel's partials (launch_splitk_reduce's overlap)
  pdl_launch_dependents();  // a GEMM launched next may start its blocks (they wait for this grid first)
  const std::int64_t mn = static_cast<std::int64_t>(p.m) * p.n, total = mn * p.batch;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t b, r, i, j;
    div_mod(e, mn, b, r);
    div_mod(r, p.n, i, j);
    float s = 0.f;
    for (int sp = 0; sp < splits; ++sp) s += ws[sp * total + e];
    float* c = c_batch(p, static_cast<int>(b)) + i * p.c_sm + j * p.c_sn;
    *c = epilogue_value(p, s, c, static_cast<int>(j));
  }
}

// Adds the 4 partials at w (a 16-byte aligned run) of each split, the splits `stride` floats apart, into s in
// split order, with up to 8 splits' loads in flight before their adds.
__device__ __forceinline__ void add_splits4(const float* w, std::int64_t stride, int splits, float* s) {
  constexpr int kInFlight = 8;
  for (int sp0 = 0; sp0 < splits; sp0 += kInFlight) {
    float4 v[kInFlight];
#pragma unroll
    for (int q = 0; q < kInFlight; ++q)
      if (sp0 + q < splits) v[q] = __ldcg(reinterpret_cast<const float4*>(w + (sp0 + q) * stride));
#pragma unroll
    for (int q = 0; q < kInFlight; ++q)
      if (sp0 + q < splits) s[0] += v[q].x, s[1] += v[q].y, s[2] += v[q].z, s[3] += v[q].w;
  }
}

// The split-K reduction over runs of 4 columns (n a multiple of 4, so a run never crosses a row): float4
// loads from L2, up to 8 splits' loads in flight before their adds (still added in split order: the same sums
// as the scalar kernel and the cluster reduction), float4 stores where C takes them (c_vec).
__global__ void gemm_splitk_reduce4(Problem p, const float* ws, int splits, bool c_vec) {
  pdl_wait();
  pdl_launch_dependents();
  const std::int64_t mn = static_cast<std::int64_t>(p.m) * p.n, total = mn * p.batch, runs = total / 4;
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; r < runs;
       r += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t e = 4 * r;
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    add_splits4(ws + e, total, splits, s);
    std::int64_t b, rem, i, j;
    div_mod(e, mn, b, rem);
    div_mod(rem, p.n, i, j);
    store_run<4>(p, c_batch(p, static_cast<int>(b)), static_cast<int>(i), static_cast<int>(j), s, c_vec);
  }
}

// Row softmax after the epilogue (Problem::softmax): runs of 4 columns per thread kept in registers, so rows
// up to 256 threads x kSoftmaxRuns runs (2048 columns) are read once; longer rows are read again for each
// step. Held to two blocks per SM (128 registers: each run's loads of up to 8 splits are in flight at once).
constexpr int kSoftmaxRuns = 2;

// The block's max_combine (op == 0) or sum (op == 1) of v; every thread gets it. Shared memory: 32 floats.
__device__ float block_combine(float v, int op, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = op == 0 ? fn::max_combine(v, u) : v + u;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  __syncthreads();  // red is free: every thread has read the previous result
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < n_warps; ++w) v = op == 0 ? fn::max_combine(v, red[w]) : v + red[w];
  return v;
}

// The split-K reduction followed by a softmax along each row (Problem::softmax), one block per row of C
// (blocks cover batch * m rows): each thread adds the splits of its runs of 4 columns in split order (the
// sums of gemm_splitk_reduce4) and runs the epilogue; the block takes the row max, the sum of exp(v - max),
// and writes exp(v - max) times the sum's reciprocal (a NaN or +Inf anywhere gives a NaN row, as in the
// softmax reference). `vec`: n % 4 == 0, so partial runs load as float4; c_vec: C takes float4 stores.
__global__ void __launch_bounds__(256, 2)
    gemm_splitk_reduce_softmax(Problem p, const float* ws, int splits, bool vec, bool c_vec) {
  __shared__ float red[32];
  pdl_wait();
  pdl_launch_dependents();
  const std::int64_t total = static_cast<std::int64_t>(p.m) * p.n * p.batch;
  for (std::int64_t row = blockIdx.x; row < static_cast<std::int64_t>(p.m) * p.batch; row += gridDim.x) {
    std::int64_t b, i;
    div_mod(row, p.m, b, i);
    const float* w = ws + row * p.n;  // row `row` of split 0 ([split][batch][m][n])
    float* c = c_batch(p, static_cast<int>(b)) + i * p.c_sm;
    const int n_runs = (p.n + 3) / 4, per_thread = (n_runs + blockDim.x - 1) / blockDim.x;
    // The epilogue values of run q (columns 4q..4q+3; those past n are not used). The bias and C's old values
    // load before the partials, so their latencies overlap.
    auto values = [&](int q, float* v) {
      const int j0 = 4 * q;
      float bias[4] = {0.f, 0.f, 0.f, 0.f}, old[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (j0 + e >= p.n) continue;
        if (p.bias) bias[e] = p.bias[(j0 + e) * p.bias_s];
        if (p.beta != 0.f) old[e] = c[(j0 + e) * p.c_sn];
      }
      float s[4] = {0.f, 0.f, 0.f, 0.f};
      if (vec) {
        add_splits4(w + j0, total, splits, s);
      } else {
        for (int sp = 0; sp < splits; ++sp)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (j0 + e < p.n) s[e] += __ldcg(w + sp * total + j0 + e);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = j0 + e < p.n ? epilogue_apply(p, s[e], old[e], bias[e], p.act) : 0.f;
    };
    float cache[kSoftmaxRuns][4];
    const bool cached = per_thread <= kSoftmaxRuns;
    // Calls f(q, v) for each run q of this thread with its values v (from the cache where the row fits).
    auto for_runs = [&](auto&& f) {
      if (cached) {
#pragma unroll
        for (int r = 0; r < kSoftmaxRuns; ++r) {
          const int q = threadIdx.x + r * blockDim.x;
          if (q < n_runs) f(q, cache[r]);
        }
      } else {
        for (int q = threadIdx.x; q < n_runs; q += blockDim.x) {
          float v[4];
          values(q, v);
          f(q, v);
        }
      }
    };
    if (cached) {
#pragma unroll
      for (int r = 0; r < kSoftmaxRuns; ++r) {
        const int q = threadIdx.x + r * blockDim.x;
        if (q < n_runs) values(q, cache[r]);
      }
    }
    float mx = -INFINITY;
    for_runs([&](int q, const float* v) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (4 * q + e < p.n) mx = fn::max_combine(mx, v[e]);
    });
    mx = block_combine(mx, 0, red);
    float sum = 0.f;
    for_runs([&](int q, const float* v) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (4 * q + e < p.n) sum += expf(v[e] - mx);
    });
    const float inv = 1.f / block_combine(sum, 1, red);
    // Each thread writes only the elements it read C at (beta != 0): cached rows read them before the
    // barriers above, longer rows read each one again just before writing it.
    for_runs([&](int q, const float* v) {
      const int j0 = 4 * q;
      float o[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) o[e] = expf(v[e] - mx) * inv;
      if (c_vec && j0 + 4 <= p.n) {
        *reinterpret_cast<float4*>(c + j0) = make_float4(o[0], o[1], o[2], o[3]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (j0 + e < p.n) c[(j0 + e) * p.c_sn] = o[e];
      }
    });
  }
}

// Packing (Config::pack): dst[b][r][c] = src[b * s_b + r * s_r + c * s_c] for r < rows, c < cols, and 0 for
// c in [cols, ld): an operand copied in rows along c (its contiguous dim, see pack_shape), padded to 16 bytes
// (ld a multiple of 4). 32x32 tiles through shared memory, so the reads walk the source's smaller stride
// across lanes and the writes walk c (the transposing case coalesces both ways). The +1 column keeps both
// walks conflict-free.
__global__ void __launch_bounds__(256)
    gemm_pack_operand(const float* __restrict__ src, std::int64_t s_r, std::int64_t s_c, std::int64_t s_b,
                      int rows, int cols, int ld, float* __restrict__ dst, std::int64_t d_b) {
  __shared__ float t[32][33];
  const bool lanes_on_c = (s_c < 0 ? -s_c : s_c) <= (s_r < 0 ? -s_r : s_r);
  const int b = blockIdx.z, c0 = blockIdx.x * 32;
  const float* sb = src + b * s_b;
  float* db = dst + b * d_b;
  for (int r0 = blockIdx.y * 32; r0 < rows; r0 += gridDim.y * 32) {
#pragma unroll
    for (int i = threadIdx.y; i < 32; i += 8) {
      const int lr = lanes_on_c ? i : threadIdx.x, lc = lanes_on_c ? threadIdx.x : i;
      const int r = r0 + lr, c = c0 + lc;
      t[lr][lc] = r < rows && c < cols ? sb[r * s_r + c * s_c] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int i = threadIdx.y; i < 32; i += 8) {
      const int r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < ld) db[static_cast<std::int64_t>(r) * ld + c] = t[i][threadIdx.x];
    }
    __syncthreads();
  }
}

// Packing an operand contiguous along its rows (no transpose; rows at any alignment): dst[b][r][c] =
// src[b * s_b + r * s_r + c] for c < cols and 0 for c in [cols, ld). Lane-consecutive columns, so each warp
// load reads one 128-byte run and each store writes one aligned 128-byte line. A warp copies 1024 columns of
// a row, so a short batch of long rows still fills the machine; A and B share one launch. (4095x4097x1023:
// both operands in 20-22 us, 67 MB at about 63 % of the DRAM peak, the same as two launches of 4 scalar loads
// and a float4 store per lane; bench/gemm/NOTES.md round 17.)
struct CopyJob {
  const float* src = nullptr;
  float* dst = nullptr;  // 16-byte aligned, rows ld apart (ld a multiple of 4)
  std::int64_t s_r = 0, s_b = 0;
  int rows = 0, cols = 0, ld = 0, batches = 0;
};
struct CopyJobs {
  static constexpr int kMax = 2, kWarps = 8, kChunk = 1024;  // jobs, warps per block, columns per warp
  CopyJob job[kMax];
  std::int64_t first_block[kMax + 1] = {};  // job j: blocks [first_block[j], first_block[j + 1])
  int n = 0;
  void add(const CopyJob& j) {
    MT_CHECK(n < kMax, InvalidArgument, "gemm: more than ", kMax, " row copies in one launch");
    job[n] = j;
    const std::int64_t warps = static_cast<std::int64_t>(j.batches) * j.rows * ((j.ld + kChunk - 1) / kChunk);
    first_block[n + 1] = first_block[n] + (warps + kWarps - 1) / kWarps;
    ++n;
  }
};

__global__ void __launch_bounds__(256) gemm_pack_rows(CopyJobs jobs) {
  pdl_wait();               // launched to overlap the kernel before it: its writes first
  pdl_launch_dependents();  // the GEMM after it may start its blocks; they wait for this grid's writes
  const bool second = jobs.n > 1 && blockIdx.x >= jobs.first_block[1];
  // Field by field: selecting or indexing the whole parameter struct would copy it to the stack.
  const CopyJob &j0 = jobs.job[0], &j1 = jobs.job[1];
  const float* src = second ? j1.src : j0.src;
  float* dst = second ? j1.dst : j0.dst;
  const std::int64_t s_r = second ? j1.s_r : j0.s_r, s_b = second ? j1.s_b : j0.s_b;
  const int rows = second ? j1.rows : j0.rows, cols = second ? j1.cols : j0.cols, ld = second ? j1.ld : j0.ld;
  const int batches = second ? j1.batches : j0.batches;
  const int chunks = (ld + CopyJobs::kChunk - 1) / CopyJobs::kChunk;
  const std::int64_t w = (blockIdx.x - (second ? jobs.first_block[1] : 0)) * CopyJobs::kWarps + threadIdx.y;
  if (w >= static_cast<std::int64_t>(chunks) * rows * batches) return;
  const std::int64_t rb = w / chunks, r = rb % rows, b = rb / rows;
  const float* s = src + b * s_b + r * s_r;
  float* d = dst + (b * rows + r) * ld;
  const int c_end = ::min(ld, (static_cast<int>(w % chunks) + 1) * CopyJobs::kChunk);
#pragma unroll 8
  for (int c = static_cast<int>(w % chunks) * CopyJobs::kChunk + threadIdx.x; c < c_end; c += 32)
    d[c] = c < cols ? __ldg(s + c) : 0.f;
}

// ================================================================ launchers

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::Naive:
      return "gemm_naive";
    case Kernel::SmemTiled:
      return "gemm_smem_tiled";
    case Kernel::RegTiled:
      return "gemm_reg_tiled";
    case Kernel::Simt128x128:
      return "simt_128x128x8_w64x32_t8x8_s4";
    case Kernel::Simt128x128k16:
      return "simt_128x128x16_w64x32_t8x8_s3";
    case Kernel::Simt128x128x2:
      return "simt_128x128x8_w64x32_t8x8_s4_2cta";
    case Kernel::Simt256x128:
      return "simt_256x128x8_w64x64_t16x8_s3";
    case Kernel::Simt256x128k16:
      return "simt_256x128x16_w64x64_t16x8_s3";
    case Kernel::Simt128x64:
      return "simt_128x64x8_w64x32_t8x8_s4";
    case Kernel::Simt64x64:
      return "simt_64x64x8_w32x32_t8x4_s4";
    case Kernel::Simt32x128:
      return "simt_32x128x8_w32x32_t8x4_s4";
    case Kernel::Simt32x64:
      return "simt_32x64x8_w32x32_t8x4_s4";
    case Kernel::Simt64x128:
      return "simt_64x128x8_w64x32_t8x8_s4";
    case Kernel::Simt64x256:
      return "simt_64x256x8_w64x64_t16x8_s3";
    case Kernel::Simt128x64k16:
      return "simt_128x64x16_w64x32_t8x8";
    case Kernel::SimtTma128x64:
      return "simt_128x64x32_w64x32_t8x8_s3_tma";
    case Kernel::SimtTma64x128:
      return "simt_64x128x32_w64x32_t8x8_s3_tma";
    case Kernel::Tensor128x128:
      return "mma_128x128x16_w64x32_s4";
    case Kernel::Tensor128x64:
      return "mma_128x64x16_w32x32_s4";
    case Kernel::Tensor64x64:
      return "mma_64x64x16_w32x32_s4";
    case Kernel::Wgmma:
      return "wgmma";
  }
  return "?";
}

std::vector<Kernel> simt_kernels() {
  return {Kernel::Simt128x128,    Kernel::Simt128x128k16, Kernel::Simt128x128x2, Kernel::Simt256x128,
          Kernel::Simt256x128k16, Kernel::Simt128x64,     Kernel::Simt64x64,     Kernel::Simt32x128,
          Kernel::Simt32x64,      Kernel::Simt64x128,     Kernel::Simt64x256,    Kernel::Simt128x64k16,
          Kernel::SimtTma128x64,  Kernel::SimtTma64x128};
}
bool is_tma_kernel(Kernel k) {
  switch (k) {
    case Kernel::SimtTma128x64:
    case Kernel::SimtTma64x128:
      return true;
    default:
      return false;
  }
}
std::vector<Kernel> tensor_kernels() {
  return {Kernel::Tensor128x128, Kernel::Tensor128x64, Kernel::Tensor64x64, Kernel::Wgmma};
}

namespace {
bool is_tensor(Kernel k) {
  return k == Kernel::Tensor128x128 || k == Kernel::Tensor128x64 || k == Kernel::Tensor64x64 ||
         k == Kernel::Wgmma;
}
bool is_rung(Kernel k) {
  return k == Kernel::Naive || k == Kernel::SmemTiled || k == Kernel::RegTiled;
}
bool is_simt(Kernel k) {
  return !is_tensor(k) && !is_rung(k);
}
// The SIMT configurations built without the 4-byte cp.async ring (Staging::CpAsync: its scalar loaders would
// spill).
bool registers_only(Kernel k) {
  return k == Kernel::Simt256x128k16 || k == Kernel::Simt64x256 || k == Kernel::Simt128x64k16;
}
// The SIMT configuration built for whole 16-byte operand runs only (its scalar-run variants would spill).
bool whole_runs_only(Kernel k) {
  return k == Kernel::Simt64x256;
}
}  // namespace

void launch_splitk_reduce(const Problem& p, const float* ws, int splits, cudaStream_t stream, bool overlap) {
  const std::int64_t total = static_cast<std::int64_t>(p.m) * p.n * p.batch;
  if (total == 0) return;
  auto run = [&](auto* kernel, std::int64_t items, auto... args) {
    LaunchConfig launch(dim3(grid_stride_blocks(kernel, 256, items, 256)), dim3(256), 0, stream);
    if (overlap) launch.overlap_previous_kernel();
    MT_CUDA_CHECK(cudaLaunchKernelEx(&launch.cfg, kernel, p, ws, splits, args...));
  };
  if (p.softmax) {
    // One block per row: a thread per run of 4 columns, up to 256 (longer rows loop in the kernel).
    const int threads = static_cast<int>(std::min<std::int64_t>(256, (p.n + 127) / 128 * 32));
    const std::int64_t rows = static_cast<std::int64_t>(p.m) * p.batch;
    LaunchConfig launch(dim3(static_cast<unsigned>(std::min<std::int64_t>(rows, 1 << 30))), dim3(threads), 0,
                        stream);
    if (overlap) launch.overlap_previous_kernel();
    MT_CUDA_CHECK(cudaLaunchKernelEx(&launch.cfg, gemm_splitk_reduce_softmax, p, ws, splits, p.n % 4 == 0,
                                     c_vectorisable(p)));
  } else if (splits > 0 && p.n % 4 == 0)
    run(gemm_splitk_reduce4, total / 4, c_vectorisable(p));
  else
    run(gemm_splitk_reduce, total);
  MT_CUDA_CHECK_LAUNCH();
}

bool has_ring16(Kernel k) {
  return k == Kernel::Simt64x64 || k == Kernel::Simt32x128 || k == Kernel::Simt32x64;
}
bool lanes_ready(const Problem& p) {
  return p.a_sk == 1 && p.b_sn == 1;
}
bool ring16_ready(const Problem& p) {
  return p.a_sk == 1 && (p.a_sm % 4 == 0 || p.m == 1) && (p.a_sb % 4 == 0 || p.batch == 1) &&
         aligned16(p.a) && b_vectorisable(p);
}

std::string config_name(const Config& c) {
  std::string s = kernel_name(c.kernel);
  if (c.split_k > 1) s += "_splitk" + std::to_string(c.split_k);
  if (c.split_k > 1 && c.reduce == SplitReduce::Cluster) s += "_dsmem";
  if (c.split_k > 1 && c.reduce == SplitReduce::Kernel) s += "_reducekernel";
  if (is_simt(c.kernel) && c.staging == Staging::CpAsync) s += "_cpasync";
  if (is_simt(c.kernel) && c.staging == Staging::CpAsync16) s += "_cpasync16";
  if (c.pack) s += "_packed";
  if (c.math != MathMode::FP32) s += std::string("_") + math_mode_name(c.math);
  return s;
}

namespace {
// The scratch of one stream: split-K partials and packed operands. Grown on demand and kept: work on one
// stream is ordered, so reuse needs no sync and no per-call allocation.
//
// Launches captured into a CUDA graph run again at every replay, perhaps while eager launches on the same
// stream run elsewhere (a graph replays on the stream it is launched on). So they get scratch of their own,
// keyed apart from the stream's eager scratch, and allocated with the thread's capture mode relaxed (the
// allocation is not part of the graph; the buffer outlives it). A graph keeps the pointers it captured, so
// their buffers are never freed: an outgrown one is retired, not released. Graphs captured from one stream
// share its capture scratch, so they must not be replayed concurrently with each other.
struct StreamScratch {
  Allocation partials, packed;
  std::vector<Allocation> retired;
};
std::mutex g_scratch_mutex;
// Never destroyed: freeing at static destruction could outlive the allocators it came from.
auto& g_scratch = *new std::map<std::tuple<int, cudaStream_t, bool>, StreamScratch>();

// Relaxes the calling thread's stream-capture mode while alive (where `on`).
class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(bool on) : m_on(on) {
    if (m_on) MT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&m_mode));
  }
  ~RelaxedCaptureMode() {
    if (m_on) MT_CUDA_CHECK_NOTHROW(cudaThreadExchangeStreamCaptureMode(&m_mode));
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  bool m_on;
  cudaStreamCaptureMode m_mode = cudaStreamCaptureModeRelaxed;
};

// The scratch of `stream` on the current device, under g_scratch_mutex.
class ScratchSlot {
 public:
  explicit ScratchSlot(cudaStream_t stream) : m_lock(g_scratch_mutex), m_stream(stream) {
    MT_CUDA_CHECK(cudaGetDevice(&m_device));
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    MT_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
    m_captured = status != cudaStreamCaptureStatusNone;
    m_entry = &g_scratch[{m_device, stream, m_captured}];
  }
  StreamScratch& operator*() const { return *m_entry; }
  // Makes `a` (a member of this slot) at least `bytes`, at least `min_bytes` when (re)allocated; true then.
  bool grow(Allocation& a, std::size_t bytes, std::size_t min_bytes) {
    if (a && a.size() >= bytes) return false;
    const RelaxedCaptureMode relaxed(m_captured);
    if (m_captured && a) m_entry->retired.push_back(std::move(a));
    a.reset();
    a = cuda_allocator(m_device).allocate(std::max(bytes, min_bytes), m_stream);
    return true;
  }

 private:
  std::lock_guard<std::mutex> m_lock;
  cudaStream_t m_stream;
  int m_device = 0;
  bool m_captured = false;
  StreamScratch* m_entry = nullptr;
};
}  // namespace

float* split_scratch(std::size_t partial_bytes, cudaStream_t stream) {
  ScratchSlot slot(stream);
  StreamScratch& e = *slot;
  slot.grow(e.partials, partial_bytes, std::size_t{1} << 20);
  return static_cast<float*>(e.partials.data());
}

float* pack_scratch(std::size_t bytes, cudaStream_t stream) {
  ScratchSlot slot(stream);
  StreamScratch& e = *slot;
  slot.grow(e.packed, bytes, std::size_t{1} << 20);
  return static_cast<float*>(e.packed.data());
}

// ---------------------------------------------------------------- packing

namespace {
int batches_of(std::int64_t sb, int batch) {
  return sb == 0 ? 1 : batch;
}
std::int64_t round4(int x) {
  return (static_cast<std::int64_t>(x) + 3) / 4 * 4;
}
// How pack_shape lays out one copied operand: `rows` rows of `cols` elements (the contiguous dim, padded to
// `ld`), element (r, c) read from src[r * s_r + c * s_c].
struct PackedLayout {
  int rows = 0, cols = 0;
  std::int64_t s_r = 0, s_c = 0, ld = 0;
  std::int64_t elements(int batches) const { return static_cast<std::int64_t>(batches) * rows * ld; }
};
// A keeps m contiguous where it is (and k is not); otherwise it goes k-contiguous.
bool a_packs_along_m(const Problem& p) {
  return p.a_sm == 1 && p.a_sk != 1;
}
// B keeps k contiguous where it is (and n is not); otherwise it goes n-contiguous (the fast layout).
bool b_packs_along_k(const Problem& p) {
  return p.b_sk == 1 && p.b_sn != 1;
}
PackedLayout a_layout(const Problem& p) {
  if (a_packs_along_m(p)) return {p.k, p.m, p.a_sk, p.a_sm, round4(p.m)};
  return {p.m, p.k, p.a_sm, p.a_sk, round4(p.k)};
}
PackedLayout b_layout(const Problem& p) {
  if (b_packs_along_k(p)) return {p.n, p.k, p.b_sn, p.b_sk, round4(p.k)};
  return {p.k, p.n, p.b_sk, p.b_sn, round4(p.n)};
}
}  // namespace

bool needs_pack(const Problem& p) {
  return !a_whole_runs(p) || !b_whole_runs(p);
}

Problem pack_shape(const Problem& p) {
  Problem q = p;
  if (!a_whole_runs(p)) {
    const PackedLayout l = a_layout(p);
    q.a = nullptr;
    q.a_sb = batches_of(p.a_sb, p.batch) > 1 ? l.rows * l.ld : 0;
    if (a_packs_along_m(p))
      q.a_sm = 1, q.a_sk = l.ld, q.a_padded = true;
    else
      q.a_sm = l.ld, q.a_sk = 1;
  }
  if (!b_whole_runs(p)) {
    const PackedLayout l = b_layout(p);
    q.b = nullptr;
    q.b_sb = batches_of(p.b_sb, p.batch) > 1 ? l.rows * l.ld : 0;
    if (b_packs_along_k(p))
      q.b_sn = l.ld, q.b_sk = 1;
    else
      q.b_sn = 1, q.b_sk = l.ld, q.b_padded = true;
  }
  return q;
}

namespace {
void launch_pack_rows(const CopyJobs& jobs, cudaStream_t stream) {
  if (jobs.first_block[jobs.n] == 0) return;
  LaunchConfig launch(dim3(static_cast<unsigned>(jobs.first_block[jobs.n])), dim3(32, CopyJobs::kWarps), 0,
                      stream);
  launch.overlap_previous_kernel();
  MT_CUDA_CHECK(cudaLaunchKernelEx(&launch.cfg, gemm_pack_rows, jobs));
  MT_CUDA_CHECK_LAUNCH();
}

// A copy that transposes (the operand's contiguous dim is not the packed rows'): 32x32 tiles.
void launch_pack_transposed(const float* src, std::int64_t s_b, const PackedLayout& l, int batches,
                            float* dst, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((l.ld + 31) / 32),
                  static_cast<unsigned>(std::min(65535, (l.rows + 31) / 32)), static_cast<unsigned>(batches));
  gemm_pack_operand<<<grid, dim3(32, 8), 0, stream>>>(src, l.s_r, l.s_c, s_b, l.rows, l.cols,
                                                      static_cast<int>(l.ld), dst, l.rows * l.ld);
  MT_CUDA_CHECK_LAUNCH();
}

// Copies the operands pack_shape replaces into the stream's scratch (the transposing copies first, then one
// launch of every row copy); returns the problem that reads them.
Problem pack_operands(const Problem& p, cudaStream_t stream) {
  Problem q = pack_shape(p);
  const int ba = batches_of(p.a_sb, p.batch), bb = batches_of(p.b_sb, p.batch);
  const PackedLayout la = a_layout(p), lb = b_layout(p);
  const std::int64_t a_elems = q.a ? 0 : la.elements(ba), b_elems = q.b ? 0 : lb.elements(bb);
  float* base = pack_scratch(sizeof(float) * static_cast<std::size_t>(a_elems + b_elems), stream);
  CopyJobs rows;
  auto pack = [&](const float* src, std::int64_t s_b, const PackedLayout& l, int batches, float* dst) {
    if (l.s_c == 1)
      rows.add({src, dst, l.s_r, s_b, l.rows, l.cols, static_cast<int>(l.ld), batches});
    else
      launch_pack_transposed(src, s_b, l, batches, dst, stream);
  };
  if (!q.a) {
    pack(p.a, p.a_sb, la, ba, base);
    q.a = base;
  }
  if (!q.b) {
    pack(p.b, p.b_sb, lb, bb, base + a_elems);
    q.b = base + a_elems;
  }
  launch_pack_rows(rows, stream);
  return q;
}
}  // namespace

namespace {

struct TileInfo {
  int bm, bn, bk;
};
TileInfo tile_of(Kernel k) {
  switch (k) {
    case Kernel::Simt128x128:
      return {128, 128, 8};
    case Kernel::Simt128x128k16:
      return {128, 128, 16};
    case Kernel::Simt128x128x2:
      return {128, 128, 8};
    case Kernel::Simt256x128:
      return {256, 128, 8};
    case Kernel::Simt256x128k16:
      return {256, 128, 16};
    case Kernel::Simt128x64:
      return {128, 64, 8};
    case Kernel::Simt64x64:
      return {64, 64, 8};
    case Kernel::Simt32x128:
      return {32, 128, 8};
    case Kernel::Simt32x64:
      return {32, 64, 8};
    case Kernel::Simt64x128:
      return {64, 128, 8};
    case Kernel::Simt64x256:
      return {64, 256, 8};
    case Kernel::Simt128x64k16:
      return {128, 64, 16};
    case Kernel::SimtTma128x64:
      return {128, 64, 32};
    case Kernel::SimtTma64x128:
      return {64, 128, 32};
    case Kernel::Tensor128x128:
      return {128, 128, 16};
    case Kernel::Tensor128x64:
      return {128, 64, 16};
    case Kernel::Tensor64x64:
      return {64, 64, 16};
    case Kernel::Wgmma:
      return {128, 128, 32};
    default:
      return {128, 128, 8};
  }
}

// One launch for a problem whose batch fits the grid (<= 65535).
void launch_one(const Problem& p, const Config& cfg, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) {  // C = beta * C (+ bias, activation): the reduction with no partials
    launch_splitk_reduce(p, nullptr, 0, stream);
    return;
  }
  const int split = std::max(1, cfg.split_k);
  if (p.softmax && !(split > 1 && cfg.reduce == SplitReduce::Kernel && !is_rung(cfg.kernel) &&
                     cfg.kernel != Kernel::Wgmma)) {
    // No second kernel adds splits here: the product goes into the split scratch (one plane) first. Where C
    // is not read (beta == 0) and its rows are contiguous, with the epilogue, then the softmax kernel takes
    // it into C (the cost of the unfused pair); else raw, and the reduce kernel runs the epilogue and the
    // softmax from it, as it does after split K.
    float* ws = split_scratch(sizeof(float) * static_cast<std::size_t>(p.batch) * p.m * p.n, stream);
    const std::int64_t mn = static_cast<std::int64_t>(p.m) * p.n;
    const bool rows = p.beta == 0.f && p.c_sn == 1 && p.c_sm == p.n && (p.batch == 1 || p.c_sb == mn);
    Problem q = p;
    q.c = ws, q.c_sm = p.n, q.c_sn = 1, q.c_sb = mn, q.softmax = false;
    if (!rows) q.alpha = 1.f, q.beta = 0.f, q.bias = nullptr, q.act = Activation::None;
    launch_one(q, cfg, stream);
    if (rows)
      launch_softmax(false, ws, p.c, p.batch * static_cast<std::int64_t>(p.m), p.n, 1, stream);
    else
      launch_splitk_reduce(p, ws, 1, stream);
    return;
  }
  switch (cfg.kernel) {
    case Kernel::Naive: {
      const dim3 block(32, 8), grid((p.n + 31) / 32, (p.m + 7) / 8, p.batch);
      gemm_naive<<<grid, block, 0, stream>>>(p);
      MT_CUDA_CHECK_LAUNCH();
      return;
    }
    case Kernel::SmemTiled: {
      const dim3 block(kTile2, kTile2),
          grid((p.n + kTile2 - 1) / kTile2, (p.m + kTile2 - 1) / kTile2, p.batch);
      gemm_smem_tiled<<<grid, block, 0, stream>>>(p);
      MT_CUDA_CHECK_LAUNCH();
      return;
    }
    case Kernel::RegTiled: {
      const dim3 grid((p.n + kRegBN - 1) / kRegBN, (p.m + kRegBM - 1) / kRegBM, p.batch);
      gemm_reg_tiled<<<grid, 256, 0, stream>>>(p);
      MT_CUDA_CHECK_LAUNCH();
      return;
    }
    default:
      break;
  }
  if (cfg.pack) {
    Config plain = cfg;
    plain.pack = false;
    return launch_one(needs_pack(p) ? pack_operands(p, stream) : p, plain, stream);
  }
  if (cfg.kernel == Kernel::Wgmma) {
    // Split K only as chosen here (cluster reduction); the tile is the wgmma dispatcher's for split 1.
    WgmmaConfig wc;
    wc.split = split;
    if (split > 1) wc.bn = 128, wc.cluster_m = 1;
    return launch_wgmma(p, cfg.math, wc, stream);
  }
  if (is_tensor(cfg.kernel)) {
    float* ws = nullptr;
    if (split > 1)
      ws = split_scratch(sizeof(float) * static_cast<std::size_t>(split) * p.batch * p.m * p.n, stream);
    launch_tensor(p, cfg.kernel, cfg.math == MathMode::TF32x3, split, k_per_split(p, split, 16), ws, stream);
    if (split > 1) launch_splitk_reduce(p, ws, split, stream, /*overlap=*/true);
    return;
  }
  switch (cfg.kernel) {
    case Kernel::Simt128x128:
      return launch_simt_128x128(p, split, cfg.reduce, cfg.staging, stream);
    case Kernel::Simt128x128k16:
      return launch_simt_128x128k16(p, split, cfg.reduce, cfg.staging, stream);
    case Kernel::Simt128x128x2:
      return launch_simt_128x128x2(p, split, cfg.reduce, cfg.staging, stream);
    case Kernel::Simt256x128:
      return launch_simt_256x128(p, split, cfg.reduce, cfg.staging, stream);
    case Kernel::Simt256x128k16:
      return launch_simt_256x128k16(p, split, cfg.reduce, cfg.staging, stream);
    case Kernel::Simt128x64:
      return launch_simt_128x64(p, split, cfg.reduce, cfg.staging, stream);
    case Kernel::Simt64x64:
      return launch_simt_64x64(p, split, cfg.reduce, cfg.staging, stream);
    case Kernel::Simt32x128:
      return launch_simt_32x128(p, split, cfg.reduce, cfg.staging, stream);
    case Kernel::Simt32x64:
      return launch_simt_32x64(p, split, cfg.reduce, cfg.staging, stream);
    case Kernel::Simt64x128:
      return launch_simt_64x128(p, split, cfg.reduce, cfg.staging, stream);
    case Kernel::Simt64x256:
      return launch_simt_64x256(p, split, cfg.reduce, cfg.staging, stream);
    case Kernel::Simt128x64k16:
      return launch_simt_128x64k16(p, split, cfg.reduce, cfg.staging, stream);
    case Kernel::SimtTma128x64:
    case Kernel::SimtTma64x128:
      return launch_simt_tma(p, cfg.kernel, split, cfg.reduce, stream);
    default:
      MT_THROW(InvalidArgument, "gemm: unknown kernel ", static_cast<int>(cfg.kernel));
  }
}

}  // namespace

bool can_implement(const Problem& p, const Config& cfg) {
  if (cfg.pack) {
    if (!is_simt(cfg.kernel) || cfg.math != MathMode::FP32) return false;
    Config plain = cfg;
    plain.pack = false;
    return can_implement(needs_pack(p) ? pack_shape(p) : p, plain);
  }
  if (cfg.split_k < 1 || cfg.split_k > 64) return false;
  // mma.sync kernels add split K with the second kernel only, wgmma in a cluster only.
  if (cfg.split_k > 1 && cfg.reduce == SplitReduce::Cluster &&
      ((is_tensor(cfg.kernel) && cfg.kernel != Kernel::Wgmma) || cfg.split_k > kMaxClusterSplit))
    return false;
  if (is_rung(cfg.kernel)) return cfg.split_k == 1 && cfg.math == MathMode::FP32;
  if (is_tensor(cfg.kernel) != (cfg.math != MathMode::FP32)) return false;
  if (cfg.kernel == Kernel::Wgmma)
    return (cfg.split_k == 1 || cfg.reduce == SplitReduce::Cluster) && wgmma_can_implement(p, cfg.math);
  // The TMA kernels have no other staging, and no other kernel has it.
  if (is_tma_kernel(cfg.kernel) != (cfg.staging == Staging::Tma)) return false;
  if (cfg.staging == Staging::Tma) return tma_ready(p);
  if (is_simt(cfg.kernel) && cfg.staging == Staging::Registers && !(a_reg_stageable(p) && b_reg_stageable(p)))
    return false;
  if (registers_only(cfg.kernel) && cfg.staging == Staging::CpAsync) return false;
  if (cfg.staging == Staging::CpAsync16 && !(has_ring16(cfg.kernel) && ring16_ready(p))) return false;
  if (whole_runs_only(cfg.kernel) && !vector_runs(p)) return false;
  const TileInfo t = tile_of(cfg.kernel);
  if (!offsets_fit(p.a_sm, p.a_sk, t.bm, t.bk) || !offsets_fit(p.b_sn, p.b_sk, t.bn, t.bk)) return false;
  // Tiles are raster-ordered in a 1-D grid.
  const double tiles = std::ceil(p.m / double(t.bm)) * std::ceil(p.n / double(t.bn));
  return tiles < 2147483647.0;
}

void launch(const Problem& p, const Config& cfg, cudaStream_t stream) {
  MT_CHECK(can_implement(p, cfg), InvalidArgument, "gemm: configuration ", config_name(cfg), " cannot run ",
           p.m, "x", p.n, "x", p.k, " (batch ", p.batch, ")");
  for_each_batch_chunk(p, [&](const Problem& q) { launch_one(q, cfg, stream); });
}

// ================================================================ dispatch

namespace {
__global__ void cluster_probe_kernel() {}

// How many blocks of `size`-block clusters are resident at once where each SM holds one block. A cluster sits
// within one GPC, so sizes that do not divide a GPC's SM count leave SMs out (H100, 132 SMs: 132 at sizes 1
// and 2, 117 at 3, 120 at 4 and 8, 102 at 6). Asked of the runtime once per device and size, for a probe
// kernel held to one block per SM by its shared memory; where the runtime cannot say, the SMs in whole
// clusters.
int cluster_slots(int size) {
  const int sms = current_sm_count();
  if (size <= 1) return sms;
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::pair<int, int>, int> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(device, size);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = static_cast<unsigned>(size);
  cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(size)), cfg.blockDim = dim3(128);
  cfg.attrs = &cluster, cfg.numAttrs = 1;
  int per_sm = 0, per_block = 0, clusters = 0;
  bool asked =
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess;
  if (asked) {
    // Over half an SM's shared memory: one block per SM.
    cfg.dynamicSmemBytes = std::min<std::size_t>(per_block, per_sm / 2 + 4096);
    asked = cudaFuncSetAttribute(cluster_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(cfg.dynamicSmemBytes)) == cudaSuccess &&
            cudaOccupancyMaxActiveClusters(&clusters, cluster_probe_kernel, &cfg) == cudaSuccess &&
            clusters > 0;
  }
  if (!asked) (void)cudaGetLastError();  // not sticky: clear it, so it is not reported by a later check
  const int slots = asked ? std::min(clusters * size, sms) : sms / size * size;
  cache.emplace(key, slots);
  return slots;
}
}  // namespace

std::vector<Config> candidates(const Problem& p, MathMode math) {
  std::vector<Config> out;
  const std::vector<Kernel> kernels = math == MathMode::FP32 ? simt_kernels() : tensor_kernels();
  const int sms = current_sm_count();
  for (Kernel k : kernels) {
    const TileInfo t = tile_of(k);
    const std::int64_t blocks =
        static_cast<std::int64_t>((p.m + t.bm - 1) / t.bm) * ((p.n + t.bn - 1) / t.bn) * p.batch;
    for (int split : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32}) {
      // Splitting only pays while the blocks do not fill the GPU a few times over, or to fill a last wave.
      if (split > 1 && (p.k / split < 32 || blocks * split > 16 * sms)) break;
      for (Staging st : {Staging::Registers, Staging::CpAsync, Staging::CpAsync16, Staging::Tma})
        for (bool pack : {false, true}) {
          if (math != MathMode::FP32 && st != Staging::Registers) continue;
          if (pack && (math != MathMode::FP32 || st == Staging::CpAsync || !needs_pack(p))) continue;
          const Config rk{k, split, math, SplitReduce::Kernel, st, pack};
          if (can_implement(p, rk)) out.push_back(rk);
          const Config cl{k, split, math, SplitReduce::Cluster, st, pack};
          if (split > 1 && can_implement(p, cl)) out.push_back(cl);
        }
    }
  }
  return out;
}

// The rules below come from bench_gemm --sweep-all on an H200 (bench/gemm/NOTES.md): pick the tile by the
// shape class, then split K while there are too few blocks to fill the machine.
Config choose(const Problem& p, MathMode math) {
  if (math == MathMode::FP32 && needs_pack(p)) {
    // Operands without whole 16-byte runs (4095x4097x1023: odd leading dimensions) are copied once into
    // aligned scratch where each copied element feeds at least 512 FMAs: the copy (8 bytes per element at
    // ~3 TB/s) then costs at most ~11 % of the kernel at 45 TFLOP/s, and the kernel takes 16-byte loads
    // instead of 4 scalar ones per run (0.82x cuBLAS unpacked at 4095x4097x1023; unpacked against packed,
    // H100: 2047x2049x2047 0.69x against 1.03x, 1279x1281x1279 0.75x against 0.89x, 1535x1537x1535 0.50x
    // against 0.62x; bench/gemm/NOTES.md round 25).
    //   Where the problem fills a wave of 64x64 tiles, the unpacked rules take register-staged tiles on
    // scalar loads, and 256 FMAs per copied element suffice (1023x1025x1023, 511.99 FMAs per element: 0.48x
    // cuBLAS unpacked, 0.83x packed; the copy costs at most ~20 %). Fewer tiles take the 4-byte cp.async
    // ring, which reads unaligned operands at its full rate.
    const Problem q = pack_shape(p);
    const double copied = (q.a ? 0.0 : double(a_layout(p).elements(batches_of(p.a_sb, p.batch)))) +
                          (q.b ? 0.0 : double(b_layout(p).elements(batches_of(p.b_sb, p.batch))));
    const double tiles64 = std::ceil(p.m / 64.0) * std::ceil(p.n / 64.0) * p.batch;
    const double per_copied = tiles64 >= current_sm_count() ? 256.0 : 512.0;
    if (double(p.m) * p.n * p.k * p.batch >= per_copied * copied) {
      Config c = choose(q, math);
      // Where that is the unsplit 256x128 tile and A runs along k, B along n, the tile's 4-byte cp.async
      // ring with the lane loaders reads the operands in place as fast as the kernel reads packed ones, and
      // the copy is saved (4095x4097x1023, H100: 46.4 TFLOP/s, 1.01x cuBLAS timed interleaved with it, where
      // the copy and the register-staged kernel gave 44.6, 0.97x; bench/gemm/NOTES.md round 24).
      const Config lanes{Kernel::Simt256x128, 1, math, SplitReduce::Kernel, Staging::CpAsync};
      if (c.kernel == lanes.kernel && c.split_k == 1 && lanes_ready(p) && can_implement(p, lanes))
        return lanes;
      c.pack = true;
      if (can_implement(p, c)) return c;
    }
  }
  const int sms = current_sm_count();
  const std::int64_t batch = p.batch;
  auto blocks = [&](int bm, int bn) {
    return static_cast<std::int64_t>((p.m + bm - 1) / bm) * ((p.n + bn - 1) / bn) * batch;
  };
  // Pick the split that brings the block count to about `target` with at least `min_k` of K per split.
  auto split_for = [&](std::int64_t nblocks, std::int64_t target, int min_k) {
    int split = 1;
    while (nblocks * split * 2 <= target && p.k / (split * 2) >= min_k && split < 32) split *= 2;
    return split;
  };
  // The largest split in {1, 2, 3, 4, 6, 8, 12, 16} up to `max_split` that keeps the block count within
  // `target` and at least `min_k` of K per split.
  auto split_to_fill = [&](std::int64_t nblocks, std::int64_t target, int min_k, int max_split = 8) {
    int split = 1;
    for (int s : {2, 3, 4, 6, 8, 12, 16})
      if (s <= max_split && nblocks * s <= target && p.k / s >= min_k) split = s;
    return split;
  };
  // The waves `b` blocks take where `slots` of them run at once.
  auto waves = [](std::int64_t b, std::int64_t slots) { return (b + slots - 1) / slots; };
  // The share of its waves' slots that `b` blocks fill, `per_sm` resident per SM.
  auto fill = [&](std::int64_t b, int per_sm) {
    const std::int64_t slots = static_cast<std::int64_t>(per_sm) * sms;
    return static_cast<double>(b) / static_cast<double>(waves(b, slots) * slots);
  };
  // Register-staged with 16-byte loads for every operand run.
  const bool runs16 = a_reg_stageable(p) && b_reg_stageable(p) && a_runs16(p) && b_runs16(p);
  // Whether 256x128 tiles leave edge tiles (partly outside C).
  const bool edges256 = p.m % 256 != 0 || p.n % 128 != 0;
  Config c;
  c.math = math;
  // The reduction of split K where a rule names one; the others get the default rule at the end.
  std::optional<SplitReduce> reduce;
  if (math != MathMode::FP32 && p.m >= 128 && p.n >= 128 &&
      can_implement(p, Config{Kernel::Wgmma, 1, math})) {
    // At least one whole 128x128 tile: the Hopper wgmma kernel (1024^3 and up, 4095x4097x1023, 64 x 256^3:
    // 3xTF32 1.2-2.3x cuBLAS fp32), with K split over a cluster per tile under a wave of tiles (its own rule,
    // wgmma_choose; 3xTF32 256x1024x1024: 25.1 TFLOP/s split 6 and 512^3: 17.6 split 6, where mma.sync gave
    // 20.1 and 15.1). Small and skinny shapes stay on mma.sync with split K, which wins there.
    c.kernel = Kernel::Wgmma;
    c.split_k = wgmma_choose(p, math).split;
    reduce = SplitReduce::Cluster;
  } else if (math == MathMode::TF32x3) {
    // No whole 128x128 tile: the fp32 SIMT kernels beat 3xTF32 on mma.sync at every such shape measured
    // (64x4096x4096: 29.4 against 27.6 TFLOP/s, 16384x64x4096: 36.2 against 33.2, 64x512x512: 4.6 against
    // 3.7, 127x129x255: 1.03 against 0.81) and are at least as accurate, so TF32x3 runs them there.
    return choose(p, MathMode::FP32);
  } else if (math != MathMode::FP32) {
    c.kernel = blocks(128, 128) >= sms  ? Kernel::Tensor128x128
               : blocks(128, 64) >= sms ? Kernel::Tensor128x64
                                        : Kernel::Tensor64x64;
    // TF32 without a whole 128x128 tile: mma.sync, K split to about two blocks per SM, down to 32 of K per
    // split (64x512x512 3xTF32: split 16 3.6 TFLOP/s, where split 2 gave 2.0; TF32 split 16 3.9).
    const TileInfo t = tile_of(c.kernel);
    c.split_k = split_for(blocks(t.bm, t.bn), 2 * sms, 32);
  } else if (p.m <= 64) {
    // Small M. Few output tiles (the 64x512x512 MLP layer: 16 tiles of 32x64) take the 64-thread tile with K
    // split until about two blocks per SM; wide N the 32x128 tile, split 8. M of 33-64 with a long K
    // (64x4096x4096) fills 64-row tiles: 64x128 (8x8 per thread, 3 blocks per SM) register-staged, K split to
    // about three blocks per SM (split 12: 0.785x cuBLAS, where 32x128 split 8 gave 0.766x). Otherwise the
    // cp.async ring beats register staging here (64x512x512: 4.5 vs 3.5 TFLOP/s): each block's K range is
    // short, and the ring's deeper prefetch hides more of its latency.
    c.staging = Staging::CpAsync;
    if (blocks(32, 128) < 32) {
      // A along k and B along n in aligned rows take the 16-byte ring (64x512x512: 4.67-4.70 TFLOP/s, where
      // the 4-byte ring gave 4.51-4.59).
      c.kernel = Kernel::Simt32x64;
      c.split_k = split_for(blocks(32, 64), 2 * sms, 64);
      if (ring16_ready(p)) c.staging = Staging::CpAsync16;
    } else if (p.m > 32 && p.k >= 2048) {
      // M of 33-64 with a long K (64x4096x4096): one wave of 64-row tiles, K split to fill it, the splits
      // added by a second kernel over every SM. 64x256 (two blocks per SM), split 16: 36.3 TFLOP/s, 0.97x
      // cuBLAS; 64x128 (three per SM), split 12: 33.3 (29.2 with the in-launch fix-up, whose last block per
      // tile adds all 12 partials while most SMs idle).
      c.staging = Staging::Registers;
      reduce = SplitReduce::Kernel;
      if (tma_ready(p)) {
        // Where TMA can fetch the operands, the TMA kernel's 64x128 tiles (8x8 per thread, two blocks per
        // SM), K split to about two blocks per SM, the splits added by the second kernel: split 8 39.3-39.5
        // TFLOP/s, 1.05-1.07x cuBLAS timed interleaved with it in two sweeps, where 64x256 split 16 gave
        // 37.2-37.4 (0.99-1.00x), bench/gemm/NOTES.md round 20.
        c.kernel = Kernel::SimtTma64x128, c.staging = Staging::Tma;
        c.split_k = split_to_fill(blocks(64, 128), 2 * sms, 256, 16);
      } else if (vector_runs(p)) {
        c.kernel = Kernel::Simt64x256;
        c.split_k = split_to_fill(blocks(64, 256), 2 * sms, 256, 16);
      } else {
        c.kernel = Kernel::Simt64x128;
        c.split_k = split_to_fill(blocks(64, 128), 3 * sms, 256, 16);
      }
    } else {
      c.kernel = Kernel::Simt32x128;
      c.split_k = split_for(blocks(32, 128), 4 * sms, 256);
    }
  } else if (blocks(64, 64) < sms) {
    if (runs16 && p.k >= 512 && p.m >= 128 && p.n >= 128) {
      // Few output tiles but K of 512 or more (the 256x1024x1024 MLP layer, 512^3: 16 tiles of 128x128): the
      // 16-deep register-staged tile, K split to one wave and added by a second kernel (256x1024x1024 split
      // 8: 25.9 TFLOP/s, 1.05x cuBLAS, where split 6 reduced in a cluster gave 22.2; 512^3 split 8: 18.5,
      // where 32x64 tiles on the 16-byte ring, split 2 in a cluster, gave 16.9).
      c.kernel = Kernel::Simt128x128k16;
      c.split_k = split_to_fill(blocks(128, 128), sms, 64);
      reduce = SplitReduce::Kernel;
      if (p.k >= 1024 && tma_ready(p)) {
        // Where TMA can fetch the operands, the TMA kernel's 128x64 tiles, two blocks per SM, K split to
        // about two per SM (256x1024x1024 split 8: 27.9-28.3 TFLOP/s against 27.55-27.68 in four sweeps;
        // the (256, 1024) MLP in a CUDA graph 39.6-39.8 us against 40.6-40.7, alternating runs; not at
        // 512^3, where 64x64 tiles on the 16-byte ring led).
        c.kernel = Kernel::SimtTma128x64, c.staging = Staging::Tma;
        c.split_k = split_to_fill(blocks(128, 64), 2 * sms, 64);
      }
    } else if (p.m >= 256 && p.n >= 256 && p.k >= 256 && ring16_ready(p)) {
      // Few output tiles of a mid-sized problem with a shorter K (or 512^3 in rows not of whole 16-byte runs)
      // with A along k and B along n in aligned rows: 32x64 tiles on the 16-byte ring, K split to about two
      // blocks per SM and reduced in a cluster (512^3 split 2: 17.2 and 17.4 TFLOP/s in two runs, where
      // 32x128 on the 4-byte ring gave 16.3 and 16.2).
      c.kernel = Kernel::Simt32x64;
      c.split_k = split_for(blocks(32, 64), 2 * sms, 64);
      c.staging = Staging::CpAsync16;
      if (c.split_k <= kMaxClusterSplit) reduce = SplitReduce::Cluster;
    } else if (p.m >= 256 && p.n >= 256 && p.k >= 256) {
      // The same with other layouts: 32x128 tiles, K split to about one wave and reduced in a cluster, on the
      // 4-byte cp.async ring (0.93-0.98x cuBLAS, where 64x64 split 8 gave 0.84-0.90x).
      c.kernel = Kernel::Simt32x128;
      c.split_k = split_for(blocks(32, 128), sms, 64);
      c.staging = Staging::CpAsync;
      if (c.split_k <= kMaxClusterSplit) reduce = SplitReduce::Cluster;
    } else {
      // Few output tiles of a small problem (127x129x255): latency bound; 64x64 tiles and K split to about
      // four blocks per SM, on the cp.async ring.
      c.kernel = Kernel::Simt64x64;
      c.split_k = split_for(blocks(64, 64), 4 * sms, 32);
      c.staging = Staging::CpAsync;
    }
  } else if (p.n <= 64 && runs16 && blocks(128, 64) >= 3 * sms / 4) {
    // Skinny N with tall M (16384x64x4096, where A streams from DRAM): 128x64 tiles, K split to about two
    // blocks per SM. Where TMA can fetch the operands, the TMA kernel (its turns between tiles are one
    // mbarrier wait: 42.2 TFLOP/s split 2 in a prototype, where this rule's register-staged 128x64x16 ran
    // 39.7-40.3, bench/gemm/NOTES.md round 19), the splits added by the second kernel (43.2-45.5 TFLOP/s
    // in three sweeps, where a cluster gave 42.0-43.4, round 20); else the 16-deep register-staged tile,
    // reduced in a cluster (split 2: 0.86-0.92x cuBLAS over four runs; in the sweep that timed them all,
    // 37.8 TFLOP/s, where 256x64 tiles of 16x8 threads gave 36.3, 128x64 8 deep 34.5 and the same tile
    // with its splits added in the launch through L2 37.3).
    c.kernel = Kernel::Simt128x64k16;
    c.split_k = split_for(blocks(128, 64), 2 * sms, 256);
    if (c.split_k <= kMaxClusterSplit) reduce = SplitReduce::Cluster;
    if (tma_ready(p))
      c.kernel = Kernel::SimtTma128x64, c.staging = Staging::Tma, reduce = SplitReduce::Kernel;
  } else if (p.n <= 64) {
    // Other skinny N: 128x64 split to about two blocks per SM, reduced in a cluster, on the cp.async ring.
    c.kernel = Kernel::Simt128x64;
    c.split_k = split_for(blocks(128, 64), 2 * sms, 256);
    c.staging = Staging::CpAsync;
    if (c.split_k <= kMaxClusterSplit) reduce = SplitReduce::Cluster;
  } else if (runs16 && blocks(256, 128) >= 3 * sms / 4 &&
             (p.k >= 512 || (p.k >= 256 && !edges256 && c_vectorisable(p)))) {
    // Big problems: 256x128 tiles of 16x8 threads (the fewest shared-memory reads per FMA), 16 deep, staged
    // through registers (4096^3: 0.86x cuBLAS, where 128x128 gave 0.80x). The same tile 8 deep where C is not
    // in float4 runs (4095x4097x1023 packed: 42.2-42.5 TFLOP/s, where 16 deep gave 41.3-41.4 and the 128x128
    // 2-CTA tile 40.9-41.1), or a K of at most 1024 leaves edge tiles (4096x4100x1024 48.2 against 46.3,
    // 4095x4096x1024 47.9 against 47.3; at 4096x4096x1024, no edge, 48.9 against 49.1; at K of 2048 and 4096
    // the two are level), or K is under 512 (it takes K of 256-511 without edge tiles: 64 x 256^3 timed
    // interleaved with cuBLAS in eight H100 sweeps over three rounds, 8 deep 1.002-1.018x, mean 1.009; 16
    // deep 0.994-1.015x in ten, mean 1.002; where the 64x256 tile gave 42.2-42.5 TFLOP/s against 42.9-43.0;
    // bench/gemm/NOTES.md round 27).
    c.kernel = c_vectorisable(p) && !(edges256 && p.k <= 1024) && p.k >= 512 ? Kernel::Simt256x128k16
                                                                             : Kernel::Simt256x128;
    const std::int64_t tiles = blocks(256, 128);
    auto filled = [&](int s) { return fill(tiles * s, 1); };
    // The TMA kernel's 128x64 tiles, two blocks per SM, where they fill their waves and 256x128 tiles, in
    // two waves at most, do not (136 tiles of 256x128 on 132 SMs, H100, interleaved with cuBLAS:
    // 2048x2056x2048 split 2 in a cluster 1.12-1.13x, unsplit 1.08x, where 256x128 split 3 gave 0.88-0.90x;
    // 2047x2049x2047 packed split 2 1.09-1.10x, unsplit 1.03x, where 256x128 split 3-4 gave 0.77-0.91x;
    // bench/gemm/NOTES.md round 25). Over more waves the 256x128 tile's higher rate outweighs its idle
    // slots (5000^3: 800 tiles, 87 % filled, unsplit 0.93x; the TMA tile there was not measured). K split
    // 2 in a cluster where each split keeps 1024 of K (its 32-deep k-tiles taken in turn: 32 each).
    auto filled_tma = [&](int s) { return fill(blocks(128, 64) * s, 2); };
    if (filled(1) < 0.9 && tiles <= 2 * sms && filled_tma(1) >= 0.95 && tma_ready(p)) {
      c.kernel = Kernel::SimtTma128x64, c.staging = Staging::Tma;
      c.split_k = (p.k + 1) / 2 >= 1024 && filled_tma(2) >= 0.95 ? 2 : 1;
      reduce = SplitReduce::Cluster;
    } else if (filled(1) < 0.9) {
      // A last wave that leaves SMs idle (under 90 % of the waves' slots filled): K split in 2 or 3 where
      // that fills enough more of them, the 8-deep tile, the splits added by the second kernel. Against the
      // slots it fills, a split runs at about 0.945 - 33 * split / K of the unsplit rate (fitted to 3000^3,
      // 3000x3000x1024 and 4100x4100x4096): 3000^3 (288 tiles, 73 % filled) split 3 41.9 TFLOP/s against
      // 35.7, 4100x4100x4096 (561, 85 %) 42.7 against 40.3, 2100x2100x1024 (153) 31.8 against at most 29.9.
      // Splits over 16 blocks per SM were not measured (bench_gemm --sweep stops there).
      int best = 1;
      double best_rate = 1.02 * filled(1);  // a split must promise 2 % to be taken
      for (int s : {2, 3}) {
        const double rate = filled(s) * (0.945 - 33.0 * s / p.k);
        if (p.k / s >= 256 && tiles * s <= 16 * sms && rate > best_rate) best = s, best_rate = rate;
      }
      const Config split{Kernel::Simt256x128, best, MathMode::FP32, SplitReduce::Kernel};
      if (best > 1 && can_implement(p, split)) {
        c.kernel = split.kernel, c.split_k = best;
        reduce = SplitReduce::Kernel;
      }
    }
  } else if (runs16 && p.k >= 512) {
    // Under 3/4 of a wave of 256x128 tiles with K of 512 or more (1023x1025x1023, 1279x1281x1279 and
    // 1535x1537x1535 packed, 1536^3, 1792^3): the wave model, fitted to H100 sweeps interleaved with cuBLAS
    // (bench/gemm/NOTES.md round 26). Both tiles hold one block per SM, and K splits reduce in a cluster.
    // A configuration's rate is taken as the product of
    // - its tile's own rate: the 128x128 tile's is 0.95 of the 256x128 tile's (1023x1025x1023 split 3:
    //   0.77 against 0.83x cuBLAS; 1279x1281x1279 split 2: 0.90 against 0.95x, at the same fill);
    // - the share of its tiles' area inside C;
    // - the share of the SMs its blocks keep busy over their waves, a wave being as many blocks as fit in
    //   whole clusters (cluster_slots: 1792^3 split 4, 392 blocks, takes four waves of 120 on an H100, not
    //   three of 132: 0.86x, where split 2 of the 128x128 tile, in three waves of 132, gives 1.09x);
    // - ks / (ks + 32) for ks of K per split: each block's fixed cost and its share of the reduction come to
    //   about 32 of K (256x128 split 2 / 4 / 8 at 1280^3, same waves: 1.024 / 0.980 / 0.880x cuBLAS; the
    //   model says 1 / 0.955 / 0.875).
    struct Option {
      Kernel kernel;
      double rate;
    };
    constexpr int kSplits[] = {1, 2, 3, 4, 6, 8};
    std::int64_t slots[std::size(kSplits)];
    for (std::size_t i = 0; i < std::size(kSplits); ++i) slots[i] = cluster_slots(kSplits[i]);
    double best = 0;
    for (const Option o : {Option{Kernel::Simt256x128, 1.0}, Option{Kernel::Simt128x128k16, 0.95}}) {
      const TileInfo t = tile_of(o.kernel);
      const std::int64_t b = blocks(t.bm, t.bn);
      const double inside = double(p.m) * p.n * batch / (double(b) * t.bm * t.bn);
      for (std::size_t i = 0; i < std::size(kSplits); ++i) {
        const int s = kSplits[i];
        const double ks = double(p.k) / s;
        if (ks < 128) break;
        const double busy = double(b * s) / double(waves(b * s, slots[i]) * sms);
        const double rate = o.rate * inside * busy * ks / (ks + 32);
        if (rate > best) best = rate, c.kernel = o.kernel, c.split_k = s;
      }
    }
    reduce = SplitReduce::Cluster;
  } else if (p.k < 512 && p.n >= 256 && vector_runs(p) && blocks(64, 256) >= sms) {
    // Short K over many tiles with edge tiles or a K under 256: 64x256 tiles of 16x8 threads, two blocks per
    // SM, so each SM holds 8 warps of the fewest shared-memory reads per FMA.
    c.kernel = Kernel::Simt64x256;
  } else if (runs16 && blocks(128, 128) < sms) {
    // Under one wave of 128x128 tiles with K under 512: the 16-deep tile with K split in a cluster (the
    // rule 1024^3 took before the wave model, which keeps it there: split 2, 1.01-1.13x cuBLAS).
    c.kernel = Kernel::Simt128x128k16;
    c.split_k = split_for(blocks(128, 128), sms, 128);
  } else {
    // Everything else: 128x128 tiles, two blocks per SM, register-staged; unaligned operands of problems too
    // small to pay for packing take scalar runs (4095x4097x1023 unpacked: 0.82x cuBLAS, where the cp.async
    // ring gave 0.70x). Operands contiguous in neither dim take the ring (below), with BK=16 and one block
    // per SM unless B takes float4 loads. Split K while fewer than two waves of blocks.
    const bool stageable = a_reg_stageable(p) && b_reg_stageable(p);
    c.kernel = stageable || b_vectorisable(p) ? Kernel::Simt128x128x2 : Kernel::Simt128x128k16;
    c.split_k = split_for(blocks(128, 128), 2 * sms, 64);
  }
  // Where no rule named the reduction: short K ranges per block reduce the splits of a tile in one cluster
  // (64x512x512: 12.1 -> 7.4 us against adding them in the launch through L2). The 16-deep register-staged
  // tile reduces in a cluster at any K (1024^3 split 2: 35.0 against 32.3 TFLOP/s). Other long ranges leave
  // the splits to a second kernel over every SM: a cluster's co-scheduling and final barrier cost more there
  // (0.66x cuBLAS). The mma.sync kernels always take the second kernel.
  const bool deep_regs = c.kernel == Kernel::Simt128x128k16 && c.staging == Staging::Registers;
  if (!reduce)
    reduce = is_simt(c.kernel) && c.split_k <= kMaxClusterSplit && (p.k / c.split_k <= 128 || deep_regs)
                 ? SplitReduce::Cluster
                 : SplitReduce::Kernel;
  c.reduce = *reduce;
  if (math == MathMode::FP32 && !(a_reg_stageable(p) && b_reg_stageable(p))) c.staging = Staging::CpAsync;
  if (!can_implement(p, c))
    c = Config{Kernel::Simt128x128, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync};
  if (!can_implement(p, c)) c = Config{Kernel::Naive, 1, MathMode::FP32};
  return c;
}

}  // namespace mt::detail::gemm
