// The Eigen reference of the elementwise ops: inputs made contiguous (broadcast inputs materialised), then
// Eigen array expressions over Eigen::Map views of the data. Where Eigen has no matching definition (NaN-
// propagating relu / maximum / minimum / clamp, integer wrap-around), the shared math of ops/functors.h is
// applied through unaryExpr / binaryExpr.
#include <Eigen/Core>
#include <cmath>
#include <cstdint>

#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/functors.h"

namespace mt::detail {
namespace {

template <class T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
template <class T>
using CMap = Eigen::Map<const Arr<T>>;
template <class T>
using MMap = Eigen::Map<Arr<T>>;

template <class T>
CMap<T> cmap(const Tensor& t) {
  return CMap<T>(static_cast<const T*>(t.data_ptr()), t.numel());
}
template <class T>
MMap<T> mmap(Tensor& t) {
  return MMap<T>(static_cast<T*>(t.data_ptr()), t.numel());
}

void unary_f32(UnaryOp op, const CMap<float>& x, MMap<float> y) {
  switch (op) {
    case UnaryOp::Neg:
      y = -x;
      return;
    case UnaryOp::Abs:
      y = x.abs();
      return;
    case UnaryOp::Relu:
      y = x.unaryExpr([](float v) { return fn::relu(v); });
      return;
    case UnaryOp::Sigmoid:
      y = (1.f + (-x).exp()).inverse();
      return;
    case UnaryOp::Tanh:
      y = x.unaryExpr([](float v) { return std::tanh(v); });
      return;
    case UnaryOp::Exp:
      y = x.exp();
      return;
    // Eigen's vectorised log / sqrt flush denormals and mishandle sqrt(-denormal), sqrt(inf): scalar libm
    // here.
    case UnaryOp::Log:
      y = x.unaryExpr([](float v) { return std::log(v); });
      return;
    case UnaryOp::Sqrt:
      y = x.unaryExpr([](float v) { return std::sqrt(v); });
      return;
    case UnaryOp::Rsqrt:
      y = x.unaryExpr([](float v) { return 1.f / std::sqrt(v); });
      return;
    // The GELUs are evaluated in double: independent formulations of fn::gelu / fn::gelu_tanh, not the same
    // float expressions.
    case UnaryOp::Gelu: {
      const Arr<double> d = x.cast<double>();
      const double k = 0.7071067811865476;  // 1 / sqrt(2)
      y = (0.5 * d * (1.0 + d.unaryExpr([k](double v) { return std::erf(k * v); }))).cast<float>();
      return;
    }
    case UnaryOp::GeluTanh: {
      const Arr<double> d = x.cast<double>();
      const double k0 = 0.7978845608028654, k1 = 0.044715;
      y = (0.5 * d * (1.0 + (k0 * (d + k1 * d.cube())).tanh())).cast<float>();
      return;
    }
    case UnaryOp::Square:
      y = x.square();
      return;
    case UnaryOp::Reciprocal:
      y = x.inverse();
      return;
  }
}

template <class T>
void unary_int(UnaryOp op, const CMap<T>& x, MMap<T> y) {
  switch (op) {
    case UnaryOp::Neg:
      y = x.unaryExpr([](T v) { return fn::neg(v); });
      return;
    case UnaryOp::Abs:
      y = x.unaryExpr([](T v) { return fn::abs(v); });
      return;
    case UnaryOp::Relu:
      y = x.unaryExpr([](T v) { return fn::relu(v); });
      return;
    case UnaryOp::Square:
      y = x.unaryExpr([](T v) { return fn::square(v); });
      return;
    default:
      MT_THROW(DTypeError, op_name(op), ": dtype ", dtype_v<T>, " is not supported");
  }
}

template <class T>
T apply_binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add:
      return fn::add(a, b);
    case BinaryOp::Sub:
      return fn::sub(a, b);
    case BinaryOp::Mul:
      return fn::mul(a, b);
    case BinaryOp::Div:
      if constexpr (!std::is_same_v<T, float>) {
        MT_CHECK(b != 0, InvalidArgument, "div: integer division by zero (the divisor holds a 0)");
      }
      return fn::div(a, b);
    case BinaryOp::Maximum:
      return fn::maximum(a, b);
    case BinaryOp::Minimum:
      return fn::minimum(a, b);
    case BinaryOp::Pow:
      if constexpr (std::is_same_v<T, float>) return fn::pow(a, b);
      break;
  }
  MT_THROW(DTypeError, op_name(op), ": dtype ", dtype_v<T>, " is not supported");
}

