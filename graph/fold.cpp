// Views folded into their consumers, and linears of one input merged into one GEMM whose column slices
// are their results.
//
// Views folded: a permute (and the reshapes after it) that every consumer can read with
// strides is no step but a strided view of its input's buffer; an attention followed by a permute that keeps
// the head dim last writes the permuted layout directly, so that permute is a free contiguous view.
//
// Who reads strides in place (executor.cpp launch_step): attention's q, k, v (rank <= 4, unit stride along
// the head dim: the fused kernel's operands) and its mask; a Gemm's a and b and a Matmul's (mt::gemm takes
// any leading dimensions; batch dims must collapse into one stride, else gemm would loop over launches); a
// Permute step (its strided copy). Fused elementwise kernels, row ops and reductions read contiguous memory.
#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

#include "minitensor/graph/detail/program.h"

namespace mt::detail {

namespace {

// Strides that show (shape, strides) as new_shape without a copy, if any (Tensor::view's rule).
std::optional<Shape> reshape_strides(const Shape& shape, const Shape& strides, const Shape& new_shape) {
  if (shape.numel() == 0) return contiguous_strides(new_shape);
  Shape out = new_shape;
  // Chunks of dims laid out one after another, innermost first; each must map onto whole new dims.
  int nd = new_shape.rank() - 1;
  std::int64_t chunk_numel = 1, view_numel = 1;
  std::int64_t base = shape.rank() ? strides.back() : 1;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    chunk_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != chunk_numel * base)) {
      while (nd >= 0 && (view_numel < chunk_numel || new_shape[nd] == 1)) {
        out[nd] = view_numel * base;
        view_numel *= new_shape[nd];
        --nd;
      }
      if (view_numel != chunk_numel) return std::nullopt;
      if (d > 0) base = strides[d - 1], chunk_numel = 1, view_numel = 1;
    }
  }
  while (nd >= 0 && new_shape[nd] == 1) out[nd] = 1, --nd;  // a rank-0 tensor seen as (1, ...)
  if (nd != -1) return std::nullopt;
  return out;
}

Shape permuted(const Shape& strides, const std::vector<std::int64_t>& dims) {
  Shape out = strides;
  for (size_t j = 0; j < dims.size(); ++j) out[static_cast<int>(j)] = strides[static_cast<int>(dims[j])];
  return out;
}

// Whether the batch dims (all but the last two) of extent > 1 collapse into one stride: one GEMM launch.
bool batch_collapses(const Shape& shape, const Shape& strides) {
  int prev = -1;
  for (int d = 0; d + 2 < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    if (prev >= 0 && strides[prev] != strides[d] * shape[d]) return false;
    prev = d;
  }
  return true;
}

struct Folder {
  Program& p;
  std::vector<std::vector<int>> consumers;
  std::vector<int> fold;  // permutes (and views) decided so far by the current try

  // Whether every consumer of `id`, seen as (strides, offset), reads it in place; the permutes that then
  // become views go to `fold`.
  bool readable(int id, const Shape& strides, std::int64_t offset) {
    const NodeData& n = p.g.at(id);
    const bool plain = strides == contiguous_strides(n.shape) && offset == 0;
    if (p.is_output[static_cast<size_t>(id)] && !plain) return false;  // outputs: the declared layout
    for (int c : consumers[static_cast<size_t>(id)]) {
      const NodeData& nc = p.g.at(c);
      for (size_t k = 0; k < nc.inputs.size(); ++k) {
        if (nc.inputs[k] != id) continue;
        if (!reads_in_place(c, nc, k, n.shape, strides, offset)) return false;
      }
    }
    return true;
  }

