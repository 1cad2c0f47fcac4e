// The caching pinned-host allocator (defined in memory/pinned.cpp), built on the same base and backends as
// the device allocator.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "minitensor/memory/detail/caching.h"

namespace mt {

// Page-locked host memory, cached in power-of-two bins (512 B and up). A block released while an asynchronous
// copy may still use it (record_stream with the copy's stream) is reused only once an event recorded on that
// stream at release has completed.
class CachingHostAllocator final : public CachingAllocatorBase {
 public:
  explicit CachingHostAllocator(std::unique_ptr<MemoryBackend> backend, bool caching = true);
  ~CachingHostAllocator() override;
  CachingHostAllocator(const CachingHostAllocator&) = delete;
  CachingHostAllocator& operator=(const CachingHostAllocator&) = delete;

  Allocation allocate(std::size_t bytes, cudaStream_t stream = nullptr) override;
  void record_stream(const Allocation& allocation, cudaStream_t stream) override;
  // An mt::Stream is being destroyed (runtime/stream.h hooks): its copies are waited for and no block names
  // it any more, so no release event is ever recorded on a dead stream.
  void stream_destroying(cudaStream_t stream) noexcept;
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "pinned-caching"; }

  MemoryStats stats() const override;
  void reset_peak_stats() override;
  void empty_cache() override;
  std::string memory_summary() const override;

  MemoryBackend& backend() { return *m_backend; }

  static std::size_t bin_size(std::size_t bytes);  // the power of two (>= 512) a request is served from

  struct HostBlock;

 protected:
  void deallocate(const Allocation& allocation) noexcept override;

 private:
  void process_events_locked();
  void free_cached_locked();

  static constexpr int kBins = 64;
  std::unique_ptr<MemoryBackend> m_backend;
  mutable std::mutex m_mutex;
  std::vector<HostBlock*> m_free[kBins];
  std::vector<std::pair<MemoryBackend::EventHandle, HostBlock*>> m_pending;
  std::vector<HostBlock*> m_all;
  MemoryStats m_stats;
};

// The process-wide pinned allocator (the same object pinned_allocator() returns).
CachingHostAllocator& caching_pinned_allocator();

}  // namespace mt
