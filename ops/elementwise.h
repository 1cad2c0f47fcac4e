// Elementwise ops: unary, scalar and binary (NumPy broadcasting), on contiguous and strided inputs.
// CUDA tensors run the kernels of ops/elementwise.cu; CPU tensors run the Eigen reference (ops/cpu/).
// Inputs must share a device (DeviceError) and a dtype (DTypeError; no silent promotion).
//
// Integer semantics, the same on CPU and GPU, eager and in a graph (the math is ops/functors.h):
//   - int32 add, sub, mul, neg, abs and square wrap around modulo 2^32 (two's complement; never UB), so
//     INT_MAX + 1 = INT_MIN and abs(INT_MIN) = INT_MIN; uint8 wraps modulo 2^8.
//   - div truncates toward zero; INT_MIN / -1 = INT_MIN (the wrapped quotient).
//   - division by zero is an InvalidArgument: a zero scalar divisor is rejected before any work; a divisor
//     tensor is scanned before computing on the CPU, and on the GPU the kernel raises a device flag that the
//     op reads after the kernel (a sync of the stream, for integer division only; not while the stream is
//     being captured into a CUDA graph, where the quotient is 0).
//   - a scalar operand must be exactly representable in the tensor's dtype (int32 + 0.5 is an
//     InvalidArgument), and float-only ops (pow, exp, ...) on integers are a DTypeError.
// An `out` that overlaps itself (a broadcast view, or strides that make two indices share an element) is an
// InvalidArgument (tensor/overlap.h).
#pragma once

#include <optional>

#include "minitensor/tensor/tensor.h"

namespace mt {

// The math of each op is written once, in ops/functors.h, and shared with the graph's run-time generated
// kernels.
enum class UnaryOp {
  Neg,
  Abs,
  Relu,
  Sigmoid,
  Tanh,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Gelu,      // exact: 0.5 x (1 + erf(x / sqrt(2))), PyTorch's gelu
  GeluTanh,  // the tanh approximation, PyTorch's gelu(x, approximate='tanh')
  Square,
  Reciprocal
};
enum class BinaryOp { Add, Sub, Mul, Div, Maximum, Minimum, Pow };

const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);
// Whether an op takes the integer dtypes too (the others are float32 only): the one rule the eager ops check
// at the call and the graph builder when a node is added.
bool defined_on_integers(UnaryOp op);
bool defined_on_integers(BinaryOp op);

// `out`, when given, must have the result's shape, dtype and device (it may be a strided view); it is
// returned.
Tensor unary(UnaryOp op, const Tensor& x, std::optional<Tensor> out = std::nullopt);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, std::optional<Tensor> out = std::nullopt);

inline Tensor neg(const Tensor& x) {
  return unary(UnaryOp::Neg, x);
}
inline Tensor abs(const Tensor& x) {
  return unary(UnaryOp::Abs, x);
}
inline Tensor relu(const Tensor& x) {
  return unary(UnaryOp::Relu, x);
}
inline Tensor sigmoid(const Tensor& x) {
  return unary(UnaryOp::Sigmoid, x);
}
inline Tensor tanh(const Tensor& x) {
  return unary(UnaryOp::Tanh, x);
}
inline Tensor exp(const Tensor& x) {
  return unary(UnaryOp::Exp, x);
}
inline Tensor log(const Tensor& x) {
  return unary(UnaryOp::Log, x);
}
inline Tensor sqrt(const Tensor& x) {
  return unary(UnaryOp::Sqrt, x);
}
inline Tensor rsqrt(const Tensor& x) {
  return unary(UnaryOp::Rsqrt, x);
}
// GELU as PyTorch defines it: gelu is the exact erf form, gelu_tanh the tanh approximation
// (torch.nn.functional.gelu(x, approximate='tanh')).
inline Tensor gelu(const Tensor& x) {
  return unary(UnaryOp::Gelu, x);
}
inline Tensor gelu_tanh(const Tensor& x) {
  return unary(UnaryOp::GeluTanh, x);
}
inline Tensor square(const Tensor& x) {
  return unary(UnaryOp::Square, x);
}
inline Tensor reciprocal(const Tensor& x) {
  return unary(UnaryOp::Reciprocal, x);
}

inline Tensor add(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Add, a, b);
}
inline Tensor sub(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Sub, a, b);
}
inline Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Mul, a, b);
}
inline Tensor div(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Div, a, b);
}
inline Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Maximum, a, b);
}
inline Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Minimum, a, b);
}
inline Tensor pow(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Pow, a, b);
}

// Scalar forms: x op s with s converted to x's dtype (InvalidArgument when it does not fit an integer dtype).
Tensor binary_scalar(BinaryOp op, const Tensor& x, double s, std::optional<Tensor> out = std::nullopt);
Tensor scalar_binary(BinaryOp op, double s, const Tensor& x,
                     std::optional<Tensor> out = std::nullopt);  // s op x
Tensor clamp(const Tensor& x, double lo, double hi, std::optional<Tensor> out = std::nullopt);

// Inverts the colour of RGBA uint8 pixels: (r, g, b, a) -> (255 - r, 255 - g, 255 - b, a). x: (..., 4) uint8.
Tensor invert_rgba(const Tensor& x, std::optional<Tensor> out = std::nullopt);

inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
inline Tensor operator-(const Tensor& x) {
  return neg(x);
}
inline Tensor operator+(const Tensor& x, double s) {
  return binary_scalar(BinaryOp::Add, x, s);
}
inline Tensor operator-(const Tensor& x, double s) {
  return binary_scalar(BinaryOp::Sub, x, s);
}
inline Tensor operator*(const Tensor& x, double s) {
  return binary_scalar(BinaryOp::Mul, x, s);
}
inline Tensor operator/(const Tensor& x, double s) {
  return binary_scalar(BinaryOp::Div, x, s);
}
inline Tensor operator+(double s, const Tensor& x) {
  return scalar_binary(BinaryOp::Add, s, x);
}
inline Tensor operator-(double s, const Tensor& x) {
  return scalar_binary(BinaryOp::Sub, s, x);
}
inline Tensor operator*(double s, const Tensor& x) {
  return scalar_binary(BinaryOp::Mul, s, x);
}
inline Tensor operator/(double s, const Tensor& x) {
  return scalar_binary(BinaryOp::Div, s, x);
}

}  // namespace mt
