// The life of one collective call (dist/detail/call.h).
#if MT_HAS_NCCL

#include "minitensor/dist/detail/call.h"

#include <algorithm>
#include <utility>

#include "minitensor/runtime/error.h"
#include "minitensor/tensor/overlap.h"

namespace mt::dist::detail {

GroupState& group_state() {
  thread_local GroupState state;
  return state;
}

ncclDataType_t nccl_dtype(DType dtype, const char* op) {
  switch (dtype) {
    case DType::F32:
      return ncclFloat32;
    case DType::I32:
      return ncclInt32;
    case DType::U8:
      return ncclUint8;
  }
  MT_THROW(DTypeError, "mt::dist ", op, ": dtype ", dtype_name(dtype), " has no NCCL type");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
    case ReduceOp::Prod:
      return ncclProd;
  }
  MT_THROW(InvalidArgument, "mt::dist: unknown reduce op ", static_cast<int>(op));
}

void check_tensor(const Tensor& t, const char* op, const char* what) {
  MT_CHECK(t.defined(), InvalidArgument, "mt::dist ", op, ": ", what, " is an undefined tensor");
  MT_CHECK(t.is_cuda(), DeviceError, "mt::dist ", op, ": ", what, " is on ", t.device(),
           "; collectives take CUDA tensors");
}

Call::Call(Communicator& comm, const char* op, const CollectiveOptions& options)
    : m_state_owner(comm.state()),
      m_state(&usable(comm.state(), op)),
      m_op(op),
      m_async(options.async_op),
      m_grouped(group_state().depth > 0) {
  m_device_guard.emplace(m_state->device);
  const cudaStream_t caller = options.stream ? options.stream : current_stream(m_state->device);
  m_stream = caller;
  if (m_async) {
    m_stream = m_state->own_stream();
    // The communicator's stream starts where the caller's stream is now.
    m_state->ready.record(caller);
    m_state->ready.wait(m_stream);
  }
  m_capturing = capturing(m_stream);
  m_stream_guard.emplace(m_stream, m_state->device);
  if (m_grouped) {
    GroupState& group = group_state();
    if (std::find(group.comms.begin(), group.comms.end(), m_state_owner) == group.comms.end())
      group.comms.push_back(m_state_owner);
  }
}

void Call::check_device(const Tensor& t, const char* what) const {
  MT_CHECK(t.device().index() == m_state->device, DeviceError, "mt::dist ", m_op, ": ", what, " is on ",
           t.device(), " but the communicator (rank ", m_state->rank, ") is on cuda:", m_state->device);
}

Tensor Call::contiguous(const Tensor& t) {
  // Under the call's stream guard: the copy, and the buffer's allocation, are on the call's stream.
  Tensor out = t.contiguous();
  if (m_grouped) m_alive.push_back(out);
  return out;
}

Tensor Call::output_buffer(const Tensor& out) {
  if (out.is_contiguous()) return out;
  check_no_self_overlap(out, m_op.c_str(), "the output");
  Tensor buffer = empty(out.shape(), out.dtype(), out.device());
  if (m_grouped) m_alive.push_back(buffer);
  return buffer;
}

void Call::copy_back(const Tensor& out, const Tensor& buffer) {
  if (out.data_ptr() == buffer.data_ptr() && out.strides() == buffer.strides()) return;
  after([out, buffer] {
    Tensor target = out;
    target.copy_(buffer);
  });
}

void Call::after(std::function<void()> fn) {
  const int device = m_state->device;
  const cudaStream_t stream = m_stream;
  m_after.push_back([device, stream, fn = std::move(fn)] {
    DeviceGuard device_guard(device);
    StreamGuard stream_guard(stream, device);
    fn();
  });
}

void Call::handle(ncclResult_t result) {
  if (m_grouped) {
    // Inside a group NCCL only queues the operation; ncclGroupEnd reports its progress.
    if (result != ncclSuccess && result != ncclInProgress) fail(*m_state, result, m_op);
    return;
  }
  check(*m_state, result, m_op);
}

Work Call::finish(std::initializer_list<Tensor> users) {
  std::shared_ptr<WorkState> work;
  if (m_async) {
    work = std::make_shared<WorkState>();
    work->comm = m_state_owner;
    work->device = m_state->device;
    work->op = m_op;
  }
  const int device = m_state->device;
  const cudaStream_t stream = m_stream;
  auto tail = [state = m_state_owner, device, stream, work] {
    DeviceGuard guard(device);
    state->track(stream);
    if (work) {
      work->done.record(stream);
      work->launched = true;
    }
  };
  if (m_grouped) {
    // The operation is launched at the group's end: until then the user's tensors stay alive here, so that
    // the allocator cannot hand their memory out to work queued before the launch.
    for (const Tensor& t : users) m_alive.push_back(t);
    GroupState& group = group_state();
    for (auto& fn : m_after) group.after.push_back(std::move(fn));
    group.after.push_back([alive = std::move(m_alive), stream] {
      for (const Tensor& t : alive) ::mt::detail::record_stream(t, stream);
    });
    group.after.push_back(std::move(tail));
  } else {
    for (const Tensor& t : users) ::mt::detail::record_stream(t, stream);
    for (auto& fn : m_after) fn();
    tail();
  }
  m_after.clear();
  return work ? Work(std::move(work)) : Work();
}

}  // namespace mt::dist::detail

#endif  // MT_HAS_NCCL
