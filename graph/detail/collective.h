// Slice, concat and collective nodes (graph/collective.cpp): what the CPU path, the executor and the compile
// steps need of them.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "minitensor/graph/detail/program.h"

namespace mt::detail {

// The CPU path (eval_node) of a Slice, Concat or collective node: collectives as a world of one (the
// identity), an InvalidArgument for a node of a larger world (check_collectives refuses those first).
Tensor eval_layout_or_collective(const NodeData& n, const std::vector<Tensor>& ins);

// The executor's step for such a node: slice and concat copy into `out` (the step's planned buffer) on
// `stream`; a collective runs through `comm` on `stream` (no host wait; capturable unless
// collective_allocates).
void launch_layout_or_collective(const NodeData& n, const std::vector<Tensor>& ins, const Tensor& out,
                                 dist::Communicator* comm, cudaStream_t stream);

// At executor construction, before anything touches the device: every collective node of `g` can run on
// `device` with `comm` (see ExecOptions::comm for the rules and the errors).
void check_collectives(const GraphData& g, Device device, const dist::Communicator* comm, const char* op);

// A gather or scatter along another dim than 0 stages its rank blocks in a buffer it allocates: the step
// cannot be captured into a CUDA graph.
bool collective_allocates(const NodeData& n);

// Puts every collective step on the stream of the first one, so that a rank issues its collectives in the
// graph's step order on one stream, as every other rank does: NCCL needs the same order on every rank, and
// one stream keeps two collectives of a rank from waiting on each other across streams.
void pin_collective_streams(const Program& p, std::vector<int>& step_stream);

}  // namespace mt::detail