  bool reads_in_place(int c, const NodeData& nc, size_t k, const Shape& shape, const Shape& strides,
                      std::int64_t offset) {
    switch (nc.kind) {
      case OpKind::Attention:
        return shape.rank() <= 4 && (k == 3 || strides.back() == 1);
      case OpKind::Gemm:
        return k <= 1 && batch_collapses(shape, strides);
      case OpKind::Matmul: {
        if (shape.rank() < 2 || p.g.at(nc.inputs[0]).shape.rank() < 2) return false;
        const Shape& b = p.g.at(nc.inputs[1]).shape;
        if (b.rank() < 2) return false;
        if (k == 0 && b.rank() == 2)  // batch dims fold into rows (a view)
          return reshape_strides(shape, strides, Shape{shape.numel() / shape.back(), shape.back()})
              .has_value();
        return batch_collapses(shape, strides);
      }
      case OpKind::Permute: {
        const size_t mark = fold.size();
        if (try_fold(c, permuted(strides, nc.axes), offset)) return true;
        fold.resize(mark);
        return true;  // a copy step: its strided copy reads any layout
      }
      case OpKind::View: {
        const auto s = reshape_strides(shape, strides, nc.shape);
        return s && readable(c, *s, offset);
      }
      case OpKind::SliceView:
        return readable(c, strides, offset + nc.axes[1] * strides[static_cast<int>(nc.axes[0])]);
      default:
        return false;
    }
  }

  bool try_fold(int id, const Shape& strides, std::int64_t offset) {
    if (!readable(id, strides, offset)) return false;
    fold.push_back(id);
    return true;
  }
};

}  // namespace

bool plain_layout(const Program& p, int id) {
  if (p.strides.empty()) return true;  // no layouts decided: all contiguous
  return p.view_offset[static_cast<size_t>(id)] == 0 &&
         p.strides[static_cast<size_t>(id)] == contiguous_strides(p.g.at(id).shape);
}

void fold_views(Program& p, bool fold) {
  const size_t n = p.g.nodes.size();
  p.strides.assign(n, Shape());
  p.view_offset.assign(n, 0);
  p.folded.assign(n, false);
  for (size_t i = 0; i < n; ++i) p.strides[i] = contiguous_strides(p.g.nodes[i].shape);

  Folder f{p, std::vector<std::vector<int>>(n), {}};
  for (int id : p.order)
    for (int in : p.g.at(id).inputs) f.consumers[static_cast<size_t>(in)].push_back(id);
  auto single_consumer = [&](int id) {
    return p.n_uses[static_cast<size_t>(id)] == 1 && !p.is_output[static_cast<size_t>(id)];
  };

  // Layouts flow forward: a node's strides are known when its consumers are visited.
  for (int id : p.order) {
    NodeData& nd = p.g.at(id);
    const auto i = static_cast<size_t>(id);
    if (nd.kind == OpKind::View) {
      const int x = nd.inputs[0];
      const auto s = reshape_strides(p.g.at(x).shape, p.strides[static_cast<size_t>(x)], nd.shape);
      p.strides[i] = s ? *s : contiguous_strides(nd.shape);  // folding made sure it exists
      p.view_offset[i] = p.view_offset[static_cast<size_t>(x)];
      continue;
    }
    if (nd.kind == OpKind::SliceView) {
      const auto x = static_cast<size_t>(nd.inputs[0]);
      p.strides[i] = p.strides[x];
      p.view_offset[i] = p.view_offset[x] + nd.axes[1] * p.strides[x][static_cast<int>(nd.axes[0])];
      continue;
    }
    if (nd.kind == OpKind::Permute && p.folded[i]) {
      const int x = nd.inputs[0];
      p.strides[i] = permuted(p.strides[static_cast<size_t>(x)], nd.axes);
      p.view_offset[i] = p.view_offset[static_cast<size_t>(x)];
      continue;
    }
    // Attention writes the layout its one consumer, a permute keeping the head dim last, makes contiguous.
    if (!fold) continue;  // the slices of merged linears (and views of them) keep their layout regardless
    if (nd.kind == OpKind::Attention && nd.shape.rank() <= 4 && single_consumer(id)) {
      const int c = f.consumers[i][0];
      const NodeData& nc = p.g.at(c);
      if (nc.kind == OpKind::Permute && nc.axes.back() == nd.shape.rank() - 1) {
        const Shape cs = contiguous_strides(nc.shape);
        for (size_t j = 0; j < nc.axes.size(); ++j)
          p.strides[i][static_cast<int>(nc.axes[j])] = cs[static_cast<int>(j)];
        p.folded[static_cast<size_t>(c)] = true;
        p.log.push_back(str("view folded: ", p.g.label(id), " attention writes ", nc.shape, " order, so ",
                            p.g.label(c), " permute(", nd.shape, " -> ", nc.shape, ") is a contiguous view"));
      }
      continue;
    }
    if (nd.kind == OpKind::Permute && !p.is_output[i]) {
      const int x = nd.inputs[0];
      f.fold.clear();
      if (!f.try_fold(id, permuted(p.strides[static_cast<size_t>(x)], nd.axes),
                      p.view_offset[static_cast<size_t>(x)]))
        continue;
      for (int v : f.fold) {
        if (p.g.at(v).kind != OpKind::Permute) continue;
        p.folded[static_cast<size_t>(v)] = true;
        std::string readers;
        for (int c : f.consumers[static_cast<size_t>(v)])
          readers += str(readers.empty() ? "" : ", ", p.g.label(c), " ", node_op_string(p.g.at(c)));
        p.log.push_back(str("view folded: ", p.g.label(v), " permute of ", p.g.label(p.g.at(v).inputs[0]),
                            " is a strided view, read in place by ", readers));
      }
      // The permutes folded with it come later in the order and take their strides there.
      p.strides[i] = permuted(p.strides[static_cast<size_t>(x)], nd.axes);
      p.view_offset[i] = p.view_offset[static_cast<size_t>(x)];
    }
  }
}

