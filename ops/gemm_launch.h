// Launchers of the SGEMM kernels (ops/gemm.cu, ops/gemm_tf32.cu): raw pointers, element strides, one stream.
// ops/gemm.cpp validates tensors and calls these; bench/gemm calls them to time each kernel on its own.
//
// Every operand is addressed by element strides, so transposed and strided views need no copy:
//   A(i, p) = a[batch * a_sb + i * a_sm + p * a_sk]   i < m, p < k     (op(A) already folded into the
//   strides) B(p, j) = b[batch * b_sb + p * b_sk + j * b_sn]   p < k, j < n C(i, j) = c[batch * c_sb + i *
//   c_sm + j * c_sn]
// A batch stride of 0 broadcasts that operand over the batch.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/functors.h"
#include "ops/gemm.h"

namespace mt::detail::gemm {

struct WgmmaPackedB;  // ops/gemm_wgmma.h

// The epilogue's activation, shared by the kernels and the CPU reference (the math is ops/functors.h's).
MT_FN float activate(float v, Activation act) {
  switch (act) {
    case Activation::Relu:
      return fn::relu(v);
    case Activation::Gelu:
      return fn::gelu(v);
    default:
      return v;
  }
}

struct Problem {
  int m = 0, n = 0, k = 0, batch = 1;
  const float* a = nullptr;
  std::int64_t a_sm = 0, a_sk = 0, a_sb = 0;
  const float* b = nullptr;
  std::int64_t b_sk = 0, b_sn = 0, b_sb = 0;
  float* c = nullptr;
  std::int64_t c_sm = 0, c_sn = 0, c_sb = 0;
  const float* bias = nullptr;  // (n), stride bias_s; nullptr: no bias
  std::int64_t bias_s = 1;
  float alpha = 1.f, beta = 0.f;  // beta == 0: C is never read
  Activation act = Activation::None;
  // A contiguous along m (B along n) whose rows are readable up to the next multiple of 4 elements, as in a
  // packed copy (Config::pack): a run straddling the matrix's edge may still be loaded whole.
  bool a_padded = false, b_padded = false;
  // Then each row of C (along n) replaced by its softmax. The reduce kernel runs it (launch_splitk_reduce):
  // after the splits it adds, or after a product stored raw where the configuration adds no splits there.
  bool softmax = false;
  // B already packed for the wgmma kernels (wgmma_pack_b): a wgmma launch whose layout it matches reads it
  // instead of packing B; every other kernel ignores it (b stays the operand).
  const WgmmaPackedB* b_packed = nullptr;
};

// Calls fn(q) for each chunk of at most 65535 batch entries (the grid's y limit), q being `p` narrowed to the
// chunk.
template <class Fn>
void for_each_batch_chunk(const Problem& p, Fn&& fn) {
  constexpr int kMaxBatch = 65535;
  for (int b0 = 0; b0 < p.batch; b0 += kMaxBatch) {
    Problem q = p;
    q.batch = std::min(kMaxBatch, p.batch - b0);
    q.a += b0 * p.a_sb;
    q.b += b0 * p.b_sb;
    q.c += b0 * p.c_sb;
    fn(q);
  }
}

// The kernels, by name. The ladder rungs handle every problem (they are slow); the production kernels are
// templates instantiated for the configurations listed here.
enum class Kernel {
  Naive,        // one thread per element of C
  SmemTiled,    // 32x32 shared-memory tiles, one thread per element
  RegTiled,     // 128x128x8 tiles, 8x8 per thread, outer-product inner loop, one stage
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
  Wgmma,  // Hopper wgmma (sm_90a), TF32 modes: pack pass + warp-specialised kernel (ops/gemm_wgmma.cu)
};
const char* kernel_name(Kernel k);
bool is_tma_kernel(Kernel k);          // the Kernel::SimtTma* kernels
std::vector<Kernel> simt_kernels();    // the production FP32 configurations
std::vector<Kernel> tensor_kernels();  // the production tensor-core configurations

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
};
std::string config_name(const Config& c);

// The SIMT configurations built with the 16-byte cp.async ring, and the problems it takes
// (Staging::CpAsync16: A contiguous along k and B along n, in 16-byte aligned rows and batches).
bool has_ring16(Kernel k);
bool ring16_ready(const Problem& p);
// The problems the lane loaders take (the 256x128 tile's Staging::CpAsync, unsplit: A contiguous along k and
// B along n, any leading dimension and alignment).
bool lanes_ready(const Problem& p);
// The problems the TMA kernels take (Staging::Tma): A contiguous along k and B along n, each in 16-byte
// aligned rows at least as long as the matrix's (any stride for a single row), batch entries 16-byte aligned
// and not overlapping (or an operand broadcast), on an sm_90 device with the kernels built for it
// (ops/gemm_simt_tma.cu).
bool tma_ready(const Problem& p);

// Whether packing would copy an operand of `p` (Config::pack), and `p` as the kernel sees it after packing
// (the copied operands' pointers null): each copied operand keeps its contiguous dim (k for an operand
// strided both ways, n for B), in rows padded to a multiple of 4 floats.
bool needs_pack(const Problem& p);
Problem pack_shape(const Problem& p);

// Whether `config` can run `p` (alignment it needs, math mode it supports, 32-bit tile offsets, grid limits).
bool can_implement(const Problem& p, const Config& config);

// Runs `p` with `config` on `stream`; InvalidArgument when !can_implement(p, config). `stream` must belong to
// the current device. Split-K takes its workspace from a per-stream cache; the splits are added as
// Config::reduce says.
void launch(const Problem& p, const Config& config, cudaStream_t stream);

// The dispatcher's choice for `p` in `math` mode (a table measured on H100/H200).
Config choose(const Problem& p, MathMode math);

// Every configuration worth timing for `p` in `math` mode (the tuning sweep).
std::vector<Config> candidates(const Problem& p, MathMode math);

// The tensor-core kernels (ops/gemm_tf32.cu); `k_per_split` is a multiple of 16. Called by launch().
void launch_tensor(const Problem& p, Kernel kernel, bool x3, int split, int k_per_split, float* ws,
                   cudaStream_t stream);

// Adds `splits` partial planes of ws ([split][batch][m][n]) in split order and runs the epilogue into C; with
// splits == 0, C = epilogue(0) (K == 0). Used after the split-K launches that leave the reduction to it.
// With p.softmax, one block per row of C adds its planes, runs the epilogue, then the row's softmax.
// `overlap`: launched to overlap the kernel before it in the stream (which must be the one writing ws and
// signal pdl_launch_dependents), so its launch latency hides behind that kernel's last blocks.
void launch_splitk_reduce(const Problem& p, const float* ws, int splits, cudaStream_t stream,
                          bool overlap = false);

// Split-K partials (split * batch * m * n floats, `partial_bytes`) per (device, stream), grown on demand and
// kept: work on one stream is ordered, so reuse needs no sync and no per-call allocation. Launches being
// captured into a CUDA graph get scratch of their own, never freed (ops/gemm.cu).
float* split_scratch(std::size_t partial_bytes, cudaStream_t stream);
// Scratch for operand copies (Config::pack, the wgmma pack pass), per stream like split_scratch.
float* pack_scratch(std::size_t bytes, cudaStream_t stream);

// CPU reference (ops/cpu/gemm.cpp): float64 accumulation, then the same float epilogue as the kernels.
void cpu_gemm(const Problem& p);

}  // namespace mt::detail::gemm
