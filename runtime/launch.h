// Launch geometry shared by the kernels: grids sized from the device (SM count x resident blocks), not
// constants, and cluster launch configurations.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

namespace mt {

// Blocks of `threads` threads that `kernel` keeps resident per SM with `smem` bytes of dynamic shared memory,
// on the current device (cached per kernel, block size and device).
int resident_blocks_per_sm(const void* kernel, int threads, std::size_t smem = 0);

// SM count of the current device (cached).
int current_sm_count();

// Blocks of `kernel` the whole current device keeps resident at once: a full wave.
inline std::int64_t resident_blocks(const void* kernel, int threads, std::size_t smem = 0) {
  return static_cast<std::int64_t>(resident_blocks_per_sm(kernel, threads, smem)) * current_sm_count();
}

// Clusters of `cluster_size` blocks of `kernel` the current device keeps resident at once
// (cudaOccupancyMaxActiveClusters; at least 1), cached like resident_blocks_per_sm. A kernel launched with
// more than 48 KiB of dynamic shared memory must have its limit raised first (use_max_dynamic_smem).
std::int64_t resident_clusters(const void* kernel, int threads, std::size_t smem, int cluster_size);

// Raises `kernel`'s dynamic shared-memory limit on the current device to the opt-in maximum less its static
// shared memory, once per kernel and device: launches and occupancy queries with more than 48 KiB need it.
void use_max_dynamic_smem(const void* kernel);

// Blocks for `n_items` equal work items, one per block per round, on a device that keeps `wave` blocks
// resident: every block gets the same number of rounds, so the last round is not a partial wave. n_items > 0.
inline int balanced_grid(std::int64_t n_items, std::int64_t wave) {
  const std::int64_t rounds = (n_items + wave - 1) / wave;
  return static_cast<int>(std::max<std::int64_t>(1, (n_items + rounds - 1) / rounds));
}
// The same for `kernel` on the current device, `per_block` items per block per round (a warp each, say).
template <class Kernel>
int balanced_grid(Kernel* kernel, int threads, std::int64_t n_items, int per_block = 1,
                  std::size_t smem = 0) {
  const std::int64_t wave = resident_blocks(reinterpret_cast<const void*>(kernel), threads, smem) * per_block;
  return (balanced_grid(n_items, wave) + per_block - 1) / per_block;
}

// Grid for a grid-stride kernel over `n_items` items, `items_per_block` per block per pass: enough blocks to
// cover the items, at most the full waves the device keeps resident. At least 1.
template <class Kernel>
int grid_stride_blocks(Kernel* kernel, int threads, std::int64_t n_items, std::int64_t items_per_block,
                       std::size_t smem = 0) {
  const std::int64_t needed = std::max<std::int64_t>(1, (n_items + items_per_block - 1) / items_per_block);
  const std::int64_t resident = resident_blocks(reinterpret_cast<const void*>(kernel), threads, smem);
  return static_cast<int>(std::max<std::int64_t>(1, std::min(needed, resident)));
}

// Whether kernels that support it are launched to overlap the kernel before them in their stream
// (LaunchConfig::overlap_previous_kernel): on, unless the environment sets MT_PDL=0, which launches every
// kernel the ordinary way (to time the overlap, or to rule it out). Read once.
bool programmatic_launch();

// A cudaLaunchKernelEx configuration, with the blocks grouped into thread-block clusters of `cluster`
// (no attribute when it is 1 x 1 x 1). Pass `&config.cfg` to cudaLaunchKernelEx or
// cudaOccupancyMaxActiveClusters. Not copyable: cfg points at this object's attributes.
struct LaunchConfig {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attrs[2]{};

  LaunchConfig(dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream, dim3 cluster = dim3(1, 1, 1)) {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attrs;
    if (cluster.x * cluster.y * cluster.z > 1) {
      cudaLaunchAttribute& a = attrs[cfg.numAttrs++];
      a.id = cudaLaunchAttributeClusterDimension;
      a.val.clusterDim.x = cluster.x;
      a.val.clusterDim.y = cluster.y;
      a.val.clusterDim.z = cluster.z;
    }
  }
  // Programmatic dependent launch (sm_90): this kernel's blocks may start before the previous kernel in the
  // stream has finished, once that kernel's blocks have all signalled (griddepcontrol.launch_dependents) or
  // exited; the kernel must run griddepcontrol.wait before it touches anything the previous kernel writes.
  // A no-op where programmatic_launch() is off.
  void overlap_previous_kernel() {
    if (!programmatic_launch()) return;
    cudaLaunchAttribute& a = attrs[cfg.numAttrs++];
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

}  // namespace mt
