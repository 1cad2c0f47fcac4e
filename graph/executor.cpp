// The executor: compile (passes, NVRTC, memory plan, streams), then run, plainly or as a CUDA graph replay.
//
// A run allocates nothing and never synchronises the host (except host-output pipelines): intermediates live
// in one arena, outputs in a persistent buffer, inputs are read in place (or staged into persistent buffers),
// so a whole run can be captured (on the executor's own streams) and replayed on the origin stream while the
// input pointers stay the same.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <numeric>
#include <unordered_map>

#include "minitensor/graph/detail/collective.h"
#include "minitensor/graph/detail/executor_impl.h"
#include "minitensor/memory/stream_scratch.h"
#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/detail/norm.h"
#include "minitensor/ops/ops.h"
#include "minitensor/runtime/stream.h"
#include "minitensor/tensor/detail/kernels.h"

namespace mt {
namespace detail {

void CudaGraphExec::reset() noexcept {
  if (exec) MT_CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(exec));
  if (graph) MT_CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));
  exec = nullptr;
  graph = nullptr;
}

namespace {

// Ends a capture that failed half-way and throws its graph away, so the stream takes work again. Never
// throws: the error being thrown is the one that matters.
void end_capture_discarding(cudaStream_t origin, const std::vector<cudaStream_t>& sides) noexcept {
  cudaGraph_t broken = nullptr;
  (void)cudaStreamEndCapture(origin, &broken);
  if (broken) (void)cudaGraphDestroy(broken);
  (void)cudaGetLastError();
  for (cudaStream_t s : sides) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &st) != cudaSuccess) (void)cudaGetLastError();
    if (st != cudaStreamCaptureStatusNone)
      log_error("Executor: a side stream is still capturing after a failed CUDA graph capture ended");
  }
}

// Destroys a captured graph unless release()d: count_graph or instantiation may throw.
class CapturedGraph {
 public:
  explicit CapturedGraph(cudaGraph_t g) : m_graph(g) {}
  ~CapturedGraph() {
    if (m_graph) MT_CUDA_CHECK_NOTHROW(cudaGraphDestroy(m_graph));
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  cudaGraph_t get() const noexcept { return m_graph; }
  cudaGraph_t release() noexcept { return std::exchange(m_graph, nullptr); }

 private:
  cudaGraph_t m_graph;
};

void record_use(const std::shared_ptr<Storage>& storage, cudaStream_t stream) {
  if (!storage || !stream) return;
  const Allocation& a = storage->allocation();
  if (a.allocator() && a.stream() != stream) a.allocator()->record_stream(a, stream);
}

// op over the middle extent of a contiguous float32 tensor seen as (outer, len, inner), into out (outer,
// inner). Never split across blocks: the launch may be captured into a CUDA graph (see launch_reduce_rows).
void reduce_middle(ReduceOp op, const float* x, void* out, std::int64_t outer, std::int64_t len,
                   std::int64_t inner, cudaStream_t stream) {
  StridedLayout l;
  l.rank = 1;
  l.shape[0] = outer;
  if (len == 0) {  // inference admits only sum (0) and mean (NaN) over nothing
    l.shape[0] = outer * inner;
    l.stride[0] = 1;
    launch_fill(out, l, outer * inner, DType::F32, op == ReduceOp::Sum ? 0.0 : std::nan(""), stream);
    return;
  }
  if (inner == 1) {
    l.stride[0] = len;
    launch_reduce_rows(op, x, l, outer, len, out, stream, /*allow_split=*/false);
  } else {
    l.stride[0] = len * inner;
    launch_reduce_cols(op, x, l, outer, len, /*r_stride=*/inner, /*n_cols=*/inner, out, stream,
                       /*allow_split=*/false);
  }
}

// Node n's planned place: its layout's strides (Program::strides) from byte_offset.
Tensor view_of(const std::shared_ptr<Storage>& storage, std::size_t byte_offset, const NodeData& n,
               const Shape& strides) {
  const std::size_t es = dtype_size(n.dtype);
  return Tensor(storage, n.dtype, n.shape, strides, static_cast<std::int64_t>(byte_offset / es));
}

// (outer, n, inner) of a reduction over `axes` when they are consecutive; false otherwise.
bool split_axes(const Shape& s, const std::vector<std::int64_t>& axes, std::int64_t& outer, std::int64_t& n,
                std::int64_t& inner) {
  outer = n = inner = 1;
  if (axes.empty()) {  // flat
    n = s.numel();
    return true;
  }
  for (size_t i = 1; i < axes.size(); ++i)
    if (axes[i] != axes[i - 1] + 1) return false;
  for (int d = 0; d < s.rank(); ++d) {
    if (d < axes.front())
      outer *= s[d];
    else if (d <= axes.back())
      n *= s[d];
    else
      inner *= s[d];
  }
  return true;
}

void warn(std::vector<std::string>& warnings, const std::string& msg) {
  warnings.push_back(msg);
  std::cerr << "[minitensor] warning: " << msg << "\n";
}

}  // namespace

