// Tiled transposes: copies whose source and destination have their unit-stride dims in different places (a
// 2-D transpose, or a permute that moves the innermost dim), batched over the remaining dims.
//
// A block stages a TILE x TILE tile in shared memory: it reads TILE source rows along their unit stride and
// writes TILE destination rows along theirs, so both global sides are coalesced. The tile is padded by one
// element per row: the column-wise shared-memory reads of the write phase then hit 32 different banks.
// For 4-byte elements whose rows are 16-byte aligned, each thread moves a float4 in and a float4 out
// (8 lanes per 128-byte row segment); the padded layout keeps both shared-memory phases conflict-free.
// Napkin maths: 2 * elem_size bytes per element, no arithmetic: copy bandwidth is the target.
#include <cstdint>

#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"
#include "minitensor/tensor/detail/kernels.h"

namespace mt::detail {
namespace {

constexpr int TILE = 32;  // tile edge: one warp spans a tile row of 4-byte elements (128 bytes)
constexpr int ROWS = 8;   // thread rows per block: each thread moves TILE / ROWS elements each way
static_assert(TILE % ROWS == 0, "each thread must move a whole number of tile rows");

// Resident blocks per SM the single-matrix scalar kernel is held to: left alone, the compiler keeps all 16
// loads of a 4-tile block in 104 registers (two blocks per SM, too few bytes in flight).
constexpr int kScalarMinBlocks = 6;

struct Batch {
  StridedLayout src, dst;  // offsets of batch item b in source and destination
  std::int64_t n;
};

// A block moves TILES tiles side by side along the source rows (TILES * TILE contiguous source elements per
// row: more bytes in flight per thread, fewer and longer-lived blocks). src: (n_rows, n_cols), row stride
// src_ld, unit column stride. dst: (n_cols, n_rows), row stride dst_ld. PAD = 0, TILES = 1 is the seed's
// unpadded baseline (a 32-way bank conflict on every read of the write phase). BATCHED: as for the 16-byte
// kernel below.
template <class T, int PAD, int TILES, bool BATCHED>
__global__ void __launch_bounds__(TILE* ROWS, BATCHED ? 1 : kScalarMinBlocks)
    transpose_tile_kernel(T* __restrict__ dst, const T* __restrict__ src, std::int64_t n_rows,
                          std::int64_t n_cols, std::int64_t src_ld, std::int64_t dst_ld,
                          std::int64_t blocks_c, Batch batch) {
  __shared__ T tile[TILES][TILE][TILE + PAD];
  const std::int64_t r0 = (blockIdx.x / blocks_c) * TILE, c0 = (blockIdx.x % blocks_c) * TILE * TILES;
  const int tx = threadIdx.x % TILE, ty = threadIdx.x / TILE;
  // Interior blocks skip the bounds checks; pointers step by whole rows (64-bit index products per element
  // would make this kernel instruction-bound: it moves only 4 bytes per access).
  const bool full = r0 + TILE <= n_rows && c0 + TILE * TILES <= n_cols;
  const std::int64_t src_step = ROWS * src_ld, dst_step = ROWS * dst_ld;
  for (std::int64_t b = blockIdx.y; b < (BATCHED ? batch.n : 1); b += gridDim.y) {
    const T* s = src + (BATCHED ? batch.src.offset(b) : 0) + (r0 + ty) * src_ld + c0 + tx;
    T* d = dst + (BATCHED ? batch.dst.offset(b) : 0) + (c0 + ty) * dst_ld + r0 + tx;
    if (full) {
#pragma unroll
      for (int t = 0; t < TILES; ++t) {
#pragma unroll
        for (int k = 0; k < TILE / ROWS; ++k) tile[t][ty + k * ROWS][tx] = s[k * src_step + t * TILE];
      }
    } else {
#pragma unroll
      for (int t = 0; t < TILES; ++t) {
#pragma unroll
        for (int k = 0; k < TILE / ROWS; ++k) {
          if (r0 + ty + k * ROWS < n_rows && c0 + t * TILE + tx < n_cols) {
            tile[t][ty + k * ROWS][tx] = s[k * src_step + t * TILE];
          }
        }
      }
    }
    __syncthreads();
    if (full) {
#pragma unroll
      for (int t = 0; t < TILES; ++t) {
#pragma unroll
        for (int k = 0; k < TILE / ROWS; ++k)
          d[k * dst_step + t * TILE * dst_ld] = tile[t][tx][ty + k * ROWS];
      }
    } else {
#pragma unroll
      for (int t = 0; t < TILES; ++t) {
#pragma unroll
        for (int k = 0; k < TILE / ROWS; ++k) {
          if (c0 + t * TILE + ty + k * ROWS < n_cols && r0 + tx < n_rows) {
            d[k * dst_step + t * TILE * dst_ld] = tile[t][tx][ty + k * ROWS];
          }
        }
      }
    }
    __syncthreads();
  }
}

// 4-byte elements, 16-byte accesses. 256 threads: per tile, thread t reads source row t / 8 of the tile,
// columns 4 * (t % 8) .. + 3, and writes destination row t / 8, columns 4 * (t % 8) .. + 3. The shared-memory
// bank of element (i, j) is (33 i + j) % 32 = (i + j) % 32: distinct across a warp in both phases.
// Needs n_rows, n_cols, both leading dims and every batch offset divisible by 4, and aligned base pointers.
// A block covers TR x TC tiles: TR * TILE source rows by TC * TILE source columns (longer contiguous runs on
// both sides than one tile: 4 * TC * TILE bytes per source row read, 4 * TR * TILE per destination row
// written); each thread has TR * TC 16-byte loads in flight. The bytes in flight per SM, what a transpose
// needs most, are TR * TC * 16 * 256 per resident block: MIN_BLOCKS caps the registers so that that many
// blocks stay resident (0: no cap). Blocks go row-major, consecutive blocks side by side along the source
// rows. BATCHED: false for a single matrix (batch.n == 1), which then skips the batch offset arithmetic
// (64-bit divisions whose registers would otherwise cost resident blocks).
template <int TR, int TC, int MIN_BLOCKS, bool BATCHED>
__global__ void __launch_bounds__(TILE* ROWS, MIN_BLOCKS)
    transpose_tile_vec4_kernel(float* __restrict__ dst, const float* __restrict__ src, std::int64_t n_rows,
                               std::int64_t n_cols, std::int64_t src_ld, std::int64_t dst_ld,
                               std::int64_t blocks_c, Batch batch) {
  static_assert(TILE * ROWS == TILE * TILE / 4, "one float4 per thread per tile");
  __shared__ float tile[TR * TC][TILE][TILE + 1];
  const std::int64_t br = blockIdx.x / blocks_c, bc = blockIdx.x % blocks_c;
  const std::int64_t r0 = br * TILE * TR, c0 = bc * TILE * TC;
  const int i = threadIdx.x / 8, q = 4 * (threadIdx.x % 8);
  // Interior blocks skip the bounds checks (fewer live registers: more blocks resident).
  const bool full = r0 + TILE * TR <= n_rows && c0 + TILE * TC <= n_cols;
  const std::int64_t s_step = TILE * src_ld, d_step = TILE * dst_ld;
  for (std::int64_t b = blockIdx.y; b < (BATCHED ? batch.n : 1); b += gridDim.y) {
    // This thread's element of tile (0, 0) on each side; tile (tr, tc) is s_step * tr + TILE * tc further
    // along the source and d_step * tc + TILE * tr along the destination.
    const float* s = src + (BATCHED ? batch.src.offset(b) : 0) + (r0 + i) * src_ld + c0 + q;
    float* d = dst + (BATCHED ? batch.dst.offset(b) : 0) + (c0 + i) * dst_ld + r0 + q;
    float4 v[TR * TC];
#pragma unroll
    for (int tr = 0; tr < TR; ++tr) {
#pragma unroll
      for (int tc = 0; tc < TC; ++tc) {
        if (full || (r0 + tr * TILE + i < n_rows && c0 + tc * TILE + q < n_cols)) {
          v[tr * TC + tc] = __ldg(reinterpret_cast<const float4*>(s + tr * s_step + tc * TILE));
        }
      }
    }
#pragma unroll
    for (int t = 0; t < TR * TC; ++t) {
      tile[t][i][q] = v[t].x, tile[t][i][q + 1] = v[t].y, tile[t][i][q + 2] = v[t].z,
      tile[t][i][q + 3] = v[t].w;
    }
    __syncthreads();
#pragma unroll
    for (int tc = 0; tc < TC; ++tc) {
#pragma unroll
      for (int tr = 0; tr < TR; ++tr) {
        const int t = tr * TC + tc;
        if (full || (c0 + tc * TILE + i < n_cols && r0 + tr * TILE + q < n_rows)) {
          *reinterpret_cast<float4*>(d + tc * d_step + tr * TILE) =
              make_float4(tile[t][q][i], tile[t][q + 1][i], tile[t][q + 2][i], tile[t][q + 3][i]);
        }
      }
    }
    __syncthreads();
  }
}

// The seed's transpose: a thread per element, reads coalesced, writes strided by n_rows (one 32-byte sector
// per 4-byte write). A benchmark baseline.
__global__ void transpose_naive_kernel(float* __restrict__ dst, const float* __restrict__ src,
                                       std::int64_t n_rows, std::int64_t n_cols) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n_rows * n_cols;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / n_cols, c = i % n_cols;
    dst[c * n_rows + r] = src[i];
  }
}

