// Launchers of tensor/'s data-movement kernels (tensor/copy.cu) and their CPU counterparts (tensor/copy_cpu.cpp).
// Raw pointers and layouts; the Tensor methods validate and call these.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/layout.h"

namespace mt::detail {

// dst[dl.offset(i)] = src[sl.offset(i)] for i in [0, n); element size 1, 2, 4, 8 or 16 bytes.
void launch_copy_strided(void* dst, const StridedLayout& dl, const void* src, const StridedLayout& sl,
                         std::size_t elem_size, std::int64_t n, cudaStream_t stream);
void cpu_copy_strided(void* dst, const StridedLayout& dl, const void* src, const StridedLayout& sl,
                      std::size_t elem_size, std::int64_t n);

// Every element of the layout set to `value` (converted to dtype).
void launch_fill(void* dst, const StridedLayout& l, std::int64_t n, DType dtype, double value, cudaStream_t stream);
void cpu_fill(void* dst, const StridedLayout& l, std::int64_t n, DType dtype, double value);

// dst[i] = start + i * step, contiguous.
void launch_arange(void* dst, std::int64_t n, DType dtype, double start, double step, cudaStream_t stream);
void cpu_arange(void* dst, std::int64_t n, DType dtype, double start, double step);

// dst[i] = uniform01(seed, i) or normal01(seed, i), contiguous float32.
void launch_random(float* dst, std::int64_t n, std::uint64_t seed, bool normal, cudaStream_t stream);
void cpu_random(float* dst, std::int64_t n, std::uint64_t seed, bool normal);

}  // namespace mt::detail