ExecutorImpl::ExecutorImpl(const GraphData& graph, const ExecOptions& options)
    : m_opt(options), m_device(resolve_device(options.device)) {
  m_opt.device = m_device;
  m_source.nodes = graph.nodes;
  m_source.outputs = graph.outputs;
  require_outputs(m_source, "Executor");
  check_collectives(m_source, m_device, options.comm, "Executor");
  if (m_device.is_cpu()) return;
  check_device(m_device);
  DeviceGuard device_guard(m_device);

  CompileFlags flags;
  flags.fuse_elementwise = options.compile.fuse_elementwise;
  flags.fuse_gemm_epilogue = options.compile.fuse_gemm_epilogue;
  flags.fuse_softmax = options.compile.fuse_softmax;
  flags.fold_views = options.compile.fold_views;
  flags.merge_linears = options.compile.merge_linears;
  flags.fuse_rows = options.compile.fuse_rows;
  m_prog = build_program(m_source, flags);

  // NVRTC for every fused group; a failure splits the group back into eager ops (and warns). Backwards, so
  // that unfusing a step leaves the steps still to visit where they were; the kernels are kept by the
  // group's root (a node heads one step), as the indices after an unfused step move.
  const DeviceProperties& props = device_properties(m_device.index());
  const int arch = props.cc_major * 10 + props.cc_minor;
  std::unordered_map<int, std::shared_ptr<FusedKernel>> compiled;
  for (int i = static_cast<int>(m_prog.steps.size()) - 1; i >= 0; --i) {
    const Step& s = m_prog.steps[static_cast<size_t>(i)];
    if (s.kind == Step::Kind::Op) continue;
    const CompileResult r = compile_fused_kernel(step_kernel_source(m_prog, s), arch,
                                                 options.kernel_cache_dir, nvrtc_fault_injection());
    if (!r.kernel) {
      std::string first_line = r.error.substr(0, r.error.find('\n'));
      const size_t more = r.error.find("error");
      if (more != std::string::npos)
        first_line += " | " + r.error.substr(more, r.error.find('\n', more) - more);
      warn(m_warnings, str("NVRTC could not compile the ", s.kind == Step::Kind::Rows ? "row" : "fused",
                           " group at ", m_prog.node_label(s.root), " (", s.members.size(), " nodes): ",
                           first_line, "; running its nodes through the precompiled eager kernels instead"));
      unfuse_step(m_prog, i);
    } else {
      compiled[s.root] = r.kernel;
    }
  }
  m_kernels.assign(m_prog.steps.size(), nullptr);
  for (size_t i = 0; i < m_prog.steps.size(); ++i) {
    const Step& s = m_prog.steps[i];
    if (s.kind != Step::Kind::Op) m_kernels[i] = compiled.at(s.root);
  }

  // Steps the precompiled kernels cannot do without allocating (non-consecutive reduction axes) run the eager
  // op and copy: correct, but not capturable.
  m_eager_step.assign(m_prog.steps.size(), false);
  for (size_t i = 0; i < m_prog.steps.size(); ++i) {
    const NodeData& n = m_prog.g.at(m_prog.steps[i].root);
    std::int64_t a, b, c;
    if (n.inputs.empty() || m_prog.steps[i].kind != Step::Kind::Op) continue;
    const Shape& x = m_prog.g.at(n.inputs[0]).shape;
    // Steps that run their eager op (it allocates its result, so they cannot be captured): a reduction over
    // non-consecutive axes, rows too long for the fused row kernel, attention without a fused kernel.
    const bool eager =
        (n.kind == OpKind::Reduce && !split_axes(x, n.axes, a, b, c)) ||
        ((n.kind == OpKind::LayerNorm || n.kind == OpKind::RmsNorm) && !row_norm_is_fused(x.back())) ||
        (n.kind == OpKind::Attention &&
         !attention_is_fused(x.back(), n.shape.back(), m_prog.g.at(n.inputs[1]).shape[x.rank() - 2])) ||
        collective_allocates(n);
    if (eager) {
      m_eager_step[i] = true;
      m_capturable = false;
    }
  }
  if (!m_capturable && options.run.cuda_graph)
    warn(m_warnings, "a step runs its eager op, which allocates its result: CUDA graph capture is off");

  const bool reuse = options.compile.plan_memory && !options.run.keep_intermediates;
  // Streams from the data dependencies first, then memory that never makes one stream wait for another.
  const int max_streams =
      options.compile.multi_stream ? std::min(options.compile.max_streams, kStreamPoolSize) : 1;
  Schedule data_only = schedule_streams(m_prog, plan_memory(m_prog, false, false), max_streams);
  pin_collective_streams(m_prog, data_only.stream);
  m_mem = plan_memory(m_prog, reuse, reuse && options.compile.inplace, &data_only.stream);
  m_sched = schedule_streams(m_prog, m_mem, max_streams, &data_only.stream);
  m_plan_stats.arena_bytes = m_mem.arena_bytes;
  m_plan_stats.unplanned_bytes = m_mem.unplanned_bytes;
  m_plan_stats.n_intermediates = m_mem.n_intermediates;
  m_plan_stats.n_inplace = m_mem.n_inplace;

  // Memory: one arena for the intermediates, one buffer for the outputs; leaves copied to the device once.
  const cudaStream_t origin = current_stream(m_device.index());
  m_arena = std::make_shared<Storage>(cuda_allocator(m_device.index()).allocate(m_mem.arena_bytes, origin));
  m_persistent =
      std::make_shared<Storage>(cuda_allocator(m_device.index()).allocate(m_mem.persistent_bytes, origin));
  const size_t n_nodes = m_prog.g.nodes.size();
  m_static.assign(n_nodes, Tensor());
  for (int id : m_prog.order) {
    const NodeData& n = m_prog.g.at(id);
    switch (m_mem.where[static_cast<size_t>(id)]) {
      case MemoryPlan::Where::Leaf:
        if (n.kind != OpKind::Input) m_static[static_cast<size_t>(id)] = n.value.to(m_device).contiguous();
        break;
      case MemoryPlan::Where::Arena:
        m_static[static_cast<size_t>(id)] = view_of(m_arena, m_mem.offset[static_cast<size_t>(id)], n,
                                                    m_prog.strides[static_cast<size_t>(id)]);
        break;
      case MemoryPlan::Where::Persistent:
        m_static[static_cast<size_t>(id)] = view_of(m_persistent, m_mem.offset[static_cast<size_t>(id)], n,
                                                    m_prog.strides[static_cast<size_t>(id)]);
        break;
      default:
        break;
    }
  }
  m_packed_b = pack_weights(m_prog, m_static, m_opt.compile);
  synchronize_stream(origin);  // parameters are on the device before any other stream reads them
  m_bound.assign(n_nodes, Tensor());
  m_staging_device.assign(n_nodes, Tensor());
  m_staging_host.assign(n_nodes, Tensor());
  m_staging_done.resize(n_nodes);
  m_step_done.resize(m_prog.steps.size());
  m_join.resize(static_cast<size_t>(kStreamPoolSize));
  m_unwind_join.resize(static_cast<size_t>(kStreamPoolSize) + 1);  // side streams and the copy stream

  // Host pipeline: one elementwise step over inputs of the output's size, one output node.
  if (m_prog.steps.size() == 1) {
    const Step& s = m_prog.steps[0];
    const NodeData& root = m_prog.g.at(s.root);
    // Not a row group: its kernel walks whole rows, not chunks of elements.
    bool ok = s.kind != Step::Kind::Rows && root.is_elementwise() &&
              m_mem.where[static_cast<size_t>(s.root)] == MemoryPlan::Where::Persistent;
    for (int r : s.reads)
      ok = ok && m_prog.g.at(r).kind == OpKind::Input && m_prog.g.at(r).shape.numel() == root.shape.numel();
    for (const auto& o : m_prog.g.outputs) ok = ok && o.second == s.root;
    m_pipeline_ok = ok;
  }
}

