// How Config::pack and Config::b_along_n lay out a copied operand (ops/gemm/pack.cu); dispatch reads it to
// weigh the copy.
#pragma once

#include <cstdint>

#include "minitensor/ops/gemm/detail/problem.h"

namespace mt::detail::gemm {

inline int batches_of(std::int64_t sb, int batch) {
  return sb == 0 ? 1 : batch;
}
inline std::int64_t round4(int x) {
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
inline bool a_packs_along_m(const Problem& p) {
  return p.a_sm == 1 && p.a_sk != 1;
}
// B keeps k contiguous where it is (and n is not); otherwise it goes n-contiguous (the fast layout).
inline bool b_packs_along_k(const Problem& p) {
  return p.b_sk == 1 && p.b_sn != 1;
}
// B copied contiguous along n: k rows of n, padded to a multiple of 4 floats.
inline PackedLayout b_layout_along_n(const Problem& p) {
  return {p.k, p.n, p.b_sk, p.b_sn, round4(p.n)};
}
// q's B set to read a copy of p's B along n (b left null for the caller to place).
inline void read_b_along_n(Problem& q, const Problem& p) {
  const PackedLayout l = b_layout_along_n(p);
  q.b = nullptr;
  q.b_sb = batches_of(p.b_sb, p.batch) > 1 ? l.rows * l.ld : 0;
  q.b_sn = 1, q.b_sk = l.ld, q.b_padded = true;
}
inline PackedLayout a_layout(const Problem& p) {
  if (a_packs_along_m(p)) return {p.k, p.m, p.a_sk, p.a_sm, round4(p.m)};
  return {p.m, p.k, p.a_sm, p.a_sk, round4(p.k)};
}
inline PackedLayout b_layout(const Problem& p) {
  if (b_packs_along_k(p)) return {p.n, p.k, p.b_sn, p.b_sk, round4(p.k)};
  return b_layout_along_n(p);
}

// Config::b_along_n: B stored contiguous along k in whole 16-byte runs, A too (nothing else to pack), and no
// wgmma-packed B.
inline bool b_repackable(const Problem& p) {
  return p.b_sk == 1 && p.b_sn != 1 && !p.b_packed && a_whole_runs(p) && b_whole_runs(p);
}
// `p` as the kernel sees it after Config::b_along_n's copy (b left null). Pure.
inline Problem b_along_n_shape(const Problem& p) {
  Problem q = p;
  read_b_along_n(q, p);
  return q;
}

}  // namespace mt::detail::gemm
