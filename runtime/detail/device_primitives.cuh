// The device primitives every kernel family shares, one copy each: asynchronous copies (cp.async, the bulk
// copy engine, tensor maps), mbarriers, thread-block clusters, programmatic dependent launch, warp
// reductions and the TF32 mma.sync tile product. Thin PTX wrappers with the rule each one carries; kernels
// include this header and nothing else for these instructions (as CUTLASS keeps them under arch/ and
// ggml-cuda in common.cuh).
//
// Shared-memory operands are 32-bit shared-window addresses (smem_u32), as the PTX instructions take them.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mt::detail {

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------- warp reductions (all lanes get the result)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}
// fmaxf: a NaN lane is skipped (callers that must propagate NaN do so through a sum).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}

// 2^x on the special-function unit (relative error ~2^-22; results below 2^-126 flush to 0). With the
// argument (x - m) * log2(e) this is e^(x - m) to ~1e-6 relative for |x - m| < 10, where a softmax's terms
// that matter live, in 2 instructions instead of expf's ~8.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ---------------------------------------------------------------- TF32 tensor cores (sm_80+, mma.sync)

// x rounded to TF32 (10-bit mantissa, to nearest, ties away), as the 32-bit pattern mma.sync takes.
__device__ __forceinline__ std::uint32_t tf32_bits(float x) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// d += a * b for a 16x8 (row-major) by 8x8 (column-major) TF32 tile pair, FP32 accumulators. Fragments, lane
// = 4 g + t: a {(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)}, b {(t, g), (t + 4, g)} as (k, n),
// d {(g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)}.
__device__ __forceinline__ void mma_tf32_m16n8k8(float (&d)[4], const std::uint32_t (&a)[4],
                                                 const std::uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---------------------------------------------------------------- cp.async (sm_80+)

// Copies `bytes` (0 or 4) bytes and zero-fills the rest of the 4-byte word: predicated loads without
// branches. Through L1 (.ca): scalar operand loads revisit their lines.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(bytes));
}
// 4 bytes, all read.
__device__ __forceinline__ void cp_async4_whole(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(dst)), "l"(src));
}
// 16 bytes, of which the first `bytes` (0..16, a multiple of 4) come from global memory, the rest zero.
// Bypasses L1 (.cg): every byte of a tile is read once per block. compute-sanitizer counts a partial copy as
// a read of all 16 bytes, so callers use one only where the whole 16 bytes are readable.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(bytes));
}
// 16 bytes, all read.
__device__ __forceinline__ void cp_async16_whole(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::);
}

// ---------------------------------------------------------------- programmatic dependent launch (sm_90)

// Lets the next kernel in the stream, if launched to overlap this one
// (LaunchConfig::overlap_previous_kernel), start its blocks once every block of this grid has called this or
// exited.
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
// Waits until the kernels this one was launched to overlap have finished and their writes are visible;
// returns at once for a kernel launched the ordinary way.
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// ---------------------------------------------------------------- mbarriers (sm_90)

__device__ __forceinline__ void mbar_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes barrier initialisation visible to the copy engine and to the other blocks of the cluster.
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Shared memory last touched by ordinary loads or stores (ordered by a barrier) is next read or written by
// the copy engine or the tensor cores: each such thread fences the proxies first.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Arrives once and adds `bytes` to the transactions the current phase waits for.
__device__ __forceinline__ void mbar_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives on the barrier at the same shared-memory offset in block `rank` of the cluster. CTA-scope release:
// the callers' readers have completed before they arrive, and a cluster-scope release would add a memory
// barrier per arrival (bench/gemm/DESIGN.md).
__device__ __forceinline__ void mbar_arrive_cluster(std::uint32_t bar, std::uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
// CLUSTER: cluster-scope acquire, so that bytes other blocks of the cluster stored are visible too.
template <bool CLUSTER = false>
__device__ __forceinline__ bool mbar_try_wait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t ok;
  if constexpr (CLUSTER)
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
  else
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
  return ok != 0;
}
// Waits until the phase of parity `parity` has completed (acquire: the copied bytes are visible).
template <bool CLUSTER = false>
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, std::uint32_t parity) {
  while (!mbar_try_wait<CLUSTER>(bar, parity)) {
  }
}

// ---------------------------------------------------------------- bulk copy engine (sm_90)

// 1-D bulk copy global -> shared (16-byte aligned, bytes % 16 == 0), completing `bytes` transactions on
// `bar`.
__device__ __forceinline__ void bulk_load(std::uint32_t dst, const void* src, std::uint32_t bytes,
                                          std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
// Asks L2 to fetch [src, src + bytes) from memory (16-byte aligned, bytes % 16 == 0); nothing lands in shared
// memory and nothing waits. L2 is where every SM's accesses meet, so a prefetch never makes a later read
// stale: it may run before pdl_wait.
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, std::uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}
// The box of `map` at (c0, c1, c2) (c0 the contiguous dim) into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_3d(std::uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2,
                                            std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// ---------------------------------------------------------------- thread-block clusters (sm_90)

__device__ __forceinline__ std::uint32_t cluster_rank() {
  std::uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every block of the cluster arrives; release / acquire: shared-memory writes before it are
// visible to the cluster after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}

#endif  // __CUDA_ARCH__ >= 900

}  // namespace mt::detail
