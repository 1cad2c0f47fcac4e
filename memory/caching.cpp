// The stream-aware caching device allocator. Overview and rules in memory/detail/caching.h.
//
// Structures. A Segment is one backend allocation, owned by the pool of the stream that asked for it (a fully
// free one may move to another stream's pool); its Blocks tile it in address order (prev/next) and are only
// touched under that pool's lock. Free blocks sit in the pool's small or large set, ordered by (size,
// address), so lower_bound is the best fit.
//
// Why per-stream pools: a block released on its pool's stream can be reused by that stream at once with no
// event (stream order does it): one uncontended lock, one set lookup. Threads on different streams never
// share a lock on that path.
//
// Why shards of a stream's pool: threads that share a stream would all take its pool's one lock on every
// allocate and release that misses their thread cache (every large request), and that lock's line would move
// between their cores each time. Each thread slot allocates from a shard of its own (a Pool of the same
// stream), so threads meet only when one releases a block another allocated (it goes back to the shard of
// its segment) and on misses. A shard is an ordinary pool in every other respect (its own releases, fences
// and pending events); the shards of a stream differ only in that the stream orders reuse across them: a
// shard that misses moves a whole free segment of a sibling to itself before asking the backend, and the
// out-of-memory path takes any free block of a sibling, neither with a fence.
//
// Why per-thread caches on top: most of that path's time is the set (a lookup, a split, a merge: two erases
// and two inserts per allocate + release pair), and threads that share a stream share its lock. A block
// released on its own stream and used on no other may instead stay in the releasing thread's cache, still
// counted as used by its segment (so it is never merged, moved to another pool or freed meanwhile), and the
// thread's next request of that rounded size on that stream takes it back: a flag only other threads' drains
// ever contend for, a scan of 16 entries, no set. The stream rule is the pool's own: that stream orders the
// reuse.
//
// Statistics are per thread too (StatShard): every figure an operation changes goes to the calling thread's
// shard, written with plain loads and stores of relaxed atomics, and stats() sums the shards.
//
// Cross-stream reuse without per-release events: each pool numbers its releases (seq). When another stream
// misses in its own pool it looks at the others; a pool records a "fence" event on its stream covering the
// releases so far (at most one per miss), and once a fence completes every block released before it is safe
// for any stream. Blocks fresh from the backend are safe at once (seq 0). So the cost of cross-stream safety
// is paid on misses, which are followed by a driver call anyway, never on hits. Blocks come back from thread
// caches into their pool (and get their release number) before any search of other pools.
//
// Lock order: m_threads_mutex, then a thread cache's flag, then a pool's mutex (then m_pools_mutex).
#include "minitensor/memory/detail/caching_impl.h"

namespace mt {

// ---------------------------------------------------------------- sizes

std::size_t CachingDeviceAllocator::round_size(std::size_t bytes) {
  if (bytes < kGranule) return kGranule;
  return (bytes + kGranule - 1) / kGranule * kGranule;
}

std::size_t CachingDeviceAllocator::segment_size(std::size_t rounded) {
  if (rounded <= kSmallRequest) return kSmallSegment;
  if (rounded <= kLargeRequest) return kLargeSegment;
  return (rounded + kSegmentRounding - 1) / kSegmentRounding * kSegmentRounding;
}

// ---------------------------------------------------------------- lifetime

thread_local CachingDeviceAllocator::ThreadCaches CachingDeviceAllocator::t_caches;

CachingDeviceAllocator::CachingDeviceAllocator(std::unique_ptr<MemoryBackend> backend, bool caching)
    : m_backend(std::move(backend)),
      m_device(m_backend->device()),
      m_id(g_next_allocator_id.fetch_add(1)),
      m_table(new std::atomic<Pool*>[kTableSize]) {
  m_caching.store(caching);
  for (std::size_t i = 0; i < kTableSize; ++i) m_table[i].store(nullptr, std::memory_order_relaxed);
  m_threads.push_back(std::make_shared<ThreadCache>());
  m_exit_cache = m_threads.back().get();
  // Segments of destroyed streams, safe for every stream (their work was waited for): never fenced.
  m_pools.push_back(std::make_unique<Pool>(no_stream(), 0u));
  m_orphans = m_pools.back().get();
  m_orphans->fenced_seq = m_orphans->safe_seq = kRetired;
  m_orphans->retired.store(true);
}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  // Threads still holding a cache of this allocator must not touch it any more: take their blocks back and
  // mark each cache dead under its flag (a thread that is exiting holds the flag while it gives its blocks
  // back, so this waits for it).
  {
    std::lock_guard<std::mutex> lock(m_threads_mutex);
    for (auto& cache : m_threads) {
      Block* blocks[kThreadCacheBlocks];
      cache->lock();
      const int n = cache->take_all(blocks);
      cache->dead.store(true);
      cache->unlock();
      return_blocks(blocks, n, cache->stats);
    }
  }
  for (auto& pool : m_pools) {
    for (auto& q : pool->pending)
      for (auto& p : q.items) m_backend->release_event(p.event);
    for (auto& f : pool->fences) m_backend->release_event(f.event);
    for (Segment* seg : pool->segments) {
      for (Block* b = seg->head; b; b = b->next)
        if (b->state == BlockState::Allocated)
          detail::log_error(
              detail::str(name(), ": destroyed while a block of ", b->size, " bytes is in use"));
      for (Block* b = seg->head; b;) {
        Block* next = b->next;
        delete b;
        b = next;
      }
      m_backend->deallocate(seg->ptr, seg->size);
      delete seg;
    }
  }
}

