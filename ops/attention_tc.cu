// Fused scaled dot-product attention on the tensor cores: TF32 (one product) or 3xTF32 (big * big + big *
// small + small * big, float32-class accuracy) through mma.sync m16n8k8, flash-attention style. A block is 4
// warps of 16 queries each of one (batch, head); K and V stream through in tiles of 32 keys.
//
// Rules, and why:
// - Every operand element is split into its TF32 parts once. Q is split when the block starts, into A
//   fragments held in registers (scaled by scale * log2(e): scores come out in base 2, one exp2 each). Each
//   K and V tile lands raw by cp.async and is split by the whole block into planes that all four warps then
//   read. Splitting per warp fragment instead costs every warp the same conversions again, and that made an
//   earlier tensor-core kernel slower than the CUDA-core one.
// - A fragment is one 16-byte shared-memory read. The reduction index of each 8-wide step is renumbered
//   (column t of A and row t of B are element 2t, column / row t + 4 element 2t + 1), so a lane's two B
//   values are adjacent; the planes store each adjacent pair as {big, big, small, small}. K's plane is
//   (key, d) like K; V's is transposed, (d, key), as its pairs run along the keys.
// - P never leaves registers. S's accumulator holds, per lane, keys 2t and 2t + 1 of an 8-key step: with
//   the renumbering above that is P V's A fragment as it stands. No shuffle, no shared memory.
// - Raw tiles arrive two ahead (two stages): a stage is free once split, so the copies of the tile after
//   next are issued before this tile's products and land while two tiles are computed. Two block barriers
//   per tile.
// - Per-score checks (a mask, keys past the end, the causal edge) run only on the tiles that need them.
// - A warp whose queries see none of a tile's keys (causal) skips its products: its state would not change.
// - Few blocks over long keys (attention_kv_splits): the keys are split over up to kMaxKvSplits blocks per
//   query tile, each writing its unnormalised output with its row max and sum, and a second kernel combines
//   them. A block's keys run in sequence through 4 warps, so without the split one block of the last query
//   tiles (causal: the most keys) sets the kernel's time while most SMs idle.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "minitensor/memory/stream_scratch.h"
#include "minitensor/ops/detail/attention.h"
#include "minitensor/ops/detail/attention_tile.cuh"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/detail/device_primitives.cuh"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail {

namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps, kBM = 16 * kWarps, kBN = 32;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct TcSmem {
  static constexpr int kLdRaw = D + 4;  // cp.async rows; 16-byte reads of 8 rows hit distinct banks
  static constexpr int kRaw = kBN * kLdRaw;
  // Planes in 32-bit words: 2 per element (big and small). Rows 16 words past a multiple of 32, so the 8
  // lanes of a 16-byte read phase (two rows, 16 consecutive words each) hit 32 distinct banks.
  static constexpr int kLdK = 2 * D + 16, kLdV = 2 * kBN + 16;
  static constexpr int kPlaneK = kBN * kLdK, kPlaneV = D * kLdV;
  // Two raw stages of K and V, then the planes.
  static constexpr std::size_t kBytes = sizeof(float) * (4 * kRaw + kPlaneK + kPlaneV);
};

struct Tf32Parts {
  std::uint32_t big, small;
};

__device__ __forceinline__ Tf32Parts split_tf32(float x) {
  const std::uint32_t big = tf32_bits(x);
  return {big, tf32_bits(x - __uint_as_float(big))};
}

// acc += a * b: the big product alone (TF32), or the two corrections first, then the big product (3xTF32).
// b = {b0 big, b1 big, b0 small, b1 small}, as a plane holds it.
template <int PASSES>
__device__ __forceinline__ void mma_parts(float (&acc)[4], const std::uint32_t (&a_big)[4],
                                          const std::uint32_t (&a_small)[4], const uint4& b) {
  const std::uint32_t b_big[2] = {b.x, b.y};
  if constexpr (PASSES == 3) {
    const std::uint32_t b_small[2] = {b.z, b.w};
    mma_tf32_m16n8k8(acc, a_small, b_big);
    mma_tf32_m16n8k8(acc, a_big, b_small);
  }
  mma_tf32_m16n8k8(acc, a_big, b_big);
}

