// Fused scaled dot-product attention on the tensor cores (MathMode::TF32 and TF32x3): the flash-attention
// loop of ops/attention.cu, with both products, S = Q K^T and O += P V, as mma.sync m16n8k8 TF32 tiles.
//
// A block takes 64 queries of one (batch, head), 4 warps of 16 query rows each, and streams K and V in tiles
// of 64 keys through shared memory. A warp's scores for a tile are 8 accumulator tiles of 16 x 8; each thread
// holds two rows of them (g and g + 8, lane = 4 g + t), so the online softmax reduces over the 4 threads of a
// row group with two shuffles. P never leaves the registers: mma's accumulator holds keys 2t and 2t + 1 of
// each 8 where its A operand wants keys t and t + 4, so the k index of P V is renumbered (A column t is key
// 2t, column t + 4 is key 2t + 1) and V's rows are read in that order.
//
// TF32x3: every operand is split as x = big + small (big = tf32(x), small = tf32(x - big)) and a * b ~
// small_a big_b + big_a small_b + big_a big_b; the three products of one k-step go into a zeroed tile that is
// then added to the running sum in FP32 (the tensor core truncates its own accumulation; see
// ops/gemm/tensorcore/mma_tf32.cu). TF32: one product of the rounded operands.
//
// Shared rows are D + 4 floats: every fragment read (rows 4g or 8t apart, columns t or g) covers the 32
// banks once.
#include <cmath>
#include <cstdint>

#include "minitensor/ops/detail/attention.h"
#include "minitensor/ops/detail/attention_tile.cuh"
#include "minitensor/runtime/detail/device_primitives.cuh"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail {

namespace {

constexpr int kBM = 64, kBN = 64, kWarps = 4, kThreads = 32 * kWarps;

template <int D>
struct TcSmem {
  static constexpr int kLd = D + 4;
  static constexpr std::size_t kBytes = sizeof(float) * 3 * kBM * kLd;  // Q, K and V tiles
};

// The TF32 operand(s) of x: big (and small, for TF32x3).
template <bool X3>
__device__ __forceinline__ void split(float x, std::uint32_t& big, std::uint32_t& small) {
  big = tf32_bits(x);
  if constexpr (X3) small = tf32_bits(x - __uint_as_float(big));
}

// acc += a * b over one k-step, in the math mode's products (see the header).
template <bool X3>
__device__ __forceinline__ void product(float (&acc)[4], const std::uint32_t (&ab)[4],
                                        const std::uint32_t (&as)[4], const std::uint32_t (&bb)[2],
                                        const std::uint32_t (&bs)[2]) {
  float t[4] = {0.f, 0.f, 0.f, 0.f};
  if constexpr (X3) {
    mma_tf32_m16n8k8(t, as, bb);
    mma_tf32_m16n8k8(t, ab, bs);
  }
  mma_tf32_m16n8k8(t, ab, bb);
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] += t[i];
}

template <int D, bool X3>
__global__ void __launch_bounds__(kThreads) attention_tc(AttnProblem p) {
  constexpr int kLd = TcSmem<D>::kLd;
  constexpr int kNt = kBN / 8;  // score tiles of 8 keys
  constexpr int kDt = D / 8;    // output tiles of 8 columns (and k-steps of Q K^T)
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);
  float* Ks = Qs + kBM * kLd;
  float* Vs = Ks + kBM * kLd;

  const int tiles_q = (p.tq + kBM - 1) / kBM;
  const int bh = blockIdx.x / tiles_q, q0 = (blockIdx.x % tiles_q) * kBM;
  const int b0 = bh / p.b1, b1 = bh % p.b1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = 16 * warp;  // the warp's first row in the block
  const float* qb = p.q.ptr + b0 * p.q.s0 + b1 * p.q.s1;
  const float* kb = p.k.ptr + b0 * p.k.s0 + b1 * p.k.s1;
  const float* vb = p.v.ptr + b0 * p.v.s0 + b1 * p.v.s1;
  const float* mb = p.mask ? p.mask + b0 * p.m0 + b1 * p.m1 : nullptr;
  constexpr float kLog2e = 1.4426950408889634f;
  const float scale2 = p.scale * kLog2e;

  // The pipeline of copy groups: Q with K of tile 0, V of tile 0, then K of tile i + 1 once every warp has
  // used K of tile i, V of tile i + 1 once V of tile i is used. A wait for all but the newest group thus
  // always finds the tile about to be read complete.
  const bool k_vec = attn_rows16(kb, p.k.st), v_vec = attn_rows16(vb, p.v.st);
  attn_load_rows<D, kLd, kBM, kThreads>(Qs, qb, p.q.st, q0, p.tq, attn_rows16(qb, p.q.st));
  attn_load_rows<D, kLd, kBN, kThreads>(Ks, kb, p.k.st, 0, p.tk, k_vec);
  cp_async_commit();
  attn_load_rows<D, kLd, kBN, kThreads>(Vs, vb, p.v.st, 0, p.tk, v_vec);
  cp_async_commit();

  // o[c][.]: rows g, g, g + 8, g + 8 and columns 8c + 2t, 8c + 2t + 1 (the accumulator layout).
  float o[kDt][4];
