// DataParallel: one replica of a graph per GPU of this process, the batch split along dim 0.
#include "minitensor/dist/dist.h"
#include "minitensor/graph/detail/ir.h"
#include "minitensor/graph/parallel.h"
#include "minitensor/runtime/device.h"

namespace mt {
namespace detail {

struct DataParallelState {
  std::vector<int> devices;
  std::vector<Executor> replicas;
};

}  // namespace detail

DataParallel::DataParallel(const Graph& graph, const std::vector<int>& devices, ExecOptions options)
    : m_state(std::make_unique<detail::DataParallelState>()) {
  MT_CHECK(!devices.empty(), InvalidArgument, "DataParallel: needs at least one device");
  m_state->devices = devices;
  options.comm = nullptr;
  for (int device : devices) {
    options.device = Device::cuda(device);
    DeviceGuard guard(device);
    m_state->replicas.emplace_back(graph, options);
  }
  if (devices.size() == 1) return;
  // Every replica holds rank 0's parameters: one broadcast per parameter, all ranks in one group. (Within
  // one process they are copies of the same host tensor already; the broadcast is what makes replicas agree
  // whatever each device was given. GEMM weights packed at build time, TF32 modes, are not refreshed.)
  std::vector<dist::Communicator> comms = dist::Communicator::local(devices);
  const detail::GraphData& g = graph.data();
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    if (g.at(id).kind != detail::OpKind::Parameter) continue;
    dist::Group group;
    for (size_t r = 0; r < devices.size(); ++r) {
      const Tensor t = m_state->replicas[r].value(id);
      if (t.defined()) dist::broadcast(t, 0, comms[r]);
    }
    group.end();
  }
  for (size_t r = 0; r < devices.size(); ++r) synchronize(Device::cuda(devices[r]));
}

DataParallel::~DataParallel() = default;
DataParallel::DataParallel(DataParallel&&) noexcept = default;
DataParallel& DataParallel::operator=(DataParallel&&) noexcept = default;

int DataParallel::size() const {
  return static_cast<int>(m_state->replicas.size());
}

const Executor& DataParallel::replica(int i) const {
  MT_CHECK(i >= 0 && i < size(), InvalidArgument, "DataParallel::replica: ", i, " is not in [0, ", size(),
           ")");
  return m_state->replicas[static_cast<size_t>(i)];
}

TensorMap DataParallel::run(const TensorMap& inputs) {
  const int n = size();
  bool on_host = true;
  std::vector<TensorMap> outs(static_cast<size_t>(n));
  // Every replica's run is queued before any is waited for, so the GPUs compute at the same time.
  for (int r = 0; r < n; ++r) {
    const int device = m_state->devices[static_cast<size_t>(r)];
    TensorMap part;
    for (const auto& [name, t] : inputs) {
      t.check_defined("DataParallel::run");
      MT_CHECK(t.dim() >= 1 && t.size(0) % n == 0, ShapeError, "DataParallel::run: input '", name, "' ",
               t.shape(), " does not split into ", n, " equal blocks along dim 0");
      const std::int64_t b = t.size(0) / n;
      const Tensor block = t.narrow(0, r * b, b);
      on_host = on_host && t.is_cpu();
      part[name] = t.is_cpu() ? block : block.to(Device::cuda(device));
    }
    DeviceGuard guard(device);
    outs[static_cast<size_t>(r)] = m_state->replicas[static_cast<size_t>(r)].run(part);
  }
  for (int device : m_state->devices) synchronize(Device::cuda(device));
  const Device target = on_host ? Device::cpu() : Device::cuda(m_state->devices[0]);
  TensorMap result;
  for (const auto& [name, first] : outs[0]) {
    MT_CHECK(first.dim() >= 1, ShapeError, "DataParallel::run: output '", name,
             "' is a scalar, which cannot be concatenated along dim 0");
    Shape s = first.shape();
    s[0] *= n;
    Tensor all = empty(s, first.dtype(), target);
    for (int r = 0; r < n; ++r) {
      const Tensor& o = outs[static_cast<size_t>(r)].at(name);
      Tensor block = all.narrow(0, r * first.size(0), first.size(0));
      block.copy_(o);
    }
    result[name] = all;
  }
  return result;
}

}  // namespace mt
