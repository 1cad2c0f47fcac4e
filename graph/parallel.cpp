// Tensor-parallel recipes (column / row-parallel linear, the Megatron MLP, tensor-parallel SGEMM),
// check_parallel, and DataParallel.
#include "minitensor/graph/parallel.h"

#include <algorithm>

#include "minitensor/dist/dist.h"
#include "minitensor/graph/detail/internal.h"
#include "minitensor/runtime/device.h"

namespace mt {

namespace {

std::string part(const std::string& name, const char* what, const char* fallback) {
  return detail::str(name.empty() ? fallback : name.c_str(), ".", what);
}

// y (..., c), each rank's columns -> (..., world c), rank r's block at columns [r c, (r+1) c). Gathered along
// dim 0 and moved into place by a permute (a copy), not gathered along the last dim, which would stage the
// blocks in a buffer allocated at every run and so keep the executor from capturing a CUDA graph.
Node gather_columns(Graph& g, Node y, const std::string& name) {
  const int world = g.world_size();
  if (world == 1) return y;
  const Shape s = y.shape();
  const std::int64_t c = s.back(), rows = c == 0 ? 0 : s.numel() / c;
  Node blocks = g.all_gather(g.view(y, {1, rows, c}), 0, part(name, "all_gather", "gather"));
  Node placed = g.permute(blocks, {1, 0, 2});  // (rows, world, c)
  Shape out = s;
  out[out.rank() - 1] = c * world;
  return g.reshape(placed, out, name);
}

void check_weight(const Tensor& w, const Tensor& bias, const char* op, const std::string& name) {
  const std::string ctx = detail::op_context(op, name);
  w.check_defined(ctx.c_str());
  MT_CHECK(w.dim() == 2, ShapeError, ctx, ": w must be (in, out), got ", w.shape());
  MT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(1)), ShapeError, ctx,
           ": bias must be (", w.size(1), "), got ", bias.shape());
}

}  // namespace

Node column_parallel_linear(Graph& g, Node x, const Tensor& w, const Tensor& bias, int rank,
                            Activation activation, bool gather_output, const std::string& name) {
  check_weight(w, bias, "column_parallel_linear", name);
  const int world = g.world_size();
  Node wr = g.parameter(part(name, "w", "column_parallel"), dist::shard(w, 1, rank, world));
  Node br = bias.defined()
                ? g.parameter(part(name, "b", "column_parallel"), dist::shard(bias, 0, rank, world))
                : Node();
  Node y = g.linear(x, wr, br, activation, gather_output ? "" : name);
  return gather_output ? gather_columns(g, y, name) : y;
}

Node row_parallel_linear(Graph& g, Node x, const Tensor& w, const Tensor& bias, int rank,
                         const std::string& name) {
  check_weight(w, bias, "row_parallel_linear", name);
  const int world = g.world_size();
  Node wr = g.parameter(part(name, "w", "row_parallel"), dist::shard(w, 0, rank, world));
  Node y = g.linear(x, wr);
  if (world > 1) y = g.all_reduce(y, dist::ReduceOp::Sum, part(name, "all_reduce", "row_parallel"));
  // The bias once, after the reduction: every rank holds the whole sum by then.
  if (bias.defined()) y = g.add(y, g.parameter(part(name, "b", "row_parallel"), bias));
  return name.empty() ? y : y.named(name);
}

Node megatron_mlp(Graph& g, Node x, const MlpWeights& w, int rank, const MegatronOptions& options,
                  const std::string& name) {
  check_weight(w.w1, w.b1, "megatron_mlp (w1)", name);
  check_weight(w.w2, w.b2, "megatron_mlp (w2)", name);
  const std::string ctx = detail::op_context("megatron_mlp", name);
  const Shape xs = x.shape();
  MT_CHECK(xs.rank() >= 1 && xs.back() == w.w1.size(0) && w.w1.size(1) == w.w2.size(0), ShapeError, ctx,
           ": x ", xs, ", w1 ", w.w1.shape(), " and w2 ", w.w2.shape(), " do not chain");
  MT_CHECK(options.chunks >= 1, InvalidArgument, ctx, ": chunks must be at least 1, got ", options.chunks);
  const int world = g.world_size();
  const std::int64_t d = xs.back(), rows = d == 0 ? 0 : xs.numel() / d, d_out = w.w2.size(1);
  Node w1 = g.parameter(part(name, "w1", "mlp"), dist::shard(w.w1, 1, rank, world));
  Node b1 = w.b1.defined() ? g.parameter(part(name, "b1", "mlp"), dist::shard(w.b1, 0, rank, world)) : Node();
  Node w2 = g.parameter(part(name, "w2", "mlp"), dist::shard(w.w2, 0, rank, world));
  Node x2 = xs.rank() == 2 ? x : g.view(x, {rows, d});
  const std::int64_t chunks = std::max<std::int64_t>(1, std::min<std::int64_t>(options.chunks, rows));
  std::vector<Node> parts;
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = rows * c / chunks, end = rows * (c + 1) / chunks;
    Node xc = chunks > 1 ? g.slice(x2, 0, begin, end) : x2;
    Node h = g.linear(xc, w1, b1, w.activation);  // column-parallel: (rows, ffn / world), no communication
    Node p = g.linear(h, w2);                     // row-parallel: this rank's partial sums (rows, d_out)
    if (world > 1) p = g.all_reduce(p, dist::ReduceOp::Sum, part(name, "all_reduce", "mlp"));
    parts.push_back(p);
  }
  Node y = parts.size() > 1 ? g.concat(parts, 0) : parts[0];
  if (w.b2.defined()) y = g.add(y, g.parameter(part(name, "b2", "mlp"), w.b2));
  if (xs.rank() != 2) {
    Shape out = xs;
    out[out.rank() - 1] = d_out;
    y = g.view(y, out);
  }
  return name.empty() ? y : y.named(name);
}

