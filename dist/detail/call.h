// One collective call from start to finish: the communicator checked, the stream picked, contiguous buffers
// made, the NCCL call's result handled, and what must wait until NCCL has the operation (copies into
// non-contiguous outputs, completion events) run then: at once outside a Group, at the group's end inside
// one. Included by the sources of dist/ only, and only when minitensor is built with NCCL (MT_HAS_NCCL).
#pragma once

#include <nccl.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "minitensor/dist/collectives.h"
#include "minitensor/dist/detail/comm_state.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/stream.h"
#include "minitensor/tensor/tensor.h"

namespace mt::dist::detail {

// The calling thread's open Group (dist::Group), if any.
struct GroupState {
  int depth = 0;
  std::vector<std::shared_ptr<CommState>> comms;  // communicators with work in the group
  std::vector<std::function<void()>> after;       // run in order once the group has launched
};
GroupState& group_state();

ncclDataType_t nccl_dtype(DType dtype, const char* op);  // DTypeError for a dtype NCCL has no type for
ncclRedOp_t nccl_op(ReduceOp op);

// What checked mode compares across ranks: the collective, its reduce op and argument (root, dim), the dtype
// and the shape of the input.
struct Signature {
  enum Kind : std::int64_t { AllReduce = 1, AllGather, ReduceScatter, Broadcast, Barrier };
  Kind kind = AllReduce;
  std::int64_t reduce_op = -1;  // ReduceOp, or -1
  std::int64_t arg = 0;         // broadcast: root; all_gather, reduce_scatter: dim
  DType dtype = DType::F32;
  Shape shape;
};

class Call {
 public:
  // Validates the communicator (InvalidArgument, DistError when aborted), makes its device current and the
  // call's stream the current stream for the call's lifetime: options.stream, else current_stream; with
  // async_op the communicator's stream, made to wait for that one.
  Call(Communicator& comm, const char* op, const CollectiveOptions& options);
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  CommState& state() { return *m_state; }
  // DeviceError unless `t` is on the communicator's device.
  void check_device(const Tensor& t, const char* what) const;
  ncclComm_t comm() const { return m_state->comm; }
  cudaStream_t stream() const { return m_stream; }
  const std::string& op() const { return m_op; }

  // Checked mode (when on, and not inside a Group or a capture): all-gathers every rank's signature and
  // throws ShapeError / DTypeError / InvalidArgument when one differs from rank 0's; every rank reaches the
  // same verdict. Waits on the host (polling, bounded).
  void check_across_ranks(const Signature& signature);

  // `t` as a contiguous tensor on the call's stream (t itself when it already is).
  Tensor contiguous(const Tensor& t);
  // A contiguous tensor the collective may write for `out`: out itself when contiguous, else a new buffer.
  Tensor output_buffer(const Tensor& out);
  // Copies `buffer` into `out` once the collective is launched, unless they are the same memory.
  void copy_back(const Tensor& out, const Tensor& buffer);
  // Runs `fn` once the collective is launched, with the call's device and stream current.
  void after(std::function<void()> fn);

  // Makes the NCCL call `nccl_call` and handles its return code: inside a group NCCL only queues it and
  // only errors matter; outside, a blocking communicator launches it under the watchdog (it may wait for
  // peers) and a nonblocking one's ncclInProgress is waited out.
  template <class Fn>
  void launch(Fn&& nccl_call) {
    handle(m_grouped ? nccl_call() : watched({m_state}, m_op, nccl_call));
  }
  // Records every user tensor's use on the call's stream (record_stream), runs or defers what waits for the
  // launch, and returns the Work (pending with async_op).
  Work finish(std::initializer_list<Tensor> users);

 private:
  void handle(ncclResult_t result);

  std::shared_ptr<CommState> m_state_owner;
  CommState* m_state;
  std::string m_op;
  bool m_async, m_grouped, m_capturing;
  cudaStream_t m_stream = nullptr;
  std::optional<DeviceGuard> m_device_guard;
  std::optional<StreamGuard> m_stream_guard;
  std::vector<std::function<void()>> m_after;
  std::vector<Tensor> m_alive;  // buffers the launched operation uses, kept until the launch inside a group
};

// Throws unless `t` is a defined tensor (InvalidArgument) on a CUDA device (DeviceError), naming `op` and
// `what` ("the input").
void check_tensor(const Tensor& t, const char* op, const char* what);

}  // namespace mt::dist::detail
