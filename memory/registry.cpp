// The process-wide allocators. Until the caching allocators take over, these are the plain backends.
#include <array>
#include <memory>
#include <mutex>

#include "memory/allocator.h"
#include "memory/plain.h"
#include "runtime/error.h"

namespace mt {

Allocator& cuda_allocator(int device) {
  check_device(Device::cuda(device));
  static std::mutex mutex;
  static std::array<std::unique_ptr<Allocator>, 64> allocators;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = allocators.at(static_cast<size_t>(device));
  if (!slot) slot = std::make_unique<PlainCudaAllocator>(device);
  return *slot;
}

Allocator& pinned_allocator() {
  static PlainPinnedAllocator instance;
  return instance;
}

}  // namespace mt
