#include "minitensor/tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "minitensor/runtime/stream.h"
#include "minitensor/tensor/detail/checked.h"
#include "minitensor/tensor/detail/kernels.h"
#include "minitensor/tensor/overlap.h"

namespace mt {

// ---------------------------------------------------------------- construction and queries

namespace {

// Throws (naming `op`) unless (shape, strides, offset) is a valid view of `storage` for `dtype`: extents >=
// 0, the element and byte counts in int64, offset >= 0, and, when there is an element, every element it
// addresses inside the storage. All sums and products are checked, so a huge stride or offset cannot wrap
// around into range.
void check_view(const Storage& storage, DType dtype, const Shape& shape, const Shape& strides,
                std::int64_t offset, const char* op) {
  MT_CHECK(shape.rank() == strides.rank(), ShapeError, op, ": shape ", shape, " and strides ", strides,
           " differ in rank");
  const auto elem = static_cast<std::int64_t>(dtype_size(dtype));
  validate_shape(shape, dtype_size(dtype), op);
  MT_CHECK(offset >= 0, ShapeError, op, ": negative storage offset ", offset);
  detail::checked_mul(offset, elem, op);  // data_ptr()'s byte offset
  if (shape.numel() == 0) return;         // addresses nothing: strides and offset are never followed
  std::int64_t lo = offset, hi = offset;
  for (int d = 0; d < shape.rank(); ++d) {
    const std::int64_t span = detail::checked_mul(shape[d] - 1, strides[d], op);
    (span < 0 ? lo : hi) = detail::checked_add(span < 0 ? lo : hi, span, op);
  }
  const auto capacity = static_cast<std::int64_t>(storage.nbytes() / static_cast<std::size_t>(elem));
  MT_CHECK(lo >= 0 && hi < capacity, ShapeError, op, ": view ", shape, " with strides ", strides,
           " at offset ", offset, " reaches elements ", lo, " .. ", hi, ", outside the storage's ", capacity,
           " elements");
}

}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape, const Shape& strides,
               std::int64_t offset)
    : m_storage(std::move(storage)), m_dtype(dtype), m_shape(shape), m_strides(strides), m_offset(offset) {
  MT_CHECK(m_storage != nullptr, InvalidArgument, "Tensor: null storage");
  check_view(*m_storage, dtype, shape, strides, offset, "Tensor");
  m_device = m_storage->device();
}

void Tensor::check_defined(const char* op) const {
  MT_CHECK(defined(), InvalidArgument, op, ": the tensor is undefined (default-constructed)");
}

void Tensor::check_dtype(DType expected, const char* op) const {
  check_defined(op);
  MT_CHECK(m_dtype == expected, DTypeError, op, ": tensor has dtype ", m_dtype, ", but ", expected,
           " was requested");
}

std::int64_t Tensor::size(std::int64_t d) const {
  return m_shape[wrap_dim(d, dim(), "size")];
}
std::int64_t Tensor::stride(std::int64_t d) const {
  return m_strides[wrap_dim(d, dim(), "stride")];
}

bool Tensor::is_contiguous() const noexcept {
  std::int64_t expected = 1;
  for (int d = dim() - 1; d >= 0; --d) {
    if (m_shape[d] == 0) return true;
    if (m_shape[d] == 1) continue;
    if (m_strides[d] != expected) return false;
    expected *= m_shape[d];
  }
  return true;
}

void* Tensor::data_ptr() const {
  check_defined("data_ptr");
  return static_cast<char*>(m_storage->data()) + m_offset * static_cast<std::int64_t>(element_size());
}

