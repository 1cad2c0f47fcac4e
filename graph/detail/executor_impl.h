// The executor's state, shared by executor.cpp (compile, run, CUDA graphs), pipeline.cpp (chunked host
// pipeline) and profile.cpp (timings, trace).
//
// Thread safety (the contract graph.h states for users):
// - Executor: run() may be called from several threads at once; the runs of one executor are serialised by a
//   mutex (the second waits until the first has queued its work, not until the work is done). A run on
//   another current stream than the last one first waits (on the device) for the last run, so runs never
//   overlap on the arena. The outputs are the executor's own buffers, overwritten by the next run, whichever
//   thread makes it: to keep a run's outputs while other threads run, clone them under your own lock, or give
//   each thread its own executor. The readers (stats, plan_stats, summary, warnings, value, last_profile,
//   profile_table, write_trace) must not overlap a run on another thread; moving or destroying an executor
//   must not overlap any other call on it.
// - Graph: building (adding nodes, output, named) is not thread-safe: one thread at a time per graph. A graph
//   nobody modifies may be compiled, dumped, checked or run_cpu'd from several threads at once.
// - Eager ops: callable from several threads at once. Each thread queues work on its own current stream
//   (current_stream(device): default_stream(device), shared by all threads, unless a StreamGuard says
//   otherwise); across streams the caller orders work with events. A Tensor may be read by several threads;
//   writing its memory (copy_, an out= argument, fill) while another thread reads or writes it is a race.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "minitensor/graph/detail/codegen.h"
#include "minitensor/graph/detail/internal.h"
#include "minitensor/graph/detail/program.h"
#include "minitensor/runtime/event.h"
#include "minitensor/runtime/stream.h"

namespace mt::detail {

// Owns a CUDA graph and its executable instance.
class CudaGraphExec {
 public:
  CudaGraphExec() = default;
  ~CudaGraphExec() { reset(); }
  CudaGraphExec(const CudaGraphExec&) = delete;
  CudaGraphExec& operator=(const CudaGraphExec&) = delete;
  void reset() noexcept;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

// Runs `f` when the scope is left by an exception, never otherwise; `f` must not throw.
template <class F>
class OnUnwind {
 public:
  explicit OnUnwind(F f) : m_f(std::move(f)) {}
  ~OnUnwind() {
    if (std::uncaught_exceptions() > m_n) m_f();
  }
  OnUnwind(const OnUnwind&) = delete;
  OnUnwind& operator=(const OnUnwind&) = delete;

 private:
  F m_f;
  int m_n = std::uncaught_exceptions();
};

// Test-only fault injection (tests/graph/test_executor_faults.cpp): every executor's runs fail at one point,
// as a launch error or an out-of-memory there would, until the hook is cleared. Process-wide; never set
// outside tests.
struct ExecutorFaultHook {
  enum class Kind : std::uint8_t { LaunchError, OutOfMemory };
  // Throw just before this point of a run, -1: off. The GPU path counts program steps (after the side
  // streams are forked, also while capturing a CUDA graph; a replay runs no step); the host pipeline counts
  // chunks; the CPU executor counts the nodes it computes, in id order.
  int step = -1;
  Kind kind = Kind::LaunchError;
};
void set_executor_fault_hook(const ExecutorFaultHook& hook);
inline void clear_executor_fault_hook() {
  set_executor_fault_hook(ExecutorFaultHook{});
}
// The step the hook fails at (-1: none): one relaxed load when no hook is set.
int executor_fault_step();
// Throws the hook's error for `step` of `where` (a CudaError or an OutOfMemoryError).
[[noreturn]] void throw_executor_fault(const char* where, int step, int device);

struct TraceEvent {
  std::string name, cat;
  std::string track;  // "stream 0", "copy", ...
  double ts_us = 0, dur_us = 0;
};
// The Chrome trace (Perfetto, chrome://tracing) of `events`: one track per distinct event track, times
// shifted so that none is negative. Every string goes through the library's JSON escaping.
std::string chrome_trace_json(const std::vector<TraceEvent>& events, const std::string& process_name);

// TF32 modes with CompileOptions::pack_weights: per step, its GEMM's constant B (a 2-D parameter or constant,
// `statics` holding the leaves on the device) packed once (graph/weights.cpp); null where nothing is packed.
std::vector<std::shared_ptr<const PackedOperand>> pack_weights(const Program& prog,
                                                               const std::vector<Tensor>& statics,
                                                               const CompileOptions& options);

class ExecutorImpl {
 public:
  ExecutorImpl(const GraphData& graph, const ExecOptions& options);
  ~ExecutorImpl();

