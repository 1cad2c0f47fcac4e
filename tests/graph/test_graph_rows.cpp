// The row-wise graph nodes (layer_norm, rms_norm, attention) and the builders rsqrt, reciprocal, pow and
// argmin: each against its eager op on the CPU, checked when added, and on the GPU through the executor
// (fused, captured into a CUDA graph) against the CPU reference with check().
#include <gtest/gtest.h>

#include <cmath>

#include "minitensor/graph/graph.h"
#include "minitensor/ops/ops.h"
#include "tests/common/gpu.h"

namespace mt {
namespace {

Tensor uniform(const Shape& s, std::uint64_t seed, double lo = -1, double hi = 1) {
  return rand(s, seed) * (hi - lo) + lo;
}

double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.cpu().contiguous() - b.cpu().contiguous())).item<float>();
}

// A pre-LayerNorm attention block: x -> layer_norm -> q, k, v (heads) -> causal attention -> projection ->
// residual -> rms_norm.
struct Block {
  Graph g;
  Tensor w_ln, b_ln, wq, wk, wv, wo, w_rms;
  static constexpr std::int64_t B = 2, T = 70, H = 2, D = 32, C = H * D;
  Block() {
    w_ln = uniform({C}, 1), b_ln = uniform({C}, 2);
    wq = uniform({C, C}, 3, -0.2, 0.2), wk = uniform({C, C}, 4, -0.2, 0.2),
    wv = uniform({C, C}, 5, -0.2, 0.2);
    wo = uniform({C, C}, 6, -0.2, 0.2), w_rms = uniform({C}, 7);
    auto x = g.input("x", {B * T, C});
    auto h = g.layer_norm(x, g.parameter("w_ln", w_ln), g.parameter("b_ln", b_ln));
    auto heads = [&](Node n) { return g.permute(g.reshape(n, {B, T, H, D}), {0, 2, 1, 3}); };
    auto q = heads(g.matmul(h, g.parameter("wq", wq)));
    auto k = heads(g.matmul(h, g.parameter("wk", wk)));
    auto v = heads(g.matmul(h, g.parameter("wv", wv)));
    auto a = g.reshape(g.permute(g.attention(q, k, v, Node(), true), {0, 2, 1, 3}), {B * T, C});
    g.output("y", g.rms_norm(x + g.matmul(a, g.parameter("wo", wo)), g.parameter("w_rms", w_rms)));
  }
  Tensor eager(const Tensor& x) const {
    const Tensor h = layer_norm(x, w_ln, b_ln);
    auto heads = [&](const Tensor& n) { return n.reshape({B, T, H, D}).permute({0, 2, 1, 3}); };
    AttentionOptions o;
    o.causal = true;
    const Tensor a = attention(heads(matmul(h, wq)), heads(matmul(h, wk)), heads(matmul(h, wv)), o)
                         .permute({0, 2, 1, 3})
                         .contiguous()
                         .reshape({B * T, C});
    return rms_norm(x + matmul(a, wo), w_rms);
  }
};

TEST(GraphRows, CpuMatchesEagerOps) {
  Block b;
  const Tensor x = uniform({Block::B * Block::T, Block::C}, 9);
  EXPECT_LT(max_diff(run_cpu(b.g, {{"x", x}}).at("y"), b.eager(x)), 1e-5);
}

TEST(GraphRows, BuildersForEagerOps) {
  Graph g;
  auto x = g.input("x", {5, 7});
  g.output("r", g.rsqrt(x));
  g.output("i", g.reciprocal(x));
  g.output("p", g.pow(x, x));
  g.output("a", g.argmin(x, 1));
  const Tensor xv = uniform({5, 7}, 3, 0.5, 2.0);
  const TensorMap out = run_cpu(g, {{"x", xv}});
  EXPECT_LT(max_diff(out.at("r"), rsqrt(xv)), 1e-6);
  EXPECT_LT(max_diff(out.at("i"), reciprocal(xv)), 1e-6);
  EXPECT_LT(max_diff(out.at("p"), pow(xv, xv)), 1e-6);
  EXPECT_EQ(out.at("a").to_vector<std::int32_t>(), argmin(xv, 1).to_vector<std::int32_t>());
}

TEST(GraphRows, CheckedWhenAdded) {
  Graph g;
  auto x = g.input("x", {4, 8});
  EXPECT_THROW(g.layer_norm(x, g.input("w", {7})), ShapeError);
  EXPECT_THROW(g.rms_norm(g.input("i", {4, 8}, DType::I32)), DTypeError);
  EXPECT_THROW(g.layer_norm(x, Node(), Node(), -1.0), InvalidArgument);
  auto q = g.input("q", {2, 6, 16});
  EXPECT_THROW(g.attention(q, g.input("k", {2, 6, 8}), q), ShapeError);
  EXPECT_THROW(g.attention(q, q, g.input("v", {2, 5, 16})), ShapeError);
  EXPECT_THROW(g.attention(q, q, q, g.input("m", {5, 6})), ShapeError);
  EXPECT_NO_THROW(g.attention(q, q, q, g.input("m2", {6, 6}), true, 0.5));
}

TEST(GraphRows, GpuFusedAndCapturedPassCheck) {
  MT_REQUIRE_GPU();
  Block b;
  const Tensor x = uniform({Block::B * Block::T, Block::C}, 9);
  ExecOptions o;
  o.device = Device::cuda(0);
  o.run.cuda_graph = true;
  const CheckReport r = check(b.g, {{"x", x}}, o);
  EXPECT_TRUE(r.ok) << r;
  Executor e(b.g, o);
  Tensor xi = uniform({Block::B * Block::T, Block::C}, 20).cuda();  // one input buffer: replays run on it
  for (int rep = 0; rep < 3; ++rep) {
    xi.copy_(uniform({Block::B * Block::T, Block::C}, 20 + rep));
    EXPECT_LT(max_diff(e.run({{"x", xi}}).at("y"), b.eager(xi.cpu())), 2e-5) << "run " << rep;
  }
  EXPECT_GT(e.stats().n_replays, 0);
}

}  // namespace
}  // namespace mt
