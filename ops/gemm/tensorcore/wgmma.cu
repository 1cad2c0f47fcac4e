// Hopper tensor-core SGEMM for MathMode::TF32 and MathMode::TF32x3: wgmma (sm_90a), then its launchers.
//
// Two kernels per GEMM, or one:
//   wgmma_pack  reads A and B through their strides (transposed / strided views, any batch stride) and writes
//               both K-major, rounded to TF32 (round to nearest) as big = tf32(x) and, for 3xTF32, small =
//               tf32(x - big), zero-padded to whole tiles, tile by tile in exactly the shared-memory image
//               that wgmma reads with the 128-byte swizzle. One pipeline stage of one operand is then one
//               contiguous chunk of global memory, fetched by a single 1-D bulk copy (cp.async.bulk, no
//               tensor map), and the main loop has no bounds checks at all.
//               TF32 does not pack an A contiguous along k in 16-byte aligned rows (tma_a_ok, a row-major
//               activation): the GEMM fetches it raw through a TMA descriptor whose 128-byte swizzle lays it
//               out as the pack would (zeros outside the matrix), and each consumer thread loads its wgmma
//               A fragments from the stage into registers, rounding them as the pack does (cvt.rna), so
//               results are bit-identical to the packed path's. The rounding is needed: the tensor cores
//               truncate an fp32 operand to TF32, which measured 2.6x the error of cuBLAS's TF32. 3xTF32
//               packs A too: its big and small fragments do not fit beside its three accumulator sets, and
//               splitting A in registers with one tile accumulator, or in shared memory, measured slower
//               than the pack (bench/gemm/TRIED.md).
//   gemm_wgmma  warp-specialised: warpgroup 0 is the producer (one thread issues the bulk copies into a ring
//               of STAGES stages guarded by full/empty mbarriers), warpgroups 1 and 2 are consumers, each
//               computing 64 x BN of the 128 x BN CTA tile with wgmma.m64nBNk8.f32.tf32.tf32 from shared
//               memory descriptors, then the fused epilogue (alpha, beta, bias, activation, any C strides),
//               staged through shared memory so that C is written in float4 runs.
//
// Packed layout. An operand with rows x (m for A, n for B) and depth k is stored as
//   [batch][x tile][k tile][part][row in tile][128 bytes]
// where a k tile is BK = 32 values (one 128-byte row), part 0 is big and part 1 is small. Inside a tile,
// the 16-byte chunk c (k = 4c .. 4c+3) of row r is stored at chunk c ^ (r % 8): the 128-byte swizzle
// (SWIZZLE_128B), so the eight rows of a core-matrix group hit distinct banks. wgmma's descriptor for a
// K-major SWIZZLE_128B operand: start address >> 4, stride byte offset 1024 (8 rows of 128 bytes) between
// 8-row groups, leading byte offset unused, layout type 1; the k8 steps inside a 128-byte row advance the
// start address by 32 bytes (the hardware applies the XOR to the final address, so tiles are 1024-aligned).
//
// 3xTF32 accuracy. a * b ~ a_big b_big + a_big b_small + a_small b_big (small * small, ~2^-22 relative,
// dropped). The tensor core truncates (rounds toward zero) its accumulation at every instruction, so a
// running sum kept in the tensor core drifts with K. Each k tile's products therefore go into a zeroed
// accumulator, the two correction products of all four k8 steps first (their truncation is ~2^-11 below the
// result's) and the four big * big products last, and the tile's sum is added to an FP32 running sum with
// an ordinary round-to-nearest add (Ootomo & Yokota 2022): four truncations per 32 values of k. Two tile
// accumulators alternate so that the tensor core never waits for those adds: tile t's wgmmas run while tile
// t-1's sum is added. 3 x 64 accumulator registers per thread, which is why the 3xTF32 tile is 128 x 128.
//
// Napkin maths, 4096^3 3xTF32: 3 * 2 * 4096^3 = 412 GFLOP of TF32 tensor work (datasheet dense peak ~495
// TFLOPS on H100/H200 at boost clock: ~0.83 ms, so 3xTF32 is bounded near 165 effective TFLOPS). Packing
// reads 128 MB and writes 256 MB (~0.1 ms at HBM speed). The main loop streams 64 KB per 128 x 128 x 32 stage
// (A and B, big and small) from L2; the kernel is tensor-bound, not L2-bound (see bench/gemm/DESIGN.md
// (wgmma)).
//
// Built for sm_90a only (CMakeLists.txt compiles this file with -gencode=arch=compute_90a,code=sm_90a): the
// kernel bodies are empty in any other device pass, and the launcher runs only on compute capability 9.0.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "minitensor/ops/gemm/detail/device.cuh"
#include "minitensor/ops/gemm/detail/dispatch.h"
#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/ops/gemm/detail/launchers.h"
#include "minitensor/ops/gemm/detail/tensor_map.h"
#include "minitensor/ops/gemm/detail/wgmma_ptx.cuh"
#include "minitensor/ops/gemm/tensorcore/wgmma.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail::gemm {

