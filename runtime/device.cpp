#include "minitensor/runtime/device.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <vector>

#include "minitensor/runtime/error.h"

namespace mt {

std::string Device::str() const {
  return is_cpu() ? "cpu" : "cuda:" + std::to_string(m_index);
}

std::ostream& operator<<(std::ostream& os, const Device& device) {
  return os << device.str();
}

namespace {

struct DeviceCount {
  int count = 0;
  cudaError_t status = cudaSuccess;
};

// Queried on first use, never at static-initialisation time.
const DeviceCount& device_count_once() {
  static const DeviceCount value = [] {
    DeviceCount result;
    result.status = cudaGetDeviceCount(&result.count);
    if (result.status != cudaSuccess) {
      (void)cudaGetLastError();
      result.count = 0;
    }
    return result;
  }();
  return value;
}

// The runtime says "driver version is insufficient" both for an old driver and for none at all; whether the
// driver library loads tells the two apart.
bool driver_library_loadable() {
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!handle) return false;
  dlclose(handle);
  return true;
}

}  // namespace

int cuda_device_count() noexcept {
  return device_count_once().count;
}

std::string cuda_unavailable_reason() {
  const DeviceCount& dc = device_count_once();
  if (dc.count > 0) return "";
  if (dc.status == cudaSuccess) return "no CUDA device found";
  if (dc.status == cudaErrorInsufficientDriver) {
    static const bool loadable = driver_library_loadable();
    if (!loadable) return "no NVIDIA driver found (libcuda.so.1 not loadable)";
  }
  return cudaGetErrorString(dc.status);
}

void check_device(Device device) {
  if (device.is_cpu()) return;
  const DeviceCount& dc = device_count_once();
  if (dc.count == 0) {
    MT_THROW(DeviceError, "device ", device, " requested but no CUDA device is available (",
             cuda_unavailable_reason(), ")");
  }
  MT_CHECK(device.index() >= 0 && device.index() < dc.count, DeviceError, "device ", device,
           " does not exist: this machine has ", dc.count, " CUDA device(s), cuda:0 .. cuda:", dc.count - 1);
}

const DeviceProperties& device_properties(int index) {
  check_device(Device::cuda(index));
  static std::mutex mutex;
  static std::vector<std::unique_ptr<DeviceProperties>> cache(static_cast<size_t>(cuda_device_count()));
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[static_cast<size_t>(index)];
  if (!slot) {
    cudaDeviceProp p{};
    MT_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
    auto props = std::make_unique<DeviceProperties>();
    props->index = index;
    props->name = p.name;
    props->cc_major = p.major;
    props->cc_minor = p.minor;
    props->sm_count = p.multiProcessorCount;
    props->max_threads_per_sm = p.maxThreadsPerMultiProcessor;
    props->max_blocks_per_sm = p.maxBlocksPerMultiProcessor;
    props->regs_per_sm = p.regsPerMultiprocessor;
    props->l2_bytes = p.l2CacheSize;
    props->smem_per_block = static_cast<std::int64_t>(p.sharedMemPerBlock);
    props->smem_per_block_optin = static_cast<std::int64_t>(p.sharedMemPerBlockOptin);
    props->smem_per_sm = static_cast<std::int64_t>(p.sharedMemPerMultiprocessor);
    props->total_memory = static_cast<std::int64_t>(p.totalGlobalMem);
    props->memory_bus_bits = p.memoryBusWidth;
    props->warp_size = p.warpSize;
    slot = std::move(props);
  }
  return *slot;
}

int current_device() {
  check_device(Device::cuda(0));
  int index = 0;
  MT_CUDA_CHECK(cudaGetDevice(&index));
  return index;
}

void synchronize(Device device) {
  if (device.is_cpu()) return;
  DeviceGuard guard(device);
  MT_CUDA_CHECK(cudaDeviceSynchronize());
}

std::string device_report() {
  const int n = cuda_device_count();
  if (n == 0) return detail::str("CUDA devices: none (", cuda_unavailable_reason(), ")\n");
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  std::ostringstream os;
  os << "CUDA devices: " << n << " (driver " << driver / 1000 << "." << (driver % 1000) / 10 << ", runtime "
     << runtime / 1000 << "." << (runtime % 1000) / 10 << ")\n";
  for (int i = 0; i < n; ++i) {
    const DeviceProperties& p = device_properties(i);
    os << "  cuda:" << i << "  " << p.name << "  sm_" << p.cc_major << p.cc_minor << "  " << p.sm_count
       << " SMs  " << p.total_memory / (1 << 20) << " MiB  L2 " << p.l2_bytes / (1 << 20)
       << " MiB  smem/block (opt-in) " << p.smem_per_block_optin / 1024 << " KiB\n";
  }
  return os.str();
}

DeviceGuard::DeviceGuard(Device device) {
  if (device.is_cpu()) return;
  check_device(device);
  int previous = 0;
  MT_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device.index()) {
    MT_CUDA_CHECK(cudaSetDevice(device.index()));
    m_previous = previous;
  }
}

DeviceGuard::~DeviceGuard() {
  if (m_previous >= 0) MT_CUDA_CHECK_NOTHROW(cudaSetDevice(m_previous));
}

}  // namespace mt
