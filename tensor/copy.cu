// Data-movement kernels of tensor/: strided copy, fill, arange, counter-based random.
// All are bandwidth-bound: bytes moved = n * elem_size (fill, arange, random) or 2 * n * elem_size (copy).
#include <cstdint>

#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"
#include "minitensor/tensor/detail/random.h"
#include "minitensor/tensor/detail/kernels.h"

namespace mt::detail {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void copy_strided_kernel(T* __restrict__ dst, StridedLayout dl, const T* __restrict__ src,
                                    StridedLayout sl, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    dst[dl.offset(i)] = src[sl.offset(i)];
  }
}

template <class T>
__global__ void fill_kernel(T* __restrict__ dst, StridedLayout l, std::int64_t n, T value) {
  const bool contiguous = l.rank == 1 && l.stride[0] == 1;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    dst[contiguous ? i : l.offset(i)] = value;
  }
}

template <class T>
__global__ void arange_kernel(T* __restrict__ dst, std::int64_t n, double start, double step) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    dst[i] = static_cast<T>(start + static_cast<double>(i) * step);
  }
}

__global__ void random_kernel(float* __restrict__ dst, std::int64_t n, std::uint64_t seed, bool normal) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    dst[i] = normal ? normal01(seed, static_cast<std::uint64_t>(i))
                    : uniform01(seed, static_cast<std::uint64_t>(i));
  }
}

template <class T>
void copy_as(void* dst, const StridedLayout& dl, const void* src, const StridedLayout& sl, std::int64_t n,
             cudaStream_t stream) {
  const int grid = grid_stride_blocks(copy_strided_kernel<T>, kThreads, n, kThreads);
  copy_strided_kernel<T>
      <<<grid, kThreads, 0, stream>>>(static_cast<T*>(dst), dl, static_cast<const T*>(src), sl, n);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_copy_strided(void* dst, const StridedLayout& dl, const void* src, const StridedLayout& sl,
                         std::size_t elem_size, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  switch (elem_size) {
    case 1:
      return copy_as<std::uint8_t>(dst, dl, src, sl, n, stream);
    case 2:
      return copy_as<std::uint16_t>(dst, dl, src, sl, n, stream);
    case 4:
      return copy_as<std::uint32_t>(dst, dl, src, sl, n, stream);
    case 8:
      return copy_as<std::uint64_t>(dst, dl, src, sl, n, stream);
    case 16:
      return copy_as<uint4>(dst, dl, src, sl, n, stream);
  }
  MT_THROW(InvalidArgument, "copy: unsupported element size ", elem_size);
}

void launch_fill(void* dst, const StridedLayout& l, std::int64_t n, DType dtype, double value,
                 cudaStream_t stream) {
  if (n == 0) return;
  MT_DISPATCH_DTYPE(dtype, "fill", T, [&] {
    const int grid = grid_stride_blocks(fill_kernel<T>, kThreads, n, kThreads);
    fill_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<T*>(dst), l, n, static_cast<T>(value));
    MT_CUDA_CHECK_LAUNCH();
  });
}

void launch_arange(void* dst, std::int64_t n, DType dtype, double start, double step, cudaStream_t stream) {
  if (n == 0) return;
  MT_DISPATCH_DTYPE(dtype, "arange", T, [&] {
    const int grid = grid_stride_blocks(arange_kernel<T>, kThreads, n, kThreads);
    arange_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<T*>(dst), n, start, step);
    MT_CUDA_CHECK_LAUNCH();
  });
}

void launch_random(float* dst, std::int64_t n, std::uint64_t seed, bool normal, cudaStream_t stream) {
  if (n == 0) return;
  const int grid = grid_stride_blocks(random_kernel, kThreads, n, kThreads);
  random_kernel<<<grid, kThreads, 0, stream>>>(dst, n, seed, normal);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::detail
