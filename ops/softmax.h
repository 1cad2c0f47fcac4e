// Softmax and log-softmax along one axis, one fused pass (online max and sum), stable for large inputs.
// float32; the result has x's shape, contiguous.
#pragma once

#include <cstdint>

#include "minitensor/tensor/tensor.h"

namespace mt {

// Negative axes count from the end.
Tensor softmax(const Tensor& x, std::int64_t axis = -1);
Tensor log_softmax(const Tensor& x, std::int64_t axis = -1);

}  // namespace mt
