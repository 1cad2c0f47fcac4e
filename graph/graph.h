// graph/: build a small compute graph, compile it (fusion, memory plan, streams, CUDA graph) and run it.
//
//   mt::Graph g;
//   auto x = g.input("x", {64, 512});
//   auto w1 = g.parameter("w1", W1);  auto b1 = g.parameter("b1", B1);  ...
//   auto y = g.softmax(g.relu(g.matmul(x, w1) + b1), -1);
//   g.output("y", y);
//   mt::Executor exec(g);                      // or g.compile(options)
//   auto out = exec.run({{"x", x_tensor}});    // out["y"]
//
// Shapes and dtypes are inferred as nodes are added; a mistake throws ShapeError / DTypeError at that call,
// naming the op, the node's name and the shapes. Inputs have fixed shapes.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "minitensor/dist/collectives.h"
#include "minitensor/ops/elementwise.h"
#include "minitensor/ops/gemm.h"
#include "minitensor/ops/norm.h"
#include "minitensor/ops/reduce.h"
#include "minitensor/tensor/tensor.h"

namespace mt {

namespace detail {
struct GraphData;
}

class Graph;
class Executor;
struct ExecOptions;

// A handle to a node of one graph: the graph's id and the node's index. Cheap to copy (two integers). The id
// is a process-unique generation number, never reused, that every live graph registers (a registry under a
// mutex): a node of a destroyed graph, or used with another graph, is an InvalidArgument naming both graphs'
// ids, never a dangling pointer. (Destroying a graph while another thread uses its nodes is still a race.)
class Node {
 public:
  Node() = default;  // "no node" (e.g. an absent bias)
  bool valid() const noexcept { return m_graph_id != 0; }
  explicit operator bool() const noexcept { return valid(); }
  int id() const noexcept { return m_id; }
  std::uint64_t graph_id() const noexcept { return m_graph_id; }  // 0 for "no node"
  // By value: adding nodes to the graph may move the node table, so a reference would dangle.
  Shape shape() const;
  DType dtype() const;
  std::string name() const;
  Node named(
      const std::string& name) const;  // sets the node's name (for errors, dumps, traces); returns *this
  // The node's graph's data; InvalidArgument for an empty node or one whose graph was destroyed.
  detail::GraphData* graph_data() const;

 private:
  friend class Graph;
  friend struct detail::GraphData;
  Node(std::uint64_t graph_id, int id) : m_graph_id(graph_id), m_id(id) {}
  std::uint64_t m_graph_id = 0;
  int m_id = -1;
};

struct GemmNodeOptions {
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;  // beta scales the optional c operand
  Activation activation = Activation::None;
  bool softmax = false;  // then softmax over the last axis (GemmOptions::softmax)
};

// A moved-from Graph holds nothing: any use of it is an InvalidArgument.
class Graph {
 public:
  Graph();
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  // The graph a node belongs to (InvalidArgument for an empty node).
  static Graph& of(const Node& node);

  // --- leaves
  Node input(const std::string& name, const Shape& shape, DType dtype = DType::F32);
  Node parameter(const std::string& name, const Tensor& value);  // a tensor bound at build time (weights)
  Node constant(const Tensor& value, const std::string& name = "");

  // --- elementwise (NumPy broadcasting; both operands share a dtype)
  Node unary(UnaryOp op, Node x, const std::string& name = "");
  Node binary(BinaryOp op, Node a, Node b, const std::string& name = "");
  Node binary_scalar(BinaryOp op, Node x, double s, const std::string& name = "");  // x op s
  Node scalar_binary(BinaryOp op, double s, Node x, const std::string& name = "");  // s op x
  Node clamp(Node x, double lo, double hi, const std::string& name = "");
  Node neg(Node x) { return unary(UnaryOp::Neg, x); }
  Node abs(Node x) { return unary(UnaryOp::Abs, x); }
  Node relu(Node x) { return unary(UnaryOp::Relu, x); }
  Node sigmoid(Node x) { return unary(UnaryOp::Sigmoid, x); }
  Node tanh(Node x) { return unary(UnaryOp::Tanh, x); }
  Node exp(Node x) { return unary(UnaryOp::Exp, x); }
  Node log(Node x) { return unary(UnaryOp::Log, x); }
  Node sqrt(Node x) { return unary(UnaryOp::Sqrt, x); }
  Node gelu(Node x) { return unary(UnaryOp::Gelu, x); }           // exact (erf), PyTorch's default
  Node gelu_tanh(Node x) { return unary(UnaryOp::GeluTanh, x); }  // tanh approximation
  Node square(Node x) { return unary(UnaryOp::Square, x); }
  Node rsqrt(Node x) { return unary(UnaryOp::Rsqrt, x); }
  Node reciprocal(Node x) { return unary(UnaryOp::Reciprocal, x); }
  Node add(Node a, Node b) { return binary(BinaryOp::Add, a, b); }
  Node sub(Node a, Node b) { return binary(BinaryOp::Sub, a, b); }
  Node mul(Node a, Node b) { return binary(BinaryOp::Mul, a, b); }
  Node div(Node a, Node b) { return binary(BinaryOp::Div, a, b); }
  Node maximum(Node a, Node b) { return binary(BinaryOp::Maximum, a, b); }
  Node pow(Node a, Node b) { return binary(BinaryOp::Pow, a, b); }
  Node minimum(Node a, Node b) { return binary(BinaryOp::Minimum, a, b); }