namespace {

constexpr int kBM = 128;            // CTA tile M: two consumer warpgroups of 64 rows
constexpr int kBK = 32;             // CTA tile K: one 128-byte swizzle row of TF32 per operand row
constexpr int kRowBytes = 128;      // bytes of one packed row of one k tile
constexpr int kThreads = 384;       // producer warpgroup + two consumer warpgroups
constexpr int kPackRows = 64;       // rows per pack block
constexpr int kProducerRegs = 40;   // setmaxnreg: the producer needs few registers...
constexpr int kConsumerRegs = 232;  // ...so the consumers get 232 (128*40 + 256*232 <= 64K registers)
constexpr int kMinSplitKTiles = 2;  // the dispatcher splits K only into shares of at least this many k tiles
// k tiles of a B packed ahead of time that a CTA asks L2 for while the kernel before it still runs: the
// ring's first fills, not the whole range (a wave of CTAs each fetching all of theirs would overflow L2).
constexpr int kPrefetchKTiles = 8;
// The wave model of 3xTF32 grids over a wave: a CTA's fixed cost (pipeline fill, epilogue, cluster reduction)
// in elements of K, and the gain a split must promise over the unsplit grid (bench/gemm/DESIGN.md, wgmma).
constexpr double kWaveFixedK = 300;
constexpr double kWaveSplitMinGain = 1.03;
// Under a wave, 3xTF32 weighs splits past a cluster's 8 added by the reduce kernel: that kernel's cost in the
// same elements of K (bench/gemm/DESIGN.md, wgmma).
constexpr double kReduceKernelFixedK = 80;

// Tiling parameters of gemm_wgmma:
//   BN      CTA tile N (the wgmma N); BM = 128, BK = 32 are fixed (kBM, kBK)
//   X3      3xTF32 (big and small parts, three products) instead of TF32
//   STAGES  depth of the shared-memory ring
template <int BN, bool X3, int STAGES>
struct WgShape {
  static constexpr int kParts = X3 ? 2 : 1;
  static constexpr int kABytes = kParts * kBM * kRowBytes;  // one stage of A: [part][128 rows][128 bytes]
  static constexpr int kBBytes = kParts * BN * kRowBytes;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kAcc = BN / 2;  // f32 accumulators per thread for m64nBN
  // Ring, then full and empty mbarriers, plus slack to align the ring to 1024 bytes (the swizzle atom).
  static constexpr std::size_t kSmemBytes = std::size_t(STAGES) * kStageBytes + 16 * STAGES + 1024;
  static_assert(BN == 128 || BN == 256, "wgmma tiles here are m64n128 or m64n256");
  static_assert(!X3 || BN == 128, "3xTF32 keeps three accumulator sets: 3 * BN/2 registers must fit in 232");
  static_assert(kBBytes % 16 == 0 && kABytes % 16 == 0, "bulk copies move multiples of 16 bytes");
  static_assert(kSmemBytes <= 227 * 1024, "the ring must fit the 227 KB a Hopper block can opt into");
};

struct WgArgs {
  const char* a_pack = nullptr;                       // packed A: [batch][tiles_m][k_tiles][part][128][128 B]
  const char* b_pack = nullptr;                       // packed B: [batch][tiles_n][k_tiles][part][BN][128 B]
  // A fetched raw (the kernel's A_RAW): the tensor map's batch coordinate of entry b is b * this (0: A is
  // broadcast).
  int a_map_batch = 0;
  std::int64_t a_batch_bytes = 0, b_batch_bytes = 0;  // 0: the operand is broadcast over the batch
  int tiles_m = 0, tiles_n = 0, k_tiles = 0;
  int k_tiles_per_split = 0;    // split K (gridDim.z > 1): split z runs k tiles [z, z + 1) * this
  bool c_vec4 = false;          // C rows contiguous along n, 16-byte aligned: float4 loads and stores
  bool b_packed_ahead = false;  // b_pack is a WgmmaPackedB, not written by the kernel before this one
  // Split K added by the second kernel: split z stores its raw tile into plane (z * batch + b) of this
  // [split][batch][m][n] workspace (launch_splitk_reduce's layout). Null: the splits are one cluster.
  float* ws = nullptr;
};

#if defined(MT_WGMMA_DEVICE)
using namespace wgmma_ptx;  // the kernels below are written in these wrappers
#endif

// ---------------------------------------------------------------- pack

// One operand for the pack kernel: src(x, k) = src[batch * sb + x * sx + k * sk], x < n_x, written to `dst`
// in tiles of `tile_rows` rows (dst_batch_elems floats per batch entry; `batches` 1 for a broadcast one).
struct PackOperand {
  const float* src = nullptr;
  std::int64_t sx = 0, sk = 0, sb = 0;
  int n_x = 0, tile_rows = 0, batches = 0;
  int blocks = 0;       // grid blocks along x: padded rows / kPackRows
  bool k_fast = false;  // lanes walk k (the smaller stride) when reading
  float* dst = nullptr;
  std::int64_t dst_batch_elems = 0;
};

// Packs both operands in one launch: blocks [0, a.blocks) of the grid's x take A, the rest B. One block
// packs 64 rows x 32 k of one operand (a quarter or half of a tile's k tile): it reads them through the
// strides into shared memory (coalesced along whichever of x and k is contiguous), then writes 16-byte
// chunks, swizzled, as big (and small) parts. Memory bound: 4 bytes read and 4 * PARTS written per element.
// Rows >= n_x and k >= n_k are written as zeros.
template <int PARTS>
__global__ void __launch_bounds__(256) wgmma_pack(PackOperand a, PackOperand b, int n_k, int k_tiles) {
#if defined(MT_WGMMA_DEVICE)
  pdl_launch_dependents();  // the GEMM after it may start its blocks; they wait for this grid's writes
  pdl_wait();               // launched to overlap the kernel before it (launch_pack): its writes first
  __shared__ float tile[kPackRows][kBK + 1];
  const bool is_a = static_cast<int>(blockIdx.x) < a.blocks;
  const PackOperand& op = is_a ? a : b;
  const float* src = op.src;
  const std::int64_t sx = op.sx, sk = op.sk, sb = op.sb;
  const int n_x = op.n_x, tile_rows = op.tile_rows, batches = op.batches;
  const bool k_fast = op.k_fast;
  float* dst = op.dst;
  const std::int64_t dst_batch_elems = op.dst_batch_elems;
  const int t = threadIdx.x;
  const int r0 = (static_cast<int>(blockIdx.x) - (is_a ? 0 : a.blocks)) * kPackRows;  // first padded row
  const int x_tile = r0 / tile_rows;
  for (int b = blockIdx.z; b < batches; b += gridDim.z) {
    const float* s = src + b * sb;
    float* d = dst + b * dst_batch_elems;
    for (int kt = blockIdx.y; kt < k_tiles; kt += gridDim.y) {
      const int k0 = kt * kBK;
      if (k_fast) {  // lanes walk k: contiguous rows of row-major A / transposed B
        const int k = t % 32;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int x = t / 32 + 8 * i;
          const bool ok = r0 + x < n_x && k0 + k < n_k;
          tile[x][k] = ok ? s[(r0 + x) * sx + static_cast<std::int64_t>(k0 + k) * sk] : 0.f;
        }
      } else {  // lanes walk x: row-major B, transposed A
        const int x = t % 64;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int k = t / 64 + 4 * i;
          const bool ok = r0 + x < n_x && k0 + k < n_k;
          tile[x][k] = ok ? s[(r0 + x) * sx + static_cast<std::int64_t>(k0 + k) * sk] : 0.f;
        }
      }
      __syncthreads();
      // 64 rows x 8 chunks of 4: lanes cover whole 128-byte rows, so the stores coalesce.
      float* tile_base = d + (static_cast<std::int64_t>(x_tile) * k_tiles + kt) * PARTS * tile_rows * kBK;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int c = t + 256 * i;
        const int row = c / 8, ch = c % 8;
        const int rr = (r0 + row) % tile_rows;
        const float* v = &tile[row][4 * ch];
        const float big[4] = {to_tf32(v[0]), to_tf32(v[1]), to_tf32(v[2]), to_tf32(v[3])};
        float* out = tile_base + rr * kBK + ((ch ^ (rr % 8)) * 4);
        store16(out, big);
        if constexpr (PARTS == 2) {
          // x - big is exact in FP32; an infinite big keeps small at 0 so that inf * finite stays inf.
          float small[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) small[e] = isfinite(big[e]) ? to_tf32(v[e] - big[e]) : 0.f;
          store16(out + tile_rows * kBK, small);
        }
      }
      __syncthreads();
    }
  }
