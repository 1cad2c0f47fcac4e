// Fused scaled dot-product attention, float32 on the CUDA cores, flash-attention style: a block takes 64
// queries of one (batch, head), keeps them in shared memory, and streams K and V in tiles of 64 keys. For
// each tile it forms the 64 x 64 scores (4 x 4 per thread), updates each row's running max and sum (the
// online softmax: earlier partial outputs are rescaled by exp(m_old - m_new)), and adds P V into the output
// held in registers. Nothing of size Tq x Tk reaches memory; each K and V tile is read once per query block,
// by cp.async copies issued as soon as the previous tile is used, so they land while it is still computed on.
// Scores are kept in base 2 (scale * log2(e) folded in), so each exponential is one exp2.
#include <cmath>
#include <cstdint>

#include "minitensor/ops/detail/attention.h"
#include "minitensor/ops/detail/attention_tile.cuh"
#include "minitensor/runtime/detail/device_primitives.cuh"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail {

namespace {

constexpr int kBM = 64, kBN = 64, kThreads = 256;

template <int D>
struct AttnSmem {
  static constexpr int kLd = D + 4;  // rows 16-byte aligned, 4 banks apart: conflict-free float4 reads
  static constexpr int kLdP = kBN + 4;
  static constexpr std::size_t kBytes = sizeof(float) * (3 * kBM * kLd + kBM * kLdP);
};

template <int N>
__device__ __forceinline__ void load_vec(const float* src, float* dst) {
  if constexpr (N == 4) {
    const float4 t = *reinterpret_cast<const float4*>(src);
    dst[0] = t.x, dst[1] = t.y, dst[2] = t.z, dst[3] = t.w;
  } else {
    const float2 t = *reinterpret_cast<const float2*>(src);
    dst[0] = t.x, dst[1] = t.y;
  }
}

// Two blocks per SM up to head dim 64 (128 registers); 128's shared memory allows one.
template <int D>
__global__ void __launch_bounds__(kThreads, D == 128 ? 1 : 2) attention_fwd(AttnProblem p) {
  constexpr int kLd = AttnSmem<D>::kLd, kLdP = AttnSmem<D>::kLdP;
  constexpr int kDpt = D / 16;             // output columns per thread
  constexpr int kVec = kDpt >= 4 ? 4 : 2;  // read from V as runs of kVec
  // A thread's output column c: runs of kVec, the 16 threads of a row side by side in each 16 * kVec-wide
  // band (conflict-free shared-memory reads of V).
  auto out_col = [](int tx, int c) { return (c / kVec) * 16 * kVec + kVec * tx + c % kVec; };
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);
  float* Ks = Qs + kBM * kLd;
  float* Vs = Ks + kBM * kLd;
  float* Ps = Vs + kBM * kLd;

  const int tiles_q = (p.tq + kBM - 1) / kBM;
  const int bh = blockIdx.x / tiles_q, q0 = (blockIdx.x % tiles_q) * kBM;
  const int b0 = bh / p.b1, b1 = bh % p.b1;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const float* qb = p.q.ptr + b0 * p.q.s0 + b1 * p.q.s1;
  const float* kb = p.k.ptr + b0 * p.k.s0 + b1 * p.k.s1;
  const float* vb = p.v.ptr + b0 * p.v.s0 + b1 * p.v.s1;
  const float* mb = p.mask ? p.mask + b0 * p.m0 + b1 * p.m1 : nullptr;
  constexpr float kLog2e = 1.4426950408889634f;
  const float scale2 = p.scale * kLog2e;

  // The pipeline of copy groups: Q with K of tile 0, V of tile 0, then K of tile i + 1 once every thread has
  // used K of tile i, V of tile i + 1 once V (and P) of tile i are used. A wait for all but the newest group
  // thus always finds the tile about to be read complete.
  const bool k_vec = attn_rows16(kb, p.k.st), v_vec = attn_rows16(vb, p.v.st);
  attn_load_rows<D, kLd, kBM, kThreads>(Qs, qb, p.q.st, q0, p.tq, attn_rows16(qb, p.q.st));
  attn_load_rows<D, kLd, kBN, kThreads>(Ks, kb, p.k.st, 0, p.tk, k_vec);
  cp_async_commit();
  attn_load_rows<D, kLd, kBN, kThreads>(Vs, vb, p.v.st, 0, p.tk, v_vec);
  cp_async_commit();