  // --- reductions (axes empty = all), softmax
  Node reduce(ReduceOp op, Node x, std::vector<std::int64_t> axes = {}, bool keepdim = false,
              const std::string& name = "");
  Node sum(Node x, std::int64_t axis, bool keepdim = false) {
    return reduce(ReduceOp::Sum, x, {axis}, keepdim);
  }
  Node mean(Node x, std::int64_t axis, bool keepdim = false) {
    return reduce(ReduceOp::Mean, x, {axis}, keepdim);
  }
  Node max(Node x, std::int64_t axis, bool keepdim = false) {
    return reduce(ReduceOp::Max, x, {axis}, keepdim);
  }
  Node min(Node x, std::int64_t axis, bool keepdim = false) {
    return reduce(ReduceOp::Min, x, {axis}, keepdim);
  }
  Node argmax(Node x, std::int64_t axis) { return reduce(ReduceOp::ArgMax, x, {axis}, false); }
  Node argmin(Node x, std::int64_t axis) { return reduce(ReduceOp::ArgMin, x, {axis}, false); }
  Node softmax(Node x, std::int64_t axis = -1, const std::string& name = "");
  Node log_softmax(Node x, std::int64_t axis = -1, const std::string& name = "");

  // --- layout: transpose / permute materialise; reshape / view share the producer's memory
  Node transpose(Node x, std::int64_t d0, std::int64_t d1, const std::string& name = "");
  Node permute(Node x, std::vector<std::int64_t> dims, const std::string& name = "");
  Node reshape(Node x, const Shape& shape, const std::string& name = "");  // one extent may be -1
  Node view(Node x, const Shape& shape, const std::string& name = "");

  // --- GEMM family. matmul: NumPy semantics. linear: act(x w + bias), x (..., in), w (in, out), bias (out).
  // gemm: act(alpha op(a) op(b) + beta c + bias), a/b 2-D or batched, c broadcastable to the result.
  Node matmul(Node a, Node b, const std::string& name = "");
  Node linear(Node x, Node w, Node bias = Node(), Activation activation = Activation::None,
              const std::string& name = "");
  Node gemm(Node a, Node b, const GemmNodeOptions& options = {}, Node c = Node(), Node bias = Node(),
            const std::string& name = "");

  // --- row normalisations over the last axis and attention, as ops/norm.h and ops/attention.h define them
  // (one fused kernel each). weight and bias (d) may be absent; mask, additive, broadcasts to the scores.
  Node layer_norm(Node x, Node weight = Node(), Node bias = Node(), double eps = 1e-5,
                  const std::string& name = "");
  Node rms_norm(Node x, Node weight = Node(), double eps = kRmsNormEps, const std::string& name = "");
  Node attention(Node q, Node k, Node v, Node mask = Node(), bool causal = false,
                 std::optional<double> scale = std::nullopt, const std::string& name = "");

  // --- slices and concatenation (both materialise: the result is a new contiguous buffer)
  Node slice(Node x, std::int64_t dim, std::int64_t start, std::int64_t end, const std::string& name = "");
  Node concat(const std::vector<Node>& xs, std::int64_t dim = 0, const std::string& name = "");