#endif  // MT_WGMMA_DEVICE
}

// ---------------------------------------------------------------- the GEMM

// A_RAW (TF32 only): A fetched raw through `map_a` (boxes of 32 k x 128 rows, 128-byte swizzle) and
// rounded on its way into registers; otherwise packed by wgmma_pack and `map_a` unused.
template <int BN, bool X3, int STAGES, bool A_RAW>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_wgmma(const __grid_constant__ CUtensorMap map_a, Problem p, WgArgs args) {
#if defined(MT_WGMMA_DEVICE)
  static_assert(!(X3 && A_RAW), "3xTF32 reads both operands from shared memory");
  using S = WgShape<BN, X3, STAGES>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t s_base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const std::uint32_t s_a = s_base;                      // STAGES x kABytes
  const std::uint32_t s_b = s_a + STAGES * S::kABytes;   // STAGES x kBBytes
  const std::uint32_t full = s_b + STAGES * S::kBBytes;  // STAGES mbarriers: stage landed
  const std::uint32_t empty = full + 8 * STAGES;         // STAGES mbarriers: stage consumed

  const int wg = threadIdx.x / 128;
  int tile_m, tile_n;
  raster(blockIdx.x, args.tiles_m, args.tiles_n, tile_m, tile_n);
  const int batch = blockIdx.y;
  // This CTA's k tiles: all of them, or split z's share (the splits of a tile are one cluster).
  const int kt0 = min(args.k_tiles, static_cast<int>(blockIdx.z) * args.k_tiles_per_split);
  const int k_tiles = gridDim.z > 1 ? min(args.k_tiles - kt0, args.k_tiles_per_split) : args.k_tiles;
  constexpr int kLd = BN + 8;  // row stride of the epilogue's staged tile: float2 stores without conflicts
  float* stage = reinterpret_cast<float*>(smem_raw + (s_base - smem_u32(smem_raw)));
  float* cb = p.c + batch * p.c_sb;

  // Launched to overlap the kernel before it (run_wgmma): the next kernel may start its blocks now (they wait
  // for this grid's writes); this one sets up, fetches the first k tiles of a B packed ahead of time into L2
  // (the operand that kernel cannot be writing), and waits for that kernel's writes before reading anything.
  pdl_launch_dependents();
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, 2 * 4);  // one arrival per consumer warp
    }
    fence_mbar_init();
    if (args.b_packed_ahead && k_tiles > 0)
      bulk_prefetch_l2(args.b_pack + batch * args.b_batch_bytes +
                           (static_cast<std::int64_t>(tile_n) * args.k_tiles + kt0) * S::kBBytes,
                       static_cast<std::uint32_t>(min(k_tiles, kPrefetchKTiles)) * S::kBBytes);
  }
  __syncthreads();
  pdl_wait();

  if (wg == 0) {
    // ------------------------------------------------ producer
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      // A fetched raw lands as whole boxes (zeros outside the matrix): the same byte count.
      [[maybe_unused]] const std::int64_t a_at =
          (static_cast<std::int64_t>(tile_m) * args.k_tiles + kt0) * S::kABytes;
      const std::int64_t b_at = (static_cast<std::int64_t>(tile_n) * args.k_tiles + kt0) * S::kBBytes;
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % STAGES;
        const std::uint32_t parity = (kt / STAGES) & 1;
        mbar_wait(empty + 8 * s, parity ^ 1);  // a fresh barrier counts its previous phase as complete
        mbar_expect_tx(full + 8 * s, S::kStageBytes);
        if constexpr (A_RAW)
          tma_load_3d(s_a + s * S::kABytes, &map_a, (kt0 + kt) * kBK, tile_m * kBM, batch * args.a_map_batch,
                      full + 8 * s);
        else
          bulk_load(s_a + s * S::kABytes,
                    args.a_pack + batch * args.a_batch_bytes + a_at + std::int64_t{kt} * S::kABytes,
                    S::kABytes, full + 8 * s);
        bulk_load(s_b + s * S::kBBytes,
                  args.b_pack + batch * args.b_batch_bytes + b_at + std::int64_t{kt} * S::kBBytes, S::kBBytes,
                  full + 8 * s);
      }
    }
    __syncwarp();
    if (gridDim.z > 1 && args.ws == nullptr) {  // the cluster reduction's two barriers (consumers below)
      cluster_sync();
      cluster_sync();
    }
  } else {
    // ------------------------------------------------ consumers
    setmaxnreg_inc<kConsumerRegs>();
    const int cw = wg - 1;  // which 64 rows of the tile
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const std::uint32_t a_off = cw * 64 * kRowBytes;
    auto release = [&](int s) {
      if (lane == 0) mbar_arrive(empty + 8 * s);
      __syncwarp();  // the warp reconverges before the next .aligned wgmma instruction
    };

    float acc[S::kAcc];
#pragma unroll
    for (int i = 0; i < S::kAcc; ++i) acc[i] = 0.f;

    if constexpr (X3) {
      float t0[S::kAcc], t1[S::kAcc];
#pragma unroll
      for (int i = 0; i < S::kAcc; ++i) t0[i] = t1[i] = 0.f;
      // Tile kt's products into `cur` (zeroed by its first product).
      auto issue = [&](int kt, float(&cur)[S::kAcc]) {
        const int s = kt % STAGES;
        mbar_wait(full + 8 * s, (kt / STAGES) & 1);
        __syncwarp();
        const std::uint32_t a_big = s_a + s * S::kABytes + a_off, a_small = a_big + kBM * kRowBytes;
        const std::uint32_t b_big = s_b + s * S::kBBytes, b_small = b_big + BN * kRowBytes;
        const std::uint64_t dab = smem_desc(a_big), das = smem_desc(a_small);
        const std::uint64_t dbb = smem_desc(b_big), dbs = smem_desc(b_small);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < kBK / 8; ++ks) {  // +2 in the descriptor = +32 bytes = the next k8 step
          wgmma_tf32<BN>(cur, dab + 2 * ks, dbs + 2 * ks, ks == 0 ? 0 : 1);
          wgmma_tf32<BN>(cur, das + 2 * ks, dbb + 2 * ks, 1);
        }
#pragma unroll
        for (int ks = 0; ks < kBK / 8; ++ks) wgmma_tf32<BN>(cur, dab + 2 * ks, dbb + 2 * ks, 1);
        wg_commit();
      };
      // Tile kt-1 (in `prev`) is done once at most the newest group (tile kt) is in flight: fold it into acc
      // and hand its stage back.
      auto fold = [&](int kt_prev, float(&prev)[S::kAcc]) {
        wg_wait<1>();
        fence_regs(prev);
#pragma unroll
        for (int i = 0; i < S::kAcc; ++i) acc[i] += prev[i];
        release(kt_prev % STAGES);
      };
      if (k_tiles > 0) {
        issue(0, t0);
        int kt = 1;
        for (; kt + 1 < k_tiles; kt += 2) {
          issue(kt, t1);
          fold(kt - 1, t0);
          issue(kt + 1, t0);
          fold(kt, t1);
        }
        if (kt < k_tiles) {
          issue(kt, t1);
          fold(kt - 1, t0);
          wg_wait<0>();
          fence_regs(t1);
#pragma unroll
          for (int i = 0; i < S::kAcc; ++i) acc[i] += t1[i];
        } else {
          wg_wait<0>();
          fence_regs(t0);
#pragma unroll
          for (int i = 0; i < S::kAcc; ++i) acc[i] += t0[i];
        }
      }
    } else if constexpr (A_RAW) {
      // A's fragments from registers: thread (warp w, lane l) holds rows 16w + l/4 (+ 8) and k columns l%4
      // (+ 4) of each k8 step (a0..a3: (r, c), (r + 8, c), (r, c + 4), (r + 8, c + 4)), read from the raw
      // stage through the swizzle (row r's chunk j sits at j ^ (r % 8), and r % 8 = l/4) and rounded. The
      // eight rows a warp reads at once land in eight distinct chunks: no bank conflicts. A wgmma reads its
      // A registers until it completes and one tile stays in flight, so two fragment sets alternate.
      const std::uint32_t row0 = s_a + a_off + (warp * 16 + lane / 4) * kRowBytes + (lane % 4) * 4;
      const int sw = lane / 4;
      std::uint32_t f0[kBK / 8][4], f1[kBK / 8][4];
      auto issue = [&](int kt, std::uint32_t(&f)[kBK / 8][4]) {
        const int s = kt % STAGES;
        mbar_wait(full + 8 * s, (kt / STAGES) & 1);
        __syncwarp();
        const std::uint32_t r0 = row0 + s * S::kABytes, r8 = r0 + 8 * kRowBytes;
#pragma unroll
        for (int ks = 0; ks < kBK / 8; ++ks) {
          const std::uint32_t c0 = ((2 * ks) ^ sw) * 16, c4 = ((2 * ks + 1) ^ sw) * 16;
          f[ks][0] = tf32_bits(lds_f32(r0 + c0));
          f[ks][1] = tf32_bits(lds_f32(r8 + c0));
          f[ks][2] = tf32_bits(lds_f32(r0 + c4));
          f[ks][3] = tf32_bits(lds_f32(r8 + c4));
        }
        const std::uint64_t db = smem_desc(s_b + s * S::kBBytes);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < kBK / 8; ++ks) wgmma_tf32_ra<BN>(acc, f[ks], db + 2 * ks);
        wg_commit();
        if (kt > 0) {
          wg_wait<1>();
          release((kt - 1) % STAGES);
        }
      };
      int kt = 0;
      for (; kt + 1 < k_tiles; kt += 2) {
        issue(kt, f0);
        issue(kt + 1, f1);
      }
      if (kt < k_tiles) issue(kt, f0);
      wg_wait<0>();
      fence_regs(acc);
    } else {
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % STAGES;
        mbar_wait(full + 8 * s, (kt / STAGES) & 1);
        __syncwarp();
        const std::uint64_t da = smem_desc(s_a + s * S::kABytes + a_off),
                            db = smem_desc(s_b + s * S::kBBytes);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < kBK / 8; ++ks) wgmma_tf32<BN>(acc, da + 2 * ks, db + 2 * ks, 1);
        wg_commit();
        if (kt > 0) {
          wg_wait<1>();
          release((kt - 1) % STAGES);
        }
      }
      wg_wait<0>();
      fence_regs(acc);
    }

    // Epilogue, staged through shared memory (the ring is idle once both consumer warpgroups are past their
    // last wgmma): the tile is written as [128][BN + 8] floats, then every consumer thread walks it in float4
    // runs along n, so that C is read (beta != 0) and written in whole 128-byte lines and the code stays a
    // short loop. Accumulator 4j + 2h + e of warp w, lane l: row 16w + l/4 + 8h, column 8j + 2(l%4) + e.
    // With split K the staged tiles of the cluster are reduced below instead.
    consumer_sync();  // both warpgroups' wgmmas have finished reading the ring
    {
      float* frag = stage + (cw * 64 + warp * 16 + lane / 4) * kLd + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<float2*>(frag + 8 * h * kLd + 8 * j) =
              make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
    if (args.ws != nullptr) {
      // Split K added by the second kernel: the raw tile into this split's plane of the workspace.
      consumer_sync();
      float* w = args.ws + (static_cast<std::int64_t>(blockIdx.z) * gridDim.y + batch) * p.m * p.n;
#pragma unroll 2
      for (int q = threadIdx.x - 128; q < kBM * BN / 4; q += 256) {
        const int r = q / (BN / 4), c = (q % (BN / 4)) * 4;
        const float4 v = *reinterpret_cast<const float4*>(stage + r * kLd + c);
        const float vals[4] = {v.x, v.y, v.z, v.w};
        store_partial<4>(w, p.m, p.n, tile_m * kBM + r, tile_n * BN + c, vals);
      }
    } else if (gridDim.z > 1) {
      // Split K: the cluster's CTAs add their staged tiles. The producers take part in both barriers (in
      // their own branch: code shared by both warpgroups would be held to the producer's 40 registers).
      cluster_sync();
      cluster_reduce_store<kBM, BN, kLd, 256>(p, cb, stage, tile_m * kBM, tile_n * BN, args.c_vec4,
                                              threadIdx.x - 128);
      __syncwarp();
      cluster_sync();  // no CTA leaves while a peer may still read its shared memory
    } else {
      consumer_sync();
      const int ctid = threadIdx.x - 128;
#pragma unroll 2
      for (int q = ctid; q < kBM * BN / 4; q += 256) {
        const int r = q / (BN / 4), c = (q % (BN / 4)) * 4;
        const float4 v = *reinterpret_cast<const float4*>(stage + r * kLd + c);
        const float vals[4] = {v.x, v.y, v.z, v.w};
        store_run<4>(p, cb, tile_m * kBM + r, tile_n * BN + c, vals, args.c_vec4);
      }
    }
  }
  __syncwarp();
