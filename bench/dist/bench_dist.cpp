// bench_dist: bus bandwidth of all_reduce, all_gather and reduce_scatter on every visible GPU from one
// process (Communicator::local, one thread driving all GPUs through dist::Group, as nccl-tests' -t 1 -g N).
//
//   Collective/<op>/<MiB>/nccl   row 0, the baseline: the same NCCL call straight on the communicators, no
//   Tensor
//                                layer (what mt::dist costs on top of NCCL is the ratio of the two rows)
//   Collective/<op>/<MiB>/mt     mt::dist::<op> on Tensors
//
// <MiB> is the per-rank buffer: all_reduce's tensor, all_gather's input, reduce_scatter's output. fp32.
// Bus bandwidth, nccl-tests' definitions (bench/dist/DESIGN.md), n GPUs, t seconds per collective:
//   all_reduce      bytes / t * 2 (n - 1) / n
//   all_gather      n * bytes / t * (n - 1) / n
//   reduce_scatter  n * bytes / t * (n - 1) / n
// Each timed batch is `reps` collectives back to back between events on every GPU's stream; the batch's time
// is the slowest GPU's; counters report the median batch (busbw_GBps, algbw_GBps, us). Validated before
// timing. bench/dist/torch_collectives.py measures torch.distributed the same way. NCCL_NVLS_ENABLE=0 is set
// here.
#include <benchmark/benchmark.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "minitensor/dist/detail/call.h"
#include "minitensor/minitensor.h"

namespace {

using namespace mt;
constexpr std::int64_t kMiB = 1024 * 1024;

enum class Op { AllReduce, AllGather, ReduceScatter };
const char* op_name(Op op) {
  switch (op) {
    case Op::AllReduce:
      return "all_reduce";
    case Op::AllGather:
      return "all_gather";
    case Op::ReduceScatter:
      return "reduce_scatter";
  }
  return "?";
}

// The bus-bandwidth factor: bytes moved per link relative to the per-rank buffer (see the header).
double bus_bytes(Op op, double bytes, int n) {
  switch (op) {
    case Op::AllReduce:
      return bytes * 2.0 * (n - 1) / n;
    case Op::AllGather:
    case Op::ReduceScatter:
      return n * bytes * (n - 1) / n;
  }
  return 0;
}
double alg_bytes(Op op, double bytes, int n) {
  return op == Op::AllReduce ? bytes : n * bytes;
}

int n_gpus() {
  int n = cuda_device_count();
  if (const char* env = std::getenv("MT_BENCH_DIST_GPUS")) n = std::min(n, std::atoi(env));
  return n;
}

// Made once, kept for the process (benchmarks run their functions several times).
std::vector<dist::Communicator>& comms() {
  static auto* c = new std::vector<dist::Communicator>(dist::Communicator::local([] {
    std::vector<int> d;
    for (int i = 0; i < n_gpus(); ++i) d.push_back(i);
    return d;
  }()));
  return *c;
}

struct Buffers {
  std::vector<Tensor> in, out;
};

Buffers make_buffers(Op op, std::int64_t elems, int n) {
  Buffers b;
  for (int r = 0; r < n; ++r) {
    const Device d = Device::cuda(r);
    DeviceGuard guard(d);
    switch (op) {
      case Op::AllReduce:
        b.in.push_back(full({elems}, 1.0 + r, DType::F32, d));
        b.out.push_back(empty({elems}, DType::F32, d));
        break;
      case Op::AllGather:
        b.in.push_back(full({elems}, 1.0 + r, DType::F32, d));
        b.out.push_back(empty({n * elems}, DType::F32, d));
        break;
      case Op::ReduceScatter:
        b.in.push_back(full({n * elems}, 1.0 + r, DType::F32, d));
        b.out.push_back(empty({elems}, DType::F32, d));
        break;
    }
  }
  return b;
}

void launch(Op op, bool raw, Buffers& b, int n) {
  auto& cs = comms();
  dist::Group group;
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (!raw) {
      switch (op) {
        case Op::AllReduce:
          dist::all_reduce(b.in[i], b.out[i], cs[i]);
          break;
        case Op::AllGather:
          dist::all_gather(b.in[i], b.out[i], cs[i]);
          break;
        case Op::ReduceScatter:
          dist::reduce_scatter(b.in[i], b.out[i], cs[i]);
          break;
      }
      continue;
    }
    // Raw calls join the group by hand, so that Group::end waits for their nonblocking communicators too.
    auto& members = dist::detail::group_state().comms;
    if (std::find(members.begin(), members.end(), cs[i].state()) == members.end())
      members.push_back(cs[i].state());
    ncclComm_t comm = cs[i].state()->comm;
    cudaStream_t stream = current_stream(r);
    const auto count = static_cast<std::size_t>(b.out[i].numel());
    ncclResult_t result = ncclSuccess;
    switch (op) {
      case Op::AllReduce:
        result =
            ncclAllReduce(b.in[i].data_ptr(), b.out[i].data_ptr(), count, ncclFloat32, ncclSum, comm, stream);
        break;
      case Op::AllGather:
        result = ncclAllGather(b.in[i].data_ptr(), b.out[i].data_ptr(),
                               static_cast<std::size_t>(b.in[i].numel()), ncclFloat32, comm, stream);
        break;
      case Op::ReduceScatter:
        result = ncclReduceScatter(b.in[i].data_ptr(), b.out[i].data_ptr(), count, ncclFloat32, ncclSum, comm,
                                   stream);
        break;
    }
    if (result != ncclSuccess && result != ncclInProgress)
      dist::detail::fail(*cs[i].state(), result, "bench");
  }
  group.end();
}

