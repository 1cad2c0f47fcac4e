// Collectives on Tensors, through NCCL.
//
// Every collective:
//   - takes CUDA tensors on its communicator's device: a CPU tensor, or one on another device, is a
//     DeviceError; a dtype NCCL cannot carry is a DTypeError;
//   - is ordered on the stream of the tensors' device that the ops would use (current_stream), or on
//     options.stream; with options.async_op it runs on the communicator's own stream after that stream's
//     work so far, and returns a pending Work (wait() before using the outputs);
//   - takes non-contiguous inputs (copied to a contiguous buffer first) and outputs (written through one);
//   - tells the caching allocator about every buffer used on a stream other than its own (record_stream), so
//     that freeing a tensor while the collective runs is safe;
//   - in checked mode (CommOptions::checked) first all-gathers the shapes, dtypes and arguments of every rank
//     and throws ShapeError / DTypeError / InvalidArgument on a mismatch, on every rank alike.
// All ranks call the same collectives in the same order with the same shapes; a rank that does not gives its
// peers a DistError once the communicator's timeout has passed, at their next wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "minitensor/dist/communicator.h"
#include "minitensor/dist/work.h"
#include "minitensor/tensor/tensor.h"

namespace mt::dist {

enum class ReduceOp : std::uint8_t { Sum, Avg, Max, Min, Prod };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", ...

struct CollectiveOptions {
  cudaStream_t stream = nullptr;  // order on this stream instead of current_stream(device)
  bool async_op = false;          // run on the communicator's stream and return a pending Work
};

// In place: every rank's `tensor` becomes the reduction over the ranks. Avg divides by the world size
// (integer division for integer dtypes).
Work all_reduce(const Tensor& tensor, Communicator& comm, ReduceOp op = ReduceOp::Sum,
                const CollectiveOptions& options = {});
// Out of place: input and output of the same shape and dtype (output may be the input).
Work all_reduce(const Tensor& input, const Tensor& output, Communicator& comm, ReduceOp op = ReduceOp::Sum,
                const CollectiveOptions& options = {});

// input: the same shape S on every rank; output: all_gather_shape(S) = S with S[dim] * world, rank r's input
// at [r * S[dim], (r + 1) * S[dim]) along dim. dim may be negative.
Work all_gather(const Tensor& input, const Tensor& output, Communicator& comm, std::int64_t dim = 0,
                const CollectiveOptions& options = {});
Shape all_gather_shape(const Shape& input, int world_size, std::int64_t dim = 0);

// input: the same shape S on every rank, S[dim] a multiple of the world size; output:
// reduce_scatter_shape(S) = S with S[dim] / world, rank r getting block r of the reduction along dim.
Work reduce_scatter(const Tensor& input, const Tensor& output, Communicator& comm,
                    ReduceOp op = ReduceOp::Sum, std::int64_t dim = 0, const CollectiveOptions& options = {});
Shape reduce_scatter_shape(const Shape& input, int world_size, std::int64_t dim = 0);

// In place: every rank's `tensor` becomes root's.
Work broadcast(const Tensor& tensor, int root, Communicator& comm, const CollectiveOptions& options = {});

// Point to point: `peer` receives with recv what this rank sends (same element count and dtype). A send and
// the matching recv of one thread that drives both ranks, or a ring of them, go inside one Group.
Work send(const Tensor& tensor, int peer, Communicator& comm, const CollectiveOptions& options = {});
Work recv(const Tensor& tensor, int peer, Communicator& comm, const CollectiveOptions& options = {});

// Every rank reaches the barrier before any passes it: a one-element all-reduce, after which the host waits
// for it (bounded by the timeout); with async_op the Work is that wait. No host wait inside a Group or during
// CUDA-graph capture.
Work barrier(Communicator& comm, const CollectiveOptions& options = {});

// ncclGroupStart / ncclGroupEnd as a guard: collectives issued between its construction and end() (or its
// destruction) are launched together, which is how one thread drives several GPUs (one communicator each) or
// a send with its recv. Works and copies into non-contiguous outputs complete at end(). The collectives of
// one group must not read what another of them writes (NCCL may run them in any order). Groups nest; the
// outermost end() launches. Checked mode is off inside a group (it needs a host wait).
class Group {
 public:
  Group();
  ~Group();  // ends the group if end() was not called, logging instead of throwing
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Launches the group, waits (bounded) until every communicator in it has accepted its work, then runs what
  // had to wait for the launch. DistError on an NCCL error or a timeout.
  void end();

 private:
  bool m_open = true;
};

}  // namespace mt::dist
