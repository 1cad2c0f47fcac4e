// Element types. float32 is first-class; int32 and uint8 serve storage, copies, fills and elementwise ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "minitensor/runtime/error.h"

namespace mt {

enum class DType : std::uint8_t { F32, I32, U8 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::I32:
      return 4;
    case DType::U8:
      return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "float32";
    case DType::I32:
      return "int32";
    case DType::U8:
      return "uint8";
  }
  return "?";
}

inline std::ostream& operator<<(std::ostream& os, DType t) {
  return os << dtype_name(t);
}

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DType value = DType::U8;
};
template <class T>
inline constexpr DType dtype_v = dtype_of<std::remove_cv_t<T>>::value;

}  // namespace mt

// Runs the body with `T` bound to the C++ type of `dtype`:
//   MT_DISPATCH_DTYPE(x.dtype(), "fill", T, { fill_kernel<T><<<...>>>(...); });
#define MT_DISPATCH_DTYPE(dtype, op_name, T, ...)                                   \
  [&] {                                                                             \
    switch (dtype) {                                                                \
      case ::mt::DType::F32: {                                                      \
        using T = float;                                                            \
        return __VA_ARGS__();                                                       \
      }                                                                             \
      case ::mt::DType::I32: {                                                      \
        using T = std::int32_t;                                                     \
        return __VA_ARGS__();                                                       \
      }                                                                             \
      case ::mt::DType::U8: {                                                       \
        using T = std::uint8_t;                                                     \
        return __VA_ARGS__();                                                       \
      }                                                                             \
    }                                                                               \
    MT_THROW(DTypeError, op_name, ": unsupported dtype ", ::mt::dtype_name(dtype)); \
  }()
