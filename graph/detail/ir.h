// The graph's internal representation: a flat vector of nodes in creation order (which is a topological
// order, since a node can only name nodes that exist). Shared by the builder, the passes and the executors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "minitensor/graph/graph.h"

namespace mt::detail {

enum class OpKind : std::uint8_t {
  Input,
  Parameter,
  Constant,
  Unary,
  Binary,
  BinaryScalar,
  ScalarBinary,
  Clamp,
  Reduce,
  Softmax,
  LogSoftmax,
  Permute,
  View,
  Matmul,
  Linear,
  Gemm,
  LayerNorm,  // x, [weight], [bias]: eps in `scalar`
  RmsNorm,    // x, [weight]: eps in `scalar`
  Attention,  // q, k, v, [mask]: scale in `scalar`, causal
  SliceView,  // made by the compiler only: [start, start + extent) of one axis, a view (axes: {axis, start})
  Slice,      // x: [start, end) of dim axes[0], start in `start` (materialises)
  Concat,     // x0, x1, ...: along dim axes[0] (materialises)
  // Collectives (graph/collective.cpp): `world` ranks, dist_op, dim in axes[0] (gather / scatter).
  AllReduce,
  AllGather,
  ReduceScatter,
};
const char* kind_name(OpKind k);

struct NodeData {
  OpKind kind = OpKind::Input;
  std::vector<int> inputs;  // node ids; Gemm: a, b, [c], [bias] (see has_c / has_bias)
  Shape shape;
  DType dtype = DType::F32;
  std::string name;

  // op parameters (only those of the kind are meaningful)
  UnaryOp unary = UnaryOp::Neg;
  BinaryOp binary = BinaryOp::Add;
  ReduceOp reduce = ReduceOp::Sum;
  double scalar = 0, scalar2 = 0;  // BinaryScalar / ScalarBinary: scalar; Clamp: lo, hi
  std::vector<std::int64_t> axes;  // Reduce: wrapped, sorted; Softmax: axis; Permute: dims
  bool keepdim = false;
  bool is_reshape = false;                       // View made by reshape()
  GemmNodeOptions gemm;                          // Gemm / Linear (activation)
  bool has_c = false, has_bias = false;          // Gemm / Linear; has_bias: LayerNorm
  bool has_weight = false;                       // LayerNorm / RmsNorm
  bool has_mask = false, causal = false;         // Attention
  Tensor value;                                  // Parameter / Constant
  std::int64_t start = 0;                        // Slice
  dist::ReduceOp dist_op = dist::ReduceOp::Sum;  // AllReduce / ReduceScatter
  int world = 1;                                 // collectives: the world size their shape assumes

  bool is_leaf() const {
    return kind == OpKind::Input || kind == OpKind::Parameter || kind == OpKind::Constant;
  }
  bool is_collective() const {
    return kind == OpKind::AllReduce || kind == OpKind::AllGather || kind == OpKind::ReduceScatter;
  }
  bool is_elementwise() const {
    return kind == OpKind::Unary || kind == OpKind::Binary || kind == OpKind::BinaryScalar ||
           kind == OpKind::ScalarBinary || kind == OpKind::Clamp;
  }
};

struct GraphData {
  Graph* owner = nullptr;        // kept up to date when the Graph moves
  std::uint64_t generation = 0;  // the graph's process-unique id, carried by its nodes
  std::vector<NodeData> nodes;
  std::vector<std::pair<std::string, int>> outputs;  // in declaration order
  int world_size = 1;                                // what collective nodes' shapes assume

  const NodeData& at(int id) const { return nodes[static_cast<std::size_t>(id)]; }
  NodeData& at(int id) { return nodes[static_cast<std::size_t>(id)]; }
  Node handle(int id) const { return Node(generation, id); }
  int add(NodeData node);
  // The node's id after checking it belongs to this graph (InvalidArgument naming `op` otherwise).
  int own(const Node& n, const char* op) const;
  std::string label(int id) const;  // "#3 'h1'" or "#3"
};

// The live graph that graph_id names, with node_id in range; InvalidArgument naming `op` and the ids when the
// node is empty, its graph destroyed, or the id out of range.
GraphData* resolve(std::uint64_t graph_id, int node_id, const char* op);

// "op (node 'name')" for error messages.
std::string op_context(const char* op, const std::string& name);

// An op's display name ("add", "relu", "sum", "linear+relu", ...), with its scalars.
std::string node_op_string(const NodeData& n);
const char* activation_name(Activation a);

// Shape inference for matmul (no ops/ dependency, so building a graph needs no kernels). Broadcasting and -1
// extents: tensor/shape.h.
Shape matmul_shape(const Shape& a, const Shape& b, const std::string& ctx);

}  // namespace mt::detail