// Source columns per block: TILES tiles where the matrix is wide enough, else one.
constexpr int kTiles = 4;

template <class T, int PAD, int MAX_TILES>
void launch_tiles(void* dst, const void* src, std::int64_t n_rows, std::int64_t n_cols, std::int64_t src_ld,
                  std::int64_t dst_ld, const Batch& batch, cudaStream_t stream) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  const std::int64_t blocks_r = (n_rows + TILE - 1) / TILE;
  const int tiles = n_cols >= TILE * MAX_TILES ? MAX_TILES : 1;
  const std::int64_t blocks_c = (n_cols + TILE * tiles - 1) / (TILE * tiles);
  MT_CHECK(blocks_r * blocks_c <= 0x7fffffff, InvalidArgument, "transpose: ", n_rows, " x ", n_cols,
           " needs too many tiles");
  const dim3 grid(static_cast<unsigned>(blocks_r * blocks_c),
                  static_cast<unsigned>(std::min<std::int64_t>(batch.n, 65535)));
  const bool batched = batch.n > 1;
  auto* kernel =
      tiles == MAX_TILES
          ? (batched ? transpose_tile_kernel<T, PAD, MAX_TILES, true>
                     : transpose_tile_kernel<T, PAD, MAX_TILES, false>)
          : (batched ? transpose_tile_kernel<T, PAD, 1, true> : transpose_tile_kernel<T, PAD, 1, false>);
  kernel<<<grid, TILE * ROWS, 0, stream>>>(d, s, n_rows, n_cols, src_ld, dst_ld, blocks_c, batch);
  MT_CUDA_CHECK_LAUNCH();
}

