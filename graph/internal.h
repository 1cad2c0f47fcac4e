// What the graph's implementation files share: input validation and node evaluation through the eager ops.
#pragma once

#include <vector>

#include "graph/ir.h"

namespace mt::detail {

// Checks `inputs` against the graph's Input nodes: missing, unknown (misnamed) names, shapes and dtypes; and,
// when `device` is a CUDA device, that each input lives on the host or on that device. Returns the tensor of
// each Input node, indexed by node id (undefined for other nodes).
std::vector<Tensor> bind_inputs(const GraphData& g, const TensorMap& inputs, Device device, const char* op);

// Throws InvalidArgument when the graph declares no outputs.
void require_outputs(const GraphData& g, const char* op);

// Evaluates one non-leaf node through the eager ops on the device its inputs live on (allocating its result).
Tensor eval_node(const NodeData& n, const std::vector<Tensor>& ins);

}  // namespace mt::detail
