// SGEMM dispatch on the CPU: choose, candidates and can_implement are pure functions of the problem, the math
// mode and a DeviceModel, so the picks for an H100, an H200 (the same picks: same SMs and cluster slots) and
// an A100-like device (no clusters, TMA or wgmma) are checked here without a GPU. The problems carry no data
// (null operands count as 16-byte aligned). One GPU test ties the H100 model to a 132-SM compute capability
// 9.0 device the runtime describes.
#include <gtest/gtest.h>

#include <algorithm>

#include <array>
#include <cstdint>
#include <string>

#include "minitensor/ops/gemm/detail/dispatch.h"
#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/ops/gemm/detail/pack.h"
#include "minitensor/ops/gemm/tensorcore/wgmma.h"
#include "tests/common/gpu.h"
#include "tests/ops/gemm/problems.h"

namespace mt::detail::gemm {
namespace {

using test::dense;
using test::dense_rows;
using test::rows;
using test::shape_name;

// ---------------------------------------------------------------- device models

TEST(GemmDeviceModel, HopperModels) {
  for (const DeviceModel& m : {DeviceModel::h100(), DeviceModel::h200()}) {
    EXPECT_EQ(m.sm_count, 132);
    EXPECT_EQ(m.cc_major, 9);
    EXPECT_TRUE(m.has_clusters() && m.tma_kernels && m.wgmma_kernels);
    // bench/gemm/DESIGN.md: 132 at sizes 1-2, 117 at 3, 120 at 4 and 8, 102 at 6.
    const int expected[][2] = {{1, 132}, {2, 132}, {3, 117}, {4, 120}, {6, 102}, {8, 120}};
    for (const auto& [size, slots] : expected) EXPECT_EQ(m.slots(size), slots) << "size " << size;
  }
  const DeviceModel a = DeviceModel::a100();
  EXPECT_EQ(a.sm_count, 108);
  EXPECT_EQ(a.cc_major, 8);
  EXPECT_FALSE(a.has_clusters() || a.tma_kernels || a.wgmma_kernels);
  EXPECT_EQ(a.slots(4), 108);  // no clusters: every SM is a slot
}

// On a 132-SM compute capability 9.0 GPU the runtime's answers are the H100 model's, so the goldens below
// are that device's picks.
TEST(GemmDeviceModel, CurrentHopperMatchesTheModel) {
  MT_REQUIRE_SM90();
  const DeviceModel cur = DeviceModel::current();
  if (cur.sm_count != 132) GTEST_SKIP() << "the model is of a 132-SM device; this one has " << cur.sm_count;
  const DeviceModel h = DeviceModel::h100();
  for (int size : {1, 2, 3, 4, 6, 8}) EXPECT_EQ(cur.slots(size), h.slots(size)) << "size " << size;
  EXPECT_EQ(cur.has_clusters(), h.has_clusters());
  EXPECT_EQ(cur.tma_kernels, h.tma_kernels);
  EXPECT_EQ(cur.wgmma_kernels, h.wgmma_kernels);
}

// ---------------------------------------------------------------- Hopper picks (H100 and H200)

class GemmDispatchHopper : public ::testing::TestWithParam<std::string> {
 protected:
  DeviceModel model() const { return GetParam() == "H100" ? DeviceModel::h100() : DeviceModel::h200(); }
  Config pick(const Problem& p, MathMode math = MathMode::FP32) const { return choose(p, math, model()); }
};

// Expects `got` to be `kernel` split `split` ways, reduced by `reduce`.
void expect_config(const Config& got, Kernel kernel, int split, SplitReduce reduce) {
  EXPECT_EQ(got.kernel, kernel) << config_name(got);
  EXPECT_EQ(got.split_k, split) << config_name(got);
  EXPECT_EQ(got.reduce, reduce) << config_name(got);
}

// Unaligned operands of a problem where each copied element would feed enough FMAs (4095x4097x1023):
// row-major ones are read in place by the 256x128 tile's lane-loader ring; other layouts are packed; below
// that size neither. With C in odd rows the 256x128 tile runs 8 deep (its ROWS_C kernels: store_rows).
TEST_P(GemmDispatchHopper, F32_UnalignedBigProblems) {
  const Config odd = pick(rows(4095, 4097, 1023, 1023, 4097));
  EXPECT_FALSE(odd.pack) << config_name(odd);
  EXPECT_EQ(odd.staging, Staging::CpAsync);
  EXPECT_EQ(odd.kernel, Kernel::Simt256x128);  // C in odd rows: the 8-deep 16x8 tile
  EXPECT_EQ(odd.split_k, 1);
  Problem odd_t = rows(4095, 4097, 1023, 1023, 4097);  // A transposed: stored k x m in rows of 4095
  odd_t.a_sm = 1, odd_t.a_sk = 4095;
  const Config packed = pick(odd_t);
  EXPECT_TRUE(packed.pack) << config_name(packed);
  EXPECT_EQ(packed.staging, Staging::Registers);
  const Config aligned = pick(rows(4096, 4096, 4096, 4096, 4096));
  EXPECT_FALSE(aligned.pack);
  EXPECT_EQ(aligned.kernel, Kernel::Simt256x128k16);
  // Where a wave of 64x64 tiles is filled, 256 FMAs per copied element pay for the copy: 1023^3 (511.5 per
  // element, 256 tiles) packs, 255x2113x1023 (227.5, 136 tiles) does not. Fewer tiles need 512:
  // 511x513x511 (256.0, 72 tiles) does not pack.
  EXPECT_TRUE(pick(rows(1023, 1023, 1023, 1023, 1023)).pack);
  EXPECT_FALSE(pick(rows(255, 2113, 1023, 1023, 2113)).pack);
  EXPECT_FALSE(pick(rows(511, 513, 511, 511, 513)).pack);
  EXPECT_FALSE(pick(rows(4095, 4097, 1023, 1023, 4097), MathMode::TF32x3).pack);
  // 136 tiles of 256x128 fill 52 % of two waves; 528 tiles of 128x64, two per SM, fill two: the wave model's
  // TMA kernel on the packed operands, K split 2 in a cluster (packed, its splits ran faster so).
  const Config mid = pick(rows(2047, 2049, 2047, 2047, 2049));
  EXPECT_TRUE(mid.pack) << config_name(mid);
  EXPECT_EQ(mid.kernel, Kernel::SimtTma128x64) << config_name(mid);
  EXPECT_EQ(mid.split_k, 2) << config_name(mid);
  EXPECT_EQ(mid.reduce, SplitReduce::Cluster) << config_name(mid);
}

// Big problems take the 256x128 tile 16 deep, and 8 deep where a K of at most 1024 leaves edge tiles or K is
// under 512.
TEST_P(GemmDispatchHopper, F32_EdgeTilesOfShortKTakeThe8DeepTile) {
  EXPECT_EQ(pick(dense_rows(4096, 4096, 1024)).kernel, Kernel::Simt256x128k16);
  EXPECT_EQ(pick(dense_rows(4096, 4100, 1024)).kernel, Kernel::Simt256x128);
  EXPECT_EQ(pick(dense_rows(4092, 4096, 1024)).kernel, Kernel::Simt256x128);
  EXPECT_EQ(pick(dense_rows(4096, 4100, 2048)).kernel, Kernel::Simt256x128k16);  // K > 1024
  // A K of 256-511 without edge tiles: the 8-deep tile too (a batch of 64 x 256^3); with edges, 64x256.
  Problem batch = dense_rows(256, 256, 256);
  batch.batch = 64, batch.a_sb = 256 * 256, batch.b_sb = 256 * 256, batch.c_sb = 256 * 256;
  EXPECT_EQ(pick(batch).kernel, Kernel::Simt256x128);
  EXPECT_EQ(pick(batch).split_k, 1);
  EXPECT_EQ(pick(dense_rows(4096, 4100, 256)).kernel, Kernel::Simt64x256);
}

// A last wave that leaves most SMs idle splits K (3000^3: 288 tiles of 256x128 on 132 SMs); full waves do
// not.
TEST_P(GemmDispatchHopper, F32_SplitsKToFillTheLastWave) {
  expect_config(pick(dense_rows(3000, 3000, 3000)), Kernel::Simt256x128, 3, SplitReduce::Kernel);
  const Config wide = pick(dense_rows(4100, 4100, 4096));  // 561 tiles, 85 % filled
  EXPECT_EQ(wide.split_k, 3) << config_name(wide);
  EXPECT_EQ(pick(dense_rows(4096, 4096, 4096)).split_k, 1);  // 97 % filled
  // 800 tiles of 256x128 (87 % filled, over two waves): that tile, unsplit (split 2 promises under 2 %).
  const Config big = pick(dense_rows(5000, 5000, 5000));
  EXPECT_EQ(big.kernel, Kernel::Simt256x128k16) << config_name(big);
  EXPECT_EQ(big.split_k, 1) << config_name(big);
  // 136 tiles of 256x128 (52 % of two waves), 528 of 128x64 (two whole waves of two per SM): the wave
  // model's TMA kernel, K split 2 by the second kernel (F32_TwoWaveGridsTakeTheWaveModel).
  expect_config(pick(dense_rows(2048, 2056, 2048)), Kernel::SimtTma128x64, 2, SplitReduce::Kernel);
}

// 256x128 tiles half outside C (M of 128) leave the big-problem rule for the wave model, which takes a
// 128-row tile: the TMA kernel's 128x64 where TMA can fetch the operands, else the 16-deep 128x128 tile.
TEST_P(GemmDispatchHopper, F32_EdgeWasteLeavesThe256x128Tile) {
  const Problem p = dense_rows(128, 15056, 13680);
  const Config m128 = pick(p);
  EXPECT_EQ(m128.kernel, Kernel::SimtTma128x64) << config_name(m128);
  DeviceModel no_tma = model();
  no_tma.tma_kernels = false;
  const Config m128r = choose(p, MathMode::FP32, no_tma);
  EXPECT_EQ(m128r.kernel, Kernel::Simt128x128k16) << config_name(m128r);
  EXPECT_NE(pick(dense_rows(560, 13632, 9328)).kernel, Kernel::Simt256x128);  // 73 % of the tiles' area in C
}

// A single product m x n x k in rows and the tile and split the rule under test picks.
struct Pick {
  int m, n, k;
  Kernel kernel;
  int split;
};

// Under 3/4 of a wave of 256x128 tiles with K of 512 or more, the wave model: the tile and split that keep
// the most SMs busy over their waves (as many blocks per wave as fit in whole clusters), less each block's
// fixed cost; the 128x128 tile counts at 0.95 of the 256x128 tile's rate. K split in a cluster. (On a device
// without the TMA kernels: F32_MidGridsWeighTheTmaTile below has them.)
TEST_P(GemmDispatchHopper, F32_MidGridsTakeTheWaveModel) {
  DeviceModel no_tma = model();
  no_tma.tma_kernels = false;
  for (const Pick& c : {
           // Rows of odd length: packed first. 36 tiles of 256x128, split 3: 108 blocks, one wave of 117 in
           // clusters of 3 (82 % of the SMs; split 2 55 %, split 4 two waves of 120, 55 %).
           Pick{1023, 1025, 1023, Kernel::Simt256x128, 3},
           Pick{1279, 1281, 1279, Kernel::Simt256x128, 2},  // 55 tiles, split 2: 83 %
           // 78 tiles, split 3: two waves of 117, 89 % (156 of 128x128 split 3 as much, at 0.95 the rate).
           Pick{1535, 1537, 1535, Kernel::Simt256x128, 3},
           Pick{1536, 1536, 1536, Kernel::Simt256x128, 3},
           // 64 tiles of 128x128, split 2: 97 % of a wave with 512 of K each (32 of 256x128, split 3: 73 %).
           Pick{1024, 1024, 1024, Kernel::Simt128x128k16, 2},
           Pick{1280, 1280, 1280, Kernel::Simt256x128, 2},  // 50 tiles, split 2: 76 %, 640 of K each
           // 98 tiles of 256x128: split 4 takes four waves of 120 blocks in clusters of 4 (74 %); 196 of
           // 128x128, split 2, three waves of 132 (99 %).
           Pick{1792, 1792, 1792, Kernel::Simt128x128k16, 2},
       }) {
    const Problem p = dense_rows(c.m, c.n, c.k);
    const Config got = choose(p, MathMode::FP32, no_tma);
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k));
    EXPECT_EQ(got.kernel, c.kernel) << config_name(got);
    EXPECT_EQ(got.split_k, c.split) << config_name(got);
    EXPECT_EQ(got.pack, needs_pack(p)) << config_name(got);
    EXPECT_EQ(got.reduce, SplitReduce::Cluster) << config_name(got);
    EXPECT_EQ(got.staging, Staging::Registers) << config_name(got);
  }
}

