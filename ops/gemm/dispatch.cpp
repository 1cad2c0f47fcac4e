// SGEMM dispatch, what to pick: choose, a pure function of the problem, the math mode and a DeviceModel (no
// CUDA runtime calls: tests/ops/gemm/test_dispatch.cpp runs it on the CPU), over what can_implement.cpp says
// can run. The rules come from bench_gemm --sweep-all on H100/H200; the measurements behind each are in
// bench/gemm/DESIGN.md, section 3a.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <optional>
#include <vector>

#include "minitensor/ops/gemm/detail/dispatch.h"
#include "minitensor/ops/gemm/detail/pack.h"
#include "minitensor/ops/gemm/tensorcore/wgmma.h"
#include "minitensor/runtime/error.h"

namespace mt::detail::gemm {

// ---------------------------------------------------------------- choose

bool gemv_matrix_along_k(const Problem& p) {
  return p.n <= p.m ? p.a_sk == 1 && p.a_sm != 1 : p.b_sk == 1 && p.b_sn != 1;
}

namespace {

// The M of 33-64 rule's threshold on N x K: below it the 32-row tiles with a shallow split are faster.
constexpr double kDeepSplitMinNK = 1 << 21;

// A thin product the vector kernel takes (dispatch.h, kThinMinK and the constants beside it).
bool thin_product(const Problem& p) {
  const bool n_thin = p.n <= p.m;
  const int thin = n_thin ? p.n : p.m, len = n_thin ? p.m : p.n;
  const double matrix = double(len) * p.k * p.batch;
  if (thin < 2 || thin > kGemvMaxRows || p.k < kThinMinK || matrix < kThinMinMatrix) return false;
  if (!gemv_matrix_along_k(p)) return thin <= kThinMaxRows;
  if (thin <= kThinMaxRows && (double(thin) * p.k <= kThinMaxVectorFloats || matrix >= kThinTileMinMatrix))
    return true;
  return matrix >= kThinBigMatrix;
}

// A single product with a short K (up to kShortTileMaxK) over at least a wave of 64x64 tiles, M past 64:
// its blocks' lives are short k-loops, so many small blocks (four per SM) beat the large tiles' reuse,
// and a pack costs about as much as the product. B in aligned 16-byte rows: 64x64 register-staged (the float4
// loads of B); where A runs so too, K is 32 or more and C has kShortTileBigC elements, 128x128 two per SM
// (more reuse once K amortises the fill). Else the 4-byte cp.async ring, which reads any alignment at its
// full rate: 32x128 under kShortTileRingMinM rows (half the edge waste of a 64-row tile there), else 64x64.
// Fitted to H200 sweeps of K 1-132 (bench/gemm/DESIGN.md, short K); nullopt where the rule does not apply.
std::optional<Config> short_k_tiles(const Problem& p, MathMode math, const DeviceModel& model) {
  if (math != MathMode::FP32 || p.batch != 1 || p.k > kShortTileMaxK || p.m <= 64) return {};
  if (std::ceil(p.m / 64.0) * std::ceil(p.n / 64.0) < model.sm_count) return {};
  const bool b16 = b_runs16(p) && b_reg_stageable(p) && a_reg_stageable(p);
  // N of 64 or less: the ring only, where B's rows would otherwise be packed for the skinny-N rules' TMA
  // tiles (the pack costs more than such a product).
  if (p.n <= 64 && b16) return {};
  Config c{Kernel::Simt64x64, 1, math};
  if (b16) {
    if (a_runs16(p) && p.k >= kShortTileBigMinK && double(p.m) * p.n >= kShortTileBigC)
      c.kernel = Kernel::Simt128x128x2;
  } else {
    c.kernel = p.m < kShortTileRingMinM ? Kernel::Simt32x128 : Kernel::Simt64x64;
    c.staging = Staging::CpAsync;
  }
  if (!can_implement(p, c, model)) return {};
  return c;
}

// The split of K, doubled from 1 up to `max_split`, that brings `nblocks` blocks to about `target` with at
// least `min_k` of K per split.
int split_doubling(const Problem& p, std::int64_t nblocks, std::int64_t target, int min_k,
                   int max_split = 32) {
  int split = 1;
  while (split < max_split && nblocks * split * 2 <= target && p.k / (split * 2) >= min_k) split *= 2;
  return split;
}

// The split of K for one row of `tiles` 32-row tiles: a power of two up to 32, keeping kNarrowMinSplitK of K
// a split, whose block count lies nearest kNarrowBlocksPerSm per SM on a log scale (a row of a few dozen
// tiles needs deep splits to fill the card; H200 sweeps, bench/gemm/DESIGN.md, section 3c).
int split_nearest(const Problem& p, std::int64_t tiles, const DeviceModel& model) {
  const double target = double(kNarrowBlocksPerSm) * model.sm_count;
  int split = 1;
  double best = std::abs(std::log(double(tiles) / target));
  for (int s = 2; s <= 32 && p.k / s >= kNarrowMinSplitK; s *= 2) {
    const double off = std::abs(std::log(double(tiles) * s / target));
    if (off < best) best = off, split = s;
  }
  return split;
}

// One row of 32x128 tiles over a single fp32 product of at most 32 rows: the 4-byte ring, which reads the
// operands' either orientation at its full rate, K split as split_nearest says, the splits added by the
// second kernel.
Config one_row(const Problem& p, const DeviceModel& model) {
  return Config{Kernel::Simt32x128, split_nearest(p, (p.n + 127) / 128, model), MathMode::FP32,
                SplitReduce::Kernel, Staging::CpAsync};
}

// A skinny N (at most kSwapMaxN) under a tall M: run C^T = B^T A^T (Config::swap) on one row of 32x128 tiles,
// where a 64- or 128-wide tile over N computes mostly outside C (N of 20: 31 % of a 64-wide tile's FMAs land
// in C, 63 % of a 32-row tile's). nullopt where the rule does not apply: a bias or a row softmax runs along
// C's rows, which the swap would turn into columns.
std::optional<Config> skinny_n_swap(const Problem& p, MathMode math, const DeviceModel& model) {
  if (math != MathMode::FP32 || p.batch != 1 || !swappable(p) || p.n > kSwapMaxN || p.m < kSwapMinM)
    return {};
  Config c = one_row(swapped(p), model);
  c.swap = true;
  if (!can_implement(p, c, model)) return {};
  return c;
}

// A C of a few 32x64 tiles (one side at most kTinyCMaxSide) over a long K: its blocks are K's splits, so K
// splits past the other rules' cap of 32, up to kTinyCMaxSplit, to about two blocks per SM with at least
// kNarrowMinSplitK of K each; on the 16-byte ring where A runs along k and B along n in aligned rows, else
// the 4-byte ring, the splits added by the second kernel (at split 32 such a C's blocks leave SMs idle;
// bench/gemm/DESIGN.md, section 3c). nullopt where the split would stay at 32 or less: the other rules' picks
// hold there.
std::optional<Config> tiny_c_long_k(const Problem& p, MathMode math, const DeviceModel& model) {
  if (math != MathMode::FP32 || p.batch != 1 || std::min(p.m, p.n) > kTinyCMaxSide) return {};
  const std::int64_t tiles = std::int64_t{(p.m + 31) / 32} * ((p.n + 63) / 64);
  const int split =
      split_doubling(p, tiles, 2 * std::int64_t{model.sm_count}, kNarrowMinSplitK, kTinyCMaxSplit);
  if (split <= 32) return {};
  const Config c{Kernel::Simt32x64, split, MathMode::FP32, SplitReduce::Kernel,
                 ring16_ready(p) ? Staging::CpAsync16 : Staging::CpAsync};
  if (!can_implement(p, c, model)) return {};
  return c;
}

// A tile in the wave models of choose(): its kernel, its rate relative to the best tile's, and the blocks an
// SM holds at once.
struct TileOption {
  Kernel kernel;
  double rate;
  int per_sm = 1;
};

// Pick the tile by the shape class, then split K while there are too few blocks to fill the machine.
// `packed`: p is pack_shape() of the caller's problem, whose operands the launch copies first.
Config choose_for(const Problem& p, MathMode math, const DeviceModel& model, bool packed) {
  // A vector operand (M == 1 or N == 1): nothing to reuse, so the product is a read of the matrix; the
  // streaming vector kernel does it at the copy rate in every math mode (fp32 is exact enough and no slower).
  if (p.m == 1 || p.n == 1) return Config{Kernel::Gemv, 1, math};
  // A thin product over a large matrix (thin_product): the same read of the matrix with an
  // accumulator per vector; the tiled picks below read such matrices at a third to a half of the copy rate.
  if (thin_product(p)) return Config{Kernel::Gemv, 1, math};
  // A short K over a large C in fp32 whose rows do not take float4 stores: the product is bound by writing
  // C, which the rows kernel does in one pass of coalesced scalar stores (the tiles' scalar stores reach a
  // quarter of each sector). Where C takes float4 stores the 64x64 tiles below are faster; below
  // kSmallKRowsMinC elements of C the tiles are faster too (about half the time at a few thousand elements),
  // and so they are from K = 17 on, where the short-K tiles lost to them as well: those stay tuner
  // candidates (bench/gemm/DESIGN.md, short K). The TF32 modes keep their kernels (wgmma takes a short K in
  // one k tile).
  if (math == MathMode::FP32 && p.k <= kSmallKRowsMax && !c_vectorisable(p) &&
      double(p.m) * p.n * p.batch >= kSmallKRowsMinC)
    return Config{Kernel::SmallKRows, 1, math};
  if (const std::optional<Config> c = short_k_tiles(p, math, model)) return *c;
  if (const std::optional<Config> c = skinny_n_swap(p, math, model)) return *c;
  if (const std::optional<Config> c = tiny_c_long_k(p, math, model)) return *c;
  if (math == MathMode::FP32 && needs_pack(p)) {
    // Operands without whole 16-byte runs are copied once into aligned scratch where each copied element
    // feeds enough FMAs for the copy to pay (the kernel then takes 16-byte loads instead of 4 scalar ones):
    // 512 FMAs per copied element, or 256 where the problem fills a wave of 64x64 tiles (the unpacked rules
    // would take scalar-run register-staged tiles there; fewer tiles take the 4-byte cp.async ring, which
    // reads unaligned operands at its full rate). See bench/gemm/DESIGN.md (packing).
    const Problem q = pack_shape(p);
    const double copied = (q.a ? 0.0 : double(a_layout(p).elements(batches_of(p.a_sb, p.batch)))) +
                          (q.b ? 0.0 : double(b_layout(p).elements(batches_of(p.b_sb, p.batch))));
    const double tiles64 = std::ceil(p.m / 64.0) * std::ceil(p.n / 64.0) * p.batch;
    const double per_copied = tiles64 >= model.sm_count ? 256.0 : 512.0;
    if (double(p.m) * p.n * p.k * p.batch >= per_copied * copied) {
      Config c = choose_for(q, math, model, true);
      c.b_along_n = false;  // B stays as it lies: the copies would share the one pack scratch
      // The unsplit 256x128 tile with A along k and B along n reads unaligned operands in place through the
      // lane loaders as fast as it reads packed ones: the copy is saved.
      const Config lanes{Kernel::Simt256x128, 1, math, SplitReduce::Kernel, Staging::CpAsync};
      if (c.kernel == lanes.kernel && c.split_k == 1 && lanes_ready(p) && can_implement(p, lanes, model))
        return lanes;
      // So does the 4-byte cp.async ring, at any alignment: where the packed problem's pick is on it, the
      // copy buys nothing.
      if (c.staging == Staging::CpAsync && can_implement(p, c, model)) return c;
      c.pack = true;
      if (can_implement(p, c, model)) return c;
    }
  }
  if (math == MathMode::FP32 && b_repackable(p) &&
      double(p.m) * p.batch >= kBAlongNMinRows * batches_of(p.b_sb, p.batch)) {
    // B along k (x W^T: every projection through a Linear's (out, in) weight) where each of its elements
    // feeds kBAlongNMinRows FMAs or more: copied along n first when the copied problem's pick is a
    // register-staged tile of 128x128 or over (the loop stores such a B to shared memory without a
    // transpose) or a TMA tile (which fetches B along n only); the copy then costs at most ~3 % of the
    // product.
    Config c = choose_for(b_along_n_shape(p), math, model, packed);
    const TileInfo t = is_simt(c.kernel) ? tile_of(c.kernel) : TileInfo{0, 0, 0};
    c.b_along_n = true;
    const bool copied_pays =
        (c.staging == Staging::Registers && t.bm * t.bn >= 128 * 128) || c.staging == Staging::Tma;
    if (copied_pays && !c.swap && can_implement(p, c, model)) return c;
  }
  const int sms = model.sm_count;
  const std::int64_t batch = p.batch;
  auto blocks = [&](int bm, int bn) {
    return static_cast<std::int64_t>((p.m + bm - 1) / bm) * ((p.n + bn - 1) / bn) * batch;
  };
  // Pick the split that brings the block count to about `target` with at least `min_k` of K per split.
  auto split_for = [&](std::int64_t nblocks, std::int64_t target, int min_k) {
    return split_doubling(p, nblocks, target, min_k);
  };
  // The largest split in {1, 2, 3, 4, 6, 8, 12, 16} up to `max_split` that keeps the block count within
  // `target` and at least `min_k` of K per split.
  auto split_to_fill = [&](std::int64_t nblocks, std::int64_t target, int min_k, int max_split = 8) {
    int split = 1;
    for (int s : {2, 3, 4, 6, 8, 12, 16, 24, 32})
      if (s <= max_split && nblocks * s <= target && p.k / s >= min_k) split = s;
    return split;
  };
  // The share of the area of bm x bn tiles covering C that lies inside C (the rest is edge waste).
  auto inside = [&](int bm, int bn) {
    return double(p.m) * p.n * batch / (double(blocks(bm, bn)) * bm * bn);
  };
  // The waves `b` blocks take where `slots` of them run at once.
  auto waves = [](std::int64_t b, std::int64_t slots) { return (b + slots - 1) / slots; };
  // The share of its waves' slots that `b` blocks fill, `per_sm` resident per SM.
  auto fill = [&](std::int64_t b, int per_sm) {
    const std::int64_t slots = static_cast<std::int64_t>(per_sm) * sms;
    return static_cast<double>(b) / static_cast<double>(waves(b, slots) * slots);
  };
  // The same for a tile two of whose blocks an SM holds, where an SM left with one block runs it at `lone` of
  // its two-block throughput: a last wave of at most one block per SM costs 1 / lone of a block's time,
  // not 2.
  auto paired = [&](std::int64_t b, double lone) {
    const std::int64_t slots = 2 * std::int64_t{sms}, rest = b % slots;
    const double time = 2.0 * double(b / slots) + (rest == 0 ? 0.0 : rest <= sms ? 1 / lone : 2.0);
    return double(b) / (double(sms) * time);
  };
  // The rate of K split `s` ways with the splits added by the second kernel, against the unsplit rate over
  // the same slots: a fit to H100 sweeps of the 256x128 tile (bench/gemm/DESIGN.md (dispatch)).
  auto kernel_split_rate = [&](int s) { return s == 1 ? 1.0 : kSplitRateBase - kSplitRateSlope * s / p.k; };
  // A split's cost where the second kernel adds it: kernel_split_rate, times ks / (ks + kBlockFixedK) for ks
  // of K a split (each block's fixed cost).
  auto split_cost = [&](int s) {
    const double ks = double(p.k) / s;
    return kernel_split_rate(s) * ks / (ks + kBlockFixedK);
  };
  // Register-staged with 16-byte loads for every operand run.
  const bool runs16 = a_reg_stageable(p) && b_reg_stageable(p) && a_runs16(p) && b_runs16(p);
  // Whether 256x128 tiles leave edge tiles (partly outside C).
  const bool edges256 = p.m % 256 != 0 || p.n % 128 != 0;
  // Both operands along k (x W^T under kBAlongNMinRows rows, B not copied along n): the register-staged
  // tiles store both to shared memory transposed.
  const bool both_along_k = p.a_sk == 1 && p.a_sm != 1 && p.b_sk == 1 && p.b_sn != 1;
  // The 256x128 tile for K split `s` ways. Split, with both operands along k, the 16-deep tile (where the
  // big rule would take it unsplit): the split kernels that transpose both operands turn to the next tile
  // late (the early turn would spill there), and the 16-deep tile turns half as often (bench/gemm/DESIGN.md,
  // section 3).
  auto big_tile_split = [&](int s) {
    return s > 1 && both_along_k && c_vectorisable(p) && !(edges256 && p.k <= 1024) && p.k >= 512
               ? Kernel::Simt256x128k16
               : Kernel::Simt256x128;
  };
  // A batch of small products (each at most 512 on every side) over at least a wave of 64x64 tiles, or
  // over half a wave with K under kSmallBatchShortK: the batched rule below, before the small-M rule (its
  // rows of 32x128 tiles serve one product against a big B), the few-tiles rule (whose split to four blocks
  // per SM leaves under 48 of K a block there) and the skinny-N rules (whose 128-row tiles lie largely
  // outside such products).
  const bool small_batch = p.batch > 1 && p.m <= 512 && p.n <= 512 && p.k <= 512 &&
                           (blocks(64, 64) >= sms || (2 * blocks(64, 64) >= sms && p.k < kSmallBatchShortK));
  Config c;
  c.math = math;
  // The reduction of split K where a rule names one; the others get the default rule at the end.
  std::optional<SplitReduce> reduce;
  // The wave model over the tiles for 16-byte runs at K of 512 or more: under 3/4 of a wave of 256x128 tiles,
  // and two waves at most that leave SMs idle (the big rule below). The 256x128 and 16-deep 128x128 tiles
  // hold one block per SM; the two-per-SM 128x128 tile (where B runs along n) and the TMA kernel's 128x64
  // tile (where TMA can fetch the operands) two. A configuration's rate is the product of
  // - its tile's own rate against the 256x128 tile's (kTile128Rate, kTile128x2Rate, kTmaTileRate and,
  //   unsplit, kTmaUnsplitRate of that);
  // - the share of its tiles' area inside C;
  // - the share of the SMs its blocks keep busy over their waves;
  // - what the split costs, by its reduction:
  //   - in a cluster: a wave is as many blocks as fit in whole clusters (DeviceModel::slots), and ks / (ks
  //     + kBlockFixedK) for ks of K per split: each block's fixed cost and its share of the reduction;
  //   - by the second kernel: a wave is a block per SM, and the split runs at kernel_split_rate. Where
  //     cluster sizes leave SMs out of every wave this fills them.
  //   - the two-per-SM tiles' splits, added by the second kernel: waves of two blocks an SM, an SM left with
  //     one running it at kTile128x2LoneRate or kTmaLoneBlockRate (paired); ks / (ks + kBlockFixedK), and
  //     kernel_split_rate for the 128x128 tile. Under 3/4 of a wave the TMA tile is not weighed on packed
  //     operands, where it runs well under the one-block tiles.
  // In two waves at most (two_waves) the 256x128 tile's splits are added by the second kernel only (the model
  // rates its cluster splits well above those, which ran level with them where both were measured), and the
  // TMA tile is weighed on packed operands too (it ran well ahead of the 256x128 splits there), its splits
  // reduced in a cluster.
  // The one-block tiles' constants are fitted to H100 sweeps, the two-per-SM tiles' to H200 sweeps of the
  // transformer block's products and of two-wave grids (bench/gemm/DESIGN.md, the wave model;
  // scripts/fit_dispatch.py).
  // The 16-deep 128x128 tile's rate in the wave models; with both operands along k and K of 2048 or more
  // (where the main loop outweighs the fixed costs), kBAlongKTile128Rate of that (at shorter K the 128x128
  // tile stays ahead of the 256x128 tile's splits; bench/gemm/DESIGN.md, section 3).
  const double tile128_rate = kTile128Rate * (both_along_k && p.k >= 2048 ? kBAlongKTile128Rate : 1.0);
  auto aligned_wave_model = [&](bool two_waves) {
    constexpr int kSplits[] = {1, 2, 3, 4, 6, 8};
    std::int64_t slots[std::size(kSplits)];
    for (std::size_t i = 0; i < std::size(kSplits); ++i) slots[i] = model.slots(kSplits[i]);
    double best = 0;
    for (const TileOption o :
         {TileOption{Kernel::Simt256x128, 1.0}, TileOption{Kernel::Simt128x128k16, tile128_rate}}) {
      const TileInfo t = tile_of(o.kernel);
      const std::int64_t b = blocks(t.bm, t.bn);
      const double in = inside(t.bm, t.bn);
      for (std::size_t i = 0; i < std::size(kSplits); ++i) {
        const int s = kSplits[i];
        const double ks = double(p.k) / s;
        if (ks < 128) break;
        const Kernel kernel = o.kernel == Kernel::Simt256x128 ? big_tile_split(s) : o.kernel;
        const double busy = double(b * s) / double(waves(b * s, slots[i]) * sms);
        const double rate = o.rate * in * busy * ks / (ks + kBlockFixedK);
        const bool clustered = s > 1 && o.kernel == Kernel::Simt256x128 && two_waves;
        if (rate > best && !clustered)
          best = rate, c.kernel = kernel, c.split_k = s, reduce = SplitReduce::Cluster;
        if (s == 1) continue;
        const double by_kernel =
            o.rate * in * fill(b * s, 1) * p.k / (p.k + kBlockFixedK) * kernel_split_rate(s);
        if (by_kernel > best)
          best = by_kernel, c.kernel = kernel, c.split_k = s, reduce = SplitReduce::Kernel;
      }
    }
    // Not on B along k: the tile's transposing stores were not measured in this model.
    const std::int64_t b2 = blocks(128, 128);
    for (const int s : kSplits) {
      if (p.b_sn != 1 || p.k / s < 128) break;
      const double rate =
          kTile128x2Rate * inside(128, 128) * paired(b2 * s, kTile128x2LoneRate) * split_cost(s);
      if (rate > best)
        best = rate, c.kernel = Kernel::Simt128x128x2, c.split_k = s, reduce = SplitReduce::Kernel;
    }
    if (tma_ready(p, model) && (!packed || two_waves)) {
      const std::int64_t b = blocks(128, 64);
      const double in = inside(128, 64);
      for (const int s : kSplits) {
        const double ks = double(p.k) / s;
        if (ks < 128) break;
        const double rate = kTmaTileRate * (s == 1 ? kTmaUnsplitRate : 1.0) * in *
                            paired(b * s, kTmaLoneBlockRate) * ks / (ks + kBlockFixedK);
        if (rate > best) {
          best = rate, c.kernel = Kernel::SimtTma128x64, c.staging = Staging::Tma, c.split_k = s;
          // Packed, its splits ran faster reduced in a cluster.
          reduce = packed && s <= kMaxClusterSplit ? SplitReduce::Cluster : SplitReduce::Kernel;
        }
      }
    }
  };
  if (math != MathMode::FP32 && p.m >= 128 && p.n >= 128 &&
      can_implement(p, Config{Kernel::Wgmma, 1, math}, model)) {
    // At least one whole 128x128 tile: the Hopper wgmma kernel, K split under a wave of tiles over a cluster
    // per tile, or past a cluster's 8 by the reduce kernel (wgmma_choose). Small and skinny shapes stay on
    // mma.sync with split K, which wins there.
    c.kernel = Kernel::Wgmma;
    const WgmmaConfig w = wgmma_choose(p, math, model);
    c.split_k = w.split;
    reduce = w.by_kernel ? SplitReduce::Kernel : SplitReduce::Cluster;
  } else if (math == MathMode::TF32x3) {
    // No whole 128x128 tile: the fp32 SIMT kernels beat 3xTF32 on mma.sync at every such shape measured and
    // are at least as accurate, so TF32x3 runs them there.
    return choose_for(p, MathMode::FP32, model, packed);
  } else if (math != MathMode::FP32) {
    // TF32 without a whole 128x128 tile: mma.sync, K split to about two blocks per SM, down to 32 of K per
    // split.
    c.kernel = blocks(128, 128) >= sms  ? Kernel::Tensor128x128
               : blocks(128, 64) >= sms ? Kernel::Tensor128x64
                                        : Kernel::Tensor64x64;
    const TileInfo t = tile_of(c.kernel);
    c.split_k = split_for(blocks(t.bm, t.bn), 2 * sms, 32);
  } else if (p.m > 32 && p.m <= 64 && p.batch == 1 && double(p.n) * p.k >= kDeepSplitMinNK &&
             !(p.k >= 2048 && tma_ready(p, model))) {
    // M of 33-64 against a big B (the projections of a few dozen tokens): one row of 64-row tiles, so each
    // operand is read once, and K split deep. Tile and split from the wave model: the tile's own rate, times
    // the share of its waves' slots the blocks fill (64x256 tiles two per SM, 64x128 three), times
    // ks / (ks + kBlockFixedK) for ks of K per split, at least 96. The splits reduce as the rule at the end
    // says. (The 32-row tiles below read B twice and filled a third of the card here; bench/gemm/DESIGN.md.)
    double best = 0;
    for (const TileOption o :
         {TileOption{Kernel::Simt64x256, 1.0, 2}, TileOption{Kernel::Simt64x128, kTile64x128Rate, 3}}) {
      if (o.kernel == Kernel::Simt64x256 && !vector_runs(p)) continue;
      const std::int64_t tiles = blocks(64, tile_of(o.kernel).bn);
      for (int s : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32}) {
        const double ks = double(p.k) / s;
        if (ks < 96) break;
        const double rate = o.rate * fill(tiles * s, o.per_sm) * ks / (ks + kBlockFixedK);
        if (rate > best) best = rate, c.kernel = o.kernel, c.split_k = s;
      }
    }
  } else if (p.m <= 64 && !small_batch) {
    // Small M: the cp.async ring (its deeper prefetch hides more of a short K range's latency than register
    // staging). Not a batch of small products (small_batch above): the batched rule's 64x64 tiles ran ahead
    // of these rows of 32x128 tiles there (bench/gemm/DESIGN.md, section 3c).
    c.staging = Staging::CpAsync;
    const std::int64_t row = blocks(32, 128);
    const int row_split = split_nearest(p, row, model);
    if (p.m <= 32 && p.batch == 1 && row >= kNarrowMinTiles &&
        (row >= 32 || row_split == 1 || row * row_split >= sms)) {
      // One row of 32x128 tiles (M of 32 or less; a skinny N runs so swapped): K split to the block count
      // nearest kNarrowBlocksPerSm per SM, the splits added by the second kernel (a row of tiles needs deep
      // splits to fill the card). A row of under 32 tiles that splits yet stays under a block per SM (a
      // short K caps the split) takes the few-tiles rule below: 32x64 tiles, twice the blocks, reduced in a
      // cluster. Unsplit rows keep these tiles: on the 32x64 tiles a K of a few elements gets packed
      // operands or the 16-byte ring, which lost there (bench/gemm/DESIGN.md, section 3c).
      c = one_row(p, model);
      reduce = c.reduce;
    } else if (blocks(32, 128) < 32 || (p.n <= 64 && p.batch > 1)) {
      // Few output tiles (MLP-sized problems), or a batch of products at most 64 wide (a 32x128 tile would
      // lie mostly outside C): the 64-thread 32x64 tile, K split to about two blocks per SM; the 16-byte
      // ring where A runs along k and B along n in aligned rows.
      c.kernel = Kernel::Simt32x64;
      c.split_k = split_for(blocks(32, 64), 2 * sms, 64);
      if (ring16_ready(p)) c.staging = Staging::CpAsync16;
    } else if (p.m > 32 && p.k >= 2048) {
      // M of 33-64 with a long K: one wave of 64-row tiles, K split to fill it, the splits added by a second
      // kernel over every SM (the in-launch fix-up leaves most SMs idle while the last block per tile adds).
      c.staging = Staging::Registers;
      reduce = SplitReduce::Kernel;
      if (tma_ready(p, model)) {
        // The TMA kernel's 64x128 tiles, two blocks per SM, where TMA can fetch the operands.
        c.kernel = Kernel::SimtTma64x128, c.staging = Staging::Tma;
        c.split_k = split_to_fill(blocks(64, 128), 2 * sms, 256, 16);
      } else if (vector_runs(p)) {
        c.kernel = Kernel::Simt64x256;
        c.split_k = split_to_fill(blocks(64, 256), 2 * sms, 256, 16);
      } else {
        c.kernel = Kernel::Simt64x128;
        c.split_k = split_to_fill(blocks(64, 128), 3 * sms, 256, 16);
      }
    } else {
      c.kernel = Kernel::Simt32x128;
      c.split_k = split_for(blocks(32, 128), 4 * sms, 256);
      // Still under one block per SM (the projections of a few dozen tokens at K of 256-1024): split down to
      // 128 of K per block, so the blocks fill the card.
      if (blocks(32, 128) * c.split_k < sms) c.split_k = split_for(blocks(32, 128), 4 * sms, 128);
    }
  } else if (blocks(64, 64) < sms && !small_batch) {
    if (runs16 && p.k >= 512 && p.m >= 128 && p.n >= 128) {
      // Few output tiles but K of 512 or more: the 16-deep register-staged tile, K split to one wave and
      // added by a second kernel.
      c.kernel = Kernel::Simt128x128k16;
      c.split_k = split_to_fill(blocks(128, 128), sms, 64);
      reduce = SplitReduce::Kernel;
      if (p.k >= 1024 && tma_ready(p, model)) {
        // With K of 1024 or more, where TMA can fetch the operands: the TMA kernel's 128x64 tiles, two
        // blocks per SM, K split to about two per SM.
        c.kernel = Kernel::SimtTma128x64, c.staging = Staging::Tma;
        c.split_k = split_to_fill(blocks(128, 64), 2 * sms, 64);
      }
    } else if (p.m >= 256 && p.n >= 256 && p.k >= 256 && ring16_ready(p)) {
      // Few output tiles of a mid-sized problem with a shorter K, A along k and B along n in aligned rows:
      // 32x64 tiles on the 16-byte ring, K split to about two blocks per SM, reduced in a cluster.
      c.kernel = Kernel::Simt32x64;
      c.split_k = split_for(blocks(32, 64), 2 * sms, 64);
      c.staging = Staging::CpAsync16;
      if (c.split_k <= kMaxClusterSplit) reduce = SplitReduce::Cluster;
    } else if (p.m >= 256 && p.n >= 256 && p.k >= 256) {
      // The same with other layouts: 32x128 tiles on the 4-byte ring, K split to about eight blocks per SM
      // down to 64 of K, added by the second kernel (unsplit, such grids leave SMs idle, and split 2 in a
      // cluster fills too few of them).
      c.kernel = Kernel::Simt32x128;
      c.split_k = split_for(blocks(32, 128), 8 * sms, 64);
      c.staging = Staging::CpAsync;
      reduce = SplitReduce::Kernel;
    } else {
      // Few output tiles of a small problem: latency bound; 64x64 tiles, K split to about four blocks per
      // SM, on the cp.async ring.
      c.kernel = Kernel::Simt64x64;
      c.split_k = split_for(blocks(64, 64), 4 * sms, 32);
      c.staging = Staging::CpAsync;
    }
  } else if (p.n <= 64 && !small_batch && runs16 && blocks(128, 64) >= 3 * sms / 4) {
    // Skinny N under a tall M (A streams from DRAM): 128x64 tiles, K split to about two blocks per SM. The
    // TMA kernel where TMA can fetch the operands (its turns between tiles are one mbarrier wait), the splits
    // added by the second kernel; else the 16-deep register-staged tile, reduced in a cluster.
    c.kernel = Kernel::Simt128x64k16;
    c.split_k = split_for(blocks(128, 64), 2 * sms, 256);
    if (c.split_k <= kMaxClusterSplit) reduce = SplitReduce::Cluster;
    if (tma_ready(p, model))
      c.kernel = Kernel::SimtTma128x64, c.staging = Staging::Tma, reduce = SplitReduce::Kernel;
  } else if (p.n <= 64 && !small_batch) {
    // Other skinny N: 128x64 split to about two blocks per SM, reduced in a cluster, on the cp.async ring.
    c.kernel = Kernel::Simt128x64;
    c.split_k = split_for(blocks(128, 64), 2 * sms, 256);
    c.staging = Staging::CpAsync;
    if (c.split_k <= kMaxClusterSplit) reduce = SplitReduce::Cluster;
  } else if (runs16 && blocks(256, 128) >= 3 * sms / 4 && inside(256, 128) >= 0.75 &&
             (p.k >= 512 || (p.k >= 256 && !edges256 && c_vectorisable(p)))) {
    // Big problems: 256x128 tiles of 16x8 threads (the fewest shared-memory reads per FMA), register-staged;
    // 16 deep, but 8 deep where C is not in float4 runs, where a K of at most 1024 leaves edge tiles, or
    // where K is under 512. Where a quarter of their area or more lies outside C (M of 128, say) the wave
    // model below weighs that waste. With both operands along k, unsplit, the 8-deep tile: its loop then
    // turns early as the 16-deep one's does, and ran faster at every shape measured (bench/gemm/DESIGN.md,
    // section 3).
    c.kernel = c_vectorisable(p) && !(edges256 && p.k <= 1024) && p.k >= 512 && !both_along_k
                   ? Kernel::Simt256x128k16
                   : Kernel::Simt256x128;
    const std::int64_t tiles = blocks(256, 128);
    auto filled = [&](int s) { return fill(tiles * s, 1); };
    if (p.k >= 512 && filled(1) < 0.9 && tiles <= 2 * sms && p.b_sn == 1) {
      // Two waves at most that leave SMs idle, B along n (as given, or copied so from 2048 rows): the wave
      // model above, whose two-per-SM tiles fill such waves better than 256x128 tiles split 2 or 3
      // (bench/gemm/DESIGN.md, the wave model). B along k keeps the split below, which its one-block picks
      // did not pass. The 256x128 tile unsplit keeps its depth from above.
      const Kernel unsplit = c.kernel;
      aligned_wave_model(true);
      if (c.kernel == Kernel::Simt256x128 && c.split_k == 1) c.kernel = unsplit;
    } else if (filled(1) < 0.9) {
      // A last wave that leaves SMs idle (under 90 % of the waves' slots filled): K split in 2 or 3 where
      // that fills enough more of them (big_tile_split's tile), reduced in a cluster or by the second kernel.
      // Either way a split runs at kernel_split_rate of the unsplit rate (the cluster's splits were measured
      // on the same curve; bench/gemm/DESIGN.md, section 7), against the slots it fills: one block per SM for
      // the second kernel, whole clusters for a cluster. A cluster is taken where it fills as many (it saves
      // the second kernel's pass over C), and the second kernel never where C does not take float4 runs
      // (its pass over C then runs on scalar stores). A split must promise kSplitMinGain to be taken.
      int best = 1;
      SplitReduce best_reduce = SplitReduce::Kernel;
      double best_rate = kSplitMinGain * filled(1);
      for (int s : {2, 3}) {
        if (p.k / s < 256 || tiles * s > 16 * sms) continue;
        const double by_kernel = filled(s) * kernel_split_rate(s);
        const double in_cluster =
            double(tiles * s) / double(waves(tiles * s, model.slots(s)) * sms) * kernel_split_rate(s);
        if (c_vectorisable(p) && by_kernel > best_rate)
          best = s, best_rate = by_kernel, best_reduce = SplitReduce::Kernel;
        if (model.has_clusters() && in_cluster >= best_rate)
          best = s, best_rate = in_cluster, best_reduce = SplitReduce::Cluster;
      }
      const Config split{big_tile_split(best), best, MathMode::FP32, best_reduce};
      if (best > 1 && can_implement(p, split, model)) {
        c.kernel = split.kernel, c.split_k = best;
        reduce = best_reduce;
      }
    }
  } else if (runs16 && p.k >= 512) {
    aligned_wave_model(false);  // under 3/4 of a wave of 256x128 tiles
  } else if (small_batch) {
    // A batch of small products (each at most 512 on every side): 64x64 tiles on the cp.async ring, four
    // blocks per SM, K split to about four blocks per SM down to kSmallBatchMinSplitK of K; the 64-thread
    // 32x64 tile under kSmallBatchMinM rows where 64-row tiles leave a tenth more of their rows outside C (M
    // of 65-96). The 128-wide tiles the rules below take lie largely outside such products, and their one or
    // two blocks per SM wait on a short k-loop.
    // The product runs swapped (Config::swap) where that puts kSmallBatchSwapGain more of the tiles' area
    // inside C: a narrow N under 64-wide tiles (edge tiles computing mostly outside C).
    auto rows_inside = [](int m, int bm) { return double(m) / (double((m + bm - 1) / bm) * bm); };
    auto tile_for = [&](int m) {
      return m < kSmallBatchMinM && rows_inside(m, 32) >= rows_inside(m, 64) + 0.1 ? Kernel::Simt32x64
                                                                                   : Kernel::Simt64x64;
    };
    c.kernel = tile_for(p.m);
    c.staging = Staging::CpAsync;
    const TileInfo t = tile_of(c.kernel);
    c.split_k = split_for(blocks(t.bm, t.bn), 4 * sms, kSmallBatchMinSplitK);
    // The swapped tile covers C^T: rows along N, columns along M (its splits reduce as the rule at the end
    // says).
    const TileInfo ts = tile_of(tile_for(p.n));
    const double in_p = rows_inside(p.m, t.bm) * rows_inside(p.n, t.bn);
    const double in_q = rows_inside(p.n, ts.bm) * rows_inside(p.m, ts.bn);
    if (math == MathMode::FP32 && swappable(p) && in_q >= in_p + kSmallBatchSwapGain) {
      Config sw = c;
      sw.kernel = tile_for(p.n), sw.swap = true;
      sw.split_k = split_for(blocks(ts.bn, ts.bm), 4 * sms, kSmallBatchMinSplitK);
      if (can_implement(p, sw, model)) c = sw;
    }
  } else if (p.k < 512 && p.n >= 256 && vector_runs(p) && blocks(64, 256) >= sms) {
    // Short K over many tiles with edge tiles or a K under 256: 64x256 tiles of 16x8 threads, two blocks per
    // SM, so each SM holds 8 warps of the fewest shared-memory reads per FMA.
    c.kernel = Kernel::Simt64x256;
  } else if (p.batch > 1 && inside(64, 64) >= inside(128, 128) + 0.15 && blocks(64, 64) >= sms) {
    // A batch of small products whose 128x128 tiles lie largely outside C (edge waste the 64x64 tile avoids):
    // 64x64 tiles, four blocks per SM, K split to about four blocks per SM down to 128 of K.
    c.kernel = Kernel::Simt64x64;
    c.split_k = split_for(blocks(64, 64), 4 * sms, 128);
  } else if (runs16 && blocks(128, 128) < sms) {
    // Under one wave of 128x128 tiles with K under 512: the 16-deep tile with K split in a cluster.
    c.kernel = Kernel::Simt128x128k16;
    c.split_k = split_for(blocks(128, 128), sms, 128);
  } else {
    // Everything else: 128x128 tiles, two blocks per SM, register-staged; unaligned operands of problems too
    // small to pay for packing take scalar runs. Operands contiguous in neither dim take the ring (below),
    // with BK=16 and one block per SM unless B takes float4 loads. Split K while fewer than two waves of
    // blocks.
    const bool stageable = a_reg_stageable(p) && b_reg_stageable(p);
    c.kernel = stageable || b_vectorisable(p) ? Kernel::Simt128x128x2 : Kernel::Simt128x128k16;
    if (c.kernel != Kernel::Simt128x128x2 || p.k < 512) {
      c.split_k = split_for(blocks(128, 128), 2 * sms, 64);
    } else {
      // K of 512 or more: a wave model over the two 128x128 tiles and the splits added by the second
      // kernel, as in the rules above (kernel_split_rate, times ks / (ks + kBlockFixedK) for each block's
      // fixed cost at ks of K a split). The two-per-SM tile's waves hold two blocks an SM, and an SM left
      // with one block runs it at kLoneBlockRate of its two-block throughput, so a last wave under one block
      // per SM costs 1 / kLoneBlockRate of a block's time, not 2; the 16-deep tile holds one block an SM at
      // kDeepTileRate of the two-per-SM tile's rate (odd extents over few tiles need the deep splits this
      // weighs; bench/gemm/DESIGN.md, section 3a).
      const std::int64_t tiles = blocks(128, 128);
      double best = 0;
      for (int s : {1, 2, 3, 4, 6, 8, 12, 16}) {
        if (s > 1 && p.k / s < 256) break;
        const double cost = split_cost(s);
        const double two = paired(tiles * s, kLoneBlockRate) * cost;
        const double deep = kDeepTileRate * fill(tiles * s, 1) * cost;
        if (two > best) best = two, c.kernel = Kernel::Simt128x128x2, c.split_k = s;
        if (deep > best) best = deep, c.kernel = Kernel::Simt128x128k16, c.split_k = s;
      }
      if (c.split_k > 1) reduce = SplitReduce::Kernel;
    }
  }
  // Where no rule named the reduction: short K ranges per block (and the 16-deep register-staged tile at any
  // K) reduce the splits of a tile in one cluster; other long ranges leave them to a second kernel over every
  // SM, where a cluster's co-scheduling and final barrier cost more. The mma.sync kernels always take the
  // second kernel.
  const bool deep_regs = c.kernel == Kernel::Simt128x128k16 && c.staging == Staging::Registers;
  if (!reduce)
    reduce = is_simt(c.kernel) && c.split_k <= kMaxClusterSplit && (p.k / c.split_k <= 128 || deep_regs)
                 ? SplitReduce::Cluster
                 : SplitReduce::Kernel;
  c.reduce = *reduce;
  // A device without clusters adds every split with the second kernel.
  if (c.reduce == SplitReduce::Cluster && !model.has_clusters()) c.reduce = SplitReduce::Kernel;
  if (math == MathMode::FP32 && !(a_reg_stageable(p) && b_reg_stageable(p))) c.staging = Staging::CpAsync;
  if (!can_implement(p, c, model))
    c = Config{Kernel::Simt128x128, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync};
  if (!can_implement(p, c, model)) c = Config{Kernel::Naive, 1, MathMode::FP32};
  return c;
}

}  // namespace

Config choose(const Problem& p, MathMode math, const DeviceModel& model) {
  return choose_for(p, math, model, false);
}

Config choose(const Problem& p, MathMode math) {
  return choose(p, math, current_device_model());
}

}  // namespace mt::detail::gemm