CachingDeviceAllocator::ThreadCaches::~ThreadCaches() {
  t_exiting = true;
  for (Entry& e : entries) {
    ThreadCache& cache = *e.cache;
    Block* blocks[kThreadCacheBlocks];
    // Held while the blocks go back: the allocator cannot finish dying meanwhile (its destructor takes it).
    cache.lock();
    if (!cache.dead.load()) {
      const int n = cache.take_all(blocks);
      const_cast<CachingDeviceAllocator*>(e.owner)->return_blocks(blocks, n, cache.stats);
      cache.orphaned.store(true);
    }
    cache.unlock();
  }
}

// ---------------------------------------------------------------- pools

// The table is open addressing with linear probing, read without a lock. A recycled pool's slot becomes a
// tombstone (probes pass it), and a tombstone followed by an empty slot becomes empty (no probe sequence can
// pass it to reach a pool further on). Live entries never move, so a lock-free probe never misses a pool
// that stays in the table. The shards of a stream have neighbouring home slots: looking for all of them
// reads a line or two.

std::size_t CachingDeviceAllocator::home_slot(cudaStream_t stream, unsigned shard) {
  const auto key = reinterpret_cast<std::uintptr_t>(stream);
  return (static_cast<std::size_t>((key >> 4) * 0x9E3779B97F4A7C15ull >> 40) + shard) & (kTableSize - 1);
}

CachingDeviceAllocator::Pool* CachingDeviceAllocator::find_pool(cudaStream_t stream, unsigned shard) const {
  Pool* const tomb = tombstone();
  for (std::size_t n = 0, i = home_slot(stream, shard); n < kTableSize; ++n, i = (i + 1) & (kTableSize - 1)) {
    Pool* p = m_table[i].load(std::memory_order_acquire);
    if (!p) return nullptr;
    if (p != tomb && p->own_stream() == stream && p->shard.load(std::memory_order_relaxed) == shard) return p;
  }
  return nullptr;
}

int CachingDeviceAllocator::find_shards(cudaStream_t stream, Pool** out) const {
  int n = 0;
  for (unsigned k = 0; k < kShards; ++k)
    if (Pool* p = find_pool(stream, k)) out[n++] = p;
  return n;
}

bool CachingDeviceAllocator::has_other_shard(cudaStream_t stream, unsigned shard) const {
  for (unsigned k = 0; k < kShards; ++k)
    if (k != shard && find_pool(stream, k)) return true;
  return false;
}