#endif  // MT_WGMMA_DEVICE
}

// ---------------------------------------------------------------- launchers

template <class Kern>
void allow_smem_once(Kern* kernel, std::size_t bytes, int device) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;
  std::lock_guard<std::mutex> lock(mutex);
  if (done.insert({reinterpret_cast<const void*>(kernel), device}).second)
    MT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Which of x and k to walk across lanes when reading an operand: the one with the smaller stride.
bool walk_k(std::int64_t sx, std::int64_t sk) {
  const std::int64_t ax = sx < 0 ? -sx : sx, ak = sk < 0 ? -sk : sk;
  return ak == 1 || (ax != 1 && ak <= ax);
}

template <int PARTS>
PackOperand pack_operand(const float* src, std::int64_t sx, std::int64_t sk, std::int64_t sb, int n_x,
                         int tiles, int tile_rows, int k_tiles, int batches, float* dst) {
  PackOperand op;
  op.src = src, op.sx = sx, op.sk = sk, op.sb = sb;
  op.n_x = n_x, op.tile_rows = tile_rows, op.batches = batches;
  op.blocks = tiles * (tile_rows / kPackRows);
  op.k_fast = walk_k(sx, sk);
  op.dst = dst;
  op.dst_batch_elems = static_cast<std::int64_t>(tiles) * tile_rows * k_tiles * kBK * PARTS;
  return op;
}