Node mlp(Graph& g, Node x, const MlpWeights& w, const std::string& name) {
  check_weight(w.w1, w.b1, "mlp (w1)", name);
  check_weight(w.w2, w.b2, "mlp (w2)", name);
  Node w1 = g.parameter(part(name, "w1", "mlp"), w.w1);
  Node b1 = w.b1.defined() ? g.parameter(part(name, "b1", "mlp"), w.b1) : Node();
  Node w2 = g.parameter(part(name, "w2", "mlp"), w.w2);
  Node b2 = w.b2.defined() ? g.parameter(part(name, "b2", "mlp"), w.b2) : Node();
  return g.linear(g.linear(x, w1, b1, w.activation), w2, b2, Activation::None, name);
}

Node tensor_parallel_matmul(Graph& g, Node a, const Tensor& b, int rank, const std::string& name) {
  check_weight(b, Tensor(), "tensor_parallel_matmul", name);
  Node br = g.parameter(part(name, "b", "tp_matmul"), dist::shard(b, 1, rank, g.world_size()));
  return gather_columns(g, g.matmul(a, br), name);
}

// ---------------------------------------------------------------- check_parallel
CheckReport check_parallel(const Graph& graph, const TensorMap& inputs, const Graph& reference,
                           const TensorMap& reference_inputs, ExecOptions options) {
  options.device = detail::resolve_device(options.device);
  const TensorMap ref = run_cpu(reference, reference_inputs);
  Executor exec(graph, options);
  const TensorMap out = exec.run(inputs);
  if (options.device->is_cuda()) synchronize(*options.device);
  const bool on_gpu = options.device->is_cuda();
  const int world = on_gpu && options.comm ? options.comm->size() : 1;
  const int rank = on_gpu && options.comm ? options.comm->rank() : 0;
  const MathMode math = options.compile.math.value_or(default_math_mode());
  CheckReport report;
  for (const auto& [name, id] : graph.data().outputs) {
    const auto it = ref.find(name);
    MT_CHECK(it != ref.end(), InvalidArgument, "check_parallel: the reference graph has no output '", name,
             "'");
    const Tensor& got = out.at(name);
    Tensor want = it->second;
    CheckRow row;
    row.node = id;
    row.label = detail::str("output '", name, "'");
    row.op = detail::node_op_string(graph.data().at(id));
    row.shape = got.shape().str();
    row.note = detail::str("rank ", rank, " of ", world, " vs the unsplit reference");
    if (!(got.shape() == want.shape())) {
      int dim = -1;
      bool fits = got.dim() == want.dim();
      for (int k = 0; fits && k < got.dim(); ++k) {
        if (got.size(k) == want.size(k)) continue;
        fits = dim < 0 && got.size(k) * world == want.size(k);
        dim = k;
      }
      MT_CHECK(fits && dim >= 0, ShapeError, "check_parallel: output '", name, "' ", got.shape(),
               " is neither the reference's ", want.shape(), " nor a block of it over ", world, " ranks");
      want = want.narrow(dim, rank * got.size(dim), got.size(dim));
      row.note += detail::str(" (its block along dim ", dim, ")");
    }
    const detail::Diff d = detail::diff_tensors(got, want);
    row.max_abs = d.max_abs;
    row.max_rel = d.max_rel;
    row.nmse = d.nmse;
    row.tolerance = got.dtype() != DType::F32 ? 0 : math == MathMode::TF32 ? 1e-2 : 1e-4;
    row.scale = std::max(d.max_ref, 1e-30);
    row.pass = d.pattern_ok && d.max_abs <= row.tolerance * row.scale;
    if (!d.pattern_ok) row.note += "; NaN/Inf positions differ";
    report.ok = report.ok && row.pass;
    report.rows.push_back(std::move(row));
  }
  return report;
}

}  // namespace mt
