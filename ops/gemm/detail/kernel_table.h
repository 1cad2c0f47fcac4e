// The SGEMM kernels and their configurations: one table row per kernel (name, tile, traits, launcher), so
// adding a kernel touches the enum and one row of ops/gemm/kernel_table.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <string>
#include <vector>

#include "minitensor/ops/gemm.h"
#include "minitensor/ops/gemm/detail/problem.h"

namespace mt::detail::gemm {

// The kernels, by name. The ladder rungs handle every problem (they are slow); the production kernels are
// templates instantiated for the configurations listed here.
enum class Kernel {
  Naive,        // one thread per element of C
  SmemTiled,    // 32x32 shared-memory tiles, one thread per element
  RegTiled,     // 128x128x8 tiles, 8x8 per thread, outer-product inner loop, one stage
  WarpTiled,    // 128x128x8 tiles in 64x32 warp tiles, two shared buffers, next tile staged in registers
  Simt128x128,  // production FP32: warp tiles, cp.async pipeline, register double buffering
  Simt128x128k16,
  Simt128x128x2,  // the same tiles held to 128 registers: two blocks per SM
  Simt256x128,
  Simt256x128k16,  // 16x8 per thread: the fewest shared-memory reads per FMA
  Simt128x64,
  Simt64x64,
  Simt32x128,     // the small-M kernel
  Simt32x64,      // small M and few output tiles (MLP-sized problems): 64 threads, many blocks per SM
  Simt64x128,     // M of 33-64 with a long K: 8x8 per thread, 3 blocks per SM
  Simt64x256,     // 16x8 per thread in 4 warps, two blocks per SM: short K over many tiles (whole runs only)
  Simt128x64k16,  // skinny N under a tall M: 16 deep, so each tile's loads (A streams from DRAM) hide behind
                  // twice the math of an 8-deep tile; 8x8 per thread, two blocks per SM
  // Tiles brought by TMA (Staging::Tma only), 32 deep: consumer warps of 8x8 per thread and a producer warp.
  SimtTma128x64,  // skinny N under a tall M: 4 consumer warps, 3 stages, two blocks per SM
  SimtTma64x128,  // small M with a long K: 4 consumer warps side by side along N, 3 stages, two per SM
  Tensor128x128,  // mma.sync m16n8k8 TF32 (MathMode::TF32 or TF32x3)
  Tensor128x64,
  Tensor64x64,
  Wgmma,  // Hopper wgmma (sm_90a), TF32 modes: pack pass + warp-specialised kernel (tensorcore/wgmma.cu)
  // Short K (any math mode, computed in fp32): bound by writing C; a block stages its rows of A and columns
  // of B for the whole K and each thread writes its register block (simt/small_k.cu).
  SmallK128x128,  // 8x8 per thread: many tiles
  SmallK64x64,    // 4x4 per thread: four times the blocks where tiles are few
  SmallKRows,     // 32x128 tiles of 128 threads, 8x4 per thread, streaming stores: the shortest K
  Gemv,  // matrix-vector (M == 1 or N == 1, any math mode, computed in fp32): one streaming pass (gemv.cu)
};

// How the partial sums of split K are added (deterministic either way: splits added in split order).
enum class SplitReduce {
  Kernel,   // partials through an L2 workspace, added by a second kernel over every SM (every kernel but
            // wgmma)
  Cluster,  // the splits of a tile form one thread-block cluster and add through distributed shared memory
            // (the SIMT kernels up to kMaxClusterSplit splits, and wgmma)
};
// How the SIMT kernels bring tiles into shared memory.
enum class Staging {
  Registers,  // through registers, one tile ahead (needs each operand contiguous along k or its other dim)
  CpAsync,    // a multi-stage cp.async ring (any strides)
  CpAsync16,  // the ring with 16-byte copies only: A contiguous along k, kept k-major in shared memory, and B
              // contiguous along n, in 16-byte aligned rows (the configurations built for it)
  Tma,        // one TMA copy per operand and stage into an mbarrier ring, issued by a producer warp
              // (the Kernel::SimtTma* kernels only, and they only this; tma_ready problems)
};

// A cluster holds at most the portable cluster size of blocks.
constexpr int kMaxClusterSplit = 8;

struct Config {
  Kernel kernel = Kernel::Simt128x128;
  int split_k = 1;  // > 1: K split over blocks, partial sums reduced in a fixed order (deterministic)
  MathMode math = MathMode::FP32;            // TF32 modes only with the Tensor* kernels
  SplitReduce reduce = SplitReduce::Kernel;  // with split_k > 1
  Staging staging = Staging::Registers;      // SIMT kernels
  // SIMT kernels: first copy each operand that is not in 16-byte-aligned runs along a contiguous dim (odd
  // leading dimension, offset view, strided both ways) into aligned scratch with padded rows, so the kernel
  // takes 16-byte loads (see pack_shape). Aligned operands are used in place.
  bool pack = false;
  // Run the product as its transpose, C^T = B^T A^T (M and N exchanged, A and B swapped; swapped() in
  // problem.h), so a skinny N takes the small-M tiles. FP32 SIMT only, without a bias or a row softmax
  // (both run along C's rows); applied before packing.
  bool swap = false;
  // SIMT fp32: first copy B, stored contiguous along k (x W^T with W a Linear's (out, in) weight), into
  // scratch contiguous along n, the layout the register-staged tiles store to shared memory without a
  // transpose: their loop over such a B runs at about 0.91 of its rate over B along n on big products, and
  // the copy costs 8 bytes per element of B (b_repackable, pack_b_along_n). Not with `pack`.
  bool b_along_n = false;
};
std::string config_name(const Config& c);

// ---------------------------------------------------------------- the kernel table

enum class KernelFamily {
  Rung,    // the teaching ladder: every problem, FP32, unsplit (ops/gemm/ladder.cu)
  Simt,    // production FP32 (ops/gemm/simt/)
  Tensor,  // tensor cores, TF32 modes (ops/gemm/tensorcore/)
  Vector,  // memory-bound products with a vector operand, every math mode (ops/gemm/gemv.cu)
  SmallK,  // products bound by writing C (a short K), every math mode (ops/gemm/simt/small_k.cu)
};
struct TileInfo {
  int bm, bn, bk;
};
// Runs `p` with `c` on `stream` (p's batch within the grid's limit; c.split_k >= 1; no packing, no softmax:
// launch() has done those).
using Launcher = void (*)(const Problem& p, const Config& c, cudaStream_t stream);

struct KernelInfo {
  Kernel kernel;
  const char* name;
  KernelFamily family;
  TileInfo tile;
  bool is_tma = false;          // Staging::Tma only, and only these kernels take it
  bool registers_only = false;  // built without the 4-byte cp.async ring (its scalar loaders would spill)
  bool whole_runs_only =
      false;                // built for whole 16-byte operand runs only (scalar-run variants would spill)
  bool has_ring16 = false;  // built with the 16-byte cp.async ring (Staging::CpAsync16)
  Launcher launch = nullptr;
};

// Every kernel, in Kernel order.
std::span<const KernelInfo> kernel_table();
const KernelInfo& kernel_info(Kernel k);

inline const char* kernel_name(Kernel k) {
  return kernel_info(k).name;
}
inline TileInfo tile_of(Kernel k) {
  return kernel_info(k).tile;
}
inline bool is_rung(Kernel k) {
  return kernel_info(k).family == KernelFamily::Rung;
}
inline bool is_simt(Kernel k) {
  return kernel_info(k).family == KernelFamily::Simt;
}
inline bool is_tensor(Kernel k) {
  return kernel_info(k).family == KernelFamily::Tensor;
}
inline bool is_tma_kernel(Kernel k) {
  return kernel_info(k).is_tma;
}
inline bool is_small_k(Kernel k) {
  return kernel_info(k).family == KernelFamily::SmallK;
}
inline bool has_ring16(Kernel k) {
  return kernel_info(k).has_ring16;
}
std::vector<Kernel> rung_kernels();     // the teaching ladder, slowest first
std::vector<Kernel> simt_kernels();     // the production FP32 configurations
std::vector<Kernel> tensor_kernels();   // the production tensor-core configurations
std::vector<Kernel> small_k_kernels();  // the short-K kernels (every math mode)

}  // namespace mt::detail::gemm
