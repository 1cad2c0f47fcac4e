// CPU counterparts of tensor/copy.cu.
#include <cstring>

#include "minitensor/runtime/error.h"
#include "minitensor/tensor/detail/random.h"
#include "minitensor/tensor/detail/kernels.h"

namespace mt::detail {
namespace {

template <class T>
void copy_as(void* dst, const StridedLayout& dl, const void* src, const StridedLayout& sl, std::int64_t n) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (std::int64_t i = 0; i < n; ++i) d[dl.offset(i)] = s[sl.offset(i)];
}

struct Bytes16 {
  unsigned char b[16];
};

}  // namespace

void cpu_copy_strided(void* dst, const StridedLayout& dl, const void* src, const StridedLayout& sl,
                      std::size_t elem_size, std::int64_t n) {
  if (n == 0) return;
  const bool contiguous = dl.rank == 1 && dl.stride[0] == 1 && sl.rank == 1 && sl.stride[0] == 1;
  if (contiguous) {
    std::memmove(dst, src, static_cast<std::size_t>(n) * elem_size);
    return;
  }
  switch (elem_size) {
    case 1:
      return copy_as<std::uint8_t>(dst, dl, src, sl, n);
    case 2:
      return copy_as<std::uint16_t>(dst, dl, src, sl, n);
    case 4:
      return copy_as<std::uint32_t>(dst, dl, src, sl, n);
    case 8:
      return copy_as<std::uint64_t>(dst, dl, src, sl, n);
    case 16:
      return copy_as<Bytes16>(dst, dl, src, sl, n);
  }
  MT_THROW(InvalidArgument, "copy: unsupported element size ", elem_size);
}

void cpu_fill(void* dst, const StridedLayout& l, std::int64_t n, DType dtype, double value) {
  MT_DISPATCH_DTYPE(dtype, "fill", T, [&] {
    T* d = static_cast<T*>(dst);
    const T v = static_cast<T>(value);
    for (std::int64_t i = 0; i < n; ++i) d[l.offset(i)] = v;
  });
}

void cpu_arange(void* dst, std::int64_t n, DType dtype, double start, double step) {
  MT_DISPATCH_DTYPE(dtype, "arange", T, [&] {
    T* d = static_cast<T*>(dst);
    for (std::int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
}

void cpu_random(float* dst, std::int64_t n, std::uint64_t seed, bool normal) {
  for (std::int64_t i = 0; i < n; ++i) {
    dst[i] = normal ? normal01(seed, static_cast<std::uint64_t>(i))
                    : uniform01(seed, static_cast<std::uint64_t>(i));
  }
}

}  // namespace mt::detail
