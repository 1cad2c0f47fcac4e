// operator<< for tensors: a header line, then the values with at most `max_per_dim` shown per dim.
#include <iomanip>
#include <sstream>

#include "minitensor/tensor/tensor.h"

namespace mt {
namespace {

template <class T>
void print_values(std::ostream& os, const T* base, const Tensor& t, int d, std::int64_t offset,
                  int max_per_dim, int indent) {
  const std::int64_t n = t.shape()[d];
  const bool clip = n > max_per_dim;
  const std::int64_t head = clip ? max_per_dim / 2 : n;
  os << '[';
  for (std::int64_t i = 0; i < n; ++i) {
    if (clip && i == head) {
      os << (d + 1 == t.dim() ? "..., " : "...,\n" + std::string(static_cast<size_t>(indent + 1), ' '));
      i = n - (max_per_dim - head);
    }
    const std::int64_t off = offset + i * t.strides()[d];
    if (d + 1 == t.dim()) {
      if constexpr (std::is_same_v<T, float>) {
        os << std::setw(10) << std::setprecision(4) << base[off];
      } else {
        os << +base[off];
      }
    } else {
      print_values(os, base, t, d + 1, off, max_per_dim, indent + 1);
    }
    if (i + 1 < n)
      os << (d + 1 == t.dim() ? ", " : ",\n" + std::string(static_cast<size_t>(indent + 1), ' '));
  }
  os << ']';
}

}  // namespace

std::string Tensor::str(int max_per_dim) const {
  std::ostringstream os;
  if (!defined()) return "Tensor(undefined)";
  os << "Tensor(" << m_dtype << ", " << m_device << (is_pinned() ? ", pinned" : "") << ", shape=" << m_shape
     << ", strides=" << m_strides << ", offset=" << m_offset << ")\n";
  const Tensor host = to(Device::cpu());
  MT_DISPATCH_DTYPE(m_dtype, "print", T, [&] {
    const T* base = static_cast<const T*>(host.data_ptr());
    if (dim() == 0) {
      os << +base[0];
    } else if (numel() == 0) {
      os << "[]";
    } else {
      print_values(os, base, host, 0, 0, std::max(max_per_dim, 2), 0);
    }
  });
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.str();
}

}  // namespace mt
