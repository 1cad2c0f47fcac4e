// Shape: up to kMaxDims int64 extents (or strides), stored inline.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

inline constexpr int kMaxDims = 8;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);  // ShapeError when more than kMaxDims
  explicit Shape(std::span<const std::int64_t> dims);
  explicit Shape(const std::vector<std::int64_t>& dims) : Shape(std::span<const std::int64_t>(dims)) {}

  int rank() const noexcept { return m_rank; }
  bool empty() const noexcept { return m_rank == 0; }
  std::int64_t operator[](int i) const noexcept { return m_dims[static_cast<size_t>(i)]; }
  std::int64_t& operator[](int i) noexcept { return m_dims[static_cast<size_t>(i)]; }
  std::int64_t back() const noexcept { return m_dims[static_cast<size_t>(m_rank - 1)]; }
  const std::int64_t* begin() const noexcept { return m_dims.data(); }
  const std::int64_t* end() const noexcept { return m_dims.data() + m_rank; }
  std::int64_t* begin() noexcept { return m_dims.data(); }
  std::int64_t* end() noexcept { return m_dims.data() + m_rank; }
  const std::int64_t* data() const noexcept { return m_dims.data(); }

  void push_back(std::int64_t d);  // ShapeError when full
  void insert(int pos, std::int64_t d);
  void erase(int pos);
  std::vector<std::int64_t> vec() const { return {begin(), end()}; }

  // Product of the extents (1 for rank 0); ShapeError when it overflows int64.
  std::int64_t numel() const;

  bool operator==(const Shape& other) const noexcept {
    return m_rank == other.m_rank && std::equal(begin(), end(), other.begin());
  }

  std::string str() const;  // "(3, 4)"; "()" for a scalar

 private:
  std::array<std::int64_t, kMaxDims> m_dims{};
  int m_rank = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// Row-major strides (in elements) of a contiguous tensor of `shape`.
Shape contiguous_strides(const Shape& shape);

// Throws ShapeError (prefixed with `op`) unless every extent is >= 0 and the element count times `elem_size`
// fits in int64.
void validate_shape(const Shape& shape, std::size_t elem_size, const char* op);

// Wraps a possibly negative dim into [0, rank); ShapeError naming `op` when out of range.
int wrap_dim(std::int64_t dim, int rank, const char* op);

// The NumPy broadcast of a with b: shapes aligned at their last dim, each pair of extents equal or one of
// them
// 1. ShapeError naming `op`, both shapes and the first dim that differs otherwise.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

// `requested` with its one -1 extent (if any) replaced by what keeps `numel` elements (of a tensor of shape
// `from`, for the message). ShapeError naming `op` for more than one -1, a negative extent, or element counts
// that cannot match.
Shape infer_shape(const Shape& requested, std::int64_t numel, const Shape& from, std::string_view op);

}  // namespace mt
