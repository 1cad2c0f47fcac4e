// Self-overlap of a strided view: a tensor that is written (an op's `out`, copy_'s destination, an in-place
// target) must address each of its elements at its own memory location, or the result would depend on the
// order in which the elements are written.
#pragma once

#include "minitensor/tensor/tensor.h"

namespace mt {

// True when two distinct indices of (shape, strides) may address the same element. Conservative: the dims of
// extent > 1 sorted by |stride| must each step past everything the smaller ones span (stride 0 with extent >
// 1 always overlaps); a layout that fails this is reported as overlapping even where it happens not to be.
bool may_self_overlap(const Shape& shape, const Shape& strides);

// Throws InvalidArgument, naming `op`, `what` ("the output", "the destination") and t's shape and strides,
// when t may overlap itself (may_self_overlap).
void check_no_self_overlap(const Tensor& t, const char* op, const char* what = "the output");

}  // namespace mt
