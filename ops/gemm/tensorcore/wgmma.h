// Hopper (sm_90a) tensor-core SGEMM for MathMode::TF32 and MathMode::TF32x3: a pack pass (for the operands
// the kernel does not fetch itself) and a warp-specialised wgmma kernel (ops/gemm/tensorcore/wgmma.cu). Same
// Problem contract as the other launchers (ops/gemm/detail/problem.h): any strides for A, B and C, batch
// strides (0 broadcasts), alpha/beta/bias/activation epilogue, beta == 0 never reads C.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "minitensor/memory/allocator.h"
#include "minitensor/ops/gemm.h"
#include "minitensor/ops/gemm/detail/dispatch.h"
#include "minitensor/ops/gemm/detail/problem.h"

namespace mt::detail::gemm {

// Tile configuration. 0 fields are chosen from the shape (launch_wgmma without a config does that). Split K
// is reduced in split order either way (deterministic): inside the launch, the splits of a tile forming one
// cluster that adds their tiles through distributed shared memory and runs the epilogue, or by the split-K
// reduce kernel launched after it.
struct WgmmaConfig {
  int bn = 0;     // CTA tile N: 128 or 256 (256: TF32 only; 3xTF32 holds three accumulator sets)
  int split = 0;  // K split over a cluster of this many CTAs per tile (1-8; only with bn 128)...
  // ...or over this many CTAs that store raw partials for the split-K reduce kernel to add (up to
  // kMaxKernelSplit): more CTAs than a cluster allows, for the few tiles of a short M.
  bool by_kernel = false;
};
inline constexpr int kMaxKernelSplit = 32;

// B packed ahead of time (a weight used by many launches): a snapshot of B in the layout the kernel reads,
// for one tile width and mode. A launch uses it where its B is the same (pointer, strides, n, k) and its
// configuration has the same tile width and mode, and then packs only A (in TF32 mode not even A where it
// is contiguous along k in 16-byte aligned rows: tma_a_ok).
struct WgmmaPackedB {
  Allocation storage;
  const float* b = nullptr;  // the operand it was made from
  std::int64_t b_sk = 0, b_sn = 0;
  int n = 0, k = 0;
  int bn = 0;       // the tile width it is laid out for
  bool x3 = false;  // big and small parts (TF32x3)
};

// Whether the wgmma kernels can run `p` in `math` on `model`: a TF32 mode, a compute capability 9.0 device,
// and a binary that carries the sm_90a kernels (DeviceModel::wgmma_kernels). Every shape, stride and batch
// is supported. Without a model: the current device (false where there is none).
bool wgmma_can_implement(const Problem& p, MathMode math, const DeviceModel& model);
bool wgmma_can_implement(const Problem& p, MathMode math);

// The configuration launch_wgmma(p, math, stream) picks for `p` on `model` (pure), or on the current device.
WgmmaConfig wgmma_choose(const Problem& p, MathMode math, const DeviceModel& model);
WgmmaConfig wgmma_choose(const Problem& p, MathMode math);
std::string wgmma_config_name(const WgmmaConfig& c, MathMode math);

// Runs `p` on `stream` (of the current device): packs A and B into a stream-ordered workspace of the
// caching allocator (in TF32 mode not an A contiguous along k in 16-byte aligned rows, which the kernel
// fetches itself: tma_a_ok), then runs the GEMM. InvalidArgument when
// !wgmma_can_implement(p, math) or the config is not one of the built ones.
void launch_wgmma(const Problem& p, MathMode math, cudaStream_t stream);
void launch_wgmma(const Problem& p, MathMode math, const WgmmaConfig& config, cudaStream_t stream);

// Packs B of `p` on `stream` (of the current device) for the configuration launch_wgmma(p, math) picks.
// Null where that would not use it: the wgmma kernels cannot run `p` in `math`, B differs across the batch,
// or n or k is 0.
std::shared_ptr<WgmmaPackedB> wgmma_pack_b(const Problem& p, MathMode math, cudaStream_t stream);

}  // namespace mt::detail::gemm
