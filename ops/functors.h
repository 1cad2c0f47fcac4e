// The math of every elementwise op, written once. This header compiles under nvcc (device and host), the host
// compiler (the CPU reference uses the same formulas where Eigen has none) and NVRTC (the graph executor's
// fused kernels include it verbatim), so it includes nothing under NVRTC and uses only builtin math.
//
// NaN conventions follow PyTorch: relu, maximum, minimum and clamp propagate NaN.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cmath>
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MT_FN __host__ __device__ __forceinline__
#else
#define MT_FN inline
#endif

namespace mt::fn {

// ---- unary, float32
MT_FN float neg(float x) { return -x; }
MT_FN float abs(float x) { return fabsf(x); }
MT_FN float relu(float x) { return (x > 0.f || x != x) ? x : 0.f; }
MT_FN float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }
MT_FN float tanh(float x) { return tanhf(x); }
MT_FN float exp(float x) { return expf(x); }
MT_FN float log(float x) { return logf(x); }
MT_FN float sqrt(float x) { return sqrtf(x); }
MT_FN float rsqrt(float x) { return 1.f / sqrtf(x); }
MT_FN float square(float x) { return x * x; }
MT_FN float reciprocal(float x) { return 1.f / x; }
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
MT_FN float gelu(float x) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  return 0.5f * x * (1.f + tanhf(k0 * (x + k1 * x * x * x)));
}

// ---- unary, integers (the ops that are defined on them)
template <class T>
MT_FN T neg(T x) { return static_cast<T>(-x); }
template <class T>
MT_FN T abs(T x) { return x < 0 ? static_cast<T>(-x) : x; }
template <class T>
MT_FN T relu(T x) { return x > 0 ? x : T(0); }
template <class T>
MT_FN T square(T x) { return static_cast<T>(x * x); }

// ---- binary
template <class T>
MT_FN T add(T a, T b) { return static_cast<T>(a + b); }
template <class T>
MT_FN T sub(T a, T b) { return static_cast<T>(a - b); }
template <class T>
MT_FN T mul(T a, T b) { return static_cast<T>(a * b); }
template <class T>
MT_FN T div(T a, T b) { return static_cast<T>(a / b); }  // integers: the caller rejects b == 0 where it can
template <class T>
MT_FN T maximum(T a, T b) { return a > b ? a : b; }
template <class T>
MT_FN T minimum(T a, T b) { return a < b ? a : b; }
MT_FN float maximum(float a, float b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
MT_FN float minimum(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
MT_FN float pow(float a, float b) { return powf(a, b); }
MT_FN float clamp(float x, float lo, float hi) { return x != x ? x : (x < lo ? lo : (x > hi ? hi : x)); }
template <class T>
MT_FN T clamp(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }

}  // namespace mt::fn
