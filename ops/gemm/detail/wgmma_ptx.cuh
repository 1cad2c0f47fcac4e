// PTX wrappers of the Hopper wgmma SGEMM (ops/gemm/tensorcore/wgmma.cu): named barriers, setmaxnreg, the
// wgmma fence / commit / wait and the m64n{128,256}k8 TF32 instructions (A from shared memory or from
// registers), the shared-memory descriptor, and the loads and stores the pack and the GEMM write out.
// Device code for sm_90a only: MT_WGMMA_DEVICE is defined, and the wrappers exist, only in that device pass.
#pragma once

#include <cstdint>

#include "minitensor/ops/gemm/detail/device.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MT_WGMMA_DEVICE 1
#endif

#if defined(MT_WGMMA_DEVICE)

namespace mt::detail::gemm::wgmma_ptx {

// Barrier 1 over the 256 consumer threads (barrier 0 is __syncthreads; the producer does not take part).
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

__device__ __forceinline__ void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins accumulator registers at this point of the program: reads after a wgmma wait stay after it.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Shared-memory matrix descriptor: K-major, SWIZZLE_128B, 8-row groups 1024 bytes apart.
__device__ __forceinline__ std::uint64_t smem_desc(std::uint32_t saddr) {
  return static_cast<std::uint64_t>((saddr & 0x3FFFFu) >> 4) | (std::uint64_t{1} << 16) |
         (std::uint64_t{1024 >> 4} << 32) | (std::uint64_t{1} << 62);
}

// The accumulator operands of the wgmma wrappers below, d[0..63] (n128) or d[0..127] (n256) as asm operands
// %0 onward, and the instruction's register lists naming them.
// clang-format off
#define MT_WG_D8(i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
  "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define MT_WG_D64 \
  MT_WG_D8(0), MT_WG_D8(8), MT_WG_D8(16), MT_WG_D8(24), MT_WG_D8(32), MT_WG_D8(40), MT_WG_D8(48), MT_WG_D8(56)
#define MT_WG_D128 \
  MT_WG_D64, MT_WG_D8(64), MT_WG_D8(72), MT_WG_D8(80), MT_WG_D8(88), MT_WG_D8(96), MT_WG_D8(104), \
  MT_WG_D8(112), MT_WG_D8(120)
#define MT_WG_REGS_0_63 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MT_WG_REGS_64_127 \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define MT_WG_R64 "{" MT_WG_REGS_0_63 "}"
#define MT_WG_R128 "{" MT_WG_REGS_0_63 ", " MT_WG_REGS_64_127 "}"
// clang-format on

// d (+)= A * B for a 64 x BN x 8 step; scale_d == 0 ignores the old d.
template <int BN>
__device__ __forceinline__ void wgmma_tf32(float (&d)[BN / 2], std::uint64_t da, std::uint64_t db,
                                           int scale_d);
template <>
__device__ __forceinline__ void wgmma_tf32<128>(float (&d)[64], std::uint64_t da, std::uint64_t db,
                                                int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " MT_WG_R64 ", %64, %65, p, 1, 1;\n}\n"
      : MT_WG_D64
      : "l"(da), "l"(db), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wgmma_tf32<256>(float (&d)[128], std::uint64_t da, std::uint64_t db,
                                                int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 " MT_WG_R128 ", %128, %129, p, 1, 1;\n}\n"
      : MT_WG_D128
      : "l"(da), "l"(db), "r"(scale_d));
}

// d += A * B for a 64 x BN x 8 step, A from registers (the m16n8k8 tf32 fragment of each warp's 16 rows:
// a0..a3 at (r, c), (r + 8, c), (r, c + 4), (r + 8, c + 4)), B from its shared-memory descriptor.
template <int BN>
__device__ __forceinline__ void wgmma_tf32_ra(float (&d)[BN / 2], const std::uint32_t (&a)[4],
                                              std::uint64_t db);
template <>
__device__ __forceinline__ void wgmma_tf32_ra<128>(float (&d)[64], const std::uint32_t (&a)[4],
                                                   std::uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " MT_WG_R64
      ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : MT_WG_D64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_tf32_ra<256>(float (&d)[128], const std::uint32_t (&a)[4],
                                                   std::uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 " MT_WG_R128
      ", {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
      : MT_WG_D128
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
#undef MT_WG_D8
#undef MT_WG_D64
#undef MT_WG_D128
#undef MT_WG_REGS_0_63
#undef MT_WG_REGS_64_127
#undef MT_WG_R64
#undef MT_WG_R128

__device__ __forceinline__ float lds_f32(std::uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ float to_tf32(float x) {
  return __uint_as_float(tf32_bits(x));
}

// One 16-byte global store. Written out because the compiler splits a float4 built from cvt results into
// four 4-byte stores, which quarter-fill the sectors (the pack became L2-bound).
__device__ __forceinline__ void store16(float* dst, const float (&v)[4]) {
  asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(v[0]), "f"(v[1]), "f"(v[2]),
               "f"(v[3])
               : "memory");
}

}  // namespace mt::detail::gemm::wgmma_ptx

#endif  // MT_WGMMA_DEVICE
