// Elementwise op entries: validate the tensors (device, dtype, shape), allocate or check `out`, and dispatch
// to the CUDA launchers (ops/elementwise.cu) or the Eigen reference (ops/cpu/elementwise.cpp).
#include "minitensor/ops/elementwise.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "minitensor/ops/detail/kernels.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/stream.h"
#include "minitensor/tensor/overlap.h"

namespace mt {

const char* op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
      return "neg";
    case UnaryOp::Abs:
      return "abs";
    case UnaryOp::Relu:
      return "relu";
    case UnaryOp::Sigmoid:
      return "sigmoid";
    case UnaryOp::Tanh:
      return "tanh";
    case UnaryOp::Exp:
      return "exp";
    case UnaryOp::Log:
      return "log";
    case UnaryOp::Sqrt:
      return "sqrt";
    case UnaryOp::Rsqrt:
      return "rsqrt";
    case UnaryOp::Gelu:
      return "gelu";
    case UnaryOp::GeluTanh:
      return "gelu_tanh";
    case UnaryOp::Square:
      return "square";
    case UnaryOp::Reciprocal:
      return "reciprocal";
  }
  return "?";
}

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
      return "add";
    case BinaryOp::Sub:
      return "sub";
    case BinaryOp::Mul:
      return "mul";
    case BinaryOp::Div:
      return "div";
    case BinaryOp::Maximum:
      return "maximum";
    case BinaryOp::Minimum:
      return "minimum";
    case BinaryOp::Pow:
      return "pow";
  }
  return "?";
}

bool defined_on_integers(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu || op == UnaryOp::Square;
}
bool defined_on_integers(BinaryOp op) {
  return op != BinaryOp::Pow;
}

namespace detail {

StridedLayout raw_layout(const Tensor& t) {
  StridedLayout l;
  l.rank = t.dim();
  for (int d = 0; d < t.dim(); ++d) {
    l.shape[d] = t.shape()[d];
    l.stride[d] = t.strides()[d];
  }
  return l;
}

}  // namespace detail

namespace {

void check_dtype_supported(bool ok, const char* op, DType dtype) {
  MT_CHECK(ok, DTypeError, op, ": dtype ", dtype, " is not supported (float32 only)");
}

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  a.check_defined(op);
  b.check_defined(op);
  MT_CHECK(a.device() == b.device(), DeviceError, op, ": tensors on different devices: ", a.device(), " and ",
           b.device());
  MT_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": dtypes differ: ", a.dtype(), " and ", b.dtype(),
           " (no implicit promotion)");
}

// The given `out` (checked against the result's shape, dtype and device) or a new contiguous tensor.
Tensor prepare_out(const std::optional<Tensor>& out, const Shape& shape, DType dtype, Device device,
                   const char* op) {
  if (!out) return empty(shape, dtype, device);
  out->check_defined(op);
  MT_CHECK(out->device() == device, DeviceError, op, ": out is on ", out->device(), ", the inputs on ",
           device);
  MT_CHECK(out->dtype() == dtype, DTypeError, op, ": out has dtype ", out->dtype(), ", the result ", dtype);
  MT_CHECK(out->shape() == shape, ShapeError, op, ": out has shape ", out->shape(), ", the result ", shape);
  check_no_self_overlap(*out, op);
  return *out;
}

// s converted to dtype; InvalidArgument when an integer dtype cannot hold it exactly.
double checked_scalar(double s, DType dtype, const char* op) {
  if (dtype == DType::F32) return s;
  const double lo = dtype == DType::U8 ? 0.0 : static_cast<double>(std::numeric_limits<std::int32_t>::min());
  const double hi =
      dtype == DType::U8 ? 255.0 : static_cast<double>(std::numeric_limits<std::int32_t>::max());
  MT_CHECK(std::isfinite(s) && s == std::trunc(s) && s >= lo && s <= hi, InvalidArgument, op, ": scalar ", s,
           " is not representable in ", dtype);
  return s;
}

// Runs `cuda(stream)` on the result's device with stream bookkeeping, or `cpu()` (a contiguous CPU result
// copied into `result` when they differ).
template <class Cuda, class Cpu>
Tensor dispatch(Tensor result, std::initializer_list<const Tensor*> inputs, Cuda&& cuda, Cpu&& cpu) {
  if (result.numel() == 0) return result;
  if (result.is_cpu()) {
    const Tensor r = cpu();
    if (r.data_ptr() != result.data_ptr()) result.copy_(r);
    return result;
  }
  DeviceGuard guard(result.device());
  cudaStream_t stream = current_stream(result.device().index());
  cuda(stream);
  detail::record_stream(result, stream);
  for (const Tensor* t : inputs) detail::record_stream(*t, stream);
  return result;
}

