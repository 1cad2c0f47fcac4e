// Softmax entries: validate, make the input contiguous (one tiled copy for strided views), and run the fused
// kernel over (outer, axis, inner), or the float64 Eigen reference on the CPU.
#include <cstdint>

#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/softmax.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/stream.h"

namespace mt {
namespace {

Tensor softmax_impl(bool log, const Tensor& x_in, std::int64_t axis_in) {
  const char* name = log ? "log_softmax" : "softmax";
  x_in.check_defined(name);
  MT_CHECK(x_in.dtype() == DType::F32, DTypeError, name, ": dtype ", x_in.dtype(),
           " is not supported (float32 only)");
  // A 0-d tensor is a one-element row.
  const Tensor x = x_in.dim() == 0 ? x_in.reshape({1}) : x_in;
  const int axis = wrap_dim(axis_in, x.dim(), name);
  if (x.numel() == 0) return empty(x_in.shape(), DType::F32, x.device());
  if (x.is_cpu()) return detail::cpu_softmax(log, x, axis).view(x_in.shape());
  std::int64_t n_outer = 1, n_inner = 1;
  for (int d = 0; d < axis; ++d) n_outer *= x.size(d);
  for (int d = axis + 1; d < x.dim(); ++d) n_inner *= x.size(d);
  DeviceGuard guard(x.device());
  cudaStream_t stream = current_stream(x.device().index());
  const Tensor xc = x.contiguous();
  Tensor out = empty(x_in.shape(), DType::F32, x.device());
  detail::launch_softmax(log, static_cast<const float*>(xc.data_ptr()), static_cast<float*>(out.data_ptr()),
                         n_outer, x.size(axis), n_inner, stream);
  detail::record_stream(xc, stream);
  detail::record_stream(out, stream);
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t axis) {
  return softmax_impl(false, x, axis);
}
Tensor log_softmax(const Tensor& x, std::int64_t axis) {
  return softmax_impl(true, x, axis);
}

}  // namespace mt
