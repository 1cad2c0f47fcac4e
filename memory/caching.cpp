// The stream-aware caching device allocator. Overview and rules in caching.h.
//
// Structures. A Segment is one backend allocation, owned for life by the pool of the stream that asked for
// it; its Blocks tile it in address order (prev/next) and are only touched under that pool's lock. Free
// blocks sit in the pool's small or large set, ordered by (size, address), so lower_bound is the best fit.
//
// Why per-stream pools: a block released on its pool's stream can be reused by that stream at once with no
// event (stream order does it), which is the hit path: one uncontended lock, one set lookup. Threads on
// different streams never share a lock on that path.
//
// Cross-stream reuse without per-release events: each pool numbers its releases (seq). When another stream
// misses in its own pool it looks at the others; a pool records a "fence" event on its stream covering the
// releases so far (at most one per miss), and once a fence completes every block released before it is safe
// for any stream. Blocks fresh from the backend are safe at once (seq 0). So the cost of cross-stream safety
// is paid on misses, which are followed by a driver call anyway, never on hits.
#include "memory/caching.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <set>
#include <sstream>

#include "runtime/error.h"

namespace mt {

// Blocks and segments are written on every allocate and release of their pool. A cache line each, so that
// two streams' pools (used by different threads) never share one, whoever allocated the objects.
struct alignas(64) CachingDeviceAllocator::Block {
  char* ptr = nullptr;
  std::size_t size = 0;
  std::size_t requested = 0;
  Segment* segment = nullptr;
  Block* prev = nullptr;
  Block* next = nullptr;
  cudaStream_t stream = nullptr;  // of the current / last allocation
  BlockState state = BlockState::Free;
  int n_pending = 0;               // release events not yet completed
  std::uint64_t free_seq = 0;      // the pool's release number when it became free (0: never used)
  std::vector<cudaStream_t> uses;  // other streams recorded with record_stream
};

struct alignas(64) CachingDeviceAllocator::Segment {
  char* ptr = nullptr;
  std::size_t size = 0;
  Pool* pool = nullptr;
  bool small = false;
  int n_used = 0;   // blocks allocated or awaiting streams
  int n_moves = 0;  // times it moved to another stream's pool on an ordinary miss
  Block* head = nullptr;
  std::size_t index = 0;  // in pool.segments
};

namespace {

using Block = CachingDeviceAllocator::Block;

struct BySizeThenAddress {
  bool operator()(const Block* a, const Block* b) const {
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

// Recycles the nodes of one pool's free-block sets. Every cache hit splits a block and every release merges
// it back, so without this each allocate/release pair is a malloc and a free of a tree node, and glibc's free
// path is what threads on different streams end up sharing. Used under the pool's lock only.
class NodeCache {
 public:
  NodeCache() = default;
  NodeCache(const NodeCache&) = delete;
  NodeCache& operator=(const NodeCache&) = delete;
  ~NodeCache() {
    for (void* p : m_free) ::operator delete(p);
  }
  void* get(std::size_t bytes) {
    if (bytes == m_bytes && !m_free.empty()) {
      void* p = m_free.back();
      m_free.pop_back();
      return p;
    }
    return ::operator new(bytes);
  }
  void put(void* p, std::size_t bytes) noexcept {
    if (m_bytes == 0) m_bytes = bytes;
    if (bytes == m_bytes && m_free.size() < kMaxKept) {
      try {
        m_free.push_back(p);
        return;
      } catch (...) {
      }
    }
    ::operator delete(p);
  }

 private:
  static constexpr std::size_t kMaxKept = 4096;
  std::vector<void*> m_free;
  std::size_t m_bytes = 0;  // the node size (the sets' only single-object allocation)
};

template <class T>
struct CachedNodeAllocator {
  using value_type = T;
  NodeCache* cache;
  explicit CachedNodeAllocator(NodeCache* c) noexcept : cache(c) {}
  template <class U>
  CachedNodeAllocator(const CachedNodeAllocator<U>& other) noexcept : cache(other.cache) {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(n == 1 ? cache->get(sizeof(T)) : ::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n == 1) {
      cache->put(p, sizeof(T));
    } else {
      ::operator delete(p);
    }
  }
  template <class U>
  bool operator==(const CachedNodeAllocator<U>& other) const noexcept {
    return cache == other.cache;
  }
};

// Ordinary misses move a whole free segment between stream pools at most this often; after that it stays with
// its pool, and the other stream gets a segment of its own (the reclaim path can still lend its blocks).
constexpr int kMaxSegmentMoves = 4;

using FreeBlockSet = std::set<Block*, BySizeThenAddress, CachedNodeAllocator<Block*>>;

struct PendingRelease {
  MemoryBackend::EventHandle event;
  Block* block;
};

struct Fence {
  MemoryBackend::EventHandle event;
  std::uint64_t seq;
};

// How far a foreign search walks past blocks that are not yet safe for it before giving up.
constexpr int kMaxForeignScan = 64;
// Fences outstanding per pool: past this, a stuck stream does not get more.
constexpr std::size_t kMaxFences = 16;

void add(StatValue& into, const StatValue& v) {
  into.current += v.current;
  into.peak += v.peak;
  into.allocated += v.allocated;
  into.freed += v.freed;
}

void add(MemoryStats& into, const MemoryStats& s) {
  add(into.allocations, s.allocations);
  add(into.allocated_bytes, s.allocated_bytes);
  add(into.requested_bytes, s.requested_bytes);
  add(into.active_bytes, s.active_bytes);
  add(into.reserved_bytes, s.reserved_bytes);
  add(into.segments, s.segments);
  add(into.inactive_split_bytes, s.inactive_split_bytes);
  into.cache_hits += s.cache_hits;
  into.cache_misses += s.cache_misses;
  into.cross_stream_hits += s.cross_stream_hits;
  into.splits += s.splits;
  into.merges += s.merges;
  into.alloc_retries += s.alloc_retries;
  into.ooms += s.ooms;
  into.device_mallocs += s.device_mallocs;
  into.device_frees += s.device_frees;
  into.events_recorded += s.events_recorded;
  into.host_waits += s.host_waits;
}

void reset_peaks(MemoryStats& s) {
  for (StatValue* v : {&s.allocations, &s.allocated_bytes, &s.requested_bytes, &s.active_bytes,
                       &s.reserved_bytes, &s.segments, &s.inactive_split_bytes})
    v->peak = v->current;
}

std::string bytes_and_exact(std::size_t bytes) {
  return detail::str(format_bytes(static_cast<std::int64_t>(bytes)), " (", bytes, " B)");
}

}  // namespace

// Cache-line aligned: pools of different streams are used by different threads at once.
struct alignas(64) CachingDeviceAllocator::Pool {
  explicit Pool(cudaStream_t s) : stream(s) {}

