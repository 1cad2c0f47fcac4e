// SGEMM dispatch as a pure function of the problem, the math mode and a model of the device: which
// configurations can run a problem (can_implement), which one runs it (choose), which are worth timing
// (candidates). Nothing here calls the CUDA runtime except DeviceModel::current(), so decisions for an H100,
// an H200 or an A100-like device are computed and tested without a GPU (tests/ops/gemm/test_dispatch.cpp).
#pragma once

#include <array>
#include <vector>

#include "minitensor/ops/gemm.h"
#include "minitensor/ops/gemm/detail/kernel_table.h"
#include "minitensor/ops/gemm/detail/problem.h"

namespace mt::detail::gemm {

// choose() takes the short-K rows kernel in fp32 for K up to kSmallKRowsMax over a C of at least
// kSmallKRowsMinC elements (batch included) whose rows do not take float4 stores; candidates() offers every
// short-K kernel up to kSmallKCandidateMax of K, and the tuner ranks them first up to kSmallKMax.
constexpr int kSmallKRowsMax = 16;
constexpr double kSmallKRowsMinC = 1 << 20;
constexpr int kSmallKMax = 64;
constexpr int kSmallKCandidateMax = 128;
// Other single products in fp32 with K up to kShortTileMaxK, M past 64 (N past 64, or B not in 16-byte
// runs) and at least a wave of 64x64 tiles take unsplit tiles and no pack (dispatch.cpp, short_k_tiles):
// 64x64 register-staged where B runs in aligned 16-byte rows (128x128 two per SM where both operands do,
// K >= kShortTileBigMinK and C has kShortTileBigC elements), else the 4-byte cp.async ring, 32x128 under
// kShortTileRingMinM rows and 64x64 from there.
constexpr int kShortTileMaxK = 160;
constexpr int kShortTileBigMinK = 32;
constexpr double kShortTileBigC = 1 << 22;
constexpr int kShortTileRingMinM = 512;
// One row of 32x128 tiles (a single product with M of at most 32 and at least kNarrowMinTiles such tiles)
// splits K to the block count nearest kNarrowBlocksPerSm per SM, with at least kNarrowMinSplitK of K a split
// (dispatch.cpp, split_nearest); fewer tiles keep the few-tiles rule's 32x64 tiles, and so do rows of under
// 32 tiles whose split leaves them under a block per SM (a short K caps it). A single fp32 product with N of
// at most kSwapMaxN under M of at least kSwapMinM, no bias and no row softmax, runs as its transpose
// (Config::swap) on such a row over C^T (skinny_n_swap).
constexpr int kNarrowBlocksPerSm = 4;
constexpr int kNarrowMinSplitK = 64;
constexpr int kNarrowMinTiles = 8;
constexpr int kSwapMaxN = 32;
constexpr int kSwapMinM = 256;
// A C of a few 32x64 tiles (one side at most kTinyCMaxSide) over a long K: K splits past 32, up to
// kTinyCMaxSplit, to about two blocks per SM, at least kNarrowMinSplitK of K a split (dispatch.cpp,
// tiny_c_long_k).
constexpr int kTinyCMaxSide = 64;
constexpr int kTinyCMaxSplit = 64;
// A batch of small products (at most 512 on every side) over a wave of 64x64 tiles, or over half a wave
// with K under kSmallBatchShortK, takes 64x64 tiles on the cp.async ring, or 32x64 under kSmallBatchMinM
// rows where those waste fewer rows, K split down to kSmallBatchMinSplitK of K; it runs swapped where that
// puts kSmallBatchSwapGain more of the tiles' area inside C (dispatch.cpp).
constexpr int kSmallBatchMinM = 128;
constexpr int kSmallBatchMinSplitK = 128;
constexpr double kSmallBatchSwapGain = 0.2;
constexpr int kSmallBatchShortK = 192;
// The cost model's fitted constants, used by choose()'s wave models (dispatch.cpp; bench/gemm/DESIGN.md
// section 3 gives the sweeps behind each; scripts/fit_dispatch.py refits the wave models' from sweep logs):
// - a split of K added by the second kernel runs at kSplitRateBase - kSplitRateSlope * split / K of the
//   unsplit rate (kernel_split_rate; H100 sweeps of the 256x128 tile);
// - each block's fixed cost, with its share of a split's reduction, comes to kBlockFixedK elements of K;
// - the big rule splits a grid that fills its waves poorly only where the split promises kSplitMinGain;
// - tile rates against the best tile of a rule: the 16-deep 128x128 tile at kTile128Rate of the 256x128
//   tile (the wave model), the 64x128 tile at kTile64x128Rate of the 64x256 tile (M of 33-64);
// - the last rule's 128x128 tiles at K of 512 or more: an SM holding one block of the two-per-SM tile runs it
//   at kLoneBlockRate of its two-block throughput; the 16-deep tile (one block an SM) runs at kDeepTileRate
//   of the two-per-SM tile's rate (H200 sweeps);
// - the aligned wave model's TMA 128x64 tile (two blocks an SM) at kTmaTileRate of the 256x128 tile, an SM
//   left with one of its blocks at kTmaLoneBlockRate of the two-block throughput, its unsplit runs at
//   kTmaUnsplitRate (over several waves the unsplit tile runs behind split 2 at the same fill);
// - the aligned wave model's two-per-SM 128x128 tile at kTile128x2Rate of the 256x128 tile, an SM left with
//   one of its blocks at kTile128x2LoneRate (with 16-byte runs one block keeps an SM nearly as busy as two);
// - with both operands along k (both stored to shared memory transposed) and K of 2048 or more, the 16-deep
//   128x128 tile at a further kBAlongKTile128Rate: that costs the 128x128 tiles more than the 16-deep
//   256x128 tile split, which runs such products at its rate on B along n (H200 sweeps).
constexpr double kSplitRateBase = 0.945;
constexpr double kSplitRateSlope = 33.0;
constexpr double kBlockFixedK = 32.0;
constexpr double kSplitMinGain = 1.02;
constexpr double kTile128Rate = 0.95;
constexpr double kTile64x128Rate = 0.9;
constexpr double kLoneBlockRate = 0.75;
constexpr double kDeepTileRate = 0.97;
constexpr double kTmaTileRate = 0.96;
constexpr double kTmaLoneBlockRate = 0.5;
constexpr double kTmaUnsplitRate = 0.925;
constexpr double kTile128x2Rate = 0.97;
constexpr double kTile128x2LoneRate = 0.95;
constexpr double kBAlongKTile128Rate = 0.93;
// B along k is copied along n (Config::b_along_n) where each of its elements feeds this many FMAs or more.
constexpr double kBAlongNMinRows = 2048;

// The vector kernel (gemv.cu) runs products with at most kGemvMaxRows rows or columns. choose() gives it,
// besides every vector operand, the thin products (dispatch.cpp, thin_product): vectors of K of at least
// kThinMinK over a matrix of at least kThinMinMatrix elements (batch included), and
// - the matrix along K: 2 to kThinMaxRows vectors that together fit L1 (thin x K <= kThinMaxVectorFloats)
//   or over a matrix the dot tile takes (kThinTileMinMatrix elements, below); up to kGemvMaxRows over a
//   matrix of kThinBigMatrix elements;
// - the matrix along the outputs: 2 to kThinMaxRows vectors.
// There a tile holds mostly rows outside C and reads the matrix at a fraction of the copy rate. Elsewhere the
// tiles measured faster (bench/gemm/DESIGN.md, thin products), and the kernel stays a tuner candidate.
constexpr int kGemvMaxRows = 16;
constexpr int kThinMaxRows = 8;
constexpr int kThinMinK = 32;
constexpr double kThinMaxVectorFloats = 40960;
constexpr double kThinMinMatrix = 1 << 20;
constexpr double kThinBigMatrix = 1 << 23;
// Within the vector kernel, the matrix along K: the dot tile (vectors staged in shared memory, several rows
// per lane group) for more than kThinTileMinRows vectors, or from 3 over a matrix of kThinTileMinMatrix
// elements; under that its staging and split reduction cost more than the dot kernel's L1 reads.
constexpr int kThinTileMinRows = 8;
constexpr double kThinTileMinMatrix = 3 << 20;
// Whether the vector kernel's matrix runs along K (its dot kernels) rather than along the outputs (the column
// kernel). The thinner side gives the vectors (N where M == N), the other operand the matrix.
bool gemv_matrix_along_k(const Problem& p);

// What dispatch needs to know about a device.
struct DeviceModel {
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  // cluster_slots[s]: how many blocks of `s`-block clusters are resident at once where each SM holds one
  // block (s = 1 .. kMaxClusterSplit; [0] unused). A cluster sits within one GPC, so sizes that do not divide
  // a GPC's SM count leave SMs out. The runtime's answer (cudaOccupancyMaxActiveClusters) for a probe kernel
  // held to one block per SM; see bench/gemm/DESIGN.md (cluster_slots).
  std::array<int, kMaxClusterSplit + 1> cluster_slots{};
  std::size_t smem_per_block = 0;  // opt-in maximum, bytes
  std::size_t smem_per_sm = 0;
  bool clusters = false;     // thread-block clusters (compute capability 9.0+): SplitReduce::Cluster
  bool tma_kernels = false;  // the Kernel::SimtTma* kernels can run: sm_90+, built for it, TMA encoder found
  bool wgmma_kernels = false;  // the sm_90a wgmma kernels can run: compute capability 9.0, image loadable