// Where TMA can fetch the operands the wave model also weighs the TMA kernel's 128x64 tile, two blocks an
// SM (an SM left with one runs it at kTmaLoneBlockRate), its splits added by the second kernel, unsplit at
// kTmaUnsplitRate: the transformer block's products (x W, W stored in x out; H200 sweeps, bench/gemm/fit).
TEST_P(GemmDispatchHopper, F32_MidGridsWeighTheTmaTile) {
  for (const Pick& c : {
           // 384 tiles of 128x64, split 2: 768 blocks, 97 % of three waves of 264 (the 16-deep 128x128
           // tile split 2 in a cluster fills as many, at a lower rate).
           Pick{1024, 3072, 768, Kernel::SimtTma128x64, 2},
           Pick{1024, 1024, 1024, Kernel::SimtTma128x64, 2},  // 256 blocks: one wave of two an SM
           Pick{1024, 768, 3072, Kernel::SimtTma128x64, 8},   // 96 tiles, split 8: 768 blocks
           Pick{2048, 768, 3072, Kernel::SimtTma128x64, 4},   // 192 tiles, split 4: 768 blocks
           // 72 tiles of 256x128 split 3 in clusters fill 92 % of two waves of 117 at the higher rate.
           Pick{1024, 2304, 768, Kernel::Simt256x128, 3},
       }) {
    const Config got = pick(dense_rows(c.m, c.n, c.k));
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k));
    EXPECT_EQ(got.kernel, c.kernel) << config_name(got);
    EXPECT_EQ(got.split_k, c.split) << config_name(got);
    if (c.kernel == Kernel::SimtTma128x64) {
      EXPECT_EQ(got.staging, Staging::Tma) << config_name(got);
      EXPECT_EQ(got.reduce, SplitReduce::Kernel) << config_name(got);
    }
  }
  // Packed operands keep the one-block tiles (55 tiles of 256x128, split 2 in a cluster), where the same
  // product at whole runs takes the TMA tile.
  const Config packed = pick(dense_rows(1279, 1281, 1279));
  EXPECT_TRUE(packed.pack) << config_name(packed);
  EXPECT_EQ(packed.kernel, Kernel::Simt256x128) << config_name(packed);
  EXPECT_EQ(pick(dense_rows(1280, 1280, 1280)).kernel, Kernel::SimtTma128x64);
}

// Grids of at most two waves of 256x128 tiles that leave SMs idle take the wave model too, with the
// two-per-SM 128x128 tile (an SM left with one block at kTile128x2LoneRate) and the 256x128 tile's splits
// added by the second kernel only (H200 sweeps, bench/gemm/fit). Over two waves the big rule still splits.
TEST_P(GemmDispatchHopper, F32_TwoWaveGridsTakeTheWaveModel) {
  for (const Pick& c : {
           // 384 tiles of 128x128: one wave of two an SM and one of one (120 blocks).
           Pick{2048, 3072, 768, Kernel::Simt128x128x2, 1}, Pick{1792, 3584, 1536, Kernel::Simt128x128x2, 1},
           // 160-162 tiles of 256x128 (61 % of two waves); the TMA tile split 2: 97-98 % of five waves.
           Pick{2560, 2048, 512, Kernel::SimtTma128x64, 2}, Pick{2048, 2560, 2048, Kernel::SimtTma128x64, 2},
           Pick{2304, 2304, 2304, Kernel::SimtTma128x64, 2},
           Pick{3328, 1664, 1280, Kernel::SimtTma128x64, 3},  // 169 tiles; 2028 blocks, 96 %
       }) {
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k));
    expect_config(pick(dense_rows(c.m, c.n, c.k)), c.kernel, c.split, SplitReduce::Kernel);
  }
  // Without the TMA kernels the 256x128 tile splits by the second kernel, never in a cluster.
  DeviceModel no_tma = model();
  no_tma.tma_kernels = false;
  const Config split = choose(dense_rows(2560, 2048, 2048), MathMode::FP32, no_tma);
  EXPECT_FALSE(split.kernel == Kernel::Simt256x128 && split.reduce == SplitReduce::Cluster)
      << config_name(split);
  // B along k under 2048 rows (not copied): the big rule's split, which the wave model's one-block picks did
  // not pass there; with both operands along k the 16-deep tile, in a cluster (as full as one block per SM).
  Problem nt = dense_rows(512, 12288, 4096);
  nt.b_sk = 1, nt.b_sn = 4096;
  const Config along_k = pick(nt);
  EXPECT_FALSE(along_k.b_along_n) << config_name(along_k);
  expect_config(along_k, Kernel::Simt256x128k16, 2, SplitReduce::Cluster);
  // 288 tiles of 256x128 (73 % of three waves): the big rule, 256x128 split by the second kernel.
  const Config over = pick(dense_rows(3072, 3072, 1024));
  EXPECT_EQ(over.kernel, Kernel::Simt256x128) << config_name(over);
  EXPECT_GT(over.split_k, 1) << config_name(over);
  EXPECT_EQ(over.reduce, SplitReduce::Kernel) << config_name(over);
}

// Both operands along k (x W^T under 2048 rows, B not copied along n): the register-staged tiles store both
// transposed. Unsplit the 256x128 tile runs 8 deep; split, 16 deep; at K of 2048 or more the 256x128 tile
// split by the second kernel passes the 128x128 tile; at K of 768-1024 the 128x128 tile keeps its split
// (H200 sweeps, bench/gemm/DESIGN.md section 3).
TEST_P(GemmDispatchHopper, F32_BothOperandsAlongK) {
  auto nt = [](int m, int n, int k) {
    Problem p = dense_rows(m, n, k);
    p.b_sk = 1, p.b_sn = k;
    return p;
  };
  expect_config(pick(nt(1024, 4096, 4096)), Kernel::Simt256x128, 1, SplitReduce::Kernel);
  expect_config(pick(nt(896, 12032, 3296)), Kernel::Simt256x128, 1, SplitReduce::Kernel);
  expect_config(pick(nt(512, 2048, 8192)), Kernel::Simt256x128k16, 4, SplitReduce::Kernel);
  expect_config(pick(nt(512, 4096, 4096)), Kernel::Simt256x128k16, 2, SplitReduce::Cluster);
  expect_config(pick(nt(512, 3072, 1024)), Kernel::Simt128x128k16, 4, SplitReduce::Kernel);
  // The shapes of Gemm.F32_Dispatch_BothOperandsAlongK (GPU): the 8-deep tile unsplit, and split in a
  // cluster where C's rows (6145 floats) take no float4 stores.
  expect_config(pick(nt(1024, 4096, 1024)), Kernel::Simt256x128, 1, SplitReduce::Kernel);
  expect_config(pick(nt(512, 2048, 2048)), Kernel::Simt256x128k16, 4, SplitReduce::Kernel);
  expect_config(pick(nt(512, 4096, 1024)), Kernel::Simt256x128k16, 2, SplitReduce::Cluster);
  expect_config(pick(nt(767, 6145, 1024)), Kernel::Simt256x128, 3, SplitReduce::Cluster);
  // B along n (NN): the unsplit tile stays 16 deep.
  expect_config(pick(dense_rows(1024, 8192, 4096)), Kernel::Simt256x128k16, 1, SplitReduce::Kernel);
  // From 2048 rows B is copied along n, and the copied problem keeps the NN rules: 8192x2304x768 unsplit
  // (split 2 in a cluster measured 0.955x cuBLAS against 1.002x).
  const Config copied = pick(nt(8192, 2304, 768));
  EXPECT_TRUE(copied.b_along_n) << config_name(copied);
  expect_config(copied, Kernel::Simt256x128k16, 1, SplitReduce::Kernel);
}

