// Internals of the caching device allocator shared by its source files (memory/caching*.cpp): blocks,
// segments, pools, per-thread statistics and caches, and the helpers that move blocks between free sets and
// release queues. Not for use outside memory/; the rules are in memory/detail/caching.h and caching.cpp.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "minitensor/memory/detail/caching.h"
#include "minitensor/runtime/error.h"

namespace mt {

namespace caching_impl {}
using namespace caching_impl;  // the internals below, for the allocator's member definitions

namespace caching_impl {

// The unit of memory two threads must not both write: a pair of 64-byte lines (the adjacent-line prefetcher
// moves them together, so two threads writing one line each of a pair contend as if they shared one).
constexpr std::size_t kLine = 128;

}  // namespace caching_impl

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

namespace caching_impl {

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

}  // namespace caching_impl

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
  std::atomic<bool> dead{false};  // the allocator is gone
  // The shard of every stream's pool this thread allocates from: its slot in m_threads modulo kShards, set
  // before the cache is handed to a thread (an adopted cache keeps it).
  unsigned shard = 0;
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

namespace caching_impl {

// Set once this thread's ThreadCaches is destroyed: releases made after that (a thread_local or static
// object's destructor holding an Allocation) go through the allocator's shared stand-in.
inline thread_local bool t_exiting = false;

inline std::atomic<std::uint64_t> g_next_allocator_id{1};

// The stream of the orphan pool (segments of destroyed streams): no stream's handle.
inline cudaStream_t no_stream() {
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
inline void* line_alloc(std::size_t bytes) {
  return ::operator new((bytes + kLine - 1) / kLine * kLine, std::align_val_t(kLine));
}
inline void line_free(void* p) noexcept {
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

inline std::string bytes_and_exact(std::size_t bytes) {
  return detail::str(format_bytes(static_cast<std::int64_t>(bytes)), " (", bytes, " B)");
}

}  // namespace caching_impl

// Line-pair aligned: pools of different streams are used by different threads at once.
struct alignas(kLine) CachingDeviceAllocator::Pool {
  Pool(cudaStream_t s, unsigned k) : stream(s), shard(k) {}

  // Read without the lock by every pool_for() probe that passes this pool's slot; a recycled pool gets
  // another stream and shard. (A probe that reads the new stream with the old shard takes another shard of
  // its own stream: any shard of a stream serves that stream.)
  std::atomic<cudaStream_t> stream;
  std::atomic<unsigned> shard;
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

namespace caching_impl {

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

}  // namespace caching_impl

// A retired pool with nothing in use or pending: its free segments go to the orphan pool (lent to any
// stream), its table slot and the Pool object are recycled.

namespace caching_impl {
// The marker of a recycled pool's slot in the stream -> pool table (memory/caching.cpp, "pools").
inline CachingDeviceAllocator::Pool* tombstone() {
  static char marker;
  return reinterpret_cast<CachingDeviceAllocator::Pool*>(&marker);
}
}  // namespace caching_impl

}  // namespace mt
