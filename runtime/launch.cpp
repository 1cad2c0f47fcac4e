#include "runtime/launch.h"

#include <map>
#include <mutex>
#include <tuple>

#include "runtime/device.h"
#include "runtime/error.h"

namespace mt {

int current_sm_count() {
  thread_local int cached_device = -1;
  thread_local int cached_count = 0;
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    cached_count = device_properties(device).sm_count;
    cached_device = device;
  }
  return cached_count;
}

int resident_blocks_per_sm(const void* kernel, int threads, std::size_t smem) {
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  using Key = std::tuple<const void*, int, std::size_t, int>;
  static std::mutex mutex;
  static std::map<Key, int> cache;
  const Key key{kernel, threads, smem, device};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  int blocks = 0;
  MT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
  blocks = std::max(blocks, 1);
  std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, blocks);
  return blocks;
}

}  // namespace mt
