// Operand packing (Config::pack): operands without whole 16-byte runs copied once into aligned scratch with
// padded rows, so the kernels take 16-byte loads. The layout rules (needs_pack, pack_shape) are pure:
// dispatch calls them without a GPU.
#include <algorithm>
#include <cstdint>

#include "minitensor/ops/gemm/detail/device.cuh"
#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/ops/gemm/detail/pack.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail::gemm {

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
// a row, so a short batch of long rows still fills the machine; A and B share one launch (one launch costs
// no more than two: see bench/gemm/DESIGN.md (packing)).
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

// ---------------------------------------------------------------- packing

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
    if (b_packs_along_k(p)) {
      const PackedLayout l = b_layout(p);
      q.b = nullptr;
      q.b_sb = batches_of(p.b_sb, p.batch) > 1 ? l.rows * l.ld : 0;
      q.b_sn = l.ld, q.b_sk = 1;
    } else {
      read_b_along_n(q, p);  // the layout Config::b_along_n copies to
    }
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
}  // namespace

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

Problem pack_b_along_n(const Problem& p, cudaStream_t stream) {
  Problem q = b_along_n_shape(p);
  const PackedLayout l = b_layout_along_n(p);
  const int batches = batches_of(p.b_sb, p.batch);
  float* dst = pack_scratch(sizeof(float) * static_cast<std::size_t>(l.elements(batches)), stream);
  launch_pack_transposed(p.b, p.b_sb, l, batches, dst, stream);
  q.b = dst;
  return q;
}

}  // namespace mt::detail::gemm