// The big rule's last-wave split: in a cluster where clusters fill as many slots as one block per SM (split
// 2), never by the second kernel where C does not take float4 runs (3071x3073x1023, packed: 0.89x cuBLAS
// split 2 in a cluster, 0.77x by the second kernel); 3000^3 keeps split 3 by the second kernel (clusters of
// 3 leave 15 SMs idle).
TEST_P(GemmDispatchHopper, F32_LastWaveSplitReduction) {
  const Config odd = pick(rows(3071, 3073, 1023, 1023, 3073));
  EXPECT_TRUE(odd.pack) << config_name(odd);
  expect_config(odd, Kernel::Simt256x128, 2, SplitReduce::Cluster);
  expect_config(pick(dense_rows(3000, 3000, 3000)), Kernel::Simt256x128, 3, SplitReduce::Kernel);
}

// The wave model adds the splits with the second kernel where cluster sizes leave SMs out of every wave and
// one block per SM fills them: the transformer products below a wave of 256x128 tiles (x W^T, B stored n x
// k).
TEST_P(GemmDispatchHopper, F32_WaveModelFillsClusterGapsWithTheReduceKernel) {
  DeviceModel no_tma = model();  // the one-block tiles (with TMA, B copied along n takes the TMA tile)
  no_tma.tma_kernels = false;
  struct Case {
    int m, n, k;
    bool ta, tb;
    Kernel kernel;
    int split;
  };
  for (const Case& c : {
           // 48 tiles of 256x128, split 8: 384 blocks, three waves of 132 (97 %); in clusters of 8, four
           // waves of 120 (73 %).
           Case{2048, 768, 3072, false, true, Kernel::Simt256x128, 8},
           // Both operands along k: the split 256x128 tile 16 deep.
           Case{512, 5120, 20480, false, true, Kernel::Simt256x128k16, 8},
           // 96 tiles of 128x128, split 4: 384 blocks, 97 % of three waves against 73 % of four in clusters.
           Case{512, 3072, 1024, false, true, Kernel::Simt128x128k16, 4},
           Case{2048, 768, 768, false, true, Kernel::Simt128x128k16, 4},
           Case{112, 5296, 1712, true, false, Kernel::Simt128x128k16, 3},
       }) {
    Problem p = dense_rows(c.m, c.n, c.k);
    if (c.ta) p.a_sm = 1, p.a_sk = c.m;
    if (c.tb) p.b_sk = 1, p.b_sn = c.k;
    const Config got = choose(p, MathMode::FP32, no_tma);
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k));
    EXPECT_EQ(got.kernel, c.kernel) << config_name(got);
    EXPECT_EQ(got.split_k, c.split) << config_name(got);
    EXPECT_EQ(got.reduce, SplitReduce::Kernel) << config_name(got);
  }
}

// Operands not in whole 16-byte runs (odd extents) at K of 512 or more: the last rule's wave model over the
// two-per-SM and the 16-deep 128x128 tiles, the splits added by the second kernel (H200 sweeps: the picks
// below were the fastest 128x128 configurations of their shapes).
TEST_P(GemmDispatchHopper, F32_OddExtentsTakeTheTwoTileWaveModel) {
  struct Case {
    int m, n, k;
    bool tb;
    Kernel kernel;
    int split;
  };
  for (const Case& c : {
           // 93 tiles, one row: split 4 fills 94 % of three waves of one block an SM; split 2 of the
           // two-per-SM tile leaves 78 SMs with one block.
           Case{99, 11863, 5754, false, Kernel::Simt128x128k16, 4},
           Case{109, 5875, 13191, true, Kernel::Simt128x128k16, 8},
           // 118 tiles: one block on 118 of 132 SMs, unsplit.
           Case{7511, 187, 4117, false, Kernel::Simt128x128k16, 1},
           // 228 tiles fill 86 % of a wave of two blocks an SM: the two-per-SM tile, unsplit.
           Case{176, 14486, 2656, false, Kernel::Simt128x128x2, 1},
       }) {
    Problem p = dense_rows(c.m, c.n, c.k);
    if (c.tb) p.b_sk = 1, p.b_sn = c.k;
    const Config got = pick(p);
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k));
    EXPECT_EQ(got.kernel, c.kernel) << config_name(got);
    EXPECT_EQ(got.split_k, c.split) << config_name(got);
    if (c.split > 1) EXPECT_EQ(got.reduce, SplitReduce::Kernel) << config_name(got);
  }
}

// A batch of small products over half a wave of 64x64 tiles with K under kSmallBatchShortK takes the batched
// rule, whose split keeps kSmallBatchMinSplitK of K a block (8x(245x225x134): 128 tiles, unsplit; the
// few-tiles rule split it 4 ways in a cluster). From kSmallBatchShortK of K the few-tiles rule splits K.
TEST_P(GemmDispatchHopper, F32_SmallBatchOverHalfAWaveTakesTheBatchedRule) {
  for (const Problem& p : {dense(245, 225, 134, 8), dense(480, 138, 157, 5), dense(176, 74, 168, 17)}) {
    const Config c = pick(p);
    EXPECT_EQ(c.kernel, Kernel::Simt64x64) << config_name(c);
    EXPECT_EQ(c.staging, Staging::CpAsync) << config_name(c);
    EXPECT_EQ(c.split_k, 1) << config_name(c);
  }
  // Under half a wave of 64x64 tiles, or with K of kSmallBatchShortK, the few-tiles rule still splits K.
  EXPECT_GT(pick(dense(245, 225, 134, 4)).split_k, 1);
  EXPECT_GT(pick(dense(336, 129, kSmallBatchShortK, 5)).split_k, 1);
  EXPECT_EQ(pick(dense(336, 129, kSmallBatchShortK - 1, 5)).split_k, 1);
}

// A batch of small products with M of 64 or less takes the batched rule too, not the small-M rule's one row
// of 32x128 tiles (made for a single product against a big B).
TEST_P(GemmDispatchHopper, F32_SmallBatchOfFewRowsTakesTheBatchedRule) {
  for (const Problem& p : {dense(41, 267, 105, 25), dense(48, 309, 91, 25), dense(39, 226, 45, 98),
                           dense(56, 57, 49, 127), dense(42, 69, 50, 214)}) {
    SCOPED_TRACE(shape_name(p));
    const Config c = pick(p);
    EXPECT_EQ(c.kernel, Kernel::Simt64x64) << config_name(c);
    EXPECT_EQ(c.staging, Staging::CpAsync) << config_name(c);
    EXPECT_FALSE(c.swap) << config_name(c);
  }
}

// B along k (x W^T) is copied along n where each of its elements feeds kBAlongNMinRows FMAs or more and the
// copied problem takes a register-staged tile of 128x128 or over, or a TMA tile: that problem's pick, with
// b_along_n.
TEST_P(GemmDispatchHopper, F32_BAlongKUnderATallMIsCopiedAlongN) {
  auto nt = [](int m, int n, int k, int batch = 1, bool broadcast = false) {
    Problem p = dense(m, n, k, batch);
    p.b_sk = 1, p.b_sn = k;
    if (broadcast) p.b_sb = 0;
    return p;
  };
  for (const Problem& p : {nt(8192, 4096, 4096), nt(2048, 768, 3072), nt(2048, 264, 520),
                           nt(512, 3072, 1024, 4), nt(1024, 4096, 1024, 2, true)}) {
    SCOPED_TRACE(shape_name(p) + (p.b_sb == 0 ? " B broadcast" : ""));
    const bool copies = double(p.m) * p.batch / batches_of(p.b_sb, p.batch) >= kBAlongNMinRows;
    const Config got = pick(p);
    EXPECT_EQ(got.b_along_n, copies) << config_name(got);
    if (!copies) continue;
    Config expect = pick(b_along_n_shape(p));
    expect.b_along_n = true;
    EXPECT_EQ(config_name(got), config_name(expect));
    EXPECT_TRUE(got.staging == Staging::Registers || got.staging == Staging::Tma) << config_name(got);
    EXPECT_TRUE(can_implement(p, got, model()));
  }
  // Not copied: 1024 rows; B along n; A at an odd leading dimension (packed instead); a batch of 512 rows
  // against B per entry; a short K that the short-K kernels take.
  Problem odd_a = nt(4096, 4096, 4095);
  odd_a.a_sm = 4095;
  for (const Problem& p : {nt(1024, 4096, 4096), dense_rows(8192, 4096, 4096), odd_a, nt(4096, 4096, 8)})
    EXPECT_FALSE(pick(p).b_along_n) << p.m << "x" << p.n << "x" << p.k << " " << config_name(pick(p));
  // The configuration needs B along k in whole runs.
  Config bn{Kernel::Simt256x128k16, 1, MathMode::FP32};
  bn.b_along_n = true;
  EXPECT_TRUE(can_implement(nt(8192, 4096, 4096), bn, model()));
  EXPECT_FALSE(can_implement(dense_rows(8192, 4096, 4096), bn, model()));
  EXPECT_FALSE(can_implement(odd_a, bn, model()));
  bn.pack = true;  // both copies: refused (one pack scratch)
  EXPECT_FALSE(can_implement(odd_a, bn, model()));
}

