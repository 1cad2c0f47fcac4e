// The caching pinned-host allocator. cudaHostAlloc costs milliseconds for large sizes and page-locks memory
// for the process, so blocks are kept in power-of-two bins and never split: host staging buffers come in few
// sizes, and a bin lookup is a vector pop. A block that an asynchronous copy may still read or write
// (record_stream) waits for an event on that copy's stream before it is handed out again.
#include <algorithm>
#include <bit>
#include <limits>

#include "minitensor/memory/detail/pinned.h"
#include "minitensor/runtime/error.h"

namespace mt {

struct CachingHostAllocator::HostBlock {
  void* ptr = nullptr;
  std::size_t size = 0;  // the bin size
  std::size_t requested = 0;
  int bin = 0;
  BlockState state = BlockState::Free;
  int n_pending = 0;
  std::vector<cudaStream_t> uses;
};

std::size_t CachingHostAllocator::bin_size(std::size_t bytes) {
  return std::bit_ceil(std::max<std::size_t>(bytes, 512));
}

CachingHostAllocator::CachingHostAllocator(std::unique_ptr<MemoryBackend> backend, bool caching)
    : m_backend(std::move(backend)) {
  m_caching.store(caching);
}

CachingHostAllocator::~CachingHostAllocator() {
  for (auto& [event, block] : m_pending) m_backend->release_event(event);
  for (HostBlock* b : m_all) {
    m_backend->deallocate(b->ptr, b->size);
    delete b;
  }
}

void CachingHostAllocator::process_events_locked() {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < m_pending.size(); ++i) {
    auto [event, b] = m_pending[i];
    if (m_backend->event_done(event)) {
      m_backend->release_event(event);
      if (--b->n_pending == 0) {
        b->state = BlockState::Free;
        m_stats.active_bytes.decrease(static_cast<std::int64_t>(b->size));
        m_free[b->bin].push_back(b);
      }
    } else {
      m_pending[kept++] = m_pending[i];
    }
  }
  m_pending.resize(kept);
}

// Waits for every pending copy, then gives every free block back to the driver.
void CachingHostAllocator::free_cached_locked() {
  for (auto& [event, b] : m_pending) {
    m_backend->event_wait(event);
    ++m_stats.host_waits;
  }
  process_events_locked();
  for (auto& bin : m_free) {
    for (HostBlock* b : bin) {
      m_backend->deallocate(b->ptr, b->size);
      m_stats.reserved_bytes.decrease(static_cast<std::int64_t>(b->size));
      m_stats.segments.decrease(1);
      ++m_stats.device_frees;
      m_all.erase(std::find(m_all.begin(), m_all.end(), b));
      delete b;
    }
    bin.clear();
  }
}

Allocation CachingHostAllocator::allocate(std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return make_allocation(nullptr, 0, stream, nullptr);
  MT_CHECK(bytes <= std::numeric_limits<std::size_t>::max() / 4, OutOfMemoryError, "pinned: cannot allocate ",
           bytes, " bytes of page-locked host memory");
  const bool caching = caching_enabled();
  const std::size_t size = caching ? bin_size(bytes) : bytes;
  const int bin = std::countr_zero(bin_size(bytes));
  auto hand_out = [&](HostBlock* b, bool hit) {
    b->state = BlockState::Allocated;
    b->requested = bytes;
    b->uses.clear();
    count_hand_out(m_stats, static_cast<std::int64_t>(b->size), static_cast<std::int64_t>(bytes), hit);
    return make_allocation(b->ptr, bytes, stream, b);
  };
  if (caching) {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (!m_pending.empty()) process_events_locked();
    auto& free = m_free[bin];
    if (!free.empty()) {
      HostBlock* b = free.back();
      free.pop_back();
      return hand_out(b, true);
    }
  }
  void* ptr = m_backend->allocate(size);
  if (!ptr) {
    std::lock_guard<std::mutex> lock(m_mutex);
    ++m_stats.alloc_retries;
    free_cached_locked();
  }
  if (!ptr) ptr = m_backend->allocate(size);
  std::lock_guard<std::mutex> lock(m_mutex);
  if (!ptr) {
    ++m_stats.ooms;
    std::size_t free_b = 0, total_b = 0;
    m_backend->memory_info(free_b, total_b);
    MT_THROW(OutOfMemoryError, "pinned: out of memory: tried to allocate ", format_bytes(std::int64_t(bytes)),
             " (", bytes, " B, bin ", size, " B); allocated ", format_bytes(m_stats.allocated_bytes.current),
             ", reserved ", format_bytes(m_stats.reserved_bytes.current), "; host free ",
             format_bytes(std::int64_t(free_b)), " of ", format_bytes(std::int64_t(total_b)));
  }
  auto* b = new HostBlock;
  b->ptr = ptr;
  b->size = size;
  b->bin = bin;
  m_all.push_back(b);
  m_stats.segments.increase(1);
  m_stats.reserved_bytes.increase(static_cast<std::int64_t>(size));
  ++m_stats.device_mallocs;
  return hand_out(b, false);
}