  // --- collectives (graph/collective.cpp; recipes built on them: graph/parallel.h). Every rank builds the
  // same graph (its own shards as parameters) and runs it on its communicator (ExecOptions::comm). Shapes are
  // inferred when the node is added, from the graph's world size, which is therefore set first
  // (set_world_size; default 1). An executor checks the communicator's size against it.
  //   all_reduce: x's shape; all_gather: x with x[dim] * world; reduce_scatter: x with x[dim] / world
  //   (ShapeError when world does not divide it). dim may be negative.
  void set_world_size(int world_size);  // InvalidArgument below 1, or once a collective node uses another
  int world_size() const;
  Node all_reduce(Node x, dist::ReduceOp op = dist::ReduceOp::Sum, const std::string& name = "");
  Node all_gather(Node x, std::int64_t dim = 0, const std::string& name = "");
  Node reduce_scatter(Node x, std::int64_t dim = 0, dist::ReduceOp op = dist::ReduceOp::Sum,
                      const std::string& name = "");

  // --- outputs: what run() returns, by name
  void output(const std::string& name, Node node);

  // Compiles for options.device (unset: the GPU when there is one, else the CPU): same as
  // Executor(*this, options).
  Executor compile(const ExecOptions& options) const;
  Executor compile() const;

  int size() const;            // number of nodes
  std::string dump() const;    // one line per node: id, name, op, inputs, shape, dtype
  std::string to_dot() const;  // Graphviz DOT
  const detail::GraphData& data() const { return live(); }
  std::uint64_t id() const;  // the process-unique id its nodes carry (Node::graph_id)

