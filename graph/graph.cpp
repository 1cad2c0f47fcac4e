// Graph building: every node is checked (shapes, dtypes, ownership) when it is added.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include "minitensor/graph/detail/ir.h"

namespace mt {
namespace detail {

const char* kind_name(OpKind k) {
  switch (k) {
    case OpKind::Input:
      return "input";
    case OpKind::Parameter:
      return "parameter";
    case OpKind::Constant:
      return "constant";
    case OpKind::Unary:
      return "unary";
    case OpKind::Binary:
      return "binary";
    case OpKind::BinaryScalar:
      return "binary_scalar";
    case OpKind::ScalarBinary:
      return "scalar_binary";
    case OpKind::Clamp:
      return "clamp";
    case OpKind::Reduce:
      return "reduce";
    case OpKind::Softmax:
      return "softmax";
    case OpKind::LogSoftmax:
      return "log_softmax";
    case OpKind::Permute:
      return "permute";
    case OpKind::View:
      return "view";
    case OpKind::SliceView:
      return "slice_view";
    case OpKind::Matmul:
      return "matmul";
    case OpKind::Linear:
      return "linear";
    case OpKind::Gemm:
      return "gemm";
    case OpKind::LayerNorm:
      return "layer_norm";
    case OpKind::RmsNorm:
      return "rms_norm";
    case OpKind::Attention:
      return "attention";
    case OpKind::Slice:
      return "slice";
    case OpKind::Concat:
      return "concat";
    case OpKind::AllReduce:
      return "all_reduce";
    case OpKind::AllGather:
      return "all_gather";
    case OpKind::ReduceScatter:
      return "reduce_scatter";
  }
  return "?";
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::None:
      return "none";
    case Activation::Relu:
      return "relu";
    case Activation::Gelu:
      return "gelu";
    case Activation::GeluTanh:
      return "gelu_tanh";
  }
  return "?";
}

std::string node_op_string(const NodeData& n) {
  switch (n.kind) {
    case OpKind::Unary:
      return op_name(n.unary);
    case OpKind::Binary:
      return op_name(n.binary);
    case OpKind::BinaryScalar:
      return str(op_name(n.binary), "(x, ", n.scalar, ")");
    case OpKind::ScalarBinary:
      return str(op_name(n.binary), "(", n.scalar, ", x)");
    case OpKind::Clamp:
      return str("clamp(", n.scalar, ", ", n.scalar2, ")");
    case OpKind::Reduce: {
      std::string s = str(op_name(n.reduce), "(axes=");
      for (size_t i = 0; i < n.axes.size(); ++i) s += str(i ? "," : "", n.axes[i]);
      return s + (n.keepdim ? ", keepdim)" : ")");
    }
    case OpKind::Softmax:
      return str("softmax(", n.axes[0], ")");
    case OpKind::LogSoftmax:
      return str("log_softmax(", n.axes[0], ")");
    case OpKind::Permute: {
      std::string s = "permute(";
      for (size_t i = 0; i < n.axes.size(); ++i) s += str(i ? "," : "", n.axes[i]);
      return s + ")";
    }
    case OpKind::View:
      return n.is_reshape ? "reshape" : "view";
    case OpKind::SliceView: {
      const std::int64_t axis = n.axes[0], start = n.axes[1];
      return str("slice(", axis, ", ", start, ":", start + n.shape[static_cast<int>(axis)], ")");
    }
    case OpKind::Linear:
    case OpKind::Gemm: {
      std::string s = n.kind == OpKind::Linear ? "linear" : "gemm";
      if (n.kind == OpKind::Gemm && (n.gemm.trans_a || n.gemm.trans_b))
        s += str("(", n.gemm.trans_a ? "T" : "N", n.gemm.trans_b ? "T" : "N", ")");
      if (n.has_bias) s += "+bias";
      if (n.gemm.activation != Activation::None) s += str("+", activation_name(n.gemm.activation));
      if (n.gemm.softmax) s += "+softmax";
      return s;
    }
    case OpKind::Slice:
      return str("slice(", n.axes[0], ", ", n.start, ":", n.start + n.shape[static_cast<int>(n.axes[0])],
                 ")");
    case OpKind::Concat:
      return str("concat(", n.axes[0], ")");
    case OpKind::AllReduce:
      return str("all_reduce(", dist::reduce_op_name(n.dist_op), ", world ", n.world, ")");
    case OpKind::AllGather:
      return str("all_gather(", n.axes[0], ", world ", n.world, ")");
    case OpKind::ReduceScatter:
      return str("reduce_scatter(", dist::reduce_op_name(n.dist_op), ", ", n.axes[0], ", world ", n.world,
                 ")");
    default:
      return kind_name(n.kind);
  }
}

std::string op_context(const char* op, const std::string& name) {
  return name.empty() ? std::string(op) : str(op, " (node '", name, "')");
}

int GraphData::add(NodeData node) {
  nodes.push_back(std::move(node));
  return static_cast<int>(nodes.size()) - 1;
}

namespace {

// The live graphs by id. Ids come from a counter and are never reused, so a node of a destroyed graph finds
// nothing rather than a newer graph. Leaked on purpose: graphs may be destroyed during static destruction.
struct Registry {
  std::mutex mutex;
  std::unordered_map<std::uint64_t, GraphData*> live;
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}
std::atomic<std::uint64_t> g_next_generation{1};

bool is_live(std::uint64_t id) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.live.count(id) != 0;
}

}  // namespace