template <int TR, int TC, int MIN_BLOCKS = 0>
void launch_tiles_vec4(void* dst, const void* src, std::int64_t n_rows, std::int64_t n_cols,
                       std::int64_t src_ld, std::int64_t dst_ld, const Batch& batch, cudaStream_t stream) {
  const std::int64_t blocks_r = (n_rows + TILE * TR - 1) / (TILE * TR);
  const std::int64_t blocks_c = (n_cols + TILE * TC - 1) / (TILE * TC);
  MT_CHECK(blocks_r * blocks_c <= 0x7fffffff, InvalidArgument, "transpose: ", n_rows, " x ", n_cols,
           " needs too many tiles");
  const dim3 grid(static_cast<unsigned>(blocks_r * blocks_c),
                  static_cast<unsigned>(std::min<std::int64_t>(batch.n, 65535)));
  auto* kernel = batch.n > 1 ? transpose_tile_vec4_kernel<TR, TC, MIN_BLOCKS, true>
                             : transpose_tile_vec4_kernel<TR, TC, MIN_BLOCKS, false>;
  kernel<<<grid, TILE * ROWS, 0, stream>>>(static_cast<float*>(dst), static_cast<const float*>(src), n_rows,
                                           n_cols, src_ld, dst_ld, blocks_c, batch);
  MT_CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

void launch_padded(void* dst, const void* src, std::size_t elem_size, std::int64_t n_rows,
                   std::int64_t n_cols, std::int64_t src_ld, std::int64_t dst_ld, const Batch& batch,
                   cudaStream_t stream) {
  bool vec = elem_size == 4 && n_rows % 4 == 0 && n_cols % 4 == 0 && src_ld % 4 == 0 && dst_ld % 4 == 0 &&
             aligned16(src) && aligned16(dst);
  for (int d = 0; d < batch.src.rank; ++d) {
    vec = vec && (batch.src.shape[d] == 1 || (batch.src.stride[d] % 4 == 0 && batch.dst.stride[d] % 4 == 0));
  }
  if (vec) {
    // A single matrix: 2 x 4 tiles held to 4 blocks per SM: fewer blocks in flight, so fewer destination rows
    // (DRAM pages) open at once. Batched: 2 x 2 tiles (the batch offset arithmetic holds them to 4 blocks per
    // SM anyway). The tile shapes, block orders and cache operators tried: bench/ops/TRIED.md.
    if (batch.n == 1 && n_rows >= 2 * TILE && n_cols >= 4 * TILE) {
      return launch_tiles_vec4<2, 4, 4>(dst, src, n_rows, n_cols, src_ld, dst_ld, batch, stream);
    }
    if (n_rows >= 2 * TILE && n_cols >= 2 * TILE) {
      return launch_tiles_vec4<2, 2>(dst, src, n_rows, n_cols, src_ld, dst_ld, batch, stream);
    }
    return launch_tiles_vec4<1, 1>(dst, src, n_rows, n_cols, src_ld, dst_ld, batch, stream);
  }
  switch (elem_size) {
    case 1:
      return launch_tiles<std::uint8_t, 1, kTiles>(dst, src, n_rows, n_cols, src_ld, dst_ld, batch, stream);
    case 2:
      return launch_tiles<std::uint16_t, 1, kTiles>(dst, src, n_rows, n_cols, src_ld, dst_ld, batch, stream);
    case 4:
      return launch_tiles<std::uint32_t, 1, kTiles>(dst, src, n_rows, n_cols, src_ld, dst_ld, batch, stream);
    case 8:
      return launch_tiles<std::uint64_t, 1, kTiles>(dst, src, n_rows, n_cols, src_ld, dst_ld, batch, stream);
    // 16-byte elements: four tiles would take 4 x 16.9 KiB of shared memory per block.
    case 16:
      return launch_tiles<uint4, 1, 1>(dst, src, n_rows, n_cols, src_ld, dst_ld, batch, stream);
  }
  MT_THROW(InvalidArgument, "transpose: unsupported element size ", elem_size);
}

Batch single() {
  Batch b;
  b.src.rank = b.dst.rank = 1;
  b.src.shape[0] = b.dst.shape[0] = 1;
  b.n = 1;
  return b;
}

}  // namespace