  TensorMap run(const TensorMap& inputs);  // serialised by m_run_mutex
  TensorMap run_device(const TensorMap& inputs);
  TensorMap run_cpu_path(const TensorMap& inputs);
  TensorMap run_pipeline(const std::vector<Tensor>& bound);
  bool pipeline_eligible() const { return m_pipeline_ok; }

  // Launches every step from `origin`, the side streams being pool streams, or with `capture` the executor's
  // own capture streams (origin = m_capture_streams[0]).
  void launch_all(cudaStream_t origin, bool timed, bool capture = false);
  // Brings every stream this run forked (m_forked) back into `origin` and marks the run's end there, so the
  // next run and the destructor see the half-done work of a run that failed. Never throws.
  void join_forked(cudaStream_t origin) noexcept;
  // Marks the memory shared across streams (arena, outputs, staging, device leaves) as used on `stream` (the
  // allocator's record_stream), once per stream: so it is never reused before that stream's work is done.
  void note_stream(cudaStream_t stream);
  void note_buffer(const std::shared_ptr<Storage>& storage);  // a new shared buffer: every stream seen so far
  void count_graph(cudaGraph_t g);                            // into m_stats after a capture
  void launch_step(int i, cudaStream_t stream);
  Tensor node_tensor(int id) const;
  std::string summary() const;
  std::string profile_table() const;
  void write_trace(const std::string& path) const;
  void collect_profile(cudaStream_t origin);

  GraphData m_source;  // the graph as built (for the CPU path)
  ExecOptions m_opt;
  Device m_device;
  Program m_prog;
  MemoryPlan m_mem;
  Schedule m_sched;
  std::vector<std::shared_ptr<FusedKernel>> m_kernels;  // per step (Fused steps only)
  std::vector<bool> m_eager_step;  // per step: runs its eager op, which allocates (not capturable)
  bool m_capturable = true;
  bool m_pipeline_ok = false;

  std::shared_ptr<Storage> m_arena, m_persistent;
  std::vector<Tensor> m_static;  // per node: leaves (on device), arena and persistent views
  std::vector<std::shared_ptr<const PackedOperand>> m_packed_b;  // per step: its GEMM's packed constant B
  std::vector<Tensor> m_bound;           // per node: this run's input tensors (device), and their views
  std::vector<Tensor> m_staging_device;  // per input node: device copy of a host or strided input
  std::vector<Tensor> m_staging_host;    // per input node: pinned copy of an unpinned host input
  std::vector<Event> m_staging_done;     // per input node: its H2D copy finished
  Event m_copy_ready;                    // all input copies of this run done (copy stream)
  Event m_run_done;                      // origin: the last run's work (staging buffers free again)

  std::vector<Event> m_step_done;  // per step (cross-stream edges)
  Event m_fork;
  std::vector<Event> m_join;
  std::vector<cudaStream_t> m_streams;  // this run's streams; [0] = origin

  // CUDA graph
  CudaGraphExec m_graph;
  // The streams a capture runs on, the executor's own (made at its first capture): a capture puts its streams
  // in capture mode, and a caller's stream or a pool stream may meanwhile take work or a synchronisation from
  // another thread. They also keep the captured launches' stream scratch (memory/stream_scratch.h) apart
  // from every other graph's.
  std::vector<Stream> m_capture_streams;
  std::vector<const void*> m_graph_key;  // input pointers the captured graph reads
  bool m_graph_valid = false;
  bool m_dry = false;  // the first run's loading pass: collectives zero their outputs instead (run_device)

  // profiling
  std::vector<Event> m_prof_start, m_prof_end;
  Event m_prof_base;
  std::vector<NodeTiming> m_profile;
  std::vector<TraceEvent> m_trace;
  std::vector<std::pair<int, std::pair<Event, Event>>> m_copy_events;  // (input node, start/end)

  // host pipeline
  std::shared_ptr<Storage> m_pipe_device;
  std::vector<Tensor> m_pipe_out_host;
  std::vector<Tensor> m_pipe_stage;
  std::vector<Event> m_pipe_slot_free;
  struct PipeEvent {
    int chunk, slot;
    const char* what;
    Event start{true}, end{true};
  };
  std::vector<PipeEvent> m_pipe_events;

  ExecStats m_stats;  // written by runs only, under m_run_mutex
  PlanStats m_plan_stats;
  std::vector<std::string> m_warnings;
  cudaStream_t m_last_origin = nullptr;

  // Fault safety and threads
  std::mutex m_run_mutex;                    // one run at a time (see the thread-safety contract above)
  std::vector<cudaStream_t> m_forked;        // this run's streams other than the origin, not yet joined
  std::vector<Event> m_unwind_join;          // per entry of m_forked: its join event after a failure
  std::vector<cudaStream_t> m_used_streams;  // every stream a run used (note_stream)
};

}  // namespace mt::detail
