// Graph building for the row-wise ops with a fused kernel of their own: layer_norm, rms_norm and attention
// (checked as ops/norm.h and ops/attention.h check their eager forms, when the node is added).
#include <cmath>

#include "minitensor/graph/detail/ir.h"
#include "minitensor/ops/attention.h"

namespace mt {

using detail::NodeData;
using detail::op_context;
using detail::OpKind;

namespace {

// A float32 (d) parameter of a row op on x, when given.
void add_row_param(detail::GraphData& g, NodeData& n, Node p, const NodeData& x, const std::string& ctx,
                   const char* what) {
  const NodeData& np = g.at(g.own(p, ctx.c_str()));
  MT_CHECK(np.dtype == DType::F32, DTypeError, ctx, ": ", what, " needs float32, got ", np.dtype);
  MT_CHECK(np.shape.rank() == 1 && np.shape[0] == x.shape.back(), ShapeError, ctx, ": ", what,
           " must have shape (", x.shape.back(), "), got ", np.shape);
  n.inputs.push_back(p.id());
}

Node row_norm(detail::GraphData& g, OpKind kind, Node x, Node weight, Node bias, double eps,
              const std::string& name) {
  const std::string ctx = op_context(kind == OpKind::LayerNorm ? "layer_norm" : "rms_norm", name);
  const NodeData& nx = g.at(g.own(x, ctx.c_str()));
  MT_CHECK(nx.dtype == DType::F32, DTypeError, ctx, ": needs float32, got ", nx.dtype);
  MT_CHECK(nx.shape.rank() >= 1, ShapeError, ctx, ": needs rank >= 1 (the normalised axis), got ", nx.shape);
  MT_CHECK(std::isfinite(eps) && eps >= 0, InvalidArgument, ctx, ": eps must be finite and >= 0, got ", eps);
  NodeData n;
  n.kind = kind;
  n.inputs = {x.id()};
  n.shape = nx.shape;
  n.scalar = eps;
  if (weight.valid()) add_row_param(g, n, weight, nx, ctx, "weight"), n.has_weight = true;
  if (bias.valid()) add_row_param(g, n, bias, nx, ctx, "bias"), n.has_bias = true;
  n.name = name;
  return g.handle(g.add(std::move(n)));
}

}  // namespace

Node Graph::layer_norm(Node x, Node weight, Node bias, double eps, const std::string& name) {
  return row_norm(live(), OpKind::LayerNorm, x, weight, bias, eps, name);
}

Node Graph::rms_norm(Node x, Node weight, double eps, const std::string& name) {
  return row_norm(live(), OpKind::RmsNorm, x, weight, Node(), eps, name);
}

Node Graph::attention(Node q, Node k, Node v, Node mask, bool causal, std::optional<double> scale,
                      const std::string& name) {
  const std::string ctx = op_context("attention", name);
  detail::GraphData& g = live();
  const NodeData& nq = g.at(g.own(q, ctx.c_str()));
  const NodeData& nk = g.at(g.own(k, ctx.c_str()));
  const NodeData& nv = g.at(g.own(v, ctx.c_str()));
  for (const NodeData* t : {&nq, &nk, &nv})
    MT_CHECK(t->dtype == DType::F32, DTypeError, ctx, ": needs float32, got ", t->dtype);
  const NodeData* nm = mask.valid() ? &g.at(g.own(mask, ctx.c_str())) : nullptr;
  if (nm) MT_CHECK(nm->dtype == DType::F32, DTypeError, ctx, ": mask needs float32, got ", nm->dtype);
  const Shape out = attention_shape(nq.shape, nk.shape, nv.shape, nm ? &nm->shape : nullptr, ctx);
  const double s = attention_scale(scale, nq.shape.back(), ctx);
  NodeData n;
  n.kind = OpKind::Attention;
  n.inputs = {q.id(), k.id(), v.id()};
  n.shape = out;
  n.scalar = s;
  n.causal = causal;
  if (nm) {
    n.inputs.push_back(mask.id());
    n.has_mask = true;
  }
  n.name = name;
  return g.handle(g.add(std::move(n)));
}

}  // namespace mt
