// The SGEMM problem as the kernels see it (raw pointers, element strides, one batch) and the pure predicates
// on its layout (alignment, contiguity, which loaders can read it) that dispatch and the launchers share.
// ops/gemm/api.cpp normalises tensors into a Problem; bench/gemm builds them directly.
//
// Every operand is addressed by element strides, so transposed and strided views need no copy
// (op(A) already folded into the strides):
// clang-format off
//   A(i, p) = a[batch * a_sb + i * a_sm + p * a_sk]   i < m, p < k
//   B(p, j) = b[batch * b_sb + p * b_sk + j * b_sn]   p < k, j < n
//   C(i, j) = c[batch * c_sb + i * c_sm + j * c_sn]
// clang-format on
// A batch stride of 0 broadcasts that operand over the batch.
#pragma once

#include <algorithm>
#include <cstdint>

#include "minitensor/ops/functors.h"
#include "minitensor/ops/gemm.h"

namespace mt::detail::gemm {

struct WgmmaPackedB;  // ops/gemm/tensorcore/wgmma.h

// The epilogue's activation, shared by the kernels and the CPU reference (the math is ops/functors.h's).
MT_FN float activate(float v, Activation act) {
  switch (act) {
    case Activation::Relu:
      return fn::relu(v);
    case Activation::Gelu:
      return fn::gelu(v);
    case Activation::GeluTanh:
      return fn::gelu_tanh(v);
    default:
      return v;
  }
}

struct Problem {
  int m = 0, n = 0, k = 0, batch = 1;
  const float* a = nullptr;
  std::int64_t a_sm = 0, a_sk = 0, a_sb = 0;
  const float* b = nullptr;
  std::int64_t b_sk = 0, b_sn = 0, b_sb = 0;
  float* c = nullptr;
  std::int64_t c_sm = 0, c_sn = 0, c_sb = 0;
  const float* bias = nullptr;  // (n), stride bias_s; nullptr: no bias
  std::int64_t bias_s = 1;
  float alpha = 1.f, beta = 0.f;  // beta == 0: C is never read
  Activation act = Activation::None;
  // A contiguous along m (B along n) whose rows are readable up to the next multiple of 4 elements, as in a
  // packed copy (Config::pack): a run straddling the matrix's edge may still be loaded whole.
  bool a_padded = false, b_padded = false;
  // Then each row of C (along n) replaced by its softmax. The reduce kernel runs it (launch_splitk_reduce):
  // after the splits it adds, or after a product stored raw where the configuration adds no splits there.
  bool softmax = false;
  // B already packed for the wgmma kernels (wgmma_pack_b): a wgmma launch whose layout it matches reads it
  // instead of packing B; every other kernel ignores it (b stays the operand).
  const WgmmaPackedB* b_packed = nullptr;
};

// Calls fn(q) for each chunk of at most 65535 batch entries (the grid's y limit), q being `p` narrowed to the
// chunk.
template <class Fn>
void for_each_batch_chunk(const Problem& p, Fn&& fn) {
  constexpr int kMaxBatch = 65535;
  for (int b0 = 0; b0 < p.batch; b0 += kMaxBatch) {
    Problem q = p;
    q.batch = std::min(kMaxBatch, p.batch - b0);
    q.a += b0 * p.a_sb;
    q.b += b0 * p.b_sb;
    q.c += b0 * p.c_sb;
    fn(q);
  }
}

// The transposed product C^T = B^T A^T: M and N exchanged, B^T as the A operand and A^T as the B operand,
// C^T as C (Config::swap). Only for problems without a bias, a row softmax or a packed B (swappable).
inline bool swappable(const Problem& p) {
  return !p.bias && !p.softmax && !p.b_packed;
}
inline Problem swapped(const Problem& p) {
  Problem q = p;
  q.m = p.n, q.n = p.m;
  q.a = p.b, q.a_sm = p.b_sn, q.a_sk = p.b_sk, q.a_sb = p.b_sb;
  q.b = p.a, q.b_sk = p.a_sk, q.b_sn = p.a_sm, q.b_sb = p.a_sb;
  q.c_sm = p.c_sn, q.c_sn = p.c_sm;
  q.a_padded = p.b_padded, q.b_padded = p.a_padded;
  return q;
}

// ---------------------------------------------------------------- layout predicates (pure)

inline bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

// B can take the float4 loader: contiguous along n, rows and batches 16-byte aligned.
inline bool b_vectorisable(const Problem& p) {
  return p.b_sn == 1 && p.b_sk % 4 == 0 && (p.b_sb % 4 == 0 || p.batch == 1) && aligned16(p.b);
}
// Operands the register-staged loader takes: contiguous along k or along x (m for A, n for B); `*_runs16`:
// 4-element runs along that dimension start 16-byte aligned (rows and batches too).
inline bool a_reg_stageable(const Problem& p) {
  return p.a_sk == 1 || p.a_sm == 1;
}
inline bool b_reg_stageable(const Problem& p) {
  return p.b_sn == 1 || p.b_sk == 1;
}
inline bool a_runs16(const Problem& p) {
  const std::int64_t row = p.a_sk == 1 ? p.a_sm : p.a_sk;
  return row % 4 == 0 && (p.a_sb % 4 == 0 || p.batch == 1) && aligned16(p.a);
}
inline bool b_runs16(const Problem& p) {
  const std::int64_t row = p.b_sn == 1 ? p.b_sk : p.b_sn;
  return row % 4 == 0 && (p.b_sb % 4 == 0 || p.batch == 1) && aligned16(p.b);
}
// Every run of an operand's tiles one 16-byte load for RegLoader::load_whole<true>: 16-byte runs, and an
// operand contiguous along x (m for A, n for B) has an extent that is a multiple of 4 or rows padded to one,
// so no run reads past the edge.
inline bool a_whole_runs(const Problem& p) {
  return a_reg_stageable(p) && a_runs16(p) && ((p.a_sk == 1 && p.a_sm != 1) || p.m % 4 == 0 || p.a_padded);
}
inline bool b_whole_runs(const Problem& p) {
  return b_reg_stageable(p) && b_runs16(p) && ((p.b_sk == 1 && p.b_sn != 1) || p.n % 4 == 0 || p.b_padded);
}
inline bool vector_runs(const Problem& p) {
  return a_whole_runs(p) && b_whole_runs(p);
}
inline bool c_vectorisable(const Problem& p) {
  return p.c_sn == 1 && p.c_sm % 4 == 0 && (p.c_sb % 4 == 0 || p.batch == 1) && aligned16(p.c);
}
// The scalar loaders keep 32-bit offsets within a tile.
inline bool offsets_fit(std::int64_t sx, std::int64_t sk, int bx, int bk) {
  return static_cast<double>(bx) * static_cast<double>(std::max<std::int64_t>(sx, 0)) +
             static_cast<double>(bk) * static_cast<double>(std::max<std::int64_t>(sk, 0)) <
         2147483647.0;
}
inline int k_per_split(const Problem& p, int split, int bk) {
  const int per = (p.k + split - 1) / split;
  return (per + bk - 1) / bk * bk;
}

// The problems the 16-byte cp.async ring takes (Staging::CpAsync16): A contiguous along k and B along n, in
// 16-byte aligned rows and batches.
inline bool ring16_ready(const Problem& p) {
  return p.a_sk == 1 && (p.a_sm % 4 == 0 || p.m == 1) && (p.a_sb % 4 == 0 || p.batch == 1) &&
         aligned16(p.a) && b_vectorisable(p);
}
// The layout the lane loaders (Staging::CpAsync, unsplit, on the tiles built with them) read `p` in, at any
// leading dimension and alignment: bit 0 A contiguous along m (else along k), bit 1 B contiguous along k
// (else along n); -1 where an operand is contiguous along neither of its dimensions.
inline int lanes_layout(const Problem& p) {
  const int a = p.a_sk == 1 ? 0 : p.a_sm == 1 ? 1 : -1;
  const int b = p.b_sn == 1 ? 0 : p.b_sk == 1 ? 2 : -1;
  return a < 0 || b < 0 ? -1 : a + b;
}
// The layout every tile with lane loaders takes them in (the 256x128 tile's only): A along k, B along n.
inline bool lanes_ready(const Problem& p) {
  return lanes_layout(p) == 0;
}

// The row strides the TMA descriptors take: a single row of A (or of B) may have any stride, and counts as a
// row of K (of N) rounded up to whole 16-byte steps.
inline std::int64_t tma_lda(const Problem& p) {
  return p.m == 1 ? ((p.k + 3) / 4) * 4 : p.a_sm;
}
inline std::int64_t tma_ldb(const Problem& p) {
  return p.k == 1 ? ((p.n + 3) / 4) * 4 : p.b_sk;
}
// Rows of `cols` elements that the TMA descriptors fetch: 16-byte aligned steps at least a row long, or a
// single row.
inline bool tma_rows_ok(std::int64_t ld, std::int64_t cols, int rows) {
  return (ld % 4 == 0 && ld >= cols) || rows == 1;
}
// Batch entries in whole 16-byte steps that do not overlap, within the descriptor's range; or 0, a broadcast
// operand.
inline bool tma_batch_ok(const Problem& p, std::int64_t sb, std::int64_t matrix) {
  return p.batch == 1 || sb == 0 || (sb % 4 == 0 && sb >= matrix && sb < (std::int64_t{1} << 37));
}
// A as a TMA descriptor fetches it: contiguous along k in 16-byte aligned rows (tma_rows_ok, tma_batch_ok).
// The wgmma kernels fetch such an A directly in TF32 mode instead of packing it.
inline bool tma_a_ok(const Problem& p) {
  return p.m >= 1 && p.k >= 1 && tma_batch_ok(p, p.a_sb, p.m * tma_lda(p)) && p.a_sk == 1 &&
         tma_rows_ok(p.a_sm, p.k, p.m) && aligned16(p.a);
}
// The layouts the TMA kernels can fetch (Staging::Tma): A as tma_a_ok, B contiguous along n in the same
// kind of rows and batches. Whether the device and binary have the kernels is the DeviceModel's part
// (tma_ready).
inline bool tma_layout_ok(const Problem& p) {
  if (p.n < 1 || !tma_a_ok(p) || !tma_batch_ok(p, p.b_sb, p.k * tma_ldb(p))) return false;
  return p.b_sn == 1 && tma_rows_ok(p.b_sk, p.n, p.k) && aligned16(p.b);
}

// CPU reference (ops/cpu/gemm.cpp): float64 accumulation, then the same float epilogue as the kernels.
void cpu_gemm(const Problem& p);

}  // namespace mt::detail::gemm