// The expected first element of rank 0's output after one collective of make_buffers' data.
bool validate(Op op, Buffers& b, int n) {
  for (int r = 0; r < n; ++r) comms()[static_cast<std::size_t>(r)].synchronize();
  DeviceGuard guard(0);
  const std::vector<float> head = b.out[0].narrow(0, 0, 1).to_vector<float>();
  const std::vector<float> tail = b.out[0].narrow(0, b.out[0].numel() - 1, 1).to_vector<float>();
  const double sum = n * (n + 1) / 2.0;  // ranks hold 1, 2, ..., n
  switch (op) {
    case Op::AllReduce:
    case Op::ReduceScatter:
      return head[0] == sum && tail[0] == sum;
    case Op::AllGather:
      return head[0] == 1.0f && tail[0] == static_cast<float>(n);
  }
  return false;
}

void BM_Collective(benchmark::State& state, Op op, std::int64_t mib, bool raw) {
  const int n = n_gpus();
  if (n < 2) {
    state.SkipWithError(("needs 2 CUDA devices, found " + std::to_string(n)).c_str());
    return;
  }
  if (!dist::nccl_available()) {
    state.SkipWithError("minitensor was built without NCCL");
    return;
  }
  const std::int64_t bytes = mib * kMiB;
  const std::int64_t elems = bytes / 4;
  Buffers b = make_buffers(op, elems, n);
  launch(op, raw, b, n);
  if (!validate(op, b, n)) {
    state.SkipWithError("validation failed: the collective's output is wrong");
    return;
  }
  const int reps = mib >= 256 ? 5 : 20;
  for (int w = 0; w < 3; ++w) launch(op, raw, b, n);
  std::vector<Event> start, stop;
  for (int r = 0; r < n; ++r) {
    start.emplace_back(true);
    stop.emplace_back(true);
  }
  std::vector<double> batch_s;
  for (auto _ : state) {
    for (int r = 0; r < n; ++r) {
      DeviceGuard guard(r);
      start[static_cast<std::size_t>(r)].record(current_stream(r));
    }
    for (int i = 0; i < reps; ++i) launch(op, raw, b, n);
    double slowest_ms = 0;
    for (int r = 0; r < n; ++r) {
      DeviceGuard guard(r);
      stop[static_cast<std::size_t>(r)].record(current_stream(r));
    }
    for (int r = 0; r < n; ++r) {
      DeviceGuard guard(r);
      comms()[static_cast<std::size_t>(r)].synchronize();  // a bounded wait for the batch
      stop[static_cast<std::size_t>(r)].synchronize();
      slowest_ms =
          std::max(slowest_ms, static_cast<double>(Event::elapsed_ms(start[static_cast<std::size_t>(r)],
                                                                     stop[static_cast<std::size_t>(r)])));
    }
    const double per = slowest_ms * 1e-3 / reps;
    batch_s.push_back(per);
    state.SetIterationTime(per);
  }
  std::sort(batch_s.begin(), batch_s.end());
  const double t = batch_s[batch_s.size() / 2];
  state.counters["gpus"] = n;
  state.counters["us"] = t * 1e6;
  state.counters["algbw_GBps"] = alg_bytes(op, static_cast<double>(bytes), n) / t * 1e-9;
  state.counters["busbw_GBps"] = bus_bytes(op, static_cast<double>(bytes), n) / t * 1e-9;
}

void register_all() {
  for (Op op : {Op::AllReduce, Op::AllGather, Op::ReduceScatter}) {
    for (std::int64_t mib = 8; mib <= 1024; mib *= 2) {
      for (bool raw : {true, false}) {
        const std::string name = std::string("Collective/") + op_name(op) + "/" + std::to_string(mib) +
                                 "MiB/" + (raw ? "nccl" : "mt");
        benchmark::RegisterBenchmark(name.c_str(), BM_Collective, op, mib, raw)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->Iterations(10);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast stays off on the shared hosts
  std::cout << device_report() << "\nNCCL " << dist::nccl_version() << "\n";
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
