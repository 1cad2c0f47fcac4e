// TMA descriptors of fp32 matrices, for the kernels that fetch tiles with cp.async.bulk.tensor
// (simt/tma.cu; tensorcore/wgmma.cu in TF32 mode). Host code: the encoder is the driver's
// cuTensorMapEncodeTiled, reached through the runtime, so the library does not link the driver.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace mt::detail::gemm {

// Whether the driver's encoder could be reached (once per process).
bool tensor_map_encoder_reachable();

// A batch of row-major fp32 matrices of `rows` x `cols` (row stride `ld` elements, batch stride `sb`; 0 for
// one matrix or a broadcast one, read as entry 0) in boxes of box_rows x box_cols of one entry, out-of-range
// elements read as zeros. The dims are (cols, rows, batch entries): a kernel passes batch coordinate 0 for a
// broadcast operand. Encoding is cheap next to a launch, so descriptors are not cached. InvalidArgument where
// the driver refuses the layout (the callers' layout predicates keep to what it takes).
CUtensorMap tensor_map(const float* base, std::int64_t rows, std::int64_t cols, std::int64_t ld, int batch,
                       std::int64_t sb, int box_rows, int box_cols, CUtensorMapSwizzle swizzle);

}  // namespace mt::detail::gemm