__device__ __forceinline__ uint4 parts_pair(float x, float y) {
  const Tf32Parts a = split_tf32(x), b = split_tf32(y);
  return make_uint4(a.big, b.big, a.small, b.small);
}

// Splits a landed raw tile into the planes: K's row r holds the pairs (d, d + 1) of key r; V's row d the
// pairs (key, key + 1) of column d.
template <int D>
__device__ __forceinline__ void split_tile(const float* k_raw, const float* v_raw, std::uint32_t* k_plane,
                                           std::uint32_t* v_plane) {
  using Smem = TcSmem<D>;
  constexpr int kRunsK = kBN * D / 4, kRunsV = kBN / 2 * D / 4;
  static_assert(kRunsK % kThreads == 0 && kRunsV % kThreads == 0, "every thread splits as many runs");
#pragma unroll
  for (int i = 0; i < kRunsK / kThreads; ++i) {  // a run: 4 consecutive d of one key
    const int e = threadIdx.x + i * kThreads, r = e / (D / 4), c = 4 * (e % (D / 4));
    const float4 x = *reinterpret_cast<const float4*>(k_raw + r * Smem::kLdRaw + c);
    uint4* to = reinterpret_cast<uint4*>(k_plane + r * Smem::kLdK + 2 * c);
    to[0] = parts_pair(x.x, x.y);
    to[1] = parts_pair(x.z, x.w);
  }
#pragma unroll
  for (int i = 0; i < kRunsV / kThreads; ++i) {  // a run: 4 consecutive d of keys 2 pr, 2 pr + 1
    const int e = threadIdx.x + i * kThreads, pr = e % (kBN / 2), c = 4 * (e / (kBN / 2));
    const float4 x = *reinterpret_cast<const float4*>(v_raw + 2 * pr * Smem::kLdRaw + c);
    const float4 y = *reinterpret_cast<const float4*>(v_raw + (2 * pr + 1) * Smem::kLdRaw + c);
    uint4* to = reinterpret_cast<uint4*>(v_plane + c * Smem::kLdV + 4 * pr);
    to[0] = parts_pair(x.x, y.x);
    to[Smem::kLdV / 4] = parts_pair(x.y, y.y);
    to[2 * Smem::kLdV / 4] = parts_pair(x.z, y.z);
    to[3 * Smem::kLdV / 4] = parts_pair(x.w, y.w);
  }
}

// The key splits of one launch: split blockIdx.y of `splits` takes its share of the query tile's key tiles
// and, where splits > 1, writes its unnormalised rows to o_part[split][row][D] and (max, sum) to
// ml_part[split][row][2], rows numbered (b0, b1, query).
struct KvSplit {
  int splits = 1;
  float* o_part = nullptr;
  float* ml_part = nullptr;
};

