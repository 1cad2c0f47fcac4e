// mt::attention: validate, bring q, k, v (and the mask) to (b0, b1, t, d) views without copying where their
// strides allow it, then the fused kernel, or matmul + softmax for head dims without one, or the Eigen
// reference on the CPU.
#include "minitensor/ops/attention.h"

#include <cfloat>
#include <cmath>

#include "minitensor/ops/detail/attention.h"
#include "minitensor/ops/elementwise.h"
#include "minitensor/ops/gemm.h"
#include "minitensor/ops/reduce.h"
#include "minitensor/runtime/device.h"

namespace mt {
namespace {

constexpr const char* kOp = "attention";

// `t` as (b0, b1, t, d): rank 2 and 3 get leading 1s, rank > 4 folds its batch dims into one (a copy where
// their strides do not fold).
Tensor as_4d(const Tensor& t) {
  if (t.dim() == 4) return t;
  if (t.dim() == 3) return t.unsqueeze(0);
  if (t.dim() == 2) return t.unsqueeze(0).unsqueeze(0);
  return t.reshape({1, -1, t.size(-2), t.size(-1)});
}

detail::AttnOperand operand(const Tensor& t) {
  return {t.data<float>(), t.stride(0), t.stride(1), t.stride(2)};
}

// The attention composed from matmul and softmax (head dims without a fused kernel): the same semantics,
// fully masked rows included.
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                double scale) {
  Tensor s = matmul(q, k.transpose(-1, -2)) * scale;
  if (mask.defined()) s = s + mask;
  if (causal) {
    const std::int64_t tq = q.size(-2), tk = k.size(-2);
    std::vector<float> c(static_cast<size_t>(tq * tk), 0.f);
    for (std::int64_t i = 0; i < tq; ++i)
      for (std::int64_t j = i + 1; j < tk; ++j) c[static_cast<size_t>(i * tk + j)] = -INFINITY;
    s = s + from_vector(c, Shape{tq, tk}, q.device());
  }
  // A row with no visible key has max -inf: shifted by -FLT_MAX instead, its exponentials are all 0, and
  // the sum is kept off 0, so the row gives zeros.
  const Tensor m = maximum(max(s, -1, true), full({}, -FLT_MAX, DType::F32, q.device()));
  const Tensor e = exp(s - m);
  const Tensor p = e / maximum(sum(e, -1, true), full({}, FLT_MIN, DType::F32, q.device()));
  return matmul(p, v);
}

}  // namespace

Shape attention_shape(const Shape& q, const Shape& k, const Shape& v, const Shape* mask,
                      const std::string& op) {
  for (const Shape* t : {&q, &k, &v})
    MT_CHECK(t->rank() >= 2, ShapeError, op, ": q, k and v need (..., T, D), got ", *t);
  const int r = q.rank();
  MT_CHECK(k.rank() == r && v.rank() == r, ShapeError, op, ": q ", q, ", k ", k, " and v ", v,
           " differ in rank");
  for (int d = 0; d + 2 < r; ++d)
    MT_CHECK(q[d] == k[d] && q[d] == v[d], ShapeError, op, ": leading dims differ: q ", q, ", k ", k, ", v ",
             v);
  MT_CHECK(q[r - 1] == k[r - 1], ShapeError, op, ": q ", q, " and k ", k, " differ in head dim");
  MT_CHECK(k[r - 2] == v[r - 2], ShapeError, op, ": k ", k, " and v ", v, " differ in key count");
  if (mask) {
    Shape scores = q;
    scores[r - 1] = k[r - 2];
    MT_CHECK(mask->rank() <= r && broadcast_shapes(*mask, scores, op) == scores, ShapeError, op, ": mask ",
             *mask, " does not broadcast to the scores ", scores);
  }
  Shape out = q;
  out[r - 1] = v[r - 1];
  return out;
}

double attention_scale(std::optional<double> scale, std::int64_t head_dim, const std::string& op) {
  const double s = scale.value_or(head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0);
  MT_CHECK(std::isfinite(s), InvalidArgument, op, ": scale must be finite, got ", s);
  return s;
}

bool attention_is_fused(std::int64_t head_dim, std::int64_t value_dim, std::int64_t keys) {
  return head_dim == value_dim && (head_dim == 32 || head_dim == 64 || head_dim == 128) && keys > 0;
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  q.check_defined(kOp);
  v.check_defined(kOp);
  Shape out_shape = q.shape();
  if (out_shape.rank() >= 1 && v.dim() >= 1) out_shape[out_shape.rank() - 1] = v.size(-1);
  Tensor out = empty(out_shape, DType::F32, q.device());
  return attention_out(q, k, v, out, o);
}