 private:
  detail::GraphData& live() const;  // *m_data; InvalidArgument when moved from
  Node scalar_node(BinaryOp op, Node x, double s, bool scalar_first, const std::string& name);
  std::unique_ptr<detail::GraphData> m_data;
};

// Node arithmetic: the node's own graph records the op.
Node operator+(Node a, Node b);
Node operator-(Node a, Node b);
Node operator*(Node a, Node b);
Node operator/(Node a, Node b);
Node operator-(Node x);
Node operator+(Node a, double s);
Node operator-(Node a, double s);
Node operator*(Node a, double s);
Node operator/(Node a, double s);
Node operator+(double s, Node a);
Node operator-(double s, Node a);
Node operator*(double s, Node a);
Node operator/(double s, Node a);

using TensorMap = std::map<std::string, Tensor>;

// What the compiler decides: fusion, the memory plan, streams, GEMM math, weight packing.
struct CompileOptions {
  bool fuse_elementwise = true;    // elementwise chains/trees -> one NVRTC kernel
  bool fuse_gemm_epilogue = true;  // matmul + bias + relu/gelu/gelu_tanh -> GEMM epilogue
  bool fuse_softmax = true;        // max/sub/exp/sum/div -> softmax
  // Row fusion (with fuse_elementwise): a last-axis sum / mean / max / min, the elementwise ops feeding it and
  // those that broadcast its result back over the row -> one NVRTC kernel a row (LayerNorm or RMSNorm
  // written from primitives is one kernel). Rows too long to keep on chip are not fused.
  bool fuse_rows = true;
  bool fold_views = true;          // permutes that attention / GEMMs read with strides are views, not copies
  bool merge_linears = true;       // linears of one input and fixed weights -> one GEMM (see below)
  bool plan_memory = true;         // false: every intermediate gets its own buffer (nothing is reused)
  bool inplace = true;             // elementwise ops may overwrite a dying input of their shape
  bool multi_stream = true;        // false: everything on one stream (debugging)
  int max_streams = 4;
  // The math mode of the GEMMs and of the fused attention; unset: default_math_mode().
  std::optional<MathMode> math{};
  // TF32 modes: a GEMM whose B is a parameter or constant (2-D) gets it packed once, when the executor is
  // built, instead of at every run (pack_b). The packed copy is a snapshot: a device parameter changed in
  // place afterwards is not seen by those GEMMs (set false to read it at every run, or build a new executor;
  // host parameters are copied to the device when the executor is built either way).
  bool pack_weights = true;
  // merge_linears: linears of one input with parameter or constant weights (q, k, v) run as one GEMM over
  // their concatenated weights, each result a column slice of it. The concatenation is a snapshot, as the
  // packed copies above are: a parameter changed in place afterwards is not seen (set false to read the
  // parameters at every run).
  // The GEMMs tune their kernel choice (GemmOptions::tune): in the executor's first run, which runs plainly
  // before any CUDA graph capture.
  bool tune_gemm = false;
};

// What a run does: CUDA graph replay, profiling, the host pipeline, which values it keeps.
struct RunOptions {
  bool cuda_graph = true;     // capture a run and replay it while input pointers stay the same
  bool profile = false;       // per-node CUDA event timing (turns CUDA graph replay off)
  bool host_pipeline = true;  // host inputs to an elementwise graph: chunked, overlapped copies
  std::int64_t pipeline_chunk = std::int64_t(1) << 22;  // elements per chunk
  int pipeline_streams = 4;
  bool keep_intermediates = false;  // every node keeps its value after run() (check() uses it)
};

// What Executor takes: the device, the compile and run options, and where compiled kernels are cached.
//   ExecOptions o{.compile = {.fuse_softmax = false}, .run = {.cuda_graph = false}};
struct ExecOptions {
  // Where the graph runs. Unset: the GPU (cuda:0) when there is one, else the CPU, saying so once per process
  // on stderr ("minitensor: no CUDA device (<reason>); running on the CPU"), so that a program written for
  // the GPU still runs on a machine without one. Device::cpu(): the Eigen reference ops; nothing else
  // applies. Device::cuda(i): that GPU, or a DeviceError when it does not exist (never a silent fallback).
  std::optional<Device> device{};
  CompileOptions compile;
  RunOptions run;
  std::string kernel_cache_dir{};  // empty: $MT_KERNEL_CACHE_DIR, else ~/.cache/minitensor/kernels
  // The communicator the graph's collective nodes run on (not owned; it must outlive the executor and be on
  // the executor's device, of the graph's world size). A GPU executor of a graph with collective nodes and no
  // communicator is an InvalidArgument at its construction, naming the node (DistUnavailable in a build
  // without NCCL). The CPU executor (and run_cpu) is a world of one: it runs collective nodes of a world size
  // 1 graph as the identity and refuses (InvalidArgument, naming the node) a graph of a larger world.
  // Collectives run in the graph's step order on one of the executor's streams, also inside CUDA-graph
  // capture; every rank's executor must therefore be built from the same graph with the same options, and run
  // from its own thread (or process).
  dist::Communicator* comm = nullptr;
};

// Bytes of the memory plan (intermediates only: inputs, parameters, constants and outputs are not planned).
struct PlanStats {
  std::size_t arena_bytes = 0;      // planned peak: the arena's size
  std::size_t unplanned_bytes = 0;  // sum of all intermediates' sizes (what one buffer each would take)
  int n_intermediates = 0;
  int n_inplace = 0;  // intermediates written over a dying input
};
// {"arena_bytes":..,"unplanned_bytes":..,"n_intermediates":..,"n_inplace":..}
std::string to_json(const PlanStats& plan);

struct ExecStats {
  int n_runs = 0, n_plain_runs = 0, n_captures = 0, n_graph_updates = 0, n_reinstantiations = 0,
      n_replays = 0;
  int n_pipelined_runs = 0;
  // Of the last captured CUDA graph: its dependency edges, and those that let a kernel start while the one
  // before it finishes (programmatic dependent launch kept by the capture).
  int n_graph_edges = 0, n_programmatic_edges = 0;
  // Of the last captured CUDA graph: its kernels, every kernel a run launches (a step may launch more than
  // one: a GEMM's operand pack or split-K reduction, attention's key-split combine).
  int n_graph_kernels = 0;
};
// Every field above, by its name.
std::string to_json(const ExecStats& stats);

// Timings of the last profiled run.
struct NodeTiming {
  std::string label, op;
  int stream = 0;
  double start_us = 0, duration_us = 0;  // relative to the run's start
};
// {"steps":[{"step":0,"label":..,"op":..,"stream":..,"start_us":..,"duration_us":..},...]}
std::string to_json(const std::vector<NodeTiming>& profile);

namespace detail {
class ExecutorImpl;
}

// Threads: run() may be called from several threads at once; the runs of one executor are serialised (a
// mutex: the second waits until the first has queued its work, not until that work is done), and a run on
// another current stream than the last first waits, on the device, for the last run. A CUDA-graph capture
// runs on streams of the executor's own, so the caller's stream keeps taking work and synchronisations from
// other threads meanwhile; the graph is then launched on it. The outputs are the executor's own buffers,
// overwritten by the next run whichever thread makes it: to keep them while other threads run, clone them
// under your own lock, or give each thread its own executor. stats(), plan_stats(), summary(), warnings(),
// value(), last_profile(), profile_table() and write_trace() must not overlap a run on another thread;
// moving or destroying an executor must not overlap any other call on it.
// A Graph is built by one thread at a time; a graph nobody modifies may be compiled, dumped, checked or
// run_cpu'd from several threads at once. Eager ops may be called from several threads at once: each queues
// its work on its thread's current_stream(device) (default_stream(device), shared by all threads, unless a
// StreamGuard says otherwise); across streams the caller orders work with events. A Tensor may be read by
// several threads; writing its memory (copy_, an out= argument, fill) while another thread reads or writes
// it is a race.
class Executor {
 public:
  explicit Executor(const Graph& graph, const ExecOptions& options = {});
  ~Executor();
  Executor(Executor&&) noexcept;
  Executor& operator=(Executor&&) noexcept;

