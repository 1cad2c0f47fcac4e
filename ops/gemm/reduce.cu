// The split-K reduction kernels (and the whole job when K == 0), the row softmax fused after them
// (Problem::softmax), and their launcher.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/gemm/detail/device.cuh"
#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail::gemm {

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

// ---------------------------------------------------------------- launcher

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

}  // namespace mt::detail::gemm