// a and b: arrays of equal length, or one of them a single value (broadcast scalar form).
template <class A, class B>
void binary_f32(BinaryOp op, const A& a, const B& b, MMap<float> y) {
  switch (op) {
    case BinaryOp::Add:
      y = a + b;
      return;
    case BinaryOp::Sub:
      y = a - b;
      return;
    case BinaryOp::Mul:
      y = a * b;
      return;
    case BinaryOp::Div:
      y = a / b;
      return;
    case BinaryOp::Pow:
      y = a.pow(b);
      return;
    default:
      break;  // maximum / minimum: through the shared math (NaN propagation)
  }
}

}  // namespace

Tensor cpu_unary(UnaryOp op, const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  Tensor y = empty(x.shape(), x.dtype(), Device::cpu());
  MT_DISPATCH_DTYPE(x.dtype(), op_name(op), T, [&] {
    if constexpr (std::is_same_v<T, float>) {
      unary_f32(op, cmap<float>(x), mmap<float>(y));
    } else {
      unary_int<T>(op, cmap<T>(x), mmap<T>(y));
    }
  });
  return y;
}

Tensor cpu_binary(BinaryOp op, const Tensor& a_in, const Tensor& b_in, const Shape& shape) {
  const Tensor a = a_in.expand(shape).contiguous(), b = b_in.expand(shape).contiguous();
  Tensor y = empty(shape, a.dtype(), Device::cpu());
  MT_DISPATCH_DTYPE(a.dtype(), op_name(op), T, [&] {
    const CMap<T> av = cmap<T>(a), bv = cmap<T>(b);
    if constexpr (!std::is_same_v<T, float>) {  // before computing: no partial result, the same error as the
                                                // GPU's
      MT_CHECK(op != BinaryOp::Div || !(bv == T(0)).any(), InvalidArgument, op_name(op),
               ": integer division by zero (the divisor holds a 0)");
    }
    if constexpr (std::is_same_v<T, float>) {
      if (op != BinaryOp::Maximum && op != BinaryOp::Minimum) return binary_f32(op, av, bv, mmap<float>(y));
    }
    mmap<T>(y) = av.binaryExpr(bv, [op](T p, T q) { return apply_binary(op, p, q); });
  });
  return y;
}

Tensor cpu_binary_scalar(BinaryOp op, const Tensor& x_in, double s, bool scalar_first) {
  const Tensor x = x_in.contiguous();
  Tensor y = empty(x.shape(), x.dtype(), Device::cpu());
  MT_DISPATCH_DTYPE(x.dtype(), op_name(op), T, [&] {
    const CMap<T> xv = cmap<T>(x);
    const T sv = static_cast<T>(s);
    if constexpr (!std::is_same_v<T, float>) {  // s / x: the divisor is the tensor
      MT_CHECK(op != BinaryOp::Div || !scalar_first || !(xv == T(0)).any(), InvalidArgument, op_name(op),
               ": integer division by zero (the divisor holds a 0)");
    }
    if constexpr (std::is_same_v<T, float>) {
      if (op != BinaryOp::Maximum && op != BinaryOp::Minimum) {
        const Arr<float> sa = Arr<float>::Constant(x.numel(), sv);
        return scalar_first ? binary_f32(op, sa, xv, mmap<float>(y)) : binary_f32(op, xv, sa, mmap<float>(y));
      }
    }
    mmap<T>(y) =
        xv.unaryExpr([&](T v) { return scalar_first ? apply_binary(op, sv, v) : apply_binary(op, v, sv); });
  });
  return y;
}

Tensor cpu_clamp(const Tensor& x_in, double lo, double hi) {
  const Tensor x = x_in.contiguous();
  Tensor y = empty(x.shape(), x.dtype(), Device::cpu());
  MT_DISPATCH_DTYPE(x.dtype(), "clamp", T, [&] {
    const T l = static_cast<T>(lo), h = static_cast<T>(hi);
    mmap<T>(y) = cmap<T>(x).unaryExpr([&](T v) { return fn::clamp(v, l, h); });
  });
  return y;
}

Tensor cpu_invert_rgba(const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  Tensor y = empty(x.shape(), x.dtype(), Device::cpu());
  const Eigen::Index n_pixels = x.numel() / 4;
  using Pixels = Eigen::Array<std::uint8_t, 4, Eigen::Dynamic>;
  Eigen::Map<const Pixels> in(static_cast<const std::uint8_t*>(x.data_ptr()), 4, n_pixels);
  Eigen::Map<Pixels> out(static_cast<std::uint8_t*>(y.data_ptr()), 4, n_pixels);
  out.topRows<3>() = std::uint8_t(255) - in.topRows<3>();
  out.row(3) = in.row(3);
  return y;
}

}  // namespace mt::detail
