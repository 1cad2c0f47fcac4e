// Memory statistics and cache control of the process-wide allocators (cuda_allocator, pinned_allocator):
// counters like torch.cuda.memory_stats, a printable summary, a snapshot of the device allocator's segments,
// and switches to return cached memory or to stop caching (for compute-sanitizer).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mt {

// One statistic: its current value, its peak since the last reset_peak_stats(), and the totals added and
// removed.
struct StatValue {
  std::int64_t current = 0, peak = 0, allocated = 0, freed = 0;

  void increase(std::int64_t n) {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void decrease(std::int64_t n) {
    current -= n;
    freed += n;
  }
};

// Like torch.cuda.memory_stats. Byte counts of blocks are the rounded sizes, requested_bytes what callers
// asked. The device allocator keeps its figures per thread (no counter shared between threads on the hot
// path) and sums them on read: current/allocated/freed are exact, and a peak is the sum of the threads'
// peaks: exact when one thread uses the allocator, an upper bound otherwise.
struct MemoryStats {
  StatValue allocations;           // blocks handed out
  StatValue allocated_bytes;       // bytes handed out
  StatValue requested_bytes;       // bytes asked for
  StatValue active_bytes;          // handed out, or released but still awaiting streams
  StatValue reserved_bytes;        // held from the backend
  StatValue segments;              // backend allocations held
  StatValue inactive_split_bytes;  // free bytes in segments that also hold used blocks (thread caches too)
  std::int64_t cache_hits = 0;     // served from the cache
  std::int64_t thread_cache_hits = 0;  // of which from the asking thread's own cache
  std::int64_t cache_misses = 0;       // needed a backend allocation
  std::int64_t cross_stream_hits = 0;  // served by a block another stream released
  std::int64_t splits = 0, merges = 0;
  std::int64_t alloc_retries = 0;  // backend refusals that started the reclaim ladder
  std::int64_t ooms = 0;           // OutOfMemoryError thrown
  std::int64_t device_mallocs = 0, device_frees = 0;
  std::int64_t events_recorded = 0;  // release and fence events
  std::int64_t host_waits = 0;       // events the host blocked on (empty_cache, OOM ladder)
};

enum class BlockState { Free, Allocated, AwaitingStreams };

struct BlockInfo {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested = 0;  // of the current (or last) allocation
  BlockState state = BlockState::Free;
  cudaStream_t stream = nullptr;  // of the current (or last) allocation
};

struct SegmentInfo {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  cudaStream_t stream = nullptr;  // the stream whose pool owns it
  bool small_pool = false;
  std::vector<BlockInfo> blocks;  // in address order
};

// Over the process-wide allocators. The device ones throw DeviceError when there is no such device.
void empty_cache();  // every device allocator created so far, and the pinned one
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);
std::string memory_summary(int device);
// The segments of the device's allocator and their blocks, in address order (returns every thread's cache of
// released blocks to the pools first).
std::vector<SegmentInfo> memory_snapshot(int device);
void set_caching_enabled(bool enabled);  // all process-wide allocators, present and future

// "1.50 MiB", "512 B".
std::string format_bytes(std::int64_t bytes);

// JSON, keys in the order of the fields above. Stats: {"allocations":{"current":..,"peak":..,"allocated":..,
// "freed":..},...,"cache_hits":..,...}. Snapshot: {"segments":[{"address":..,"size":..,"stream":..,
// "small_pool":..,"blocks":[{"address":..,"size":..,"requested":..,"state":"free"|"allocated"|
// "awaiting_streams","stream":..},...]},...]}; addresses and streams as unsigned integers (stream 0: the
// legacy default stream).
std::string to_json(const MemoryStats& stats);
std::string to_json(const std::vector<SegmentInfo>& snapshot);

}  // namespace mt