  cudaStream_t stream;  // read without the lock by every pool_for() probe that passes this pool's slot
  // The mutex and everything after it change on every allocate and release: a cache line away from `stream`,
  // so lookups by other threads do not pull this pool's line while its own thread works.
  alignas(64) std::mutex mutex;
  NodeCache nodes;  // before the sets: it must outlive them
  FreeBlockSet small{BySizeThenAddress{}, CachedNodeAllocator<Block*>(&nodes)};
  FreeBlockSet large{BySizeThenAddress{}, CachedNodeAllocator<Block*>(&nodes)};
  std::vector<PendingRelease> pending;
  std::deque<Fence> fences;
  std::uint64_t seq = 0;         // releases so far
  std::uint64_t fenced_seq = 0;  // covered by the newest fence recorded
  std::uint64_t safe_seq = 0;    // covered by the newest fence completed
  std::vector<Segment*> segments;
  std::vector<Block*> spare;  // Block objects to reuse (splits make them, merges retire them)
  MemoryStats stats;

  FreeBlockSet& set_for(bool small_pool) { return small_pool ? small : large; }

  Block* new_block() {
    if (spare.empty()) return new Block;
    Block* b = spare.back();
    spare.pop_back();
    *b = Block{};
    return b;
  }
  void retire(Block* b) { spare.push_back(b); }