CachingDeviceAllocator::Pool& CachingDeviceAllocator::pool_for(cudaStream_t stream, unsigned shard,
                                                               StatShard& stats) {
  if (Pool* p = find_pool(stream, shard)) return *p;
  Pool* const tomb = tombstone();
  for (bool swept = false;; swept = true) {
    {
      std::lock_guard<std::mutex> lock(m_pools_mutex);
      std::size_t slot = kTableSize;
      for (std::size_t n = 0, i = home_slot(stream, shard); n < kTableSize;
           ++n, i = (i + 1) & (kTableSize - 1)) {
        Pool* p = m_table[i].load(std::memory_order_acquire);
        if (p == tomb) {
          if (slot == kTableSize) slot = i;
          continue;
        }
        if (!p) {
          if (slot == kTableSize) slot = i;
          break;
        }
        if (p->own_stream() == stream && p->shard.load(std::memory_order_relaxed) == shard) return *p;
      }
      // The limit counts streams: another shard of a stream that has one already is no new stream.
      const bool new_stream = !has_other_shard(stream, shard);
      if (!new_stream || m_n_streams < kMaxPools) {
        // A recycled pool has no segments, events or blocks left: only its stream and flags change.
        Pool* p = nullptr;
        if (!m_spare_pools.empty()) {
          m_pools.push_back(std::move(m_spare_pools.back()));
          m_spare_pools.pop_back();
          p = m_pools.back().get();
        } else {
          m_pools.push_back(std::make_unique<Pool>(stream, shard));
          p = m_pools.back().get();
        }
        p->stream.store(stream, std::memory_order_relaxed);
        p->shard.store(shard, std::memory_order_relaxed);
        p->retired.store(false, std::memory_order_relaxed);
        m_table[slot].store(p, std::memory_order_release);
        if (new_stream) ++m_n_streams;
        return *p;
      }
      MT_CHECK(!swept, InvalidArgument, name(), ": more than ", kMaxPools,
               " live streams have allocated from ", m_device,
               " (a stream's pool is recycled once it is destroyed and nothing of it is in use)");
    }
    for (Pool* p : all_pools())  // pools of destroyed streams whose last block came back since
      if (p->retired.load(std::memory_order_acquire) && p != m_orphans) maybe_recycle(*p, stats);
  }
}

std::vector<CachingDeviceAllocator::Pool*> CachingDeviceAllocator::all_pools() const {
  std::lock_guard<std::mutex> lock(m_pools_mutex);
  std::vector<Pool*> out;
  out.reserve(m_pools.size());
  for (auto& p : m_pools) out.push_back(p.get());
  return out;
}

// ---------------------------------------------------------------- pool search

// Takes the best-fitting free block of `pool` for `rounded` bytes, splitting off a remainder worth keeping.
// `foreign` (WholeSegment, AnyBlock): the caller's stream is not the pool's, so only blocks a completed fence
// covers qualify.
CachingDeviceAllocator::Block* CachingDeviceAllocator::take_cached(Pool& pool, std::size_t rounded, Take mode,
                                                                   StatShard& stats) {
  const bool small = rounded <= kSmallRequest;
  auto& set = pool.set_for(small);
  if (set.empty()) return nullptr;
  const bool foreign = mode == Take::WholeSegment || mode == Take::AnyBlock;
  if (foreign) {
    poll_fences(pool, *m_backend);
    if (pool.seq > pool.fenced_seq && pool.fences.size() < kMaxFences) {
      try {
        pool.fences.push_back({m_backend->record_event(pool.own_stream()), pool.seq});
        pool.fenced_seq = pool.seq;
        ++stats.events_recorded;
        poll_fences(pool, *m_backend);  // an idle stream passes its fence at once
      } catch (const Error&) {
        // A stream that cannot take an event (destroyed, say): its blocks stay its own.
      }
    }
  }
  Block key;
  key.size = rounded;
  auto it = set.lower_bound(&key);
  int scanned = 0;
  const bool segment = mode == Take::WholeSegment || mode == Take::SiblingSegment;
  auto usable = [&](const Block* c) {
    if (foreign && c->free_seq > pool.safe_seq) return false;
    if (!segment) return true;
    // A whole free segment, that has not already moved too often: two streams allocating the same sizes at
    // once would otherwise trade one segment back and forth, a cross-pool lock and miss on every call.
    return c->segment->n_used == 0 && c->size == c->segment->size && c->segment->n_moves < kMaxSegmentMoves;
  };
  while (it != set.end() && !usable(*it)) {
    if (++scanned > kMaxForeignScan) return nullptr;
    ++it;
  }
  if (it == set.end()) return nullptr;
  if (!segment) return take_block(pool, set, it, rounded, stats);
  // Detach the whole segment; the caller adopts it into its own pool. (The totals do not change: statistics
  // are not kept per pool.)
  Block* whole = *it;
  set.erase(it);
  Segment* seg = whole->segment;
  auto& segs = pool.segments;
  segs[seg->index] = segs.back();
  segs[seg->index]->index = seg->index;
  segs.pop_back();
  return whole;
}

