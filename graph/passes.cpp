// Compile passes: CSE, dead-node elimination, pattern fusion (softmax, GEMM epilogue), elementwise grouping.
//
// Node ids are a topological order (a node only names earlier nodes) and every rewrite keeps it so: a
// rewritten node's new inputs come from below it.
#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <set>

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

// ---------------------------------------------------------------- row fusion helpers
// Shapes are compared without their leading 1s: (1, n, d) and (n, d) lay out the same rows.
Shape strip_leading_ones(const Shape& s) {
  Shape out;
  int d = 0;
  while (d < s.rank() && s[d] == 1) ++d;
  for (; d < s.rank(); ++d) out.push_back(s[d]);
  return out;
}

// s holds one value per row of r, in row order: r with its last extent 1 (a keepdim reduction's shape).
bool per_row_shaped(const Shape& s, const Shape& r) {
  if (r.rank() == 0) return false;
  Shape one = r;
  one[r.rank() - 1] = 1;
  return strip_leading_ones(s) == strip_leading_ones(one);
}

// A reduction a row group can compute: sum, mean, max or min of float32 over the last axis of a non-empty
// tensor.
bool row_reduction(const Program& p, int id) {
  const NodeData& n = p.g.at(id);
  if (n.kind != OpKind::Reduce || n.dtype != DType::F32) return false;
  if (n.reduce != ReduceOp::Sum && n.reduce != ReduceOp::Mean && n.reduce != ReduceOp::Max &&
      n.reduce != ReduceOp::Min)
    return false;
  const NodeData& x = p.g.at(n.inputs[0]);
  return x.dtype == DType::F32 && x.shape.rank() >= 1 && x.shape.numel() > 0 && n.axes.size() == 1 &&
         n.axes[0] == x.shape.rank() - 1;
}

// A group while it forms: its root's shape, and its row shape once a reduction or a per-row node joined.
struct GroupInfo {
  Shape shape;
  std::optional<Shape> row;
  int size = 0;  // members besides the root
};

