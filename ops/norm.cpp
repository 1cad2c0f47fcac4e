// layer_norm / rms_norm entries: validate, make the operands contiguous, and run the fused row kernel, or the
// composition of eager ops for rows too long to keep on chip, or the Eigen reference on the CPU.
#include "minitensor/ops/norm.h"

#include <cmath>

#include "minitensor/ops/detail/norm.h"
#include "minitensor/ops/elementwise.h"
#include "minitensor/ops/reduce.h"
#include "minitensor/runtime/device.h"

namespace mt {
namespace {

void check_param(const Tensor& p, const Tensor& x, const char* op, const char* what) {
  if (!p.defined()) return;
  MT_CHECK(p.dtype() == DType::F32, DTypeError, op, ": ", what, " has dtype ", p.dtype(), " (float32 only)");
  MT_CHECK(p.device() == x.device(), DeviceError, op, ": ", what, " is on ", p.device(), ", x on ",
           x.device());
  MT_CHECK(p.dim() == 1 && p.size(0) == x.size(-1), ShapeError, op, ": ", what, " has shape ", p.shape(),
           ", expected (", x.size(-1), ") for x of shape ", x.shape());
}

// The op from eager primitives (rows longer than the fused kernel keeps on chip).
Tensor composed(detail::RowNorm kind, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor y;
  if (kind == detail::RowNorm::Layer) {
    const Tensor c = x - mean(x, -1, true);
    y = c * rsqrt(mean(c * c, -1, true) + eps);
  } else {
    y = x * rsqrt(mean(x * x, -1, true) + eps);
  }
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

Tensor row_norm(detail::RowNorm kind, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                const char* op) {
  x.check_defined(op);
  MT_CHECK(x.dtype() == DType::F32, DTypeError, op, ": dtype ", x.dtype(),
           " is not supported (float32 only)");
  MT_CHECK(x.dim() >= 1, ShapeError, op, ": x must have at least one dimension (the normalised axis), got ",
           x.shape());
  MT_CHECK(std::isfinite(eps) && eps >= 0, InvalidArgument, op, ": eps must be finite and >= 0, got ", eps);
  check_param(weight, x, op, "weight");
  check_param(bias, x, op, "bias");
  if (x.numel() == 0) return empty(x.shape(), DType::F32, x.device());
  if (x.is_cpu()) return detail::cpu_row_norm(kind, x, weight, bias, eps);
  DeviceGuard guard(x.device());
  cudaStream_t stream = detail::stream_for(x.device());
  const Tensor xc = x.contiguous();
  const Tensor wc = weight.defined() ? weight.contiguous() : Tensor();
  const Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = empty(x.shape(), DType::F32, x.device());
  const std::int64_t d = x.size(-1);
  if (!detail::launch_row_norm(kind, xc.data<float>(), wc.defined() ? wc.data<float>() : nullptr,
                               bc.defined() ? bc.data<float>() : nullptr, y.data<float>(), x.numel() / d, d,
                               static_cast<float>(eps), stream))
    return composed(kind, xc, wc, bc, eps);
  for (const Tensor* t : {&xc, &wc, &bc, static_cast<const Tensor*>(&y)})
    if (t->defined()) detail::record_stream(*t, stream);
  return y;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return row_norm(detail::RowNorm::Layer, x, weight, bias, eps, "layer_norm");
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return row_norm(detail::RowNorm::Rms, x, weight, Tensor(), eps, "rms_norm");
}

}  // namespace mt
