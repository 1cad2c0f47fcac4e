// Uncached allocators: one driver allocation per request.
#pragma once

#include "minitensor/memory/allocator.h"

namespace mt {

class PlainCudaAllocator final : public Allocator {
 public:
  explicit PlainCudaAllocator(int device);
  Allocation allocate(std::size_t bytes, cudaStream_t stream = nullptr) override;
  Device device() const override { return Device::cuda(m_device); }
  std::string name() const override { return "cuda-plain"; }

 protected:
  void deallocate(const Allocation& a) noexcept override;

 private:
  int m_device;
};

class PlainPinnedAllocator final : public Allocator {
 public:
  Allocation allocate(std::size_t bytes, cudaStream_t stream = nullptr) override;
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "pinned-plain"; }

 protected:
  void deallocate(const Allocation& a) noexcept override;
};

}  // namespace mt