GraphData* resolve(std::uint64_t graph_id, int node_id, const char* op) {
  MT_CHECK(graph_id != 0, InvalidArgument, op, ": empty node (no graph)");
  Registry& r = registry();
  GraphData* g = nullptr;
  {
    std::lock_guard lock(r.mutex);
    const auto it = r.live.find(graph_id);
    if (it != r.live.end()) g = it->second;
  }
  MT_CHECK(g != nullptr, InvalidArgument, op, ": node #", node_id, " belongs to graph ", graph_id,
           ", which has been destroyed");
  MT_CHECK(node_id >= 0 && node_id < static_cast<int>(g->nodes.size()), InvalidArgument, op, ": node id ",
           node_id, " is out of range for graph ", graph_id, " (", g->nodes.size(), " nodes)");
  return g;
}

int GraphData::own(const Node& n, const char* op) const {
  MT_CHECK(n.m_graph_id != 0, InvalidArgument, op, ": an operand is an empty Node (no graph)");
  MT_CHECK(n.m_graph_id == generation, InvalidArgument, op, ": node #", n.m_id,
           " belongs to another graph: graph ", n.m_graph_id, is_live(n.m_graph_id) ? "" : " (destroyed)",
           ", not this graph (", generation, ")");
  MT_CHECK(n.m_id >= 0 && n.m_id < static_cast<int>(nodes.size()), InvalidArgument, op, ": node id ", n.m_id,
           " is out of range");
  return n.m_id;
}

std::string GraphData::label(int id) const {
  const std::string& nm = at(id).name;
  return nm.empty() ? str("#", id) : str("#", id, " '", nm, "'");
}

Shape matmul_shape(const Shape& a_in, const Shape& b_in, const std::string& ctx) {
  MT_CHECK(a_in.rank() >= 1 && b_in.rank() >= 1, ShapeError, ctx, ": operands must have rank >= 1, got ",
           a_in, " and ", b_in);
  Shape a = a_in, b = b_in;
  const bool a_vec = a.rank() == 1, b_vec = b.rank() == 1;
  if (a_vec) a.insert(0, 1);
  if (b_vec) b.push_back(1);
  const std::int64_t m = a[a.rank() - 2], k = a.back(), kb = b[b.rank() - 2], n = b.back();
  MT_CHECK(k == kb, ShapeError, ctx, ": inner dimensions differ: ", a_in, " x ", b_in, " (", k, " != ", kb,
           ")");
  Shape ba, bb;
  for (int i = 0; i < a.rank() - 2; ++i) ba.push_back(a[i]);
  for (int i = 0; i < b.rank() - 2; ++i) bb.push_back(b[i]);
  Shape out = broadcast_shapes(ba, bb, ctx + " (batch dims)");
  if (!a_vec) out.push_back(m);
  if (!b_vec) out.push_back(n);
  return out;
}

namespace {}  // namespace
}  // namespace detail

using detail::NodeData;
using detail::op_context;
using detail::OpKind;

// ---------------------------------------------------------------- Node
detail::GraphData* Node::graph_data() const {
  return detail::resolve(m_graph_id, m_id, "Node::graph_data");
}
Shape Node::shape() const {
  return detail::resolve(m_graph_id, m_id, "Node::shape")->at(m_id).shape;
}
DType Node::dtype() const {
  return detail::resolve(m_graph_id, m_id, "Node::dtype")->at(m_id).dtype;
}
std::string Node::name() const {
  return detail::resolve(m_graph_id, m_id, "Node::name")->at(m_id).name;
}
Node Node::named(const std::string& name) const {
  detail::resolve(m_graph_id, m_id, "Node::named")->at(m_id).name = name;
  return *this;
}

