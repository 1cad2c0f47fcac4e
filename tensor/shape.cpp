#include "minitensor/tensor/shape.h"

#include <limits>
#include <sstream>

#include "minitensor/runtime/error.h"
#include "minitensor/tensor/detail/checked.h"

namespace mt {

Shape::Shape(std::initializer_list<std::int64_t> dims)
    : Shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const std::int64_t> dims) {
  MT_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), ShapeError, "shape has ", dims.size(),
           " dims; at most ", kMaxDims, " are supported");
  std::copy(dims.begin(), dims.end(), m_dims.begin());
  m_rank = static_cast<int>(dims.size());
}

void Shape::push_back(std::int64_t d) {
  MT_CHECK(m_rank < kMaxDims, ShapeError, "shape ", str(), " already has the maximum of ", kMaxDims, " dims");
  m_dims[static_cast<size_t>(m_rank++)] = d;
}

void Shape::insert(int pos, std::int64_t d) {
  MT_CHECK(m_rank < kMaxDims, ShapeError, "shape ", str(), " already has the maximum of ", kMaxDims, " dims");
  MT_CHECK(pos >= 0 && pos <= m_rank, ShapeError, "insert position ", pos, " out of range for ", str());
  for (int i = m_rank; i > pos; --i) m_dims[static_cast<size_t>(i)] = m_dims[static_cast<size_t>(i - 1)];
  m_dims[static_cast<size_t>(pos)] = d;
  ++m_rank;
}

void Shape::erase(int pos) {
  MT_CHECK(pos >= 0 && pos < m_rank, ShapeError, "erase position ", pos, " out of range for ", str());
  for (int i = pos; i + 1 < m_rank; ++i) m_dims[static_cast<size_t>(i)] = m_dims[static_cast<size_t>(i + 1)];
  m_dims[static_cast<size_t>(--m_rank)] = 0;
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : *this) n = detail::checked_mul(n, d, "numel");
  return n;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '(';
  for (int i = 0; i < m_rank; ++i) os << (i ? ", " : "") << m_dims[static_cast<size_t>(i)];
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  return os << s.str();
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides = shape;
  std::int64_t s = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[i] = s;
    s = detail::checked_mul(s, std::max<std::int64_t>(shape[i], 1), "contiguous_strides");
  }
  return strides;
}

void validate_shape(const Shape& shape, std::size_t elem_size, const char* op) {
  const std::int64_t limit = std::numeric_limits<std::int64_t>::max() / static_cast<std::int64_t>(elem_size);
  std::int64_t n = 1;
  for (int i = 0; i < shape.rank(); ++i) {
    MT_CHECK(shape[i] >= 0, ShapeError, op, ": negative extent ", shape[i], " in dim ", i, " of shape ",
             shape);
  }
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] == 0) return;  // zero elements: no overflow possible
  }
  for (int i = 0; i < shape.rank(); ++i) {
    MT_CHECK(n <= limit / shape[i], ShapeError, op, ": shape ", shape,
             " has too many elements (the byte size overflows int64)");
    n *= shape[i];
  }
}

int wrap_dim(std::int64_t dim, int rank, const char* op) {
  const std::int64_t r = rank;
  MT_CHECK(dim >= -r && dim < r && r > 0, ShapeError, op, ": dim ", dim,
           " is out of range for a tensor of rank ", rank,
           rank > 0 ? detail::str(" (expected -", rank, " .. ", rank - 1, ")") : std::string());
  return static_cast<int>(dim < 0 ? dim + r : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  const int rank = std::max(a.rank(), b.rank());
  Shape out;
  for (int d = 0; d < rank; ++d) {
    const int da = d - (rank - a.rank()), db = d - (rank - b.rank());
    const std::int64_t ea = da >= 0 ? a[da] : 1, eb = db >= 0 ? b[db] : 1;
    MT_CHECK(ea == eb || ea == 1 || eb == 1, ShapeError, op, ": cannot broadcast ", a, " with ", b, " (dim ",
             d, ": ", ea, " vs ", eb, ")");
    out.push_back(ea == 1 ? eb : ea);
  }
  return out;
}

Shape infer_shape(const Shape& requested, std::int64_t numel, const Shape& from, std::string_view op) {
  Shape shape = requested;
  int infer = -1;
  std::int64_t known = 1;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == -1) {
      MT_CHECK(infer < 0, ShapeError, op, ": only one extent may be -1 in ", requested);
      infer = d;
    } else {
      MT_CHECK(shape[d] >= 0, ShapeError, op, ": negative extent ", shape[d], " in ", requested);
      MT_CHECK(!__builtin_mul_overflow(known, shape[d], &known), ShapeError, op, ": shape ", requested,
               " has too many elements (the count overflows int64)");
    }
  }
  if (infer >= 0) {
    MT_CHECK(known != 0 && numel % known == 0, ShapeError, op, ": cannot infer the -1 extent of ", requested,
             " for a tensor of shape ", from, " (", numel, " elements)");
    shape[infer] = numel / known;
  }
  MT_CHECK(shape.numel() == numel, ShapeError, op, ": shape ", requested, " (", shape.numel(),
           " elements) is invalid for a tensor of shape ", from, " (", numel, " elements)");
  return shape;
}

}  // namespace mt