  ~Pool() {
    for (Block* b : spare) delete b;
  }
};

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

CachingDeviceAllocator::CachingDeviceAllocator(std::unique_ptr<MemoryBackend> backend, bool caching)
    : m_backend(std::move(backend)),
      m_device(m_backend->device()),
      m_table(new std::atomic<Pool*>[kTableSize]) {
  m_caching.store(caching);
  for (std::size_t i = 0; i < kTableSize; ++i) m_table[i].store(nullptr, std::memory_order_relaxed);
}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  for (auto& pool : m_pools) {
    for (auto& p : pool->pending) m_backend->release_event(p.event);
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

// ---------------------------------------------------------------- pools

CachingDeviceAllocator::Pool& CachingDeviceAllocator::pool_for(cudaStream_t stream) {
  const auto key = reinterpret_cast<std::uintptr_t>(stream);
  const std::size_t start =
      static_cast<std::size_t>((key >> 4) * 0x9E3779B97F4A7C15ull >> 40) & (kTableSize - 1);
  for (std::size_t i = start;; i = (i + 1) & (kTableSize - 1)) {
    Pool* p = m_table[i].load(std::memory_order_acquire);
    if (!p) break;
    if (p->stream == stream) return *p;
  }
  std::lock_guard<std::mutex> lock(m_pools_mutex);
  for (std::size_t i = start;; i = (i + 1) & (kTableSize - 1)) {
    Pool* p = m_table[i].load(std::memory_order_acquire);
    if (p && p->stream == stream) return *p;
    if (!p) {
      MT_CHECK(m_pools.size() < kMaxPools, InvalidArgument, name(), ": more than ", kMaxPools,
               " distinct streams have allocated from ", m_device);
      m_pools.push_back(std::make_unique<Pool>(stream));
      m_table[i].store(m_pools.back().get(), std::memory_order_release);
      return *m_pools.back();
    }
  }
}

std::vector<CachingDeviceAllocator::Pool*> CachingDeviceAllocator::all_pools() const {
  std::lock_guard<std::mutex> lock(m_pools_mutex);
  std::vector<Pool*> out;
  out.reserve(m_pools.size());
  for (auto& p : m_pools) out.push_back(p.get());
  return out;
}

namespace {

// Puts a block that nothing uses any more back into its pool's free set, merging it with free neighbours.
template <class PoolT>
void make_free(PoolT& pool, Block* b) {
  b->state = BlockState::Free;
  b->uses.clear();
  b->free_seq = ++pool.seq;
  --b->segment->n_used;
  pool.stats.active_bytes.decrease(static_cast<std::int64_t>(b->size));
  auto& set = pool.set_for(b->segment->small);
  if (Block* prev = b->prev; prev && prev->state == BlockState::Free) {
    set.erase(prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next) b->next->prev = prev;
    prev->free_seq = std::max(prev->free_seq, b->free_seq);
    pool.retire(b);
    b = prev;
    ++pool.stats.merges;
  }
  if (Block* next = b->next; next && next->state == BlockState::Free) {
    set.erase(next);
    b->size += next->size;
    b->next = next->next;
    if (next->next) next->next->prev = b;
    b->free_seq = std::max(b->free_seq, next->free_seq);
    pool.retire(next);
    ++pool.stats.merges;
  }
  set.insert(b);
}

// Completed release events hand their blocks back. Never blocks.
template <class PoolT>
void process_events(PoolT& pool, MemoryBackend& backend) {
  auto& pending = pool.pending;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    PendingRelease p = pending[i];
    if (backend.event_done(p.event)) {
      backend.release_event(p.event);
      if (--p.block->n_pending == 0) make_free(pool, p.block);
    } else {
      pending[kept++] = p;
    }
  }
  pending.resize(kept);
}

template <class PoolT>
void poll_fences(PoolT& pool, MemoryBackend& backend) {
  // One stream completes its events in order, so the front is the oldest.
  while (!pool.fences.empty() && backend.event_done(pool.fences.front().event)) {
    pool.safe_seq = pool.fences.front().seq;
    backend.release_event(pool.fences.front().event);
    pool.fences.pop_front();
  }
}

// Removes the free block at `it` from its set, splitting off a remainder worth keeping.
template <class PoolT, class SetT>
Block* take_block(PoolT& pool, SetT& set, typename SetT::iterator it, std::size_t rounded) {
  Block* b = *it;
  set.erase(it);
  const std::size_t remainder = b->size - rounded;
  // Small blocks split down to a granule; large ones only when the rest is a large request itself, so that
  // large segments are not ground into pieces only small requests could use (and those use their own pool).
  const bool small = b->segment->small;
  if (small ? remainder >= CachingDeviceAllocator::kGranule
            : remainder > CachingDeviceAllocator::kSmallRequest) {
    Block* rest = pool.new_block();
    rest->ptr = b->ptr + rounded;
    rest->size = remainder;
    rest->segment = b->segment;
    rest->prev = b;
    rest->next = b->next;
    rest->free_seq = b->free_seq;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = rounded;
    set.insert(rest);
    ++pool.stats.splits;
  }
  return b;
}

}  // namespace

// Takes the best-fitting free block of `pool` for `rounded` bytes, splitting off a remainder worth keeping.
// `foreign`: the caller's stream is not the pool's, so only blocks a completed fence covers qualify.
CachingDeviceAllocator::Block* CachingDeviceAllocator::take_cached(Pool& pool, std::size_t rounded,
                                                                   Take mode) {
  const bool small = rounded <= kSmallRequest;
  auto& set = pool.set_for(small);
  if (set.empty()) return nullptr;
  const bool foreign = mode != Take::Own;
  if (foreign) {
    poll_fences(pool, *m_backend);
    if (pool.seq > pool.fenced_seq && pool.fences.size() < kMaxFences) {
      try {
        pool.fences.push_back({m_backend->record_event(pool.stream), pool.seq});
        pool.fenced_seq = pool.seq;
        ++pool.stats.events_recorded;
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
  auto usable = [&](const Block* c) {
    if (!foreign) return true;
    if (c->free_seq > pool.safe_seq) return false;
    if (mode == Take::AnyBlock) return true;
    // A whole free segment, that has not already moved too often: two streams allocating the same sizes at
    // once would otherwise trade one segment back and forth, a cross-pool lock and miss on every call.
    return c->segment->n_used == 0 && c->size == c->segment->size && c->segment->n_moves < kMaxSegmentMoves;
  };
  while (it != set.end() && !usable(*it)) {
    if (++scanned > kMaxForeignScan) return nullptr;
    ++it;
  }
  if (it == set.end()) return nullptr;
  if (mode != Take::WholeSegment) return take_block(pool, set, it, rounded);
  // Detach the whole segment; the caller adopts it into its own pool.
  Block* whole = *it;
  set.erase(it);
  Segment* seg = whole->segment;
  auto& segs = pool.segments;
  segs[seg->index] = segs.back();
  segs[seg->index]->index = seg->index;
  segs.pop_back();
  pool.stats.segments.current -= 1;
  pool.stats.reserved_bytes.current -= static_cast<std::int64_t>(seg->size);
  return whole;
}

// A segment moved from another stream's pool: from now on this pool's stream reuses it without events, which
// is what keeps cross-stream reuse from becoming a per-allocation cost.
void CachingDeviceAllocator::adopt_segment(Pool& own, Block* whole) {
  Segment* seg = whole->segment;
  seg->pool = &own;
  ++seg->n_moves;
  seg->index = own.segments.size();
  own.segments.push_back(seg);
  whole->free_seq = 0;  // the old stream's fence has passed: nothing uses it
  auto bump = [](StatValue& v, std::int64_t n) {
    v.current += n;
    v.peak = std::max(v.peak, v.current);
  };
  bump(own.stats.segments, 1);
  bump(own.stats.reserved_bytes, static_cast<std::int64_t>(seg->size));
  own.set_for(seg->small).insert(whole);
}

Allocation CachingDeviceAllocator::hand_out(Pool& pool, Block* b, std::size_t bytes, cudaStream_t stream,
                                            bool hit, bool foreign) {
  b->state = BlockState::Allocated;
  b->requested = bytes;
  b->stream = stream;
  b->uses.clear();
  ++b->segment->n_used;
  MemoryStats& s = pool.stats;
  s.count_hand_out(static_cast<std::int64_t>(b->size), static_cast<std::int64_t>(bytes), hit);
  if (foreign) ++s.cross_stream_hits;
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
                                                                   std::size_t seg_bytes) {
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
  own.stats.segments.increase(1);
  own.stats.reserved_bytes.increase(static_cast<std::int64_t>(seg_bytes));
  ++own.stats.device_mallocs;
  auto& set = own.set_for(seg->small);
  return take_block(own, set, set.insert(head).first, rounded);
}

void CachingDeviceAllocator::release_free_segments(bool oversize_only) {
  for (Pool* pool : all_pools()) {
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
      m_backend->deallocate(seg->ptr, seg->size);
      m_reserved.fetch_sub(seg->size, std::memory_order_relaxed);
      pool->stats.segments.decrease(1);
      pool->stats.reserved_bytes.decrease(static_cast<std::int64_t>(seg->size));
      ++pool->stats.device_frees;
      pool->retire(b);
      segs[i] = segs.back();
      segs[i]->index = i;
      segs.pop_back();
      delete seg;
    }
  }
}

// Blocks the host until every release event and every pool's work released so far is done, so that every free
// block is free for every stream.
void CachingDeviceAllocator::wait_all_events() {
  for (Pool* pool : all_pools()) {
    std::lock_guard<std::mutex> lock(pool->mutex);
    for (auto& p : pool->pending) {
      m_backend->event_wait(p.event);
      ++pool->stats.host_waits;
    }
    process_events(*pool, *m_backend);
    for (auto& f : pool->fences) m_backend->release_event(f.event);
    pool->fences.clear();
    if (pool->seq > pool->safe_seq) {
      try {
        MemoryBackend::EventHandle e = m_backend->record_event(pool->stream);
        ++pool->stats.events_recorded;
        m_backend->event_wait(e);
        ++pool->stats.host_waits;
        m_backend->release_event(e);
        pool->safe_seq = pool->seq;
      } catch (const Error& e) {
        detail::log_error(std::string("caching allocator: cannot fence a stream: ") + e.what());
      }
    }
    pool->fenced_seq = pool->safe_seq;
  }
}

// ---------------------------------------------------------------- allocate / release

Allocation CachingDeviceAllocator::allocate(std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return make_allocation(nullptr, 0, stream, nullptr);
  if (!caching_enabled()) return allocate_uncached(bytes, stream);
  MT_CHECK(bytes <= std::numeric_limits<std::size_t>::max() / 2, OutOfMemoryError, m_device,
           ": cannot allocate ", bytes, " bytes (more than any device has)");
  const std::size_t rounded = round_size(bytes);
  Pool& own = pool_for(stream);

  // The hit path: the stream's own pool, one lock, one lookup.
  {
    std::lock_guard<std::mutex> lock(own.mutex);
    if (!own.pending.empty()) process_events(own, *m_backend);
    if (Block* b = take_cached(own, rounded, Take::Own)) return hand_out(own, b, bytes, stream, true, false);
  }

  // Blocks other streams released and have finished with, then the backend, then the reclaim ladder; the pool
  // is searched again after each reclaim step.
  // On an ordinary miss only whole free segments move between streams: a block lent out of another pool's
  // segment would go back to that pool on release, and a stream living on loans would miss every time.
  auto search_others = [&](Take mode) -> Allocation {
    for (Pool* pool : all_pools()) {
      if (pool == &own) continue;
      Block* b = nullptr;
      {
        std::lock_guard<std::mutex> lock(pool->mutex);
        if (!pool->pending.empty()) process_events(*pool, *m_backend);
        b = take_cached(*pool, rounded, mode);
        if (b && mode == Take::AnyBlock) return hand_out(*pool, b, bytes, stream, true, true);
      }
      if (b) {
        std::lock_guard<std::mutex> lock(own.mutex);
        adopt_segment(own, b);
        auto& set = own.set_for(b->segment->small);
        return hand_out(own, take_block(own, set, set.find(b), rounded), bytes, stream, true, true);
      }
    }
    return Allocation();
  };
  auto search_all = [&]() -> Allocation {
    {
      std::lock_guard<std::mutex> lock(own.mutex);
      process_events(own, *m_backend);
      if (Block* b = take_cached(own, rounded, Take::Own))
        return hand_out(own, b, bytes, stream, true, false);
    }
    if (Allocation a = search_others(Take::WholeSegment)) return a;
    return search_others(Take::AnyBlock);
  };

  if (Allocation a = search_others(Take::WholeSegment)) return a;
  const std::size_t seg_bytes = segment_size(rounded);
  void* ptr = backend_allocate(seg_bytes);
  if (!ptr) {
    {
      std::lock_guard<std::mutex> lock(own.mutex);
      ++own.stats.alloc_retries;
    }
    release_free_segments(/*oversize_only=*/true);
    if (Allocation a = search_all()) return a;
    ptr = backend_allocate(seg_bytes);
  }
  if (!ptr) {
    wait_all_events();
    release_free_segments(/*oversize_only=*/false);
    if (Allocation a = search_all()) return a;
    ptr = backend_allocate(seg_bytes);
  }
  if (!ptr) throw_oom(bytes, rounded, seg_bytes);

  std::lock_guard<std::mutex> lock(own.mutex);
  Block* b = new_segment(own, rounded, ptr, seg_bytes);
  return hand_out(own, b, bytes, stream, false, false);
}

void CachingDeviceAllocator::deallocate(const Allocation& a) noexcept {
  auto* b = static_cast<Block*>(a.context());
  if (!b) {
    if (!a.data()) return;  // empty allocation
    // An uncached allocation: cudaFree synchronises the device, so work still using it finishes first.
    m_backend->deallocate(a.data(), a.size());
    m_reserved.fetch_sub(a.size(), std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(m_uncached_mutex);
    const auto n = static_cast<std::int64_t>(a.size());
    m_uncached_stats.allocations.decrease(1);
    for (StatValue* v : {&m_uncached_stats.allocated_bytes, &m_uncached_stats.requested_bytes,
                         &m_uncached_stats.active_bytes, &m_uncached_stats.reserved_bytes})
      v->decrease(n);
    m_uncached_stats.segments.decrease(1);
    ++m_uncached_stats.device_frees;
    return;
  }
  Pool& pool = *b->segment->pool;
  std::lock_guard<std::mutex> lock(pool.mutex);
  MemoryStats& s = pool.stats;
  s.allocations.decrease(1);
  s.allocated_bytes.decrease(static_cast<std::int64_t>(b->size));
  s.requested_bytes.decrease(static_cast<std::int64_t>(b->requested));

  // The hit path: released on the pool's own stream and used nowhere else. Stream order makes reuse safe.
  if (b->stream == pool.stream && b->uses.empty()) {
    make_free(pool, b);
    return;
  }
  // Streams other than the pool's that may still use the block: each gets an event, and the block returns to
  // the pool once all have completed. The pool's own stream orders any later reuse by itself.
  b->state = BlockState::AwaitingStreams;
  bool failed = false;
  auto fence = [&](cudaStream_t st) {
    try {
      pool.pending.push_back({m_backend->record_event(st), b});
      ++b->n_pending;
      ++s.events_recorded;
    } catch (const std::exception& e) {
      failed = true;
      detail::log_error(std::string("caching allocator: cannot record a release event: ") + e.what());
    }
  };
  if (b->stream != pool.stream) fence(b->stream);
  for (cudaStream_t st : b->uses)
    if (st != pool.stream && st != b->stream) fence(st);  // record_stream keeps `uses` free of duplicates
  // Without an event on every stream there is no telling when the block is safe: it is never reused.
  if (failed) b->n_pending += 1 << 20;
  if (b->n_pending == 0) make_free(pool, b);
}

void CachingDeviceAllocator::record_stream(const Allocation& allocation, cudaStream_t stream) {
  auto* b = static_cast<Block*>(allocation.context());
  if (!b || stream == b->stream) return;
  Pool& pool = *b->segment->pool;
  std::lock_guard<std::mutex> lock(pool.mutex);
  if (std::find(b->uses.begin(), b->uses.end(), stream) == b->uses.end()) b->uses.push_back(stream);
}

Allocation CachingDeviceAllocator::allocate_uncached(std::size_t bytes, cudaStream_t stream) {
  void* ptr = backend_allocate(bytes);
  if (!ptr) {
    // Blocks cached before caching was switched off are the only thing to give back.
    wait_all_events();
    release_free_segments(false);
    ptr = backend_allocate(bytes);
  }
  if (!ptr) throw_oom(bytes, bytes, bytes);
  std::lock_guard<std::mutex> lock(m_uncached_mutex);
  const auto n = static_cast<std::int64_t>(bytes);
  m_uncached_stats.allocations.increase(1);
  for (StatValue* v : {&m_uncached_stats.allocated_bytes, &m_uncached_stats.requested_bytes,
                       &m_uncached_stats.active_bytes, &m_uncached_stats.reserved_bytes})
    v->increase(n);
  m_uncached_stats.segments.increase(1);
  ++m_uncached_stats.device_mallocs;
  ++m_uncached_stats.cache_misses;
  return make_allocation(ptr, bytes, stream, nullptr);
}

void CachingDeviceAllocator::throw_oom(std::size_t bytes, std::size_t rounded, std::size_t seg_bytes) {
  {
    std::lock_guard<std::mutex> lock(m_uncached_mutex);
    ++m_uncached_stats.ooms;
  }
  std::size_t largest = 0;
  for (Pool* pool : all_pools()) {
    std::lock_guard<std::mutex> lock(pool->mutex);
    if (!pool->small.empty()) largest = std::max(largest, (*pool->small.rbegin())->size);
    if (!pool->large.empty()) largest = std::max(largest, (*pool->large.rbegin())->size);
  }
  const MemoryStats s = stats();
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

// ---------------------------------------------------------------- introspection

MemoryStats CachingDeviceAllocator::stats() const {
  MemoryStats out;
  for (Pool* pool : all_pools()) {
    std::lock_guard<std::mutex> lock(pool->mutex);
    MemoryStats s = pool->stats;
    // Free bytes of split segments: counted on demand (current only), it is not on any hot path.
    std::int64_t inactive = 0;
    for (const Segment* seg : pool->segments) {
      if (!seg->head->next) continue;
      for (const Block* b = seg->head; b; b = b->next)
        if (b->state == BlockState::Free) inactive += static_cast<std::int64_t>(b->size);
    }
    s.inactive_split_bytes.current = inactive;
    s.inactive_split_bytes.peak = inactive;
    add(out, s);
  }
  std::lock_guard<std::mutex> lock(m_uncached_mutex);
  add(out, m_uncached_stats);
  return out;
}

void CachingDeviceAllocator::reset_peak_stats() {
  for (Pool* pool : all_pools()) {
    std::lock_guard<std::mutex> lock(pool->mutex);
    reset_peaks(pool->stats);
  }
  std::lock_guard<std::mutex> lock(m_uncached_mutex);
  reset_peaks(m_uncached_stats);
}

void CachingDeviceAllocator::empty_cache() {
  wait_all_events();
  release_free_segments(false);
}

void CachingDeviceAllocator::set_memory_fraction(double fraction) {
  MT_CHECK(fraction > 0.0 && fraction <= 1.0, InvalidArgument, name(), ": memory fraction ", fraction,
           " is not in (0, 1]");
  std::size_t free_b = 0, total_b = 0;
  m_backend->memory_info(free_b, total_b);
  set_memory_cap(static_cast<std::size_t>(fraction * static_cast<double>(total_b)));
}

std::vector<SegmentInfo> CachingDeviceAllocator::snapshot() const {
  std::vector<SegmentInfo> out;
  for (Pool* pool : all_pools()) {
    std::lock_guard<std::mutex> lock(pool->mutex);
    for (const Segment* seg : pool->segments) {
      SegmentInfo si;
      si.address = reinterpret_cast<std::uintptr_t>(seg->ptr);
      si.size = seg->size;
      si.stream = pool->stream;
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
  event_row("Host waits", s.host_waits, "", 0);
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
