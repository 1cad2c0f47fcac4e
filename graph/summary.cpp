// What an executor says about itself: summary() as text, and the same facts as JSON (to_json), with the
// stats.
#include <sstream>

#include "minitensor/graph/detail/executor_impl.h"
#include "minitensor/runtime/detail/json.h"

namespace mt {
namespace detail {

std::string ExecutorImpl::summary() const {
  std::ostringstream os;
  os << "executor on " << m_device << ": " << m_prog.steps.size() << " steps (" << m_prog.order.size()
     << " live nodes of " << m_source.nodes.size() << "), " << m_sched.n_streams << " stream(s), CUDA graph "
     << (m_opt.run.cuda_graph && m_capturable ? "on" : "off") << "\n";
  for (const auto& l : m_prog.log) os << "  " << l << "\n";
  for (size_t i = 0; i < m_prog.steps.size(); ++i) {
    const Step& s = m_prog.steps[i];
    os << "  step " << i << " [stream " << m_sched.stream[i] << "] " << m_prog.node_label(s.root);
    if (s.kind == Step::Kind::Fused) os << " (fused kernel, " << s.members.size() << " nodes)";
    if (s.kind == Step::Kind::Rows)
      os << " (row kernel, " << s.members.size() << " nodes, " << s.rows.n_rows << " rows of " << s.rows.len
         << ")";
    const auto w = m_mem.where[static_cast<size_t>(s.root)];
    if (w == MemoryPlan::Where::Arena) os << " @arena+" << m_mem.offset[static_cast<size_t>(s.root)];
    if (w == MemoryPlan::Where::Persistent) os << " @output+" << m_mem.offset[static_cast<size_t>(s.root)];
    if (m_mem.inplace_of[static_cast<size_t>(s.root)] >= 0)
      os << " (in place over " << m_prog.g.label(m_mem.inplace_of[static_cast<size_t>(s.root)]) << ")";
    if (!m_sched.waits[i].empty()) {
      os << " waits";
      for (int w2 : m_sched.waits[i]) os << " " << w2;
    }
    os << "\n";
  }
  os << "  memory plan: arena " << m_mem.arena_bytes << " B for " << m_mem.n_intermediates
     << " intermediates of " << m_mem.unplanned_bytes << " B in all (" << m_mem.n_inplace
     << " in place); outputs " << m_mem.persistent_bytes << " B\n";
  return os.str();
}

}  // namespace detail

std::string to_json(const PlanStats& plan) {
  detail::JsonWriter w;
  w.begin_object()
      .field("arena_bytes", plan.arena_bytes)
      .field("unplanned_bytes", plan.unplanned_bytes)
      .field("n_intermediates", plan.n_intermediates)
      .field("n_inplace", plan.n_inplace)
      .end_object();
  return w.take();
}

std::string to_json(const ExecStats& stats) {
  detail::JsonWriter w;
  w.begin_object()
      .field("n_runs", stats.n_runs)
      .field("n_plain_runs", stats.n_plain_runs)
      .field("n_captures", stats.n_captures)
      .field("n_graph_updates", stats.n_graph_updates)
      .field("n_reinstantiations", stats.n_reinstantiations)
      .field("n_replays", stats.n_replays)
      .field("n_pipelined_runs", stats.n_pipelined_runs)
      .field("n_graph_edges", stats.n_graph_edges)
      .field("n_programmatic_edges", stats.n_programmatic_edges)
      .field("n_graph_kernels", stats.n_graph_kernels)
      .end_object();
  return w.take();
}

std::string to_json(const Executor& executor) {
  using namespace detail;
  const ExecutorImpl& x = executor.impl();
  const Program& p = x.m_prog;
  JsonWriter w;
  w.begin_object()
      .field("device", x.m_device.str())
      .field("n_steps", p.steps.size())
      .field("n_live_nodes", p.order.size())
      .field("n_nodes", x.m_source.nodes.size())
      .field("n_streams", x.m_sched.n_streams)
      .field("cuda_graph", x.m_opt.run.cuda_graph && x.m_capturable)
      .key("fusion")
      .begin_array();
  for (const auto& line : p.log) w.value(line);
  w.end_array().key("steps").begin_array();
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step& s = p.steps[i];
    w.begin_object()
        .field("step", i)
        .field("node", s.root)
        .field("name", p.g.at(s.root).name)
        .field("op", node_op_string(p.g.at(s.root)))
        .field("fused", s.kind != Step::Kind::Op)
        .field("rows", s.kind == Step::Kind::Rows)
        .field("n_members", s.members.size())
        .field("stream", x.m_sched.stream[i])
        .key("waits")
        .begin_array();
    for (int d : x.m_sched.waits[i]) w.value(d);
    w.end_array().end_object();
  }
  w.end_array()
      .key("memory_plan")
      .raw(to_json(p, x.m_mem))
      .key("stats")
      .raw(to_json(x.m_stats))
      .key("warnings")
      .begin_array();
  for (const auto& warning : x.m_warnings) w.value(warning);
  w.end_array().end_object();
  return w.take();
}

}  // namespace mt
