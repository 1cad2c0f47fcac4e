// Devices: where a tensor lives, what a CUDA device can do, and guards that switch the current device.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace mt {

enum class DeviceType : std::uint8_t { CPU, CUDA };

class Device {
 public:
  constexpr Device() = default;  // the CPU
  static constexpr Device cpu() { return Device(); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }

  constexpr DeviceType type() const { return m_type; }
  constexpr int index() const { return m_index; }
  constexpr bool is_cpu() const { return m_type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return m_type == DeviceType::CUDA; }
  constexpr bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"

 private:
  constexpr Device(DeviceType type, int index) : m_type(type), m_index(index) {}
  DeviceType m_type = DeviceType::CPU;
  int m_index = -1;
};

std::ostream& operator<<(std::ostream& os, const Device& device);

// Read once per device and cached.
struct DeviceProperties {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int max_threads_per_sm = 0;
  int max_blocks_per_sm = 0;
  int regs_per_sm = 0;
  std::int64_t l2_bytes = 0;
  std::int64_t smem_per_block = 0;        // without opt-in
  std::int64_t smem_per_block_optin = 0;  // the most a kernel can ask for with cudaFuncSetAttribute
  std::int64_t smem_per_sm = 0;
  std::int64_t total_memory = 0;
  int memory_bus_bits = 0;
  int warp_size = 32;
};

// Number of CUDA devices; 0 when there is no device or no usable driver (never throws).
int cuda_device_count() noexcept;
inline bool cuda_available() noexcept {
  return cuda_device_count() > 0;
}

// Why there is no usable CUDA device, as a sentence for users: "no NVIDIA driver found (libcuda.so.1 not
// loadable)" on a machine without a driver (which the CUDA runtime reports as "CUDA driver version is
// insufficient for CUDA runtime version"), else the CUDA runtime's error text, or "no CUDA device found".
// Empty when a CUDA device is available.
std::string cuda_unavailable_reason();

// Throws DeviceError naming the device and what exists when `device` is a CUDA device that does not exist.
void check_device(Device device);

// Properties of CUDA device `index`; DeviceError when there is no such device.
const DeviceProperties& device_properties(int index);

int current_device();  // the calling thread's current CUDA device

// Blocks until all work on the device has finished. No-op for the CPU.
void synchronize(Device device);

// A multi-line human-readable report of the CUDA devices (or why there are none).
std::string device_report();

// Makes `index` the current CUDA device for the guard's lifetime (no-op for the CPU or the current device).
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  explicit DeviceGuard(int index) : DeviceGuard(Device::cuda(index)) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int m_previous = -1;
};

}  // namespace mt
