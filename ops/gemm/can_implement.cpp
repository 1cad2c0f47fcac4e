// SGEMM dispatch, what can run: the device models, can_implement and candidates, pure functions of the
// problem, the math mode and a DeviceModel (no CUDA runtime calls: tests/ops/gemm/test_dispatch.cpp runs them
// on the CPU). choose() picks among them (dispatch.cpp).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "minitensor/ops/gemm/detail/dispatch.h"
#include "minitensor/ops/gemm/detail/pack.h"
#include "minitensor/ops/gemm/tensorcore/wgmma.h"
#include "minitensor/runtime/error.h"

namespace mt::detail::gemm {

// ---------------------------------------------------------------- device models

DeviceModel DeviceModel::h100() {
  DeviceModel m;
  m.sm_count = 132;
  m.cc_major = 9, m.cc_minor = 0;
  // Sizes 5 and 7 are never asked for (splits are 1, 2, 3, 4, 6, 8): the SMs in whole clusters.
  m.cluster_slots = {0, 132, 132, 117, 120, 130, 102, 126, 120};
  m.smem_per_block = 227 * 1024;
  m.smem_per_sm = 228 * 1024;
  m.clusters = m.tma_kernels = m.wgmma_kernels = true;
  return m;
}

DeviceModel DeviceModel::h200() {
  return h100();  // the same SMs, GPCs and shared memory; only the HBM differs
}

DeviceModel DeviceModel::none() {
  DeviceModel m;
  m.clusters = true;
  return m;
}

DeviceModel DeviceModel::a100() {
  DeviceModel m;
  m.sm_count = 108;
  m.cc_major = 8, m.cc_minor = 0;
  m.smem_per_block = 163 * 1024;
  m.smem_per_sm = 164 * 1024;
  return m;
}

bool tma_ready(const Problem& p, const DeviceModel& model) {
  return model.tma_kernels && tma_layout_ok(p);
}
bool tma_ready(const Problem& p) {
  return tma_ready(p, DeviceModel::current());
}

DeviceModel current_device_model() {
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  return DeviceModel::current();
}

// ---------------------------------------------------------------- can_implement

bool can_implement(const Problem& p, const Config& cfg, const DeviceModel& model) {
  if (cfg.swap) {
    if (!swappable(p) || !is_simt(cfg.kernel) || cfg.math != MathMode::FP32) return false;
    Config plain = cfg;
    plain.swap = false;
    return can_implement(swapped(p), plain, model);
  }
  if (cfg.pack) {
    // The two copies would share the stream's one pack scratch.
    if (!is_simt(cfg.kernel) || cfg.math != MathMode::FP32 || cfg.b_along_n) return false;
    Config plain = cfg;
    plain.pack = false;
    return can_implement(needs_pack(p) ? pack_shape(p) : p, plain, model);
  }
  if (cfg.b_along_n) {
    if (!is_simt(cfg.kernel) || cfg.math != MathMode::FP32 || !b_repackable(p)) return false;
    Config plain = cfg;
    plain.b_along_n = false;
    return can_implement(b_along_n_shape(p), plain, model);
  }
  if (cfg.split_k < 1 || cfg.split_k > 64) return false;
  // The vector kernel: any layout and math mode (fp32 arithmetic), at most kGemvMaxRows vectors, its own
  // split of K (gemv.cu).
  if (cfg.kernel == Kernel::Gemv)
    return std::min(p.m, p.n) <= kGemvMaxRows && cfg.split_k == 1 && cfg.staging == Staging::Registers;
  const KernelInfo& info = kernel_info(cfg.kernel);
  // The short-K kernels: any layout and math mode (fp32 arithmetic), unsplit; tiles raster-ordered in a 1-D
  // grid.
  if (info.family == KernelFamily::SmallK)
    return cfg.split_k == 1 && cfg.staging == Staging::Registers &&
           std::ceil(p.m / double(info.tile.bm)) * std::ceil(p.n / double(info.tile.bn)) < 2147483647.0;
  // mma.sync kernels add split K with the second kernel only, wgmma either way; clusters need sm_90.
  if (cfg.split_k > 1 && cfg.reduce == SplitReduce::Cluster &&
      ((is_tensor(cfg.kernel) && cfg.kernel != Kernel::Wgmma) || cfg.split_k > kMaxClusterSplit ||
       !model.has_clusters()))
    return false;
  if (is_rung(cfg.kernel)) return cfg.split_k == 1 && cfg.math == MathMode::FP32;
  if (is_tensor(cfg.kernel) != (cfg.math != MathMode::FP32)) return false;
  if (cfg.kernel == Kernel::Wgmma)
    return (cfg.reduce == SplitReduce::Cluster || cfg.split_k <= kMaxKernelSplit) &&
           wgmma_can_implement(p, cfg.math, model);
  // The TMA kernels have no other staging, and no other kernel has it.
  if (info.is_tma != (cfg.staging == Staging::Tma)) return false;
  if (cfg.staging == Staging::Tma) return tma_ready(p, model);
  if (is_simt(cfg.kernel) && cfg.staging == Staging::Registers && !(a_reg_stageable(p) && b_reg_stageable(p)))
    return false;
  if (info.registers_only && cfg.staging == Staging::CpAsync) return false;
  if (cfg.staging == Staging::CpAsync16 && !(info.has_ring16 && ring16_ready(p))) return false;
  if (info.whole_runs_only && !vector_runs(p)) return false;
  const TileInfo t = info.tile;
  if (!offsets_fit(p.a_sm, p.a_sk, t.bm, t.bk) || !offsets_fit(p.b_sn, p.b_sk, t.bn, t.bk)) return false;
  // Tiles are raster-ordered in a 1-D grid.
  const double tiles = std::ceil(p.m / double(t.bm)) * std::ceil(p.n / double(t.bn));
  return tiles < 2147483647.0;
}

bool can_implement(const Problem& p, const Config& cfg) {
  return can_implement(p, cfg, DeviceModel::current());
}

// ---------------------------------------------------------------- candidates

std::vector<Config> candidates(const Problem& p, MathMode math, const DeviceModel& model) {
  std::vector<Config> out;
  if (can_implement(p, Config{Kernel::Gemv, 1, math}, model)) out.push_back(Config{Kernel::Gemv, 1, math});
  // The short-K kernels, where K is short enough for one block to hold it in a few rounds.
  if (p.k <= kSmallKCandidateMax)
    for (Kernel k : small_k_kernels())
      if (can_implement(p, Config{k, 1, math}, model)) out.push_back(Config{k, 1, math});
  const std::vector<Kernel> kernels = math == MathMode::FP32 ? simt_kernels() : tensor_kernels();
  const int sms = model.sm_count;
  for (Kernel k : kernels) {
    const TileInfo t = tile_of(k);
    const std::int64_t blocks =
        static_cast<std::int64_t>((p.m + t.bm - 1) / t.bm) * ((p.n + t.bn - 1) / t.bn) * p.batch;
    for (int split : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}) {
      // Splitting only pays while the blocks do not fill the GPU a few times over, or to fill a last wave;
      // past 32 only for a C of a few tiles over a long K.
      if (split > 1 && (p.k / split < 32 || blocks * split > 16 * sms)) break;
      if (split > 32 && (p.k / split < kNarrowMinSplitK || blocks * split > 4 * sms)) break;
      for (Staging st : {Staging::Registers, Staging::CpAsync, Staging::CpAsync16, Staging::Tma})
        for (bool pack : {false, true}) {
          if (math != MathMode::FP32 && st != Staging::Registers) continue;
          if (pack && (math != MathMode::FP32 || st == Staging::CpAsync || !needs_pack(p))) continue;
          // B along k copied along n first (Config::b_along_n): for the register-staged tiles of 128x128
          // and over, and the TMA tiles.
          const bool bn_too = math == MathMode::FP32 && !pack && b_repackable(p) &&
                              ((st == Staging::Registers && t.bm * t.bn >= 128 * 128) || st == Staging::Tma);
          for (bool bn : {false, true}) {
            if (bn && !bn_too) continue;
            Config rk{k, split, math, SplitReduce::Kernel, st, pack};
            rk.b_along_n = bn;
            if (can_implement(p, rk, model)) out.push_back(rk);
            Config cl = rk;
            cl.reduce = SplitReduce::Cluster;
            if (split > 1 && can_implement(p, cl, model)) out.push_back(cl);
          }
        }
    }
  }
  // The transposed product of a narrower N (Config::swap), whose C^T the small-M tiles take, or whose edge
  // tiles waste less across M; the vector and short-K kernels read either orientation already.
  if (math == MathMode::FP32 && swappable(p) && p.n <= 128 && p.m > std::max(p.n, 64))
    for (Config c : candidates(swapped(p), math, model))
      if (is_simt(c.kernel)) {
        c.swap = true;
        out.push_back(c);
      }
  return out;
}

std::vector<Config> candidates(const Problem& p, MathMode math) {
  return candidates(p, math, current_device_model());
}
}  // namespace mt::detail::gemm
