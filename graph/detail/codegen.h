// Fused elementwise kernels: CUDA source generated from a fusion group, compiled at run time with NVRTC,
// cached in memory and on disk by a hash of the source (and the architecture and NVRTC version).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "minitensor/graph/detail/program.h"

namespace mt::detail {

// The kernel's signature: (long long n, const float* in0, ..., const float* inK-1, float* out), inputs in the
// order of step.reads. Reads with the output's element count are indexed by the linear index (so a launch
// over a chunk of them works); the others by broadcasting from the output's shape.
std::string fused_kernel_source(const Program& p, const Step& step);

// A Rows step's kernel (the plan in step.rows): (long long n_rows, const float* in0, ..., const float* inK-1,
// float* out, int vec), inputs in the order of step.reads; vec: every varying read and a varying out are
// 16-byte aligned (float4 loads and stores; only meaningful when step.rows.width is 4). codegen.cpp says how
// it walks a row.
std::string row_kernel_source(const Program& p, const Step& step);
// The source of a Fused or Rows step's kernel.
std::string step_kernel_source(const Program& p, const Step& step);

inline constexpr const char* kFusedKernelName = "mt_fused";

class FusedKernel {
 public:
  FusedKernel(cudaLibrary_t library, cudaKernel_t kernel, std::uint64_t hash)
      : m_library(library), m_kernel(kernel), m_hash(hash) {}
  ~FusedKernel();
  FusedKernel(const FusedKernel&) = delete;
  FusedKernel& operator=(const FusedKernel&) = delete;

  // out[i] for i in [0, n); `ins` in the order of the step's reads.
  void launch(std::int64_t n, const std::vector<const void*>& ins, void* out, cudaStream_t stream) const;
  // A row kernel: plan.n_rows rows, grid and blocks as the plan says.
  void launch_rows(const RowPlan& plan, const std::vector<const void*>& ins, void* out, bool vec,
                   cudaStream_t stream) const;
  std::uint64_t hash() const noexcept { return m_hash; }

 private:
  cudaLibrary_t m_library;
  cudaKernel_t m_kernel;
  std::uint64_t m_hash;
};

struct CompileResult {
  std::shared_ptr<FusedKernel> kernel;  // null on failure
  std::string error;                    // NVRTC log or load error
  bool from_memory = false, from_disk = false;
};

// The NVRTC options and headers are fixed; `arch` is e.g. 90. `cache_dir` empty: $MT_KERNEL_CACHE_DIR or
// ~/.cache/minitensor/kernels. `inject_error` makes the compile fail (tests).
CompileResult compile_fused_kernel(const std::string& source, int arch, const std::string& cache_dir,
                                   bool inject_error);

// NVRTC only (no device needed): CUBIN bytes or an error. Used by compile_fused_kernel and by tests.
bool nvrtc_compile(const std::string& source, int arch, std::vector<char>& cubin, std::string& log);

// Test hook: while on, executors built from then on make the NVRTC compile of every fused group fail (passing
// inject_error), so tests exercise the fallback to the eager kernels. Off by default; process-wide.
void set_nvrtc_fault_injection(bool on);
bool nvrtc_fault_injection();

std::uint64_t fnv1a64(const std::string& s, std::uint64_t h = 1469598103934665603ull);

}  // namespace mt::detail