Tensor& attention_out(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                      const AttentionOptions& o) {
  for (const Tensor* t : {&q, &k, &v}) {
    t->check_defined(kOp);
    MT_CHECK(t->dtype() == DType::F32, DTypeError, kOp, ": dtype ", t->dtype(),
             " is not supported (float32 only)");
    MT_CHECK(t->device() == q.device(), DeviceError, kOp, ": q is on ", q.device(), ", another operand on ",
             t->device());
  }
  const Shape mask_shape = o.mask.defined() ? o.mask.shape() : Shape{};
  const Shape out_shape =
      attention_shape(q.shape(), k.shape(), v.shape(), o.mask.defined() ? &mask_shape : nullptr, kOp);
  const std::int64_t tq = q.size(-2), tk = k.size(-2), d = q.size(-1), dv = v.size(-1);
  const double scale = attention_scale(o.scale, d, kOp);
  Shape score_shape = q.shape();
  score_shape[score_shape.rank() - 1] = tk;
  Tensor mask;
  if (o.mask.defined()) {
    MT_CHECK(o.mask.dtype() == DType::F32, DTypeError, kOp, ": mask has dtype ", o.mask.dtype(),
             " (float32, additive)");
    MT_CHECK(o.mask.device() == q.device(), DeviceError, kOp, ": mask is on ", o.mask.device(), ", q on ",
             q.device());
    mask = o.mask.expand(score_shape);
  }
  out.check_defined(kOp);
  // A strided out (rank <= 4, contiguous along the head dim) is written in place: a graph lays the heads out
  // as its next consumer reads them.
  bool out_rows = out.dim() >= 1 && out.dim() <= 4 && out.stride(-1) == 1;
  for (int d = 0; out_rows && d < out.dim(); ++d) out_rows = out.size(d) == 1 || out.stride(d) > 0;
  MT_CHECK(out.dtype() == DType::F32 && out.device() == q.device() && out.shape() == out_shape &&
               (out.is_contiguous() || out_rows),
           InvalidArgument, kOp, ": out must be a float32 ", out_shape, " on ", q.device(),
           ", contiguous (or of rank <= 4 with unit stride along the last dim), got ", out.dtype(), " ",
           out.shape(), " with strides ", out.strides(), " on ", out.device());
  if (q.numel() == 0 || v.numel() == 0 || tq == 0) return out.numel() ? out.fill_(0.0) : out;
  if (q.is_cpu()) {
    out.copy_(detail::cpu_attention(q, k, v, mask, o.causal, scale));
    return out;
  }
  DeviceGuard guard(q.device());
  if (!attention_is_fused(d, dv, tk)) {
    out.copy_(composed(q, k, v, mask, o.causal, scale));
    return out;
  }
  // The kernel reads rows contiguous along d.
  auto rows = [](const Tensor& t) { return as_4d(t.stride(-1) == 1 ? t : t.contiguous()); };
  const Tensor q4 = rows(q), k4 = rows(k), v4 = rows(v);
  detail::AttnProblem p;
  p.b0 = static_cast<int>(q4.size(0)), p.b1 = static_cast<int>(q4.size(1));
  p.tq = static_cast<int>(tq), p.tk = static_cast<int>(tk), p.d = static_cast<int>(d);
  p.q = operand(q4), p.k = operand(k4), p.v = operand(v4);
  Tensor m4;
  if (mask.defined()) {
    m4 = as_4d(mask);
    p.mask = m4.data<float>(), p.m0 = m4.stride(0), p.m1 = m4.stride(1), p.mi = m4.stride(2),
    p.mj = m4.stride(3);
  }
  const Tensor o4 = as_4d(out);  // rank <= 4 or contiguous: a view
  p.out = out.data<float>(), p.o0 = o4.stride(0), p.o1 = o4.stride(1), p.ot = o4.stride(2);
  p.scale = static_cast<float>(scale);
  p.causal = o.causal;
  p.math = o.math.value_or(default_math_mode());
  cudaStream_t stream = detail::stream_for(q.device());
  // The tensor-core kernel covers head dims 32 and 64; 128 runs on the CUDA cores in every mode.
  if (p.math == MathMode::FP32 || !detail::launch_attention_tc(p, stream))
    detail::launch_attention(p, stream);
  for (const Tensor* t : {&q4, &k4, &v4, static_cast<const Tensor*>(&m4), static_cast<const Tensor*>(&out)})
    if (t->defined()) detail::record_stream(*t, stream);
  return out;
}

}  // namespace mt
