// Model recipes (graph/models.h): the GPT-2 style transformer block, as a graph and through the eager ops.
#include "minitensor/graph/models.h"

#include <cmath>

#include "minitensor/graph/detail/internal.h"
#include "minitensor/ops/ops.h"

namespace mt {

namespace {

Tensor uniform_on(const Shape& s, std::uint64_t seed, double lo, double hi, Device device) {
  std::vector<float> v = rand(s, seed).to_vector<float>();
  for (float& f : v) f = static_cast<float>(lo + (hi - lo) * f);
  return from_vector(v, s, device);
}

// d of the block, from x's shape and the weights, each checked.
std::int64_t check_block(const Shape& x, const BlockShape& shape, const BlockWeights& w, const char* ctx) {
  MT_CHECK(shape.batch >= 1 && shape.tokens >= 1 && shape.heads >= 1, ShapeError, ctx,
           ": batch, tokens and heads must be at least 1, got ", shape.batch, ", ", shape.tokens, ", ",
           shape.heads);
  MT_CHECK(x.rank() == 2 && x[0] == shape.batch * shape.tokens, ShapeError, ctx, ": x must be (batch * tokens",
           " = ", shape.batch * shape.tokens, ", d), got ", x);
  const std::int64_t d = x[1];
  MT_CHECK(d % shape.heads == 0, ShapeError, ctx, ": ", shape.heads, " heads do not divide d = ", d);
  for (const auto& [name, t] : w.named()) {
    t.check_defined(detail::str(ctx, " (", name, ")").c_str());
    const bool matrix = name[0] == 'w';
    const std::int64_t in = name == "w2" ? 4 * d : d, out = name == "w1" || name == "b1" ? 4 * d : d;
    const Shape want = matrix ? Shape{in, out} : Shape{out};
    MT_CHECK(t.shape() == want, ShapeError, ctx, ": ", name, " must be ", want, " for d = ", d, ", got ",
             t.shape());
  }
  return d;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> BlockWeights::named() const {
  return {{"ln1_w", ln1_w}, {"ln1_b", ln1_b}, {"wq", wq}, {"bq", bq},       {"wk", wk},       {"bk", bk},
          {"wv", wv},       {"bv", bv},       {"wo", wo}, {"bo", bo},       {"ln2_w", ln2_w}, {"ln2_b", ln2_b},
          {"w1", w1},       {"b1", b1},       {"w2", w2}, {"b2", b2}};
}

BlockWeights random_block_weights(std::int64_t d, std::uint64_t seed, Device device) {
  MT_CHECK(d >= 1, ShapeError, "random_block_weights: d must be at least 1, got ", d);
  const double s = 1.0 / std::sqrt(static_cast<double>(d)), s4 = 1.0 / std::sqrt(4.0 * static_cast<double>(d));
  auto draw = [&](const Shape& shape, double lo, double hi) { return uniform_on(shape, seed++, lo, hi, device); };
  BlockWeights w;
  w.ln1_w = draw({d}, 0.5, 1.5), w.ln1_b = draw({d}, -0.1, 0.1);
  w.wq = draw({d, d}, -s, s), w.bq = draw({d}, -s, s);
  w.wk = draw({d, d}, -s, s), w.bk = draw({d}, -s, s);
  w.wv = draw({d, d}, -s, s), w.bv = draw({d}, -s, s);
  w.wo = draw({d, d}, -s, s), w.bo = draw({d}, -s, s);
  w.ln2_w = draw({d}, 0.5, 1.5), w.ln2_b = draw({d}, -0.1, 0.1);
  w.w1 = draw({d, 4 * d}, -s, s), w.b1 = draw({4 * d}, -s, s);
  w.w2 = draw({4 * d, d}, -s4, s4), w.b2 = draw({d}, -s4, s4);
  return w;
}

Node transformer_block(Graph& g, Node x, const BlockShape& shape, const BlockWeights& w, const std::string& name) {
  const std::int64_t d = check_block(x.shape(), shape, w, detail::op_context("transformer_block", name).c_str());
  const std::int64_t b = shape.batch, t = shape.tokens, h = shape.heads;
  auto param = [&](const char* what, const Tensor& v) {
    return g.parameter(name.empty() ? std::string(what) : name + "." + what, v);
  };
  auto heads_of = [&](Node n) { return g.permute(g.reshape(n, {b, t, h, d / h}), {0, 2, 1, 3}); };
  Node h1 = g.layer_norm(x, param("ln1_w", w.ln1_w), param("ln1_b", w.ln1_b));
  Node q = heads_of(g.linear(h1, param("wq", w.wq), param("bq", w.bq)));
  Node k = heads_of(g.linear(h1, param("wk", w.wk), param("bk", w.bk)));
  Node v = heads_of(g.linear(h1, param("wv", w.wv), param("bv", w.bv)));
  Node a = g.reshape(g.permute(g.attention(q, k, v, Node(), true), {0, 2, 1, 3}), {b * t, d});
  Node x2 = x + g.linear(a, param("wo", w.wo), param("bo", w.bo));
  Node h2 = g.layer_norm(x2, param("ln2_w", w.ln2_w), param("ln2_b", w.ln2_b));
  Node f = g.linear(h2, param("w1", w.w1), param("b1", w.b1), Activation::GeluTanh);
  Node y = x2 + g.linear(f, param("w2", w.w2), param("b2", w.b2));
  return name.empty() ? y : y.named(name);
}

Tensor transformer_block(const Tensor& x, const BlockShape& shape, const BlockWeights& w) {
  x.check_defined("transformer_block");
  const std::int64_t d = check_block(x.shape(), shape, w, "transformer_block");
  const std::int64_t b = shape.batch, t = shape.tokens, h = shape.heads;
  auto heads_of = [&](const Tensor& n) { return n.reshape({b, t, h, d / h}).permute({0, 2, 1, 3}); };
  const Tensor h1 = layer_norm(x, w.ln1_w, w.ln1_b);
  AttentionOptions causal;
  causal.causal = true;
  const Tensor a = attention(heads_of(linear(h1, w.wq, w.bq)), heads_of(linear(h1, w.wk, w.bk)),
                             heads_of(linear(h1, w.wv, w.bv)), causal)
                       .permute({0, 2, 1, 3})
                       .reshape({b * t, d});
  const Tensor x2 = x + linear(a, w.wo, w.bo);
  const Tensor f = linear(layer_norm(x2, w.ln2_w, w.ln2_b), w.w1, w.b1, Activation::GeluTanh);
  return x2 + linear(f, w.w2, w.b2);
}

}  // namespace mt