template <int PARTS>
void launch_pack(const PackOperand& a, const PackOperand& b, int n_k, int k_tiles, cudaStream_t stream) {
  const dim3 grid(a.blocks + b.blocks, std::min(k_tiles, 65535),
                  std::min(std::max(a.batches, b.batches), 65535));
  LaunchConfig launch(grid, dim3(256, 1, 1), 0, stream);
  launch.overlap_previous_kernel();
  MT_CUDA_CHECK(cudaLaunchKernelEx(&launch.cfg, wgmma_pack<PARTS>, a, b, n_k, k_tiles));
}

// Whether a launch fetches A raw (the kernel's A_RAW) instead of packing it: TF32, an A contiguous along k
// in 16-byte aligned rows, and the driver's descriptor encoder reachable.
bool a_fetched_raw(const Problem& p, bool x3) {
  return !x3 && tma_a_ok(p) && tensor_map_encoder_reachable();
}

template <int BN, bool X3, int STAGES>
void run_wgmma(const Problem& p, int split, bool by_kernel, cudaStream_t stream) {
  using S = WgShape<BN, X3, STAGES>;
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  const bool a_raw = a_fetched_raw(p, X3);
  auto kernel = a_raw ? gemm_wgmma<BN, X3, STAGES, !X3> : gemm_wgmma<BN, X3, STAGES, false>;
  allow_smem_once(kernel, S::kSmemBytes, device);

  WgArgs args;
  args.tiles_m = (p.m + kBM - 1) / kBM;
  args.tiles_n = (p.n + BN - 1) / BN;
  args.k_tiles = (p.k + kBK - 1) / kBK;
  // No empty splits: each gets at least one k tile.
  split = std::max(1, std::min(split, args.k_tiles));
  args.k_tiles_per_split = (args.k_tiles + split - 1) / split;
  split = args.k_tiles > 0 ? (args.k_tiles + args.k_tiles_per_split - 1) / args.k_tiles_per_split : 1;
  const int batches_a = p.a_sb == 0 ? 1 : p.batch, batches_b = p.b_sb == 0 ? 1 : p.batch;
  const WgmmaPackedB* pb = p.b_packed;
  const bool b_ready = pb != nullptr && pb->b == p.b && pb->b_sk == p.b_sk && pb->b_sn == p.b_sn &&
                       pb->n == p.n && pb->k == p.k && pb->bn == BN && pb->x3 == X3 && batches_b == 1;
  // Bytes of the operands packed now (none for an A fetched raw or a B packed ahead).
  const std::int64_t a_bytes = a_raw ? 0 : std::int64_t{args.tiles_m} * args.k_tiles * S::kABytes;
  const std::int64_t b_bytes = std::int64_t{args.tiles_n} * args.k_tiles * S::kBBytes;
  // The stream's pack scratch (kept per stream, and apart for launches being captured into a CUDA graph).
  const std::size_t pack_bytes =
      static_cast<std::size_t>(a_bytes * batches_a + (b_ready ? 0 : b_bytes * batches_b));
  char* base = pack_bytes > 0 ? reinterpret_cast<char*>(pack_scratch(pack_bytes, stream)) : nullptr;
  args.a_pack = base;
  args.b_pack = b_ready ? static_cast<const char*>(pb->storage.data()) : base + a_bytes * batches_a;
  args.a_batch_bytes = batches_a > 1 ? a_bytes : 0;
  args.b_batch_bytes = batches_b > 1 ? b_bytes : 0;
  args.b_packed_ahead = b_ready;
  const std::uintptr_t c_addr = reinterpret_cast<std::uintptr_t>(p.c);
  args.c_vec4 = p.c_sn == 1 && p.c_sm % 4 == 0 && (p.c_sb % 4 == 0 || p.batch == 1) && c_addr % 16 == 0;

  CUtensorMap map_a{};
  if (a_raw) {
    map_a = tensor_map(p.a, p.m, p.k, tma_lda(p), p.batch, p.a_sb, kBM, kBK, CU_TENSOR_MAP_SWIZZLE_128B);
    args.a_map_batch = p.batch > 1 && p.a_sb != 0 ? 1 : 0;
  }

  if (args.k_tiles > 0 && pack_bytes > 0)
    launch_pack<S::kParts>(
        a_raw ? PackOperand{}
              : pack_operand<S::kParts>(p.a, p.a_sm, p.a_sk, p.a_sb, p.m, args.tiles_m, kBM, args.k_tiles,
                                        batches_a, reinterpret_cast<float*>(base)),
        b_ready ? PackOperand{}
                : pack_operand<S::kParts>(p.b, p.b_sn, p.b_sk, p.b_sb, p.n, args.tiles_n, BN, args.k_tiles,
                                          batches_b, reinterpret_cast<float*>(base + a_bytes * batches_a)),
        p.k, args.k_tiles, stream);

  by_kernel = by_kernel && split > 1;
  if (by_kernel)
    args.ws = split_scratch(sizeof(float) * static_cast<std::size_t>(split) * p.batch * p.m * p.n, stream);
  LaunchConfig launch(dim3(args.tiles_m * args.tiles_n, p.batch, split), dim3(kThreads, 1, 1), S::kSmemBytes,
                      stream, dim3(1, 1, by_kernel ? 1 : split));
  launch.overlap_previous_kernel();
  MT_CUDA_CHECK(cudaLaunchKernelEx(&launch.cfg, kernel, map_a, p, args));
  if (by_kernel) launch_splitk_reduce(p, args.ws, split, stream, /*overlap=*/true);
}

