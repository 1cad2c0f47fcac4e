// DLPack export and import (tensor/dlpack.h). Built only where dlpack/dlpack.h was found (CMakeLists.txt).
//
// Import wraps the producer's memory in an Allocation of a DlpackAllocator: it allocates nothing, and giving
// the Allocation back calls the producer's deleter. So a foreign buffer is an ordinary Storage to the rest of
// the library, and its lifetime is the Storage's.
#include "minitensor/tensor/detail/checked.h"
#include "minitensor/tensor/dlpack.h"

#include <array>
#include <memory>
#include <mutex>
#include <vector>

namespace mt {
namespace {

// ---------------------------------------------------------------- export

struct ExportContext {
  DLManagedTensor managed{};
  Tensor tensor;  // keeps the storage alive until the deleter runs
  std::array<std::int64_t, kMaxDims> shape{}, strides{};
};

void delete_export(DLManagedTensor* self) {
  if (self) delete static_cast<ExportContext*>(self->manager_ctx);
}

DLDataType dl_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return {static_cast<std::uint8_t>(kDLFloat), 32, 1};
    case DType::I32:
      return {static_cast<std::uint8_t>(kDLInt), 32, 1};
    case DType::U8:
      return {static_cast<std::uint8_t>(kDLUInt), 8, 1};
  }
  MT_THROW(DTypeError, "to_dlpack: no DLPack type for dtype ", dtype);
}

// ---------------------------------------------------------------- import

// Hands out no memory; adopts foreign memory, and returns it by calling the producer's deleter. One per
// device, because an Allocation takes its device from its allocator.
class DlpackAllocator final : public Allocator {
 public:
  explicit DlpackAllocator(Device device) : m_device(device) {}

  Allocation adopt(DLManagedTensor* managed, void* data, std::size_t bytes) {
    return make_allocation(data, bytes, nullptr, managed);
  }
  Allocation allocate(std::size_t, cudaStream_t) override {
    MT_THROW(InvalidArgument, "dlpack: this allocator only adopts memory from DLPack producers");
  }
  Device device() const override { return m_device; }
  std::string name() const override { return "dlpack:" + m_device.str(); }

 protected:
  void deallocate(const Allocation& allocation) noexcept override {
    auto* managed = static_cast<DLManagedTensor*>(allocation.context());
    if (managed && managed->deleter) managed->deleter(managed);
  }

 private:
  Device m_device;
};

DlpackAllocator& dlpack_allocator(Device device) {
  // Never destroyed: a Storage adopted from a producer may outlive static destruction order.
  static std::mutex mutex;
  static auto* cpu = new DlpackAllocator(Device::cpu());
  static auto* cuda = new std::vector<std::unique_ptr<DlpackAllocator>>();
  if (device.is_cpu()) return *cpu;
  std::lock_guard<std::mutex> lock(mutex);
  const auto index = static_cast<std::size_t>(device.index());
  while (cuda->size() <= index)
    cuda->push_back(std::make_unique<DlpackAllocator>(Device::cuda(static_cast<int>(cuda->size()))));
  return *(*cuda)[index];
}

DType mt_dtype(DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::F32;
    if (t.code == kDLInt && t.bits == 32) return DType::I32;
    if (t.code == kDLUInt && t.bits == 8) return DType::U8;
  }
  MT_THROW(DTypeError, "from_dlpack: unsupported DLPack dtype (code ", int(t.code), ", bits ", int(t.bits),
           ", lanes ", t.lanes, "); supported: float32, int32, uint8 with one lane");
}

Device mt_device(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      return Device::cpu();
    case kDLCUDA: {
      MT_CHECK(d.device_id >= 0, DeviceError, "from_dlpack: negative CUDA device id ", d.device_id);
      const Device device = Device::cuda(d.device_id);
      check_device(device);
      return device;
    }
    default:
      MT_THROW(DeviceError, "from_dlpack: unsupported DLPack device type ", int(d.device_type),
               " (supported: kDLCPU, kDLCUDAHost, kDLCUDA)");
  }
}

}  // namespace

