// Slice, concat and collective nodes: building them (shape inference), their CPU reference, their executor
// steps, and the checks an executor makes of a graph with collectives.
//
// Design: a collective node's shape depends on the world size, so the graph knows it when the node is added
// (Graph::set_world_size), as every other node's shape is known when it is added; the executor only checks
// that its communicator has that size. Collective steps are never fused (they are not elementwise), get their
// own planned buffer (out of place: the plan never hands a step's output the memory of what it reads, except
// to an elementwise step), and all run on one stream in step order (pin_collective_streams).
#include "minitensor/graph/detail/collective.h"

#include "minitensor/dist/communicator.h"
#include "minitensor/tensor/detail/kernels.h"

namespace mt {
namespace detail {

namespace {

Tensor identity_copy(const Tensor& x) {
  return x.contiguous().clone();
}

}  // namespace

Tensor eval_layout_or_collective(const NodeData& n, const std::vector<Tensor>& ins) {
  switch (n.kind) {
    case OpKind::Slice: {
      const int d = static_cast<int>(n.axes[0]);
      return ins[0].narrow(d, n.start, n.shape[d]).clone();
    }
    case OpKind::Concat: {
      const int d = static_cast<int>(n.axes[0]);
      Tensor out = empty(n.shape, n.dtype, ins[0].device());
      std::int64_t offset = 0;
      for (const Tensor& x : ins) {
        Tensor dst = out.narrow(d, offset, x.size(d));
        dst.copy_(x);
        offset += x.size(d);
      }
      return out;
    }
    case OpKind::AllReduce:
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
      MT_CHECK(n.world == 1, InvalidArgument, kind_name(n.kind), " (node '", n.name, "'): a world of ",
               n.world, " ranks cannot run on the CPU, which is a world of one");
      return identity_copy(ins[0]);
    default:
      MT_THROW(InvalidArgument,
               "eval_layout_or_collective: not a slice, concat or collective: ", kind_name(n.kind));
  }
}

namespace {

void launch_slice(const NodeData& n, const Tensor& x, const Tensor& out, cudaStream_t stream) {
  const int d = static_cast<int>(n.axes[0]);
  const Tensor src = x.narrow(d, n.start, n.shape[d]);
  if (src.numel() == 0) return;
  launch_copy_strided(out.data_ptr(), out.layout(), src.data_ptr(), src.layout(), src.element_size(),
                      src.numel(), stream);
}

void launch_concat(const NodeData& n, const std::vector<Tensor>& ins, const Tensor& out,
                   cudaStream_t stream) {
  const int d = static_cast<int>(n.axes[0]);
  std::int64_t offset = 0;
  for (const Tensor& x : ins) {
    const Tensor dst = out.narrow(d, offset, x.size(d));
    offset += x.size(d);
    if (x.numel() == 0) continue;
    launch_copy_strided(dst.data_ptr(), dst.layout(), x.data_ptr(), x.layout(), x.element_size(), x.numel(),
                        stream);
  }
}

void launch_collective(const NodeData& n, const Tensor& x, const Tensor& out, dist::Communicator* comm,
                       cudaStream_t stream) {
  MT_CHECK(comm != nullptr, InvalidArgument, kind_name(n.kind), " (node '", n.name,
           "'): no communicator (ExecOptions::comm)");
  dist::CollectiveOptions o;
  o.stream = stream;
  switch (n.kind) {
    case OpKind::AllReduce:
      dist::all_reduce(x, out, *comm, n.dist_op, o);
      return;
    case OpKind::AllGather:
      dist::all_gather(x, out, *comm, n.axes[0], o);
      return;
    case OpKind::ReduceScatter:
      dist::reduce_scatter(x, out, *comm, n.dist_op, n.axes[0], o);
      return;
    default:
      MT_THROW(InvalidArgument, "launch_collective: not a collective: ", kind_name(n.kind));
  }
}

}  // namespace

void check_collectives(const GraphData& g, Device device, const dist::Communicator* comm, const char* op) {
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    const NodeData& n = g.at(id);
    if (!n.is_collective()) continue;
    const std::string node = str("node ", g.label(id), " ", node_op_string(n));
    if (device.is_cpu()) {
      MT_CHECK(n.world == 1, InvalidArgument, op, ": ", node, " needs ", n.world,
               " ranks, but the CPU executor is a world of one (run it on the GPUs, one communicator each, "
               "ExecOptions::comm)");
      continue;
    }
    if (!dist::nccl_available()) throw DistUnavailable(str(op, " (", node, ")"));
    MT_CHECK(comm != nullptr && comm->defined(), InvalidArgument, op, ": ", node,
             " needs a communicator (ExecOptions::comm), and none was given");
    MT_CHECK(comm->size() == n.world, InvalidArgument, op, ": ", node, " was built for a world of ", n.world,
             " ranks, but the communicator has ", comm->size());
    MT_CHECK(comm->device() == device.index(), DeviceError, op, ": ", node, " runs on ", device,
             " but the communicator is on cuda:", comm->device());
  }
}

void launch_layout_or_collective(const NodeData& n, const std::vector<Tensor>& ins, const Tensor& out,
                                 dist::Communicator* comm, cudaStream_t stream) {
  if (n.kind == OpKind::Slice)
    launch_slice(n, ins[0], out, stream);
  else if (n.kind == OpKind::Concat)
    launch_concat(n, ins, out, stream);
  else
    launch_collective(n, ins[0], out, comm, stream);
}

bool collective_allocates(const NodeData& n) {
  return (n.kind == OpKind::AllGather || n.kind == OpKind::ReduceScatter) && n.axes[0] != 0;
}

void pin_collective_streams(const Program& p, std::vector<int>& step_stream) {
  int stream = -1;
  for (size_t i = 0; i < p.steps.size() && i < step_stream.size(); ++i) {
    if (!p.g.at(p.steps[i].root).is_collective()) continue;
    if (stream < 0)
      stream = step_stream[i];
    else
      step_stream[i] = stream;
  }
}

}  // namespace detail

