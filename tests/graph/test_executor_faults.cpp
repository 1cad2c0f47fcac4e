// Executor fault safety and threads: a run that fails part-way (a launch error, an out-of-memory) leaves the
// executor usable and the next run bit-exact; destroying it after a failure is clean; runs from several
// threads on one executor are serialised and correct. The faults come from the test-only hook in
// graph/detail/executor_impl.h.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "minitensor/graph/detail/executor_impl.h"
#include "minitensor/graph/graph.h"
#include "minitensor/ops/ops.h"
#include "minitensor/runtime/stream.h"
#include "tests/common/gpu.h"

namespace mt {
namespace {

using detail::ExecutorFaultHook;
using Kind = ExecutorFaultHook::Kind;
using Values = std::map<std::string, std::vector<float>>;

// Sets the process-wide fault hook for its lifetime.
class FaultAt {
 public:
  FaultAt(int step, Kind kind) { detail::set_executor_fault_hook({step, kind}); }
  ~FaultAt() { detail::clear_executor_fault_hook(); }
  FaultAt(const FaultAt&) = delete;
  FaultAt& operator=(const FaultAt&) = delete;
};

Tensor uniform(const Shape& s, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<float> v = rand(s, seed).to_vector<float>();
  for (float& f : v) f = static_cast<float>(lo + (hi - lo) * f);
  return from_vector(v, s);
}

// The outputs on the host (a copy: the executor's buffers are overwritten by the next run).
Values values_of(const TensorMap& out) {
  Values v;
  for (const auto& [name, t] : out) v[name] = t.cpu().contiguous().to_vector<float>();
  return v;
}

// Bit for bit (NaNs included).
::testing::AssertionResult same_bits(const Values& got, const Values& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "different outputs";
  for (const auto& [name, w] : want) {
    const auto it = got.find(name);
    if (it == got.end()) return ::testing::AssertionFailure() << "no output " << name;
    if (it->second.size() != w.size() ||
        std::memcmp(it->second.data(), w.data(), w.size() * sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "output " << name << " differs";
  }
  return ::testing::AssertionSuccess();
}

// Independent branches (each its own stream): a GEMM with a fused epilogue, a GEMM and a softmax, a fused
// elementwise tree over a host input (staged through the copy stream); joined at the end.
Graph branchy_graph() {
  Graph g;
  auto x = g.input("x", {32, 64});
  auto h = g.input("h", {32, 64});
  auto a = g.relu(g.matmul(x, g.parameter("w1", uniform({64, 64}, 21, -0.2, 0.2))) +
                  g.parameter("b1", uniform({64}, 22, -0.1, 0.1)));
  auto b = g.softmax(g.matmul(x, g.parameter("w2", uniform({64, 64}, 23, -0.2, 0.2))), -1);
  auto c = g.tanh(x * h) * 2.0 + 1.0;
  g.output("y", a * b + c);
  g.output("s", g.sum(c, 1));
  return g;
}

// A reduction over non-consecutive axes runs the eager op, which allocates at every run (not capturable).
Graph fallback_reduce_graph() {
  Graph g;
  auto x = g.input("x", {4, 8, 16});
  g.output("r", g.reduce(ReduceOp::Sum, g.relu(x), {0, 2}));
  g.output("m", g.max(g.sigmoid(x) * 3.0, 1));
  return g;
}

ExecOptions gpu_options(bool cuda_graph) {
  ExecOptions o;
  o.device = Device::cuda(0);
  o.run.cuda_graph = cuda_graph;
  return o;
}

void expect_fault_type(Kind kind, const std::function<void()>& run) {
  if (kind == Kind::OutOfMemory) {
    EXPECT_THROW(run(), OutOfMemoryError);
  } else {
    EXPECT_THROW(run(), CudaError);
  }
}

void expect_stream_clean() {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  EXPECT_EQ(cudaStreamIsCapturing(current_stream(0), &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone) << "the origin stream was left capturing";
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

// For k over every step: the run with a fault at k throws the typed error; the next run without it equals the
// fault-free reference bit for bit. With CUDA graphs on, each faulty run gets a new input pointer so that it
// captures (a replay launches no step), and the run after it captures again.
void every_step_then_bit_exact(const Graph& g, const std::function<TensorMap(int)>& inputs, bool cuda_graph,
                               Kind kind, bool expect_streams) {
  Executor ref_exec(g, gpu_options(cuda_graph));
  const Values ref = values_of(ref_exec.run(inputs(0)));
  Executor e(g, gpu_options(cuda_graph));
  if (expect_streams) {
    EXPECT_GT(e.impl().m_sched.n_streams, 1) << e.summary();
  }
  EXPECT_TRUE(same_bits(values_of(e.run(inputs(0))), ref));  // the plain warm-up run
  const int n_steps = e.n_launches();
  ASSERT_GT(n_steps, 1);
  for (int k = 0; k < n_steps; ++k) {
    SCOPED_TRACE(::testing::Message() << "fault at step " << k << " of " << n_steps);
    {
      FaultAt fault(k, kind);
      expect_fault_type(kind, [&] { e.run(inputs(2 * k + 1)); });
    }
    expect_stream_clean();
    EXPECT_TRUE(same_bits(values_of(e.run(inputs(2 * k + 2))), ref));
  }
  // The same pointers twice: the second is a replay when CUDA graphs are on.
  const TensorMap last = inputs(2 * n_steps + 1);
  EXPECT_TRUE(same_bits(values_of(e.run(last)), ref));
  const int replays = e.stats().n_replays;
  EXPECT_TRUE(same_bits(values_of(e.run(last)), ref));
  if (cuda_graph && e.impl().m_capturable) {
    EXPECT_EQ(e.stats().n_replays, replays + 1);
  }
  // A fault past the last step never fires.
  {
    FaultAt fault(n_steps, kind);
    EXPECT_TRUE(same_bits(values_of(e.run(inputs(0))), ref));
  }
}

// Inputs with the same values at new device addresses (kept alive, so an address is never handed out twice).
std::function<TensorMap(int)> branchy_inputs(std::vector<Tensor>& keep) {
  const Tensor x = uniform({32, 64}, 5), h = uniform({32, 64}, 6);
  return [&keep, x, h](int) {
    keep.push_back(x.cuda());
    return TensorMap{{"x", keep.back()}, {"h", h}};  // h: a host input, staged
  };
}

TEST(ExecutorFaults, Cuda_EveryStep_LaunchError_ThenBitExact_Plain) {
  MT_REQUIRE_GPU();
  std::vector<Tensor> keep;
  every_step_then_bit_exact(branchy_graph(), branchy_inputs(keep), false, Kind::LaunchError, true);
}

TEST(ExecutorFaults, Cuda_EveryStep_LaunchError_ThenBitExact_CudaGraph) {
  MT_REQUIRE_GPU();
  std::vector<Tensor> keep;
  every_step_then_bit_exact(branchy_graph(), branchy_inputs(keep), true, Kind::LaunchError, true);
}

TEST(ExecutorFaults, Cuda_EveryStep_OutOfMemory_ThenBitExact_CudaGraph) {
  MT_REQUIRE_GPU();
  std::vector<Tensor> keep;
  every_step_then_bit_exact(branchy_graph(), branchy_inputs(keep), true, Kind::OutOfMemory, true);
}

TEST(ExecutorFaults, Cuda_EveryStep_OutOfMemory_FallbackReduce) {
  MT_REQUIRE_GPU();
  const Tensor x = uniform({4, 8, 16}, 7).cuda();
  for (bool cuda_graph : {false, true}) {
    SCOPED_TRACE(cuda_graph ? "cuda_graph on" : "cuda_graph off");
    every_step_then_bit_exact(
        fallback_reduce_graph(),
        [&](int) {
          return TensorMap{{"x", x}};
        },
        cuda_graph, Kind::OutOfMemory, false);
  }
}

TEST(ExecutorFaults, Cuda_DestroyAfterFaultIsClean) {
  MT_REQUIRE_GPU();
  const Graph g = branchy_graph();
  std::vector<Tensor> keep;
  const auto inputs = branchy_inputs(keep);
  const Values ref = values_of(Executor(g, gpu_options(false)).run(inputs(0)));
  const int n_steps = Executor(g, gpu_options(false)).n_launches();
  for (bool cuda_graph : {false, true}) {
    for (int k = 0; k < n_steps; ++k) {
      SCOPED_TRACE(::testing::Message() << "fault at step " << k << (cuda_graph ? ", cuda_graph on" : ""));
      {
        Executor e(g, gpu_options(cuda_graph));
        e.run(inputs(0));
        FaultAt fault(k, Kind::LaunchError);
        EXPECT_THROW(e.run(inputs(1)), CudaError);  // with cuda_graph: fails while capturing
      }                                             // destroyed with the failed run's work maybe still queued
      expect_stream_clean();
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_TRUE(same_bits(values_of(Executor(g, gpu_options(cuda_graph)).run(inputs(2))), ref));
    }
  }
}

TEST(ExecutorFaults, Cuda_HostPipelineFaultAtEveryChunkThenBitExact) {
  MT_REQUIRE_GPU();
  const std::int64_t n = std::int64_t(1) << 20;
  Graph g;
  auto a = g.input("a", {n});
  auto b = g.input("b", {n});
  g.output("y", g.sigmoid(a * b + 0.5));
  ExecOptions o = gpu_options(false);
  o.run.pipeline_chunk = std::int64_t(1) << 17;
  const TensorMap in = {{"a", uniform({n}, 31)}, {"b", uniform({n}, 32)}};  // host: pipelined
  Executor e(g, o);
  ASSERT_TRUE(e.impl().pipeline_eligible());
  const Values ref = values_of(e.run(in));
  ASSERT_EQ(e.stats().n_pipelined_runs, 1);
  const int n_chunks = static_cast<int>(detail::pipeline_pieces(n, o.run.pipeline_chunk).size());
  for (int k = 0; k < n_chunks; ++k) {
    SCOPED_TRACE(::testing::Message() << "fault at chunk " << k << " of " << n_chunks);
    {
      FaultAt fault(k, Kind::LaunchError);
      EXPECT_THROW(e.run(in), CudaError);
    }
    expect_stream_clean();
    EXPECT_TRUE(same_bits(values_of(e.run(in)), ref));
  }
}

// A run on another stream waits for the last run (they share the arena and the outputs).
TEST(ExecutorFaults, Cuda_RunsOnTwoStreamsAreOrdered) {
  MT_REQUIRE_GPU();
  const Graph g = branchy_graph();
  const Tensor h = uniform({32, 64}, 6);
  const Tensor x1 = uniform({32, 64}, 41).cuda(), x2 = uniform({32, 64}, 42).cuda();
  Executor ref_exec(g, gpu_options(false));
  const Values ref1 = values_of(ref_exec.run({{"x", x1}, {"h", h}}));
  const Values ref2 = values_of(ref_exec.run({{"x", x2}, {"h", h}}));
  for (bool cuda_graph : {false, true}) {
    Executor e(g, gpu_options(cuda_graph));
    Stream s1(0), s2(0);
    for (int rep = 0; rep < 4; ++rep) {
      {
        StreamGuard guard(s1, 0);
        e.run({{"x", x1}, {"h", h}});  // not waited for on the host
      }
      StreamGuard guard(s2, 0);
      const TensorMap out = e.run({{"x", x2}, {"h", h}});
      EXPECT_TRUE(same_bits(values_of(out), ref2)) << "rep " << rep;
    }
    StreamGuard guard(s1, 0);
    EXPECT_TRUE(same_bits(values_of(e.run({{"x", x1}, {"h", h}})), ref1));
  }
}

// ---------------------------------------------------------------- threads

// Runs of one executor from 8 threads: serialised, each result correct.
TEST(ExecutorThreads, Cuda_EightThreadsShareOneExecutor) {
  MT_REQUIRE_GPU();
  const Graph g = branchy_graph();
  const TensorMap in = {{"x", uniform({32, 64}, 5).cuda()}, {"h", uniform({32, 64}, 6)}};
  for (bool cuda_graph : {false, true}) {
    Executor e(g, gpu_options(cuda_graph));
    const Values ref = values_of(Executor(g, gpu_options(false)).run(in));
    constexpr int kThreads = 8, kRuns = 10;
    std::vector<int> ok(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        // Every thread's runs go on the shared default stream; all use the same inputs, so whichever run
        // wrote the outputs last, they hold the reference.
        for (int r = 0; r < kRuns; ++r)
          ok[static_cast<size_t>(t)] += static_cast<bool>(same_bits(values_of(e.run(in)), ref)) ? 1 : 0;
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(ok[static_cast<size_t>(t)], kRuns) << "thread " << t;
    EXPECT_EQ(e.stats().n_runs, kThreads * kRuns);
  }
}

// A capture does not hold the caller's stream: another thread keeps copying from it and synchronising it
// while one executor re-captures at every run (its input alternates between two tensors). Captured on the
// caller's stream, the other thread's synchronisation fails (the stream is capturing) and the capture is
// invalidated.
TEST(ExecutorThreads, Cuda_CaptureLeavesTheCallersStreamFree) {
  MT_REQUIRE_GPU();
  const Graph g = branchy_graph();
  const Tensor h = uniform({32, 64}, 6);
  const Tensor x[2] = {uniform({32, 64}, 5).cuda(), uniform({32, 64}, 7).cuda()};
  Executor plain(g, gpu_options(false));
  const Values ref[2] = {values_of(plain.run({{"x", x[0]}, {"h", h}})),
                         values_of(plain.run({{"x", x[1]}, {"h", h}}))};
  Executor e(g, gpu_options(true));
  const Tensor t = uniform({256, 256}, 8).cuda();
  std::atomic<bool> done{false};
  std::string other_error;
  int other_rounds = 0;
  std::thread other([&] {
    try {
      for (; !done.load() || other_rounds < 10; ++other_rounds) {
        (void)t.cpu();  // a copy on the default stream, then its synchronisation
        synchronize_stream(current_stream(0));
      }
    } catch (const std::exception& err) {
      other_error = err.what();
    }
  });
  constexpr int kRuns = 200;
  int ok = 0;
  for (int r = 0; r < kRuns; ++r)
    ok += same_bits(values_of(e.run({{"x", x[r % 2]}, {"h", h}})), ref[r % 2]) ? 1 : 0;
  done = true;
  other.join();
  EXPECT_EQ(ok, kRuns);
  EXPECT_EQ(other_error, "");
  EXPECT_EQ(e.stats().n_runs, kRuns);
  EXPECT_EQ(e.stats().n_replays, 0);
  EXPECT_EQ(e.stats().n_captures + e.stats().n_graph_updates, kRuns - 1);  // the first run is plain
}

ExecOptions cpu_options() {
  ExecOptions o;
  o.device = Device::cpu();
  return o;
}

TEST(ExecutorThreads, CpuEightThreadsShareOneExecutor) {
  const Graph g = branchy_graph();
  Executor e(g, cpu_options());
  constexpr int kThreads = 8, kRuns = 25;
  std::vector<TensorMap> inputs;
  std::vector<Values> refs;
  for (int t = 0; t < kThreads; ++t) {
    inputs.push_back({{"x", uniform({32, 64}, 100 + t)}, {"h", uniform({32, 64}, 200 + t)}});
    refs.push_back(values_of(run_cpu(g, inputs.back())));
  }
  std::vector<int> ok(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const auto i = static_cast<size_t>(t);
      for (int r = 0; r < kRuns; ++r)
        ok[i] += static_cast<bool>(same_bits(values_of(e.run(inputs[i])), refs[i])) ? 1 : 0;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(ok[static_cast<size_t>(t)], kRuns) << "thread " << t;
  EXPECT_EQ(e.stats().n_runs, kThreads * kRuns);
  EXPECT_EQ(e.stats().n_plain_runs, kThreads * kRuns);
}

// ---------------------------------------------------------------- CPU executor

void cpu_every_node_then_bit_exact(const Graph& g, const TensorMap& in) {
  Executor e(g, cpu_options());
  const Values ref = values_of(e.run(in));
  int n_computed = 0;  // nodes the CPU executor evaluates: all but inputs, parameters and constants
  for (const auto& n : g.data().nodes) n_computed += n.is_leaf() ? 0 : 1;
  ASSERT_GT(n_computed, 1);
  for (Kind kind : {Kind::LaunchError, Kind::OutOfMemory}) {
    for (int k = 0; k < n_computed; ++k) {
      SCOPED_TRACE(::testing::Message() << "fault at node " << k << " of " << n_computed);
      {
        FaultAt fault(k, kind);
        expect_fault_type(kind, [&] { e.run(in); });
      }
      EXPECT_TRUE(same_bits(values_of(e.run(in)), ref));
    }
  }
  FaultAt past(n_computed, Kind::LaunchError);
  EXPECT_TRUE(same_bits(values_of(e.run(in)), ref));
  EXPECT_EQ(e.stats().n_runs, 2 + 2 * n_computed);  // failed runs are not counted
}

TEST(ExecutorFaults, CpuEveryNode_ThenBitExact) {
  cpu_every_node_then_bit_exact(branchy_graph(), {{"x", uniform({32, 64}, 5)}, {"h", uniform({32, 64}, 6)}});
  cpu_every_node_then_bit_exact(fallback_reduce_graph(), {{"x", uniform({4, 8, 16}, 7)}});
}

}  // namespace
}  // namespace mt