// SPLIT: the key-split variant (sp.splits > 1); the other is compiled apart, as the split's extra state
// would cost the unsplit kernel registers it does not have to spare (it sits at the 168 that 3 blocks per
// SM allow).
template <int D, int PASSES, bool SPLIT>
__global__ void __launch_bounds__(kThreads, 3) attention_tc(AttnProblem p, KvSplit sp) {
  using Smem = TcSmem<D>;
  constexpr int kSteps = D / 8, kNt = kBN / 8, kNd = D / 8;
  extern __shared__ float4 smem4[];
  float* raw = reinterpret_cast<float*>(smem4);  // stage s: K at raw + 2 s kRaw, V after it
  std::uint32_t* k_plane = reinterpret_cast<std::uint32_t*>(raw + 4 * Smem::kRaw);
  std::uint32_t* v_plane = k_plane + Smem::kPlaneK;

  const int tiles_q = (p.tq + kBM - 1) / kBM;
  const int bh = blockIdx.x / tiles_q, q0 = (blockIdx.x % tiles_q) * kBM;
  const int b0 = bh / p.b1, b1 = bh % p.b1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float* qb = p.q.ptr + b0 * p.q.s0 + b1 * p.q.s1;
  const float* kb = p.k.ptr + b0 * p.k.s0 + b1 * p.k.s1;
  const float* vb = p.v.ptr + b0 * p.v.s0 + b1 * p.v.s1;
  const float* mb = p.mask ? p.mask + b0 * p.m0 + b1 * p.m1 : nullptr;

  // Causal: keys past the block's (the warp's) last query are never seen. This split's key tiles: its share
  // of the query tile's, [k_begin, k_end).
  const int k_all = p.causal ? min(p.tk, q0 + kBM) : p.tk;
  int k_begin = 0, k_end = k_all;
  if constexpr (SPLIT) {
    const int n_tiles = (k_all + kBN - 1) / kBN, split = static_cast<int>(blockIdx.y);
    k_begin = n_tiles * split / sp.splits * kBN;
    k_end = min(k_all, n_tiles * (split + 1) / sp.splits * kBN);
  }
  const int warp_last = q0 + 16 * warp + 15;
  const int warp_end = p.causal ? min(p.tk, warp_last + 1) : p.tk;
  // Tile i lands in raw stage i % 2; one copy group per tile (empty past the end), so waiting for all but
  // the newest group always finds the tile about to be split complete.
  const bool k_vec = attn_rows16(kb, p.k.st), v_vec = attn_rows16(vb, p.v.st);
  auto load_tile = [&](int k0) {
    if (k0 < k_end) {
      float* stage = raw + ((k0 / kBN) % 2) * 2 * Smem::kRaw;
      attn_load_rows<D, Smem::kLdRaw, kBN, kThreads>(stage, kb, p.k.st, k0, p.tk, k_vec);
      attn_load_rows<D, Smem::kLdRaw, kBN, kThreads>(stage + Smem::kRaw, vb, p.v.st, k0, p.tk, v_vec);
    }
    cp_async_commit();
  };
  load_tile(k_begin);
  load_tile(k_begin + kBN);

  // This lane's rows: r0 (accumulator entries 0, 1) and r1 = r0 + 8 (entries 2, 3). Q's A fragment of step
  // kk: {(r0, 2t), (r1, 2t), (r0, 2t + 1), (r1, 2t + 1)} of d = 8 kk + ..., as renumbered.
  const int r0 = q0 + 16 * warp + g, r1 = r0 + 8;
  const float scale2 = p.scale * kLog2e;
  std::uint32_t qa_big[kSteps][4], qa_small[kSteps][4];
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = e & 1 ? r1 : r0, col = 8 * kk + 2 * t + (e >> 1);
      const float x = row < p.tq ? __ldg(qb + row * p.q.st + col) * scale2 : 0.f;
      const Tf32Parts s = split_tf32(x);
      qa_big[kk][e] = s.big, qa_small[kk][e] = s.small;
    }

  float o[kNd][4];
#pragma unroll
  for (int nd = 0; nd < kNd; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int k0 = k_begin; k0 < k_end; k0 += kBN) {
    cp_async_wait<1>();
    __syncthreads();  // this tile's raw K and V landed; every warp is done with the previous planes
    const float* stage = raw + ((k0 / kBN) % 2) * 2 * Smem::kRaw;
    split_tile<D>(stage, stage + Smem::kRaw, k_plane, v_plane);
    __syncthreads();  // the planes are complete and the stage free
    load_tile(k0 + 2 * kBN);
    if (k0 >= warp_end) continue;

    // s[nt]: rows r0, r1 against keys k0 + 8 nt + 2t, + 1.
    float s[kNt][4];
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {  // B = K^T: key 8 nt + g, d 8 kk + 2t and + 1
        const uint4 b =
            *reinterpret_cast<const uint4*>(k_plane + (8 * nt + g) * Smem::kLdK + 16 * kk + 4 * t);
        mma_parts<PASSES>(s[nt], qa_big[kk], qa_small[kk], b);
      }

    // The online softmax; a row's values sit in the 4 lanes of its group g. The checks run on tiles with a
    // mask, keys past the end, or keys past one of the warp's queries (causal).
    if (mb || k0 + kBN > p.tk || (p.causal && k0 + kBN - 1 > warp_last - 15)) {
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = e & 2 ? r1 : r0, kj = k0 + 8 * nt + 2 * t + (e & 1);
          float x = s[nt][e];
          if (mb && qi < p.tq && kj < p.tk) x = fmaf(__ldg(mb + qi * p.mi + kj * p.mj), kLog2e, x);
          if (kj >= p.tk || (p.causal && kj > qi)) x = -INFINITY;
          s[nt][e] = x;
        }
    }
    float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) row_max[e >> 1] = fmaxf(row_max[e >> 1], s[nt][e]);
    float m_use[2], corr[2], row_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 1));
      row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 2));
      const float m_new = fmaxf(m[h], row_max[h]);
      m_use[h] = m_new == -INFINITY ? 0.f : m_new;  // no visible key yet: every p is 0
      corr[h] = exp2_approx(m[h] - m_use[h]);
      m[h] = m_new;
    }
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2_approx(s[nt][e] - m_use[e >> 1]);
        row_sum[e >> 1] += s[nt][e];
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
      row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
      l[h] = l[h] * corr[h] + row_sum[h];
    }