#pragma unroll
  for (int c = 0; c < kDt; ++c) o[c][0] = o[c][1] = o[c][2] = o[c][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int k_end = p.causal ? min(p.tk, q0 + kBM) : p.tk;
  for (int k0 = 0; k0 < k_end; k0 += kBN) {
    const bool more = k0 + kBN < k_end;
    cp_async_wait<1>();  // this tile's K (and Q) landed; its V may still be in flight
    __syncthreads();

    // s[j]: rows g and g + 8 of the warp's 16, keys k0 + 8j + 2t and + 1.
    float s[kNt][4];
#pragma unroll
    for (int j = 0; j < kNt; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kDt; ++kk) {
      const float* qrow = Qs + (r0 + g) * kLd + 8 * kk + t;
      std::uint32_t ab[4], as[4];
      split<X3>(qrow[0], ab[0], as[0]);
      split<X3>(qrow[8 * kLd], ab[1], as[1]);
      split<X3>(qrow[4], ab[2], as[2]);
      split<X3>(qrow[8 * kLd + 4], ab[3], as[3]);
#pragma unroll
      for (int j = 0; j < kNt; ++j) {
        const float* krow = Ks + (8 * j + g) * kLd + 8 * kk + t;
        std::uint32_t bb[2], bs[2];
        split<X3>(krow[0], bb[0], bs[0]);
        split<X3>(krow[4], bb[1], bs[1]);
        product<X3>(s[j], ab, as, bb, bs);
      }
    }

    __syncthreads();  // every warp has read this tile's K: the next one may overwrite it
    if (more) attn_load_rows<D, kLd, kBN, kThreads>(Ks, kb, p.k.st, k0 + kBN, p.tk, k_vec);
    cp_async_commit();  // empty on the last tile: the count of groups stays uniform

    // The online softmax of the thread's two rows (h = 0: row g, h = 1: row g + 8), in base 2.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int qi = q0 + r0 + g + 8 * h;
      float row_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kNt; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int kj = k0 + 8 * j + 2 * t + e;
          float x = s[j][2 * h + e] * scale2;
          if (mb && qi < p.tq && kj < p.tk) x = fmaf(__ldg(mb + qi * p.mi + kj * p.mj), kLog2e, x);
          if (kj >= p.tk || (p.causal && kj > qi)) x = -INFINITY;
          s[j][2 * h + e] = x;
          row_max = fmaxf(row_max, x);
        }
      // The row's 4 threads are lanes 4g .. 4g + 3.
      row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
      row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
      const float m_new = fmaxf(m[h], row_max);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no visible key yet: every p is 0
      const float corr = exp2f(m[h] - m_use);
      float row_sum = 0.f;
#pragma unroll
      for (int j = 0; j < kNt; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pj = exp2f(s[j][2 * h + e] - m_use);
          s[j][2 * h + e] = pj;
          row_sum += pj;
        }
      row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
      row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 2);
      l[h] = l[h] * corr + row_sum;
      m[h] = m_new;
#pragma unroll
      for (int c = 0; c < kDt; ++c) o[c][2 * h] *= corr, o[c][2 * h + 1] *= corr;
    }

    // o += P V, one k-step per score tile j: A column t is key 2t, column t + 4 key 2t + 1 (see the header).
    cp_async_wait<1>();  // this tile's V landed; the next K may still be in flight
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kNt; ++j) {
      std::uint32_t ab[4], as[4];
      split<X3>(s[j][0], ab[0], as[0]);
      split<X3>(s[j][2], ab[1], as[1]);
      split<X3>(s[j][1], ab[2], as[2]);
      split<X3>(s[j][3], ab[3], as[3]);
      const float* vrow = Vs + (8 * j + 2 * t) * kLd + g;
#pragma unroll
      for (int c = 0; c < kDt; ++c) {
        std::uint32_t bb[2], bs[2];
        split<X3>(vrow[8 * c], bb[0], bs[0]);
        split<X3>(vrow[kLd + 8 * c], bb[1], bs[1]);
        product<X3>(o[c], ab, as, bb, bs);
      }
    }
    __syncthreads();  // every warp has read this tile's V
    if (more) attn_load_rows<D, kLd, kBN, kThreads>(Vs, vb, p.v.st, k0 + kBN, p.tk, v_vec);
    cp_async_commit();
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int qi = q0 + r0 + g + 8 * h;
    if (qi >= p.tq) continue;
    const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;  // a fully masked row: zeros
    float* dst = p.out + (static_cast<std::int64_t>(bh) * p.tq + qi) * D + 2 * t;
#pragma unroll
    for (int c = 0; c < kDt; ++c) {
      dst[8 * c] = o[c][2 * h] * inv;
      dst[8 * c + 1] = o[c][2 * h + 1] * inv;
    }
  }
}

template <int D, bool X3>
void run(const AttnProblem& p, cudaStream_t stream) {
  auto* kernel = attention_tc<D, X3>;
  constexpr std::size_t bytes = TcSmem<D>::kBytes;
  if (bytes > 48 * 1024) use_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
  const std::int64_t blocks = static_cast<std::int64_t>((p.tq + kBM - 1) / kBM) * p.b0 * p.b1;
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(p);
  MT_CUDA_CHECK_LAUNCH();
}

template <bool X3>
bool run_d(const AttnProblem& p, cudaStream_t stream) {
  switch (p.d) {
    case 32:
      return run<32, X3>(p, stream), true;
    case 64:
      return run<64, X3>(p, stream), true;
    case 128:
      return run<128, X3>(p, stream), true;
    default:
      return false;
  }
}

}  // namespace

bool launch_attention_tc(const AttnProblem& p, cudaStream_t stream) {
  return p.math == MathMode::TF32x3 ? run_d<true>(p, stream) : run_d<false>(p, stream);
}

}  // namespace mt::detail