// The rules for M of 33-64 with a long K, skinny N under a tall M, short K over many tiles and few tiles on
// the 16-byte ring. The shapes follow the SM count (132) so that each rule applies (the same shapes run
// through mt::gemm on a GPU in tests/ops/test_gemm.cpp).
TEST_P(GemmDispatchHopper, F32_SmallM_SkinnyN_ShortKBatched) {
  const DeviceModel m = model();
  const int sms = m.sm_count;
  // 48 x (32 tiles of 128 + 4) x 2048: the TMA kernel's 64x128 tiles, K split and added by a second kernel;
  // B in rows of 4101 (no whole 16-byte runs) takes the register-staged 64x128.
  const std::int64_t wide_n = 32 * 128 + 4;
  const Config small_m = pick(dense(48, wide_n, 2048, 1));
  ASSERT_TRUE(tma_ready(dense(48, wide_n, 2048, 1), m));
  EXPECT_EQ(small_m.kernel, Kernel::SimtTma64x128);
  EXPECT_EQ(small_m.staging, Staging::Tma);
  EXPECT_GT(small_m.split_k, 1);
  EXPECT_EQ(small_m.reduce, SplitReduce::Kernel);
  const Config small_m_odd = pick(dense(48, wide_n + 1, 2048, 1));
  EXPECT_EQ(small_m_odd.kernel, Kernel::Simt64x128);
  EXPECT_EQ(small_m_odd.reduce, SplitReduce::Kernel);
  // Few 128x128 tiles with K of 512 or more (the (256, 1024) MLP's layers, 512^3): 16 deep, K split to a
  // wave, a second kernel adds the splits; with K of 1024 or more, the TMA kernel's 128x64 tiles, K split to
  // about two blocks per SM.
  for (const Problem& p : {dense(256, 1024, 1024, 1), dense(512, 512, 512, 1)}) {
    const Config few = pick(p);
    const bool tma = p.k >= 1024;
    EXPECT_EQ(few.kernel, tma ? Kernel::SimtTma128x64 : Kernel::Simt128x128k16);
    EXPECT_EQ(few.staging, tma ? Staging::Tma : Staging::Registers);
    EXPECT_EQ(few.split_k, 8);
    EXPECT_EQ(few.reduce, SplitReduce::Kernel);
  }
  // The mma.sync kernels add their splits with the second kernel only; the wgmma kernel in a cluster of up to
  // 8 or with the second kernel, up to kMaxKernelSplit.
  EXPECT_TRUE(can_implement(dense(256, 1024, 1024, 1),
                            Config{Kernel::Tensor64x64, 2, MathMode::TF32, SplitReduce::Kernel}, m));
  EXPECT_FALSE(can_implement(dense(256, 1024, 1024, 1),
                             Config{Kernel::Tensor64x64, 2, MathMode::TF32, SplitReduce::Cluster}, m));
  if (m.wgmma_kernels) {
    EXPECT_TRUE(can_implement(dense(256, 1024, 1024, 1),
                              Config{Kernel::Wgmma, 2, MathMode::TF32, SplitReduce::Kernel}, m));
    EXPECT_TRUE(can_implement(dense(256, 1024, 1024, 1),
                              Config{Kernel::Wgmma, kMaxKernelSplit, MathMode::TF32x3, SplitReduce::Kernel},
                              m));
  }
  EXPECT_FALSE(can_implement(dense(256, 1024, 1024, 1),
                             Config{Kernel::Wgmma, 2 * kMaxKernelSplit, MathMode::TF32, SplitReduce::Kernel},
                             m));
  EXPECT_FALSE(can_implement(dense(256, 1024, 1024, 1),
                             Config{Kernel::Wgmma, 12, MathMode::TF32, SplitReduce::Cluster}, m));
  // (3/4 of a wave of 128-row tiles + 1 row) x 40 x 520: 128x64 tiles, split 2, TMA-fed, the splits added by
  // the second kernel.
  const std::int64_t tall_m = 128 * ((3 * sms + 3) / 4) + 1;
  const Config skinny = pick(dense(tall_m, 40, 520, 1));
  EXPECT_EQ(skinny.kernel, Kernel::SimtTma128x64);
  EXPECT_EQ(skinny.split_k, 2);
  EXPECT_EQ(skinny.reduce, SplitReduce::Kernel);
  // A batch of 100x1040x68 with at least one 64x256 tile per SM: 64x256, unsplit; rows of A not in whole
  // 16-byte runs take another tile. A batch of small products (100x260x68, 200x260x68) takes 64x64 tiles on
  // the ring; with M of 65-96 (90x260x68: 96 rows of 32-row tiles against 128 of 64-row ones) 32x64 tiles;
  // from kSmallBatchMinM rows on 64x64 whatever the waste.
  const std::int64_t batch = (sms + 3) / 4;
  EXPECT_EQ(pick(dense(100, 1040, 68, batch)).kernel, Kernel::Simt64x256);
  EXPECT_NE(pick(dense(100, 1040, 67, batch)).kernel, Kernel::Simt64x256);  // rows of 67
  for (int m : {100, 200, kSmallBatchMinM + 32}) {
    const Config small = pick(dense(m, 260, 68, batch));
    EXPECT_EQ(small.kernel, Kernel::Simt64x64) << m << ": " << config_name(small);
    EXPECT_EQ(small.staging, Staging::CpAsync) << config_name(small);
  }
  for (int m : {65, 90, 96}) {
    const Config small_rows = pick(dense(m, 260, 68, batch));
    EXPECT_EQ(small_rows.kernel, Kernel::Simt32x64) << m << ": " << config_name(small_rows);
    EXPECT_EQ(small_rows.staging, Staging::CpAsync) << config_name(small_rows);
  }
  // A batch of small products under 64 wide takes the batched rule, not the skinny-N rules' 128-row tiles
  // (H200 sweeps, bench/gemm/DESIGN.md section 3c); unaligned rows stay in place on the 4-byte ring (no
  // pack: the ring reads any alignment at its full rate).
  for (const Problem& p : {dense(189, 53, 68, 136), dense(370, 48, 40, 70), dense(141, 33, 139, 162),
                           dense(272, 46, 74, 113), dense(316, 158, 356, 254), dense(453, 68, 372, 16)}) {
    const Config c = pick(p);
    EXPECT_EQ(c.kernel, Kernel::Simt64x64) << config_name(c);
    EXPECT_EQ(c.staging, Staging::CpAsync) << config_name(c);
    EXPECT_FALSE(c.pack) << config_name(c);
    EXPECT_FALSE(c.swap) << config_name(c);
  }
  EXPECT_EQ(pick(dense(123, 100, 33, 62)).kernel, Kernel::Simt64x64);
  EXPECT_EQ(pick(dense(300, 300, 512, 6)).split_k, 2);  // 150 tiles: 300 blocks, within 4 per SM
  // A narrow N whose 64-wide tiles lie largely outside C runs swapped (kSmallBatchSwapGain more of the
  // tiles' area inside): 495x87 on 64x64 tiles 66 % inside, swapped on 32x64 88 %; 89x32 on 32x64 46 %,
  // swapped 70 %. Not with a bias, which runs along C's rows.
  for (const Problem& p : {dense(495, 87, 320, 40), dense(89, 32, 101, 254), dense(162, 95, 181, 77)}) {
    const Config c = pick(p);
    EXPECT_EQ(c.kernel, Kernel::Simt32x64) << config_name(c);
    EXPECT_EQ(c.staging, Staging::CpAsync) << config_name(c);
    EXPECT_TRUE(c.swap) << config_name(c);
    EXPECT_EQ(c.split_k, 1) << config_name(c);
    Problem biased = p;
    float bias = 0;
    biased.bias = &bias;
    EXPECT_FALSE(pick(biased).swap);
  }
  EXPECT_FALSE(pick(dense(194, 57, 227, 126)).swap);  // 57 rows waste as much as 57 columns
  // Few tiles of 512x512x256 and 64x512x512, operands in aligned rows: 32x64 tiles on the 16-byte ring, K
  // split (in a cluster); B in rows of 511 takes the 4-byte ring.
  for (const Problem& p : {dense(512, 512, 256, 1), dense(64, 512, 512, 1)}) {
    const Config c = pick(p);
    EXPECT_EQ(c.kernel, Kernel::Simt32x64);
    EXPECT_EQ(c.staging, Staging::CpAsync16);
    EXPECT_GT(c.split_k, 1);
    EXPECT_EQ(c.reduce, SplitReduce::Cluster);
  }
  EXPECT_EQ(pick(dense(64, 511, 512, 1)).staging, Staging::CpAsync);
  // Few tiles of 317x855x2513 and 481x309x587, B in rows of odd length: 32x128 tiles on the 4-byte ring, K
  // split to about eight blocks per SM (8 here), added by the second kernel.
  for (const Problem& p : {dense(317, 855, 2513, 1), dense(481, 309, 587, 1)}) {
    const Config c = pick(p);
    EXPECT_EQ(c.kernel, Kernel::Simt32x128) << config_name(c);
    EXPECT_EQ(c.staging, Staging::CpAsync) << config_name(c);
    EXPECT_EQ(c.split_k, 8) << config_name(c);
    EXPECT_EQ(c.reduce, SplitReduce::Kernel) << config_name(c);
  }
}