  // The current device, asked of the runtime once per device (cached); none() where there is no device.
  static DeviceModel current();
  // No device: the layout rules alone (clusters allowed, no TMA or wgmma kernels, no SMs to fill). Enough
  // for can_implement; choose and candidates need SMs.
  static DeviceModel none();
  // H100 SXM (132 SMs) and H200 (132 SMs, the same cluster slots), with every kernel built.
  static DeviceModel h100();
  static DeviceModel h200();
  // An A100-like device: 108 SMs, compute capability 8.0, no clusters, TMA or wgmma.
  static DeviceModel a100();

  bool has_clusters() const { return clusters; }
  // Blocks resident at once in clusters of `size` (every SM for size 1).
  int slots(int size) const {
    if (size <= 1 || !has_clusters()) return sm_count;
    if (size <= kMaxClusterSplit && cluster_slots[size] > 0) return cluster_slots[size];
    return sm_count / size * size;
  }
};

// The problems the TMA kernels take on `model` (tma_layout_ok, and the kernels there).
bool tma_ready(const Problem& p, const DeviceModel& model);
bool tma_ready(const Problem& p);  // on DeviceModel::current()

// Whether packing would copy an operand of `p` (Config::pack), and `p` as the kernel sees it after packing
// (the copied operands' pointers null): each copied operand keeps its contiguous dim (k for an operand
// strided both ways, n for B), in rows padded to a multiple of 4 floats. Pure (ops/gemm/pack.cu).
bool needs_pack(const Problem& p);
Problem pack_shape(const Problem& p);

// Whether `config` can run `p` on `model` (alignment it needs, math mode it supports, 32-bit tile offsets,
// grid limits, kernels the device has).
bool can_implement(const Problem& p, const Config& config, const DeviceModel& model);
bool can_implement(const Problem& p, const Config& config);  // on DeviceModel::current()

// The current device's model, for choose and candidates, which need its SMs: CudaError where there is none.
DeviceModel current_device_model();

// The dispatcher's choice for `p` in `math` mode on `model` (rules measured on H100/H200; see
// bench/gemm/DESIGN.md (dispatch)).
Config choose(const Problem& p, MathMode math, const DeviceModel& model);
Config choose(const Problem& p, MathMode math);  // on DeviceModel::current()

// Every configuration worth timing for `p` in `math` mode (the tuning sweep).
std::vector<Config> candidates(const Problem& p, MathMode math, const DeviceModel& model);
std::vector<Config> candidates(const Problem& p, MathMode math);  // on DeviceModel::current()

}  // namespace mt::detail::gemm