// ---------------------------------------------------------------- views

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, std::int64_t offset) const {
  check_defined("as_strided");
  MT_CHECK(shape.rank() == strides.rank(), ShapeError, "as_strided: shape ", shape, " and strides ", strides,
           " differ in rank");
  for (int d = 0; d < shape.rank(); ++d)
    MT_CHECK(strides[d] >= 0, ShapeError, "as_strided: negative stride ", strides[d], " in dim ", d,
             " is not supported");
  check_view(*m_storage, m_dtype, shape, strides, offset, "as_strided");
  return Tensor(m_storage, m_dtype, shape, strides, offset);
}

Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const {
  check_defined("transpose");
  const int a = wrap_dim(d0, dim(), "transpose"), b = wrap_dim(d1, dim(), "transpose");
  Shape shape = m_shape, strides = m_strides;
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return Tensor(m_storage, m_dtype, shape, strides, m_offset);
}

Tensor Tensor::t() const {
  MT_CHECK(dim() == 2, ShapeError, "t: expects a 2-D tensor, got shape ", m_shape);
  return transpose(0, 1);
}

Tensor Tensor::permute(std::span<const std::int64_t> dims) const {
  check_defined("permute");
  MT_CHECK(static_cast<int>(dims.size()) == dim(), ShapeError, "permute: ", dims.size(),
           " dims given for a tensor of rank ", dim(), " (shape ", m_shape, ")");
  Shape shape = m_shape, strides = m_strides;
  bool seen[kMaxDims] = {};
  for (int i = 0; i < dim(); ++i) {
    const int d = wrap_dim(dims[static_cast<size_t>(i)], dim(), "permute");
    MT_CHECK(!seen[d], ShapeError, "permute: dim ", d, " appears more than once in ", Shape(dims));
    seen[d] = true;
    shape[i] = m_shape[d];
    strides[i] = m_strides[d];
  }
  return Tensor(m_storage, m_dtype, shape, strides, m_offset);
}

