// The stream-aware caching device allocator (the caching pinned-host allocator: memory/detail/pinned.h).
//
// In short (details next to the code in caching.cpp):
// - Requests round up to 512 B granules. Small requests (<= 1 MiB) are carved from 2 MiB segments, large ones
//   (<= 10 MiB) from 20 MiB segments, bigger ones get a segment of their own rounded to 2 MiB. Best fit; a
//   block is split when the remainder is worth keeping, and free neighbours in a segment merge on release.
// - Memory is kept per stream: each stream that allocates gets a pool with its own lock, so threads on
//   different streams do not contend. A block released on its own stream is reused at once by that stream
//   (the stream orders the reuse). Another stream takes it only once an event recorded on the first stream,
//   after the release, has completed (polled, never waited for, on the allocation path). A block used on
//   other streams (record_stream) is reused by nobody until an event recorded on each of them at release has
//   completed.
// - Threads sharing one stream each get a shard of its pool (up to kShards per stream), so they do not
//   contend either. The shards of a stream are one stream for the rule above: a shard that misses takes a
//   whole free segment (out of memory: any free block) of a sibling shard with no event.
// - A stream that an mt::Stream destroys is waited for first (runtime/stream.h hooks); its pool then lends
//   its free blocks to every stream and is never fenced again, until a new stream gets the same handle.
// - Each thread also keeps a few small blocks it released (up to 16, of requests of up to 1 MiB), for its
//   next request of the same rounded size on the same stream: no lock shared with other threads, no split or
//   merge. Only blocks the pool itself would reuse at once go there (released on their own stream, used on
//   no other), so the stream rules are the pool's. A thread's cache goes back to the pools when that thread
//   misses, when it exits, on empty_cache(), snapshot(), the out-of-memory ladder and
//   set_thread_cache_enabled(false).
// - Out of memory: return the thread caches and free cached oversize segments, search again, retry; wait for
//   pending events, free every fully free segment, search again, retry; then OutOfMemoryError with the
//   figures.
// - MT_DISABLE_CACHING=1 (or set_caching_enabled(false)) makes every allocation one cudaMalloc and every
//   release one cudaFree, for compute-sanitizer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "minitensor/memory/allocator.h"
#include "minitensor/memory/detail/backend.h"
#include "minitensor/memory/stats.h"

namespace mt {

// Counts a block of `size` bytes handed out for a request of `requested` bytes, from the cache (hit) or not,
// in MemoryStats or in the device allocator's per-thread share of it (the same fields, atomic).
template <class Stats>
void count_hand_out(Stats& s, std::int64_t size, std::int64_t requested, bool hit) {
  s.allocations.increase(1);
  s.allocated_bytes.increase(size);
  s.active_bytes.increase(size);
  s.requested_bytes.increase(requested);
  ++(hit ? s.cache_hits : s.cache_misses);
}

// What the two caching allocators share.
class CachingAllocatorBase : public Allocator {
 public:
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak_stats() = 0;
  virtual void empty_cache() = 0;  // waits for pending events and returns every fully free segment / block
  virtual std::string memory_summary() const = 0;
  // false: one backend allocation per request, nothing cached (for compute-sanitizer). Blocks already cached
  // stay until empty_cache().
  void set_caching_enabled(bool enabled) { m_caching.store(enabled, std::memory_order_relaxed); }
  bool caching_enabled() const { return m_caching.load(std::memory_order_relaxed); }

 protected:
  std::atomic<bool> m_caching{true};
};

class CachingDeviceAllocator final : public CachingAllocatorBase {
 public:
  explicit CachingDeviceAllocator(std::unique_ptr<MemoryBackend> backend, bool caching = true);
  ~CachingDeviceAllocator() override;
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  Allocation allocate(std::size_t bytes, cudaStream_t stream = nullptr) override;
  void record_stream(const Allocation& allocation, cudaStream_t stream) override;
  Device device() const override { return m_device; }
  std::string name() const override { return "cuda-caching"; }

