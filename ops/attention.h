// Scaled dot-product attention as torch.nn.functional.scaled_dot_product_attention computes it, fused: one
// kernel per (batch, head, block of queries) streams K and V through an online softmax, so nothing of size
// Tq x Tk is written to memory. float32.
#pragma once

#include <optional>

#include "minitensor/ops/gemm.h"
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
  // The products' arithmetic on the GPU (unset: default_math_mode()): FP32 on the CUDA cores; TF32x3 on the
  // tensor cores with float32-class accuracy; TF32 on the tensor cores, about 1e-3 relative. The CPU and the
  // composed path (head dims without a fused kernel) compute in float32 or better whatever the mode.
  std::optional<MathMode> math;
};

// q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv), the same leading dims (batch, heads); the result is
// (..., Tq, Dv), contiguous. A row whose keys are all masked out (every score -inf) gives zeros, as PyTorch's
// fused kernels do. Head dims 32, 64 and 128 (D == Dv) run the fused kernel; others are composed from
// matmul and softmax.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options = {});

// The same written into `out` (float32, the result's shape, on q's device; contiguous, or of rank <= 4 with
// unit stride along the last dim, e.g. a permuted view of a (B, T, H, D) buffer); returns out. With the
// fused kernel nothing is allocated (a CUDA graph may capture it).
Tensor& attention_out(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                      const AttentionOptions& options = {});

// The shape rule, shared by the eager op and the graph builder: q (..., Tq, D), k (..., Tk, D), v (..., Tk,
// Dv) with equal leading dims, and the mask (when given) broadcastable to the scores (..., Tq, Tk). Returns
// the result's shape (..., Tq, Dv); ShapeError naming `op` otherwise.
Shape attention_shape(const Shape& q, const Shape& k, const Shape& v, const Shape* mask,
                      const std::string& op);
// The scores' scale: `scale`, or 1 / sqrt(head_dim); InvalidArgument naming `op` when not finite.
double attention_scale(std::optional<double> scale, std::int64_t head_dim, const std::string& op);

// Whether attention over these extents runs the fused kernel on a GPU (else it is composed from matmul and
// softmax, which allocates).
bool attention_is_fused(std::int64_t head_dim, std::int64_t value_dim, std::int64_t keys);

}  // namespace mt