// Without a TMA-capable device the same rules take the register-staged tiles (the other branch of the
// rules above).
TEST_P(GemmDispatchHopper, F32_WithoutTmaKernels) {
  DeviceModel m = model();
  m.tma_kernels = false;
  const std::int64_t wide_n = 32 * 128 + 4;
  // M of 33-64 at a long K: the wave model's 64-row tile, register-staged, K split over a second kernel.
  const Config small_m = choose(dense(48, wide_n, 2048, 1), MathMode::FP32, m);
  EXPECT_TRUE(small_m.kernel == Kernel::Simt64x256 || small_m.kernel == Kernel::Simt64x128)
      << config_name(small_m);
  EXPECT_EQ(small_m.staging, Staging::Registers);
  EXPECT_EQ(small_m.reduce, SplitReduce::Kernel);
  EXPECT_EQ(choose(dense(256, 1024, 1024, 1), MathMode::FP32, m).kernel, Kernel::Simt128x128k16);
  const std::int64_t tall_m = 128 * ((3 * m.sm_count + 3) / 4) + 1;
  const Config skinny = choose(dense(tall_m, 40, 520, 1), MathMode::FP32, m);
  EXPECT_EQ(skinny.kernel, Kernel::Simt128x64k16);
  EXPECT_EQ(skinny.split_k, 2);
  EXPECT_EQ(skinny.reduce, SplitReduce::Cluster);
}

// Few 128x128 tiles with a long K (the 256x1024x1024 MLP layer: 16 tiles) in the TF32 modes: the wgmma
// kernel with K split over a cluster per tile, to about one wave; many tiles stay unsplit.
TEST_P(GemmDispatchHopper, Wgmma_SplitsFewTiles) {
  const int sms = model().sm_count;
  for (MathMode math : {MathMode::TF32x3, MathMode::TF32}) {
    const Config few = pick(dense_rows(256, 1024, 1024), math);
    EXPECT_EQ(few.kernel, Kernel::Wgmma);
    EXPECT_EQ(few.reduce, SplitReduce::Cluster);
    EXPECT_GT(few.split_k, 1);
    EXPECT_LE(16 * few.split_k, sms);
    EXPECT_EQ(pick(dense_rows(4096, 4096, 4096), math).split_k, 1);
    const Config short_k = pick(dense_rows(256, 1024, 32), math);  // one k tile: nothing to split
    EXPECT_EQ(short_k.kernel, Kernel::Wgmma);
    EXPECT_EQ(short_k.split_k, 1);
  }
  // 16 clusters of 8 do not fit the 120 slots of size 8 (15 clusters); 16 of 6 fit the 102 slots of size 6.
  EXPECT_EQ(wgmma_choose(dense_rows(256, 1024, 1024), MathMode::TF32x3, model()).split, 6);
  // No whole 128x128 tile: TF32 takes mma.sync, TF32x3 the fp32 kernels (faster there, and as accurate).
  for (const Problem& small :
       {dense_rows(64, 512, 512), dense_rows(16384, 64, 4096), dense_rows(127, 129, 255)}) {
    EXPECT_EQ(pick(small, MathMode::TF32).math, MathMode::TF32);
    const Config c = pick(small, MathMode::TF32x3);
    EXPECT_EQ(c.math, MathMode::FP32);
    EXPECT_EQ(c.kernel, pick(small).kernel);
  }
}

// 3xTF32 grids of one to two waves whose last wave is thin split K in a cluster (the wave model of
// wgmma_choose); grids the model rates level, and every TF32 grid over a wave, stay unsplit.
TEST_P(GemmDispatchHopper, Wgmma_TF32x3ThinLastWavesSplit) {
  for (const Problem& thin : {dense_rows(1024, 2304, 768), dense_rows(1024, 3072, 768),
                              dense_rows(1024, 3072, 1024), dense_rows(1280, 2048, 2048)}) {
    const Config c = pick(thin, MathMode::TF32x3);
    EXPECT_EQ(c.kernel, Kernel::Wgmma);
    EXPECT_EQ(c.split_k, 2);
    EXPECT_EQ(c.reduce, SplitReduce::Cluster);
    EXPECT_EQ(pick(thin, MathMode::TF32).split_k, 1);
  }
  EXPECT_EQ(pick(dense_rows(1024, 2304, 3072), MathMode::TF32x3).split_k, 3);
  for (const Problem& level : {dense_rows(1024, 4096, 1024), dense_rows(1536, 2304, 768),
                               dense_rows(2048, 3072, 768), dense_rows(4096, 4096, 4096)})
    EXPECT_EQ(pick(level, MathMode::TF32x3).split_k, 1);
}

// 3xTF32 over fewer 128x128 tiles than a cluster split of 8 fills the card with: a long K is split 16 ways
// and added by the reduce kernel (the MLP's down projection of 128 tokens), a short one keeps the cluster.
// TF32 keeps the cluster.
TEST_P(GemmDispatchHopper, Wgmma_TF32x3FewTilesSplitByTheReduceKernel) {
  for (const Problem& deep : {dense_rows(128, 768, 3072), dense_rows(128, 1024, 4096)}) {
    SCOPED_TRACE(std::to_string(deep.n) + "x" + std::to_string(deep.k));
    expect_config(pick(deep, MathMode::TF32x3), Kernel::Wgmma, 16, SplitReduce::Kernel);
    expect_config(pick(deep, MathMode::TF32), Kernel::Wgmma, 8, SplitReduce::Cluster);
  }
  expect_config(pick(dense_rows(128, 768, 768), MathMode::TF32x3), Kernel::Wgmma, 8, SplitReduce::Cluster);
  expect_config(pick(dense_rows(128, 1024, 1024), MathMode::TF32x3), Kernel::Wgmma, 8, SplitReduce::Cluster);
  // Tiles enough for clusters of 2-4 to fill most of the card keep them.
  for (const Problem& wide : {dense_rows(128, 2304, 768), dense_rows(128, 3072, 768),
                              dense_rows(128, 4096, 1024), dense_rows(256, 768, 3072)}) {
    const Config c = pick(wide, MathMode::TF32x3);
    EXPECT_EQ(c.kernel, Kernel::Wgmma);
    EXPECT_EQ(c.reduce, SplitReduce::Cluster) << config_name(c);
  }
}

// A short K over a large C in fp32 whose rows do not take float4 stores (odd N, an offset view): the rows
// kernel, whatever the operands' layout (transposed, unaligned, batched), unsplit. C in float4 rows, a small
// C, or K past kSmallKRowsMax take the tiled kernels; the TF32 modes keep theirs.
TEST_P(GemmDispatchHopper, F32_SmallKTakesTheShortKKernel) {
  const int sms = model().sm_count;
  for (int k : {1, 2, 7, kSmallKRowsMax}) {
    SCOPED_TRACE("k " + std::to_string(k));
    for (const Problem& p : {dense_rows(349, 5842, k), dense_rows(1155, 6553, k), dense_rows(14771, 401, k),
                             dense(63, 65, k, 2 * sms)}) {
      const Config c = pick(p);
      EXPECT_EQ(c.kernel, Kernel::SmallKRows) << config_name(c);
      EXPECT_EQ(c.split_k, 1);
      EXPECT_FALSE(c.pack);
    }
    Problem t = rows(4095, 4097, k, 4095, 4097);
    t.a_sm = 1, t.a_sk = 4095;  // A transposed, rows of odd length: read in place, no pack
    const Config tc = pick(t);
    EXPECT_EQ(tc.kernel, Kernel::SmallKRows) << config_name(tc);
    EXPECT_TRUE(can_implement(t, tc, model()));
    // C in float4 rows: the tiles.
    EXPECT_FALSE(is_small_k(pick(dense_rows(4096, 4096, k)).kernel));
    EXPECT_FALSE(is_small_k(pick(dense_rows(2368, 9376, k)).kernel));
    EXPECT_FALSE(is_small_k(pick(dense(64, 64, k, 2 * sms)).kernel));
    // Under kSmallKRowsMinC elements of C: the tiled kernels.
    EXPECT_FALSE(is_small_k(pick(dense_rows(400, 5, k)).kernel));
    EXPECT_FALSE(is_small_k(pick(dense_rows(336, 307, k)).kernel));
    EXPECT_FALSE(is_small_k(pick(dense(63, 65, k, 2)).kernel));
  }
  for (int k : {kSmallKRowsMax + 1, 32, 64}) {
    SCOPED_TRACE("k " + std::to_string(k));
    EXPECT_FALSE(is_small_k(pick(dense_rows(349, 5843, k)).kernel));
    EXPECT_FALSE(is_small_k(pick(dense_rows(4096, 4096, k)).kernel));
    EXPECT_FALSE(is_small_k(pick(dense(128, 129, k, 2 * sms)).kernel));
  }
  EXPECT_FALSE(is_small_k(pick(dense_rows(4096, 4096, kSmallKMax + 1)).kernel));
  EXPECT_FALSE(is_small_k(pick(dense_rows(349, 5843, kSmallKMax + 1)).kernel));
  EXPECT_EQ(pick(dense_rows(256, 1024, 32), MathMode::TF32).kernel, Kernel::Wgmma);
  EXPECT_FALSE(is_small_k(pick(dense_rows(64, 512, 32), MathMode::TF32).kernel));
  EXPECT_FALSE(is_small_k(pick(dense_rows(349, 5843, 7), MathMode::TF32).kernel));
  // A vector operand stays on the vector kernel.
  EXPECT_EQ(pick(dense_rows(1, 4096, 7)).kernel, Kernel::Gemv);
  EXPECT_EQ(pick(dense_rows(4096, 1, 7)).kernel, Kernel::Gemv);
}

