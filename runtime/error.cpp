#include "minitensor/runtime/error.h"

#include <cstdio>

namespace mt {
namespace {

std::string describe(cudaError_t code, const std::string& expr, const std::string& file, int line,
                     int device) {
  return detail::str("CUDA error ", cudaGetErrorName(code), " (", static_cast<int>(code),
                     "): ", cudaGetErrorString(code), "\n  in ", expr, "\n  at ", file, ":", line,
                     " on device ", device);
}

}  // namespace

CudaError::CudaError(cudaError_t code, std::string expr, std::string file, int line, int device)
    : Error(describe(code, expr, file, line, device)),
      m_code(code),
      m_expr(std::move(expr)),
      m_file(std::move(file)),
      m_line(line),
      m_device(device) {}

namespace detail {

void throw_cuda_error(cudaError_t code, const char* expr, const char* file, int line) {
  // Clear the per-thread error so that a caller who catches this can go on; sticky errors (a kernel fault)
  // stay with the context whatever we do.
  (void)cudaGetLastError();
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    device = -1;
  }
  throw CudaError(code, expr, file, line, device);
}

void log_cuda_error(cudaError_t code, const char* expr, const char* file, int line) noexcept {
  (void)cudaGetLastError();
  if (code == cudaErrorCudartUnloading || code == cudaErrorContextIsDestroyed) return;  // process exit
  std::fprintf(stderr, "minitensor: ignored CUDA error %s (%s) in %s at %s:%d\n", cudaGetErrorName(code),
               cudaGetErrorString(code), expr, file, line);
}

void log_error(const std::string& message) noexcept {
  std::fprintf(stderr, "minitensor: %s\n", message.c_str());
}

}  // namespace detail
}  // namespace mt
