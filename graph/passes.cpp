// Compile passes: CSE, dead-node elimination, pattern fusion (softmax, GEMM epilogue), elementwise grouping.
//
// Node ids are a topological order (a node only names earlier nodes) and every rewrite keeps it so: a
// rewritten node's new inputs come from below it.
#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

#include "minitensor/graph/detail/program.h"

namespace mt::detail {

std::string Program::node_label(int id) const {
  return str(g.label(id), " ", node_op_string(g.at(id)));
}

namespace {

std::string bits(double v) {
  std::uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  return std::to_string(u);
}

// Everything that makes two nodes compute the same value.
std::string cse_key(const NodeData& n) {
  std::string k =
      str(static_cast<int>(n.kind), "|", static_cast<int>(n.unary), "|", static_cast<int>(n.binary), "|",
          static_cast<int>(n.reduce), "|", bits(n.scalar), "|", bits(n.scalar2), "|", n.keepdim, "|", n.has_c,
          n.has_bias, "|", n.gemm.trans_a, n.gemm.trans_b, bits(n.gemm.alpha), bits(n.gemm.beta),
          static_cast<int>(n.gemm.activation), "|", n.gemm.softmax, "|", n.shape.str(), "|");
  for (auto a : n.axes) k += str(a, ",");
  k += str("|", n.start, "|", static_cast<int>(n.dist_op), "|", n.world, "|");
  for (int in : n.inputs) k += str(in, ",");
  return k;
}

void count_uses(Program& p) {
  const int n = static_cast<int>(p.g.nodes.size());
  p.live.assign(static_cast<size_t>(n), false);
  p.n_uses.assign(static_cast<size_t>(n), 0);
  p.is_output.assign(static_cast<size_t>(n), false);
  for (const auto& o : p.g.outputs) {
    p.live[static_cast<size_t>(o.second)] = true;
    p.is_output[static_cast<size_t>(o.second)] = true;
    ++p.n_uses[static_cast<size_t>(o.second)];
  }
  for (auto it = p.topo.rbegin(); it != p.topo.rend(); ++it) {
    const int id = *it;
    if (!p.live[static_cast<size_t>(id)]) continue;
    for (int in : p.g.at(id).inputs) {
      p.live[static_cast<size_t>(in)] = true;
      ++p.n_uses[static_cast<size_t>(in)];
    }
  }
  p.order.clear();
  for (int id : p.topo)
    if (p.live[static_cast<size_t>(id)]) p.order.push_back(id);
}

bool single_use(const Program& p, int id) {
  return p.n_uses[static_cast<size_t>(id)] == 1 && !p.is_output[static_cast<size_t>(id)];
}

// y = e / sum(e, a, keepdim), e = exp(x - max(x, a, keepdim))  ->  y = softmax(x, a)
bool fuse_softmax_at(Program& p, int y) {
  NodeData& ny = p.g.at(y);
  if (ny.kind != OpKind::Binary || ny.binary != BinaryOp::Div) return false;
  const int e = ny.inputs[0], z = ny.inputs[1];
  const NodeData &ne = p.g.at(e), &nz = p.g.at(z);
  if (nz.kind != OpKind::Reduce || nz.reduce != ReduceOp::Sum || !nz.keepdim || nz.axes.size() != 1 ||
      nz.inputs[0] != e)
    return false;
  if (ne.kind != OpKind::Unary || ne.unary != UnaryOp::Exp) return false;
  const int s = ne.inputs[0];
  const NodeData& ns = p.g.at(s);
  if (ns.kind != OpKind::Binary || ns.binary != BinaryOp::Sub) return false;
  const int x = ns.inputs[0], m = ns.inputs[1];
  const NodeData& nm = p.g.at(m);
  if (nm.kind != OpKind::Reduce || nm.reduce != ReduceOp::Max || !nm.keepdim || nm.axes != nz.axes ||
      nm.inputs[0] != x)
    return false;
  const NodeData& nx = p.g.at(x);
  if (nx.dtype != DType::F32 || !(ns.shape == nx.shape) || !(ny.shape == nx.shape)) return false;
  if (!single_use(p, m) || !single_use(p, s) || !single_use(p, z) || p.n_uses[static_cast<size_t>(e)] != 2 ||
      p.is_output[static_cast<size_t>(e)])
    return false;
  const std::int64_t axis = nz.axes[0];
  ny.kind = OpKind::Softmax;
  ny.inputs = {x};
  ny.axes = {axis};
  p.log.push_back(str("softmax: ", p.g.label(m), " ", p.g.label(s), " ", p.g.label(e), " ", p.g.label(z), " ",
                      p.g.label(y), " -> softmax(", p.g.label(x), ", axis ", axis, ")"));
  return true;
}

// Whether node `nl` is a GEMM an epilogue op can join: linear, gemm, or matmul of a (..., k) by a (k, n).
bool linear_like(const Program& p, const NodeData& nl) {
  return nl.kind == OpKind::Linear || nl.kind == OpKind::Gemm ||
         (nl.kind == OpKind::Matmul && p.g.at(nl.inputs[0]).shape.rank() >= 2 &&
          p.g.at(nl.inputs[1]).shape.rank() == 2);
}

// Node y (an op on GEMM node nl's result) becomes that GEMM under y's name, a matmul turned into a linear;
// the caller then adds y's op to its epilogue.
void absorb_gemm(Program& p, int y, const NodeData& nl) {
  NodeData& ny = p.g.at(y);
  const std::string name = ny.name;
  ny = nl;
  ny.name = name;
  if (ny.kind == OpKind::Matmul) {
    ny.kind = OpKind::Linear;
    ny.gemm = GemmNodeOptions{};
  }
}

// The epilogue activation that computes unary op `op`; None when there is none.
Activation epilogue_activation(UnaryOp op) {
  switch (op) {
    case UnaryOp::Relu:
      return Activation::Relu;
    case UnaryOp::Gelu:
      return Activation::Gelu;
    case UnaryOp::GeluTanh:
      return Activation::GeluTanh;
    default:
      return Activation::None;
  }
}

// matmul(x, w) + bias -> linear(x, w, bias); linear/gemm followed by relu/gelu/gelu_tanh -> activation
// epilogue.
bool fuse_epilogue_at(Program& p, int y) {
  NodeData& ny = p.g.at(y);
  if (ny.kind == OpKind::Binary && ny.binary == BinaryOp::Add) {
    for (int side = 0; side < 2; ++side) {
      const int mm = ny.inputs[static_cast<size_t>(side)], bias = ny.inputs[static_cast<size_t>(1 - side)];
      const NodeData &nm = p.g.at(mm), &nb = p.g.at(bias);
      if (nm.kind != OpKind::Matmul || !single_use(p, mm)) continue;
      const NodeData &nx = p.g.at(nm.inputs[0]), &nw = p.g.at(nm.inputs[1]);
      if (nx.shape.rank() < 2 || nw.shape.rank() != 2) continue;
      const std::int64_t n_out = nw.shape[1];
      if (nb.dtype != DType::F32 || nb.shape.rank() < 1 || nb.shape.back() != n_out ||
          nb.shape.numel() != n_out)
        continue;
      if (!(ny.shape == nm.shape)) continue;
      const int x = nm.inputs[0], w = nm.inputs[1];
      ny.kind = OpKind::Linear;
      ny.inputs = {x, w, bias};
      ny.has_bias = true;
      ny.gemm = GemmNodeOptions{};
      p.log.push_back(str("gemm epilogue: ", p.g.label(mm), " matmul + ", p.g.label(y), " add(",
                          p.g.label(bias), ") -> linear+bias"));
      return true;
    }
    return false;
  }
  if (ny.kind == OpKind::Unary && epilogue_activation(ny.unary) != Activation::None) {
    const int l = ny.inputs[0];
    const NodeData nl = p.g.at(l);
    // The epilogue applies the activation before the softmax: one after a softmax cannot join.
    if (!single_use(p, l) || nl.gemm.activation != Activation::None || nl.gemm.softmax || !linear_like(p, nl))
      return false;
    const Activation act = epilogue_activation(ny.unary);
    absorb_gemm(p, y, nl);
    NodeData& ng = p.g.at(y);
    ng.gemm.activation = act;
    p.log.push_back(str("gemm epilogue: ", p.g.label(l), " ", node_op_string(nl), " + ", p.g.label(y), " ",
                        activation_name(act), " -> ", node_op_string(ng)));
    return true;
  }
  return false;
}

// linear/gemm followed by softmax over its last axis -> the softmax runs in the GEMM's reduce pass (the one
// that adds split K's partials, or one over the raw product), which saves the softmax's own pass and launch.
bool fuse_gemm_softmax_at(Program& p, int y) {
  NodeData& ny = p.g.at(y);
  if (ny.kind != OpKind::Softmax) return false;
  const int l = ny.inputs[0];
  const NodeData nl = p.g.at(l);
  if (ny.axes[0] != nl.shape.rank() - 1 || !single_use(p, l) || nl.gemm.softmax || !linear_like(p, nl))
    return false;
  absorb_gemm(p, y, nl);
  NodeData& ng = p.g.at(y);
  ng.gemm.softmax = true;
  p.log.push_back(str("gemm epilogue: ", p.g.label(l), " ", node_op_string(nl), " + ", p.g.label(y),
                      " softmax -> ", node_op_string(ng)));
  return true;
}

// A step that runs node m on its own.
Step single_op_step(const Program& p, int m) {
  Step one;
  one.root = m;
  one.members = {m};
  one.kind = Step::Kind::Op;
  one.reads = p.g.at(m).inputs;
  std::sort(one.reads.begin(), one.reads.end());
  one.reads.erase(std::unique(one.reads.begin(), one.reads.end()), one.reads.end());
  return one;
}

bool fusable_elementwise(const Program& p, int id) {
  const NodeData& n = p.g.at(id);
  if (!n.is_elementwise() || n.dtype != DType::F32) return false;
  for (int in : n.inputs)
    if (p.g.at(in).dtype != DType::F32) return false;
  return true;
}

}  // namespace

Program build_program(const GraphData& graph, const CompileFlags& flags) {
  Program p;
  p.g.nodes = graph.nodes;
  p.g.outputs = graph.outputs;
  int n = static_cast<int>(p.g.nodes.size());
  p.topo.resize(static_cast<size_t>(n));
  std::iota(p.topo.begin(), p.topo.end(), 0);

  // CSE over the nodes reachable from the outputs (leaves are never merged: two parameters are two tensors).
  count_uses(p);
  p.replaced_by.resize(static_cast<size_t>(n));
  std::map<std::string, int> seen;
  for (int id = 0; id < n; ++id) {
    p.replaced_by[static_cast<size_t>(id)] = id;
    NodeData& nd = p.g.at(id);
    for (int& in : nd.inputs) in = p.replaced_by[static_cast<size_t>(in)];
    if (nd.is_leaf() || !p.live[static_cast<size_t>(id)]) continue;
    const auto [it, inserted] = seen.emplace(cse_key(nd), id);
    if (!inserted) {
      p.replaced_by[static_cast<size_t>(id)] = it->second;
      p.log.push_back(str("cse: ", p.g.label(id), " is ", p.g.label(it->second)));
    }
  }
  for (auto& o : p.g.outputs) o.second = p.replaced_by[static_cast<size_t>(o.second)];
  count_uses(p);  // dead-node elimination: only nodes reachable from the outputs stay live

  if (flags.fuse_softmax) {
    bool changed = false;
    for (int id : std::vector<int>(p.order)) changed |= fuse_softmax_at(p, id);
    if (changed) count_uses(p);
  }
  if (flags.fuse_gemm_epilogue) {
    for (int pass = 0; pass < 2; ++pass) {  // bias first, then the activation on the result
      bool changed = false;
      for (int id : std::vector<int>(p.order)) {
        if (fuse_epilogue_at(p, id)) {
          changed = true;
          count_uses(p);
        }
      }
      if (!changed) break;
    }
    bool changed = false;
    for (int id : std::vector<int>(p.order)) changed |= fuse_gemm_softmax_at(p, id);
    if (changed) count_uses(p);
  }

  if (flags.merge_linears && merge_linears(p)) {
    n = static_cast<int>(p.g.nodes.size());
    for (int id = static_cast<int>(p.replaced_by.size()); id < n; ++id) p.replaced_by.push_back(id);
    count_uses(p);
  }
  fold_views(p, flags.fold_views);

  // Elementwise grouping, from the outputs down: a node joins the group of its consumers when all its
  // consumers are in one group, it has the group's shape (no recomputation under broadcasting) and it is not
  // an output.
  std::vector<int> group(static_cast<size_t>(n), -1);  // group id = its root's node id
  std::vector<std::vector<int>> consumers(static_cast<size_t>(n));
  for (int id : p.order)
    for (int in : p.g.at(id).inputs) consumers[static_cast<size_t>(in)].push_back(id);
  std::map<int, int> group_size;
  for (auto it = p.order.rbegin(); it != p.order.rend(); ++it) {
    const int id = *it;
    if (!fusable_elementwise(p, id)) continue;
    group[static_cast<size_t>(id)] = id;
    if (!flags.fuse_elementwise || p.is_output[static_cast<size_t>(id)]) continue;
    const auto& cons = consumers[static_cast<size_t>(id)];
    if (cons.empty()) continue;
    const int g0 = group[static_cast<size_t>(cons[0])];
    bool same = g0 >= 0;
    for (int c : cons) same = same && group[static_cast<size_t>(c)] == g0;
    if (!same) continue;
    if (!(p.g.at(id).shape == p.g.at(g0).shape)) {
      p.log.push_back(str("no fusion: ", p.g.label(id), " ", p.g.at(id).shape, " broadcasts into ",
                          p.g.label(g0), " ", p.g.at(g0).shape, " (would be recomputed)"));
      continue;
    }
    if (group_size[g0] + 1 >= flags.max_fused_nodes) continue;
    group[static_cast<size_t>(id)] = g0;
    ++group_size[g0];
  }

  // Steps, in topological order of their roots.
  p.step_of.assign(static_cast<size_t>(n), -1);
  std::map<int, std::vector<int>> members;
  for (int id : p.order)
    if (group[static_cast<size_t>(id)] >= 0) members[group[static_cast<size_t>(id)]].push_back(id);
  for (int id : p.order) {
    const NodeData& nd = p.g.at(id);
    if (nd.is_leaf() || nd.kind == OpKind::View || nd.kind == OpKind::SliceView ||
        p.folded[static_cast<size_t>(id)])
      continue;
    const int gid = group[static_cast<size_t>(id)];
    if (gid >= 0 && gid != id) continue;  // a member: computed by its root's step
    Step s;
    s.root = id;
    if (gid == id) {
      s.members = members[id];
      s.kind = s.members.size() >= 2 ? Step::Kind::Fused : Step::Kind::Op;
    } else {
      s.members = {id};
    }
    std::vector<int> reads;
    for (int m : s.members)
      for (int in : p.g.at(m).inputs)
        if (std::find(s.members.begin(), s.members.end(), in) == s.members.end() &&
            std::find(reads.begin(), reads.end(), in) == reads.end())
          reads.push_back(in);
    if (s.kind == Step::Kind::Fused && static_cast<int>(reads.size()) > flags.max_fused_reads) {
      p.log.push_back(str("no fusion: group at ", p.g.label(id), " reads ", reads.size(), " tensors (limit ",
                          flags.max_fused_reads, ")"));
      for (int m : s.members) {
        Step one = single_op_step(p, m);
        p.step_of[static_cast<size_t>(m)] = static_cast<int>(p.steps.size());
        p.steps.push_back(std::move(one));
      }
      continue;
    }
    s.reads = std::move(reads);
    if (s.members.size() >= 2) {
      std::string m;
      for (int x : s.members) m += str(" ", p.g.label(x), ":", node_op_string(p.g.at(x)));
      p.log.push_back(str("elementwise fusion: ", s.members.size(), " nodes into one kernel ->", m));
    }
    for (int m : s.members) p.step_of[static_cast<size_t>(m)] = static_cast<int>(p.steps.size());
    p.steps.push_back(std::move(s));
  }
  return p;
}

void unfuse_step(Program& p, int step_index) {
  Step s = p.steps[static_cast<size_t>(step_index)];
  std::vector<Step> split;
  for (int m : s.members) {
    Step one = single_op_step(p, m);
    split.push_back(std::move(one));
  }
  p.steps.erase(p.steps.begin() + step_index);
  p.steps.insert(p.steps.begin() + step_index, split.begin(), split.end());
  std::fill(p.step_of.begin(), p.step_of.end(), -1);
  for (int i = 0; i < static_cast<int>(p.steps.size()); ++i)
    for (int m : p.steps[static_cast<size_t>(i)].members) p.step_of[static_cast<size_t>(m)] = i;
}

}  // namespace mt::detail
