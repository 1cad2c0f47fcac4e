// The math of every elementwise op, written once. This header compiles under nvcc (device and host), the host
// compiler (the CPU reference uses the same formulas where Eigen has none) and NVRTC (the graph executor's
// fused kernels include it verbatim), so it includes nothing under NVRTC and uses only builtin math.
//
// NaN conventions follow PyTorch: relu, maximum, minimum and clamp propagate NaN.
//
// Integer semantics (the rule is stated for users in ops/elementwise.h): int32 add, sub, mul, neg, abs and
// square wrap around modulo 2^32 (computed in uint32 and converted back: no signed overflow, which is UB);
// INT_MIN / -1 = INT_MIN; x / 0 = 0 here, for the callers detect a zero divisor and report it (before the
// launch, or through a device flag) rather than trust a value. uint8 arithmetic wraps modulo 2^8.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cmath>
#include <cstring>
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MT_FN __host__ __device__ __forceinline__
#else
#define MT_FN inline
#endif

namespace mt::fn {

// ---- unary, float32
MT_FN float neg(float x) {
  return -x;
}
MT_FN float abs(float x) {
  return fabsf(x);
}
MT_FN float relu(float x) {
  return (x > 0.f || x != x) ? x : 0.f;
}
MT_FN float sigmoid(float x) {
  return 1.f / (1.f + expf(-x));
}
MT_FN float tanh(float x) {
  return tanhf(x);
}
MT_FN float exp(float x) {
  return expf(x);
}
MT_FN float log(float x) {
  return logf(x);
}
MT_FN float sqrt(float x) {
  return sqrtf(x);
}
MT_FN float rsqrt(float x) {
  return 1.f / sqrtf(x);
}
MT_FN float square(float x) {
  return x * x;
}
MT_FN float reciprocal(float x) {
  return 1.f / x;
}
// GELU, exact (PyTorch's default): 0.5 x (1 + erf(x / sqrt(2))).
MT_FN float gelu(float x) {
  const float k = 0.7071067811865476f;  // 1 / sqrt(2)
  return 0.5f * x * (1.f + erff(k * x));
}
// GELU, tanh approximation (PyTorch's approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
MT_FN float gelu_tanh(float x) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  return 0.5f * x * (1.f + tanhf(k0 * (x + k1 * x * x * x)));
}

// ---- unary, integers (the ops that are defined on them)
template <class T>
MT_FN T neg(T x) {
  return static_cast<T>(-x);
}
template <class T>
MT_FN T abs(T x) {
  return x < 0 ? static_cast<T>(-x) : x;
}
MT_FN unsigned char abs(unsigned char x) {
  return x;
}
template <class T>
MT_FN T relu(T x) {
  return x > 0 ? x : T(0);
}
template <class T>
MT_FN T square(T x) {
  return static_cast<T>(x * x);
}

// ---- int32: two's-complement wrap-around, computed in uint32 (C++20 defines the conversion back as modular)
MT_FN int wrap_i32(unsigned int u) {
  return static_cast<int>(u);
}
MT_FN int neg(int x) {
  return wrap_i32(0u - static_cast<unsigned int>(x));
}
MT_FN int abs(int x) {
  return x < 0 ? neg(x) : x;  // abs(INT_MIN) = INT_MIN
}
MT_FN int square(int x) {
  return wrap_i32(static_cast<unsigned int>(x) * static_cast<unsigned int>(x));
}
MT_FN int add(int a, int b) {
  return wrap_i32(static_cast<unsigned int>(a) + static_cast<unsigned int>(b));
}
MT_FN int sub(int a, int b) {
  return wrap_i32(static_cast<unsigned int>(a) - static_cast<unsigned int>(b));
}
MT_FN int mul(int a, int b) {
  return wrap_i32(static_cast<unsigned int>(a) * static_cast<unsigned int>(b));
}
MT_FN int div(int a, int b) {
  return b == 0 ? 0 : (b == -1 ? neg(a) : a / b);  // truncates toward zero; INT_MIN / -1 = INT_MIN
}

// ---- binary (float32, uint8)
template <class T>
MT_FN T add(T a, T b) {
  return static_cast<T>(a + b);
}
template <class T>
MT_FN T sub(T a, T b) {
  return static_cast<T>(a - b);
}
template <class T>
MT_FN T mul(T a, T b) {
  return static_cast<T>(a * b);
}
template <class T>
MT_FN T div(T a, T b) {
  return b == T(0) ? T(0) : static_cast<T>(a / b);  // integers: the caller reports b == 0
}
MT_FN float div(float a, float b) {
  return a / b;
}
template <class T>
MT_FN T maximum(T a, T b) {
  return a > b ? a : b;
}
template <class T>
MT_FN T minimum(T a, T b) {
  return a < b ? a : b;
}
MT_FN float maximum(float a, float b) {
  return (a != a || b != b) ? a + b : (a > b ? a : b);
}
MT_FN float minimum(float a, float b) {
  return (a != a || b != b) ? a + b : (a < b ? a : b);
}
MT_FN float pow(float a, float b) {
  return powf(a, b);
}
MT_FN float clamp(float x, float lo, float hi) {
  return x != x ? x : (x < lo ? lo : (x > hi ? hi : x));
}
template <class T>
MT_FN T clamp(T x, T lo, T hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

// ---- RGBA pixels packed little-endian in a 32-bit word (r in the low byte): 255 - v == v ^ 0xff per colour
// byte.
MT_FN unsigned int invert_rgba(unsigned int pixel) {
  return pixel ^ 0x00ffffffu;
}

// ---- reduction combines. Order-independent, so a tree in any shape gives the bits a sequential loop gives:
// NaN wins (propagates); equal values are merged bitwise, which makes max(-0, +0) = +0 and min(-0, +0) = -0
// whichever comes first.
MT_FN unsigned int float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  unsigned int u;
  memcpy(&u, &x, sizeof(u));
  return u;
#endif
}
MT_FN float bits_float(unsigned int u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
#endif
}
MT_FN float max_combine(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a != b) return a > b ? a : b;
  return bits_float(float_bits(a) & float_bits(b));
}
MT_FN float min_combine(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a != b) return a < b ? a : b;
  return bits_float(float_bits(a) | float_bits(b));
}
// Arg-reduction: is (va, ia) the winner over (vb, ib)? NaN beats everything; ties go to the smaller index.
MT_FN bool argmax_wins(float va, long long ia, float vb, long long ib) {
  const bool na = va != va, nb = vb != vb;
  if (na || nb) return na && (!nb || ia < ib);
  return va > vb || (va == vb && ia < ib);
}
MT_FN bool argmin_wins(float va, long long ia, float vb, long long ib) {
  const bool na = va != va, nb = vb != vb;
  if (na || nb) return na && (!nb || ia < ib);
  return va < vb || (va == vb && ia < ib);
}

}  // namespace mt::fn