// A segment moved from another stream's pool: from now on this pool's stream reuses it without events, which
// is what keeps cross-stream reuse from becoming a per-allocation cost. From a sibling shard (`sibling`), the
// stream's work may still use it: it counts as released now, so other streams wait for this pool's next
// fence.
void CachingDeviceAllocator::adopt_segment(Pool& own, Block* whole, bool sibling) {
  Segment* seg = whole->segment;
  seg->pool = &own;
  ++seg->n_moves;
  seg->index = own.segments.size();
  own.segments.push_back(seg);
  whole->free_seq = sibling ? ++own.seq : 0;  // else the old stream's fence has passed: nothing uses it
  own.set_for(seg->small).insert(whole);
}

// Under the block's pool's lock.
Allocation CachingDeviceAllocator::hand_out(Block* b, std::size_t bytes, cudaStream_t stream, bool hit,
                                            bool foreign, StatShard& stats) {
  b->state = BlockState::Allocated;
  b->requested = bytes;
  b->stream = stream;
  b->uses.clear();
  ++b->segment->n_used;
  ++b->segment->pool->n_used;
  count_hand_out(stats, static_cast<std::int64_t>(b->size), static_cast<std::int64_t>(bytes), hit);
  if (foreign) ++stats.cross_stream_hits;
  return make_allocation(b->ptr, bytes, stream, b);
}

void* CachingDeviceAllocator::backend_allocate(std::size_t seg_bytes) {
  const std::size_t cap = m_cap.load(std::memory_order_relaxed);
  std::size_t cur = m_reserved.load(std::memory_order_relaxed);
  do {
    if (cap && (seg_bytes > cap || cur > cap - seg_bytes)) return nullptr;
  } while (!m_reserved.compare_exchange_weak(cur, cur + seg_bytes, std::memory_order_relaxed));
  void* p = nullptr;
  try {
    p = m_backend->allocate(seg_bytes);
  } catch (...) {
    m_reserved.fetch_sub(seg_bytes, std::memory_order_relaxed);
    throw;
  }
  if (!p) m_reserved.fetch_sub(seg_bytes, std::memory_order_relaxed);
  return p;
}

CachingDeviceAllocator::Block* CachingDeviceAllocator::new_segment(Pool& own, std::size_t rounded, void* ptr,
                                                                   std::size_t seg_bytes, StatShard& stats) {
  auto* seg = new Segment;
  seg->ptr = static_cast<char*>(ptr);
  seg->size = seg_bytes;
  seg->pool = &own;
  seg->small = rounded <= kSmallRequest;
  Block* head = own.new_block();
  head->ptr = seg->ptr;
  head->size = seg_bytes;
  head->segment = seg;
  seg->head = head;
  seg->index = own.segments.size();
  own.segments.push_back(seg);
  stats.segments.increase(1);
  stats.reserved_bytes.increase(static_cast<std::int64_t>(seg_bytes));
  ++stats.device_mallocs;
  auto& set = own.set_for(seg->small);
  return take_block(own, set, set.insert(head).first, rounded, stats);
}

// Free segments are taken out of their pools under the pool's lock and handed back to the backend after it
// (cudaFree synchronises the device).
void CachingDeviceAllocator::release_free_segments(bool oversize_only, StatShard& stats) {
  std::vector<Segment*> freed;
  for (Pool* pool : all_pools()) {
    {
      std::lock_guard<std::mutex> lock(pool->mutex);
      auto& segs = pool->segments;
      for (std::size_t i = 0; i < segs.size();) {
        Segment* seg = segs[i];
        if (seg->n_used != 0 || (oversize_only && seg->size <= kLargeSegment)) {
          ++i;
          continue;
        }
        // Nothing is used, so coalescing has left one free block spanning the segment.
        Block* b = seg->head;
        pool->set_for(seg->small).erase(b);
        pool->retire(b);
        segs[i] = segs.back();
        segs[i]->index = i;
        segs.pop_back();
        freed.push_back(seg);
      }
    }
    for (Segment* seg : freed) {
      m_backend->deallocate(seg->ptr, seg->size);
      m_reserved.fetch_sub(seg->size, std::memory_order_relaxed);
      stats.segments.decrease(1);
      stats.reserved_bytes.decrease(static_cast<std::int64_t>(seg->size));
      ++stats.device_frees;
      delete seg;
    }
    freed.clear();
  }
}