#pragma unroll
    for (int nd = 0; nd < kNd; ++nd)
      o[nd][0] *= corr[0], o[nd][1] *= corr[0], o[nd][2] *= corr[1], o[nd][3] *= corr[1];

      // o += P V, one 8-key step at a time: P's A fragment {(r0, 2t), (r1, 2t), (r0, 2t + 1), (r1, 2t + 1)}
      // is the accumulator {0, 2, 1, 3} of s[tt].
#pragma unroll
    for (int tt = 0; tt < kNt; ++tt) {
      const float pa[4] = {s[tt][0], s[tt][2], s[tt][1], s[tt][3]};
      std::uint32_t pa_big[4], pa_small[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const Tf32Parts x = split_tf32(pa[e]);
        pa_big[e] = x.big, pa_small[e] = x.small;
      }
#pragma unroll
      for (int nd = 0; nd < kNd; ++nd) {  // B = V: keys 8 tt + 2t and + 1, column 8 nd + g
        const uint4 b =
            *reinterpret_cast<const uint4*>(v_plane + (8 * nd + g) * Smem::kLdV + 16 * tt + 4 * t);
        mma_parts<PASSES>(o[nd], pa_big, pa_small, b);
      }
    }
  }

  if constexpr (SPLIT) {  // this split's rows, unnormalised, for attention_combine
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int qi = h ? r1 : r0;
      if (qi >= p.tq) continue;
      const std::int64_t row = (static_cast<std::int64_t>(blockIdx.y) * p.b0 * p.b1 + bh) * p.tq + qi;
      float* dst = sp.o_part + row * D + 2 * t;
#pragma unroll
      for (int nd = 0; nd < kNd; ++nd)
        *reinterpret_cast<float2*>(dst + 8 * nd) = make_float2(o[nd][2 * h], o[nd][2 * h + 1]);
      if (t == 0) *reinterpret_cast<float2*>(sp.ml_part + 2 * row) = make_float2(m[h], l[h]);
    }
  } else {  // the rows, normalised
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int qi = h ? r1 : r0;
      if (qi >= p.tq) continue;
      const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;  // a fully masked row: zeros
      float* dst = p.out + b0 * p.o0 + b1 * p.o1 + static_cast<std::int64_t>(qi) * p.ot + 2 * t;
      if ((reinterpret_cast<std::uintptr_t>(dst) & 7u) == 0) {
#pragma unroll
        for (int nd = 0; nd < kNd; ++nd)
          *reinterpret_cast<float2*>(dst + 8 * nd) = make_float2(o[nd][2 * h] * inv, o[nd][2 * h + 1] * inv);
      } else {
#pragma unroll
        for (int nd = 0; nd < kNd; ++nd)
          dst[8 * nd] = o[nd][2 * h] * inv, dst[8 * nd + 1] = o[nd][2 * h + 1] * inv;
      }
    }
  }
}

