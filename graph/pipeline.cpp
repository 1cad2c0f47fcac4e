// The host pipeline: an elementwise graph over large host arrays runs in chunks, round robin over streams, so
// the host-to-device copies of one chunk overlap the kernel and the device-to-host copy of the previous ones.
//
// Napkin maths: with H2D and D2H on separate copy engines, a run takes about max(total H2D, total D2H) plus
// the first piece's copy in and the last piece's kernel and copy out, which overlap nothing. Chunks of 4 M
// floats (16 MB) amortise the per-copy overhead; the ends ramp down to 512 Ki floats (2 MB), so the copies
// that overlap nothing move an eighth of a chunk each.
#include <algorithm>
#include <cstring>

#include "minitensor/graph/detail/executor_impl.h"
#include "minitensor/ops/ops.h"
#include "minitensor/runtime/stream.h"

namespace mt::detail {

std::vector<PipelinePiece> pipeline_pieces(std::int64_t total, std::int64_t chunk) {
  constexpr std::int64_t kMinPiece = std::int64_t(1) << 16;
  constexpr int kHalvings = 3;
  std::vector<PipelinePiece> out;
  if (total <= 0) return out;
  chunk = std::max<std::int64_t>(1, chunk);
  // The sizes of one ramp, largest first: chunk/2, chunk/4, ..., and the rest of `n` elements.
  auto ramp = [&](std::int64_t n) {
    std::vector<std::int64_t> sizes;
    for (int i = 0; i < kHalvings && n / 2 >= kMinPiece; ++i) {
      sizes.push_back(n / 2);
      n -= n / 2;
    }
    sizes.push_back(n);
    return sizes;
  };
  const std::int64_t head = std::min(total, chunk), tail = std::min(total - head, chunk);
  std::int64_t off = 0;
  auto put = [&](std::int64_t len) {
    if (len > 0) out.push_back({off, len});
    off += len;
  };
  const std::vector<std::int64_t> up = ramp(head);
  for (auto it = up.rbegin(); it != up.rend(); ++it) put(*it);
  while (off + chunk < total - tail) put(chunk);
  put(total - tail - off);  // the middle's last, shorter piece (none when it divides evenly)
  for (std::int64_t len : ramp(tail)) put(len);
  return out;
}

TensorMap ExecutorImpl::run_pipeline(const std::vector<Tensor>& bound) {
  const Step& step = m_prog.steps[0];
  const NodeData& root = m_prog.g.at(step.root);
  const std::int64_t total = root.shape.numel();
  const std::int64_t chunk = std::max<std::int64_t>(1, m_opt.run.pipeline_chunk);
  const int n_slots = std::clamp(m_opt.run.pipeline_streams, 1, kStreamPoolSize - 1);
  const std::size_t es = dtype_size(root.dtype);
  const int n_in = static_cast<int>(step.reads.size());
  const cudaStream_t origin = current_stream(m_device.index());  // run_device made it m_last_origin
  const bool timed = m_opt.run.profile;

  std::vector<Tensor> inputs;
  bool all_pinned = true;
  for (int r : step.reads) {
    inputs.push_back(bound[static_cast<size_t>(r)].contiguous());
    all_pinned = all_pinned && inputs.back().is_pinned();
  }

  // Persistent buffers: per slot, one chunk per input and one for the output; pinned staging when needed.
  const std::size_t chunk_bytes = align_up(static_cast<std::size_t>(chunk) * es, kArenaAlignment);
  const std::size_t device_bytes = chunk_bytes * static_cast<std::size_t>(n_slots * (n_in + 1));
  if (!m_pipe_device || m_pipe_device->nbytes() < device_bytes) {
    m_pipe_device =
        std::make_shared<Storage>(cuda_allocator(m_device.index()).allocate(device_bytes, origin));
    note_buffer(m_pipe_device);
  }
  if (m_pipe_out_host.empty() || !(m_pipe_out_host[0].shape() == root.shape)) {
    m_pipe_out_host = {empty_pinned(root.shape, root.dtype)};
    note_buffer(m_pipe_out_host[0].storage());
  }
  if (!all_pinned && static_cast<int>(m_pipe_stage.size()) != n_slots * n_in) {
    m_pipe_stage.clear();
    for (int i = 0; i < n_slots * n_in; ++i) {
      m_pipe_stage.push_back(empty_pinned({chunk}, root.dtype));
      note_buffer(m_pipe_stage.back().storage());
    }
  }
  m_pipe_slot_free.resize(static_cast<size_t>(n_slots));
  auto device_chunk = [&](int slot, int j) {  // j == n_in: the output
    return static_cast<char*>(m_pipe_device->data()) +
           chunk_bytes * static_cast<std::size_t>(slot * (n_in + 1) + j);
  };

  std::vector<cudaStream_t> streams;
  for (int s = 0; static_cast<int>(streams.size()) < n_slots; ++s) {
    cudaStream_t st = pool_stream(m_device.index(), s);
    if (st != origin) streams.push_back(st);
  }
  // A failure from here on is joined back by run_device (m_forked).
  for (cudaStream_t st : streams) note_stream(st);
  m_fork.record(origin);
  for (cudaStream_t st : streams) {
    m_fork.wait(st);
    m_forked.push_back(st);
  }
  if (timed) {
    m_prof_base = Event(true);
    m_prof_base.record(origin);
  }
  m_pipe_events.clear();
  const std::vector<PipelinePiece> pieces = pipeline_pieces(total, chunk);
  const auto n_chunks = static_cast<std::int64_t>(pieces.size());
  if (timed) m_pipe_events.reserve(static_cast<size_t>(3 * n_chunks));
  char* out_host = static_cast<char*>(m_pipe_out_host[0].data_ptr());
  const int fault_step = executor_fault_step();
  for (std::int64_t c = 0; c < n_chunks; ++c) {
    const int slot = static_cast<int>(c % n_slots);
    cudaStream_t st = streams[static_cast<size_t>(slot)];
    const std::int64_t off = pieces[static_cast<size_t>(c)].offset,
                       len = pieces[static_cast<size_t>(c)].length;
    const std::size_t bytes = static_cast<std::size_t>(len) * es;
    auto mark = [&](const char* what) -> PipeEvent& {
      m_pipe_events.push_back(PipeEvent{static_cast<int>(c), slot, what});
      return m_pipe_events.back();
    };
    PipeEvent* ev = timed ? &mark("H2D") : nullptr;
    if (ev) ev->start.record(st);
    if (!all_pinned)
      m_pipe_slot_free[static_cast<size_t>(slot)].synchronize();  // staging of this slot is free
    for (int j = 0; j < n_in; ++j) {
      const char* src = static_cast<const char*>(inputs[static_cast<size_t>(j)].data_ptr()) +
                        static_cast<std::size_t>(off) * es;
      if (!all_pinned) {
        char* stage = static_cast<char*>(m_pipe_stage[static_cast<size_t>(slot * n_in + j)].data_ptr());
        std::memcpy(stage, src, bytes);
        src = stage;
      }
      MT_CUDA_CHECK(cudaMemcpyAsync(device_chunk(slot, j), src, bytes, cudaMemcpyHostToDevice, st));
    }
    if (!all_pinned) m_pipe_slot_free[static_cast<size_t>(slot)].record(st);
    if (ev) ev->end.record(st);
    if (c == fault_step)
      throw_executor_fault("Executor::run (host pipeline)", static_cast<int>(c), m_device.index());
    ev = timed ? &mark("kernel") : nullptr;
    if (ev) ev->start.record(st);
    if (step.kind == Step::Kind::Fused) {
      std::vector<const void*> ptrs;
      for (int j = 0; j < n_in; ++j) ptrs.push_back(device_chunk(slot, j));
      m_kernels[0]->launch(len, ptrs, device_chunk(slot, n_in), st);
    } else {
      StreamGuard guard(st, m_device.index());
      auto chunk_tensor = [&](int j) {
        const std::size_t byte_off =
            static_cast<std::size_t>(device_chunk(slot, j) - static_cast<char*>(m_pipe_device->data()));
        return Tensor(m_pipe_device, root.dtype, Shape{len}, Shape{1},
                      static_cast<std::int64_t>(byte_off / es));
      };
      Tensor out = chunk_tensor(n_in);
      switch (root.kind) {
        case OpKind::Unary:
          unary(root.unary, chunk_tensor(0), out);
          break;
        case OpKind::Binary:
          binary(root.binary, chunk_tensor(0), chunk_tensor(n_in > 1 ? 1 : 0), out);
          break;
        case OpKind::BinaryScalar:
          binary_scalar(root.binary, chunk_tensor(0), root.scalar, out);
          break;
        case OpKind::ScalarBinary:
          scalar_binary(root.binary, root.scalar, chunk_tensor(0), out);
          break;
        case OpKind::Clamp:
          clamp(chunk_tensor(0), root.scalar, root.scalar2, out);
          break;
        default:
          MT_THROW(InvalidArgument, "host pipeline: ", node_op_string(root), " is not elementwise");
      }
    }
    if (ev) ev->end.record(st);
    ev = timed ? &mark("D2H") : nullptr;
    if (ev) ev->start.record(st);
    MT_CUDA_CHECK(cudaMemcpyAsync(out_host + static_cast<std::size_t>(off) * es, device_chunk(slot, n_in),
                                  bytes, cudaMemcpyDeviceToHost, st));
    if (ev) ev->end.record(st);
  }
  for (size_t k = 0; k < streams.size(); ++k) {
    m_join[k + 1].record(streams[k]);
    m_join[k + 1].wait(origin);
  }
  m_forked.clear();
  m_run_done.record(origin);
  synchronize_stream(origin);  // host outputs: the data must be there when run() returns
  ++m_stats.n_runs;
  ++m_stats.n_pipelined_runs;

  if (timed) {
    m_trace.clear();
    m_profile.clear();
    for (const auto& e : m_pipe_events) {
      const double start = 1000.0 * Event::elapsed_ms(m_prof_base, e.start);
      const double dur = 1000.0 * Event::elapsed_ms(e.start, e.end);
      m_trace.push_back({str(e.what, " chunk ", e.chunk), e.what, str("stream ", e.slot), start, dur});
      m_profile.push_back(NodeTiming{str(e.what, " #", e.chunk), e.what, e.slot, start, dur});
    }
  }
  TensorMap out;
  for (const auto& o : m_prog.g.outputs) out[o.first] = m_pipe_out_host[0];
  return out;
}

}  // namespace mt::detail