ExecutorImpl::~ExecutorImpl() {
  // The arena and the staging buffers go back to the allocator: no queued work may still use them. Every run
  // (a failed one too) joins each stream it used into its origin and records m_run_done there, and a run on a
  // new origin first waits for the last one: so m_run_done, recorded last, follows the work of every stream.
  // An event, not the streams: a user's stream may be gone by now, and a pool stream may be capturing for
  // another thread.
  if (m_run_done.recorded()) MT_CUDA_CHECK_NOTHROW(cudaEventSynchronize(m_run_done.get()));
  // The graph's replays are done: its capture scratch goes back before the capture streams go.
  m_graph.reset();
  for (const Stream& s : m_capture_streams) release_capture_scratch(m_device.index(), s.get());
}

void ExecutorImpl::note_stream(cudaStream_t stream) {
  if (std::find(m_used_streams.begin(), m_used_streams.end(), stream) != m_used_streams.end()) return;
  m_used_streams.push_back(stream);
  record_use(m_arena, stream);
  record_use(m_persistent, stream);
  record_use(m_pipe_device, stream);
  for (const Tensor& t : m_staging_device) record_use(t.storage(), stream);
  for (const Tensor& t : m_staging_host) record_use(t.storage(), stream);
  for (const Tensor& t : m_static) record_use(t.storage(), stream);  // leaves (arena views: already done)
}