// The built configurations.
bool built(const WgmmaConfig& c, MathMode math) {
  if (c.split < 1 || c.split > (c.by_kernel ? kMaxKernelSplit : kMaxClusterSplit) ||
      (c.split > 1 && c.bn != 128))
    return false;
  if (math == MathMode::TF32x3) return c.bn == 128;
  return math == MathMode::TF32 && (c.bn == 128 || c.bn == 256);
}

void launch_chunk(const Problem& p, MathMode math, const WgmmaConfig& c, cudaStream_t stream) {
  if (math == MathMode::TF32x3) return run_wgmma<128, true, 3>(p, c.split, c.by_kernel, stream);
  if (c.bn == 256) return run_wgmma<256, false, 4>(p, 1, false, stream);
  return run_wgmma<128, false, 6>(p, c.split, c.by_kernel, stream);
}

}  // namespace

bool wgmma_kernels_usable() {
  // The sm_90a image must be in the binary (and loadable on this device).
  static const bool loadable = [] {
    cudaFuncAttributes attr;
    const bool ok = cudaFuncGetAttributes(&attr, gemm_wgmma<128, true, 3, false>) == cudaSuccess;
    if (!ok) (void)cudaGetLastError();
    return ok;
  }();
  return loadable;
}

bool wgmma_can_implement(const Problem& p, MathMode math, const DeviceModel& model) {
  if (math != MathMode::TF32 && math != MathMode::TF32x3) return false;
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 0) return false;
  return model.wgmma_kernels;
}

