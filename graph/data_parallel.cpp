// DataParallel: one replica of a graph per GPU of this process, the batch split along dim 0.
#include <map>
#include <string>

#include "minitensor/dist/dist.h"
#include "minitensor/graph/detail/ir.h"
#include "minitensor/graph/parallel.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/event.h"
#include "minitensor/runtime/stream.h"

namespace mt {
namespace detail {

struct DataParallelState {
  std::vector<int> devices;
  std::vector<Executor> replicas;
  // Each replica's copy of its input blocks, kept across runs: the same addresses every run, so a replica
  // that runs as a CUDA graph replays it instead of capturing again.
  std::vector<std::map<std::string, Tensor>> staged;
};

}  // namespace detail

DataParallel::DataParallel(const Graph& graph, const std::vector<int>& devices, ExecOptions options)
    : m_state(std::make_unique<detail::DataParallelState>()) {
  MT_CHECK(!devices.empty(), InvalidArgument, "DataParallel: needs at least one device");
  m_state->devices = devices;
  m_state->staged.resize(devices.size());
  options.comm = nullptr;
  for (int device : devices) {
    options.device = Device::cuda(device);
    DeviceGuard guard(device);
    m_state->replicas.emplace_back(graph, options);
  }
  if (devices.size() == 1) return;
  // Direct copies between the replicas' GPUs (the inputs out of the first and the outputs back into it):
  // peer access where the GPUs offer it, as every copy-heavy multi-GPU runtime enables it.
  for (int a : devices) {
    DeviceGuard guard(a);
    for (int b : devices) {
      int can = 0;
      if (a == b || cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can) continue;
      const cudaError_t result = cudaDeviceEnablePeerAccess(b, 0);
      if (result == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
      } else {
        MT_CUDA_CHECK(result);
      }
    }
  }
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

namespace {

// Copies the contiguous `src` into the contiguous `dst` (on another GPU) on `stream` of `device` (either
// one's), once `ready` is reached: no host wait, so the copies to the replicas and back overlap the
// replicas' compute (Tensor::copy_ across GPUs waits on the host, which would run the replicas one after
// another). The caller keeps both alive until `stream` is done.
void queue_peer_copy(const Tensor& dst, const Tensor& src, const Event& ready, int device,
                     cudaStream_t stream) {
  DeviceGuard guard(device);
  ready.wait(stream);
  MT_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), dst.device().index(), src.data_ptr(),
                                    src.device().index(), src.nbytes(), stream));
}

}  // namespace

TensorMap DataParallel::run(const TensorMap& inputs) {
  const int n = size();
  bool on_host = true;
  // Where the inputs stand now on each GPU that holds one, before any replica is queued there.
  std::map<int, Event> inputs_ready;
  for (const auto& [name, t] : inputs) {
    t.check_defined("DataParallel::run");
    MT_CHECK(t.dim() >= 1 && t.size(0) % n == 0, ShapeError, "DataParallel::run: input '", name, "' ",
             t.shape(), " does not split into ", n, " equal blocks along dim 0");
    on_host = on_host && t.is_cpu();
    if (t.is_cuda() && !inputs_ready.count(t.device().index())) {
      const int device = t.device().index();
      DeviceGuard guard(device);
      inputs_ready[device].record(current_stream(device));
    }
  }
  // Every replica's input copies and run are queued before any is waited for, so the GPUs compute at the
  // same time; a replica's copies are queued on its stream, before its run.
  std::vector<TensorMap> outs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const int device = m_state->devices[static_cast<size_t>(r)];
    DeviceGuard guard(device);
    TensorMap part;
    for (const auto& [name, t] : inputs) {
      const std::int64_t b = t.size(0) / n;
      const Tensor block = t.narrow(0, r * b, b);
      if (t.is_cpu() || t.device() == Device::cuda(device)) {
        part[name] = block;  // the executor uploads a host input itself
      } else if (block.is_contiguous()) {
        Tensor& copy = m_state->staged[static_cast<size_t>(r)][name];
        if (!copy.defined() || copy.shape() != block.shape() || copy.dtype() != block.dtype())
          copy = empty(block.shape(), block.dtype(), Device::cuda(device));
        // Written on the replica's stream, after its previous run has read it.
        queue_peer_copy(copy, block, inputs_ready.at(t.device().index()), device, current_stream(device));
        part[name] = copy;
      } else {
        part[name] = block.to(Device::cuda(device));
      }
    }
    outs[static_cast<size_t>(r)] = m_state->replicas[static_cast<size_t>(r)].run(part);
  }
  const Device target = on_host ? Device::cpu() : Device::cuda(m_state->devices[0]);
  TensorMap result;
  for (const auto& [name, first] : outs[0]) {
    MT_CHECK(first.dim() >= 1, ShapeError, "DataParallel::run: output '", name,
             "' is a scalar, which cannot be concatenated along dim 0");
    Shape s = first.shape();
    s[0] *= n;
    result[name] = empty(s, first.dtype(), target);
  }
  // The outputs come back to the first device the same way, each on its replica's stream behind its run,
  // and behind what the first device's stream had queued when the outputs were allocated there (the
  // allocator's reuse of their memory is ordered on that stream only).
  const auto queued_back = [&](const Tensor& o, const Tensor& all) {
    return !on_host && o.device() != all.device() && o.is_contiguous();
  };
  Event target_ready;
  if (!on_host) {
    DeviceGuard guard(target.index());
    target_ready.record(current_stream(target.index()));
  }
  for (int r = 0; r < n; ++r) {
    const int device = m_state->devices[static_cast<size_t>(r)];
    for (const auto& [name, all] : result) {
      const Tensor& o = outs[static_cast<size_t>(r)].at(name);
      if (!queued_back(o, all)) continue;
      DeviceGuard guard(device);
      queue_peer_copy(all.narrow(0, r * o.size(0), o.size(0)), o, target_ready, device,
                      current_stream(device));
    }
  }
  for (int device : m_state->devices) synchronize(Device::cuda(device));
  for (int r = 0; r < n; ++r) {
    for (const auto& [name, all] : result) {
      const Tensor& o = outs[static_cast<size_t>(r)].at(name);
      if (queued_back(o, all)) continue;
      Tensor block = all.narrow(0, r * o.size(0), o.size(0));
      block.copy_(o);
    }
  }
  return result;
}

}  // namespace mt
