#include "minitensor/memory/allocator.h"

#include <cstdlib>
#include <new>

#include "minitensor/runtime/error.h"

namespace mt {

Allocation& Allocation::operator=(Allocation&& other) noexcept {
  if (this != &other) {
    reset();
    m_ptr = std::exchange(other.m_ptr, nullptr);
    m_bytes = std::exchange(other.m_bytes, 0);
    m_device = other.m_device;
    m_stream = std::exchange(other.m_stream, nullptr);
    m_owner = std::exchange(other.m_owner, nullptr);
    m_context = std::exchange(other.m_context, nullptr);
  }
  return *this;
}

void Allocation::reset() noexcept {
  if (m_owner) m_owner->deallocate(*this);
  m_ptr = nullptr;
  m_bytes = 0;
  m_stream = nullptr;
  m_owner = nullptr;
  m_context = nullptr;
}

Allocation Allocator::make_allocation(void* ptr, std::size_t bytes, cudaStream_t stream, void* context) {
  Allocation a;
  a.m_ptr = ptr;
  a.m_bytes = bytes;
  a.m_device = device();
  a.m_stream = stream;
  a.m_owner = this;
  a.m_context = context;
  return a;
}

namespace {

class CpuAllocator final : public Allocator {
 public:
  Allocation allocate(std::size_t bytes, cudaStream_t) override {
    const std::size_t rounded = (bytes + kMinAlignment - 1) / kMinAlignment * kMinAlignment;
    void* p = rounded ? std::aligned_alloc(kMinAlignment, rounded) : nullptr;
    if (rounded && !p) MT_THROW(OutOfMemoryError, "cpu: failed to allocate ", bytes, " bytes of host memory");
    return make_allocation(p, bytes, nullptr, nullptr);
  }
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "cpu"; }

 protected:
  void deallocate(const Allocation& a) noexcept override { std::free(a.data()); }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator instance;
  return instance;
}

}  // namespace mt