// ---------------------------------------------------------------- Graph
Graph::Graph() : m_data(std::make_unique<detail::GraphData>()) {
  m_data->owner = this;
  m_data->generation = detail::g_next_generation.fetch_add(1);
  detail::Registry& r = detail::registry();
  std::lock_guard lock(r.mutex);
  r.live.emplace(m_data->generation, m_data.get());
}
namespace {
void unregister(const std::unique_ptr<detail::GraphData>& data) noexcept {
  if (!data) return;
  detail::Registry& r = detail::registry();
  std::lock_guard lock(r.mutex);
  r.live.erase(data->generation);
}
}  // namespace
Graph::~Graph() {
  unregister(m_data);
}
Graph::Graph(Graph&& other) noexcept : m_data(std::move(other.m_data)) {
  if (m_data) m_data->owner = this;
}
Graph& Graph::operator=(Graph&& other) noexcept {
  if (this == &other) return *this;
  unregister(m_data);
  m_data = std::move(other.m_data);
  if (m_data) m_data->owner = this;
  return *this;
}

detail::GraphData& Graph::live() const {
  MT_CHECK(m_data != nullptr, InvalidArgument,
           "Graph: used after being moved from (a moved-from Graph holds no nodes)");
  return *m_data;
}
std::uint64_t Graph::id() const {
  return live().generation;
}

int Graph::size() const {
  return static_cast<int>(live().nodes.size());
}