DLManagedTensor* to_dlpack(const Tensor& t) {
  t.check_defined("to_dlpack");
  auto ctx = std::make_unique<ExportContext>();
  ctx->tensor = t;
  for (int d = 0; d < t.dim(); ++d) {
    ctx->shape[static_cast<std::size_t>(d)] = t.size(d);
    ctx->strides[static_cast<std::size_t>(d)] = t.stride(d);
  }
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = t.data_ptr();
  dl.byte_offset = 0;
  dl.device = t.is_cuda() ? DLDevice{kDLCUDA, t.device().index()} : DLDevice{kDLCPU, 0};
  dl.ndim = t.dim();
  dl.dtype = dl_dtype(t.dtype());
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  // The consumer may read on any stream: finish what the library queued on this device's stream first.
  if (t.is_cuda()) MT_CUDA_CHECK(cudaStreamSynchronize(detail::stream_for(t.device())));
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = delete_export;
  return &ctx.release()->managed;
}

Tensor from_dlpack(DLManagedTensor* managed) {
  MT_CHECK(managed != nullptr, InvalidArgument, "from_dlpack: null DLManagedTensor");
  const DLTensor& dl = managed->dl_tensor;
  // Everything that can throw comes before the Storage adopts `managed`: on error the caller still owns it.
  const DType dtype = mt_dtype(dl.dtype);
  const Device device = mt_device(dl.device);
  MT_CHECK(dl.ndim >= 0 && dl.ndim <= kMaxDims, ShapeError, "from_dlpack: rank ", dl.ndim, " is outside [0, ",
           kMaxDims, "]");
  MT_CHECK(dl.ndim == 0 || dl.shape != nullptr, InvalidArgument, "from_dlpack: null shape for rank ",
           dl.ndim);
  Shape shape(std::span<const std::int64_t>(dl.shape, static_cast<std::size_t>(dl.ndim)));
  validate_shape(shape, dtype_size(dtype), "from_dlpack");
  Shape strides = contiguous_strides(shape);
  if (dl.strides) {
    strides = Shape(std::span<const std::int64_t>(dl.strides, static_cast<std::size_t>(dl.ndim)));
    for (int d = 0; d < dl.ndim; ++d)
      MT_CHECK(strides[d] >= 0 || shape[d] <= 1, ShapeError, "from_dlpack: negative stride ", strides[d],
               " in dim ", d, " of shape ", shape, " is not supported");
    for (int d = 0; d < dl.ndim; ++d)
      if (shape[d] <= 1) strides[d] = std::max<std::int64_t>(strides[d], 0);  // any stride is valid there
  }
  // The storage spans element 0 to the last element the strides reach.
  // Checked: huge extents or strides are a ShapeError here, before the Storage adopts `managed`.
  std::int64_t n_elements = shape.numel() > 0 ? 1 : 0;
  if (n_elements)
    for (int d = 0; d < dl.ndim; ++d)
      n_elements = detail::checked_add(n_elements, detail::checked_mul(shape[d] - 1, strides[d], "from_dlpack"),
                                       "from_dlpack");
  const std::size_t bytes = static_cast<std::size_t>(
      detail::checked_mul(n_elements, static_cast<std::int64_t>(dtype_size(dtype)), "from_dlpack"));
  void* data = static_cast<char*>(dl.data) + dl.byte_offset;
  DlpackAllocator& allocator = dlpack_allocator(device);
  auto storage = std::make_shared<Storage>(Allocation(), dl.device.device_type == kDLCUDAHost);

  // From here nothing throws: the Storage owns `managed`. (The Tensor constructor's checks hold by
  // construction: extents were validated and the storage spans exactly the elements the strides reach.)
  *storage = Storage(allocator.adopt(managed, data, bytes), dl.device.device_type == kDLCUDAHost);
  return Tensor(std::move(storage), dtype, shape, strides, 0);
}

}  // namespace mt
