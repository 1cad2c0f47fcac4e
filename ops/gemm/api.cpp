// Tensor-level SGEMM entry points: validation, 1-D promotion, batch broadcasting, dispatch to the CUDA
// kernels (ops/gemm/launch.cu and the kernel table) or to the Eigen reference for CPU tensors
// (ops/cpu/gemm.cpp).
#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "minitensor/ops/gemm.h"
#include "minitensor/ops/gemm/detail/launch.h"
#include "minitensor/ops/gemm/detail/tune.h"
#include "minitensor/ops/gemm/tensorcore/wgmma.h"
#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"
#include "minitensor/tensor/overlap.h"

namespace mt {

const char* math_mode_name(MathMode m) {
  switch (m) {
    case MathMode::FP32:
      return "fp32";
    case MathMode::TF32:
      return "tf32";
    case MathMode::TF32x3:
      return "tf32x3";
  }
  return "?";
}

namespace {
std::atomic<MathMode> g_default_math{MathMode::FP32};
}  // namespace

void set_default_math_mode(MathMode mode) {
  g_default_math.store(mode);
}
MathMode default_math_mode() {
  return g_default_math.load();
}

namespace {

using detail::gemm::Problem;

void check_operand(const Tensor& t, const char* op, const char* name, int min_rank) {
  MT_CHECK(t.defined(), InvalidArgument, op, ": ", name, " is undefined");
  MT_CHECK(t.dtype() == DType::F32, DTypeError, op, ": ", name, " must be float32, got ", t.dtype(),
           " (shape ", t.shape(), ")");
  MT_CHECK(t.dim() >= min_rank, ShapeError, op, ": ", name, " must have at least ", min_rank,
           " dimension(s), got shape ", t.shape());
}

void check_same_device(const Tensor& x, const char* xn, const Tensor& y, const char* yn, const char* op) {
  MT_CHECK(x.device() == y.device(), DeviceError, op, ": ", xn, " is on ", x.device(), " but ", yn, " is on ",
           y.device());
}

int to_int(std::int64_t v, const char* what, const char* op) {
  MT_CHECK(v <= 2147483647, InvalidArgument, op, ": ", what, " = ", v,
           " exceeds the 2^31 - 1 the kernels index");
  return static_cast<int>(v);
}

// Batch dims of an operand of rank r (its last two dims are the matrix) broadcast against the output batch
// dims `out`: the operand's batch strides aligned to `out`, 0 where it broadcasts. ShapeError when
// incompatible.
std::vector<std::int64_t> batch_strides(const Tensor& t, const std::vector<std::int64_t>& out, const char* op,
                                        const char* name, const Shape& c_shape) {
  const int rb = t.dim() - 2, ob = static_cast<int>(out.size());
  MT_CHECK(rb <= ob, ShapeError, op, ": ", name, " ", t.shape(),
           " has more batch dimensions than the output ", c_shape);
  std::vector<std::int64_t> s(out.size(), 0);
  for (int d = 0; d < rb; ++d) {
    const int od = ob - rb + d;
    const std::int64_t e = t.size(d);
    MT_CHECK(e == out[od] || e == 1, ShapeError, op, ": batch dimensions of ", name, " ", t.shape(),
             " do not broadcast to the output's ", c_shape);
    s[od] = e == 1 ? 0 : t.stride(d);
  }
  return s;
}

// Runs c = act(alpha * a * b + beta * c + bias) (then the row softmax, o.softmax) with a: (..., m, k), b:
// (..., k, n), c: (..., m, n) already checked, the batch dims of a and b broadcast to c's. Batch dims that
// collapse into one stride for all three go into one launch; the rest loop here.
void run(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& o, const Tensor& bias,
         const char* op) {
  const std::int64_t m = c.size(-2), n = c.size(-1), k = a.size(-1);
  std::vector<std::int64_t> bshape(c.shape().begin(), c.shape().end() - 2);
  check_no_self_overlap(c, op);
  const std::vector<std::int64_t> sa = batch_strides(a, bshape, op, "a", c.shape());
  const std::vector<std::int64_t> sb = batch_strides(b, bshape, op, "b", c.shape());
  std::vector<std::int64_t> sc(bshape.size());
  for (size_t d = 0; d < bshape.size(); ++d) sc[d] = c.stride(static_cast<int>(d));

  // Keep the batch dims of extent > 1.
  struct Dim {
    std::int64_t size, a, b, c;
  };
  std::vector<Dim> dims;
  for (size_t d = 0; d < bshape.size(); ++d)
    if (bshape[d] != 1) dims.push_back({bshape[d], sa[d], sb[d], sc[d]});
  if (c.numel() == 0) return;

  // The longest suffix of dims that collapses into one (size, stride) for a, b and c.
  size_t first = dims.size();
  while (first > 0) {
    const Dim& lo = dims[first - 1];
    if (first < dims.size()) {
      const Dim& hi = dims[first];
      if (lo.a != hi.a * hi.size || lo.b != hi.b * hi.size || lo.c != hi.c * hi.size) break;
    }
    --first;
  }
  std::int64_t inner = 1;
  for (size_t d = first; d < dims.size(); ++d) inner *= dims[d].size;
  std::int64_t outer = 1;
  for (size_t d = 0; d < first; ++d) outer *= dims[d].size;

  Problem p;
  p.m = to_int(m, "m", op);
  p.n = to_int(n, "n", op);
  p.k = to_int(k, "k", op);
  p.batch = to_int(inner, "batch", op);
  p.a_sm = a.stride(-2), p.a_sk = a.stride(-1);
  p.b_sk = b.stride(-2), p.b_sn = b.stride(-1);
  p.c_sm = c.stride(-2), p.c_sn = c.stride(-1);
  if (first < dims.size()) p.a_sb = dims.back().a, p.b_sb = dims.back().b, p.c_sb = dims.back().c;
  p.alpha = o.alpha, p.beta = o.beta, p.act = o.activation, p.softmax = o.softmax;
  if (bias.defined()) p.bias = bias.data<float>(), p.bias_s = bias.stride(0);
  const MathMode math = o.math.value_or(default_math_mode());
  if (o.packed_b) {
    const PackedOperand& pb = *o.packed_b;
    MT_CHECK(pb.b == b.data<float>() && pb.b_sk == p.b_sk && pb.b_sn == p.b_sn && pb.k == p.k && pb.n == p.n,
             InvalidArgument, op, ": packed_b was packed from another b (", pb.k, "x", pb.n, ", strides (",
             pb.b_sk, ", ", pb.b_sn, ")) than op(b) ", b.shape(), " with strides ", b.strides());
    if (outer == 1) p.b_packed = &pb;
  }

  const float* a0 = a.data<float>();
  const float* b0 = b.data<float>();
  float* c0 = c.data<float>();
  // The choice sees the first entry's operands: their alignment decides packing and the vector loaders.
  p.a = a0, p.b = b0, p.c = c0;
  cudaStream_t stream = nullptr;
  detail::gemm::Config cfg;
  std::optional<DeviceGuard> guard;
  const bool tune = c.is_cuda() && (o.tune || detail::gemm::tune_from_env());
  if (c.is_cuda()) {
    guard.emplace(c.device());
    stream = detail::stream_for(c.device());
    for (const Tensor* t : {&a, &b, static_cast<const Tensor*>(&c), &bias}) detail::record_stream(*t, stream);
    if (tune) {
      // Tuned on the first launch's operands (their alignment is part of the key).
      cfg = detail::gemm::tuned_choice(p, math, stream);
    } else {
      cfg = detail::gemm::choose(p, math);
    }
  }
  for (std::int64_t o_i = 0; o_i < outer; ++o_i) {
    std::int64_t rem = o_i, offa = 0, offb = 0, offc = 0;
    for (size_t d = first; d-- > 0;) {
      const std::int64_t idx = rem % dims[d].size;
      rem /= dims[d].size;
      offa += idx * dims[d].a, offb += idx * dims[d].b, offc += idx * dims[d].c;
    }
    Problem q = p;
    q.a = a0 + offa, q.b = b0 + offb, q.c = c0 + offc;
    // The choice saw entry 0's operands; a later entry aligned unlike them takes its own.
    if (c.is_cuda() && o_i > 0 && !detail::gemm::can_implement(q, cfg))
      detail::gemm::launch(q, detail::gemm::choose(q, math), stream);
    else if (c.is_cuda())
      detail::gemm::launch(q, cfg, stream);
    else
      detail::gemm::cpu_gemm(q);
  }
}

// NumPy broadcast of two batch shapes: tensor/shape.h's rule, with an error that names both operands.
std::vector<std::int64_t> broadcast_batch(const Tensor& a, const Tensor& b, const char* op) {
  const Shape sa(std::vector<std::int64_t>(a.shape().begin(), a.shape().end() - 2));
  const Shape sb(std::vector<std::int64_t>(b.shape().begin(), b.shape().end() - 2));
  try {
    return broadcast_shapes(sa, sb, op).vec();
  } catch (const ShapeError&) {
    MT_THROW(ShapeError, op, ": batch dimensions of a ", a.shape(), " and b ", b.shape(),
             " do not broadcast");
  }
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, std::optional<MathMode> math) {
  constexpr const char* op = "matmul";
  check_operand(a_in, op, "a", 1);
  check_operand(b_in, op, "b", 1);
  check_same_device(a_in, "a", b_in, "b", op);
  const Tensor a = a_in.dim() == 1 ? a_in.unsqueeze(0) : a_in;
  const Tensor b = b_in.dim() == 1 ? b_in.unsqueeze(1) : b_in;
  MT_CHECK(a.size(-1) == b.size(-2), ShapeError, op, ": a ", a_in.shape(), " and b ", b_in.shape(),
           ": inner dimensions ", a.size(-1), " and ", b.size(-2), " differ");
  // A batch of matrices times one matrix is one taller GEMM (better tiles, and the same kernel that linear()
  // runs, so linear's fused epilogue matches matmul followed by the eager ops bit for bit).
  if (b_in.dim() == 2 && a_in.dim() > 2) return linear(a_in, b_in, Tensor(), Activation::None, math);
  std::vector<std::int64_t> shape = broadcast_batch(a, b, op);
  shape.push_back(a.size(-2));
  shape.push_back(b.size(-1));
  Tensor c = empty(Shape(shape), DType::F32, a.device());
  GemmOptions o;
  o.math = math;
  run(a, b, c, o, Tensor(), op);
  if (a_in.dim() == 1 && b_in.dim() == 1) return c.view(Shape{});
  if (a_in.dim() == 1) return c.squeeze(-2);
  if (b_in.dim() == 1) return c.squeeze(-1);
  return c;
}

Tensor& gemm(const Tensor& a_in, const Tensor& b_in, Tensor& c, bool trans_a, bool trans_b,
             const GemmOptions& options, const Tensor& bias) {
  constexpr const char* op = "gemm";
  check_operand(a_in, op, "a", 2);
  check_operand(b_in, op, "b", 2);
  check_operand(c, op, "c", 2);
  check_same_device(a_in, "a", b_in, "b", op);
  check_same_device(a_in, "a", c, "c", op);
  const Tensor a = trans_a ? a_in.transpose(-1, -2) : a_in;
  const Tensor b = trans_b ? b_in.transpose(-1, -2) : b_in;
  MT_CHECK(a.size(-1) == b.size(-2), ShapeError, op, ": op(a) ", a.shape(), " and op(b) ", b.shape(),
           ": inner dimensions ", a.size(-1), " and ", b.size(-2), " differ (trans_a=", trans_a,
           ", trans_b=", trans_b, ")");
  MT_CHECK(c.size(-2) == a.size(-2) && c.size(-1) == b.size(-1), ShapeError, op, ": c ", c.shape(),
           " must be (..., ", a.size(-2), ", ", b.size(-1), ") for op(a) ", a.shape(), " and op(b) ",
           b.shape());
  if (bias.defined()) {
    MT_CHECK(bias.dtype() == DType::F32, DTypeError, op, ": bias must be float32, got ", bias.dtype());
    check_same_device(bias, "bias", c, "c", op);
    MT_CHECK(bias.dim() == 1 && bias.size(0) == c.size(-1), ShapeError, op, ": bias ", bias.shape(),
             " must be (", c.size(-1), ") for c ", c.shape());
  }
  run(a, b, c, options, bias, op);
  return c;
}

std::shared_ptr<const PackedOperand> pack_b(const Tensor& b, std::int64_t m, MathMode math) {
  constexpr const char* op = "pack_b";
  check_operand(b, op, "b", 2);
  MT_CHECK(b.dim() == 2, ShapeError, op, ": b must be a (k, n) matrix, got shape ", b.shape());
  MT_CHECK(m >= 0, InvalidArgument, op, ": m = ", m, " must not be negative");
  if (!b.is_cuda() || math == MathMode::FP32 || b.numel() == 0) return nullptr;
  Problem p;
  p.m = to_int(m, "m", op);
  p.k = to_int(b.size(0), "k", op);
  p.n = to_int(b.size(1), "n", op);
  p.b = b.data<float>(), p.b_sk = b.stride(0), p.b_sn = b.stride(1);
  p.a_sm = p.k, p.a_sk = 1, p.c_sm = p.n, p.c_sn = 1;  // a and c as the common row-major case
  // The kernel the dispatcher picks for (m, n, k) in `math`: only the wgmma kernel reads a packed b.
  if (detail::gemm::choose(p, math).kernel != detail::gemm::Kernel::Wgmma) return nullptr;
  DeviceGuard guard(b.device());
  const cudaStream_t stream = detail::stream_for(b.device());
  detail::record_stream(b, stream);
  return detail::gemm::wgmma_pack_b(p, math, stream);
}

Tensor linear(const Tensor& x_in, const Tensor& w, const Tensor& bias, Activation activation,
              std::optional<MathMode> math) {
  constexpr const char* op = "linear";
  check_operand(x_in, op, "x", 1);
  check_operand(w, op, "w", 2);
  check_same_device(x_in, "x", w, "w", op);
  MT_CHECK(w.dim() == 2, ShapeError, op, ": w must be (in, out), got shape ", w.shape());
  MT_CHECK(x_in.size(-1) == w.size(0), ShapeError, op, ": x ", x_in.shape(), " and w ", w.shape(),
           ": x's last dimension ", x_in.size(-1), " differs from w's in = ", w.size(0));
  if (bias.defined()) {
    MT_CHECK(bias.dtype() == DType::F32, DTypeError, op, ": bias must be float32, got ", bias.dtype());
    check_same_device(bias, "bias", x_in, "x", op);
    MT_CHECK(bias.dim() == 1 && bias.size(0) == w.size(1), ShapeError, op, ": bias ", bias.shape(),
             " must be (", w.size(1), ") for w ", w.shape());
  }
  Tensor x = x_in.dim() == 1 ? x_in.unsqueeze(0) : x_in;
  // Leading dims that collapse into rows make one 2-D GEMM (better tiles than a batch of small ones).
  if (x.dim() > 2) {
    std::vector<int> lead;  // leading dims of extent > 1, the row dim included
    std::int64_t rows = 1;
    for (int d = 0; d + 1 < x.dim(); ++d) {
      rows *= x.size(d);
      if (x.size(d) > 1) lead.push_back(d);
    }
    bool collapsible = true;
    for (size_t i = 0; i + 1 < lead.size(); ++i)
      collapsible = collapsible && x.stride(lead[i]) == x.stride(lead[i + 1]) * x.size(lead[i + 1]);
    const std::int64_t row_stride = lead.empty() ? x.size(-1) : x.stride(lead.back());
    if (collapsible) x = x.as_strided(Shape{rows, x.size(-1)}, Shape{row_stride, x.stride(-1)}, x.offset());
  }
  std::vector<std::int64_t> shape(x_in.shape().begin(), x_in.shape().end() - 1);
  shape.push_back(w.size(1));
  std::vector<std::int64_t> cshape(x.shape().begin(), x.shape().end() - 1);
  cshape.push_back(w.size(1));
  Tensor y = empty(Shape(cshape), DType::F32, x.device());
  GemmOptions o;
  o.math = math;
  o.activation = activation;
  run(x, w, y, o, bias, op);
  return y.view(Shape(shape));
}

}  // namespace mt
