// Tensor: a strided view (shape, element strides, storage offset, dtype) of reference-counted storage that
// knows its device and allocator. Views share storage; copies are explicit (clone, contiguous, to, copy_).
//
// Shapes are row-major; strides are in elements and may be 0 (broadcast) for views made by expand().
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "minitensor/memory/allocator.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"
#include "minitensor/tensor/dtype.h"
#include "minitensor/tensor/layout.h"
#include "minitensor/tensor/shape.h"

namespace mt {

// The memory a tensor views. Released (stream-ordered) when the last tensor viewing it dies.
class Storage {
 public:
  explicit Storage(Allocation allocation, bool pinned = false)
      : m_allocation(std::move(allocation)), m_pinned(pinned) {}
  void* data() const noexcept { return m_allocation.data(); }
  std::size_t nbytes() const noexcept { return m_allocation.size(); }
  Device device() const noexcept { return m_allocation.device(); }
  bool pinned() const noexcept { return m_pinned; }
  const Allocation& allocation() const noexcept { return m_allocation; }

 private:
  Allocation m_allocation;
  bool m_pinned;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false and any access throws InvalidArgument
  // A view of `storage`, validated: ShapeError unless the ranks match, every extent is >= 0, the element and
  // byte counts fit in int64, offset >= 0 and (when it has elements) every element it addresses lies inside
  // the storage, all computed with overflow-checked arithmetic (tensor/detail/checked.h). So numel() and
  // nbytes() of any tensor fit in int64, and every view method below yields a valid view or throws.
  Tensor(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape, const Shape& strides,
         std::int64_t offset);

  // --- what it is
  bool defined() const noexcept { return m_storage != nullptr; }
  DType dtype() const noexcept { return m_dtype; }
  Device device() const noexcept { return m_device; }
  bool is_cuda() const noexcept { return m_device.is_cuda(); }
  bool is_cpu() const noexcept { return m_device.is_cpu(); }
  bool is_pinned() const noexcept { return m_storage && m_storage->pinned(); }
  const Shape& shape() const noexcept { return m_shape; }
  const Shape& strides() const noexcept { return m_strides; }
  int dim() const noexcept { return m_shape.rank(); }
  std::int64_t size(std::int64_t d) const;  // negative d counts from the end
  std::int64_t stride(std::int64_t d) const;
  std::int64_t numel() const noexcept { return m_shape.numel(); }
  std::int64_t offset() const noexcept { return m_offset; }  // storage offset, in elements
  std::size_t element_size() const noexcept { return dtype_size(m_dtype); }
  std::size_t nbytes() const noexcept { return static_cast<std::size_t>(numel()) * element_size(); }
  bool is_contiguous() const noexcept;
  const std::shared_ptr<Storage>& storage() const noexcept { return m_storage; }
  StridedLayout layout() const { return make_layout(m_shape, m_strides); }

  // Address of element 0 (storage base + offset). data<T>() checks T against dtype().
  void* data_ptr() const;
  template <class T>
  T* data() const {
    check_dtype(dtype_v<T>, "data");
    return static_cast<T*>(data_ptr());
  }

  // --- views (no copy; share storage)
  Tensor transpose(std::int64_t d0, std::int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(std::span<const std::int64_t> dims) const;
  Tensor permute(std::initializer_list<std::int64_t> dims) const {
    return permute(std::span<const std::int64_t>(dims.begin(), dims.size()));
  }
  Tensor view(const Shape& shape) const;  // one extent may be -1; ShapeError when impossible without a copy
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a contiguous copy
  Tensor flatten() const { return reshape({-1}); }
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  Tensor select(std::int64_t dim, std::int64_t index) const;  // drops `dim`
  Tensor squeeze() const;
  Tensor squeeze(std::int64_t dim) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor expand(const Shape& shape) const;  // stride-0 broadcast view; -1 keeps an extent
  Tensor as_strided(const Shape& shape, const Shape& strides, std::int64_t offset) const;  // bounds-checked

  // --- copies
  Tensor contiguous() const;                                  // *this when already contiguous
  Tensor clone() const;                                       // a contiguous copy on the same device
  Tensor to(Device device, bool non_blocking = false) const;  // *this when already there
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  Tensor pin_memory() const;  // a contiguous copy in page-locked host memory
  // Copies src (broadcast to this shape; same dtype) into this tensor, across devices too. Ordered on the
  // CUDA device's current stream; returns when the data is usable, unless non_blocking and the host side is
  // pinned.
  Tensor& copy_(const Tensor& src, bool non_blocking = false);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  // --- host access (copies device data to the host and waits)
  template <class T>
  std::vector<T> to_vector() const;
  template <class T>
  T item() const;

  std::string str(int max_per_dim = 6) const;  // header + clipped values

  void check_defined(const char* op) const;
  void check_dtype(DType expected, const char* op) const;

 private:
  std::shared_ptr<Storage> m_storage;
  DType m_dtype = DType::F32;
  Device m_device;
  Shape m_shape;
  Shape m_strides;
  std::int64_t m_offset = 0;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// --- factories. Seeded random tensors are identical on CPU and CUDA for the same seed.
Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor empty_pinned(const Shape& shape, DType dtype = DType::F32);  // page-locked host memory
Tensor empty_like(const Tensor& t);                                 // contiguous, same dtype and device
Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::F32, Device device = Device::cpu());
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::F32,
              Device device = Device::cpu());
inline Tensor arange(std::int64_t n, DType dtype = DType::F32, Device device = Device::cpu()) {
  return arange(0.0, static_cast<double>(n), 1.0, dtype, device);
}
Tensor rand(const Shape& shape, std::uint64_t seed, Device device = Device::cpu());   // U[0, 1), float32
Tensor randn(const Shape& shape, std::uint64_t seed, Device device = Device::cpu());  // N(0, 1), float32

// Copies `shape.numel()` elements of host data into a new tensor on `device`.
template <class T>
Tensor from_host(const T* data, const Shape& shape, Device device = Device::cpu());
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu()) {
  validate_shape(shape, sizeof(T), "from_vector");
  MT_CHECK(static_cast<std::int64_t>(values.size()) == shape.numel(), ShapeError,
           "from_vector: ", values.size(), " values do not fill shape ", shape, " (", shape.numel(),
           " elements)");
  return from_host(values.data(), shape, device);
}
template <class T>
Tensor from_vector(const std::vector<T>& values, Device device = Device::cpu()) {
  return from_vector(values, Shape{static_cast<std::int64_t>(values.size())}, device);
}

namespace detail {
// Marks that `t`'s memory is used on `stream` (other than the one it was allocated on), so the allocator does
// not hand it out again before that work is done.
void record_stream(const Tensor& t, cudaStream_t stream);
// The stream the ops use for work on `device` (current_stream for CUDA; nullptr for the CPU).
cudaStream_t stream_for(Device device);
}  // namespace detail

}  // namespace mt
