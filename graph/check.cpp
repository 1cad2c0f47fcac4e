// check(): the graph on the device against the Eigen reference on the CPU, node by node.
//
// Local rows feed the CPU op with the device's own inputs of that step, so each row measures that step's
// error alone (upstream differences do not pile up). End-to-end rows compare each output with an independent
// CPU run. A row passes when NaN/Inf positions match and max |got - ref| <= tolerance * scale, where scale is
// the magnitude the op's rounding errors are proportional to (e.g. k * max|a| * max|b| for a GEMM).
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "minitensor/graph/detail/executor_impl.h"
#include "minitensor/runtime/detail/json.h"

namespace mt {
namespace detail {

std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> v;
  const Tensor c = t.cpu().contiguous();
  switch (c.dtype()) {
    case DType::F32:
      for (float x : c.to_vector<float>()) v.push_back(x);
      break;
    case DType::I32:
      for (std::int32_t x : c.to_vector<std::int32_t>()) v.push_back(x);
      break;
    case DType::U8:
      for (std::uint8_t x : c.to_vector<std::uint8_t>()) v.push_back(x);
      break;
  }
  return v;
}

double max_abs_of(const Tensor& t) {
  double m = 0;
  for (double x : as_doubles(t))
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

Diff diff_tensors(const Tensor& got, const Tensor& ref) {
  Diff d;
  const std::vector<double> g = as_doubles(got), r = as_doubles(ref);
  double num = 0, den = 0;
  for (size_t i = 0; i < r.size() && i < g.size(); ++i) {
    if (std::isnan(r[i]) || std::isinf(r[i])) {
      if (std::isnan(r[i]) ? !std::isnan(g[i]) : g[i] != r[i]) d.pattern_ok = false;
      continue;
    }
    if (!std::isfinite(g[i])) {
      d.pattern_ok = false;
      continue;
    }
    const double e = std::fabs(g[i] - r[i]);
    d.max_abs = std::max(d.max_abs, e);
    if (r[i] != 0) d.max_rel = std::max(d.max_rel, e / std::fabs(r[i]));
    d.max_ref = std::max(d.max_ref, std::fabs(r[i]));
    num += e * e;
    den += r[i] * r[i];
  }
  d.nmse = den > 0 ? num / den : num;
  d.pattern_ok = d.pattern_ok && g.size() == r.size();
  return d;
}

namespace {

// The per-op tolerance (relative to scale) and what the scale is.
double local_scale(const Program& p, const NodeData& n, const std::vector<Tensor>& ins, double max_ref) {
  double in_max = 0;
  for (const Tensor& t : ins)
    if (t.dtype() == DType::F32) in_max = std::max(in_max, max_abs_of(t));
  double scale = std::max(max_ref, 1e-30);
  switch (n.kind) {
    case OpKind::Reduce: {
      const double r =
          static_cast<double>(ins[0].numel()) / std::max<double>(1.0, static_cast<double>(n.shape.numel()));
      if (n.reduce == ReduceOp::Sum) scale = std::max(scale, in_max * std::sqrt(r));
      if (n.reduce == ReduceOp::Mean) scale = std::max(scale, in_max);
      break;
    }
    case OpKind::Matmul:
    case OpKind::Linear:
    case OpKind::Gemm: {
      const std::int64_t k = n.kind == OpKind::Gemm && n.gemm.trans_a ? ins[0].size(-2) : ins[0].size(-1);
      const double a = max_abs_of(ins[0]), b = max_abs_of(ins[1]);
      const double product = a * b * std::sqrt(static_cast<double>(std::max<std::int64_t>(k, 1)));
      // With the softmax fused, an error d in a logit moves its probability p by about p * d.
      scale = n.gemm.softmax ? scale * std::max(1.0, product) : std::max(scale, product);
      break;
    }
    default:
      scale = std::max(scale, in_max);
      break;  // elementwise: rounding relative to the operands
  }
  (void)p;
  return scale;
}

double local_tolerance(const NodeData& n, MathMode math) {
  switch (n.kind) {
    case OpKind::Matmul:
    case OpKind::Linear:
    case OpKind::Gemm:
      return math == MathMode::TF32 ? 5e-3 : 2e-5;
    case OpKind::Reduce:
      return 1e-5;
    case OpKind::Softmax:
    case OpKind::LogSoftmax:
    case OpKind::LayerNorm:
    case OpKind::RmsNorm:
      return 1e-5;
    case OpKind::Attention:
      return math == MathMode::TF32 ? 5e-3 : 2e-5;
    default:
      return 4e-6;
  }
}

}  // namespace

}  // namespace detail

CheckReport check(const Graph& graph, const TensorMap& inputs, ExecOptions options) {
  using namespace detail;
  CheckReport report;
  options.device = resolve_device(options.device);
  options.run.keep_intermediates = true;
  options.run.cuda_graph = false;
  const std::vector<Tensor> cpu = run_cpu_all(graph, inputs);
  auto add_row = [&](CheckRow row) {
    report.ok = report.ok && row.pass;
    report.rows.push_back(std::move(row));
  };
  if (options.device->is_cpu()) {  // nothing to compare against: report the reference's outputs, and say so
    report.compared = false;
    for (const auto& [name, id] : graph.data().outputs) {
      CheckRow row;
      row.node = id;
      row.label = name;
      row.op = node_op_string(graph.data().at(id));
      row.shape = graph.data().at(id).shape.str();
      row.note = "CPU only (no device run)";
      add_row(row);
    }
    return report;
  }
  Executor exec(graph, options);
  const TensorMap out = exec.run(inputs);
  const ExecutorImpl& impl = exec.impl();
  const Program& p = impl.m_prog;
  synchronize(*options.device);

  for (const Step& s : p.steps) {
    const NodeData& root = p.g.at(s.root);
    CheckRow row;
    row.node = s.root;
    row.label = p.g.label(s.root);
    row.op = node_op_string(root);
    row.shape = root.shape.str();
    // The CPU reference of this step, from the device's values of what it reads.
    std::vector<Tensor> local(p.g.nodes.size());
    std::vector<Tensor> root_ins;
    for (int r : s.reads)
      local[static_cast<size_t>(r)] = exec.value(r).defined() ? exec.value(r).cpu() : Tensor();
    for (int r : s.reads) {
      if (local[static_cast<size_t>(r)].defined()) continue;
      // A view (or a leaf) of something the step reads: recompute it from the CPU values (a node the compiler
      // made has none: the device's value is always kept for those, as a leaf or a view).
      if (static_cast<size_t>(r) < cpu.size()) local[static_cast<size_t>(r)] = cpu[static_cast<size_t>(r)];
    }
    for (int m : s.members) {
      const NodeData& n = p.g.at(m);
      std::vector<Tensor> ins;
      for (int in : n.inputs) ins.push_back(local[static_cast<size_t>(in)]);
      if (m == s.root) root_ins = ins;
      local[static_cast<size_t>(m)] = eval_node(n, ins);
    }
    if (s.members.size() > 1) {
      row.op = str("fused[", s.members.size(), "] ") + row.op;
      std::string names;
      for (int m : s.members)
        if (m != s.root) names += str(names.empty() ? "" : " ", p.g.label(m));
      row.note = "fused: " + names;
      root_ins.clear();
      for (int r : s.reads) root_ins.push_back(local[static_cast<size_t>(r)]);
    }
    const Tensor& ref = local[static_cast<size_t>(s.root)];
    const Tensor got = exec.value(s.root);
    const Diff d = diff_tensors(got, ref);
    row.max_abs = d.max_abs;
    row.max_rel = d.max_rel;
    row.nmse = d.nmse;
    row.tolerance = local_tolerance(root, options.compile.math.value_or(default_math_mode()));
    // A row group's output carries its reductions' rounding too (a LayerNorm's, for one written so).
    if (s.kind == Step::Kind::Rows) row.tolerance = std::max(row.tolerance, 1e-5);
    row.scale = local_scale(p, root, root_ins, d.max_ref);
    if (root.dtype != DType::F32) row.tolerance = 0;  // argmax and integer ops: exact
    row.pass = d.pattern_ok && d.max_abs <= row.tolerance * row.scale;
    if (!d.pattern_ok) row.note += (row.note.empty() ? "" : "; ") + std::string("NaN/Inf positions differ");
    add_row(std::move(row));
  }
  // Outputs, end to end.
  for (const auto& [name, id0] : graph.data().outputs) {
    const NodeData& n = graph.data().at(id0);
    CheckRow row;
    row.node = id0;
    row.label = str("output '", name, "'");
    row.op = node_op_string(n);
    row.shape = n.shape.str();
    const Tensor& ref = cpu[static_cast<size_t>(id0)];
    const Diff d = diff_tensors(out.at(name), ref);
    row.max_abs = d.max_abs;
    row.max_rel = d.max_rel;
    row.nmse = d.nmse;
    row.tolerance = n.dtype == DType::F32
                        ? (options.compile.math.value_or(default_math_mode()) == MathMode::TF32 ? 1e-2 : 1e-4)
                        : 0;
    row.scale = std::max(d.max_ref, 1e-30);
    row.note = "end to end";
    row.pass = d.pattern_ok && d.max_abs <= row.tolerance * row.scale;
    if (n.dtype != DType::F32 && !row.pass)
      row.note += " (integer result: any upstream rounding can flip it)";
    if (!d.pattern_ok) row.note += "; NaN/Inf positions differ";
    add_row(std::move(row));
  }
  return report;
}

std::string CheckReport::table() const {
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-26s %-30s %-14s %11s %11s %11s %9s %s\n", "node", "op", "shape",
                "max abs", "max rel", "NMSE", "tol", "result");
  os << line;
  for (const CheckRow& r : rows) {
    std::snprintf(line, sizeof line, "%-26.26s %-30.30s %-14.14s %11.3e %11.3e %11.3e %9.1e %s%s%s\n",
                  r.label.c_str(), r.op.c_str(), r.shape.c_str(), r.max_abs, r.max_rel, r.nmse, r.tolerance,
                  !compared ? "-"
                  : r.pass  ? "pass"
                            : "FAIL",
                  r.note.empty() ? "" : "  ", r.note.c_str());
    os << line;
  }
  if (!compared)
    os << "nothing compared: the graph ran on the CPU reference only (run check() with a CUDA device to "
          "compare)\n";
  else
    os << (ok ? "all rows pass" : "SOME ROWS FAIL") << " (" << rows.size()
       << " rows; tol is relative to each row's scale)\n";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const CheckReport& report) {
  return os << report.table();
}

std::string to_json(const CheckReport& report) {
  detail::JsonWriter w;
  w.begin_object().field("ok", report.ok).field("compared", report.compared).key("rows").begin_array();
  for (const CheckRow& r : report.rows) {
    w.begin_object()
        .field("node", r.node)
        .field("label", r.label)
        .field("op", r.op)
        .field("shape", r.shape)
        .field("max_abs", r.max_abs)
        .field("max_rel", r.max_rel)
        .field("nmse", r.nmse)
        .field("tolerance", r.tolerance)
        .field("scale", r.scale)
        .field("pass", r.pass)
        .field("note", r.note)
        .end_object();
  }
  w.end_array().end_object();
  return w.take();
}

}  // namespace mt
