// Launchers of ops/'s CUDA kernels (ops/elementwise.cu, ops/reduce.cu, ops/softmax.cu) and the Eigen
// reference (ops/cpu/). Raw pointers and layouts; the op entries (ops/*.cpp) validate the tensors and call
// these.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "tensor/dtype.h"
#include "tensor/layout.h"

namespace mt::detail {

// The layout of tensor t with its dims as they are (not coalesced): the elementwise launchers merge the dims
// of all operands together (coalesce_layouts), which single-tensor layouts would not allow.
StridedLayout raw_layout(const Tensor& t);

// ---------------------------------------------------------------- elementwise (ops/elementwise.cu)
// All layouts have the output's shape (inputs broadcast with stride 0), uncoalesced; n = numel of the output.
// Contiguous operands take the 16-byte vector path; anything else takes the N-d strided path.
void launch_unary(UnaryOp op, DType dtype, void* out, const StridedLayout& ol, const void* x,
                  const StridedLayout& xl, std::int64_t n, cudaStream_t stream);
void launch_binary(BinaryOp op, DType dtype, void* out, const StridedLayout& ol, const void* a,
                   const StridedLayout& al, const void* b, const StridedLayout& bl, std::int64_t n,
                   cudaStream_t stream);
// out = x op s (scalar_first: s op x); s already checked to fit dtype.
void launch_binary_scalar(BinaryOp op, DType dtype, void* out, const StridedLayout& ol, const void* x,
                          const StridedLayout& xl, double s, bool scalar_first, std::int64_t n,
                          cudaStream_t stream);
void launch_clamp(DType dtype, void* out, const StridedLayout& ol, const void* x, const StridedLayout& xl,
                  double lo, double hi, std::int64_t n, cudaStream_t stream);
// Contiguous pixels, 4-byte aligned: n_pixels RGBA words.
void launch_invert_rgba(std::uint8_t* out, const std::uint8_t* x, std::int64_t n_pixels, cudaStream_t stream);
// The seed's scalar add (one float per thread per pass, no vectors): a benchmark baseline.
void launch_add_naive(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream);
// Schedules of the contiguous 16-byte path, as benchmark rungs for float32 relu and add over n contiguous
// elements (any alignment). GridStrideU: a resident grid striding over the array, U packs per thread per
// step; BlocksU: one block per 256 * U packs, one step per thread. Streaming: evict-first loads and stores.
// Auto: what the ops use.
enum class MapSchedule {
  Auto,
  GridStride2,
  GridStride4,
  GridStride2Streaming,
  GridStride4Streaming,
  Blocks4,
  Blocks4Streaming,
  Blocks2,
  Blocks8
};
void launch_relu_rung(MapSchedule schedule, float* out, const float* x, std::int64_t n, cudaStream_t stream);
void launch_add_rung(MapSchedule schedule, float* out, const float* a, const float* b, std::int64_t n,
                     cudaStream_t stream);

// ---------------------------------------------------------------- reductions (ops/reduce.cu)
// Row case: n_rows rows of row_len contiguous floats, row r starting at x + rows.offset(r). out: n_rows
// values (float, or int32 indices for ArgMax/ArgMin), contiguous.
// allow_split: when there are too few rows or columns to fill the device, the reduced extent is split across
// blocks and finished by a second pass through a per-stream scratch buffer. Pass false where the launch is
// captured into a CUDA graph: the graph would keep the scratch pointer, which a later eager reduction on the
// same stream may replace.
void launch_reduce_rows(ReduceOp op, const float* x, const StridedLayout& rows, std::int64_t n_rows,
                        std::int64_t row_len, void* out, cudaStream_t stream, bool allow_split = true);
// Column case: element (o, r, c) at x + outer.offset(o) + r * r_stride + c, reduced over r; out[o * n_cols +
// c].
void launch_reduce_cols(ReduceOp op, const float* x, const StridedLayout& outer, std::int64_t n_outer,
                        std::int64_t n_reduce, std::int64_t r_stride, std::int64_t n_cols, void* out,
                        cudaStream_t stream, bool allow_split = true);

// ---------------------------------------------------------------- softmax (ops/softmax.cu)
// Which row kernel (n_inner == 1): Auto picks by row length; the others are for benchmarks and tests
// (InvalidArgument when the rows do not fit the kernel). RegisterCached: the row in registers (a warp or a
// block per row); SharedCached: aligned rows in shared memory, several blocks per SM; SharedPipelined: the
// same, double-buffered, one block per SM; TwoPass: statistics, then a second read; Bulk: aligned rows
// streamed by the bulk-copy engine through a ring of shared-memory stages, one block per SM; BulkStreaming:
// the same with evict-first stores; BulkLean: the bulk-copy ring with one block-wide merge per row, no
// per-element branches, and rows handed out from a per-stream queue as blocks free up (static under graph
// capture; Auto's choice for aligned rows of 16 KiB up to the length where three stages fit, ~75 KiB on
// H100/H200); BulkLeanStatic: the same, each block taking every gridDim-th row; BulkCluster2 / BulkCluster4:
// BulkLeanStatic with each row split over a cluster of 2 / 4 blocks (2 / 4 blocks per SM), which merge their
// statistics through distributed shared memory.
enum class SoftmaxKernel {
  Auto,
  RegisterCached,
  SharedCached,
  SharedPipelined,
  TwoPass,
  Bulk,
  BulkStreaming,
  BulkLean,
  BulkLeanStatic,
  BulkCluster2,
  BulkCluster4
};
// Contiguous x and out viewed as (n_outer, n_axis, n_inner); softmax over the middle dim.
void launch_softmax(bool log, const float* x, float* out, std::int64_t n_outer, std::int64_t n_axis,
                    std::int64_t n_inner, cudaStream_t stream, SoftmaxKernel which = SoftmaxKernel::Auto);

// ---------------------------------------------------------------- the Eigen reference (ops/cpu/)
// Contiguous results on the CPU; inputs are CPU tensors of any layout, already validated.
Tensor cpu_unary(UnaryOp op, const Tensor& x);
Tensor cpu_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Shape& out_shape);
Tensor cpu_binary_scalar(BinaryOp op, const Tensor& x, double s, bool scalar_first);
Tensor cpu_clamp(const Tensor& x, double lo, double hi);
Tensor cpu_invert_rgba(const Tensor& x);
// x viewed as (n_rows, row_len) rows, contiguous.
Tensor cpu_reduce_rows(ReduceOp op, const Tensor& rows);
Tensor cpu_softmax(bool log, const Tensor& x, int axis);

}  // namespace mt::detail