  float o[4][kDpt];
  float m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY, l[i] = 0.f;
#pragma unroll
    for (int c = 0; c < kDpt; ++c) o[i][c] = 0.f;
  }
  // Causal: keys past the block's last query are never seen.
  const int k_end = p.causal ? min(p.tk, q0 + kBM) : p.tk;
  for (int k0 = 0; k0 < k_end; k0 += kBN) {
    const bool more = k0 + kBN < k_end;
    cp_async_wait<1>();  // this tile's K (and Q) landed; its V may still be in flight
    __syncthreads();

    // s[i][j]: query q0 + 4 ty + i, key k0 + tx + 16 j.
    float s[4][4] = {};
#pragma unroll 4
    for (int d = 0; d < D; d += 4) {
      float4 qv[4], kv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) qv[i] = *reinterpret_cast<const float4*>(Qs + (4 * ty + i) * kLd + d);
#pragma unroll
      for (int j = 0; j < 4; ++j) kv[j] = *reinterpret_cast<const float4*>(Ks + (tx + 16 * j) * kLd + d);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          s[i][j] = fmaf(qv[i].x, kv[j].x, s[i][j]);
          s[i][j] = fmaf(qv[i].y, kv[j].y, s[i][j]);
          s[i][j] = fmaf(qv[i].z, kv[j].z, s[i][j]);
          s[i][j] = fmaf(qv[i].w, kv[j].w, s[i][j]);
        }
    }

    __syncthreads();  // every thread has read this tile's K: the next one may overwrite it
    if (more) attn_load_rows<D, kLd, kBN, kThreads>(Ks, kb, p.k.st, k0 + kBN, p.tk, k_vec);
    cp_async_commit();  // empty on the last tile: the count of groups stays uniform

#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int qi = q0 + 4 * ty + i;
      float row_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int kj = k0 + tx + 16 * j;
        float t = s[i][j] * scale2;
        if (mb && qi < p.tq && kj < p.tk) t = fmaf(__ldg(mb + qi * p.mi + kj * p.mj), kLog2e, t);
        if (kj >= p.tk || (p.causal && kj > qi)) t = -INFINITY;
        s[i][j] = t;
        row_max = fmaxf(row_max, t);
      }
      // The row's 16 threads are lanes of one half-warp.
#pragma unroll
      for (int x = 8; x > 0; x >>= 1) row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, x));
      const float m_new = fmaxf(m[i], row_max);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no visible key yet: every p is 0
      const float corr = exp2f(m[i] - m_use);
      float row_sum = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float pj = exp2f(s[i][j] - m_use);
        row_sum += pj;
        Ps[(4 * ty + i) * kLdP + tx + 16 * j] = pj;
      }
#pragma unroll
      for (int x = 8; x > 0; x >>= 1) row_sum += __shfl_xor_sync(0xffffffffu, row_sum, x);
      l[i] = l[i] * corr + row_sum;
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < kDpt; ++c) o[i][c] *= corr;
    }
    cp_async_wait<1>();  // this tile's V landed; the next K may still be in flight
    __syncthreads();     // and P is complete

    // o[i][c] += sum_j P[4 ty + i][j] V[j][kDpt tx + c]
#pragma unroll 1
    for (int j0 = 0; j0 < kBN; j0 += 4) {
      float pv[4][4];  // P[4 ty + i][j0 + u], 16-byte reads
#pragma unroll
      for (int i = 0; i < 4; ++i) load_vec<4>(Ps + (4 * ty + i) * kLdP + j0, pv[i]);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        float vv[kDpt];
#pragma unroll
        for (int c = 0; c < kDpt; c += kVec) load_vec<kVec>(Vs + (j0 + u) * kLd + out_col(tx, c), vv + c);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int c = 0; c < kDpt; ++c) o[i][c] = fmaf(pv[i][u], vv[c], o[i][c]);
      }
    }
    __syncthreads();  // every thread has read this tile's V and P
    if (more) attn_load_rows<D, kLd, kBN, kThreads>(Vs, vb, p.v.st, k0 + kBN, p.tk, v_vec);
    cp_async_commit();
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int qi = q0 + 4 * ty + i;
    if (qi >= p.tq) continue;
    const float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;  // a fully masked row: zeros
    float* dst = p.out + b0 * p.o0 + b1 * p.o1 + static_cast<std::int64_t>(qi) * p.ot;
#pragma unroll
    for (int c = 0; c < kDpt; ++c) dst[out_col(tx, c)] = o[i][c] * inv;
  }
}

template <int D>
void run(const AttnProblem& p, cudaStream_t stream) {
  launch_attention_grid(attention_fwd<D>, kBM, kThreads, AttnSmem<D>::kBytes, 1, stream, p);
}

}  // namespace

bool launch_attention(const AttnProblem& p, cudaStream_t stream) {
  switch (p.d) {
    case 32:
      return run<32>(p, stream), true;
    case 64:
      return run<64>(p, stream), true;
    case 128:
      return run<128>(p, stream), true;
    default:
      return false;
  }
}

}  // namespace mt::detail
