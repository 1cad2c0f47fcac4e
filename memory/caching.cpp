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
#include "minitensor/memory/detail/caching.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "minitensor/runtime/error.h"

namespace mt {

namespace {

// The unit of memory two threads must not both write: a pair of 64-byte lines (the adjacent-line prefetcher
// moves them together, so two threads writing one line each of a pair contend as if they shared one).
constexpr std::size_t kLine = 128;

}  // namespace

// Blocks and segments are written on every allocate and release of their pool. A line pair each, so that two
// streams' pools (used by different threads) never share one, whoever allocated the objects.
struct alignas(kLine) CachingDeviceAllocator::Block {
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

struct alignas(kLine) CachingDeviceAllocator::Segment {
  char* ptr = nullptr;
  std::size_t size = 0;
  Pool* pool = nullptr;
  bool small = false;
  int n_used = 0;   // blocks allocated, awaiting streams or in a thread cache
  int n_moves = 0;  // times it moved to another stream's pool on an ordinary miss
  Block* head = nullptr;
  std::size_t index = 0;  // in pool.segments
};

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// A figure written by one thread at a time and read by any: relaxed loads and stores, which compile to plain
// moves (no locked read-modify-write on the hot path).
struct Counter {
  std::atomic<std::int64_t> value{0};
  void add(std::int64_t n) { value.store(value.load(kRelaxed) + n, kRelaxed); }
  Counter& operator++() {
    add(1);
    return *this;
  }
  std::int64_t get() const { return value.load(kRelaxed); }
};

struct ShardStat {
  Counter current, peak, allocated, freed;
  void increase(std::int64_t n) {
    current.add(n);
    allocated.add(n);
    if (current.get() > peak.get()) peak.value.store(current.get(), kRelaxed);
  }
  void decrease(std::int64_t n) {
    current.add(-n);
    freed.add(n);
  }
  void add_to(StatValue& v) const {
    v.current += current.get();
    v.peak += peak.get();
    v.allocated += allocated.get();
    v.freed += freed.get();
  }
  void reset_peak() { peak.value.store(current.get(), kRelaxed); }
};

}  // namespace

// One thread's share of the allocator's statistics (see MemoryStats). Only its thread writes it, except
// reset_peak_stats(), whose reset may be lost to a concurrent update.
struct CachingDeviceAllocator::StatShard {
  ShardStat allocations, allocated_bytes, requested_bytes, active_bytes, reserved_bytes, segments;
  Counter cache_hits, cache_misses, thread_cache_hits, cross_stream_hits, splits, merges, alloc_retries, ooms,
      device_mallocs, device_frees, events_recorded, host_waits;

  // A block handed out is given back by its user (it may stay active while other streams use it).
  void count_release(std::int64_t size, std::int64_t requested) {
    allocations.decrease(1);
    allocated_bytes.decrease(size);
    requested_bytes.decrease(requested);
  }
  void add_to(MemoryStats& s) const {
    allocations.add_to(s.allocations);
    allocated_bytes.add_to(s.allocated_bytes);
    requested_bytes.add_to(s.requested_bytes);
    active_bytes.add_to(s.active_bytes);
    reserved_bytes.add_to(s.reserved_bytes);
    segments.add_to(s.segments);
    s.cache_hits += cache_hits.get();
    s.cache_misses += cache_misses.get();
    s.thread_cache_hits += thread_cache_hits.get();
    s.cross_stream_hits += cross_stream_hits.get();
    s.splits += splits.get();
    s.merges += merges.get();
    s.alloc_retries += alloc_retries.get();
    s.ooms += ooms.get();
    s.device_mallocs += device_mallocs.get();
    s.device_frees += device_frees.get();
    s.events_recorded += events_recorded.get();
    s.host_waits += host_waits.get();
  }
  void reset_peaks() {
    for (ShardStat* v :
         {&allocations, &allocated_bytes, &requested_bytes, &active_bytes, &reserved_bytes, &segments})
      v->reset_peak();
  }
};

// One thread's cache of released blocks for one allocator, and its statistics. Its thread takes `busy` around
// every use (uncontended: one exchange and one store); another thread takes it only to drain the cache or to
// mark it dead when the allocator goes.
struct alignas(kLine) CachingDeviceAllocator::ThreadCache {
  struct Entry {
    Block* block;
    cudaStream_t stream;  // the block's, which is its pool's
    std::size_t key;      // round_size of the request that block served: what a later request must round to
  };