// Other single products with K up to kShortTileMaxK over at least a wave of 64x64 tiles (M and N past 64):
// unsplit tiles, never packed. B in aligned 16-byte rows: 64x64 register-staged, or 128x128 two per SM with
// both operands so, K >= kShortTileBigMinK and kShortTileBigC elements of C. Else the 4-byte cp.async ring,
// 32x128 under kShortTileRingMinM rows. The shapes are the H200 sweeps' (bench/gemm/DESIGN.md, short K).
TEST_P(GemmDispatchHopper, F32_ShortKTakesUnsplitTiles) {
  const Config regs64{Kernel::Simt64x64, 1, MathMode::FP32};
  const Config regs128{Kernel::Simt128x128x2, 1, MathMode::FP32};
  const Config ring64{Kernel::Simt64x64, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync};
  const Config ring32{Kernel::Simt32x128, 1, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync};
  auto expect = [&](const Problem& p, const Config& want) {
    const Config c = pick(p);
    EXPECT_EQ(config_name(c), config_name(want)) << p.m << "x" << p.n << "x" << p.k;
    EXPECT_FALSE(c.pack);
    EXPECT_TRUE(can_implement(p, c, model()));
  };
  // C (and B) in float4 rows at K of 1-16 (the rows kernel's range), A in any rows.
  for (int k : {1, 3, 6, 16}) {
    expect(dense_rows(2368, 9376, k), regs64);
    expect(dense_rows(9680, 1392, k), regs64);
    expect(dense_rows(4096, 4096, k), regs64);
  }
  expect(dense_rows(1000, 1000, 24), regs64);
  expect(dense_rows(207, 5108, 31), regs64);  // A's rows of 31: B's float4 loads still pay
  expect(dense_rows(1648, 768, 80), regs64);  // 2^20 elements of C: under kShortTileBigC
  expect(dense_rows(464, 8880, kShortTileMaxK), regs64);
  expect(dense_rows(4096, 4096, 32), regs128);
  expect(dense_rows(8192, 1024, 48), regs128);
  expect(dense_rows(2048, 2048, kShortTileMaxK), regs128);
  // B not in aligned rows: the ring.
  expect(dense_rows(1850, 5075, 85), ring64);
  expect(dense_rows(3000, 3001, 100), ring64);
  expect(dense_rows(7904, 105, 7), ring64);  // a C under kSmallKRowsMinC: not the rows kernel
  expect(dense_rows(67, 15399, 88), ring32);
  expect(dense_rows(511, 3001, 17), ring32);
  // N of 64 or less with B not in 16-byte runs: the ring in place (not packed for the skinny-N rules); with
  // B in aligned rows the skinny-N rules keep it.
  expect(dense_rows(16128, 7, 64), ring64);
  EXPECT_NE(pick(dense_rows(16128, 32, 64)).kernel, Kernel::Simt64x64);
  Problem tn = rows(11678, 346, 132, 11678, 346);
  tn.a_sm = 1, tn.a_sk = 11678;  // A transposed
  expect(tn, ring64);
  // Outside the rule: K past kShortTileMaxK (rows of 161 floats: the pack rule), a batch (the batched rule's
  // ring), under a wave of 64x64 tiles (the split rules), the TF32 modes.
  EXPECT_TRUE(pick(dense_rows(4096, 4096, kShortTileMaxK + 1)).pack);
  EXPECT_EQ(pick(dense(512, 512, 32, 8)).staging, Staging::CpAsync);
  EXPECT_GT(pick(dense_rows(640, 640, 64)).split_k, 1);  // 100 tiles of 64x64 under 132 SMs: the split rules
  EXPECT_EQ(pick(dense_rows(4096, 4096, 32), MathMode::TF32).kernel, Kernel::Wgmma);
}

// Projections of 33-64 tokens against a big weight (n x k of at least 2^21; B an nn.Linear weight or plain):
// one row of 64-row tiles with K split deep, as the wave model picks them (the tuner's picks on an H200,
// bench/gemm/DESIGN.md section 3c). A small weight keeps the 32-row tiles. A batch of products at most 64
// wide under a small M: 32x64 tiles. A batch of small products (150 on a side): 64x64 on the ring.
TEST_P(GemmDispatchHopper, F32_SmallMProjectionsAndSmallBatches) {
  auto linear = [](int m, int n, int k) {
    Problem p = dense_rows(m, n, k);
    p.b_sk = 1, p.b_sn = k;  // B transposed
    return p;
  };
  for (const Problem& p : {linear(64, 3072, 768), dense_rows(64, 3072, 768)}) {
    const Config c = pick(p);
    EXPECT_EQ(c.kernel, Kernel::Simt64x128) << config_name(c);
    EXPECT_EQ(c.split_k, 8) << config_name(c);
    EXPECT_EQ(c.reduce, SplitReduce::Cluster) << config_name(c);
  }
  const Config up = pick(linear(64, 1024, 4096));
  EXPECT_EQ(up.kernel, Kernel::Simt64x128) << config_name(up);
  EXPECT_EQ(up.split_k, 32) << config_name(up);
  EXPECT_EQ(up.reduce, SplitReduce::Kernel) << config_name(up);
  const Config wide = pick(linear(64, 2048, 8192));
  EXPECT_EQ(wide.kernel, Kernel::Simt64x256) << config_name(wide);
  EXPECT_EQ(wide.split_k, 32) << config_name(wide);
  const Config widest = pick(linear(64, 24576, 8192));
  EXPECT_EQ(widest.kernel, Kernel::Simt64x256) << config_name(widest);
  EXPECT_EQ(widest.split_k, 8) << config_name(widest);
  EXPECT_EQ(pick(linear(64, 1536, 512)).kernel, Kernel::Simt32x64);  // 786k of weight: the 32-row tiles
  const Config narrow = pick(dense(40, 50, 300, 100));
  EXPECT_EQ(narrow.kernel, Kernel::Simt32x64) << config_name(narrow);
  const Config mid = pick(dense(150, 150, 256, 32));
  EXPECT_EQ(mid.kernel, Kernel::Simt64x64) << config_name(mid);
  EXPECT_EQ(mid.split_k, 1) << config_name(mid);
}

// A skinny N (at most kSwapMaxN) under M of kSwapMinM or more runs as C^T = B^T A^T on 32x128 tiles over the
// 4-byte ring, K split to the block count nearest 4 per SM (the H200 sweeps' best or within 3 % of it,
// bench/gemm/DESIGN.md section 3c). Not with a bias, a batch, N past kSwapMaxN, M under kSwapMinM, or TF32.
TEST_P(GemmDispatchHopper, F32_SkinnyNRunsSwapped) {
  auto layout = [](int m, int n, int k, bool ta, bool tb) {
    Problem p = dense_rows(m, n, k);
    if (ta) p.a_sm = 1, p.a_sk = m;
    if (tb) p.b_sk = 1, p.b_sn = k;
    return p;
  };
  struct Case {
    Problem p;
    int split;
  };
  for (const Case& t :
       {Case{layout(5978, 20, 15666, false, false), 8}, Case{layout(12222, 17, 789, true, false), 4},
        Case{layout(4112, 32, 13408, true, false), 16}, Case{layout(8192, 24, 4096, false, false), 8},
        Case{layout(16384, 32, 1024, false, false), 4}, Case{layout(3000, 20, 3000, false, true), 16},
        Case{layout(6541, 12, 767, false, false), 8}, Case{layout(20000, 17, 500, false, false), 4},
        Case{layout(2000, 30, 8000, true, true), 32}, Case{layout(1500, 24, 1500, false, false), 16}}) {
    const Config c = pick(t.p);
    SCOPED_TRACE(std::to_string(t.p.m) + "x" + std::to_string(t.p.n) + "x" + std::to_string(t.p.k) + ": " +
                 config_name(c));
    EXPECT_TRUE(c.swap);
    EXPECT_EQ(c.kernel, Kernel::Simt32x128);
    EXPECT_EQ(c.staging, Staging::CpAsync);
    EXPECT_EQ(c.split_k, t.split);
    EXPECT_EQ(c.reduce, SplitReduce::Kernel);
    EXPECT_TRUE(can_implement(t.p, c, model()));
    // TF32x3 runs the fp32 kernels where no 128x128 tile fits, the swap included; TF32 keeps mma.sync.
    EXPECT_TRUE(pick(t.p, MathMode::TF32x3).swap);
    EXPECT_FALSE(pick(t.p, MathMode::TF32).swap);
  }
  Problem biased = dense_rows(5978, 20, 15666);
  float bias = 0;
  biased.bias = &bias;
  EXPECT_FALSE(pick(biased).swap);
  EXPECT_FALSE(pick(dense(2000, 20, 3000, 4)).swap);
  EXPECT_FALSE(pick(dense_rows(5978, kSwapMaxN + 1, 15666)).swap);
  EXPECT_FALSE(pick(dense_rows(kSwapMinM - 1, 20, 15666)).swap);
  EXPECT_FALSE(pick(dense_rows(16384, 64, 4096)).swap);  // the benchmark list's skinny shape keeps TMA
}