  MemoryStats stats() const override;
  void reset_peak_stats() override;
  void empty_cache() override;
  std::string memory_summary() const override;
  std::vector<SegmentInfo> snapshot();  // returns every thread's cache to the pools first

  // A hard cap on reserved bytes (0: none). Checked before every backend allocation; reaching it takes the
  // same reclaim-then-OutOfMemoryError path as a refusal by the driver.
  void set_memory_cap(std::size_t bytes) { m_cap.store(bytes, std::memory_order_relaxed); }
  void set_memory_fraction(double fraction);  // of the device's total memory, in (0, 1]
  std::size_t memory_cap() const { return m_cap.load(std::memory_order_relaxed); }

  // Per-thread caches of released blocks (on by default). false returns every thread's cache to the pools.
  void set_thread_cache_enabled(bool enabled);
  bool thread_cache_enabled() const { return m_thread_cache.load(std::memory_order_relaxed); }

  MemoryBackend& backend() { return *m_backend; }

  // An mt::Stream's lifetime (add_stream_hooks in runtime/stream.h; the registry hooks the process-wide
  // allocators). Before `stream` is destroyed: wait for its work, then retire its pool: no event is recorded
  // on the stream again, and other streams may take its free blocks (also those released later) at once. A
  // stream created with the same handle revives the pool. Streams destroyed other than through mt::Stream
  // must have no free blocks cached here that other streams could look at: release onto live streams.
  void stream_destroying(cudaStream_t stream) noexcept;
  void stream_created(cudaStream_t stream) noexcept;

  static constexpr std::size_t kGranule = 512;
  static constexpr std::size_t kSmallRequest = std::size_t(1) << 20;  // <= this: small pool
  static constexpr std::size_t kSmallSegment = std::size_t(2) << 20;
  static constexpr std::size_t kLargeRequest = std::size_t(10) << 20;  // <= this: shares a 20 MiB segment
  static constexpr std::size_t kLargeSegment = std::size_t(20) << 20;
  static constexpr std::size_t kSegmentRounding = std::size_t(2) << 20;  // for requests of their own segment
  // A thread keeps at most this many released blocks, of requests of at most kThreadCacheRequest bytes:
  // 16 MiB a thread at most. Small requests only: a large block held in a thread cache stays out of its 20
  // MiB segment's merges, which fragments those segments.
  static constexpr int kThreadCacheBlocks = 16;
  static constexpr std::size_t kThreadCacheRequest = kSmallRequest;

  static std::size_t round_size(std::size_t bytes);
  static std::size_t segment_size(std::size_t rounded);

  struct Block;
  struct Segment;
  struct Pool;
  struct StatShard;
  struct ThreadCache;

 protected:
  void deallocate(const Allocation& allocation) noexcept override;

 private:
  struct ThreadCaches;  // one thread's caches, one per allocator it has used (thread-local)

