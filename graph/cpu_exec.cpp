// The CPU path: every node through the eager ops on CPU tensors (the Eigen reference), no fusion or planning;
// and the choice of the CPU where no device was asked for and there is none.
#include <algorithm>
#include <atomic>
#include <iostream>

#include "minitensor/graph/detail/collective.h"
#include "minitensor/graph/detail/internal.h"
#include "minitensor/ops/ops.h"

namespace mt {
namespace detail {

namespace {
std::atomic<bool> g_cpu_fallback_noticed{false};
}  // namespace

Device resolve_device(const std::optional<Device>& requested) {
  if (requested) return *requested;
  if (cuda_available()) return Device::cuda(0);
  if (!g_cpu_fallback_noticed.exchange(true))
    std::cerr << "minitensor: no CUDA device (" << cuda_unavailable_reason() << "); running on the CPU\n";
  return Device::cpu();
}

void reset_cpu_fallback_notice() {
  g_cpu_fallback_noticed.store(false);
}

void require_outputs(const GraphData& g, const char* op) {
  MT_CHECK(!g.outputs.empty(), InvalidArgument, op,
           ": the graph has no outputs (declare them with Graph::output)");
}

std::vector<Tensor> bind_inputs(const GraphData& g, const TensorMap& inputs, Device device, const char* op) {
  std::vector<Tensor> bound(g.nodes.size());
  std::string expected;
  for (const NodeData& n : g.nodes)
    if (n.kind == OpKind::Input) expected += str(expected.empty() ? "" : ", ", "'", n.name, "'");
  for (const auto& [name, t] : inputs) {
    const auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const NodeData& n) {
      return n.kind == OpKind::Input && n.name == name;
    });
    MT_CHECK(it != g.nodes.end(), InvalidArgument, op, ": unknown input '", name,
             "'; the graph's inputs are ", expected.empty() ? "(none)" : expected);
  }
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    const NodeData& n = g.at(id);
    if (n.kind != OpKind::Input) continue;
    const auto it = inputs.find(n.name);
    MT_CHECK(it != inputs.end(), InvalidArgument, op, ": missing input '", n.name, "' (", n.shape, " ",
             n.dtype, ")");
    const Tensor& t = it->second;
    MT_CHECK(t.defined(), InvalidArgument, op, ": input '", n.name, "' is an undefined tensor");
    MT_CHECK(t.shape() == n.shape, ShapeError, op, ": input '", n.name, "' has shape ", t.shape(),
             ", the graph expects ", n.shape);
    MT_CHECK(t.dtype() == n.dtype, DTypeError, op, ": input '", n.name, "' has dtype ", t.dtype(),
             ", the graph expects ", n.dtype);
    MT_CHECK(!(device.is_cuda() && t.is_cuda() && t.device() != device), DeviceError, op, ": input '", n.name,
             "' lives on ", t.device(), " but the graph runs on ", device);
    bound[static_cast<size_t>(id)] = t;
  }
  return bound;
}

Tensor eval_node(const NodeData& n, const std::vector<Tensor>& ins) {
  switch (n.kind) {
    case OpKind::Input:
    case OpKind::Parameter:
    case OpKind::Constant:
      MT_THROW(InvalidArgument, "eval_node: a leaf has no op");
    case OpKind::Unary:
      return unary(n.unary, ins[0]);
    case OpKind::Binary:
      return binary(n.binary, ins[0], ins[1]);
    case OpKind::BinaryScalar:
      return binary_scalar(n.binary, ins[0], n.scalar);
    case OpKind::ScalarBinary:
      return scalar_binary(n.binary, n.scalar, ins[0]);
    case OpKind::Clamp:
      return clamp(ins[0], n.scalar, n.scalar2);
    case OpKind::Reduce:
      return reduce(n.reduce, ins[0], n.axes, n.keepdim);
    case OpKind::Softmax:
      return softmax(ins[0], n.axes[0]);
    case OpKind::LogSoftmax:
      return log_softmax(ins[0], n.axes[0]);
    case OpKind::Permute:
      return permute_copy(ins[0], n.axes);  // a graph's permute materialises (graph.h)
    case OpKind::View:
      return ins[0].reshape(n.shape);
    case OpKind::SliceView:
      return ins[0]
          .slice(n.axes[0], n.axes[1], n.axes[1] + n.shape[static_cast<int>(n.axes[0])])
          .contiguous();
    case OpKind::Matmul:
      return matmul(ins[0], ins[1]);
    case OpKind::Linear: {
      const Tensor y = linear(ins[0], ins[1], n.has_bias ? ins[2] : Tensor(), n.gemm.activation);
      return n.gemm.softmax ? softmax(y, -1) : y;
    }
    case OpKind::Gemm: {
      Tensor c;
      if (n.has_c)
        c = ins[2].expand(n.shape).contiguous().clone();
      else
        c = empty(n.shape, DType::F32, ins[0].device());
      GemmOptions o;
      o.alpha = n.gemm.alpha;
      o.beta = n.has_c ? n.gemm.beta : 0.0f;
      o.activation = n.gemm.activation;
      o.softmax = n.gemm.softmax;
      const Tensor bias = n.has_bias ? ins[n.has_c ? 3 : 2] : Tensor();
      mt::gemm(ins[0], ins[1], c, n.gemm.trans_a, n.gemm.trans_b, o, bias);
      return c;
    }
    case OpKind::LayerNorm:
      return layer_norm(ins[0], n.has_weight ? ins[1] : Tensor(),
                        n.has_bias ? ins[n.has_weight ? 2 : 1] : Tensor(), n.scalar);
    case OpKind::RmsNorm:
      return rms_norm(ins[0], n.has_weight ? ins[1] : Tensor(), n.scalar);
    case OpKind::Attention: {
      AttentionOptions o;
      o.causal = n.causal;
      o.scale = n.scalar;
      if (n.has_mask) o.mask = ins[3];
      return attention(ins[0], ins[1], ins[2], o);
    }
    case OpKind::Slice:
    case OpKind::Concat:
    case OpKind::AllReduce:
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
      return eval_layout_or_collective(n, ins);
  }
  MT_THROW(InvalidArgument, "eval_node: unknown op");
}

}  // namespace detail

std::vector<Tensor> run_cpu_all(const Graph& graph, const TensorMap& inputs) {
  const detail::GraphData& g = graph.data();
  detail::require_outputs(g, "run_cpu");
  std::vector<Tensor> values = detail::bind_inputs(g, inputs, Device::cpu(), "run_cpu");
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    const detail::NodeData& n = g.at(id);
    Tensor& v = values[static_cast<size_t>(id)];
    if (n.kind == detail::OpKind::Input) {
      v = v.cpu();
      continue;
    }
    if (n.kind == detail::OpKind::Parameter || n.kind == detail::OpKind::Constant) {
      v = n.value.cpu();
      continue;
    }
    std::vector<Tensor> ins;
    for (int in : n.inputs) ins.push_back(values[static_cast<size_t>(in)]);
    v = detail::eval_node(n, ins);
  }
  return values;
}

TensorMap run_cpu(const Graph& graph, const TensorMap& inputs) {
  const std::vector<Tensor> values = run_cpu_all(graph, inputs);
  TensorMap out;
  for (const auto& [name, id] : graph.data().outputs) out[name] = values[static_cast<size_t>(id)];
  return out;
}

}  // namespace mt