void ExecutorImpl::note_buffer(const std::shared_ptr<Storage>& storage) {
  for (cudaStream_t s : m_used_streams) record_use(storage, s);
}

void ExecutorImpl::join_forked(cudaStream_t origin) noexcept {
  for (size_t k = 0; k < m_forked.size() && k < m_unwind_join.size(); ++k) {
    try {
      m_unwind_join[k].record(m_forked[k]);
      m_unwind_join[k].wait(origin);
    } catch (const std::exception& e) {
      log_error(str("Executor: cannot join a side stream after a failed run: ", e.what()));
    }
  }
  m_forked.clear();
  // Inside a capture the run's end is the graph launch's: the caller marks it once the capture has ended.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(origin, &capturing) != cudaSuccess) (void)cudaGetLastError();
  if (capturing != cudaStreamCaptureStatusNone) return;
  try {
    m_run_done.record(origin);
  } catch (const std::exception& e) {
    log_error(str("Executor: cannot mark the end of a failed run: ", e.what()));
  }
}

Tensor ExecutorImpl::node_tensor(int id) const {
  const Tensor& b = m_bound[static_cast<size_t>(id)];
  return b.defined() ? b : m_static[static_cast<size_t>(id)];
}

void ExecutorImpl::launch_step(int i, cudaStream_t stream) {
  const Step& s = m_prog.steps[static_cast<size_t>(i)];
  const NodeData& n = m_prog.g.at(s.root);
  Tensor out = node_tensor(s.root);
  StreamGuard guard(stream, m_device.index());  // the eager ops run on current_stream
  auto in = [&](int k) { return node_tensor(n.inputs[static_cast<size_t>(k)]); };
  if (s.kind == Step::Kind::Fused) {
    std::vector<const void*> ptrs;
    for (int r : s.reads) ptrs.push_back(node_tensor(r).data_ptr());
    m_kernels[static_cast<size_t>(i)]->launch(n.shape.numel(), ptrs, out.data_ptr(), stream);
    return;
  }
  if (s.kind == Step::Kind::Rows) {
    std::vector<const void*> ptrs;
    // float4 when every row-wide pointer is 16-byte aligned (the rows themselves are: len % 4 == 0).
    bool vec = s.rows.width == 4 &&
               (!s.rows.out_varies || reinterpret_cast<std::uintptr_t>(out.data_ptr()) % 16 == 0);
    for (size_t k = 0; k < s.reads.size(); ++k) {
      ptrs.push_back(node_tensor(s.reads[k]).data_ptr());
      if (s.rows.read_varies[k]) vec = vec && reinterpret_cast<std::uintptr_t>(ptrs.back()) % 16 == 0;
    }
    m_kernels[static_cast<size_t>(i)]->launch_rows(s.rows, ptrs, out.data_ptr(), vec, stream);
    return;
  }
  switch (n.kind) {
    case OpKind::Unary:
      unary(n.unary, in(0), out);
      break;
    case OpKind::Binary:
      binary(n.binary, in(0), in(1), out);
      break;
    case OpKind::BinaryScalar:
      binary_scalar(n.binary, in(0), n.scalar, out);
      break;
    case OpKind::ScalarBinary:
      scalar_binary(n.binary, n.scalar, in(0), out);
      break;
    case OpKind::Clamp:
      clamp(in(0), n.scalar, n.scalar2, out);
      break;
    case OpKind::Reduce: {
      const Tensor x = in(0);
      std::int64_t outer, len, inner;
      if (!m_eager_step[static_cast<size_t>(i)] && split_axes(x.shape(), n.axes, outer, len, inner)) {
        reduce_middle(n.reduce, x.data<float>(), out.data_ptr(), outer, len, inner, stream);
      } else {
        const Tensor r = reduce(n.reduce, x, n.axes, n.keepdim);
        launch_copy_strided(out.data_ptr(), out.layout(), r.data_ptr(), r.layout(), r.element_size(),
                            r.numel(), stream);
      }
      break;
    }
    case OpKind::Softmax:
    case OpKind::LogSoftmax: {
      const Tensor x = in(0);
      std::int64_t outer, len, inner;
      split_axes(x.shape(), n.axes, outer, len, inner);
      launch_softmax(n.kind == OpKind::LogSoftmax, x.data<float>(), out.data<float>(), outer, len, inner,
                     stream);
      break;
    }
    case OpKind::Permute: {
      const Tensor x = in(0).permute(n.axes);
      launch_copy_strided(out.data_ptr(), out.layout(), x.data_ptr(), x.layout(), x.element_size(), x.numel(),
                          stream);
      break;
    }
    case OpKind::Matmul: {
      Tensor a = in(0), b = in(1);
      const bool a_vec = a.dim() == 1;
      if (a_vec) a = a.view({1, a.size(0)});
      if (b.dim() == 1) b = b.view({b.size(0), 1});
      Tensor c;
      if (b.dim() == 2) {  // fold a's batch dims into its rows
        a = a.view({-1, a.size(-1)});
        c = out.view({a.size(0), b.size(1)});
      } else {  // batched: broadcast the batch dims (stride-0 views) and let gemm walk them
        Shape cs = n.shape;
        if (a_vec) cs.insert(cs.rank() - 1, 1);
        Shape as = cs, bs = cs;
        as[as.rank() - 1] = a.size(-1);
        bs[bs.rank() - 2] = b.size(-2);
        a = a.expand(as);
        b = b.expand(bs);
        c = out.view(cs);
      }
      GemmOptions o;
      o.math = m_opt.compile.math;
      o.tune = m_opt.compile.tune_gemm;
      o.packed_b = m_packed_b[static_cast<size_t>(i)];  // set for a 2-D constant b only
      mt::gemm(a, b, c, false, false, o);
      break;
    }
    case OpKind::Linear: {
      const Tensor x = in(0), w = in(1);
      const Tensor x2 = x.view({-1, w.size(0)});
      Tensor c = out.view({x2.size(0), w.size(1)});
      const Tensor bias = n.has_bias ? in(2).view({w.size(1)}) : Tensor();
      GemmOptions o;
      o.activation = n.gemm.activation;
      o.softmax = n.gemm.softmax;
      o.math = m_opt.compile.math;
      o.tune = m_opt.compile.tune_gemm;
      o.packed_b = m_packed_b[static_cast<size_t>(i)];
      mt::gemm(x2, w, c, false, false, o, bias);
      break;
    }
    case OpKind::Gemm: {
      GemmOptions o;
      o.alpha = n.gemm.alpha;
      o.beta = n.has_c ? n.gemm.beta : 0.0f;
      o.activation = n.gemm.activation;
      o.softmax = n.gemm.softmax;
      o.math = m_opt.compile.math;
      o.tune = m_opt.compile.tune_gemm;
      if (n.has_c) {
        const Tensor c = in(2).expand(n.shape);
        launch_copy_strided(out.data_ptr(), out.layout(), c.data_ptr(), c.layout(), 4, c.numel(), stream);
      }
      const Tensor bias = n.has_bias ? in(n.has_c ? 3 : 2) : Tensor();
      o.packed_b = m_packed_b[static_cast<size_t>(i)];
      mt::gemm(in(0), in(1), out, n.gemm.trans_a, n.gemm.trans_b, o, bias);
      break;
    }
    case OpKind::LayerNorm:
    case OpKind::RmsNorm: {
      const bool layer = n.kind == OpKind::LayerNorm;
      const Tensor x = in(0).contiguous();
      const Tensor w = n.has_weight ? in(1).contiguous() : Tensor();
      const Tensor b = n.has_bias ? in(n.has_weight ? 2 : 1).contiguous() : Tensor();
      const std::int64_t d = x.size(-1);
      if (x.numel() == 0) break;
      if (m_eager_step[static_cast<size_t>(i)] ||
          !launch_row_norm(layer ? RowNorm::Layer : RowNorm::Rms, x.data<float>(),
                           w.defined() ? w.data<float>() : nullptr, b.defined() ? b.data<float>() : nullptr,
                           out.data<float>(), x.numel() / d, d, static_cast<float>(n.scalar), stream)) {
        const Tensor r = layer ? layer_norm(x, w, b, n.scalar) : rms_norm(x, w, n.scalar);
        launch_copy_strided(out.data_ptr(), out.layout(), r.data_ptr(), r.layout(), 4, r.numel(), stream);
      }
      break;
    }
    case OpKind::Attention: {
      AttentionOptions o;
      o.causal = n.causal;
      o.scale = n.scalar;
      o.math = m_opt.compile.math;
      if (n.has_mask) o.mask = in(3);
      attention_out(in(0), in(1), in(2), out, o);
      break;
    }
    case OpKind::Slice:
    case OpKind::Concat:
    case OpKind::AllReduce:
    case OpKind::AllGather:
    case OpKind::ReduceScatter: {
      std::vector<Tensor> ins;
      for (size_t k = 0; k < n.inputs.size(); ++k) ins.push_back(in(static_cast<int>(k)));
      if (m_dry && n.is_collective()) {  // the output is its own planned (contiguous) buffer
        if (out.nbytes() > 0) MT_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream));
        break;
      }
      launch_layout_or_collective(n, ins, out, m_opt.comm, stream);
      break;
    }
    default:
      MT_THROW(InvalidArgument, "Executor: no step for ", node_op_string(n));
  }
}