// A single product of at most 32 rows over at least kNarrowMinTiles tiles of 32x128: K split to the block
// count nearest kNarrowBlocksPerSm per SM (at least kNarrowMinSplitK of K a split), added by the second
// kernel; the same row the swapped skinny N takes. Fewer tiles keep the few-tiles rule (32x64).
TEST_P(GemmDispatchHopper, F32_FewRowsSplitToFourBlocksPerSm) {
  Problem tn = dense_rows(11, 4883, 1207);
  tn.a_sm = 1, tn.a_sk = 11;
  struct Case {
    Problem p;
    int split;
  };
  for (const Case& t :
       {Case{dense_rows(13, 10800, 384), 4}, Case{dense_rows(10, 12928, 368), 4},
        Case{dense_rows(16, 3952, 12848), 16}, Case{tn, 16}, Case{dense_rows(20, 5000, 128), 2}}) {
    const Config c = pick(t.p);
    SCOPED_TRACE(std::to_string(t.p.m) + "x" + std::to_string(t.p.n) + "x" + std::to_string(t.p.k) + ": " +
                 config_name(c));
    EXPECT_EQ(c.kernel, Kernel::Simt32x128);
    EXPECT_EQ(c.staging, Staging::CpAsync);
    EXPECT_EQ(c.split_k, t.split);
    EXPECT_EQ(c.reduce, SplitReduce::Kernel);
    EXPECT_FALSE(c.swap);
  }
  EXPECT_EQ(pick(dense_rows(11, 48, 16240)).kernel, Kernel::Simt32x64);
  EXPECT_EQ(pick(dense_rows(11, 128 * (kNarrowMinTiles - 1), 4096)).kernel, Kernel::Simt32x64);
  // A row of under 32 tiles whose split leaves it under a block per SM: the few-tiles rule's 32x64 tiles,
  // reduced in a cluster; unsplit, the row stays.
  Problem nt = dense_rows(8, 1536, 512);
  nt.b_sk = 1, nt.b_sn = 512;
  for (const Problem& p : {nt, dense_rows(2, 1552, 576)}) {
    const Config c = pick(p);
    SCOPED_TRACE(config_name(c));
    EXPECT_EQ(c.kernel, Kernel::Simt32x64);
    EXPECT_EQ(c.split_k, 8);
    EXPECT_EQ(c.reduce, SplitReduce::Cluster);
  }
  for (const Problem& p : {dense_rows(9, 3280, 8), dense_rows(8, 2912, 64)}) {
    const Config c = pick(p);
    SCOPED_TRACE(config_name(c));
    EXPECT_EQ(c.kernel, Kernel::Simt32x128);
    EXPECT_EQ(c.split_k, 1);
    EXPECT_FALSE(c.pack);
  }
}

// A C of a few 32x64 tiles over a long K: 32x64 tiles on a cp.async ring (16-byte where the operands allow;
// both kinds below), K split past 32 to about two
// blocks per SM (at least 64 of K a split), added by the second kernel; where the split would stay at 32 or
// less, or both sides pass 64, or in a batch, the other rules' picks.
TEST_P(GemmDispatchHopper, F32_TinyCLongKSplitsPast32) {
  Problem tn = dense_rows(11, 80, 14832);
  tn.a_sm = 1, tn.a_sk = 11;
  for (const Problem& p : {tn, dense_rows(51, 27, 11677), dense_rows(96, 40, 12000),
                           dense_rows(20, 100, 20000), dense_rows(3, 17, 9022), dense_rows(64, 128, 8192)}) {
    const Config c = pick(p);
    SCOPED_TRACE(shape_name(p) + ": " + config_name(c));
    EXPECT_EQ(c.kernel, Kernel::Simt32x64);
    EXPECT_EQ(c.staging, ring16_ready(p) ? Staging::CpAsync16 : Staging::CpAsync);
    EXPECT_EQ(c.split_k, 64);
    EXPECT_EQ(c.reduce, SplitReduce::Kernel);
    EXPECT_FALSE(c.swap);
  }
  EXPECT_EQ(pick(dense_rows(96, 40, 12000)).split_k, 64);
  EXPECT_LE(pick(dense_rows(96, 40, 4000)).split_k, 32);    // 64 of K a split allows 32 at most
  EXPECT_LE(pick(dense_rows(96, 200, 12000)).split_k, 32);  // 12 tiles: 32 splits fill two per SM
  EXPECT_LE(pick(dense_rows(65, 65, 16000)).split_k, 32);   // both sides past 64
  Problem batched = dense_rows(11, 80, 14832);
  batched.batch = 2, batched.a_sb = 11 * 14832, batched.b_sb = 80 * 14832, batched.c_sb = 11 * 80;
  EXPECT_LE(pick(batched).split_k, 32);
  EXPECT_LE(choose(dense_rows(11, 80, 14832), MathMode::TF32, model()).split_k, 32);
}

INSTANTIATE_TEST_SUITE_P(Hopper, GemmDispatchHopper, ::testing::Values("H100", "H200"),
                         [](const auto& info) { return info.param; });

// ---------------------------------------------------------------- an A100-like device

// Every pick and candidate is one the device has: no TMA or wgmma kernel, no cluster reduction; and each
// pick can run the problem there.
TEST(GemmDispatchA100, PicksExistOnTheArch) {
  const DeviceModel a = DeviceModel::a100();
  std::vector<Problem> problems = {dense_rows(4096, 4096, 4096),
                                   dense_rows(3000, 3000, 3000),
                                   dense_rows(2048, 2056, 2048),
                                   dense_rows(1024, 1024, 1024),
                                   dense_rows(1792, 1792, 1792),
                                   dense_rows(256, 1024, 1024),
                                   dense_rows(512, 512, 512),
                                   dense_rows(64, 512, 512),
                                   dense_rows(127, 129, 255),
                                   dense(48, 32 * 128 + 4, 2048, 1),
                                   dense(100, 260, 68, 27),
                                   dense(16384, 64, 4096, 1),
                                   rows(4095, 4097, 1023, 1023, 4097),
                                   rows(2047, 2049, 2047, 2047, 2049),
                                   dense_rows(256, 1024, 32)};
  Problem t = rows(4095, 4097, 1023, 1023, 4097);
  t.a_sm = 1, t.a_sk = 4095;
  problems.push_back(t);
  for (const Problem& p : problems) {
    for (MathMode math : {MathMode::FP32, MathMode::TF32, MathMode::TF32x3}) {
      const Config c = choose(p, math, a);
      SCOPED_TRACE(shape_name(p) + " " + math_mode_name(math) + ": " + config_name(c));
      EXPECT_TRUE(can_implement(p, c, a));
      EXPECT_NE(c.kernel, Kernel::Wgmma);
      EXPECT_FALSE(is_tma_kernel(c.kernel));
      EXPECT_NE(c.staging, Staging::Tma);
      EXPECT_FALSE(c.split_k > 1 && c.reduce == SplitReduce::Cluster);
      EXPECT_FALSE(is_rung(c.kernel));
    }
    for (const Config& c : candidates(p, MathMode::FP32, a)) {
      EXPECT_FALSE(is_tma_kernel(c.kernel)) << config_name(c);
      EXPECT_FALSE(c.split_k > 1 && c.reduce == SplitReduce::Cluster) << config_name(c);
    }
  }
  // Where Hopper takes the TMA kernel, the A100 takes the register-staged tiles; its cluster splits are
  // added by the second kernel.
  const Config skinny = choose(dense(16384, 64, 4096, 1), MathMode::FP32, a);
  EXPECT_EQ(skinny.kernel, Kernel::Simt128x64k16);
  EXPECT_EQ(skinny.reduce, SplitReduce::Kernel);
  EXPECT_EQ(choose(dense_rows(256, 1024, 1024), MathMode::TF32, a).kernel, Kernel::Tensor64x64);
}

// ---------------------------------------------------------------- can_implement and the kernel table

// TMA staging belongs to the TMA kernels alone; on a model with the TMA kernels they take aligned row-major
// operands.
TEST(GemmDispatch, Tma_StagingOnlyWithTheTmaKernels) {
  Problem p;
  p.m = 256, p.n = 64, p.k = 128;
  p.a_sm = 128, p.a_sk = 1, p.b_sk = 64, p.b_sn = 1, p.c_sm = 64, p.c_sn = 1;
  for (const DeviceModel& m : {DeviceModel::h100(), DeviceModel::a100()})
    for (Kernel kernel : simt_kernels()) {
      SCOPED_TRACE(kernel_name(kernel));
      const bool tma = is_tma_kernel(kernel);
      EXPECT_EQ(can_implement(p, Config{kernel, 2, MathMode::FP32, SplitReduce::Cluster, Staging::Tma}, m),
                tma && m.tma_kernels);
      EXPECT_EQ(can_implement(p, Config{kernel, 2, MathMode::FP32, SplitReduce::Kernel, Staging::Tma}, m),
                tma && m.tma_kernels);
      if (tma) {
        EXPECT_FALSE(
            can_implement(p, Config{kernel, 1, MathMode::FP32, SplitReduce::Kernel, Staging::Registers}, m));
      }
    }
  p.a_sm = 130;  // rows not in 16-byte steps
  EXPECT_FALSE(tma_ready(p, DeviceModel::h100()));
}

// A vector operand (M == 1 or N == 1) takes the streaming vector kernel in every math mode, on every model;
// it runs nothing else, and is among the candidates the sweep and tuner time.
TEST(GemmDispatch, VectorOperandTakesTheVectorKernel) {
  for (const DeviceModel& model : {DeviceModel::h100(), DeviceModel::h200(), DeviceModel::a100()})
    for (MathMode math : {MathMode::FP32, MathMode::TF32, MathMode::TF32x3})
      for (const Problem& p : {dense_rows(1, 3072, 768), dense_rows(768, 1, 768), dense_rows(1, 1, 100003)}) {
        const Config c = choose(p, math, model);
        EXPECT_EQ(c.kernel, Kernel::Gemv) << p.m << "x" << p.n << "x" << p.k << " " << math_mode_name(math);
        EXPECT_TRUE(can_implement(p, c, model));
        const std::vector<Config> all = candidates(p, math, model);
        EXPECT_TRUE(
            std::any_of(all.begin(), all.end(), [](const Config& x) { return x.kernel == Kernel::Gemv; }));
      }
  EXPECT_FALSE(can_implement(dense_rows(17, 18, 4), Config{Kernel::Gemv}, DeviceModel::h100()));
  EXPECT_FALSE(can_implement(dense_rows(1, 3, 4), Config{Kernel::Gemv, 2}, DeviceModel::h100()));
}

