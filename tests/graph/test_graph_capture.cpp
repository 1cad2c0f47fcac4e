// CUDA-graph capture of transformer-shaped graphs: what a captured run launches (batched GEMMs over permuted
// views, per-stream scratch, packed operands) must be legal inside a capture, and replays must stay correct.
#include <gtest/gtest.h>

#include <cmath>

#include "minitensor/graph/graph.h"
#include "minitensor/ops/ops.h"
#include "tests/common/gpu.h"

namespace mt {
namespace {

Tensor scaled_rand(const Shape& s, std::uint64_t seed, double scale) {
  return (rand(s, seed) - 0.5) * (2 * scale);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.cpu().contiguous() - b.cpu().contiguous())).item<float>();
}

// Attention at 4 x 512 tokens, 12 heads of 64: q, k and v projections reshaped and permuted into heads, the
// batched 512 x 512 x 64 score and value products, and the heads permuted back. In 3xTF32 mode, captured
// into a CUDA graph and replayed with new inputs, every replay equals the uncaptured fp32 executor within
// float32-class tolerance.
TEST(GraphCapture, Tf32x3AttentionGemmsCaptureAndReplay) {
  MT_REQUIRE_SM90();
  const std::int64_t B = 4, T = 512, H = 12, D = 64, C = H * D;
  Graph g;
  auto x = g.input("x", {B * T, C});
  auto heads = [&](Node n) { return g.permute(g.reshape(n, {B, T, H, D}), {0, 2, 1, 3}); };
  const double ws = 1.0 / std::sqrt(static_cast<double>(C));
  auto q = heads(g.matmul(x, g.parameter("wq", scaled_rand({C, C}, 31, ws).cuda())));
  auto k = heads(g.matmul(x, g.parameter("wk", scaled_rand({C, C}, 32, ws).cuda())));
  auto v = heads(g.matmul(x, g.parameter("wv", scaled_rand({C, C}, 33, ws).cuda())));
  auto p = g.softmax(g.matmul(q, g.transpose(k, -1, -2)) * (1.0 / std::sqrt(static_cast<double>(D))), -1);
  g.output("y", g.reshape(g.permute(g.matmul(p, v), {0, 2, 1, 3}), {B * T, C}));

  ExecOptions captured, plain;
  captured.device = plain.device = Device::cuda(0);
  captured.compile.math = MathMode::TF32x3;
  captured.run.cuda_graph = true;
  plain.compile.math = MathMode::FP32;
  Executor ec(g, captured), ep(g, plain);
  Tensor xi = scaled_rand({B * T, C}, 40, 1.0).cuda();  // one input buffer: the captured graph replays on it
  for (int rep = 0; rep < 3; ++rep) {
    xi.copy_(scaled_rand({B * T, C}, 40 + rep, 1.0));
    const Tensor got = ec.run({{"x", xi}}).at("y").clone();
    const Tensor want = ep.run({{"x", xi}}).at("y");
    EXPECT_LT(max_abs_diff(got, want), 2e-5) << "replay " << rep;
  }
  EXPECT_GT(ec.stats().n_replays, 0);
}

}  // namespace
}  // namespace mt