bool wgmma_can_implement(const Problem& p, MathMode math) {
  return wgmma_can_implement(p, math, DeviceModel::current());
}

// TF32 takes 128 x 256 tiles once they still give about three quarters of a wave of CTAs, else 128 x 128 for
// more CTAs; 3xTF32 has only 128 x 128 (three accumulator sets). Under a wave of 128 x 128 tiles, K is split
// over a cluster of up to 8 CTAs per tile: the largest split whose clusters are all resident at once, with at
// least kMinSplitKTiles k tiles each. Over a wave, 3xTF32 weighs splits of 2 and 3 on a wave model: a split
// of s costs its waves (ctas * s over the slots of s-CTA clusters, rounded up) times K / s + kWaveFixedK, so
// a thin last wave (1024 x 2304: 144 tiles on 132 SMs) is traded for more, shorter CTAs where that pays by
// kWaveSplitMinGain. Under a wave of tiles whose clusters of 8 leave SMs idle, 3xTF32 weighs splits of 12-32
// added by the reduce kernel, costed as K / s + kWaveFixedK + kReduceKernelFixedK, against the cluster split
// (128 x 768 x 3072: 6 tiles, split 16 by the kernel). See bench/gemm/DESIGN.md (wgmma).
WgmmaConfig wgmma_choose(const Problem& p, MathMode math, const DeviceModel& model) {
  WgmmaConfig c{128, 1};
  const std::int64_t sms = model.sm_count;
  const std::int64_t tiles_m = (p.m + kBM - 1) / kBM;
  if (math == MathMode::TF32) {
    const std::int64_t ctas = tiles_m * ((p.n + 255) / 256) * p.batch;
    // N >= 256: a 256-wide tile on narrower N is mostly padding.
    if (p.n >= 256 && 4 * ctas >= 3 * sms) c.bn = 256;
  }
  if (c.bn == 128 && wgmma_can_implement(p, math, model)) {
    const std::int64_t ctas = tiles_m * ((p.n + 127) / 128) * p.batch;
    const int k_tiles = (p.k + kBK - 1) / kBK;
    // A CTA takes a whole SM (its ring), so clusters of s resident at once are the slots of size s over s.
    for (int s : {2, 3, 4, 6, 8})
      if (ctas * s <= sms && k_tiles / s >= kMinSplitKTiles && ctas <= model.slots(s) / s) c.split = s;
    if (math == MathMode::TF32x3 && ctas * 8 < sms) {
      // Fewer tiles than a cluster split fills the card with (the projections of 128 tokens): K split over
      // more CTAs, added by the reduce kernel, where the shorter k range pays for that kernel.
      double best = (static_cast<double>(p.k) / c.split + kWaveFixedK) * kWaveSplitMinGain;
      for (int s : {12, 16, 24, 32}) {
        const double cost = static_cast<double>(p.k) / s + kWaveFixedK + kReduceKernelFixedK;
        if (s <= kMaxKernelSplit && ctas * s <= sms && k_tiles / s >= kMinSplitKTiles && cost < best)
          best = cost, c.split = s, c.by_kernel = true;
      }
    }
    if (math == MathMode::TF32x3 && ctas > sms) {
      const auto cost = [&](int s) {
        const std::int64_t slots = model.slots(s);
        const double waves = static_cast<double>((ctas * s + slots - 1) / slots);
        return waves * (static_cast<double>(p.k) / s + kWaveFixedK);
      };
      double best = cost(1) / kWaveSplitMinGain;
      for (int s : {2, 3})
        if (k_tiles / s >= kMinSplitKTiles && cost(s) < best) best = cost(s), c.split = s;
    }
  }
  return c;
}