  // Inputs by name (device or host tensors of the declared shape and dtype). Returns the outputs by name. On
  // the GPU the outputs are the executor's own buffers, overwritten by the next run (clone() to keep one);
  // work is ordered on current_stream(device). Host inputs with a pipelined graph give host outputs.
  TensorMap run(const TensorMap& inputs);

  const PlanStats& plan_stats() const;
  const ExecStats& stats() const;
  std::string summary() const;                       // steps, fusion decisions, streams, memory plan
  const std::vector<std::string>& warnings() const;  // e.g. NVRTC fallbacks
  int n_launches() const;                            // kernels (steps) per run
  // The value of graph node `id` after the last run (keep_intermediates, or an output / input); undefined
  // tensor when it was fused away or its memory was reused.
  Tensor value(int node_id) const;
  // Node id -> the step that produced it; fused members map to their group's root. -1 for leaves.
  int root_of(int node_id) const;

  const std::vector<NodeTiming>& last_profile() const;
  std::string profile_table() const;
  void write_trace(const std::string& path) const;  // Chrome trace JSON (Perfetto, chrome://tracing)

  Device device() const;  // where it runs: options.device, or the default it resolved to

  const detail::ExecutorImpl& impl() const { return *m_impl; }

 private:
  std::unique_ptr<detail::ExecutorImpl> m_impl;
};
// summary() as JSON: device, streams, CUDA graph, fusion decisions, the steps (stream, waits), the memory
// plan (where each live node is placed), stats() and warnings(). A CPU executor has no steps and no plan.
std::string to_json(const Executor& executor);

// Runs the graph on the CPU through the Eigen reference ops; every node's value (indexed by node id).
std::vector<Tensor> run_cpu_all(const Graph& graph, const TensorMap& inputs);
TensorMap run_cpu(const Graph& graph, const TensorMap& inputs);

struct CheckRow {
  int node = -1;
  std::string label, op, shape;
  double max_abs = 0, max_rel = 0, nmse = 0, tolerance = 0, scale = 0;
  bool pass = true;
  std::string note;  // "fused into #7", "end to end", ...
};
struct CheckReport {
  std::vector<CheckRow> rows;
  bool ok = true;             // no row failed
  bool compared = true;       // false: there was no device run to compare with (the graph ran on the CPU)
  std::string table() const;  // ends with "all rows pass", "SOME ROWS FAIL" or "nothing compared: ..."
};
std::ostream& operator<<(std::ostream& os, const CheckReport& report);
// {"ok":..,"compared":..,"rows":[{"node":..,"label":..,"op":..,"shape":..,"max_abs":..,"max_rel":..,"nmse":..,
// "tolerance":..,"scale":..,"pass":..,"note":..},...]}; a NaN or infinite error is null.
std::string to_json(const CheckReport& report);

// Runs the graph on the device (options.device; unset: the GPU when there is one, else the CPU with the
// notice of ExecOptions::device, and nothing is compared) and on the CPU; compares every materialised node.
// Each node is checked locally (the CPU op fed with the device's inputs of that node; fused groups as one op)
// and every output end to end (independent CPU run). A row passes when max_abs <= tolerance * scale, NaN/Inf
// matching. A graph of a world size above 1 has no CPU reference of its own: check_parallel (graph/parallel.h)
// compares each rank with the unsplit graph.
CheckReport check(const Graph& graph, const TensorMap& inputs, ExecOptions options = {});

}  // namespace mt
