// The public Executor: a handle over detail::ExecutorImpl (graph/executor.cpp), and Graph::compile.
#include "minitensor/graph/detail/executor_impl.h"

namespace mt {

Executor::Executor(const Graph& graph, const ExecOptions& options)
    : m_impl(std::make_unique<detail::ExecutorImpl>(graph.data(), options)) {}
Executor::~Executor() = default;
Executor::Executor(Executor&&) noexcept = default;
Executor& Executor::operator=(Executor&&) noexcept = default;

TensorMap Executor::run(const TensorMap& inputs) {
  return m_impl->run(inputs);
}
const PlanStats& Executor::plan_stats() const {
  return m_impl->m_plan_stats;
}
const ExecStats& Executor::stats() const {
  return m_impl->m_stats;
}
std::string Executor::summary() const {
  return m_impl->summary();
}
const std::vector<std::string>& Executor::warnings() const {
  return m_impl->m_warnings;
}
Device Executor::device() const {
  return m_impl->m_device;
}
int Executor::n_launches() const {
  return static_cast<int>(m_impl->m_prog.steps.size());
}
Tensor Executor::value(int node_id) const {
  const auto& impl = *m_impl;
  if (impl.m_device.is_cpu() || node_id < 0 || node_id >= static_cast<int>(impl.m_static.size()))
    return Tensor();
  const int step = impl.m_prog.step_of[static_cast<size_t>(node_id)];
  if (step >= 0 && impl.m_prog.steps[static_cast<size_t>(step)].root != node_id)
    return Tensor();  // fused away
  if (!impl.m_prog.live[static_cast<size_t>(node_id)]) return Tensor();
  return impl.node_tensor(node_id);
}
int Executor::root_of(int node_id) const {
  const auto& impl = *m_impl;
  if (impl.m_device.is_cpu() || node_id < 0 || node_id >= static_cast<int>(impl.m_prog.step_of.size()))
    return -1;
  const int step = impl.m_prog.step_of[static_cast<size_t>(node_id)];
  return step < 0 ? -1 : impl.m_prog.steps[static_cast<size_t>(step)].root;
}
const std::vector<NodeTiming>& Executor::last_profile() const {
  return m_impl->m_profile;
}
std::string Executor::profile_table() const {
  return m_impl->profile_table();
}
void Executor::write_trace(const std::string& path) const {
  m_impl->write_trace(path);
}

Executor Graph::compile(const ExecOptions& options) const {
  return Executor(*this, options);
}
Executor Graph::compile() const {
  return Executor(*this, ExecOptions{});
}

}  // namespace mt