Node Graph::input(const std::string& name, const Shape& shape, DType dtype) {
  MT_CHECK(!name.empty(), InvalidArgument, "input: a graph input needs a name");
  for (const NodeData& n : live().nodes)
    MT_CHECK(!(n.kind == OpKind::Input && n.name == name), InvalidArgument,
             "input: there is already an input named '", name, "'");
  validate_shape(shape, dtype_size(dtype), op_context("input", name).c_str());
  NodeData n;
  n.kind = OpKind::Input;
  n.shape = shape;
  n.dtype = dtype;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::parameter(const std::string& name, const Tensor& value) {
  value.check_defined("parameter");
  NodeData n;
  n.kind = OpKind::Parameter;
  n.shape = value.shape();
  n.dtype = value.dtype();
  n.name = name;
  n.value = value;
  return live().handle(live().add(std::move(n)));
}

Node Graph::constant(const Tensor& value, const std::string& name) {
  value.check_defined("constant");
  NodeData n;
  n.kind = OpKind::Constant;
  n.shape = value.shape();
  n.dtype = value.dtype();
  n.name = name;
  n.value = value;
  return live().handle(live().add(std::move(n)));
}

Node Graph::unary(UnaryOp op, Node x, const std::string& name) {
  const std::string ctx = op_context(op_name(op), name);
  const NodeData& in = live().at(live().own(x, ctx.c_str()));
  MT_CHECK(defined_on_integers(op) || in.dtype == DType::F32, DTypeError, ctx, ": needs float32, got ",
           in.dtype, " ", in.shape);
  NodeData n;
  n.kind = OpKind::Unary;
  n.unary = op;
  n.inputs = {x.id()};
  n.shape = in.shape;
  n.dtype = in.dtype;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::binary(BinaryOp op, Node a, Node b, const std::string& name) {
  const std::string ctx = op_context(op_name(op), name);
  const NodeData& na = live().at(live().own(a, ctx.c_str()));
  const NodeData& nb = live().at(live().own(b, ctx.c_str()));
  MT_CHECK(na.dtype == nb.dtype, DTypeError, ctx, ": dtypes differ: ", na.dtype, " ", na.shape, " and ",
           nb.dtype, " ", nb.shape);
  MT_CHECK(defined_on_integers(op) || na.dtype == DType::F32, DTypeError, ctx, ": needs float32, got ",
           na.dtype);
  NodeData n;
  n.kind = OpKind::Binary;
  n.binary = op;
  n.inputs = {a.id(), b.id()};
  n.shape = broadcast_shapes(na.shape, nb.shape, ctx);
  n.dtype = na.dtype;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

namespace {

// The eager ops' checks on a scalar operand, at build time: a node that could never run is refused here.
void check_scalar(double s, DType dtype, const std::string& ctx) {
  if (dtype == DType::F32) return;
  const double lo = dtype == DType::U8 ? 0.0 : static_cast<double>(std::numeric_limits<std::int32_t>::min());
  const double hi =
      dtype == DType::U8 ? 255.0 : static_cast<double>(std::numeric_limits<std::int32_t>::max());
  MT_CHECK(std::isfinite(s) && s == std::trunc(s) && s >= lo && s <= hi, InvalidArgument, ctx, ": scalar ", s,
           " is not representable in ", dtype);
}

}  // namespace

Node Graph::binary_scalar(BinaryOp op, Node x, double s, const std::string& name) {
  return scalar_node(op, x, s, false, name);
}

Node Graph::scalar_binary(BinaryOp op, double s, Node x, const std::string& name) {
  return scalar_node(op, x, s, true, name);
}

Node Graph::scalar_node(BinaryOp op, Node x, double s, bool scalar_first, const std::string& name) {
  const std::string ctx = op_context(op_name(op), name);
  const NodeData& in = live().at(live().own(x, ctx.c_str()));
  MT_CHECK(defined_on_integers(op) || in.dtype == DType::F32, DTypeError, ctx, ": needs float32, got ",
           in.dtype);
  check_scalar(s, in.dtype, ctx);
  MT_CHECK(!(in.dtype != DType::F32 && op == BinaryOp::Div && !scalar_first && s == 0), InvalidArgument, ctx,
           ": integer division by zero");
  NodeData n;
  n.kind = scalar_first ? OpKind::ScalarBinary : OpKind::BinaryScalar;
  n.binary = op;
  n.scalar = s;
  n.inputs = {x.id()};
  n.shape = in.shape;
  n.dtype = in.dtype;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::clamp(Node x, double lo, double hi, const std::string& name) {
  const std::string ctx = op_context("clamp", name);
  const NodeData& in = live().at(live().own(x, ctx.c_str()));
  MT_CHECK(lo <= hi, InvalidArgument, ctx, ": lo = ", lo, " > hi = ", hi);
  check_scalar(lo, in.dtype, ctx);
  check_scalar(hi, in.dtype, ctx);
  NodeData n;
  n.kind = OpKind::Clamp;
  n.scalar = lo;
  n.scalar2 = hi;
  n.inputs = {x.id()};
  n.shape = in.shape;
  n.dtype = in.dtype;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::reduce(ReduceOp op, Node x, std::vector<std::int64_t> axes, bool keepdim,
                   const std::string& name) {
  const std::string ctx = op_context(op_name(op), name);
  const NodeData& in = live().at(live().own(x, ctx.c_str()));
  MT_CHECK(in.dtype == DType::F32, DTypeError, ctx, ": needs float32, got ", in.dtype, " ", in.shape);
  const int rank = in.shape.rank();
  std::vector<std::int64_t> wrapped;
  for (std::int64_t a : axes) wrapped.push_back(wrap_dim(a, std::max(rank, 1), ctx.c_str()));
  std::sort(wrapped.begin(), wrapped.end());
  MT_CHECK(std::adjacent_find(wrapped.begin(), wrapped.end()) == wrapped.end(), ShapeError, ctx,
           ": repeated axis in reduction of ", in.shape);
  if (wrapped.empty())
    for (int d = 0; d < rank; ++d) wrapped.push_back(d);
  const bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  MT_CHECK(!arg || axes.size() <= 1, ShapeError, ctx, ": takes one axis or none, got ", axes.size());
  std::int64_t r = 1;
  Shape out;
  for (int d = 0; d < rank; ++d) {
    const bool reduced = std::find(wrapped.begin(), wrapped.end(), d) != wrapped.end();
    if (reduced) r *= in.shape[d];
    if (!reduced)
      out.push_back(in.shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  MT_CHECK(r > 0 || op == ReduceOp::Sum || op == ReduceOp::Mean, ShapeError, ctx,
           ": cannot reduce an empty extent of ", in.shape);
  // argmax with no axis: a flat index over all elements.
  if (arg && axes.empty()) {
    out = Shape();
    if (keepdim)
      for (int d = 0; d < rank; ++d) out.push_back(1);
  }
  NodeData n;
  n.kind = OpKind::Reduce;
  n.reduce = op;
  n.axes = wrapped;
  if (arg && axes.empty()) n.axes.clear();  // flat
  n.keepdim = keepdim;
  n.inputs = {x.id()};
  n.shape = out;
  n.dtype = arg ? DType::I32 : DType::F32;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::softmax(Node x, std::int64_t axis, const std::string& name) {
  const std::string ctx = op_context("softmax", name);
  const NodeData& in = live().at(live().own(x, ctx.c_str()));
  MT_CHECK(in.dtype == DType::F32, DTypeError, ctx, ": needs float32, got ", in.dtype, " ", in.shape);
  MT_CHECK(in.shape.rank() >= 1, ShapeError, ctx, ": needs rank >= 1, got ", in.shape);
  NodeData n;
  n.kind = OpKind::Softmax;
  n.axes = {wrap_dim(axis, in.shape.rank(), ctx.c_str())};
  n.inputs = {x.id()};
  n.shape = in.shape;
  n.dtype = DType::F32;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::log_softmax(Node x, std::int64_t axis, const std::string& name) {
  Node r = softmax(x, axis, name);
  live().at(r.id()).kind = OpKind::LogSoftmax;
  return r;
}

Node Graph::transpose(Node x, std::int64_t d0, std::int64_t d1, const std::string& name) {
  const std::string ctx = op_context("transpose", name);
  const NodeData& in = live().at(live().own(x, ctx.c_str()));
  const int rank = in.shape.rank();
  const int a = wrap_dim(d0, rank, ctx.c_str()), b = wrap_dim(d1, rank, ctx.c_str());
  std::vector<std::int64_t> dims(static_cast<size_t>(rank));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[static_cast<size_t>(a)], dims[static_cast<size_t>(b)]);
  return permute(x, dims, name);
}

Node Graph::permute(Node x, std::vector<std::int64_t> dims, const std::string& name) {
  const std::string ctx = op_context("permute", name);
  const NodeData& in = live().at(live().own(x, ctx.c_str()));
  const int rank = in.shape.rank();
  MT_CHECK(static_cast<int>(dims.size()) == rank, ShapeError, ctx, ": ", dims.size(), " dims for shape ",
           in.shape);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  Shape out;
  for (auto& d : dims) {
    d = wrap_dim(d, rank, ctx.c_str());
    MT_CHECK(!seen[static_cast<size_t>(d)], ShapeError, ctx, ": dim ", d, " repeated for shape ", in.shape);
    seen[static_cast<size_t>(d)] = true;
    out.push_back(in.shape[static_cast<int>(d)]);
  }
  NodeData n;
  n.kind = OpKind::Permute;
  n.axes = dims;
  n.inputs = {x.id()};
  n.shape = out;
  n.dtype = in.dtype;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::reshape(Node x, const Shape& shape, const std::string& name) {
  Node r = view(x, shape, name);
  live().at(r.id()).is_reshape = true;
  return r;
}

Node Graph::view(Node x, const Shape& shape, const std::string& name) {
  const std::string ctx = op_context("view", name);
  const NodeData& in = live().at(live().own(x, ctx.c_str()));
  NodeData n;
  n.kind = OpKind::View;
  n.inputs = {x.id()};
  n.shape = infer_shape(shape, in.shape.numel(), in.shape, ctx);
  n.dtype = in.dtype;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::matmul(Node a, Node b, const std::string& name) {
  const std::string ctx = op_context("matmul", name);
  const NodeData& na = live().at(live().own(a, ctx.c_str()));
  const NodeData& nb = live().at(live().own(b, ctx.c_str()));
  MT_CHECK(na.dtype == DType::F32 && nb.dtype == DType::F32, DTypeError, ctx, ": needs float32, got ",
           na.dtype, " and ", nb.dtype);
  NodeData n;
  n.kind = OpKind::Matmul;
  n.inputs = {a.id(), b.id()};
  n.shape = detail::matmul_shape(na.shape, nb.shape, ctx);
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::linear(Node x, Node w, Node bias, Activation activation, const std::string& name) {
  const std::string ctx = op_context("linear", name);
  const NodeData& nx = live().at(live().own(x, ctx.c_str()));
  const NodeData& nw = live().at(live().own(w, ctx.c_str()));
  MT_CHECK(nx.dtype == DType::F32 && nw.dtype == DType::F32, DTypeError, ctx, ": needs float32, got ",
           nx.dtype, " and ", nw.dtype);
  MT_CHECK(nx.shape.rank() >= 1 && nw.shape.rank() == 2 && nx.shape.back() == nw.shape[0], ShapeError, ctx,
           ": x (..., in) and w (in, out) do not fit: ", nx.shape, " and ", nw.shape);
  NodeData n;
  n.kind = OpKind::Linear;
  n.inputs = {x.id(), w.id()};
  n.shape = nx.shape;
  n.shape[n.shape.rank() - 1] = nw.shape[1];
  n.gemm.activation = activation;
  if (bias.valid()) {
    const NodeData& nbias = live().at(live().own(bias, ctx.c_str()));
    MT_CHECK(nbias.dtype == DType::F32, DTypeError, ctx, ": bias needs float32, got ", nbias.dtype);
    MT_CHECK(
        nbias.shape.numel() == nw.shape[1] && nbias.shape.rank() >= 1 && nbias.shape.back() == nw.shape[1],
        ShapeError, ctx, ": bias must have shape (", nw.shape[1], "), got ", nbias.shape);
    n.inputs.push_back(bias.id());
    n.has_bias = true;
  }
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::gemm(Node a, Node b, const GemmNodeOptions& options, Node c, Node bias, const std::string& name) {
  const std::string ctx = op_context("gemm", name);
  const NodeData& na = live().at(live().own(a, ctx.c_str()));
  const NodeData& nb = live().at(live().own(b, ctx.c_str()));
  MT_CHECK(na.dtype == DType::F32 && nb.dtype == DType::F32, DTypeError, ctx, ": needs float32, got ",
           na.dtype, " and ", nb.dtype);
  MT_CHECK(na.shape.rank() >= 2 && nb.shape.rank() >= 2, ShapeError, ctx,
           ": operands must have rank >= 2, got ", na.shape, " and ", nb.shape);
  Shape sa = na.shape, sb = nb.shape;
  if (options.trans_a) std::swap(sa[sa.rank() - 1], sa[sa.rank() - 2]);
  if (options.trans_b) std::swap(sb[sb.rank() - 1], sb[sb.rank() - 2]);
  NodeData n;
  n.kind = OpKind::Gemm;
  n.gemm = options;
  n.inputs = {a.id(), b.id()};
  n.shape = detail::matmul_shape(sa, sb, ctx);
  if (c.valid()) {
    const NodeData& nc = live().at(live().own(c, ctx.c_str()));
    MT_CHECK(nc.dtype == DType::F32, DTypeError, ctx, ": c needs float32, got ", nc.dtype);
    const Shape bs = broadcast_shapes(nc.shape, n.shape, ctx + " (c)");
    MT_CHECK(bs == n.shape, ShapeError, ctx, ": c ", nc.shape, " does not broadcast to the result ", n.shape);
    n.inputs.push_back(c.id());
    n.has_c = true;
  }
  if (bias.valid()) {
    const NodeData& nbias = live().at(live().own(bias, ctx.c_str()));
    MT_CHECK(nbias.dtype == DType::F32, DTypeError, ctx, ": bias needs float32, got ", nbias.dtype);
    MT_CHECK(nbias.shape.rank() == 1 && nbias.shape[0] == n.shape.back(), ShapeError, ctx,
             ": bias must have shape (", n.shape.back(), "), got ", nbias.shape);
    n.inputs.push_back(bias.id());
    n.has_bias = true;
  }
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

void Graph::output(const std::string& name, Node node) {
  const std::string ctx = op_context("output", name);
  MT_CHECK(!name.empty(), InvalidArgument, "output: an output needs a name");
  live().own(node, ctx.c_str());
  for (const auto& o : live().outputs)
    MT_CHECK(o.first != name, InvalidArgument, "output: there is already an output named '", name, "'");
  live().outputs.emplace_back(name, node.id());
}

// ---------------------------------------------------------------- operators
Graph& Graph::of(const Node& node) {
  MT_CHECK(node.valid(), InvalidArgument, "Graph::of: empty Node");
  return *detail::resolve(node.graph_id(), node.id(), "Graph::of")->owner;
}

#define MT_NODE_BINOP(sym, op)                   \
  Node operator sym(Node a, Node b) {            \
    return Graph::of(a).binary(op, a, b);        \
  }                                              \
  Node operator sym(Node a, double s) {          \
    return Graph::of(a).binary_scalar(op, a, s); \
  }                                              \
  Node operator sym(double s, Node a) {          \
    return Graph::of(a).scalar_binary(op, s, a); \
  }
MT_NODE_BINOP(+, BinaryOp::Add)
MT_NODE_BINOP(-, BinaryOp::Sub)
MT_NODE_BINOP(*, BinaryOp::Mul)
MT_NODE_BINOP(/, BinaryOp::Div)
#undef MT_NODE_BINOP
Node operator-(Node x) {
  return Graph::of(x).neg(x);
}

}  // namespace mt