namespace {

// Strides that let (old_shape, old_strides) be seen as new_shape without a copy, if any exist.
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape) {
  Shape new_strides = new_shape;
  if (old_shape.numel() == 0) return contiguous_strides(new_shape);
  Shape os = old_shape, ot = old_strides;
  if (os.rank() == 0) {
    os = Shape{1};
    ot = Shape{1};
  }
  int view_d = new_shape.rank() - 1;
  std::int64_t chunk_base_stride = ot.back();
  std::int64_t tensor_numel = 1, view_numel = 1;
  for (int d = os.rank() - 1; d >= 0; --d) {
    tensor_numel *= os[d];  // at most numel(), which fits
    // A chunk ends where the next-outer dim is not laid out right after this one (a product that overflows
    // is no stride the next dim can have).
    std::int64_t chunk_end = 0;
    const bool chunk_overflows = __builtin_mul_overflow(tensor_numel, chunk_base_stride, &chunk_end);
    if (d == 0 || (os[d - 1] != 1 && (chunk_overflows || ot[d - 1] != chunk_end))) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        if (__builtin_mul_overflow(view_numel, chunk_base_stride, &new_strides[view_d])) return std::nullopt;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = ot[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  check_defined("view");
  const Shape shape = infer_shape(requested, numel(), m_shape, "view");
  const auto strides = view_strides(m_shape, m_strides, shape);
  MT_CHECK(strides.has_value(), ShapeError, "view: cannot view a tensor of shape ", m_shape, " and strides ",
           m_strides, " as ", shape, " without a copy; use reshape()");
  return Tensor(m_storage, m_dtype, shape, *strides, m_offset);
}

Tensor Tensor::reshape(const Shape& requested) const {
  check_defined("reshape");
  const Shape shape = infer_shape(requested, numel(), m_shape, "reshape");
  if (const auto strides = view_strides(m_shape, m_strides, shape))
    return Tensor(m_storage, m_dtype, shape, *strides, m_offset);
  return contiguous().view(shape);
}

Tensor Tensor::slice(std::int64_t dim_, std::int64_t start, std::int64_t end, std::int64_t step) const {
  check_defined("slice");
  const int d = wrap_dim(dim_, dim(), "slice");
  MT_CHECK(step > 0, InvalidArgument, "slice: step must be positive, got ", step);
  const std::int64_t n = m_shape[d];
  // Python semantics: negative indices count from the end, then both ends clamp to [0, n].
  auto clamp = [n](std::int64_t i) { return std::clamp<std::int64_t>(i < 0 ? i + n : i, 0, n); };
  const std::int64_t s = clamp(start), e = std::max(clamp(end), clamp(start));
  Shape shape = m_shape, strides = m_strides;
  shape[d] = e == s ? 0 : (e - s - 1) / step + 1;  // ceil((e - s) / step) without overflowing for a huge step
  // The stride of a dim of extent <= 1 is never followed: keep it rather than overflow on a huge step.
  strides[d] = shape[d] > 1 ? detail::checked_mul(m_strides[d], step, "slice") : m_strides[d];
  return Tensor(m_storage, m_dtype, shape, strides,
                detail::checked_add(m_offset, detail::checked_mul(s, m_strides[d], "slice"), "slice"));
}

Tensor Tensor::narrow(std::int64_t dim_, std::int64_t start, std::int64_t length) const {
  check_defined("narrow");
  const int d = wrap_dim(dim_, dim(), "narrow");
  const std::int64_t n = m_shape[d];
  MT_CHECK(start >= 0 && length >= 0 && start <= n && length <= n - start, ShapeError, "narrow: start ",
           start, " and length ", length, " are out of range for dim ", d, " of extent ", n, " (shape ",
           m_shape, ")");
  Shape shape = m_shape;
  shape[d] = length;
  return Tensor(m_storage, m_dtype, shape, m_strides,
                detail::checked_add(m_offset, detail::checked_mul(start, m_strides[d], "narrow"), "narrow"));
}

Tensor Tensor::select(std::int64_t dim_, std::int64_t index) const {
  check_defined("select");
  const int d = wrap_dim(dim_, dim(), "select");
  const std::int64_t n = m_shape[d];
  MT_CHECK(index >= -n && index < n, ShapeError, "select: index ", index, " is out of range for dim ", d,
           " of extent ", n, " (shape ", m_shape, ")");
  const std::int64_t i = index < 0 ? index + n : index;
  Shape shape = m_shape, strides = m_strides;
  shape.erase(d);
  strides.erase(d);
  return Tensor(m_storage, m_dtype, shape, strides,
                detail::checked_add(m_offset, detail::checked_mul(i, m_strides[d], "select"), "select"));
}

Tensor Tensor::squeeze() const {
  check_defined("squeeze");
  Shape shape, strides;
  for (int d = 0; d < dim(); ++d) {
    if (m_shape[d] == 1) continue;
    shape.push_back(m_shape[d]);
    strides.push_back(m_strides[d]);
  }
  return Tensor(m_storage, m_dtype, shape, strides, m_offset);
}

Tensor Tensor::squeeze(std::int64_t dim_) const {
  check_defined("squeeze");
  const int d = wrap_dim(dim_, dim(), "squeeze");
  if (m_shape[d] != 1) return *this;
  Shape shape = m_shape, strides = m_strides;
  shape.erase(d);
  strides.erase(d);
  return Tensor(m_storage, m_dtype, shape, strides, m_offset);
}

Tensor Tensor::unsqueeze(std::int64_t dim_) const {
  check_defined("unsqueeze");
  const int d = wrap_dim(dim_, dim() + 1, "unsqueeze");
  Shape shape = m_shape, strides = m_strides;
  const std::int64_t stride = d < dim() ? detail::checked_mul(m_shape[d], m_strides[d], "unsqueeze") : 1;
  shape.insert(d, 1);
  strides.insert(d, stride);
  return Tensor(m_storage, m_dtype, shape, strides, m_offset);
}

Tensor Tensor::expand(const Shape& target) const {
  check_defined("expand");
  MT_CHECK(target.rank() >= dim(), ShapeError, "expand: cannot expand shape ", m_shape, " to ", target,
           " (fewer dims)");
  Shape shape = target, strides = target;
  const int lead = target.rank() - dim();
  for (int d = 0; d < target.rank(); ++d) {
    const int src = d - lead;
    if (src < 0) {
      MT_CHECK(target[d] >= 0, ShapeError, "expand: extent ", target[d], " in dim ", d, " of ", target,
               " is invalid for a new leading dim");
      strides[d] = 0;
      continue;
    }
    const std::int64_t have = m_shape[src];
    if (target[d] == -1 || target[d] == have) {
      shape[d] = have;
      strides[d] = m_strides[src];
    } else {
      MT_CHECK(have == 1 && target[d] >= 0, ShapeError, "expand: cannot expand shape ", m_shape, " to ",
               target, ": dim ", src, " has extent ", have, ", which must be 1 or ", target[d]);
      strides[d] = 0;
    }
  }
  return Tensor(m_storage, m_dtype, shape, strides, m_offset);
}

// ---------------------------------------------------------------- streams

namespace detail {

cudaStream_t stream_for(Device device) {
  return device.is_cuda() ? current_stream(device.index()) : nullptr;
}

void record_stream(const Tensor& t, cudaStream_t stream) {
  if (!t.defined() || !stream) return;
  const Allocation& a = t.storage()->allocation();
  if (a.allocator() && a.stream() != stream) a.allocator()->record_stream(a, stream);
}

}  // namespace detail

// ---------------------------------------------------------------- copies

Tensor Tensor::contiguous() const {
  check_defined("contiguous");
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  check_defined("clone");
  Tensor out = empty(m_shape, m_dtype, m_device);
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device device, bool non_blocking) const {
  check_defined("to");
  if (device == m_device) return *this;
  Tensor out = empty(m_shape, m_dtype, device);
  out.copy_(*this, non_blocking);
  return out;
}

Tensor Tensor::pin_memory() const {
  check_defined("pin_memory");
  if (is_pinned() && is_contiguous()) return *this;
  Tensor out = empty_pinned(m_shape, m_dtype);
  out.copy_(*this);
  return out;
}

Tensor& Tensor::copy_(const Tensor& src_in, bool non_blocking) {
  check_defined("copy_");
  src_in.check_defined("copy_");
  MT_CHECK(src_in.dtype() == m_dtype, DTypeError, "copy_: source dtype ", src_in.dtype(),
           " differs from destination dtype ", m_dtype, " (no implicit conversion)");
  check_no_self_overlap(*this, "copy_", "the destination");
  const Tensor src = src_in.shape() == m_shape ? src_in : src_in.expand(m_shape);
  if (numel() == 0) return *this;

  if (src.device() == m_device) {
    if (is_cpu()) {
      detail::cpu_copy_strided(data_ptr(), layout(), src.data_ptr(), src.layout(), element_size(), numel());
      return *this;
    }
    DeviceGuard guard(m_device);
    cudaStream_t stream = current_stream(m_device.index());
    if (is_contiguous() && src.is_contiguous()) {
      MT_CUDA_CHECK(cudaMemcpyAsync(data_ptr(), src.data_ptr(), nbytes(), cudaMemcpyDeviceToDevice, stream));
    } else {
      // Both layouts coalesced together, so that a transpose shows as one: then a tiled copy, else
      // element-wise.
      StridedLayout ls[2];
      for (int k = 0; k < 2; ++k) {
        const Tensor& t = k == 0 ? *this : src;
        ls[k].rank = t.dim();
        for (int d = 0; d < t.dim(); ++d) {
          ls[k].shape[d] = t.shape()[d];
          ls[k].stride[d] = t.strides()[d];
        }
      }
      coalesce_layouts(ls, 2);
      if (!detail::launch_copy_tiled(data_ptr(), ls[0], src.data_ptr(), ls[1], element_size(), numel(),
                                     stream)) {
        detail::launch_copy_strided(data_ptr(), ls[0], src.data_ptr(), ls[1], element_size(), numel(),
                                    stream);
      }
    }
    detail::record_stream(*this, stream);
    detail::record_stream(src, stream);
    return *this;
  }

  if (is_cuda() && src.is_cuda()) {  // device to device across GPUs
    const Tensor s = src.contiguous();
    synchronize_stream(current_stream(s.device().index()));
    Tensor d = is_contiguous() ? *this : empty(m_shape, m_dtype, m_device);
    DeviceGuard guard(m_device);
    cudaStream_t stream = current_stream(m_device.index());
    MT_CUDA_CHECK(cudaMemcpyPeerAsync(d.data_ptr(), m_device.index(), s.data_ptr(), s.device().index(),
                                      nbytes(), stream));
    if (d.data_ptr() != data_ptr()) copy_(d);
    synchronize_stream(stream);
    return *this;
  }

  // Host <-> device: one contiguous memcpy, with a strided copy on either side when needed.
  const bool to_device = is_cuda();
  const Device cuda = to_device ? m_device : src.device();
  DeviceGuard guard(cuda);
  cudaStream_t stream = current_stream(cuda.index());
  const Tensor s = src.contiguous();
  Tensor d = is_contiguous() ? *this : empty(m_shape, m_dtype, m_device);
  const bool host_pinned = to_device ? s.is_pinned() : d.is_pinned();
  // A download into pageable memory waits inside the driver's copy until the stream reaches it. With a
  // collective on this stream still waiting for a peer thread of this process (graph/parallel.h), waiting
  // there risks holding the driver's locks the peer needs; waiting first, in cudaStreamSynchronize, leaves
  // the copy nothing to wait for.
  if (!to_device && !host_pinned) synchronize_stream(stream);
  MT_CUDA_CHECK(cudaMemcpyAsync(d.data_ptr(), s.data_ptr(), nbytes(),
                                to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream));
  detail::record_stream(d, stream);
  detail::record_stream(s, stream);
  if (d.data_ptr() != data_ptr()) {
    if (!to_device) synchronize_stream(stream);  // the host-side strided copy reads what just arrived
    copy_(d);
  }
  // A pageable upload has consumed its source when cudaMemcpyAsync returns; a download, or any copy touching
  // pinned memory, is complete only once the stream gets there.
  const bool must_wait = host_pinned ? !non_blocking : !to_device;
  if (must_wait) synchronize_stream(stream);
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_defined("fill_");
  check_no_self_overlap(*this, "fill_", "the target");
  if (m_dtype != DType::F32) {
    const double lo =
        m_dtype == DType::U8 ? 0.0 : static_cast<double>(std::numeric_limits<std::int32_t>::min());
    const double hi =
        m_dtype == DType::U8 ? 255.0 : static_cast<double>(std::numeric_limits<std::int32_t>::max());
    MT_CHECK(std::isfinite(value) && value == std::trunc(value) && value >= lo && value <= hi,
             InvalidArgument, "fill_: value ", value, " is not representable in ", m_dtype);
  }
  if (numel() == 0) return *this;
  if (is_cpu()) {
    detail::cpu_fill(data_ptr(), layout(), numel(), m_dtype, value);
  } else {
    DeviceGuard guard(m_device);
    cudaStream_t stream = current_stream(m_device.index());
    detail::launch_fill(data_ptr(), layout(), numel(), m_dtype, value, stream);
    detail::record_stream(*this, stream);
  }
  return *this;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  check_dtype(dtype_v<T>, "to_vector");
  const Tensor host = to(Device::cpu()).contiguous();
  std::vector<T> out(static_cast<size_t>(numel()));
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size() * sizeof(T));
  return out;
}

template <class T>
T Tensor::item() const {
  check_dtype(dtype_v<T>, "item");
  MT_CHECK(numel() == 1, ShapeError, "item: tensor of shape ", m_shape, " has ", numel(),
           " elements, expected 1");
  return to_vector<T>()[0];
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<std::int32_t> Tensor::to_vector<std::int32_t>() const;
template std::vector<std::uint8_t> Tensor::to_vector<std::uint8_t>() const;
template float Tensor::item<float>() const;
template std::int32_t Tensor::item<std::int32_t>() const;
template std::uint8_t Tensor::item<std::uint8_t>() const;

// ---------------------------------------------------------------- factories

namespace {

Tensor allocate(const Shape& shape, DType dtype, Device device, bool pinned, const char* op) {
  validate_shape(shape, dtype_size(dtype), op);
  check_device(device);
  const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  Allocation a;
  if (pinned) {
    a = pinned_allocator().allocate(bytes, nullptr);
  } else if (device.is_cpu()) {
    a = cpu_allocator().allocate(bytes, nullptr);
  } else {
    a = cuda_allocator(device.index()).allocate(bytes, current_stream(device.index()));
  }
  return Tensor(std::make_shared<Storage>(std::move(a), pinned), dtype, shape, contiguous_strides(shape), 0);
}

}  // namespace

Tensor empty(const Shape& shape, DType dtype, Device device) {
  return allocate(shape, dtype, device, false, "empty");
}

Tensor empty_pinned(const Shape& shape, DType dtype) {
  return allocate(shape, dtype, Device::cpu(), true, "empty_pinned");
}

Tensor empty_like(const Tensor& t) {
  t.check_defined("empty_like");
  return empty(t.shape(), t.dtype(), t.device());
}

Tensor zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}
Tensor ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = allocate(shape, dtype, device, false, "full");
  t.fill_(value);
  return t;
}

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  MT_CHECK(step != 0 && std::isfinite(step) && std::isfinite(start) && std::isfinite(end), InvalidArgument,
           "arange: invalid range start=", start, " end=", end, " step=", step);
  const double count = std::ceil((end - start) / step);
  MT_CHECK(count < 9.0e15, InvalidArgument, "arange: range start=", start, " end=", end, " step=", step,
           " has too many elements");
  const std::int64_t n = count > 0 ? static_cast<std::int64_t>(count) : 0;
  Tensor t = allocate(Shape{n}, dtype, device, false, "arange");
  if (n == 0) return t;
  if (device.is_cpu()) {
    detail::cpu_arange(t.data_ptr(), n, dtype, start, step);
  } else {
    DeviceGuard guard(device);
    detail::launch_arange(t.data_ptr(), n, dtype, start, step, current_stream(device.index()));
  }
  return t;
}

