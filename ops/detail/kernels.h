// Launchers of ops/'s CUDA kernels (ops/elementwise.cu, ops/reduce.cu, ops/softmax.cu) and the Eigen
// reference (ops/cpu/). Raw pointers and layouts; the op entries (ops/*.cpp) validate the tensors and call
// these.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "minitensor/ops/elementwise.h"
#include "minitensor/ops/reduce.h"
#include "minitensor/tensor/dtype.h"
#include "minitensor/tensor/layout.h"

namespace mt::detail {

// The layout of tensor t with its dims as they are (not coalesced): the elementwise launchers merge the dims
// of all operands together (coalesce_layouts), which single-tensor layouts would not allow.
StridedLayout raw_layout(const Tensor& t);

// ---------------------------------------------------------------- elementwise (ops/elementwise.cu)
// All layouts have the output's shape (inputs broadcast with stride 0), uncoalesced; n = numel of the output.
// div_by_zero: for integer Div with a tensor divisor, a device int the kernel sets to 1 on a zero divisor
// (nullptr: not reported; the quotient is 0 either way, ops/functors.h).
// Contiguous operands take the 16-byte vector path; anything else takes the N-d strided path.
void launch_unary(UnaryOp op, DType dtype, void* out, const StridedLayout& ol, const void* x,
                  const StridedLayout& xl, std::int64_t n, cudaStream_t stream);
void launch_binary(BinaryOp op, DType dtype, void* out, const StridedLayout& ol, const void* a,
                   const StridedLayout& al, const void* b, const StridedLayout& bl, std::int64_t n,
                   cudaStream_t stream, int* div_by_zero = nullptr);
// out = x op s (scalar_first: s op x); s already checked to fit dtype.
void launch_binary_scalar(BinaryOp op, DType dtype, void* out, const StridedLayout& ol, const void* x,
                          const StridedLayout& xl, double s, bool scalar_first, std::int64_t n,
                          cudaStream_t stream, int* div_by_zero = nullptr);
void launch_clamp(DType dtype, void* out, const StridedLayout& ol, const void* x, const StridedLayout& xl,
                  double lo, double hi, std::int64_t n, cudaStream_t stream);
// Contiguous pixels, 4-byte aligned: n_pixels RGBA words.
void launch_invert_rgba(std::uint8_t* out, const std::uint8_t* x, std::int64_t n_pixels, cudaStream_t stream);
// The seed's scalar add (one float per thread per pass, no vectors): the first rung of the elementwise ladder
// (naive -> 16-byte vectors, which launch_binary is), a benchmark baseline.
void launch_add_naive(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream);

// ---------------------------------------------------------------- reductions (ops/reduce.cu)
// Row case: n_rows rows of row_len contiguous floats, row r starting at x + rows.offset(r). out: n_rows
// values (float, or int32 indices for ArgMax/ArgMin), contiguous.
// allow_split: when there are too few rows or columns to fill the device, the reduced extent is split across
// blocks and finished by a second pass through the stream's scratch (memory/stream_scratch.h, whose capture
// rule gives captured launches buffers of their own). False: one kernel and no scratch whatever the shape.
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
// block per row); SharedCached: aligned rows in shared memory, several blocks per SM; TwoPass: statistics,
// then a second read; BulkLean: aligned rows streamed by the bulk-copy engine through a ring of shared-memory
// stages, one block per SM, one block-wide merge per row, rows handed out from a per-stream queue as blocks
// free up (Auto's choice for aligned rows of 16 KiB up to the length where three stages fit, ~75 KiB on
// H100/H200); BulkLeanStatic: the same ring with each block taking every gridDim-th row, the order BulkLean
// keeps while the stream is captured into a CUDA graph (named so that tests and benchmarks can run it
// eagerly).
enum class SoftmaxKernel { Auto, RegisterCached, SharedCached, TwoPass, BulkLean, BulkLeanStatic };
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