void ExecutorImpl::launch_all(cudaStream_t origin, bool timed, bool capture) {
  const int n_streams = m_sched.n_streams;
  m_streams.assign(1, origin);
  if (capture) {
    for (int k = 1; k < n_streams; ++k) m_streams.push_back(m_capture_streams[static_cast<size_t>(k)].get());
  } else {
    for (int slot = 0; static_cast<int>(m_streams.size()) < n_streams && slot < kStreamPoolSize; ++slot) {
      cudaStream_t s = pool_stream(m_device.index(), slot);
      if (s != origin) m_streams.push_back(s);
    }
  }
  // From the fork on, a failure joins the side streams back before it leaves (before a capture ends, too).
  OnUnwind join_on_failure([&]() noexcept { join_forked(origin); });
  if (n_streams > 1) {
    // A capture runs nothing: its buffers are used where the graph is launched, on the run's origin.
    if (!capture)
      for (int k = 1; k < n_streams; ++k) note_stream(m_streams[static_cast<size_t>(k)]);
    m_fork.record(origin);
    for (int k = 1; k < n_streams; ++k) {
      m_fork.wait(m_streams[static_cast<size_t>(k)]);
      m_forked.push_back(m_streams[static_cast<size_t>(k)]);
    }
  }
  if (timed) {
    m_prof_start.resize(m_prog.steps.size());
    m_prof_end.resize(m_prog.steps.size());
    for (size_t i = 0; i < m_prog.steps.size(); ++i) {
      if (!m_prof_start[i].recorded()) m_prof_start[i] = Event(true), m_prof_end[i] = Event(true);
    }
  }
  const int fault_step = executor_fault_step();
  for (int i = 0; i < static_cast<int>(m_prog.steps.size()); ++i) {
    cudaStream_t s = m_streams[static_cast<size_t>(m_sched.stream[static_cast<size_t>(i)])];
    for (int w : m_sched.waits[static_cast<size_t>(i)]) m_step_done[static_cast<size_t>(w)].wait(s);
    if (i == fault_step) throw_executor_fault("Executor::run", i, m_device.index());
    if (timed) m_prof_start[static_cast<size_t>(i)].record(s);
    launch_step(i, s);
    if (timed) m_prof_end[static_cast<size_t>(i)].record(s);
    if (m_sched.records[static_cast<size_t>(i)]) m_step_done[static_cast<size_t>(i)].record(s);
  }
  for (int k = 1; k < n_streams; ++k) {
    m_join[static_cast<size_t>(k)].record(m_streams[static_cast<size_t>(k)]);
    m_join[static_cast<size_t>(k)].wait(origin);
  }
  m_forked.clear();
}

