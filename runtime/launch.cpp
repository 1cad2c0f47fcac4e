#include "minitensor/runtime/launch.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"

namespace mt {

bool programmatic_launch() {
  static const bool on = [] {
    const char* v = std::getenv("MT_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

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

std::int64_t resident_clusters(const void* kernel, int threads, std::size_t smem, int cluster_size) {
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  using Key = std::tuple<const void*, int, std::size_t, int, int>;
  static std::mutex mutex;
  static std::map<Key, std::int64_t> cache;
  const Key key{kernel, threads, smem, cluster_size, device};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const unsigned c = static_cast<unsigned>(cluster_size);
  const LaunchConfig launch(dim3(c, 1, 1), dim3(static_cast<unsigned>(threads), 1, 1), smem, nullptr,
                            dim3(c, 1, 1));
  int clusters = 0;
  MT_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.cfg));
  const std::int64_t n = std::max(clusters, 1);
  std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, n);
  return n;
}

void use_max_dynamic_smem(const void* kernel) {
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  // Called before every launch of such a kernel: each thread remembers what it has seen, lock-free.
  thread_local std::set<std::pair<const void*, int>> seen;
  if (seen.count({kernel, device})) return;
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;
  std::lock_guard<std::mutex> lock(mutex);
  if (done.count({kernel, device})) {
    seen.insert({kernel, device});
    return;
  }
  // The dynamic limit plus the kernel's static shared memory may not pass the opt-in maximum.
  cudaFuncAttributes attrs{};
  MT_CUDA_CHECK(cudaFuncGetAttributes(&attrs, kernel));
  MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(device_properties(device).smem_per_block_optin -
                                                      std::int64_t(attrs.sharedSizeBytes))));
  done.insert({kernel, device});
  seen.insert({kernel, device});
}

}  // namespace mt
