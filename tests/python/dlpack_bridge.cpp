// mt_dlpack_bridge: a C interface to minitensor's DLPack export and import, loaded by test_dlpack_torch.py
// through ctypes. Functions return 0 (or a pointer) on success; on failure, mt_bridge_error() says why.
#include <string>

#include "minitensor/tensor/dlpack.h"

namespace {
std::string g_error;
}  // namespace

extern "C" {

const char* mt_bridge_error() {
  return g_error.c_str();
}

// A CUDA float32 tensor of shape (rows, cols) with element (i, j) = i * cols + j, exported; transposed, when
// `transposed` is non-zero, to a (cols, rows) strided view of the same values.
DLManagedTensor* mt_bridge_make_cuda(long long rows, long long cols, int transposed) {
  try {
    const mt::Tensor t = mt::arange(rows * cols, mt::DType::F32, mt::Device::cuda(0)).view({rows, cols});
    return mt::to_dlpack(transposed ? t.t() : t);
  } catch (const std::exception& e) {
    g_error = e.what();
    return nullptr;
  }
}

// Imports `managed` (taking it over), and writes its shape and the sum of its elements, read row-major,
// weighted by their row-major index (sum of v[k] * (k + 1)), which tells a transposition from the original.
int mt_bridge_consume(DLManagedTensor* managed, long long* shape, int max_rank, int* rank,
                      double* weighted_sum, int* is_cuda) {
  try {
    const mt::Tensor t = mt::from_dlpack(managed);
    *rank = t.dim();
    for (int d = 0; d < t.dim() && d < max_rank; ++d) shape[d] = t.size(d);
    *is_cuda = t.is_cuda() ? 1 : 0;
    const std::vector<float> v = t.contiguous().cpu().to_vector<float>();
    double s = 0;
    for (std::size_t k = 0; k < v.size(); ++k) s += static_cast<double>(v[k]) * static_cast<double>(k + 1);
    *weighted_sum = s;
    return 0;
  } catch (const std::exception& e) {
    g_error = e.what();
    return 1;
  }
}

}  // extern "C"
