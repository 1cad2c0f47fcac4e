// The caching device allocator: stream lifetimes (destroyed streams, recycled pools) (memory/caching.cpp
// has the overview).
#include "minitensor/memory/detail/caching_impl.h"

namespace mt {

void CachingDeviceAllocator::maybe_recycle(Pool& pool, StatShard& stats) {
  std::lock_guard<std::mutex> lock(pool.mutex);
  if (&pool == m_orphans || !pool.retired.load(std::memory_order_relaxed)) return;
  if (pool.n_pending)
    process_events(pool, *m_backend, stats, kPollAll, [this](cudaStream_t st) { return stream_retired(st); });
  if (!pool.idle()) return;
  {
    std::lock_guard<std::mutex> pools_lock(m_pools_mutex);
    auto it = std::find_if(m_pools.begin(), m_pools.end(), [&](const auto& p) { return p.get() == &pool; });
    if (it == m_pools.end()) return;  // recycled already
    {
      // Nothing is used, so coalescing has left one free block spanning each segment.
      std::lock_guard<std::mutex> orphans_lock(m_orphans->mutex);
      for (Segment* seg : pool.segments) {
        Block* whole = seg->head;
        pool.set_for(seg->small).erase(whole);
        seg->pool = m_orphans;
        seg->n_moves = 0;  // no longer traded between two live streams
        seg->index = m_orphans->segments.size();
        m_orphans->segments.push_back(seg);
        whole->free_seq = 0;
        m_orphans->set_for(seg->small).insert(whole);
      }
    }
    pool.segments.clear();
    pool.seq = pool.fenced_seq = pool.safe_seq = 0;
    pool.pending.clear();
    Pool* const tomb = tombstone();
    const cudaStream_t stream = pool.own_stream();
    const unsigned shard = pool.shard.load(std::memory_order_relaxed);
    std::size_t i = home_slot(stream, shard);
    for (std::size_t n = 0; n < kTableSize && m_table[i].load(std::memory_order_relaxed) != &pool; ++n)
      i = (i + 1) & (kTableSize - 1);
    if (m_table[i].load(std::memory_order_relaxed) == &pool) {
      m_table[i].store(tomb, std::memory_order_release);
      if (!has_other_shard(stream, shard)) --m_n_streams;  // the stream's last pool
      while (m_table[i].load(std::memory_order_relaxed) == tomb &&
             !m_table[(i + 1) & (kTableSize - 1)].load(std::memory_order_relaxed)) {
        m_table[i].store(nullptr, std::memory_order_release);
        i = (i - 1) & (kTableSize - 1);
      }
    }
    m_spare_pools.push_back(std::move(*it));
    m_pools.erase(it);
  }
}

// ---------------------------------------------------------------- stream lifetime

void CachingDeviceAllocator::stream_destroying(cudaStream_t stream) noexcept {
  Pool* shards[kShards];
  const int n_shards = find_shards(stream, shards);
  // A stream that never allocated has no pool, but blocks of other pools may still name it (record_stream):
  // they must stop naming it all the same.
  const auto named = [&] {
    for (Pool* p : all_pools()) {
      std::lock_guard<std::mutex> lock(p->mutex);
      for (Segment* seg : p->segments)
        for (Block* b = seg->head; b; b = b->next)
          if (b->state == BlockState::Allocated &&
              std::find(b->uses.begin(), b->uses.end(), stream) != b->uses.end())
            return true;
      for (const Unfenced& u : p->unfenced)
        if (u.stream == stream) return true;
      for (const PendingQueue& q : p->pending)
        if (q.stream == stream) return true;
    }
    return false;
  };
  if (n_shards == 0 && !named()) return;
  // Wait for the stream's work, so its blocks are free for every stream from now on.
  bool drained = false;
  try {
    MemoryBackend::EventHandle e = m_backend->record_event(stream);
    m_backend->event_wait(e);
    m_backend->release_event(e);
    drained = true;
  } catch (const std::exception& e) {
    detail::log_error(std::string("caching allocator: cannot wait for a stream being destroyed (its free "
                                  "blocks stay its own): ") +
                      e.what());
  }
  std::unique_lock<std::mutex> exit_lock;
  StatShard* stats = nullptr;
  try {
    stats = &local(exit_lock).stats;
  } catch (const std::exception& e) {
    detail::log_error(std::string("caching allocator: stream_destroying: ") + e.what());
    return;
  }
  // Blocks of the stream kept in thread caches go back to its pools, which may then be recycled at once.
  drain_thread_caches(*stats);
  if (drained) {
    // Its pool may be recycled before blocks of other pools used on it come back: they must not name it then
    // (an event recorded on a destroyed stream is undefined). Its work is done, so they need no event on it.
    for (Pool* p : all_pools()) {
      std::lock_guard<std::mutex> lock(p->mutex);
      const cudaStream_t own = p->own_stream();
      for (Segment* seg : p->segments)
        for (Block* b = seg->head; b; b = b->next) {
          if (b->state != BlockState::Allocated) continue;
          std::erase(b->uses, stream);
          if (b->stream == stream && own != stream) b->stream = own;
        }
      for (std::size_t i = 0; i < p->unfenced.size();) {
        const Unfenced u = p->unfenced[i];
        if (u.stream != stream) {
          ++i;
          continue;
        }
        p->unfenced[i] = p->unfenced.back();
        p->unfenced.pop_back();
        --p->n_pending;
        if (--u.block->n_pending == 0) make_free(*p, u.block, *stats);
      }
    }
  }
  if (n_shards == 0) {
    if (drained) {
      std::lock_guard<std::mutex> lock(m_pools_mutex);
      m_dead_streams.push_back(stream);
    }
    return;
  }
  // Every shard retires: a stream is retired when all its shards are (stream_retired).
  for (int k = 0; k < n_shards; ++k) {
    Pool* pool = shards[k];
    std::lock_guard<std::mutex> lock(pool->mutex);
    for (auto& f : pool->fences) m_backend->release_event(f.event);  // passed (or never to be polled)
    pool->fences.clear();
    pool->fenced_seq = kRetired;  // never fenced again
    if (drained) pool->safe_seq = kRetired;
    pool->retired.store(true, std::memory_order_release);
  }
  for (int k = 0; k < n_shards; ++k) maybe_recycle(*shards[k], *stats);
}

void CachingDeviceAllocator::stream_created(cudaStream_t stream) noexcept {
  {
    std::lock_guard<std::mutex> lock(m_pools_mutex);
    std::erase(m_dead_streams, stream);
  }
  Pool* shards[kShards];
  const int n_shards = find_shards(stream, shards);  // none: fresh pools when it first allocates
  for (int k = 0; k < n_shards; ++k) {
    Pool* pool = shards[k];
    std::lock_guard<std::mutex> lock(pool->mutex);
    if (!pool->retired.load(std::memory_order_relaxed) || pool->own_stream() != stream) continue;
    // Blocks of the old stream are still in use: the pool lives on. What was released so far is free for
    // every stream (the old stream's work was waited for); what the new stream releases is fenced again.
    pool->fenced_seq = pool->safe_seq = pool->seq;
    pool->retired.store(false, std::memory_order_release);
  }
}

Allocation CachingDeviceAllocator::allocate_uncached(std::size_t bytes, cudaStream_t stream,
                                                     StatShard& stats) {
  void* ptr = backend_allocate(bytes);
  if (!ptr) {
    // Blocks cached before caching was switched off are the only thing to give back.
    drain_thread_caches(stats);
    wait_all_events(stats);
    release_free_segments(false, stats);
    ptr = backend_allocate(bytes);
  }
  if (!ptr) throw_oom(bytes, bytes, bytes, stats);
  const auto n = static_cast<std::int64_t>(bytes);
  count_hand_out(stats, n, n, /*hit=*/false);
  stats.reserved_bytes.increase(n);
  stats.segments.increase(1);
  ++stats.device_mallocs;
  return make_allocation(ptr, bytes, stream, nullptr);
}

void CachingDeviceAllocator::throw_oom(std::size_t bytes, std::size_t rounded, std::size_t seg_bytes,
                                       StatShard& stats) {
  ++stats.ooms;
  std::size_t largest = 0;
  for (Pool* pool : all_pools()) {
    std::lock_guard<std::mutex> lock(pool->mutex);
    if (!pool->small.empty()) largest = std::max(largest, (*pool->small.rbegin())->size);
    if (!pool->large.empty()) largest = std::max(largest, (*pool->large.rbegin())->size);
  }
  const MemoryStats s = this->stats();
  const auto allocated = static_cast<std::size_t>(s.allocated_bytes.current);
  const auto reserved = static_cast<std::size_t>(s.reserved_bytes.current);
  std::size_t free_b = 0, total_b = 0;
  std::string device_line;
  try {
    m_backend->memory_info(free_b, total_b);
    device_line =
        detail::str("device free ", bytes_and_exact(free_b), " of ", bytes_and_exact(total_b), " total");
  } catch (const std::exception& e) {
    device_line = std::string("device memory unknown: ") + e.what();
  }
  const std::size_t cap = memory_cap();
  MT_THROW(OutOfMemoryError, m_device, ": out of memory: tried to allocate ", bytes_and_exact(bytes),
           " (block ", rounded, " B, segment ", seg_bytes, " B); allocated ", bytes_and_exact(allocated),
           ", reserved ", bytes_and_exact(reserved), " of which reserved but unallocated ",
           bytes_and_exact(reserved - std::min(reserved, allocated)), "; largest free cached block ",
           bytes_and_exact(largest), "; ", device_line,
           cap ? detail::str("; cap ", bytes_and_exact(cap), " (set_memory_cap)") : std::string());
}

}  // namespace mt