  // The pools of a stream are its shards, one per thread slot modulo kShards (ThreadCache::shard).
  Pool& pool_for(cudaStream_t stream, unsigned shard, StatShard& stats);
  Pool* find_pool(cudaStream_t stream, unsigned shard) const;  // null: no pool for it yet
  int find_shards(cudaStream_t stream, Pool** out) const;      // every shard of the stream (room for kShards)
  bool has_other_shard(cudaStream_t stream, unsigned shard) const;  // under m_pools_mutex
  static std::size_t home_slot(cudaStream_t stream, unsigned shard);
  void maybe_recycle(Pool& pool, StatShard& stats);  // a destroyed stream's pool with nothing left in use
  bool stream_retired(cudaStream_t stream) const;    // destroyed, its work waited for
  bool release_locked(Pool& pool, cudaStream_t pool_stream, Block* block, bool own_stream_only,
                      StatShard& stats);
  std::vector<Pool*> all_pools() const;
  // The calling thread's cache (its statistics too). A thread that is exiting, whose thread-local state is
  // gone, gets a shared stand-in, locked into `exit_lock`.
  ThreadCache& local(std::unique_lock<std::mutex>& exit_lock);
  ThreadCache& local_slow();
  Allocation take_thread_cached(ThreadCache& here, std::size_t bytes, std::size_t rounded,
                                cudaStream_t stream);
  bool keep_thread_cached(ThreadCache& here, Block* block);
  void return_blocks(Block* const* blocks, int n, StatShard& stats);
  bool flush_thread_cache(ThreadCache& cache, StatShard& stats);  // true: it held blocks
  void drain_thread_caches(StatShard& stats);                     // every thread's
  // Own: the pool's stream asks (its shard or a sibling shard on the reclaim path). WholeSegment: another
  // stream asks and only a fully free, fenced segment will do (it moves to the asking pool). AnyBlock:
  // another stream asks and any fenced block will do (reclaim path). SiblingSegment: another shard of the
  // pool's stream asks; a fully free segment, no fence needed (it moves to the asking shard).
  enum class Take { Own, WholeSegment, AnyBlock, SiblingSegment };
  Block* take_cached(Pool& pool, std::size_t rounded, Take mode, StatShard& stats);
  void adopt_segment(Pool& own, Block* whole, bool sibling);
  Block* new_segment(Pool& own, std::size_t rounded, void* ptr, std::size_t seg_bytes, StatShard& stats);
  void* backend_allocate(std::size_t seg_bytes);
  void release_free_segments(bool oversize_only, StatShard& stats);
  void wait_all_events(StatShard& stats);
  Allocation hand_out(Block* block, std::size_t bytes, cudaStream_t stream, bool hit, bool foreign,
                      StatShard& stats);
  Allocation allocate_uncached(std::size_t bytes, cudaStream_t stream, StatShard& stats);
  [[noreturn]] void throw_oom(std::size_t bytes, std::size_t rounded, std::size_t seg_bytes,
                              StatShard& stats);

  std::unique_ptr<MemoryBackend> m_backend;
  Device m_device;
  // Never reused, unlike the address: tells a thread's caches of two allocators apart.
  const std::uint64_t m_id;
  std::atomic<std::size_t> m_cap{0};
  std::atomic<std::size_t> m_reserved{0};  // all pools, for the cap
  std::atomic<bool> m_thread_cache{true};

  // (Stream, shard) -> pool: an open-addressing table read without a lock, changed under m_pools_mutex. At
  // most kMaxPools live streams, each with up to kShards pools; a destroyed stream's pools leave once nothing
  // of them is in use (maybe_recycle). The table is at most half full, so probes stay short.
  static constexpr std::size_t kMaxPools = 1024;
  static constexpr unsigned kShards = 8;
  static constexpr std::size_t kTableSize = 2 * kMaxPools * kShards;
  mutable std::mutex m_pools_mutex;
  // Destroyed streams that never allocated (no pool) but were named by record_stream: no event is recorded on
  // them (stream_retired). Under m_pools_mutex; a handle leaves when a new stream takes it.
  std::vector<cudaStream_t> m_dead_streams;
  std::unique_ptr<std::atomic<Pool*>[]> m_table;
  std::vector<std::unique_ptr<Pool>> m_pools;        // in use (the orphan pool too)
  std::vector<std::unique_ptr<Pool>> m_spare_pools;  // recycled, empty: never freed while others may hold one
  std::size_t m_n_streams = 0;                       // streams with a pool in the table
  Pool* m_orphans = nullptr;  // free segments of recycled pools, lent to every stream (no stream of its own)

  // Every thread cache made for this allocator; a thread that exits leaves its cache (its statistics) for the
  // next new thread to adopt.
  mutable std::mutex m_threads_mutex;
  std::vector<std::shared_ptr<ThreadCache>> m_threads;
  std::mutex m_exit_mutex;
  ThreadCache* m_exit_cache = nullptr;  // the stand-in of exiting threads, in m_threads

  static thread_local ThreadCaches t_caches;
};

// The process-wide device allocator (the same object cuda_allocator() returns).
CachingDeviceAllocator& caching_cuda_allocator(int device);

namespace detail {
std::string memory_summary_table(const std::string& title, const MemoryStats& stats);
}  // namespace detail

}  // namespace mt
