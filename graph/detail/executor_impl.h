// The executor's state, shared by executor.cpp (compile, run, CUDA graphs), pipeline.cpp (chunked host
// pipeline) and profile.cpp (timings, trace).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "minitensor/graph/detail/codegen.h"
#include "minitensor/graph/detail/internal.h"
#include "minitensor/graph/detail/program.h"
#include "minitensor/runtime/event.h"

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

struct TraceEvent {
  std::string name, cat;
  std::string track;  // "stream 0", "copy", ...
  double ts_us = 0, dur_us = 0;
};

class ExecutorImpl {
 public:
  ExecutorImpl(const GraphData& graph, const ExecOptions& options);
  ~ExecutorImpl();

  TensorMap run(const TensorMap& inputs);
  TensorMap run_cpu_path(const TensorMap& inputs);
  TensorMap run_pipeline(const std::vector<Tensor>& bound);
  bool pipeline_eligible() const { return m_pipeline_ok; }

  void launch_all(cudaStream_t origin, bool timed);
  void count_edges(cudaGraph_t g);  // into m_stats after a capture
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
  std::vector<bool> m_fallback_reduce;                  // per step: runs the eager reduce (not capturable)
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
  std::vector<const void*> m_graph_key;  // input pointers the captured graph reads
  bool m_graph_valid = false;

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

  ExecStats m_stats;
  PlanStats m_plan_stats;
  std::vector<std::string> m_warnings;
  cudaStream_t m_last_origin = nullptr;
};

}  // namespace mt::detail