// Blocks the host until every release event and every pool's work released so far is done, so that every free
// block is free for every stream. The waits happen outside the pool's lock (a wait may take as long as the
// device's queued work): under it, note the streams to wait for; wait on a fresh event of each (a stream
// completes its events in order, so that covers every release event on it); then poll again under it.
void CachingDeviceAllocator::wait_all_events(StatShard& stats) {
  auto retired = [this](cudaStream_t st) { return stream_retired(st); };
  std::vector<cudaStream_t> streams;
  for (Pool* pool : all_pools()) {
    streams.clear();
    std::uint64_t seq = 0;
    bool fence_own = false;
    {
      std::lock_guard<std::mutex> lock(pool->mutex);
      if (pool->n_pending) process_events(*pool, *m_backend, stats, kPollAll, retired);
      for (const PendingQueue& q : pool->pending) streams.push_back(q.stream);
      for (const Unfenced& u : pool->unfenced) streams.push_back(u.stream);
      seq = pool->seq;
      fence_own = seq > pool->safe_seq && !pool->retired.load(std::memory_order_relaxed);
      if (fence_own) streams.push_back(pool->own_stream());
    }
    std::sort(streams.begin(), streams.end());
    streams.erase(std::unique(streams.begin(), streams.end()), streams.end());
    bool own_done = false;
    for (cudaStream_t st : streams) {
      if (retired(st)) continue;
      try {
        MemoryBackend::EventHandle e = m_backend->record_event(st);
        ++stats.events_recorded;
        struct Release {
          MemoryBackend& backend;
          MemoryBackend::EventHandle e;
          ~Release() { backend.release_event(e); }
        } release{*m_backend, e};
        m_backend->event_wait(e);
        ++stats.host_waits;
        if (fence_own && st == pool->own_stream()) own_done = true;
      } catch (const Error& e) {
        detail::log_error(std::string("caching allocator: cannot wait for a stream: ") + e.what());
      }
    }
    std::lock_guard<std::mutex> lock(pool->mutex);
    if (pool->n_pending) process_events(*pool, *m_backend, stats, kPollAll, retired);
    poll_fences(*pool, *m_backend);
    if (own_done && pool->safe_seq < seq) pool->safe_seq = seq;
    if (pool->fences.empty() && pool->fenced_seq < pool->safe_seq) pool->fenced_seq = pool->safe_seq;
  }
}

// ---------------------------------------------------------------- allocate / release

