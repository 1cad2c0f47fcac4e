// SGEMM: C = alpha * op(A) * op(B) + beta * C, float32, row-major, op = identity or transpose, leading
// dimensions taken from the tensors' strides (strided and transposed views need no copy), batched.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "minitensor/tensor/tensor.h"

namespace mt {

namespace detail::gemm {
struct WgmmaPackedB;
}
// A B operand packed once for the TF32 modes' Hopper kernels (pack_b).
using PackedOperand = detail::gemm::WgmmaPackedB;

// Gelu is the exact erf form (PyTorch's gelu), GeluTanh the tanh approximation (approximate='tanh'); the math
// is ops/functors.h's fn::gelu / fn::gelu_tanh.
enum class Activation { None, Relu, Gelu, GeluTanh };
enum class MathMode {
  FP32,    // CUDA-core FMA, full float32 (the default)
  TF32,    // tensor cores, TF32 inputs (about 1e-3 relative error)
  TF32x3,  // tensor cores, each operand split into TF32 big + small parts, 3 products: float32-class accuracy
           // (shapes without a whole 128x128 tile run the FP32 kernels: faster there, and as accurate)
};
const char* math_mode_name(MathMode m);

// The process-wide default math mode (FP32 unless changed); a per-call mode overrides it.
void set_default_math_mode(MathMode mode);
MathMode default_math_mode();

struct GemmOptions {
  float alpha = 1.0f;
  float beta = 0.0f;             // beta == 0: C is not read (NaN in C does not leak into the result)
  std::optional<MathMode> math;  // unset: default_math_mode()
  Activation activation = Activation::None;  // applied after alpha*AB + beta*C (+ bias)
  // Then each row of the result (along n) replaced by its softmax, as softmax(c, -1) would: done by the pass
  // that adds split K's partials where there is one, else by one pass over the product staged in the
  // stream's split-K scratch (which grows to batch * m * n floats and is kept).
  bool softmax = false;
  // op(b) packed ahead of time (pack_b, from this very b): the TF32 modes' Hopper kernels then pack only a.
  // Ignored where the launch does not use it (another math mode or kernel, another tile width).
  std::shared_ptr<const PackedOperand> packed_b;
  // CUDA: the first call for a (shape, layout, math mode, device) times the dispatcher's pick and a few
  // alternatives on the call's stream and keeps the fastest, in memory and in ~/.cache/minitensor/
  // gemm_tune.json ($MT_GEMM_TUNE_FILE); later calls, and other processes on the same device, take it. Inside
  // a CUDA graph capture the dispatcher's pick runs and a later call tunes. MT_GEMM_TUNE=1 sets it for every
  // call.
  bool tune = false;
};

// a: (..., m, k), b: (..., k, n) -> (..., m, n); NumPy matmul semantics for the batch dims (broadcast); 1-D
// operands are promoted as NumPy does.
Tensor matmul(const Tensor& a, const Tensor& b, std::optional<MathMode> math = std::nullopt);

// The full BLAS form, in place on c: c = act(alpha * op(a) * op(b) + beta * c [+ bias]), then the row softmax
// with GemmOptions::softmax.
// a: (..., m, k) or, with trans_a, (..., k, m); b: (..., k, n) or, with trans_b, (..., n, k); c: (..., m, n).
// bias, when defined, has shape (n) and is broadcast over rows. Returns c.
Tensor& gemm(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a = false, bool trans_b = false,
             const GemmOptions& options = {}, const Tensor& bias = Tensor());

// Packs b (k, n), a CUDA float32 matrix, for GEMMs with `m` rows in `math` (a TF32 mode), on the current
// stream of b's device: a weight used by many calls then skips its pack pass at each one
// (GemmOptions::packed_b). The packed copy is a snapshot: changes made to b afterwards are not seen.
// Null where those GEMMs would not use a packed b (FP32, no compute capability 9.0 device, a CPU tensor,
// m < 128 or n < 128, an empty b).
std::shared_ptr<const PackedOperand> pack_b(const Tensor& b, std::int64_t m, MathMode math);

// y = act(x * w + bias): x (..., in), w (in, out), bias (out) or undefined. The bias add and the activation
// run in the GEMM's epilogue.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(),
              Activation activation = Activation::None, std::optional<MathMode> math = std::nullopt);

}  // namespace mt
