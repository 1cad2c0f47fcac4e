// Profiling: per-step device times from CUDA events, a summary table and a Chrome trace (Perfetto).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "minitensor/graph/detail/executor_impl.h"
#include "minitensor/runtime/detail/json.h"
#include "minitensor/runtime/stream.h"

namespace mt::detail {

void ExecutorImpl::collect_profile(cudaStream_t origin) {
  synchronize_stream(origin);  // profiling reads the events: the run must be done
  m_profile.clear();
  m_trace.clear();
  for (size_t i = 0; i < m_prog.steps.size(); ++i) {
    const Step& s = m_prog.steps[i];
    NodeTiming t;
    t.label = m_prog.g.label(s.root);
    t.op = node_op_string(m_prog.g.at(s.root));
    if (s.kind == Step::Kind::Fused) t.op = str("fused[", s.members.size(), "] ", t.op);
    if (s.kind == Step::Kind::Rows) t.op = str("rows[", s.members.size(), "] ", t.op);
    t.stream = m_sched.stream[i];
    t.start_us = 1000.0 * Event::elapsed_ms(m_prof_base, m_prof_start[i]);
    t.duration_us = 1000.0 * Event::elapsed_ms(m_prof_start[i], m_prof_end[i]);
    m_trace.push_back({t.label + " " + t.op, t.op, str("stream ", t.stream), t.start_us, t.duration_us});
    m_profile.push_back(std::move(t));
  }
  for (auto& [id, ev] : m_copy_events) {
    const double start = 1000.0 * Event::elapsed_ms(m_prof_base, ev.first);
    const double dur = 1000.0 * Event::elapsed_ms(ev.first, ev.second);
    m_trace.push_back({str("H2D ", m_prog.g.label(id)), "copy", "copy H2D", start, dur});
  }
}

std::string ExecutorImpl::profile_table() const {
  std::ostringstream os;
  if (m_profile.empty()) return "no profile (run with RunOptions::profile = true)\n";
  double total = 0, first = 1e300, last = 0;
  for (const auto& t : m_profile) {
    total += t.duration_us;
    first = std::min(first, t.start_us);
    last = std::max(last, t.start_us + t.duration_us);
  }
  char line[256];
  std::snprintf(line, sizeof line, "%-5s %-22s %-34s %6s %10s %10s %6s\n", "step", "node", "op", "stream",
                "start us", "time us", "%");
  os << line;
  for (size_t i = 0; i < m_profile.size(); ++i) {
    const auto& t = m_profile[i];
    std::snprintf(line, sizeof line, "%-5zu %-22.22s %-34.34s %6d %10.2f %10.2f %6.1f\n", i, t.label.c_str(),
                  t.op.c_str(), t.stream, t.start_us, t.duration_us,
                  total > 0 ? 100.0 * t.duration_us / total : 0.0);
    os << line;
  }
  std::snprintf(line, sizeof line, "sum of step times %.2f us; first start to last end %.2f us\n", total,
                last - first);
  os << line;
  return os.str();
}

std::string chrome_trace_json(const std::vector<TraceEvent>& events, const std::string& process_name) {
  double t0 = 0;
  for (const auto& e : events) t0 = std::min(t0, e.ts_us);
  std::map<std::string, int> tracks;
  for (const auto& e : events) tracks.emplace(e.track, 0);
  int tid = 0;
  for (auto& [name, id] : tracks) id = tid++;
  // One event a line, so that a trace can also be read (and diffed) as text.
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":";
  json_append_string(out, process_name);
  out += "}}";
  for (const auto& [name, id] : tracks) {
    out += str(",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":", id, ",\"args\":{\"name\":");
    json_append_string(out, name);
    out += "}}";
  }
  for (const auto& e : events) {
    out += ",\n{\"name\":";
    json_append_string(out, e.name);
    out += ",\"cat\":";
    json_append_string(out, e.cat);
    char num[96];
    std::snprintf(num, sizeof num, "\"ts\":%.3f,\"dur\":%.3f", e.ts_us - t0, e.dur_us);
    out += str(",\"ph\":\"X\",\"pid\":0,\"tid\":", tracks.at(e.track), ",", num, "}");
  }
  out += "\n]}\n";
  return out;
}

void ExecutorImpl::write_trace(const std::string& path) const {
  std::ofstream f(path);
  MT_CHECK(f.good(), InvalidArgument, "write_trace: cannot open '", path, "' for writing");
  f << chrome_trace_json(m_trace, "minitensor " + m_device.str());
}

}  // namespace mt::detail

namespace mt {

std::string to_json(const std::vector<NodeTiming>& profile) {
  detail::JsonWriter w;
  w.begin_object().key("steps").begin_array();
  for (size_t i = 0; i < profile.size(); ++i) {
    const NodeTiming& t = profile[i];
    w.begin_object()
        .field("step", i)
        .field("label", t.label)
        .field("op", t.op)
        .field("stream", t.stream)
        .field("start_us", t.start_us)
        .field("duration_us", t.duration_us)
        .end_object();
  }
  w.end_array().end_object();
  return w.take();
}

}  // namespace mt
