// Scaled dot-product attention as torch.nn.functional.scaled_dot_product_attention computes it, fused: one
// kernel per (batch, head, block of queries) streams K and V through an online softmax, so nothing of size
// Tq x Tk is written to memory. float32.
#pragma once

#include <optional>

#include "minitensor/tensor/tensor.h"

namespace mt {

struct AttentionOptions {
  // Query i sees keys j <= i (PyTorch's is_causal: the mask aligned top-left).
  bool causal = false;
  // Added to the scores before the softmax; broadcastable to (..., Tq, Tk) (-inf removes a key). Undefined:
  // none.
  Tensor mask;
  // The scores' scale; unset: 1 / sqrt(head_dim).
  std::optional<double> scale;
};

// q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv), the same leading dims (batch, heads); the result is
// (..., Tq, Dv), contiguous. A row whose keys are all masked out (every score -inf) gives zeros, as PyTorch's
// fused kernels do. Head dims 32, 64 and 128 (D == Dv) run the fused kernel; others are composed from
// matmul and softmax.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options = {});

}  // namespace mt