  std::atomic<bool> busy{false};
  std::atomic<bool> dead{false};      // the allocator is gone
  std::atomic<bool> orphaned{false};  // its thread has exited: a new thread may adopt it
  std::atomic<int> n{0};              // entries in use, oldest first; written under `busy`
  std::atomic<std::size_t> bytes{0};  // their block sizes; written under `busy`
  Entry entries[kThreadCacheBlocks];
  StatShard stats;

  void lock() {
    for (int spins = 0; busy.exchange(true, std::memory_order_acquire);) {
      // Held by a drain at most for a copy of 16 entries: spin a little, then give the core away.
      while (busy.load(kRelaxed))
        if (++spins > 64) std::this_thread::yield();
    }
  }
  void unlock() { busy.store(false, std::memory_order_release); }

  // Moves every entry's block to `out` (room for kThreadCacheBlocks); under `busy`.
  int take_all(Block** out) {
    const int count = n.load(kRelaxed);
    for (int i = 0; i < count; ++i) out[i] = entries[i].block;
    n.store(0, kRelaxed);
    bytes.store(0, kRelaxed);
    return count;
  }
};

// The caches of one thread, one per allocator it has used. On exit, the thread gives its blocks back to their
// pools and leaves each cache (its statistics) to be adopted.
struct CachingDeviceAllocator::ThreadCaches {
  struct Entry {
    const CachingDeviceAllocator* owner;
    std::uint64_t id;
    std::shared_ptr<ThreadCache> cache;
  };
  const CachingDeviceAllocator* last_owner = nullptr;  // the one found last, checked first
  std::uint64_t last_id = 0;
  ThreadCache* last = nullptr;
  std::vector<Entry> entries;

