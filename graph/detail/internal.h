// What the graph's implementation files share: input validation and node evaluation through the eager ops.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "minitensor/graph/detail/ir.h"

namespace mt::detail {

// Checks `inputs` against the graph's Input nodes: missing, unknown (misnamed) names, shapes and dtypes; and,
// when `device` is a CUDA device, that each input lives on the host or on that device. Returns the tensor of
// each Input node, indexed by node id (undefined for other nodes).
std::vector<Tensor> bind_inputs(const GraphData& g, const TensorMap& inputs, Device device, const char* op);

// The device a graph runs on: `requested` when given (checked later, where it is used: a missing GPU is a
// DeviceError); else cuda:0 when a CUDA device is present, else the CPU, with a one-line notice on stderr the
// first time in the process (ExecOptions::device).
Device resolve_device(const std::optional<Device>& requested);
// Test-only: the next CPU fallback prints its notice again.
void reset_cpu_fallback_notice();

// Throws InvalidArgument when the graph declares no outputs.
void require_outputs(const GraphData& g, const char* op);

// Evaluates one non-leaf node through the eager ops on the device its inputs live on (allocating its result).
Tensor eval_node(const NodeData& n, const std::vector<Tensor>& ins);

// The host pipeline's pieces of `total` elements, in order: (offset, length). Pieces are `chunk` elements,
// except the first and the last `chunk` elements, which ramp up and down in halves (chunk/8, chunk/8,
// chunk/4, chunk/2 ... chunk/2, chunk/4, chunk/8, chunk/8; no piece under 64 Ki elements unless the whole
// is): the first piece's copy in and the last piece's copy out overlap nothing, so they are kept short.
// got against ref (check()): the largest absolute and relative errors, the NMSE, the largest finite |ref|,
// and whether NaN/Inf sit at the same places (and the sizes match).
struct Diff {
  double max_abs = 0, max_rel = 0, nmse = 0, max_ref = 0;
  bool pattern_ok = true;
};
Diff diff_tensors(const Tensor& got, const Tensor& ref);
std::vector<double> as_doubles(const Tensor& t);
double max_abs_of(const Tensor& t);

struct PipelinePiece {
  std::int64_t offset, length;
};
std::vector<PipelinePiece> pipeline_pieces(std::int64_t total, std::int64_t chunk);

}  // namespace mt::detail