// Elementwise and row grouping, from the outputs down: a node joins the group of its consumers when all its
// consumers are in one group, it is not an output, and
// - it is elementwise of the group's shape (no recomputation under broadcasting), or
// - (row fusion) the group has rows R = (..., len) and the node is elementwise of shape R (computed per
//   element) or R with len 1 (computed once per row), or a last-axis reduction of an R-shaped input into one
//   value per row; a group without rows yet takes the rows of a reduction that joins it, or of its own shape
//   when a per-row node derived from a reduction joins it.
// Then the steps. Returns false (and bans the members) when a row group is over the on-chip limit.
bool build_steps(Program& p, const CompileFlags& flags, std::vector<bool>& banned,
                 std::vector<std::string>& limit_log) {
  const int n = static_cast<int>(p.g.nodes.size());
  const bool rows_on = flags.fuse_rows && flags.fuse_elementwise;
  std::vector<int> group(static_cast<size_t>(n), -1);  // group id = its root's node id
  std::vector<std::vector<int>> consumers(static_cast<size_t>(n));
  for (int id : p.order)
    for (int in : p.g.at(id).inputs) consumers[static_cast<size_t>(in)].push_back(id);
  // Derived from a row reduction through elementwise ops: such a per-row node may start a group's rows.
  std::vector<bool> from_reduction(static_cast<size_t>(n), false);
  for (int id : p.order) {
    if (banned[static_cast<size_t>(id)]) continue;
    bool r = rows_on && row_reduction(p, id);
    if (rows_on && fusable_elementwise(p, id))
      for (int in : p.g.at(id).inputs) r = r || from_reduction[static_cast<size_t>(in)];
    from_reduction[static_cast<size_t>(id)] = r;
  }
  std::map<int, GroupInfo> info;
  for (auto it = p.order.rbegin(); it != p.order.rend(); ++it) {
    const int id = *it;
    const NodeData& nd = p.g.at(id);
    const bool reduction = rows_on && !banned[static_cast<size_t>(id)] && row_reduction(p, id);
    if (!fusable_elementwise(p, id) && !reduction) continue;
    group[static_cast<size_t>(id)] = id;
    GroupInfo& own = info[id];
    own.shape = nd.shape;
    if (reduction) own.row = p.g.at(nd.inputs[0]).shape;
    if (!flags.fuse_elementwise || p.is_output[static_cast<size_t>(id)]) continue;
    const auto& cons = consumers[static_cast<size_t>(id)];
    if (cons.empty()) continue;
    const int g0 = group[static_cast<size_t>(cons[0])];
    bool same = g0 >= 0;
    for (int c : cons) same = same && group[static_cast<size_t>(c)] == g0;
    if (!same) continue;
    GroupInfo& gi = info[g0];
    std::optional<Shape> row = gi.row;  // the group's rows after the join
    bool join = false;
    if (reduction) {
      const Shape& x = p.g.at(nd.inputs[0]).shape;
      if (gi.row)
        join = row_shaped(x, *gi.row) && per_row_shaped(nd.shape, *gi.row);
      else  // the members so far all have the group's shape: per element or per row of x
        join = per_row_shaped(nd.shape, x) && (row_shaped(gi.shape, x) || per_row_shaped(gi.shape, x));
      if (join) row = row ? row : x;
      if (!join)
        p.log.push_back(str("no row fusion: ", p.g.label(id), " ", node_op_string(nd), " of ", x,
                            " does not broadcast back over the rows of ", p.g.label(g0), " ",
                            gi.row ? *gi.row : gi.shape));
    } else if (nd.shape == gi.shape && !gi.row) {
      join = true;
    } else if (gi.row && rows_on && !banned[static_cast<size_t>(id)] &&
               (row_shaped(nd.shape, *gi.row) || per_row_shaped(nd.shape, *gi.row))) {
      join = true;
    } else if (!gi.row && rows_on && !banned[static_cast<size_t>(id)] &&
               from_reduction[static_cast<size_t>(id)] && gi.shape.rank() >= 1 &&
               per_row_shaped(nd.shape, gi.shape)) {
      join = true;
      row = gi.shape;
    }
    if (!join) {
      if (!reduction)
        p.log.push_back(str("no fusion: ", p.g.label(id), " ", nd.shape, " broadcasts into ", p.g.label(g0),
                            " ", gi.shape, " (would be recomputed)"));
      continue;
    }
    if (gi.size + 1 >= flags.max_fused_nodes) continue;
    group[static_cast<size_t>(id)] = g0;
    ++gi.size;
    gi.row = row;
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
    const bool rows = gid == id && info[id].row.has_value();
    if (gid == id) {
      s.members = members[id];
      s.kind = s.members.size() < 2 ? Step::Kind::Op : rows ? Step::Kind::Rows : Step::Kind::Fused;
    } else {
      s.members = {id};
    }
    std::vector<int> reads;
    for (int m : s.members)
      for (int in : p.g.at(m).inputs)
        if (std::find(s.members.begin(), s.members.end(), in) == s.members.end() &&
            std::find(reads.begin(), reads.end(), in) == reads.end())
          reads.push_back(in);
    if (s.kind != Step::Kind::Op && static_cast<int>(reads.size()) > flags.max_fused_reads) {
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
    std::string names;
    for (int x : s.members) names += str(" ", p.g.label(x), ":", node_op_string(p.g.at(x)));
    if (s.kind == Step::Kind::Rows) {
      // What feeds a reduction (its input, transitively through members): the reads the passes go over.
      std::set<int> in_pass;
      for (auto m = s.members.rbegin(); m != s.members.rend(); ++m) {
        const NodeData& nm = p.g.at(*m);
        if (nm.kind == OpKind::Reduce)
          in_pass.insert(nm.inputs[0]);
        else if (in_pass.count(*m))
          in_pass.insert(nm.inputs.begin(), nm.inputs.end());
      }
      std::vector<Shape> read_shapes;
      std::vector<bool> read_in_pass;
      for (int r : s.reads) {
        read_shapes.push_back(p.g.at(r).shape);
        read_in_pass.push_back(in_pass.count(r) > 0);
      }
      s.rows = plan_rows(*info[id].row, read_shapes, read_in_pass, nd.shape);
      const bool empty = s.rows.n_rows == 0 || s.rows.len == 0;
      if (empty || s.rows.cached_per_thread() > flags.max_row_cached) {
        limit_log.push_back(
            empty
                ? str("no row fusion: group at ", p.g.label(id), " has no rows ", s.rows.row_shape)
                : str("no row fusion: group at ", p.g.label(id), ": rows of ", s.rows.len, " elements with ",
                      std::count(s.rows.read_cached.begin(), s.rows.read_cached.end(), true),
                      " row-wide reads to keep need ", s.rows.cached_per_thread(),
                      " floats per thread on chip (limit ", flags.max_row_cached, ")"));
        for (int m : s.members) banned[static_cast<size_t>(m)] = true;
        return false;
      }
      p.log.push_back(str("row fusion: ", s.members.size(), " nodes into one kernel over ", s.rows.n_rows,
                          " rows of ", s.rows.len, " ->", names));
    } else if (s.members.size() >= 2) {
      p.log.push_back(str("elementwise fusion: ", s.members.size(), " nodes into one kernel ->", names));
    }
    for (int m : s.members) p.step_of[static_cast<size_t>(m)] = static_cast<int>(p.steps.size());
    p.steps.push_back(std::move(s));
  }
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

  // Groups, then steps; a row group over the on-chip limit bans its members from row fusion and the grouping
  // runs again (each retry bans at least one node, so this ends).
  std::vector<bool> banned(static_cast<size_t>(n), false);
  const size_t log_mark = p.log.size();
  std::vector<std::string> limit_log;
  while (!build_steps(p, flags, banned, limit_log)) {
    p.log.resize(log_mark);
    p.steps.clear();
  }
  p.log.insert(p.log.begin() + static_cast<std::ptrdiff_t>(log_mark), limit_log.begin(), limit_log.end());
  return p;
}

bool row_shaped(const Shape& s, const Shape& r) {
  return strip_leading_ones(s) == strip_leading_ones(r);
}

int RowPlan::cached_per_thread() const {
  const auto n = std::count(read_cached.begin(), read_cached.end(), true);
  return static_cast<int>(n) * slots * width;
}

RowPlan plan_rows(const Shape& row_shape, const std::vector<Shape>& read_shapes,
                  const std::vector<bool>& read_in_pass, const Shape& root_shape) {
  RowPlan r;
  r.row_shape = row_shape;
  r.len = row_shape.rank() ? row_shape.back() : 1;
  r.n_rows = r.len > 0 ? row_shape.numel() / r.len : 0;
  // A value varies along the row when its last extent (right-aligned) is the row's length; with rows of one
  // element nothing does (each row is its one value).
  auto varies = [&](const Shape& s) { return r.len > 1 && s.rank() >= 1 && s.back() == r.len; };
  for (size_t j = 0; j < read_shapes.size(); ++j) {
    r.read_varies.push_back(varies(read_shapes[j]));
    r.read_cached.push_back(r.read_varies.back() && j < read_in_pass.size() && read_in_pass[j]);
  }
  r.out_varies = varies(root_shape);
  r.width = r.len % 4 == 0 ? 4 : 1;
  const std::int64_t slots = (r.len + r.width - 1) / r.width;
  // About 4 slots a thread (loads in flight), threads a power of two from a warp to 1024; longer rows take
  // more slots per thread (bounded by CompileFlags::max_row_cached).
  std::int64_t t = 32;
  while (t < 1024 && t * 4 < slots) t *= 2;
  r.threads = static_cast<int>(t);
  r.slots = static_cast<int>(std::max<std::int64_t>(1, (slots + t - 1) / t));
  r.rows_per_block = r.threads >= 128 ? 1 : 128 / r.threads;  // blocks of at least 128 threads
  return r;
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