using detail::NodeData;
using detail::op_context;
using detail::OpKind;

// ---------------------------------------------------------------- builders
Node Graph::slice(Node x, std::int64_t dim, std::int64_t start, std::int64_t end, const std::string& name) {
  const std::string ctx = op_context("slice", name);
  const NodeData& in = live().at(live().own(x, ctx.c_str()));
  MT_CHECK(in.shape.rank() >= 1, ShapeError, ctx, ": needs rank >= 1, got ", in.shape);
  const int d = wrap_dim(dim, in.shape.rank(), ctx.c_str());
  MT_CHECK(0 <= start && start <= end && end <= in.shape[d], ShapeError, ctx, ": [", start, ", ", end,
           ") is not a range of dim ", d, " of ", in.shape);
  NodeData n;
  n.kind = OpKind::Slice;
  n.axes = {d};
  n.start = start;
  n.inputs = {x.id()};
  n.shape = in.shape;
  n.shape[d] = end - start;
  n.dtype = in.dtype;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::concat(const std::vector<Node>& xs, std::int64_t dim, const std::string& name) {
  const std::string ctx = op_context("concat", name);
  MT_CHECK(!xs.empty(), InvalidArgument, ctx, ": needs at least one operand");
  const NodeData& first = live().at(live().own(xs[0], ctx.c_str()));
  MT_CHECK(first.shape.rank() >= 1, ShapeError, ctx, ": needs rank >= 1, got ", first.shape);
  const int d = wrap_dim(dim, first.shape.rank(), ctx.c_str());
  NodeData n;
  n.kind = OpKind::Concat;
  n.axes = {d};
  n.shape = first.shape;
  n.shape[d] = 0;
  n.dtype = first.dtype;
  for (const Node& x : xs) {
    const NodeData& in = live().at(live().own(x, ctx.c_str()));
    MT_CHECK(in.dtype == first.dtype, DTypeError, ctx, ": dtypes differ: ", first.dtype, " and ", in.dtype);
    bool fits = in.shape.rank() == first.shape.rank();
    for (int k = 0; fits && k < in.shape.rank(); ++k) fits = k == d || in.shape[k] == first.shape[k];
    MT_CHECK(fits, ShapeError, ctx, ": ", in.shape, " does not fit ", first.shape, " outside dim ", d);
    n.shape[d] += in.shape[d];
    n.inputs.push_back(x.id());
  }
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

void Graph::set_world_size(int world_size) {
  MT_CHECK(world_size >= 1, InvalidArgument, "set_world_size: the world size ", world_size,
           " must be at least 1");
  const detail::GraphData& g = live();
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id)
    MT_CHECK(!g.at(id).is_collective() || g.at(id).world == world_size, InvalidArgument, "set_world_size(",
             world_size, "): node ", g.label(id), " ", detail::node_op_string(g.at(id)),
             " was built for a world of ", g.at(id).world);
  live().world_size = world_size;
}

int Graph::world_size() const {
  return live().world_size;
}

Node Graph::all_reduce(Node x, dist::ReduceOp op, const std::string& name) {
  const std::string ctx = op_context("all_reduce", name);
  const NodeData& in = live().at(live().own(x, ctx.c_str()));
  NodeData n;
  n.kind = OpKind::AllReduce;
  n.dist_op = op;
  n.world = live().world_size;
  n.inputs = {x.id()};
  n.shape = in.shape;
  n.dtype = in.dtype;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::all_gather(Node x, std::int64_t dim, const std::string& name) {
  const std::string ctx = op_context("all_gather", name);
  const NodeData& in = live().at(live().own(x, ctx.c_str()));
  MT_CHECK(in.shape.rank() >= 1, ShapeError, ctx, ": needs rank >= 1, got ", in.shape);
  const int d = wrap_dim(dim, in.shape.rank(), ctx.c_str());
  NodeData n;
  n.kind = OpKind::AllGather;
  n.axes = {d};
  n.world = live().world_size;
  n.inputs = {x.id()};
  n.shape = in.shape;
  n.shape[d] *= n.world;
  n.dtype = in.dtype;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

Node Graph::reduce_scatter(Node x, std::int64_t dim, dist::ReduceOp op, const std::string& name) {
  const std::string ctx = op_context("reduce_scatter", name);
  const NodeData& in = live().at(live().own(x, ctx.c_str()));
  MT_CHECK(in.shape.rank() >= 1, ShapeError, ctx, ": needs rank >= 1, got ", in.shape);
  const int d = wrap_dim(dim, in.shape.rank(), ctx.c_str());
  const int world = live().world_size;
  MT_CHECK(in.shape[d] % world == 0, ShapeError, ctx, ": extent ", in.shape[d], " of dim ", d, " of ",
           in.shape, " is not a multiple of the world size ", world);
  NodeData n;
  n.kind = OpKind::ReduceScatter;
  n.dist_op = op;
  n.axes = {d};
  n.world = world;
  n.inputs = {x.id()};
  n.shape = in.shape;
  n.shape[d] /= world;
  n.dtype = in.dtype;
  n.name = name;
  return live().handle(live().add(std::move(n)));
}

}  // namespace mt