  ~ThreadCaches();
};

namespace {

// Set once this thread's ThreadCaches is destroyed: releases made after that (a thread_local or static
// object's destructor holding an Allocation) go through the allocator's shared stand-in.
thread_local bool t_exiting = false;

std::atomic<std::uint64_t> g_next_allocator_id{1};

// The stream of the orphan pool (segments of destroyed streams): no stream's handle.
cudaStream_t no_stream() {
  return reinterpret_cast<cudaStream_t>(~std::uintptr_t(0));
}

using Block = CachingDeviceAllocator::Block;

struct BySizeThenAddress {
  bool operator()(const Block* a, const Block* b) const {
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

// Memory for what a pool writes on every allocate and release besides its blocks and segments: its free-set
// nodes and the vectors that recycle them and its spare blocks. Whole line pairs, so that it never shares one
// with another pool's data, whichever thread allocates it: a thread that takes a segment from another
// stream's pool also grows that pool's vectors, and from that thread's own heap their buffers would land
// among its own pool's hot objects: threads on different streams would then contend for the same lines.
void* line_alloc(std::size_t bytes) {
  return ::operator new((bytes + kLine - 1) / kLine * kLine, std::align_val_t(kLine));
}
void line_free(void* p) noexcept {
  ::operator delete(p, std::align_val_t(kLine));
}

template <class T>
struct LineAllocator {
  using value_type = T;
  LineAllocator() = default;
  template <class U>
  LineAllocator(const LineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(line_alloc(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { line_free(p); }
  template <class U>
  bool operator==(const LineAllocator<U>&) const noexcept {
    return true;
  }
};

// Recycles the nodes of one pool's free-block sets. Every pool hit splits a block and every release merges it
// back, so without this each allocate/release pair is a malloc and a free of a tree node, and glibc's free
// path is what threads on different streams end up sharing. Used under the pool's lock only.
class NodeCache {
 public:
  NodeCache() = default;
  NodeCache(const NodeCache&) = delete;
  NodeCache& operator=(const NodeCache&) = delete;
  ~NodeCache() {
    for (void* p : m_free) line_free(p);
  }
  void* get(std::size_t bytes) {
    if (bytes == m_bytes && !m_free.empty()) {
      void* p = m_free.back();
      m_free.pop_back();
      return p;
    }
    return line_alloc(bytes);
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
    line_free(p);
  }

 private:
  static constexpr std::size_t kMaxKept = 4096;
  std::vector<void*, LineAllocator<void*>> m_free;
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

// The release events recorded on one stream, in record order. A stream completes its events in order, so the
// queue is polled from the front and the first incomplete event ends the scan: the cost of a poll does not
// grow with the number of releases pending.
struct PendingQueue {
  cudaStream_t stream;
  std::deque<PendingRelease> items;
};

// A release whose event could not be recorded: recorded again later (or the stream is gone), never reused
// before.
struct Unfenced {
  Block* block;
  cudaStream_t stream;
};

struct Fence {
  MemoryBackend::EventHandle event;
  std::uint64_t seq;
};

// How far a foreign search walks past blocks that are not yet safe for it before giving up.
constexpr int kMaxForeignScan = 64;
// Fences outstanding per pool: past this, a stuck stream does not get more.
constexpr std::size_t kMaxFences = 16;
// Event polls per allocation on the hit path: completed releases are taken in small steps, so a burst of
// completions is spread over later allocations (a miss takes them all before asking the backend).
constexpr std::size_t kPollBudget = 32;
constexpr std::size_t kPollAll = std::numeric_limits<std::size_t>::max();
constexpr std::uint64_t kRetired = std::numeric_limits<std::uint64_t>::max();

std::string bytes_and_exact(std::size_t bytes) {
  return detail::str(format_bytes(static_cast<std::int64_t>(bytes)), " (", bytes, " B)");
}

}  // namespace

// Line-pair aligned: pools of different streams are used by different threads at once.
struct alignas(kLine) CachingDeviceAllocator::Pool {
  explicit Pool(cudaStream_t s) : stream(s) {}

  // Read without the lock by every pool_for() probe that passes this pool's slot; a recycled pool gets
  // another stream.
  std::atomic<cudaStream_t> stream;
  // The mutex and everything after it change on every allocate and release: a line pair away from `stream`,
  // so lookups by other threads do not pull this pool's lines while its own thread works.
  alignas(kLine) std::mutex mutex;
  NodeCache nodes;  // before the sets: it must outlive them
  FreeBlockSet small{BySizeThenAddress{}, CachedNodeAllocator<Block*>(&nodes)};
  FreeBlockSet large{BySizeThenAddress{}, CachedNodeAllocator<Block*>(&nodes)};
  std::vector<PendingQueue> pending;  // one queue per stream with release events outstanding
  std::vector<Unfenced> unfenced;
  std::size_t n_pending = 0;  // entries of `pending` and `unfenced`
  int n_used = 0;             // blocks of its segments in use (allocated, awaiting streams or thread-cached)
  std::deque<Fence> fences;
  std::uint64_t seq = 0;         // releases so far
  std::uint64_t fenced_seq = 0;  // covered by the newest fence recorded
  std::uint64_t safe_seq = 0;    // covered by the newest fence completed
  // The stream was destroyed (stream_destroying): fenced_seq and safe_seq are kRetired, no event is recorded
  // on it. Read without the lock by releases that would fence it.
  std::atomic<bool> retired{false};
  std::vector<Segment*> segments;
  std::vector<Block*, LineAllocator<Block*>> spare;  // Block objects to reuse (splits make, merges retire)

  FreeBlockSet& set_for(bool small_pool) { return small_pool ? small : large; }
  cudaStream_t own_stream() const { return stream.load(std::memory_order_relaxed); }

  void enqueue(cudaStream_t st, MemoryBackend::EventHandle event, Block* b) {
    PendingQueue* q = nullptr;
    for (PendingQueue& x : pending)
      if (x.stream == st) q = &x;
    if (!q) q = &pending.emplace_back(PendingQueue{st, {}});
    q->items.push_back({event, b});
    ++n_pending;
  }
  // Retired, its stream's work waited for, and nothing of it in use or pending: its slot can go.
  bool idle() const {
    return retired.load(std::memory_order_relaxed) && safe_seq == kRetired && n_used == 0 && n_pending == 0;
  }

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
  m_pools.push_back(std::make_unique<Pool>(no_stream()));
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
// that stays in the table.
namespace {

CachingDeviceAllocator::Pool* tombstone() {
  static char marker;
  return reinterpret_cast<CachingDeviceAllocator::Pool*>(&marker);
}

}  // namespace

std::size_t CachingDeviceAllocator::home_slot(cudaStream_t stream) {
  const auto key = reinterpret_cast<std::uintptr_t>(stream);
  return static_cast<std::size_t>((key >> 4) * 0x9E3779B97F4A7C15ull >> 40) & (kTableSize - 1);
}

CachingDeviceAllocator::Pool* CachingDeviceAllocator::find_pool(cudaStream_t stream) const {
  Pool* const tomb = tombstone();
  for (std::size_t n = 0, i = home_slot(stream); n < kTableSize; ++n, i = (i + 1) & (kTableSize - 1)) {
    Pool* p = m_table[i].load(std::memory_order_acquire);
    if (!p) return nullptr;
    if (p != tomb && p->own_stream() == stream) return p;
  }
  return nullptr;
}

CachingDeviceAllocator::Pool& CachingDeviceAllocator::pool_for(cudaStream_t stream, StatShard& stats) {
  if (Pool* p = find_pool(stream)) return *p;
  Pool* const tomb = tombstone();
  for (bool swept = false;; swept = true) {
    {
      std::lock_guard<std::mutex> lock(m_pools_mutex);
      std::size_t slot = kTableSize;
      for (std::size_t n = 0, i = home_slot(stream); n < kTableSize; ++n, i = (i + 1) & (kTableSize - 1)) {
        Pool* p = m_table[i].load(std::memory_order_acquire);
        if (p == tomb) {
          if (slot == kTableSize) slot = i;
          continue;
        }
        if (!p) {
          if (slot == kTableSize) slot = i;
          break;
        }
        if (p->own_stream() == stream) return *p;
      }
      if (m_n_streams < kMaxPools) {
        // A recycled pool has no segments, events or blocks left: only its stream and flags change.
        Pool* p = nullptr;
        if (!m_spare_pools.empty()) {
          m_pools.push_back(std::move(m_spare_pools.back()));
          m_spare_pools.pop_back();
          p = m_pools.back().get();
        } else {
          m_pools.push_back(std::make_unique<Pool>(stream));
          p = m_pools.back().get();
        }
        p->stream.store(stream, std::memory_order_relaxed);
        p->retired.store(false, std::memory_order_relaxed);
        m_table[slot].store(p, std::memory_order_release);
        ++m_n_streams;
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

namespace {

// Puts a block that nothing uses any more back into its pool's free set, merging it with free neighbours.
// `was_active`: false for a block from a thread cache, whose active bytes went when it was cached.
template <class PoolT, class StatsT>
void make_free(PoolT& pool, Block* b, StatsT& stats, bool was_active = true) {
  b->state = BlockState::Free;
  b->uses.clear();
  b->free_seq = ++pool.seq;
  --b->segment->n_used;
  --pool.n_used;
  if (was_active) stats.active_bytes.decrease(static_cast<std::int64_t>(b->size));
  auto& set = pool.set_for(b->segment->small);
  if (Block* prev = b->prev; prev && prev->state == BlockState::Free) {
    set.erase(prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next) b->next->prev = prev;
    prev->free_seq = std::max(prev->free_seq, b->free_seq);
    pool.retire(b);
    b = prev;
    ++stats.merges;
  }
  if (Block* next = b->next; next && next->state == BlockState::Free) {
    set.erase(next);
    b->size += next->size;
    b->next = next->next;
    if (next->next) next->next->prev = b;
    b->free_seq = std::max(b->free_seq, next->free_seq);
    pool.retire(next);
    ++stats.merges;
  }
  set.insert(b);
}

// Completed release events hand their blocks back, at most `budget` polls. Never blocks. `is_retired` says
// whether a stream was destroyed (its work waited for): a release that could not get an event on it needs
// none any more. An entry leaves its queue only once its event has answered, so a poll that throws leaves
// the pool as it was.
template <class PoolT, class StatsT, class Retired>
void process_events(PoolT& pool, MemoryBackend& backend, StatsT& stats, std::size_t budget,
                    Retired&& is_retired) {
  auto release_one = [&](Block* b) {
    --pool.n_pending;
    if (--b->n_pending == 0) make_free(pool, b, stats);
  };
  for (std::size_t i = 0; i < pool.unfenced.size() && budget != 0; --budget) {
    const Unfenced u = pool.unfenced[i];
    if (!is_retired(u.stream)) {
      MemoryBackend::EventHandle event = nullptr;
      try {
        event = backend.record_event(u.stream);
      } catch (const std::exception&) {
        ++i;  // still no event: tried again later
        continue;
      }
      pool.unfenced[i] = pool.unfenced.back();
      pool.unfenced.pop_back();
      --pool.n_pending;  // counted again by enqueue
      pool.enqueue(u.stream, event, u.block);
      ++stats.events_recorded;
      continue;
    }
    pool.unfenced[i] = pool.unfenced.back();
    pool.unfenced.pop_back();
    release_one(u.block);
  }
  for (std::size_t q = 0; q < pool.pending.size();) {
    auto& items = pool.pending[q].items;
    while (!items.empty() && budget != 0) {
      --budget;
      const PendingRelease p = items.front();
      if (!backend.event_done(p.event)) break;  // later events of this stream are not done either
      backend.release_event(p.event);
      items.pop_front();
      release_one(p.block);
    }
    if (items.empty()) {
      pool.pending[q] = std::move(pool.pending.back());
      pool.pending.pop_back();
    } else {
      ++q;
    }
  }
}

template <class PoolT>
void poll_fences(PoolT& pool, MemoryBackend& backend) {
  // One stream completes its events in order, so the front is the oldest.
  while (!pool.fences.empty() && backend.event_done(pool.fences.front().event)) {
    pool.safe_seq = std::max(pool.safe_seq, pool.fences.front().seq);
    backend.release_event(pool.fences.front().event);
    pool.fences.pop_front();
  }
}

// Removes the free block at `it` from its set, splitting off a remainder worth keeping.
template <class PoolT, class SetT, class StatsT>
Block* take_block(PoolT& pool, SetT& set, typename SetT::iterator it, std::size_t rounded, StatsT& stats) {
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
    ++stats.splits;
  }
  return b;
}

}  // namespace

// A retired pool with nothing in use or pending: its free segments go to the orphan pool (lent to any
// stream), its table slot and the Pool object are recycled.
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
    std::size_t i = home_slot(stream);
    for (std::size_t n = 0; n < kTableSize && m_table[i].load(std::memory_order_relaxed) != &pool; ++n)
      i = (i + 1) & (kTableSize - 1);
    if (m_table[i].load(std::memory_order_relaxed) == &pool) {
      m_table[i].store(tomb, std::memory_order_release);
      --m_n_streams;
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

// ---------------------------------------------------------------- pool search

// Takes the best-fitting free block of `pool` for `rounded` bytes, splitting off a remainder worth keeping.
// `foreign`: the caller's stream is not the pool's, so only blocks a completed fence covers qualify.
CachingDeviceAllocator::Block* CachingDeviceAllocator::take_cached(Pool& pool, std::size_t rounded, Take mode,
                                                                   StatShard& stats) {
  const bool small = rounded <= kSmallRequest;
  auto& set = pool.set_for(small);
  if (set.empty()) return nullptr;
  const bool foreign = mode != Take::Own;
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
  if (mode != Take::WholeSegment) return take_block(pool, set, it, rounded, stats);
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
// is what keeps cross-stream reuse from becoming a per-allocation cost.
void CachingDeviceAllocator::adopt_segment(Pool& own, Block* whole) {
  Segment* seg = whole->segment;
  seg->pool = &own;
  ++seg->n_moves;
  seg->index = own.segments.size();
  own.segments.push_back(seg);
  whole->free_seq = 0;  // the old stream's fence has passed: nothing uses it
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
  Pool& own = pool_for(stream, stats);
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
  // On an ordinary miss only whole free segments move between streams: a block lent out of another pool's
  // segment would go back to that pool on release, and a stream living on loans would miss every time.
  auto search_others = [&](Take mode) -> Allocation {
    for (Pool* pool : all_pools()) {
      if (pool == &own) continue;
      Block* b = nullptr;
      bool recycle = false;
      {
        std::lock_guard<std::mutex> lock(pool->mutex);
        if (pool->n_pending) {
          process_events(*pool, *m_backend, stats, kPollAll, retired);
          recycle = pool->idle();  // a destroyed stream's last release came back
        }
        b = take_cached(*pool, rounded, mode, stats);
        if (b && mode == Take::AnyBlock) return hand_out(b, bytes, stream, true, true, stats);
      }
      if (recycle && !b) maybe_recycle(*pool, stats);
      if (b) {
        std::lock_guard<std::mutex> lock(own.mutex);
        adopt_segment(own, b);
        auto& set = own.set_for(b->segment->small);
        return hand_out(take_block(own, set, set.find(b), rounded, stats), bytes, stream, true, true, stats);
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
      // (process_events tries again; empty_cache waits for it).
      pool.unfenced.push_back({b, st});
      ++pool.n_pending;
      detail::log_error(std::string("caching allocator: cannot record a release event: ") + e.what());
    }
  };
  if (b->stream != pool_stream) fence(b->stream);
  for (cudaStream_t st : b->uses)
    if (st != pool_stream && st != b->stream) fence(st);  // record_stream keeps `uses` free of duplicates
  if (b->n_pending == 0) make_free(pool, b, stats);
  return retired;
}

bool CachingDeviceAllocator::stream_retired(cudaStream_t stream) const {
  const Pool* p = find_pool(stream);
  if (p) return p->retired.load(std::memory_order_acquire);
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

// ---------------------------------------------------------------- stream lifetime

void CachingDeviceAllocator::stream_destroying(cudaStream_t stream) noexcept {
  Pool* pool = find_pool(stream);
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
  if (!pool && !named()) return;
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
  // Blocks of the stream kept in thread caches go back to the pool, which may then be recycled at once.
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
  if (!pool) {
    if (drained) {
      std::lock_guard<std::mutex> lock(m_pools_mutex);
      m_dead_streams.push_back(stream);
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(pool->mutex);
    for (auto& f : pool->fences) m_backend->release_event(f.event);  // passed (or never to be polled)
    pool->fences.clear();
    pool->fenced_seq = kRetired;  // never fenced again
    if (drained) pool->safe_seq = kRetired;
    pool->retired.store(true, std::memory_order_release);
  }
  maybe_recycle(*pool, *stats);
}

void CachingDeviceAllocator::stream_created(cudaStream_t stream) noexcept {
  {
    std::lock_guard<std::mutex> lock(m_pools_mutex);
    std::erase(m_dead_streams, stream);
  }
  Pool* pool = find_pool(stream);
  if (!pool) return;  // a fresh pool when it first allocates
  std::lock_guard<std::mutex> lock(pool->mutex);
  if (!pool->retired.load(std::memory_order_relaxed) || pool->own_stream() != stream) return;
  // Blocks of the old stream are still in use: the pool lives on. What was released so far is free for every
  // stream (the old stream's work was waited for); what the new stream releases is fenced again.
  pool->fenced_seq = pool->safe_seq = pool->seq;
  pool->retired.store(false, std::memory_order_release);
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
