// TMA descriptors (ops/gemm/detail/tensor_map.h).
#include "minitensor/ops/gemm/detail/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "minitensor/runtime/error.h"

namespace mt::detail::gemm {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

bool tensor_map_encoder_reachable() {
  return encode_tiled() != nullptr;
}

CUtensorMap tensor_map(const float* base, std::int64_t rows, std::int64_t cols, std::int64_t ld, int batch,
                       std::int64_t sb, int box_rows, int box_cols, CUtensorMapSwizzle swizzle) {
  MT_CHECK(encode_tiled() != nullptr, DeviceError,
           "gemm: the driver's TMA descriptor encoder is not reachable");
  CUtensorMap map;
  const bool batched = batch > 1 && sb != 0;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(batched ? batch : 1)};
  // A single entry's batch stride is never stepped: that of matrices laid one after the other.
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(ld) * sizeof(float),
                                 static_cast<cuuint64_t>(batched ? sb : rows * ld) * sizeof(float)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<float*>(base), dims,
                                    strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MT_CHECK(r == CUDA_SUCCESS, InvalidArgument, "gemm: the TMA descriptor of a ", rows, "x", cols,
           " operand (row stride ", ld, ", batch ", batch, " of stride ", sb, ") was refused (CUresult ",
           static_cast<int>(r), ")");
  return map;
}

}  // namespace mt::detail::gemm