void CachingHostAllocator::deallocate(const Allocation& a) noexcept {
  auto* b = static_cast<HostBlock*>(a.context());
  if (!b) return;  // empty
  std::lock_guard<std::mutex> lock(m_mutex);
  const auto n = static_cast<std::int64_t>(b->size);
  m_stats.allocations.decrease(1);
  m_stats.allocated_bytes.decrease(n);
  m_stats.requested_bytes.decrease(static_cast<std::int64_t>(b->requested));
  if (!caching_enabled() || b->size != bin_size(b->requested)) {
    // Uncached: cudaFreeHost waits for the device, so copies still using it finish first.
    m_stats.active_bytes.decrease(n);
    m_stats.reserved_bytes.decrease(n);
    m_stats.segments.decrease(1);
    ++m_stats.device_frees;
    m_all.erase(std::find(m_all.begin(), m_all.end(), b));
    m_backend->deallocate(b->ptr, b->size);
    delete b;
    return;
  }
  bool failed = false;
  for (cudaStream_t st : b->uses) {
    try {
      m_pending.emplace_back(m_backend->record_event(st), b);
      ++b->n_pending;
      ++m_stats.events_recorded;
    } catch (const std::exception& e) {
      failed = true;
      detail::log_error(std::string("pinned allocator: cannot record a release event: ") + e.what());
    }
  }
  if (failed) b->n_pending += 1 << 20;  // never known to be safe: never reused
  if (b->n_pending == 0) {
    b->state = BlockState::Free;
    m_stats.active_bytes.decrease(n);
    m_free[b->bin].push_back(b);
  } else {
    b->state = BlockState::AwaitingStreams;
  }
}

void CachingHostAllocator::record_stream(const Allocation& allocation, cudaStream_t stream) {
  auto* b = static_cast<HostBlock*>(allocation.context());
  if (!b) return;
  std::lock_guard<std::mutex> lock(m_mutex);
  if (std::find(b->uses.begin(), b->uses.end(), stream) == b->uses.end()) b->uses.push_back(stream);
}

void CachingHostAllocator::stream_destroying(cudaStream_t stream) noexcept {
  const auto names = [stream](const HostBlock* b) {
    return std::find(b->uses.begin(), b->uses.end(), stream) != b->uses.end();
  };
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (std::none_of(m_all.begin(), m_all.end(), names)) return;
  }
  // Outside the lock: the wait blocks. The stream's copies must be done before its blocks can be reused.
  try {
    MemoryBackend::EventHandle e = m_backend->record_event(stream);
    m_backend->event_wait(e);
    m_backend->release_event(e);
  } catch (const std::exception& e) {
    detail::log_error(std::string("pinned allocator: cannot wait for a stream being destroyed: ") + e.what());
    return;  // its blocks keep naming it: a later release fails to record and never reuses them
  }
  std::lock_guard<std::mutex> lock(m_mutex);
  for (HostBlock* b : m_all) std::erase(b->uses, stream);
}

MemoryStats CachingHostAllocator::stats() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_stats;
}

void CachingHostAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(m_mutex);
  for (StatValue* v : {&m_stats.allocations, &m_stats.allocated_bytes, &m_stats.requested_bytes,
                       &m_stats.active_bytes, &m_stats.reserved_bytes, &m_stats.segments})
    v->peak = v->current;
}

void CachingHostAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(m_mutex);
  free_cached_locked();
}

std::string CachingHostAllocator::memory_summary() const {
  return detail::memory_summary_table(
      detail::str("minitensor memory summary: pinned host (", m_backend->name(),
                  caching_enabled() ? "" : ", caching off", ")"),
      stats());
}

}  // namespace mt