// Runs launch(flag) for an op on `stream`. Integer division by a tensor (`int_div`) gets a zeroed device int
// that its kernel sets on a zero divisor; the op then waits for the stream and throws InvalidArgument if it
// was set. While the stream is being captured into a CUDA graph it cannot wait: launch(nullptr), quotient 0.
template <class Launch>
void with_div_flag(bool int_div, Device device, cudaStream_t stream, const char* op, Launch&& launch) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (int_div) MT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (!int_div || capture != cudaStreamCaptureStatusNone) return launch(nullptr);
  Tensor flag = zeros({1}, DType::I32, device);
  launch(flag.data<std::int32_t>());
  detail::record_stream(flag, stream);
  MT_CHECK(flag.item<std::int32_t>() == 0, InvalidArgument, op,
           ": integer division by zero (the divisor holds a 0)");
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& x, std::optional<Tensor> out) {
  const char* name = op_name(op);
  x.check_defined(name);
  check_dtype_supported(x.dtype() == DType::F32 || defined_on_integers(op), name, x.dtype());
  Tensor result = prepare_out(out, x.shape(), x.dtype(), x.device(), name);
  return dispatch(
      result, {&x},
      [&](cudaStream_t stream) {
        detail::launch_unary(op, x.dtype(), result.data_ptr(), detail::raw_layout(result), x.data_ptr(),
                             detail::raw_layout(x), result.numel(), stream);
      },
      [&] { return detail::cpu_unary(op, x); });
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, std::optional<Tensor> out) {
  const char* name = op_name(op);
  check_same(a, b, name);
  check_dtype_supported(a.dtype() == DType::F32 || defined_on_integers(op), name, a.dtype());
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor result = prepare_out(out, shape, a.dtype(), a.device(), name);
  const bool int_div = op == BinaryOp::Div && a.dtype() != DType::F32;
  return dispatch(
      result, {&a, &b},
      [&](cudaStream_t stream) {
        const Tensor ae = a.expand(shape), be = b.expand(shape);
        with_div_flag(int_div, result.device(), stream, name, [&](int* flag) {
          detail::launch_binary(op, a.dtype(), result.data_ptr(), detail::raw_layout(result), ae.data_ptr(),
                                detail::raw_layout(ae), be.data_ptr(), detail::raw_layout(be), result.numel(),
                                stream, flag);
        });
      },
      [&] { return detail::cpu_binary(op, a, b, shape); });
}

namespace {

Tensor scalar_op(BinaryOp op, const Tensor& x, double s, bool scalar_first, std::optional<Tensor> out) {
  const char* name = op_name(op);
  x.check_defined(name);
  check_dtype_supported(x.dtype() == DType::F32 || defined_on_integers(op), name, x.dtype());
  checked_scalar(s, x.dtype(), name);
  MT_CHECK(!(x.dtype() != DType::F32 && op == BinaryOp::Div && !scalar_first && s == 0), InvalidArgument,
           name, ": integer division by zero");
  Tensor result = prepare_out(out, x.shape(), x.dtype(), x.device(), name);
  // s / x: the divisor is the tensor.
  const bool int_div = op == BinaryOp::Div && x.dtype() != DType::F32 && scalar_first;
  return dispatch(
      result, {&x},
      [&](cudaStream_t stream) {
        with_div_flag(int_div, result.device(), stream, name, [&](int* flag) {
          detail::launch_binary_scalar(op, x.dtype(), result.data_ptr(), detail::raw_layout(result),
                                       x.data_ptr(), detail::raw_layout(x), s, scalar_first, result.numel(),
                                       stream, flag);
        });
      },
      [&] { return detail::cpu_binary_scalar(op, x, s, scalar_first); });
}

}  // namespace

Tensor binary_scalar(BinaryOp op, const Tensor& x, double s, std::optional<Tensor> out) {
  return scalar_op(op, x, s, false, std::move(out));
}

Tensor scalar_binary(BinaryOp op, double s, const Tensor& x, std::optional<Tensor> out) {
  return scalar_op(op, x, s, true, std::move(out));
}

Tensor clamp(const Tensor& x, double lo, double hi, std::optional<Tensor> out) {
  x.check_defined("clamp");
  checked_scalar(lo, x.dtype(), "clamp");
  checked_scalar(hi, x.dtype(), "clamp");
  MT_CHECK(!std::isnan(lo) && !std::isnan(hi) && lo <= hi, InvalidArgument, "clamp: invalid bounds lo=", lo,
           " hi=", hi, " (need lo <= hi)");
  Tensor result = prepare_out(out, x.shape(), x.dtype(), x.device(), "clamp");
  return dispatch(
      result, {&x},
      [&](cudaStream_t stream) {
        detail::launch_clamp(x.dtype(), result.data_ptr(), detail::raw_layout(result), x.data_ptr(),
                             detail::raw_layout(x), lo, hi, result.numel(), stream);
      },
      [&] { return detail::cpu_clamp(x, lo, hi); });
}

Tensor invert_rgba(const Tensor& x, std::optional<Tensor> out) {
  x.check_defined("invert_rgba");
  MT_CHECK(x.dtype() == DType::U8, DTypeError, "invert_rgba: dtype ", x.dtype(),
           " is not supported (uint8 only)");
  MT_CHECK(x.dim() >= 1 && x.size(-1) == 4, ShapeError,
           "invert_rgba: expects (..., 4) RGBA pixels, got shape ", x.shape());
  Tensor result = prepare_out(out, x.shape(), x.dtype(), x.device(), "invert_rgba");
  auto word_aligned = [](const Tensor& t) {
    return t.is_contiguous() && reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 4 == 0;
  };
  return dispatch(
      result, {&x},
      [&](cudaStream_t stream) {
        // The kernel reads and writes whole 32-bit pixels; other layouts go through aligned contiguous
        // copies.
        const Tensor src = word_aligned(x) ? x : x.clone();
        Tensor dst = word_aligned(result) ? result : empty(x.shape(), x.dtype(), x.device());
        detail::launch_invert_rgba(static_cast<std::uint8_t*>(dst.data_ptr()),
                                   static_cast<const std::uint8_t*>(src.data_ptr()), x.numel() / 4, stream);
        if (dst.data_ptr() != result.data_ptr()) result.copy_(dst);
      },
      [&] { return detail::cpu_invert_rgba(x); });
}

}  // namespace mt
