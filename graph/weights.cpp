// The executor's weight packing (pack_weights, graph/detail/executor_impl.h): in the TF32 modes each GEMM
// whose B is a constant matrix gets it packed once, when the executor is built, instead of at every run.
#include <algorithm>
#include <map>
#include <tuple>

#include "minitensor/graph/detail/executor_impl.h"
#include "minitensor/ops/gemm.h"

namespace mt::detail {

std::vector<std::shared_ptr<const PackedOperand>> pack_weights(const Program& prog,
                                                               const std::vector<Tensor>& statics,
                                                               const CompileOptions& options) {
  std::vector<std::shared_ptr<const PackedOperand>> out(prog.steps.size());
  const MathMode math = options.math.value_or(default_math_mode());
  if (!options.pack_weights || math == MathMode::FP32) return out;
  // GEMMs of one weight and one row count (the chunks of a chunked tensor-parallel MLP) share one copy.
  std::map<std::tuple<int, std::int64_t, bool>, std::shared_ptr<const PackedOperand>> packed;
  for (size_t i = 0; i < prog.steps.size(); ++i) {
    const Step& s = prog.steps[i];
    const NodeData& n = prog.g.at(s.root);
    if (s.kind != Step::Kind::Op ||
        (n.kind != OpKind::Linear && n.kind != OpKind::Gemm && n.kind != OpKind::Matmul))
      continue;
    const int b_id = n.inputs[1];
    const OpKind leaf = prog.g.at(b_id).kind;
    Tensor b = statics[static_cast<size_t>(b_id)];
    if ((leaf != OpKind::Parameter && leaf != OpKind::Constant) || b.dim() != 2) continue;
    const bool trans_b = n.kind == OpKind::Gemm && n.gemm.trans_b;
    if (trans_b) b = b.transpose(0, 1);
    // Rows of one product: a Gemm's batch dims stay a batch, Linear and Matmul fold them into rows.
    const std::int64_t m = n.kind == OpKind::Gemm ? n.shape[n.shape.rank() - 2]
                                                  : n.shape.numel() / std::max<std::int64_t>(1, b.size(1));
    auto& shared = packed[{b_id, m, trans_b}];
    if (!shared) shared = pack_b(b, m, math);
    out[i] = shared;
  }
  return out;
}

}  // namespace mt::detail