namespace {

// A GEMM by a weight fixed when the executor is built: linear (no softmax) or matmul of a (..., k) by a 2-D
// parameter or constant, float32.
bool merge_candidate(const Program& p, const NodeData& n) {
  const bool lin = (n.kind == OpKind::Linear && !n.gemm.softmax) ||
                   (n.kind == OpKind::Matmul && p.g.at(n.inputs[0]).shape.rank() >= 2);
  if (!lin || n.dtype != DType::F32) return false;
  for (size_t k = 1; k < n.inputs.size(); ++k) {
    const NodeData& w = p.g.at(n.inputs[k]);
    if ((w.kind != OpKind::Parameter && w.kind != OpKind::Constant) || w.dtype != DType::F32) return false;
  }
  const NodeData& w = p.g.at(n.inputs[1]);
  return w.shape.rank() == 2 && (n.inputs.size() < 3 || p.g.at(n.inputs[2]).shape.numel() == w.shape[1]);
}

int append(Program& p, NodeData n) {
  p.g.nodes.push_back(std::move(n));
  return static_cast<int>(p.g.nodes.size()) - 1;
}

}  // namespace

bool merge_linears(Program& p) {
  const size_t n0 = p.g.nodes.size();
  Folder f{p, std::vector<std::vector<int>>(n0), {}};
  for (int id : p.order)
    for (int in : p.g.at(id).inputs) f.consumers[static_cast<size_t>(in)].push_back(id);
  // One input, one activation, biases or none, weights on one device.
  std::map<std::tuple<int, int, bool, std::string>, std::vector<int>> groups;
  for (int id : p.order) {
    const NodeData& n = p.g.at(id);
    if (!merge_candidate(p, n)) continue;
    const bool bias = n.kind == OpKind::Linear && n.has_bias;
    groups[{n.inputs[0], static_cast<int>(n.kind == OpKind::Linear ? n.gemm.activation : Activation::None),
            bias, p.g.at(n.inputs[1]).value.device().str()}]
        .push_back(id);
  }
  bool any = false;
  for (const auto& [key, ids] : groups) {
    if (ids.size() < 2) continue;
    const NodeData first = p.g.at(ids[0]);  // a copy: appending nodes moves the node table
    const std::int64_t k_in = p.g.at(first.inputs[1]).shape[0];
    std::vector<int> members;
    for (int id : ids)
      if (p.g.at(p.g.at(id).inputs[1]).shape[0] == k_in) members.push_back(id);
    // Each result as a column slice of the merged (..., n_out) result: all its readers must take it in place.
    // Dropping one changes the others' row stride, so until none drops.
    std::int64_t n_out = 0;
    std::vector<std::int64_t> col;
    while (members.size() >= 2) {
      n_out = 0;
      col.clear();
      for (int id : members) col.push_back(n_out), n_out += p.g.at(id).shape.back();
      std::vector<int> keep;
      for (size_t j = 0; j < members.size(); ++j) {
        Shape merged = p.g.at(members[j]).shape;
        merged[merged.rank() - 1] = n_out;
        f.fold.clear();
        if (f.readable(members[j], contiguous_strides(merged), col[j])) keep.push_back(members[j]);
      }
      if (keep.size() == members.size()) break;
      members = std::move(keep);
    }
    if (members.size() < 2) continue;
    const bool bias = std::get<2>(key);
    const Device dev = p.g.at(first.inputs[1]).value.device();
    Tensor w = empty({k_in, n_out}, DType::F32, dev), b = bias ? empty({n_out}, DType::F32, dev) : Tensor();
    std::string names;
    for (size_t j = 0; j < members.size(); ++j) {
      const NodeData& n = p.g.at(members[j]);
      const std::int64_t c0 = col[j], c1 = col[j] + n.shape.back();
      w.slice(1, c0, c1).copy_(p.g.at(n.inputs[1]).value);
      if (bias) b.slice(0, c0, c1).copy_(p.g.at(n.inputs[2]).value.reshape({n.shape.back()}));
      names += str(names.empty() ? "" : "+", n.name.empty() ? str("#", members[j]) : n.name);
    }
    NodeData nw;
    nw.kind = OpKind::Constant;
    nw.shape = w.shape();
    nw.value = w;
    nw.name = "weights of " + names;
    const int w_id = append(p, std::move(nw));
    int b_id = -1;
    if (bias) {
      NodeData nb;
      nb.kind = OpKind::Constant;
      nb.shape = b.shape();
      nb.value = b;
      nb.name = "biases of " + names;
      b_id = append(p, std::move(nb));
    }
    NodeData m;
    m.kind = OpKind::Linear;
    m.inputs = {first.inputs[0], w_id};
    if (bias) m.inputs.push_back(b_id);
    m.has_bias = bias;
    m.gemm.activation = static_cast<Activation>(std::get<1>(key));
    m.shape = first.shape;
    m.shape[m.shape.rank() - 1] = n_out;
    m.name = names;
    const int m_id = append(p, std::move(m));
    // Topological: the leaves and the merged GEMM go right before the first former linear.
    const std::vector<int> placed = bias ? std::vector<int>{w_id, b_id, m_id} : std::vector<int>{w_id, m_id};
    p.topo.insert(std::find(p.topo.begin(), p.topo.end(), members[0]), placed.begin(), placed.end());
    std::string merged;
    for (size_t j = 0; j < members.size(); ++j) {
      NodeData& n = p.g.at(members[j]);
      merged += str(j ? " " : "", p.g.label(members[j]));
      n.kind = OpKind::SliceView;
      n.inputs = {m_id};
      n.axes = {n.shape.rank() - 1, col[j]};
      n.has_bias = false;
      n.gemm = GemmNodeOptions{};
    }
    p.log.push_back(str("linears merged: ", merged, " read ", p.g.label(first.inputs[0]), ": one GEMM ",
                        p.g.label(m_id), " ", node_op_string(p.g.at(m_id)),
                        " over their concatenated weights (", k_in, " x ", n_out,
                        "), each a column slice of it"));
    any = true;
  }
  return any;
}

}  // namespace mt::detail