// A thin product over a big matrix takes the vector kernel in every math mode: 2 to kThinMaxRows vectors
// in either layout (along K, vectors that fit L1 or a matrix the dot tile takes), or up to kGemvMaxRows
// along K over a matrix of kThinBigMatrix elements. A small matrix, a short K, more vectors, 9-16 vectors
// along the outputs or over a mid-size matrix, long vectors over a small matrix keep the tiles. The kernel
// can run any product of at most kGemvMaxRows on the thin side, so the tuner times it there.
TEST(GemmDispatch, ThinProductsOverABigMatrixTakeTheVectorKernel) {
  auto linear = [](int m, int n, int k) {  // x @ W^T: the weight W (n x k) runs along K
    Problem p = dense_rows(m, n, k);
    p.b_sk = 1, p.b_sn = k;
    return p;
  };
  for (const DeviceModel& model : {DeviceModel::h100(), DeviceModel::h200(), DeviceModel::a100()})
    for (MathMode math : {MathMode::FP32, MathMode::TF32, MathMode::TF32x3}) {
      for (const Problem& p : {linear(8, 20480, 5120), linear(2, 15456, 960), dense_rows(1360, 2, 6112),
                               dense_rows(4016, 3, 4867), dense_rows(10784, 4, 128), linear(4, 3568, 624),
                               linear(9, 20480, 5120), linear(16, 8192, 32768), dense_rows(7, 4538, 4586),
                               dense_rows(8832, 13, 14928), dense_rows(720, 7, 7600)}) {
        const Config c = choose(p, math, model);
        EXPECT_EQ(c.kernel, Kernel::Gemv) << p.m << "x" << p.n << "x" << p.k << " " << math_mode_name(math);
        EXPECT_TRUE(can_implement(p, c, model));
      }
      for (const Problem& p :
           {linear(2, 1552, 576), linear(17, 20480, 5120), dense_rows(4, 15824, 8),
            dense_rows(24, 4538, 4586), dense_rows(64, 4096, 4096), dense_rows(10, 12928, 368),
            dense_rows(6541, 12, 767), dense_rows(300, 7, 7600)})
        EXPECT_NE(choose(p, math, model).kernel, Kernel::Gemv)
            << p.m << "x" << p.n << "x" << p.k << " " << math_mode_name(math);
    }
  const Problem small = dense_rows(3, 40, 50);
  EXPECT_TRUE(can_implement(small, Config{Kernel::Gemv}, DeviceModel::h100()));
  const std::vector<Config> all = candidates(small, MathMode::FP32, DeviceModel::h100());
  EXPECT_TRUE(std::any_of(all.begin(), all.end(), [](const Config& x) { return x.kernel == Kernel::Gemv; }));
}

// The short-K kernels take any layout and math mode, unsplit only, and are among the candidates up to
// kSmallKCandidateMax of K.
TEST(GemmDispatch, SmallK_CanImplementAndCandidates) {
  const DeviceModel h = DeviceModel::h100();
  EXPECT_EQ(small_k_kernels(),
            (std::vector<Kernel>{Kernel::SmallK128x128, Kernel::SmallK64x64, Kernel::SmallKRows}));
  Problem odd = rows(127, 129, 7, 7, 129);
  odd.b_sk = 1, odd.b_sn = 7;    // B transposed
  odd.a_sm = 3, odd.a_sk = 500;  // A strided both ways
  for (Kernel k : small_k_kernels())
    for (MathMode math : {MathMode::FP32, MathMode::TF32, MathMode::TF32x3}) {
      SCOPED_TRACE(std::string(kernel_name(k)) + " " + math_mode_name(math));
      EXPECT_TRUE(can_implement(odd, Config{k, 1, math}, h));
      EXPECT_TRUE(can_implement(odd, Config{k, 1, math}, DeviceModel::a100()));
      EXPECT_FALSE(can_implement(odd, Config{k, 2, math}, h));
      EXPECT_FALSE(can_implement(odd, Config{k, 1, math, SplitReduce::Kernel, Staging::CpAsync}, h));
      EXPECT_FALSE(can_implement(odd, Config{k, 1, math, SplitReduce::Kernel, Staging::Registers, true}, h));
    }
  auto has_small_k = [&](const Problem& p) {
    const std::vector<Config> all = candidates(p, MathMode::FP32, h);
    return std::any_of(all.begin(), all.end(), [](const Config& c) { return is_small_k(c.kernel); });
  };
  EXPECT_TRUE(has_small_k(dense_rows(1000, 1000, kSmallKCandidateMax)));
  EXPECT_FALSE(has_small_k(dense_rows(1000, 1000, kSmallKCandidateMax + 1)));
}

// The transposed product (Config::swap): a skinny N (at most 64, under M past 64) in fp32 offers the small-M
// tiles over C^T among its candidates, each able to run and named "_swapped"; a bias, a row softmax, a TF32
// mode or a wide N offers none, and can_implement refuses the swap there.
TEST(GemmDispatch, Swap_CanImplementAndCandidates) {
  const DeviceModel h = DeviceModel::h100();
  auto swaps = [&](const Problem& p, MathMode math) {
    std::vector<Config> out;
    for (const Config& c : candidates(p, math, h))
      if (c.swap) out.push_back(c);
    return out;
  };
  Problem tn = dense_rows(12222, 17, 789);
  tn.a_sm = 1, tn.a_sk = 12222;
  for (const Problem& p : {dense_rows(5978, 20, 15666), tn, dense_rows(300, 64, 777)}) {
    SCOPED_TRACE(shape_name(p));
    const std::vector<Config> all = swaps(p, MathMode::FP32);
    ASSERT_FALSE(all.empty());
    for (const Config& c : all) {
      EXPECT_TRUE(can_implement(p, c, h)) << config_name(c);
      EXPECT_TRUE(
          can_implement(swapped(p), Config{c.kernel, c.split_k, c.math, c.reduce, c.staging, c.pack}, h))
          << config_name(c);
      EXPECT_NE(config_name(c).find("_swapped"), std::string::npos);
      EXPECT_TRUE(is_simt(c.kernel));
    }
    EXPECT_TRUE(swaps(p, MathMode::TF32).empty());
    Problem biased = p;
    float bias = 0;
    biased.bias = &bias;
    EXPECT_TRUE(swaps(biased, MathMode::FP32).empty());
    EXPECT_FALSE(can_implement(biased, all.front(), h));
    Problem softmax = p;
    softmax.softmax = true;
    EXPECT_FALSE(can_implement(softmax, all.front(), h));
  }
  EXPECT_TRUE(swaps(dense_rows(300, 129, 777), MathMode::FP32).empty());
  EXPECT_TRUE(swaps(dense_rows(64, 20, 777), MathMode::FP32).empty());
  // swapped() exchanges the extents, the operands and C's strides; twice is the identity.
  const Problem p = tn, q = swapped(p), r = swapped(q);
  EXPECT_EQ(q.m, p.n);
  EXPECT_EQ(q.n, p.m);
  EXPECT_EQ(q.a, p.b);
  EXPECT_EQ(q.a_sm, p.b_sn);
  EXPECT_EQ(q.b_sn, p.a_sm);
  EXPECT_EQ(q.c_sm, p.c_sn);
  EXPECT_EQ(q.c_sn, p.c_sm);
  EXPECT_TRUE(r.m == p.m && r.n == p.n && r.a == p.a && r.a_sm == p.a_sm && r.a_sk == p.a_sk &&
              r.b_sk == p.b_sk && r.b_sn == p.b_sn && r.c_sm == p.c_sm && r.c_sn == p.c_sn);
}

// One row per kernel, in Kernel order; the ladder's rungs are never among the production lists.
TEST(GemmKernelTable, OneRowPerKernel) {
  const auto table = kernel_table();
  ASSERT_EQ(table.size(), static_cast<std::size_t>(Kernel::Gemv) + 1);
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(static_cast<std::size_t>(table[i].kernel), i);
    EXPECT_NE(table[i].launch, nullptr) << table[i].name;
  }
  EXPECT_EQ(rung_kernels(),
            (std::vector<Kernel>{Kernel::Naive, Kernel::SmemTiled, Kernel::RegTiled, Kernel::WarpTiled}));
  EXPECT_EQ(simt_kernels().size(), 14u);
  EXPECT_EQ(tensor_kernels(), (std::vector<Kernel>{Kernel::Tensor128x128, Kernel::Tensor128x64,
                                                   Kernel::Tensor64x64, Kernel::Wgmma}));
  EXPECT_EQ(kernel_info(Kernel::Gemv).family, KernelFamily::Vector);
  EXPECT_STREQ(kernel_name(Kernel::WarpTiled), "gemm_warp_tiled");
  EXPECT_STREQ(kernel_name(Kernel::Simt256x128), "simt_256x128x8_w64x64_t16x8_s3");
  // The rungs run every problem, unsplit, FP32 only; dispatch never picks one.
  const Problem p = dense_rows(127, 129, 255);
  for (Kernel k : rung_kernels()) {
    EXPECT_TRUE(can_implement(p, Config{k, 1, MathMode::FP32}, DeviceModel::h100()));
    EXPECT_FALSE(can_implement(p, Config{k, 2, MathMode::FP32}, DeviceModel::h100()));
  }
}

}  // namespace
}  // namespace mt::detail::gemm
