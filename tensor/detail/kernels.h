// Launchers of tensor/'s data-movement kernels (tensor/copy.cu, tensor/transpose.cu) and their CPU
// counterparts (tensor/copy_cpu.cpp). Raw pointers and layouts; the Tensor methods validate and call these.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "minitensor/tensor/dtype.h"
#include "minitensor/tensor/layout.h"

namespace mt::detail {

// dst[dl.offset(i)] = src[sl.offset(i)] for i in [0, n); element size 1, 2, 4, 8 or 16 bytes.
void launch_copy_strided(void* dst, const StridedLayout& dl, const void* src, const StridedLayout& sl,
                         std::size_t elem_size, std::int64_t n, cudaStream_t stream);
void cpu_copy_strided(void* dst, const StridedLayout& dl, const void* src, const StridedLayout& sl,
                      std::size_t elem_size, std::int64_t n);

// Tiled copy for layouts whose unit-stride dims differ (a transpose or a permute that moves the innermost
// dim): a shared-memory tile transpose batched over the other dims. dl and sl: one shape, coalesced together
// (coalesce_layouts). Returns false, launching nothing, when the layouts do not call for it (then use
// launch_copy_strided).
bool launch_copy_tiled(void* dst, const StridedLayout& dl, const void* src, const StridedLayout& sl,
                       std::size_t elem_size, std::int64_t n, cudaStream_t stream);

// The transpose ladder, rung by rung, for benchmarks and tests: dst (n_cols, n_rows) = src (n_rows,
// n_cols)^T, both contiguous, 4-byte elements. Naive: a thread per element, strided writes. SharedNoPad: 32 x
// 32 shared tile without padding (bank conflicts). SharedPadded: padded tiles, scalar accesses. Vec4Wide:
// 16-byte accesses, 1 x 4 tiles per block (InvalidArgument unless dims divide by 4 and pointers are aligned).
// Best: what copies use (padded, 16-byte accesses where the alignment allows: 2 x 4 tiles for one matrix, 2 x
// 2 for batched permutes).
enum class TransposeKernel { Naive, SharedNoPad, SharedPadded, Vec4Wide, Best };
void launch_transpose_2d(TransposeKernel kernel, void* dst, const void* src, std::int64_t n_rows,
                         std::int64_t n_cols, cudaStream_t stream);

// Every element of the layout set to `value` (converted to dtype).
void launch_fill(void* dst, const StridedLayout& l, std::int64_t n, DType dtype, double value,
                 cudaStream_t stream);
void cpu_fill(void* dst, const StridedLayout& l, std::int64_t n, DType dtype, double value);

// dst[i] = start + i * step, contiguous.
void launch_arange(void* dst, std::int64_t n, DType dtype, double start, double step, cudaStream_t stream);
void cpu_arange(void* dst, std::int64_t n, DType dtype, double start, double step);

// dst[i] = uniform01(seed, i) or normal01(seed, i), contiguous float32.
void launch_random(float* dst, std::int64_t n, std::uint64_t seed, bool normal, cudaStream_t stream);
void cpu_random(float* dst, std::int64_t n, std::uint64_t seed, bool normal);

}  // namespace mt::detail
