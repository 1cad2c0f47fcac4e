// The allocator interface every Tensor allocates through, and the process-wide allocators.
//
// An Allocation is a move-only RAII handle: when it dies, its memory goes back to the allocator that made it.
// For device memory that return is stream-ordered: the block may be reused at once by later work on the
// stream it was allocated on, and by other streams only once that stream (and every stream recorded with
// record_stream) has finished with it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "minitensor/runtime/device.h"

namespace mt {

class Allocator;

class Allocation {
 public:
  Allocation() = default;
  ~Allocation() { reset(); }
  Allocation(Allocation&& other) noexcept { *this = std::move(other); }
  Allocation& operator=(Allocation&& other) noexcept;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  void* data() const noexcept { return m_ptr; }
  std::size_t size() const noexcept { return m_bytes; }  // bytes requested
  Device device() const noexcept { return m_device; }
  cudaStream_t stream() const noexcept { return m_stream; }  // the stream it was allocated on (device memory)
  Allocator* allocator() const noexcept { return m_owner; }
  void* context() const noexcept { return m_context; }  // the allocator's own bookkeeping (e.g. its block)
  explicit operator bool() const noexcept { return m_owner != nullptr; }

  void reset() noexcept;  // returns the memory now

 private:
  friend class Allocator;
  void* m_ptr = nullptr;
  std::size_t m_bytes = 0;
  Device m_device;
  cudaStream_t m_stream = nullptr;
  Allocator* m_owner = nullptr;
  void* m_context = nullptr;
};

class Allocator {
 public:
  virtual ~Allocator() = default;

  // `bytes` may be 0 (a valid, empty allocation). `stream` orders device allocations; host allocators ignore
  // it. Throws OutOfMemoryError when the memory cannot be had.
  virtual Allocation allocate(std::size_t bytes, cudaStream_t stream = nullptr) = 0;

  // Marks `allocation` as used on `stream` too: it is not reused until that stream's work queued so far is
  // done.
  virtual void record_stream(const Allocation& allocation, cudaStream_t stream) {
    (void)allocation;
    (void)stream;
  }

  virtual Device device() const = 0;
  virtual std::string name() const = 0;

 protected:
  friend class Allocation;
  Allocation make_allocation(void* ptr, std::size_t bytes, cudaStream_t stream, void* context);
  virtual void deallocate(const Allocation& allocation) noexcept = 0;
};

// Aligned host memory (64-byte aligned, plain malloc underneath).
Allocator& cpu_allocator();

// The device allocator used for every CUDA tensor on `device` (throws DeviceError when there is no such
// device).
Allocator& cuda_allocator(int device);

// Page-locked host memory for fast and asynchronous copies.
Allocator& pinned_allocator();

// Smallest alignment every allocator guarantees (enough for float4 / 16-byte vector access).
inline constexpr std::size_t kMinAlignment = 64;

}  // namespace mt
