// The uncached backends: one cudaMalloc / cudaHostAlloc per allocation. The caching allocators are built on
// the same calls; these stay as the simplest correct reference.
#include "minitensor/memory/detail/plain.h"

#include <array>
#include <memory>
#include <mutex>

#include "minitensor/runtime/error.h"

namespace mt {

PlainCudaAllocator::PlainCudaAllocator(int device) : m_device(device) {}

Allocation PlainCudaAllocator::allocate(std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return make_allocation(nullptr, 0, stream, nullptr);
  DeviceGuard guard(Device::cuda(m_device));
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    std::size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    MT_THROW(OutOfMemoryError, "cuda:", m_device, ": out of memory allocating ", bytes,
             " bytes (device free ", free_b, " of ", total_b, " bytes)");
  }
  MT_CUDA_CHECK(status);
  return make_allocation(p, bytes, stream, nullptr);
}

void PlainCudaAllocator::deallocate(const Allocation& a) noexcept {
  if (!a.data()) return;
  // cudaFree synchronises the device, so work still reading this memory finishes first.
  MT_CUDA_CHECK_NOTHROW(cudaFree(a.data()));
}

Allocation PlainPinnedAllocator::allocate(std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return make_allocation(nullptr, 0, stream, nullptr);
  check_device(Device::cuda(0));
  void* p = nullptr;
  const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    MT_THROW(OutOfMemoryError, "pinned: out of memory allocating ", bytes,
             " bytes of page-locked host memory");
  }
  MT_CUDA_CHECK(status);
  return make_allocation(p, bytes, stream, nullptr);
}

void PlainPinnedAllocator::deallocate(const Allocation& a) noexcept {
  if (a.data()) MT_CUDA_CHECK_NOTHROW(cudaFreeHost(a.data()));
}

}  // namespace mt
