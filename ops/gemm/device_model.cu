// DeviceModel::current(): the dispatcher's view of the current device, asked of the runtime once per device.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "ops/gemm/detail/dispatch.h"
#include "ops/gemm/detail/launchers.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace mt::detail::gemm {

namespace {

__global__ void cluster_probe_kernel() {}

// How many blocks of `size`-block clusters are resident at once where each SM holds one block: asked of the
// runtime for a probe kernel held to one block per SM by its shared memory; where the runtime cannot say,
// the SMs in whole clusters.
int probe_cluster_slots(int device, int size, int sms) {
  if (size <= 1) return sms;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = static_cast<unsigned>(size);
  cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(size)), cfg.blockDim = dim3(128);
  cfg.attrs = &cluster, cfg.numAttrs = 1;
  int per_sm = 0, per_block = 0, clusters = 0;
  bool asked =
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess;
  if (asked) {
    // Over half an SM's shared memory: one block per SM.
    cfg.dynamicSmemBytes = std::min<std::size_t>(per_block, per_sm / 2 + 4096);
    asked = cudaFuncSetAttribute(cluster_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(cfg.dynamicSmemBytes)) == cudaSuccess &&
            cudaOccupancyMaxActiveClusters(&clusters, cluster_probe_kernel, &cfg) == cudaSuccess &&
            clusters > 0;
  }
  if (!asked) (void)cudaGetLastError();  // not sticky: clear it, so it is not reported by a later check
  return asked ? std::min(clusters * size, sms) : sms / size * size;
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
