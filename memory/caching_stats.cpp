// The caching device allocator: statistics, snapshot and summary (memory/caching.cpp has the overview).
#include "minitensor/memory/detail/caching_impl.h"

namespace mt {

// ---------------------------------------------------------------- introspection

MemoryStats CachingDeviceAllocator::stats() const {
  MemoryStats out;
  std::int64_t thread_cached = 0;
  {
    std::lock_guard<std::mutex> lock(m_threads_mutex);
    for (const auto& cache : m_threads) {
      cache->stats.add_to(out);
      thread_cached += static_cast<std::int64_t>(cache->bytes.load(kRelaxed));
    }
  }
  // Free bytes of split segments: counted on demand (current only), it is not on any hot path. A block in a
  // thread cache is one of them (a small block never spans its 2 MiB segment).
  std::int64_t inactive = thread_cached;
  for (Pool* pool : all_pools()) {
    std::lock_guard<std::mutex> lock(pool->mutex);
    for (const Segment* seg : pool->segments) {
      if (!seg->head->next) continue;
      for (const Block* b = seg->head; b; b = b->next)
        if (b->state == BlockState::Free) inactive += static_cast<std::int64_t>(b->size);
    }
  }
  out.inactive_split_bytes.current = inactive;
  out.inactive_split_bytes.peak = inactive;
  return out;
}

void CachingDeviceAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(m_threads_mutex);
  for (auto& cache : m_threads) cache->stats.reset_peaks();
}

void CachingDeviceAllocator::empty_cache() {
  std::unique_lock<std::mutex> exit_lock;
  StatShard& stats = local(exit_lock).stats;
  drain_thread_caches(stats);
  wait_all_events(stats);
  release_free_segments(false, stats);
}

void CachingDeviceAllocator::set_memory_fraction(double fraction) {
  MT_CHECK(fraction > 0.0 && fraction <= 1.0, InvalidArgument, name(), ": memory fraction ", fraction,
           " is not in (0, 1]");
  std::size_t free_b = 0, total_b = 0;
  m_backend->memory_info(free_b, total_b);
  set_memory_cap(static_cast<std::size_t>(fraction * static_cast<double>(total_b)));
}

std::vector<SegmentInfo> CachingDeviceAllocator::snapshot() {
  std::unique_lock<std::mutex> exit_lock;
  StatShard& stats = local(exit_lock).stats;
  std::vector<SegmentInfo> out;
  // Every thread's cache goes back to the pools first, and stays empty while the pools are read (each cache's
  // flag is held): a thread-cache hit writes its block's `requested` under that flag alone.
  std::lock_guard<std::mutex> threads_lock(m_threads_mutex);
  std::vector<Block*> blocks;
  blocks.reserve(m_threads.size() * kThreadCacheBlocks);
  struct Unlock {
    std::vector<std::shared_ptr<ThreadCache>>& caches;
    ~Unlock() {
      for (auto& cache : caches) cache->unlock();
    }
  };
  for (auto& cache : m_threads) cache->lock();
  Unlock unlock{m_threads};
  for (auto& cache : m_threads) {
    Block* taken[kThreadCacheBlocks];
    const int n = cache->take_all(taken);
    blocks.insert(blocks.end(), taken, taken + n);  // within the reserved room: no throw
  }
  return_blocks(blocks.data(), static_cast<int>(blocks.size()), stats);
  for (Pool* pool : all_pools()) {
    std::lock_guard<std::mutex> lock(pool->mutex);
    for (const Segment* seg : pool->segments) {
      SegmentInfo si;
      si.address = reinterpret_cast<std::uintptr_t>(seg->ptr);
      si.size = seg->size;
      si.stream = pool->own_stream();
      si.small_pool = seg->small;
      for (const Block* b = seg->head; b; b = b->next)
        si.blocks.push_back(
            {reinterpret_cast<std::uintptr_t>(b->ptr), b->size, b->requested, b->state, b->stream});
      out.push_back(std::move(si));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const SegmentInfo& a, const SegmentInfo& b) { return a.address < b.address; });
  return out;
}

namespace {

std::string summary_table(const std::string& title, const MemoryStats& s) {
  std::ostringstream os;
  const std::string rule(83, '=');
  const std::string thin(83, '-');
  char line[160];
  os << rule << "\n";
  std::snprintf(line, sizeof line, "| %-79s |\n", title.c_str());
  os << line << thin << "\n";
  std::snprintf(line, sizeof line, "| %-22s | %12s | %12s | %12s | %12s |\n", "Metric", "Cur Usage",
                "Peak Usage", "Tot Alloc", "Tot Freed");
  os << line << thin << "\n";
  auto bytes_row = [&](const char* label, const StatValue& v) {
    std::snprintf(line, sizeof line, "| %-22s | %12s | %12s | %12s | %12s |\n", label,
                  format_bytes(v.current).c_str(), format_bytes(v.peak).c_str(),
                  format_bytes(v.allocated).c_str(), format_bytes(v.freed).c_str());
    os << line;
  };
  auto count_row = [&](const char* label, const StatValue& v) {
    std::snprintf(line, sizeof line, "| %-22s | %12lld | %12lld | %12lld | %12lld |\n", label,
                  static_cast<long long>(v.current), static_cast<long long>(v.peak),
                  static_cast<long long>(v.allocated), static_cast<long long>(v.freed));
    os << line;
  };
  bytes_row("Allocated memory", s.allocated_bytes);
  bytes_row("Requested memory", s.requested_bytes);
  bytes_row("Active memory", s.active_bytes);
  bytes_row("Reserved memory", s.reserved_bytes);
  bytes_row("Non-releasable memory", s.inactive_split_bytes);
  count_row("Allocations", s.allocations);
  count_row("Segments", s.segments);
  os << thin << "\n";
  auto event_row = [&](const char* a, std::int64_t x, const char* b, std::int64_t y) {
    std::snprintf(line, sizeof line, "| %-22s | %12lld | %-27s | %12lld |\n", a, static_cast<long long>(x), b,
                  static_cast<long long>(y));
    os << line;
  };
  event_row("Cache hits", s.cache_hits, "Cache misses", s.cache_misses);
  event_row("Cross-stream hits", s.cross_stream_hits, "Splits", s.splits);
  event_row("Merges", s.merges, "Alloc retries", s.alloc_retries);
  event_row("OOMs", s.ooms, "Device mallocs", s.device_mallocs);
  event_row("Device frees", s.device_frees, "Events recorded", s.events_recorded);
  event_row("Host waits", s.host_waits, "Thread-cache hits", s.thread_cache_hits);
  os << rule << "\n";
  return os.str();
}

}  // namespace

std::string CachingDeviceAllocator::memory_summary() const {
  return summary_table(detail::str("minitensor memory summary: ", m_device, " (", m_backend->name(),
                                   caching_enabled() ? "" : ", caching off", ")"),
                       stats());
}

std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while ((v >= 1024.0 || v <= -1024.0) && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

namespace detail {
std::string memory_summary_table(const std::string& title, const MemoryStats& stats) {
  return summary_table(title, stats);
}
}  // namespace detail

}  // namespace mt