// Combines the key splits of each row: with M the largest split max, out = sum_s 2^(m_s - M) o_s over
// sum_s 2^(m_s - M) l_s (maxes in base 2, as the scores); a row no split saw a key of gives zeros. A warp per
// row, each lane D / 32 columns.
template <int D>
__global__ void __launch_bounds__(128) attention_combine(AttnProblem p, KvSplit sp) {
  const std::int64_t rows = static_cast<std::int64_t>(p.b0) * p.b1 * p.tq;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * 4 + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  float big = -INFINITY;
  for (int s = 0; s < sp.splits; ++s) big = fmaxf(big, sp.ml_part[2 * (s * rows + row)]);
  float acc[D / 32] = {}, sum = 0.f;
  if (big != -INFINITY)
    for (int s = 0; s < sp.splits; ++s) {
      const float2 ml = *reinterpret_cast<const float2*>(sp.ml_part + 2 * (s * rows + row));
      const float w = exp2f(ml.x - big);  // 0 for a split that saw no key (max -inf)
      sum += w * ml.y;
      const float* o = sp.o_part + (s * rows + row) * D;
#pragma unroll
      for (int j = 0; j < D / 32; ++j) acc[j] += w * o[lane + 32 * j];
    }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  const int qi = static_cast<int>(row % p.tq);
  const std::int64_t bh = row / p.tq;
  float* dst = p.out + bh / p.b1 * p.o0 + bh % p.b1 * p.o1 + static_cast<std::int64_t>(qi) * p.ot;
#pragma unroll
  for (int j = 0; j < D / 32; ++j) dst[lane + 32 * j] = acc[j] * inv;
}

// MT_ATTENTION_KV_SPLITS=k (1 .. kMaxKvSplits) overrides attention_kv_splits at every launch: for sweeps.
int forced_kv_splits() {
  static const int forced = [] {
    const char* env = std::getenv("MT_ATTENTION_KV_SPLITS");
    return env ? std::clamp(std::atoi(env), 0, kMaxKvSplits) : 0;
  }();
  return forced;
}

template <int D, int PASSES>
void run(const AttnProblem& p, cudaStream_t stream) {
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  const std::int64_t heads = static_cast<std::int64_t>(p.b0) * p.b1;
  KvSplit sp;
  sp.splits = attention_kv_splits(p.tq, p.tk, heads, device_properties(device).sm_count);
  if (forced_kv_splits() > 0) sp.splits = forced_kv_splits();
  const std::int64_t rows = heads * p.tq;
  const auto kernel = sp.splits > 1 ? attention_tc<D, PASSES, true> : attention_tc<D, PASSES, false>;
  if (sp.splits > 1) {
    const StreamScratchLock lock;  // the buffer stays ours until both launches are enqueued
    auto* part = static_cast<float*>(stream_scratch(
        ScratchSlot::AttentionPartials, sizeof(float) * sp.splits * rows * (D + 2), stream));
    sp.o_part = part;
    sp.ml_part = part + sp.splits * rows * D;
    launch_attention_grid(kernel, kBM, kThreads, TcSmem<D>::kBytes, sp.splits, stream, p, sp);
    attention_combine<D><<<static_cast<unsigned>((rows + 3) / 4), 128, 0, stream>>>(p, sp);
    MT_CUDA_CHECK_LAUNCH();
    return;
  }
  launch_attention_grid(kernel, kBM, kThreads, TcSmem<D>::kBytes, 1, stream, p, sp);
}

}  // namespace

int attention_kv_splits(int tq, int tk, std::int64_t heads, int sm_count) {
  const std::int64_t blocks = static_cast<std::int64_t>((tq + kBM - 1) / kBM) * heads;
  const int key_tiles = (tk + kBN - 1) / kBN;
  if (sm_count <= 0 || blocks == 0 || blocks >= kKvSplitMaxBlocksPerSm * sm_count) return 1;
  int splits = 1;
  for (int s = 2; s <= kMaxKvSplits; ++s)
    if (key_tiles / s >= kKvSplitMinKeyTiles && blocks * s <= kKvSplitTargetBlocksPerSm * sm_count)
      splits = s;
  return splits;
}

bool launch_attention_tc(const AttnProblem& p, cudaStream_t stream) {
  const bool x3 = p.math == MathMode::TF32x3;
  switch (p.d) {
    case 32:
      return (x3 ? run<32, 3>(p, stream) : run<32, 1>(p, stream)), true;
    case 64:
      return (x3 ? run<64, 3>(p, stream) : run<64, 1>(p, stream)), true;
    default:
      return false;
  }
}

}  // namespace mt::detail