Allocation CachingDeviceAllocator::allocate(std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return make_allocation(nullptr, 0, stream, nullptr);
  std::unique_lock<std::mutex> exit_lock;
  ThreadCache& here = local(exit_lock);
  StatShard& stats = here.stats;
  if (!caching_enabled()) return allocate_uncached(bytes, stream, stats);
  MT_CHECK(bytes <= std::numeric_limits<std::size_t>::max() / 2, OutOfMemoryError, m_device,
           ": cannot allocate ", bytes, " bytes (more than any device has)");
  const std::size_t rounded = round_size(bytes);
  auto retired = [this](cudaStream_t st) { return stream_retired(st); };

  // The hit paths: the thread's own cache (no lock shared with other threads), then the stream's own pool
  // (one lock, one lookup).
  if (rounded <= kThreadCacheRequest && here.n.load(kRelaxed) != 0)
    if (Allocation a = take_thread_cached(here, bytes, rounded, stream)) return a;
  Pool& own = pool_for(stream, here.shard, stats);
  {
    std::lock_guard<std::mutex> lock(own.mutex);
    if (own.n_pending) process_events(own, *m_backend, stats, kPollBudget, retired);
    if (Block* b = take_cached(own, rounded, Take::Own, stats))
      return hand_out(b, bytes, stream, true, false, stats);
  }
  // The thread's cache holds blocks of other sizes or streams: back to their pools (merged with their
  // neighbours), then the own pool once more.
  if (flush_thread_cache(here, stats)) {
    std::lock_guard<std::mutex> lock(own.mutex);
    if (Block* b = take_cached(own, rounded, Take::Own, stats))
      return hand_out(b, bytes, stream, true, false, stats);
  }

  // Blocks other streams released and have finished with, then the backend, then the reclaim ladder; the pool
  // is searched again after each reclaim step.
  // On an ordinary miss only whole free segments move between pools: a block lent out of another pool's
  // segment would go back to that pool on release, and a pool living on loans would miss every time. The
  // stream's other shards first: their blocks need no fence (the stream orders the reuse).
  auto search_others = [&](Take mode) -> Allocation {
    const std::vector<Pool*> pools = all_pools();
    for (const bool siblings : {true, false})
      for (Pool* pool : pools) {
        if (pool == &own || (pool->own_stream() == stream) != siblings) continue;
        const Take m = !siblings ? mode : mode == Take::AnyBlock ? Take::Own : Take::SiblingSegment;
        Block* b = nullptr;
        bool recycle = false;
        {
          std::lock_guard<std::mutex> lock(pool->mutex);
          if (pool->n_pending) {
            process_events(*pool, *m_backend, stats, kPollAll, retired);
            recycle = pool->idle();  // a destroyed stream's last release came back
          }
          b = take_cached(*pool, rounded, m, stats);
          if (b && (m == Take::AnyBlock || m == Take::Own))
            return hand_out(b, bytes, stream, true, !siblings, stats);
        }
        if (recycle && !b) maybe_recycle(*pool, stats);
        if (b) {
          std::lock_guard<std::mutex> lock(own.mutex);
          adopt_segment(own, b, siblings);
          auto& set = own.set_for(b->segment->small);
          return hand_out(take_block(own, set, set.find(b), rounded, stats), bytes, stream, true, !siblings,
                          stats);
        }
      }
    return Allocation();
  };
  auto search_all = [&]() -> Allocation {
    {
      std::lock_guard<std::mutex> lock(own.mutex);
      process_events(own, *m_backend, stats, kPollAll, retired);
      if (Block* b = take_cached(own, rounded, Take::Own, stats))
        return hand_out(b, bytes, stream, true, false, stats);
    }
    if (Allocation a = search_others(Take::WholeSegment)) return a;
    return search_others(Take::AnyBlock);
  };

  if (Allocation a = search_others(Take::WholeSegment)) return a;
  const std::size_t seg_bytes = segment_size(rounded);
  void* ptr = backend_allocate(seg_bytes);
  if (!ptr) {
    ++stats.alloc_retries;
    drain_thread_caches(stats);  // other threads' cached blocks, merged back, may be what fits
    release_free_segments(/*oversize_only=*/true, stats);
    if (Allocation a = search_all()) return a;
    ptr = backend_allocate(seg_bytes);
  }
  if (!ptr) {
    drain_thread_caches(stats);  // blocks cached meanwhile (before the wait, so that its fences cover them)
    wait_all_events(stats);
    release_free_segments(/*oversize_only=*/false, stats);
    if (Allocation a = search_all()) return a;
    ptr = backend_allocate(seg_bytes);
  }
  if (!ptr) throw_oom(bytes, rounded, seg_bytes, stats);

  std::lock_guard<std::mutex> lock(own.mutex);
  Block* b = new_segment(own, rounded, ptr, seg_bytes, stats);
  return hand_out(b, bytes, stream, false, false, stats);
}

