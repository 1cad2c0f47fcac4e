// Model recipes on the graph builder: the GPT-2 style transformer block (pre-LayerNorm, causal multi-head
// attention, a GELU-tanh MLP of 4 d), as bench/graph times it against PyTorch and `mlp_demo --model block`
// checks it against the Eigen reference. The same block through the eager ops is the graph's reference.
//
//   mt::Graph g;
//   const mt::BlockShape shape{.batch = 8, .tokens = 128, .heads = 12};
//   auto x = g.input("x", {8 * 128, 768});
//   g.output("y", mt::transformer_block(g, x, shape, mt::random_block_weights(768)));
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "minitensor/graph/graph.h"

namespace mt {

// The block's parameters under the names PyTorch's GPT-2 block would give them: linear weights (in, out),
// their biases (out), and the two LayerNorms' weight and bias (d).
struct BlockWeights {
  Tensor ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2;
  // (name, tensor) in the order above: for saving them, or feeding another framework the same block.
  std::vector<std::pair<std::string, Tensor>> named() const;
};

// Weights for width d, drawn as nn.Linear draws them (uniform within 1 / sqrt(fan_in)), LayerNorm weights in
// [0.5, 1.5] and biases in [-0.1, 0.1]; seeds seed, seed + 1, ... in the order of named(); on `device`.
BlockWeights random_block_weights(std::int64_t d, std::uint64_t seed = 100, Device device = Device::cpu());

struct BlockShape {
  std::int64_t batch = 1, tokens = 1, heads = 1;  // x holds batch * tokens rows of d; d / heads per head
};

// x (batch * tokens, d) -> (batch * tokens, d):
//   h  = layer_norm(x) (ln1), q / k / v = h W + b split into heads (batch, heads, tokens, d / heads)
//   x2 = x + causal_attention(q, k, v) (heads merged back) Wo + bo
//   y  = x2 + gelu_tanh(layer_norm(x2) (ln2) W1 + b1) W2 + b2
// Parameters are named as in BlockWeights (prefixed "name." when a name is given). ShapeError when x is not
// (batch * tokens, d), heads does not divide d, or a weight's shape does not fit d.
Node transformer_block(Graph& g, Node x, const BlockShape& shape, const BlockWeights& w,
                       const std::string& name = "");

// The same block through the eager ops (on x's device): the graph's reference.
Tensor transformer_block(const Tensor& x, const BlockShape& shape, const BlockWeights& w);

}  // namespace mt
