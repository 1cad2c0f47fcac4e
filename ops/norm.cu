// The fused row normalisation: each row read once into registers (VEC-wide loads, PER per thread, T threads
// per row), its mean and variance (or mean square) reduced over the row's threads, then written scaled and
// shifted. Memory bound: one read and one write of each element. The variance is taken of the centred row
// held in registers (two passes over registers, not E[x^2] - E[x]^2, which cancels), the row held shifted by
// its first element (so the mean is not a sum of large numbers).
#include <cstdint>

#include "minitensor/ops/detail/norm.h"
#include "minitensor/ops/norm.h"
#include "minitensor/runtime/detail/device_primitives.cuh"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/launch.h"

namespace mt::detail {

namespace {

// Rows of up to T * PER * VEC elements. T is 32 (a warp per row, 256 / 32 rows per block) or a multiple of 32
// up to 1024 (a block per row). PRELOAD: the row's weight and bias are loaded with the row, so that their
// latency overlaps the reductions' rather than following them; for grids under a wave, which wait on
// latency (the two copies' registers cost the occupancy that many rows need for bandwidth), and not at 1024
// threads a row, whose 64-register limit they would spill.
template <int T, int PER, int VEC, RowNorm KIND, bool PRELOAD>
__global__ void __launch_bounds__(T < 256 ? 256 : T)
    row_norm(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
             float* __restrict__ y, std::int64_t rows, int d, float eps) {
  constexpr int kRowsPerBlock = T < 256 ? 256 / T : 1;
  __shared__ float red[T >= 64 ? T / 32 : 1];
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / T;
  const int lane = threadIdx.x % T;
  const bool live = row < rows;
  const float* xr = x + row * d;
  // Layer: the row is held shifted by its first element, so the sums are of small numbers when the mean is
  // large against the spread (x - shift is exact for x within a factor of 2 of shift).
  const float shift = KIND == RowNorm::Layer && live ? __ldg(xr) : 0.f;
  float v[PER][VEC];
  float sum = 0.f;
#pragma unroll
  for (int q = 0; q < PER; ++q) {
    const int e = (q * T + lane) * VEC;
    if (live && e < d) {
      if constexpr (VEC == 4) {
        const float4 t = __ldcs(reinterpret_cast<const float4*>(xr + e));
        v[q][0] = t.x - shift, v[q][1] = t.y - shift, v[q][2] = t.z - shift, v[q][3] = t.w - shift;
      } else {
        v[q][0] = __ldcs(xr + e) - shift;
      }
    } else {
#pragma unroll
      for (int c = 0; c < VEC; ++c) v[q][c] = 0.f;
    }
#pragma unroll
    for (int c = 0; c < VEC; ++c) sum += v[q][c];
  }
  constexpr bool kPreload = PRELOAD && T < 1024;
  float wv[kPreload ? PER : 1][VEC], bv[kPreload ? PER : 1][VEC];
  if constexpr (kPreload) {
#pragma unroll
    for (int q = 0; q < PER; ++q) {
      const int e = (q * T + lane) * VEC;
#pragma unroll
      for (int c = 0; c < VEC; ++c) wv[q][c] = bv[q][c] = 0.f;
      if (!live || e >= d) continue;
      if constexpr (VEC == 4) {
        if (w) {
          const float4 t = __ldg(reinterpret_cast<const float4*>(w + e));
          wv[q][0] = t.x, wv[q][1] = t.y, wv[q][2] = t.z, wv[q][3] = t.w;
        }
        if (KIND == RowNorm::Layer && b) {
          const float4 t = __ldg(reinterpret_cast<const float4*>(b + e));
          bv[q][0] = t.x, bv[q][1] = t.y, bv[q][2] = t.z, bv[q][3] = t.w;
        }
      } else {
        if (w) wv[q][0] = __ldg(w + e);
        if (KIND == RowNorm::Layer && b) bv[q][0] = __ldg(b + e);
      }
    }
  }
  // The sum over the row's T threads (all of them get it).
  auto row_sum = [&](float s) {
    s = warp_sum(s);
    if constexpr (T >= 64) {
      __syncthreads();  // red is reused by the second reduction
      if (lane % 32 == 0) red[lane / 32] = s;
      __syncthreads();
      s = 0.f;
#pragma unroll
      for (int i = 0; i < T / 32; ++i) s += red[i];
    }
    return s;
  };
  const float inv_d = 1.f / static_cast<float>(d);
  float mean = 0.f;
  if constexpr (KIND == RowNorm::Layer) mean = row_sum(sum) * inv_d;
  float sq = 0.f;
#pragma unroll
  for (int q = 0; q < PER; ++q) {
    const int e = (q * T + lane) * VEC;
#pragma unroll
    for (int c = 0; c < VEC; ++c) {
      const float t = e < d ? v[q][c] - mean : 0.f;
      sq = fmaf(t, t, sq);
    }
  }
  const float rstd = rsqrtf(row_sum(sq) * inv_d + eps);
  if (!live) return;
  float* yr = y + row * d;
#pragma unroll
  for (int q = 0; q < PER; ++q) {
    const int e = (q * T + lane) * VEC;
    if (e >= d) continue;
    float o[VEC];
#pragma unroll
    for (int c = 0; c < VEC; ++c) {
      o[c] = (v[q][c] - mean) * rstd;
      if constexpr (kPreload) {
        if (w) o[c] *= wv[q][c];
        if (KIND == RowNorm::Layer && b) o[c] += bv[q][c];
      } else {
        if (w) o[c] *= __ldg(w + e + c);
        if (KIND == RowNorm::Layer && b) o[c] += __ldg(b + e + c);
      }
    }
    if constexpr (VEC == 4)
      __stcs(reinterpret_cast<float4*>(yr + e), make_float4(o[0], o[1], o[2], o[3]));
    else
      __stcs(yr + e, o[0]);
  }
}

template <int T, int PER, int VEC, RowNorm KIND>
void run(const float* x, const float* w, const float* b, float* y, std::int64_t rows, int d, float eps,
         cudaStream_t stream) {
  constexpr int kThreads = T < 256 ? 256 : T, kRowsPerBlock = T < 256 ? 256 / T : 1;
  const std::int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const auto kernel =
      blocks < current_sm_count() ? row_norm<T, PER, VEC, KIND, true> : row_norm<T, PER, VEC, KIND, false>;
  kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, w, b, y, rows, d, eps);
  MT_CUDA_CHECK_LAUNCH();
}

// The smallest PER in {1, 2, 4, 8} (16 and 32 for scalar rows of 1024 threads) that covers the row with T
// threads of VEC-wide loads.
template <int T, int VEC, RowNorm KIND>
bool run_per(const float* x, const float* w, const float* b, float* y, std::int64_t rows, int d, float eps,
             cudaStream_t stream) {
  const int per = (d + T * VEC - 1) / (T * VEC);
  if (per <= 1) return run<T, 1, VEC, KIND>(x, w, b, y, rows, d, eps, stream), true;
  if (per <= 2) return run<T, 2, VEC, KIND>(x, w, b, y, rows, d, eps, stream), true;
  if (per <= 4) return run<T, 4, VEC, KIND>(x, w, b, y, rows, d, eps, stream), true;
  if (per <= 8) return run<T, 8, VEC, KIND>(x, w, b, y, rows, d, eps, stream), true;
  if constexpr (T == 1024 && VEC == 1) {  // scalar loads: the longest rows take more per thread
    if (per <= 16) return run<T, 16, VEC, KIND>(x, w, b, y, rows, d, eps, stream), true;
    if (per <= 32) return run<T, 32, VEC, KIND>(x, w, b, y, rows, d, eps, stream), true;
  }
  return false;
}

// A warp per row up to 8 loads per lane, then a block of 256, then of 1024 (row_norm_is_fused: up to 32768
// elements either way); longer rows are not kept.
template <int VEC, RowNorm KIND>
bool dispatch(const float* x, const float* w, const float* b, float* y, std::int64_t rows, int d, float eps,
              cudaStream_t stream) {
  if (d <= 32 * 8 * VEC) return run_per<32, VEC, KIND>(x, w, b, y, rows, d, eps, stream);
  if (d <= 256 * 8 * VEC) return run_per<256, VEC, KIND>(x, w, b, y, rows, d, eps, stream);
  return run_per<1024, VEC, KIND>(x, w, b, y, rows, d, eps, stream);
}

bool aligned16(const void* p) {
  return p == nullptr || (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

}  // namespace

bool launch_row_norm(RowNorm kind, const float* x, const float* weight, const float* bias, float* y,
                     std::int64_t rows, std::int64_t d, float eps, cudaStream_t stream) {
  if (!row_norm_is_fused(d)) return false;
  const int di = static_cast<int>(d);
  const bool vec4 = d % 4 == 0 && aligned16(x) && aligned16(y) && aligned16(weight) && aligned16(bias);
  if (kind == RowNorm::Layer)
    return vec4 ? dispatch<4, RowNorm::Layer>(x, weight, bias, y, rows, di, eps, stream)
                : dispatch<1, RowNorm::Layer>(x, weight, bias, y, rows, di, eps, stream);
  return vec4 ? dispatch<4, RowNorm::Rms>(x, weight, nullptr, y, rows, di, eps, stream)
              : dispatch<1, RowNorm::Rms>(x, weight, nullptr, y, rows, di, eps, stream);
}

}  // namespace mt::detail
