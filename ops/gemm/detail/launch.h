// Launchers of the SGEMM kernels: raw pointers, element strides, one stream. ops/gemm/api.cpp validates
// tensors and calls these; bench/gemm calls them to time each kernel on its own; tests call them to run each
// configuration.
#pragma once

#include <cuda_runtime_api.h>

#include "minitensor/ops/gemm/detail/dispatch.h"
#include "minitensor/ops/gemm/detail/kernel_table.h"
#include "minitensor/ops/gemm/detail/problem.h"
#include "minitensor/ops/gemm/detail/scratch.h"

namespace mt::detail::gemm {

// Runs `p` with `config` on `stream`; InvalidArgument when !can_implement(p, config). `stream` must belong to
// the current device. Split-K takes its workspace from a per-stream cache; the splits are added as
// Config::reduce says.
void launch(const Problem& p, const Config& config, cudaStream_t stream);

// Adds `splits` partial planes of ws ([split][batch][m][n]) in split order and runs the epilogue into C; with
// splits == 0, C = epilogue(0) (K == 0). Used after the split-K launches that leave the reduction to it.
// With p.softmax, one block per row of C adds its planes, runs the epilogue, then the row's softmax.
// `overlap`: launched to overlap the kernel before it in the stream (which must be the one writing ws and
// signal pdl_launch_dependents), so its launch latency hides behind that kernel's last blocks.
void launch_splitk_reduce(const Problem& p, const float* ws, int splits, cudaStream_t stream,
                          bool overlap = false);

// Copies the operands pack_shape replaces into the stream's scratch; returns the problem that reads them
// (ops/gemm/pack.cu).
Problem pack_operands(const Problem& p, cudaStream_t stream);
// Copies B into the stream's pack scratch contiguous along n (Config::b_along_n; b_along_n_shape); returns
// the problem that reads it.
Problem pack_b_along_n(const Problem& p, cudaStream_t stream);

}  // namespace mt::detail::gemm