void CachingDeviceAllocator::deallocate(const Allocation& a) noexcept {
  auto* b = static_cast<Block*>(a.context());
  std::unique_lock<std::mutex> exit_lock;
  ThreadCache& here = local(exit_lock);
  StatShard& stats = here.stats;
  if (!b) {
    if (!a.data()) return;  // empty allocation
    // An uncached allocation: cudaFree synchronises the device, so work still using it finishes first.
    m_backend->deallocate(a.data(), a.size());
    m_reserved.fetch_sub(a.size(), std::memory_order_relaxed);
    const auto n = static_cast<std::int64_t>(a.size());
    stats.count_release(n, n);
    stats.active_bytes.decrease(n);
    stats.reserved_bytes.decrease(n);
    stats.segments.decrease(1);
    ++stats.device_frees;
    return;
  }
  // Nothing but this release changes the block's stream, uses or segment->pool now (a segment with a used
  // block does not move), so they are read before taking any lock.
  Pool& pool = *b->segment->pool;
  const cudaStream_t pool_stream = pool.own_stream();
  const bool own_stream_only = b->stream == pool_stream && b->uses.empty();

  // The hit paths: released on the pool's own stream and used nowhere else, so stream order makes reuse by
  // that stream safe: into the thread's cache, else the pool.
  // (Not for a destroyed stream's blocks: its pool is recycled once they are all back.)
  if (own_stream_only && &here != m_exit_cache && m_thread_cache.load(kRelaxed) && caching_enabled() &&
      !pool.retired.load(kRelaxed) && keep_thread_cached(here, b))
    return;
  if (release_locked(pool, pool_stream, b, own_stream_only, stats)) maybe_recycle(pool, stats);
}

// A block released by its user, under its pool's lock. true: the pool is retired (its stream destroyed) and
// may have nothing in use any more.
bool CachingDeviceAllocator::release_locked(Pool& pool, cudaStream_t pool_stream, Block* b,
                                            bool own_stream_only, StatShard& stats) {
  std::lock_guard<std::mutex> lock(pool.mutex);
  stats.count_release(static_cast<std::int64_t>(b->size), static_cast<std::int64_t>(b->requested));
  const bool retired = pool.retired.load(std::memory_order_relaxed);
  if (own_stream_only) {
    make_free(pool, b, stats);
    return retired;
  }
  // Streams other than the pool's that may still use the block: each gets an event, and the block returns to
  // the pool once all have completed. The pool's own stream orders any later reuse by itself.
  b->state = BlockState::AwaitingStreams;
  auto fence = [&](cudaStream_t st) {
    if (stream_retired(st)) return;  // destroyed after its work was waited for: nothing of it uses the block
    ++b->n_pending;
    try {
      pool.enqueue(st, m_backend->record_event(st), b);
      ++stats.events_recorded;
    } catch (const std::exception& e) {
      // Without an event there is no telling when the block is safe: it waits until one can be recorded
      // (process_events tries again; empty_cache waits for it). A stream being captured takes none by rule
      // (MemoryBackend::record_event): no error then.
      pool.unfenced.push_back({b, st});
      ++pool.n_pending;
      const auto* cuda = dynamic_cast<const CudaError*>(&e);
      if (!cuda || cuda->code() != cudaErrorStreamCaptureUnsupported)
        detail::log_error(std::string("caching allocator: cannot record a release event: ") + e.what());
    }
  };
  if (b->stream != pool_stream) fence(b->stream);
  for (cudaStream_t st : b->uses)
    if (st != pool_stream && st != b->stream) fence(st);  // record_stream keeps `uses` free of duplicates
  if (b->n_pending == 0) make_free(pool, b, stats);
  return retired;
}

// Every shard of a destroyed stream is retired together (stream_destroying), and revived together
// (stream_created); a stream with a live shard is live.
bool CachingDeviceAllocator::stream_retired(cudaStream_t stream) const {
  Pool* shards[kShards];
  if (const int n = find_shards(stream, shards)) {
    for (int i = 0; i < n; ++i)
      if (!shards[i]->retired.load(std::memory_order_acquire)) return false;
    return true;
  }
  std::lock_guard<std::mutex> lock(m_pools_mutex);
  return std::find(m_dead_streams.begin(), m_dead_streams.end(), stream) != m_dead_streams.end();
}

void CachingDeviceAllocator::record_stream(const Allocation& allocation, cudaStream_t stream) {
  auto* b = static_cast<Block*>(allocation.context());
  if (!b || stream == b->stream) return;
  Pool& pool = *b->segment->pool;
  std::lock_guard<std::mutex> lock(pool.mutex);
  if (std::find(b->uses.begin(), b->uses.end(), stream) == b->uses.end()) b->uses.push_back(stream);
}

}  // namespace mt
