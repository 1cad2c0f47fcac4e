// The caching device allocator: per-thread caches of small blocks (memory/caching.cpp has the overview).
#include "minitensor/memory/detail/caching_impl.h"

namespace mt {

// ---------------------------------------------------------------- thread caches

CachingDeviceAllocator::ThreadCache& CachingDeviceAllocator::local(std::unique_lock<std::mutex>& exit_lock) {
  if (t_exiting) [[unlikely]] {
    exit_lock = std::unique_lock<std::mutex>(m_exit_mutex);
    return *m_exit_cache;
  }
  ThreadCaches& t = t_caches;
  if (t.last_owner == this && t.last_id == m_id) [[likely]]
    return *t.last;
  return local_slow();
}

CachingDeviceAllocator::ThreadCache& CachingDeviceAllocator::local_slow() {
  ThreadCaches& t = t_caches;
  ThreadCache* found = nullptr;
  for (auto& e : t.entries)
    if (e.owner == this && e.id == m_id) found = e.cache.get();
  if (!found) {
    // Forget caches of allocators that are gone.
    std::erase_if(t.entries, [](const ThreadCaches::Entry& e) { return e.cache->dead.load(); });
    std::shared_ptr<ThreadCache> cache;
    {
      std::lock_guard<std::mutex> lock(m_threads_mutex);
      for (auto& c : m_threads) {
        bool was_orphaned = true;
        if (c->orphaned.compare_exchange_strong(was_orphaned, false)) {
          cache = c;
          break;
        }
      }
      if (!cache) {
        cache = std::make_shared<ThreadCache>();
        // Slots are dense (caches of exited threads are adopted), so up to kShards threads that share a
        // stream each get a shard of their own.
        cache->shard = static_cast<unsigned>(m_threads.size() % kShards);
        m_threads.push_back(cache);
      }
    }
    found = cache.get();
    t.entries.push_back({this, m_id, std::move(cache)});
  }
  t.last_owner = this;
  t.last_id = m_id;
  t.last = found;
  return *found;
}

// A request of `rounded` bytes on `stream` that a block in the thread's cache served before.
Allocation CachingDeviceAllocator::take_thread_cached(ThreadCache& here, std::size_t bytes,
                                                      std::size_t rounded, cudaStream_t stream) {
  here.lock();
  const int n = here.n.load(kRelaxed);
  for (int i = n - 1; i >= 0; --i) {  // newest first
    ThreadCache::Entry& e = here.entries[i];
    if (e.key != rounded || e.stream != stream) continue;
    Block* b = e.block;
    for (int j = i + 1; j < n; ++j) here.entries[j - 1] = here.entries[j];
    here.n.store(n - 1, kRelaxed);
    here.bytes.store(here.bytes.load(kRelaxed) - b->size, kRelaxed);
    // Still "used" for its segment and pool: only these fields change (snapshot() reads them with every
    // cache's flag held).
    b->requested = bytes;
    count_hand_out(here.stats, static_cast<std::int64_t>(b->size), static_cast<std::int64_t>(bytes), true);
    ++here.stats.thread_cache_hits;
    here.unlock();
    return make_allocation(b->ptr, bytes, stream, b);
  }
  here.unlock();
  return Allocation();
}

// Keeps a released block (its own stream's, used on no other) in the thread's cache; false: it does not fit.
bool CachingDeviceAllocator::keep_thread_cached(ThreadCache& here, Block* b) {
  const std::size_t key = round_size(b->requested);
  if (key > kThreadCacheRequest) return false;
  Block* evicted = nullptr;
  here.lock();
  int n = here.n.load(kRelaxed);
  std::size_t bytes = here.bytes.load(kRelaxed);
  if (n == kThreadCacheBlocks) {  // full: the oldest goes back to its pool
    evicted = here.entries[0].block;
    bytes -= evicted->size;
    for (int j = 1; j < n; ++j) here.entries[j - 1] = here.entries[j];
    --n;
  }
  here.entries[n] = {b, b->stream, key};
  here.n.store(n + 1, kRelaxed);
  here.bytes.store(bytes + b->size, kRelaxed);
  here.stats.count_release(static_cast<std::int64_t>(b->size), static_cast<std::int64_t>(b->requested));
  here.stats.active_bytes.decrease(static_cast<std::int64_t>(b->size));
  here.unlock();
  if (evicted) return_blocks(&evicted, 1, here.stats);
  return true;
}

bool CachingDeviceAllocator::flush_thread_cache(ThreadCache& cache, StatShard& stats) {
  if (cache.n.load(kRelaxed) == 0) return false;
  Block* blocks[kThreadCacheBlocks];
  cache.lock();
  const int n = cache.take_all(blocks);
  cache.unlock();
  return_blocks(blocks, n, stats);
  return n > 0;
}

void CachingDeviceAllocator::drain_thread_caches(StatShard& stats) {
  std::vector<Block*> blocks;
  {
    std::lock_guard<std::mutex> lock(m_threads_mutex);
    Block* taken[kThreadCacheBlocks];
    for (auto& cache : m_threads) {
      if (cache->n.load(kRelaxed) == 0) continue;
      cache->lock();
      const int n = cache->take_all(taken);
      cache->unlock();
      blocks.insert(blocks.end(), taken, taken + n);
    }
  }
  return_blocks(blocks.data(), static_cast<int>(blocks.size()), stats);
}

// Blocks from thread caches back into their pools (each still counted used by its segment, active no more).
void CachingDeviceAllocator::return_blocks(Block* const* blocks, int n, StatShard& stats) {
  for (int i = 0; i < n; ++i) {
    Block* b = blocks[i];
    Pool& pool = *b->segment->pool;  // stable: a segment with a used block does not move
    bool retired = false;
    {
      std::lock_guard<std::mutex> lock(pool.mutex);
      make_free(pool, b, stats, /*was_active=*/false);
      retired = pool.retired.load(std::memory_order_relaxed);
    }
    if (retired) maybe_recycle(pool, stats);
  }
}

void CachingDeviceAllocator::set_thread_cache_enabled(bool enabled) {
  m_thread_cache.store(enabled, kRelaxed);
  if (!enabled) {
    std::unique_lock<std::mutex> exit_lock;
    drain_thread_caches(local(exit_lock).stats);
  }
}

}  // namespace mt