bool launch_copy_tiled(void* dst, const StridedLayout& dl, const void* src, const StridedLayout& sl,
                       std::size_t elem_size, std::int64_t n, cudaStream_t stream) {
  if (n == 0 || dl.rank != sl.rank) return false;
  int dd = -1, sd = -1;  // the unit-stride dim of each side
  for (int d = 0; d < dl.rank; ++d) {
    if (dl.stride[d] == 1 && dl.shape[d] > 1) dd = d;
    if (sl.stride[d] == 1 && sl.shape[d] > 1) sd = d;
  }
  // Tiles pay off when both unit-stride dims span at least half a tile.
  if (dd < 0 || sd < 0 || dd == sd || dl.shape[dd] < TILE / 2 || dl.shape[sd] < TILE / 2) return false;
  Batch batch;
  batch.n = 1;
  for (int d = 0; d < dl.rank; ++d) {
    if (d == dd || d == sd) continue;
    const int k = batch.src.rank++;
    batch.dst.rank++;
    batch.src.shape[k] = batch.dst.shape[k] = dl.shape[d];
    batch.src.stride[k] = sl.stride[d];
    batch.dst.stride[k] = dl.stride[d];
    batch.n *= dl.shape[d];
  }
  if (batch.src.rank == 0) batch = single();
  // Source rows run along dst's unit dim (dd), source columns along the source's (sd).
  launch_padded(dst, src, elem_size, dl.shape[dd], dl.shape[sd], sl.stride[dd], dl.stride[sd], batch, stream);
  return true;
}

void launch_transpose_2d(TransposeKernel kernel, void* dst, const void* src, std::int64_t n_rows,
                         std::int64_t n_cols, cudaStream_t stream) {
  if (n_rows == 0 || n_cols == 0) return;
  const Batch batch = single();
  switch (kernel) {
    case TransposeKernel::Naive: {
      const int grid = grid_stride_blocks(transpose_naive_kernel, 256, n_rows * n_cols, 256);
      transpose_naive_kernel<<<grid, 256, 0, stream>>>(static_cast<float*>(dst),
                                                       static_cast<const float*>(src), n_rows, n_cols);
      MT_CUDA_CHECK_LAUNCH();
      return;
    }
    case TransposeKernel::SharedNoPad:
      return launch_tiles<std::uint32_t, 0, 1>(dst, src, n_rows, n_cols, n_cols, n_rows, batch, stream);
    case TransposeKernel::SharedPadded:
      return launch_tiles<std::uint32_t, 1, kTiles>(dst, src, n_rows, n_cols, n_cols, n_rows, batch, stream);
    case TransposeKernel::Vec4Wide:
      MT_CHECK(n_rows % 4 == 0 && n_cols % 4 == 0 && aligned16(src) && aligned16(dst), InvalidArgument,
               "transpose: the 16-byte rung needs dims divisible by 4 and 16-byte aligned pointers, got ",
               n_rows, " x ", n_cols);
      return launch_tiles_vec4<1, 4>(dst, src, n_rows, n_cols, n_cols, n_rows, batch, stream);
    case TransposeKernel::Best:
      return launch_padded(dst, src, 4, n_rows, n_cols, n_cols, n_rows, batch, stream);
  }
}

}  // namespace mt::detail
