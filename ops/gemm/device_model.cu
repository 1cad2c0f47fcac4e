// DeviceModel::current(): the dispatcher's view of the current device, asked of the runtime once per device.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "minitensor/ops/gemm/detail/dispatch.h"
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail::gemm {

namespace {

__global__ void cluster_probe_kernel() {}

// How many blocks of `size`-block clusters are resident at once where each SM holds one block: asked of the
// runtime's occupancy cache (runtime/launch.h) for a probe kernel held to one block per SM by its shared
// memory; where the runtime cannot say, the SMs in whole clusters.
int probe_cluster_slots(int device, int size, int sms) {
  if (size <= 1) return sms;
  const DeviceProperties& props = device_properties(device);
  // Over half an SM's shared memory: one block per SM.
  const std::size_t smem = std::min<std::size_t>(props.smem_per_block_optin,
                                                 static_cast<std::size_t>(props.smem_per_sm) / 2 + 4096);
  const void* probe = reinterpret_cast<const void*>(cluster_probe_kernel);
  try {
    use_max_dynamic_smem(probe);
    return static_cast<int>(std::min<std::int64_t>(resident_clusters(probe, 128, smem, size) * size, sms));
  } catch (const CudaError&) {
    (void)cudaGetLastError();  // not sticky: clear it, so it is not reported by a later check
    return sms / size * size;
  }
}

DeviceModel ask(int device) {
  const DeviceProperties& props = device_properties(device);
  DeviceModel m;
  m.sm_count = props.sm_count;
  m.cc_major = props.cc_major, m.cc_minor = props.cc_minor;
  m.smem_per_block = static_cast<std::size_t>(props.smem_per_block_optin);
  m.smem_per_sm = static_cast<std::size_t>(props.smem_per_sm);
  m.clusters = props.cc_major >= 9;
  for (int s = 1; s <= kMaxClusterSplit; ++s)
    m.cluster_slots[s] = m.has_clusters() ? probe_cluster_slots(device, s, m.sm_count) : m.sm_count;
  m.tma_kernels = props.cc_major >= 9 && tma_kernels_usable();
  m.wgmma_kernels = props.cc_major == 9 && props.cc_minor == 0 && wgmma_kernels_usable();
  return m;
}

}  // namespace

DeviceModel DeviceModel::current() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return none();
  }
  thread_local int cached_device = -1;
  thread_local DeviceModel cached;
  if (device == cached_device) return cached;
  static std::mutex mutex;
  static std::map<int, DeviceModel> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(device);
  if (it == cache.end()) it = cache.emplace(device, ask(device)).first;
  cached_device = device, cached = it->second;
  return cached;
}

}  // namespace mt::detail::gemm