WgmmaConfig wgmma_choose(const Problem& p, MathMode math) {
  const DeviceModel model = DeviceModel::current();
  if (model.sm_count == 0) return WgmmaConfig{128, 1};  // no device
  return wgmma_choose(p, math, model);
}

std::string wgmma_config_name(const WgmmaConfig& c, MathMode math) {
  return "wgmma_128x" + std::to_string(c.bn) + "x32" +
         (c.split > 1 ? "_splitk" + std::to_string(c.split) + (c.by_kernel ? "" : "_dsmem") : "") + "_" +
         math_mode_name(math);
}

void launch_wgmma(const Problem& p, MathMode math, cudaStream_t stream) {
  launch_wgmma(p, math, wgmma_choose(p, math), stream);
}

void launch_wgmma(const Problem& p, MathMode math, const WgmmaConfig& config, cudaStream_t stream) {
  MT_CHECK(wgmma_can_implement(p, math), InvalidArgument, "gemm: the wgmma kernels cannot run ", p.m, "x",
           p.n, "x", p.k, " (batch ", p.batch, ") in ", math_mode_name(math),
           " here (they need a TF32 mode and a compute capability 9.0 device)");
  WgmmaConfig c = config;
  const WgmmaConfig chosen = wgmma_choose(p, math);
  if (c.bn == 0) c.bn = chosen.bn;
  if (c.split == 0) {
    c.split = c.bn == chosen.bn ? chosen.split : 1;
    c.by_kernel = c.bn == chosen.bn && chosen.by_kernel;
  }
  MT_CHECK(built(c, math), InvalidArgument, "gemm: no wgmma kernel for ", wgmma_config_name(c, math));
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  for_each_batch_chunk(p, [&](const Problem& q) { launch_chunk(q, math, c, stream); });
}

void launch_wgmma_kernel(const Problem& p, const Config& cfg, cudaStream_t stream) {
  // Split K only as chosen by dispatch (in a cluster, or by the reduce kernel); the tile is wgmma_choose's
  // for split 1.
  WgmmaConfig wc;
  wc.split = cfg.split_k;
  wc.by_kernel = cfg.split_k > 1 && cfg.reduce == SplitReduce::Kernel;
  if (cfg.split_k > 1) wc.bn = 128;
  launch_wgmma(p, cfg.math, wc, stream);
}

std::shared_ptr<WgmmaPackedB> wgmma_pack_b(const Problem& p, MathMode math, cudaStream_t stream) {
  if (!wgmma_can_implement(p, math) || (p.batch > 1 && p.b_sb != 0) || p.n <= 0 || p.k <= 0) return nullptr;
  const WgmmaConfig c = wgmma_choose(p, math);
  auto out = std::make_shared<WgmmaPackedB>();
  out->b = p.b, out->b_sk = p.b_sk, out->b_sn = p.b_sn, out->n = p.n, out->k = p.k;
  out->bn = c.bn, out->x3 = math == MathMode::TF32x3;
  const int parts = out->x3 ? 2 : 1;
  const int tiles_n = (p.n + c.bn - 1) / c.bn, k_tiles = (p.k + kBK - 1) / kBK;
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  out->storage = cuda_allocator(device).allocate(
      static_cast<std::size_t>(tiles_n) * k_tiles * parts * c.bn * kRowBytes, stream);
  float* dst = static_cast<float*>(out->storage.data());
  if (out->x3)
    launch_pack<2>(PackOperand{},
                   pack_operand<2>(p.b, p.b_sn, p.b_sk, 0, p.n, tiles_n, c.bn, k_tiles, 1, dst), p.k, k_tiles,
                   stream);
  else
    launch_pack<1>(PackOperand{},
                   pack_operand<1>(p.b, p.b_sn, p.b_sk, 0, p.n, tiles_n, c.bn, k_tiles, 1, dst), p.k, k_tiles,
                   stream);
  return out;
}

}  // namespace mt::detail::gemm