namespace {

Tensor random(const Shape& shape, std::uint64_t seed, Device device, bool normal) {
  Tensor t = allocate(shape, DType::F32, device, false, normal ? "randn" : "rand");
  if (t.numel() == 0) return t;
  if (device.is_cpu()) {
    detail::cpu_random(t.data<float>(), t.numel(), seed, normal);
  } else {
    DeviceGuard guard(device);
    detail::launch_random(t.data<float>(), t.numel(), seed, normal, current_stream(device.index()));
  }
  return t;
}

}  // namespace

Tensor rand(const Shape& shape, std::uint64_t seed, Device device) {
  return random(shape, seed, device, false);
}
Tensor randn(const Shape& shape, std::uint64_t seed, Device device) {
  return random(shape, seed, device, true);
}

template <class T>
Tensor from_host(const T* data, const Shape& shape, Device device) {
  validate_shape(shape, sizeof(T), "from_host");
  MT_CHECK(data != nullptr || shape.numel() == 0, InvalidArgument, "from_host: null data pointer for shape ",
           shape);
  Tensor t = empty(shape, dtype_v<T>, device);
  if (t.numel() == 0) return t;
  if (device.is_cpu()) {
    std::memcpy(t.data_ptr(), data, t.nbytes());
  } else {
    DeviceGuard guard(device);
    cudaStream_t stream = current_stream(device.index());
    MT_CUDA_CHECK(cudaMemcpyAsync(t.data_ptr(), data, t.nbytes(), cudaMemcpyHostToDevice, stream));
    // The caller's buffer may be pinned, in which case the copy above is asynchronous: wait before returning.
    synchronize_stream(stream);
  }
  return t;
}

template Tensor from_host<float>(const float*, const Shape&, Device);
template Tensor from_host<std::int32_t>(const std::int32_t*, const Shape&, Device);
template Tensor from_host<std::uint8_t>(const std::uint8_t*, const Shape&, Device);

}  // namespace mt