TensorMap ExecutorImpl::run_cpu_path(const TensorMap& inputs) {
  std::vector<Tensor> values = bind_inputs(m_source, inputs, Device::cpu(), "run");
  const int fault_step = executor_fault_step();
  int step = 0;
  for (int id = 0; id < static_cast<int>(m_source.nodes.size()); ++id) {
    const NodeData& n = m_source.at(id);
    Tensor& v = values[static_cast<size_t>(id)];
    if (n.kind == OpKind::Input) {
      v = v.cpu();
    } else if (n.is_leaf()) {
      v = n.value.cpu();
    } else {
      if (step++ == fault_step) throw_executor_fault("Executor::run (cpu)", fault_step, -1);
      std::vector<Tensor> ins;
      for (int in : n.inputs) ins.push_back(values[static_cast<size_t>(in)]);
      v = eval_node(n, ins);
    }
  }
  TensorMap out;
  for (const auto& [name, id] : m_source.outputs) out[name] = values[static_cast<size_t>(id)];
  ++m_stats.n_runs;
  ++m_stats.n_plain_runs;
  return out;
}

void ExecutorImpl::count_graph(cudaGraph_t g) {
  std::size_t n_nodes = 0;
  MT_CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &n_nodes));
  std::vector<cudaGraphNode_t> nodes(n_nodes);
  if (n_nodes > 0) MT_CUDA_CHECK(cudaGraphGetNodes(g, nodes.data(), &n_nodes));
  int kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    MT_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    kernels += type == cudaGraphNodeTypeKernel;
  }
  m_stats.n_graph_kernels = kernels;
  std::size_t n = 0;
  MT_CUDA_CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  if (n > 0) MT_CUDA_CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n));
  m_stats.n_graph_edges = static_cast<int>(n);
  m_stats.n_programmatic_edges = static_cast<int>(std::count_if(
      data.begin(), data.end(), [](const auto& e) { return e.type == cudaGraphDependencyTypeProgrammatic; }));
}

