// launch(): runs one configuration of the SGEMM on a stream: batch chunks, K == 0, the transposed product
// (Config::swap), the product staged for the row softmax, operand packing, then the kernel table's launcher.
#include <algorithm>

#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/runtime/error.h"

namespace mt::detail::gemm {

namespace {

// One launch for a problem whose batch fits the grid (<= 65535).
void launch_one(const Problem& p, const Config& cfg, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) {  // C = beta * C (+ bias, activation): the reduction with no partials
    launch_splitk_reduce(p, nullptr, 0, stream);
    return;
  }
  if (cfg.swap) {
    Config plain = cfg;
    plain.swap = false;
    return launch_one(swapped(p), plain, stream);
  }
  const int split = std::max(1, cfg.split_k);
  if (p.softmax && !(split > 1 && cfg.reduce == SplitReduce::Kernel && !is_rung(cfg.kernel))) {
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
  if (cfg.pack) {
    Config plain = cfg;
    plain.pack = false;
    return launch_one(needs_pack(p) ? pack_operands(p, stream) : p, plain, stream);
  }
  if (cfg.b_along_n) {
    Config plain = cfg;
    plain.b_along_n = false;
    return launch_one(pack_b_along_n(p, stream), plain, stream);
  }
  Config c = cfg;
  c.split_k = split;
  kernel_info(c.kernel).launch(p, c, stream);
}

}  // namespace

void launch(const Problem& p, const Config& cfg, cudaStream_t stream) {
  MT_CHECK(can_implement(p, cfg), InvalidArgument, "gemm: configuration ", config_name(cfg), " cannot run ",
           p.m, "x", p.n, "x", p.k, " (batch ", p.batch, ")");
  for_each_batch_chunk(p, [&](const Problem& q) { launch_one(q, cfg, stream); });
}

}  // namespace mt::detail::gemm
