// Seeded random graphs for the differential tests: diamonds, shared subexpressions, broadcasting, views,
// reductions, softmax (as one op and as its max/sub/exp/sum/div pattern), transposes and small GEMMs.
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

#include "minitensor/graph/detail/ir.h"
#include "minitensor/graph/graph.h"
#include "minitensor/ops/elementwise.h"
#include "minitensor/ops/gemm.h"
#include "minitensor/ops/reduce.h"
#include "minitensor/ops/softmax.h"

namespace mt::test {

struct RandomGraph {
  Graph graph;
  TensorMap inputs;  // CPU tensors
  std::string description;
  // The outputs as the eager CPU ops compute them, op by op as the graph is built (each case below computes
  // its value next to its nodes): an evaluation that shares nothing with the graph's executors, to compare
  // run_cpu against.
  TensorMap expected;
};

inline RandomGraph make_random_graph(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  const std::int64_t dims_pool[] = {1, 2, 3, 5, 7, 8, 13, 16};
  RandomGraph rg;
  Graph& g = rg.graph;
  const int rank = 1 + pick(3);
  Shape base;
  for (int d = 0; d < rank; ++d) base.push_back(dims_pool[1 + pick(7)]);
  std::vector<Node> pool;
  std::map<int, Tensor> val;  // node id -> its eager value (the pool's nodes)
  // A node's eager value: the pool's from `val`, a leaf's from the tensor it was built with.
  auto VI = [&](int id) -> Tensor {
    const auto it = val.find(id);
    return it != val.end() ? it->second : g.data().at(id).value;
  };
  auto V = [&](const Node& n) { return VI(n.id()); };
  std::uint64_t tseed = seed * 7919 + 1;
  auto random_tensor = [&](const Shape& s) {  // U[-2, 2), made on the host (no ops needed to build a graph)
    std::vector<float> v = rand(s, tseed++).to_vector<float>();
    for (float& f : v) f = 4.0f * f - 2.0f;
    return from_vector(v, s);
  };
  // A shape that broadcasts into `s`: some extents set to 1, maybe fewer leading dims.
  auto broadcastable = [&](const Shape& s) {
    Shape out;
    const int drop = s.rank() > 1 ? pick(2) : 0;
    for (int d = drop; d < s.rank(); ++d) out.push_back(pick(3) == 0 ? 1 : s[d]);
    return out;
  };
  const int n_inputs = 1 + pick(2);
  for (int i = 0; i < n_inputs; ++i) {
    const Shape s = i == 0 ? base : broadcastable(base);
    const std::string name = detail::str("x", i);
    pool.push_back(g.input(name, s));
    rg.inputs[name] = random_tensor(s);
    val[pool.back().id()] = rg.inputs[name];
  }
  auto partner = [&](const Node& a) -> Node {  // an existing node broadcast-compatible with a, or a new leaf
    std::vector<Node> ok;
    for (const Node& b : pool) {
      const Shape &sa = a.shape(), &sb = b.shape();
      bool fits = true;
      for (int i = 1; i <= std::min(sa.rank(), sb.rank()); ++i) {
        const auto x = sa[sa.rank() - i], y = sb[sb.rank() - i];
        fits = fits && (x == y || x == 1 || y == 1);
      }
      if (fits && b.dtype() == DType::F32) ok.push_back(b);
    }
    if (!ok.empty() && pick(3) != 0) return ok[static_cast<size_t>(pick(static_cast<int>(ok.size())))];
    const Shape s = broadcastable(a.shape());
    return pick(2) ? g.parameter(detail::str("p", pool.size()), random_tensor(s))
                   : g.constant(random_tensor(s));
  };
  const int n_ops = 3 + pick(10);
  for (int k = 0; k < n_ops; ++k) {
    // Prefer recent nodes (chains) but reach back for diamonds.
    const Node a = pick(3) ? pool.back() : pool[static_cast<size_t>(pick(static_cast<int>(pool.size())))];
    if (a.dtype() != DType::F32) continue;
    const Shape& s = a.shape();
    Node r;
    Tensor e;  // r's eager value
    const Tensor x = V(a);
    // What the graph call recorded (its operands' order, axes, flags), read back so that the seeded draws
    // stay in the order of the calls above; the eager value is computed from the operands' eager values.
    auto nd = [&](const Node& n) -> const detail::NodeData& { return g.data().at(n.id()); };
    auto arg = [&](const Node& n, int k) { return VI(nd(n).inputs[static_cast<size_t>(k)]); };
    switch (pick(14)) {
      case 0: {
        const UnaryOp ops[] = {UnaryOp::Neg,  UnaryOp::Abs,  UnaryOp::Relu,     UnaryOp::Sigmoid,
                               UnaryOp::Tanh, UnaryOp::Gelu, UnaryOp::GeluTanh, UnaryOp::Square};
        r = g.unary(ops[pick(8)], a);
        e = mt::unary(nd(r).unary, x);
        break;
      }
      case 1:
      case 2: {
        const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Maximum,
                                BinaryOp::Minimum};
        const Node b = partner(a);
        r = pick(2) ? g.binary(ops[pick(5)], a, b) : g.binary(ops[pick(5)], b, a);
        e = mt::binary(nd(r).binary, arg(r, 0), arg(r, 1));
        break;
      }
      case 3:
        r = pick(2) ? a * 0.5 + 0.25 : 1.5 - a;
        e = nd(r).kind == detail::OpKind::ScalarBinary ? 1.5 - x : x * 0.5 + 0.25;
        break;
      case 4:
        r = g.exp(g.tanh(a));
        e = mt::exp(mt::tanh(x));
        break;
      case 5:
        r = g.clamp(a, -1.0, 1.5);
        e = mt::clamp(x, -1.0, 1.5);
        break;
      case 6: {
        const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min};
        if (s.rank() == 0) continue;
        r = g.reduce(ops[pick(4)], a, {static_cast<std::int64_t>(pick(s.rank()))}, pick(2) == 0);
        e = mt::reduce(nd(r).reduce, x, nd(r).axes, nd(r).keepdim);
        break;
      }
      case 7:
        if (s.rank() == 0) continue;
        r = pick(2) ? g.softmax(a, pick(s.rank())) : g.log_softmax(a, -1);
        e = nd(r).kind == detail::OpKind::Softmax ? mt::softmax(x, nd(r).axes[0]) : mt::log_softmax(x, -1);
        break;
      case 8: {  // the softmax pattern, spelled out
        if (s.rank() == 0) continue;
        const std::int64_t ax = pick(s.rank());
        const Node en = g.exp(a - g.max(a, ax, true));
        r = en / g.sum(en, ax, true);
        const Tensor ex = mt::exp(x - mt::max(x, ax, true));
        e = ex / mt::sum(ex, ax, true);
        break;
      }
      case 9:
        if (s.rank() < 2) continue;
        r = g.transpose(a, 0, s.rank() - 1);
        e = x.transpose(0, s.rank() - 1);
        break;
      case 10:
        r = pick(2) ? g.reshape(a, {-1}) : g.view(a, {s.numel()});
        if (pick(2) && s.rank() >= 2) r = g.reshape(r, s);  // and back
        e = x.reshape(r.shape());
        break;
      case 11: {  // a small GEMM, sometimes with bias and activation (epilogue fusion candidates)
        if (s.rank() != 2) continue;
        const std::int64_t n = dims_pool[1 + pick(7)];
        const Node w = g.parameter(detail::str("w", pool.size()), random_tensor({s[1], n}));
        r = g.matmul(a, w);
        e = mt::matmul(x, V(w));
        if (pick(2)) {
          r = r + g.parameter(detail::str("b", pool.size()), random_tensor({n}));
          e = e + arg(r, 1);
        }
        if (pick(2)) {
          r = g.relu(r);
          e = mt::relu(e);
        }
        break;
      }
      case 12: {  // a shared subexpression: the same op twice (CSE merges them) feeding one node (a diamond)
        const Node u = g.sigmoid(a), v = g.sigmoid(a);
        r = u * v + a;
        e = mt::sigmoid(x) * mt::sigmoid(x) + x;
        break;
      }
      default: {  // linear with bias on the flattened rows
        if (s.rank() < 1) continue;
        const std::int64_t n = dims_pool[1 + pick(7)];
        r = g.linear(a, g.parameter(detail::str("lw", pool.size()), random_tensor({s.back(), n})),
                     g.parameter(detail::str("lb", pool.size()), random_tensor({n})),
                     pick(2) ? Activation::Relu : Activation::None);
        e = mt::matmul(x, arg(r, 1)) + arg(r, 2);
        if (nd(r).gemm.activation == Activation::Relu) e = mt::relu(e);
        break;
      }
    }
    if (r.valid()) {
      pool.push_back(r);
      val[r.id()] = e;
    }
  }
  g.output("y", pool.back());
  rg.expected["y"] = V(pool.back());
  if (pool.size() > 3 && pick(2)) {
    g.output("z", pool[pool.size() / 2]);
    rg.expected["z"] = V(pool[pool.size() / 2]);
  }
  rg.description = g.dump();
  return rg;
}

}  // namespace mt::test
