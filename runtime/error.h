// Errors: one hierarchy for everything the library throws, and the CUDA check macros.
#pragma once

#include <cuda_runtime_api.h>

#include <sstream>
#include <stdexcept>
#include <string>

namespace mt {

// Base of every error minitensor throws. Catch this to catch them all.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A CUDA runtime call failed. Keeps the code, the failing expression, where it was and on which device.
class CudaError : public Error {
 public:
  CudaError(cudaError_t code, std::string expr, std::string file, int line, int device);
  cudaError_t code() const noexcept { return m_code; }
  const std::string& expr() const noexcept { return m_expr; }
  const std::string& file() const noexcept { return m_file; }
  int line() const noexcept { return m_line; }
  int device() const noexcept { return m_device; }

 private:
  cudaError_t m_code;
  std::string m_expr, m_file;
  int m_line, m_device;
};

class ShapeError : public Error {  // extents, ranks, dims or views that do not fit
 public:
  using Error::Error;
};
class DTypeError : public Error {  // an op that does not support the dtype, or mixed dtypes
 public:
  using Error::Error;
};
class DeviceError : public Error {  // a device that does not exist, or tensors on different devices
 public:
  using Error::Error;
};
class OutOfMemoryError
    : public Error {  // the allocator could not satisfy a request, even after freeing its cache
 public:
  using Error::Error;
};
class InvalidArgument : public Error {  // any other argument out of its domain
 public:
  using Error::Error;
};

namespace detail {

// Concatenates anything streamable: detail::str("add: cannot broadcast ", a, " with ", b).
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void throw_cuda_error(cudaError_t code, const char* expr, const char* file, int line);

// For destructors and other noexcept paths: log a failed call instead of throwing. Errors that only mean the
// driver is shutting down at process exit are ignored.
void log_cuda_error(cudaError_t code, const char* expr, const char* file, int line) noexcept;
void log_error(const std::string& message) noexcept;

}  // namespace detail
}  // namespace mt

// Throws mt::CudaError when `expr` does not return cudaSuccess.
#define MT_CUDA_CHECK(expr)                                                                               \
  do {                                                                                                    \
    const cudaError_t mt_status_ = (expr);                                                                \
    if (mt_status_ != cudaSuccess) ::mt::detail::throw_cuda_error(mt_status_, #expr, __FILE__, __LINE__); \
  } while (0)

// Right after every kernel launch: catches bad launch configurations (and earlier asynchronous faults).
#define MT_CUDA_CHECK_LAUNCH() MT_CUDA_CHECK(cudaGetLastError())

// In destructors: logs and swallows.
#define MT_CUDA_CHECK_NOTHROW(expr)                                                                     \
  do {                                                                                                  \
    const cudaError_t mt_status_ = (expr);                                                              \
    if (mt_status_ != cudaSuccess) ::mt::detail::log_cuda_error(mt_status_, #expr, __FILE__, __LINE__); \
  } while (0)

// MT_THROW(ShapeError, "add: cannot broadcast ", a, " with ", b)
#define MT_THROW(ErrorType, ...) throw ::mt::ErrorType(::mt::detail::str(__VA_ARGS__))

// MT_CHECK(cond, ShapeError, "message parts", ...): throws when cond is false.
#define MT_CHECK(cond, ErrorType, ...)             \
  do {                                             \
    if (!(cond)) MT_THROW(ErrorType, __VA_ARGS__); \
  } while (0)