TensorMap ExecutorImpl::run(const TensorMap& inputs) {
  // One run at a time: a run writes the arena, the staging buffers, the outputs and the stats.
  std::lock_guard<std::mutex> lock(m_run_mutex);
  if (m_device.is_cpu()) return run_cpu_path(inputs);
  return run_device(inputs);
}

TensorMap ExecutorImpl::run_device(const TensorMap& inputs) {
  std::vector<Tensor> bound = bind_inputs(m_prog.g, inputs, m_device, "Executor::run");
  DeviceGuard device_guard(m_device);
  const cudaStream_t origin = current_stream(m_device.index());
  // A run on another stream than the last one (another thread, a StreamGuard) must not overwrite the arena
  // or the outputs while the last run may still use them.
  if (m_last_origin && origin != m_last_origin) m_run_done.wait(origin);
  m_last_origin = origin;
  note_stream(origin);
  m_forked.clear();
  // Whatever fails from here, every stream this run forked is joined back and the run's end is marked.
  OnUnwind join_on_failure([&]() noexcept { join_forked(origin); });

  bool all_host = true;
  for (int id : m_prog.order)
    if (m_prog.g.at(id).kind == OpKind::Input) all_host = all_host && bound[static_cast<size_t>(id)].is_cpu();
  if (m_opt.run.host_pipeline && m_pipeline_ok && all_host &&
      m_prog.g.at(m_prog.steps[0].root).shape.numel() >= 2 * m_opt.run.pipeline_chunk)
    return run_pipeline(bound);

  const bool timed = m_opt.run.profile;

  // Inputs: contiguous device tensors are read in place; the others go through persistent staging buffers.
  std::fill(m_bound.begin(), m_bound.end(), Tensor());
  m_copy_events.clear();
  bool any_copy = false;
  cudaStream_t copy_stream = nullptr;
  for (int id : m_prog.order) {
    const NodeData& n = m_prog.g.at(id);
    if (n.kind != OpKind::Input) continue;
    const Tensor& t = bound[static_cast<size_t>(id)];
    if (t.is_cuda() && t.is_contiguous()) {
      m_bound[static_cast<size_t>(id)] = t;
      continue;
    }
    Tensor& dev = m_staging_device[static_cast<size_t>(id)];
    if (!dev.defined()) {
      dev = empty(n.shape, n.dtype, m_device);
      note_buffer(dev.storage());
    }
    if (t.is_cuda()) {  // strided device input: gather on the origin stream
      launch_copy_strided(dev.data_ptr(), dev.layout(), t.data_ptr(), t.layout(), t.element_size(), t.numel(),
                          origin);
    } else {
      // Host input: pinned staging (unless already pinned and contiguous), async copy on a copy stream.
      if (!copy_stream) {
        copy_stream = pool_stream(m_device.index(), kStreamPoolSize - 1);
        if (copy_stream == origin) copy_stream = pool_stream(m_device.index(), kStreamPoolSize - 2);
        note_stream(copy_stream);
        m_run_done.wait(copy_stream);  // the staging buffers are free once the last run is done
        m_forked.push_back(copy_stream);
      }
      const void* src = t.data_ptr();
      if (!(t.is_pinned() && t.is_contiguous())) {
        Tensor& host = m_staging_host[static_cast<size_t>(id)];
        if (!host.defined()) {
          host = empty_pinned(n.shape, n.dtype);
          note_buffer(host.storage());
        }
        m_staging_done[static_cast<size_t>(id)].synchronize();  // the previous copy out of it has finished
        Tensor host_view = host;
        host_view.copy_(t);  // host to host (strided gather when needed)
        src = host.data_ptr();
      }
      if (timed) {
        m_copy_events.emplace_back(id, std::make_pair(Event(true), Event(true)));
        m_copy_events.back().second.first.record(copy_stream);
      }
      MT_CUDA_CHECK(cudaMemcpyAsync(dev.data_ptr(), src, t.nbytes(), cudaMemcpyHostToDevice, copy_stream));
      if (timed) m_copy_events.back().second.second.record(copy_stream);
      m_staging_done[static_cast<size_t>(id)].record(copy_stream);
      any_copy = true;
    }
    m_bound[static_cast<size_t>(id)] = dev;
  }
  if (any_copy) {
    m_copy_ready.record(copy_stream);
    m_copy_ready.wait(origin);
  }
  m_forked.clear();  // the copy stream is joined
  // Views follow their storage root (an input's may move between runs), in their planned layout.
  for (int id : m_prog.order) {
    if (m_mem.where[static_cast<size_t>(id)] != MemoryPlan::Where::Alias) continue;
    const NodeData& n = m_prog.g.at(id);
    const int root = m_mem.alias_of[static_cast<size_t>(id)];
    const Tensor base = node_tensor(root);
    m_bound[static_cast<size_t>(id)] =
        Tensor(base.storage(), n.dtype, n.shape, m_prog.strides[static_cast<size_t>(id)],
               base.offset() + m_prog.view_offset[static_cast<size_t>(id)]);
  }

  if (timed) {
    m_prof_base = Event(true);
    m_prof_base.record(origin);
  }
  // One process, several GPUs: the first launch of a kernel loads it (lazy module loading), and the load
  // waits for its GPU's queue to drain while holding a driver lock. With a collective spinning on that GPU
  // for a peer whose thread needs the lock to launch its part, that is a deadlock. So the first run loads
  // every kernel first, in a pass where each collective zeroes its output instead, and the ranks of the
  // process meet on the host before any of them launches a collective (Communicator::meet_local).
  if (m_stats.n_runs == 0 && m_opt.comm && m_opt.comm->size() > 1 &&
      std::any_of(m_prog.steps.begin(), m_prog.steps.end(),
                  [&](const Step& s) { return m_prog.g.at(s.root).is_collective(); })) {
    m_dry = true;
    try {
      launch_all(origin, false);
    } catch (...) {
      m_dry = false;
      throw;
    }
    m_dry = false;
    synchronize_stream(origin);
    m_opt.comm->meet_local();
  }
  const bool use_graph = m_opt.run.cuda_graph && m_capturable && !timed;
  std::vector<const void*> key;
  if (use_graph)
    for (int id : m_prog.order)
      if (m_prog.g.at(id).kind == OpKind::Input) key.push_back(m_bound[static_cast<size_t>(id)].data_ptr());
  if (use_graph && m_graph_valid && key == m_graph_key) {
    MT_CUDA_CHECK(cudaGraphLaunch(m_graph.exec, origin));
    ++m_stats.n_replays;
  } else if (use_graph && m_stats.n_plain_runs > 0) {
    // Capture on the executor's own streams (in the thread-local mode: other threads may keep using CUDA,
    // and the caller's stream too). Nothing inside allocates or synchronises.
    m_graph_valid = false;  // until this capture is instantiated
    while (static_cast<int>(m_capture_streams.size()) < std::max(m_sched.n_streams, 1))
      m_capture_streams.emplace_back(m_device.index());
    const cudaStream_t capture = m_capture_streams[0].get();
    MT_CUDA_CHECK(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal));
    try {
      launch_all(capture, false, true);  // on failure it joins its side streams first, so the capture can end
    } catch (...) {
      end_capture_discarding(capture, m_streams);
      throw;
    }
    cudaGraph_t captured = nullptr;
    MT_CUDA_CHECK(cudaStreamEndCapture(capture, &captured));
    CapturedGraph g(captured);
    count_graph(g.get());
    bool updated = false;
    if (m_graph.exec) {
      cudaGraphExecUpdateResultInfo info{};
      if (cudaGraphExecUpdate(m_graph.exec, g.get(), &info) == cudaSuccess) {
        updated = true;
        ++m_stats.n_graph_updates;
      } else {
        (void)cudaGetLastError();
        m_graph.reset();
        ++m_stats.n_reinstantiations;
      }
    }
    if (!updated) {
      m_graph.reset();
      MT_CUDA_CHECK(cudaGraphInstantiate(&m_graph.exec, g.get(), 0));
      ++m_stats.n_captures;
    }
    if (m_graph.graph) MT_CUDA_CHECK_NOTHROW(cudaGraphDestroy(m_graph.graph));
    m_graph.graph = g.release();
    m_graph_key = key;
    m_graph_valid = true;
    MT_CUDA_CHECK(cudaGraphLaunch(m_graph.exec, origin));
  } else {
    launch_all(origin, timed);
    ++m_stats.n_plain_runs;
  }
  m_run_done.record(origin);
  ++m_stats.n_runs;
  if (timed) collect_profile(origin);

  TensorMap out;
  for (const auto& [name, id] : m_prog.g.outputs) out[name] = node_tensor(id);
  return out;
}

}  // namespace detail
}  // namespace mt
