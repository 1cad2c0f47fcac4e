#include "tests/common/op_harness.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "minitensor/runtime/device.h"
#include "minitensor/tensor/detail/random.h"

namespace mt::test {

std::string Comparison::summary() const {
  std::ostringstream os;
  os << (ok ? "ok" : "MISMATCH") << ": bad=" << n_bad << " max_abs=" << max_abs << " max_rel=" << max_rel
     << " nmse=" << nmse;
  if (!first_bad.empty()) os << " first: " << first_bad;
  return os.str();
}

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::Offset1:
      return "offset1";
    case Layout::Transposed:
      return "transposed";
    case Layout::Strided:
      return "strided";
    case Layout::Expanded:
      return "expanded";
  }
  return "?";
}

namespace {

bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  std::uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

template <class T>
void compare_values(const T* got, const T* ref, std::int64_t n, const Tolerance& tol, Comparison& r) {
  double err2 = 0, ref2 = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(got[i]), e = static_cast<double>(ref[i]);
    bool bad;
    if constexpr (std::is_same_v<T, float>) {
      if (tol.exact) {
        bad = !same_bits(got[i], ref[i]);
      } else if (std::isnan(e) || std::isnan(g)) {
        bad = std::isnan(e) != std::isnan(g);
      } else if (std::isinf(e) || std::isinf(g)) {
        bad = g != e;
      } else {
        const double d = std::fabs(g - e);
        bad = d > tol.abs + tol.rel * std::fabs(e);
        r.max_abs = std::max(r.max_abs, d);
        if (e != 0) r.max_rel = std::max(r.max_rel, d / std::fabs(e));
        err2 += d * d;
        ref2 += e * e;
      }
    } else {
      bad = got[i] != ref[i];
      const double d = std::fabs(g - e);
      r.max_abs = std::max(r.max_abs, d);
      err2 += d * d;
      ref2 += e * e;
    }
    if (bad) {
      if (r.n_bad++ == 0) {
        std::ostringstream os;
        os << "index " << i << ": got " << +got[i] << ", expected " << +ref[i];
        r.first_bad = os.str();
      }
    }
  }
  r.nmse = ref2 > 0 ? err2 / ref2 : err2;
  r.ok = r.n_bad == 0;
}

// The value of element i of an input: uniform in [lo, hi], with a deterministic sprinkle of special values.
double input_value(const InputSpec& spec, std::uint64_t seed, std::int64_t i) {
  const double u = detail::uniform01(seed, static_cast<std::uint64_t>(i));
  double v = spec.lo + (spec.hi - spec.lo) * u;
  if (spec.dtype != DType::F32) return std::round(v);
  if (spec.special_fraction > 0 &&
      detail::uniform01(seed ^ 0xA5A5A5A5ull, static_cast<std::uint64_t>(i)) < spec.special_fraction) {
    static const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                                      std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity(),
                                      -0.0,
                                      1e-40,
                                      -3e-39,
                                      0.0};
    v = specials[detail::mix64(seed, static_cast<std::uint64_t>(i)) % 7];
  }
  return v;
}

// The storage shape each layout needs, and the view of it with the logical shape.
Shape base_shape(const InputSpec& s) {
  Shape b = s.shape;
  const int r = b.rank();
  switch (s.layout) {
    case Layout::Contiguous:
      return b;
    case Layout::Offset1:
      return Shape{b.numel() + 1};
    case Layout::Transposed:
      if (r >= 2) std::swap(b[r - 1], b[r - 2]);
      return b;
    case Layout::Strided:
      if (r >= 1) b[r - 1] *= 2;
      return b;
    case Layout::Expanded:
      if (r >= 1) b[0] = std::min<std::int64_t>(b[0], 1);
      return b;
  }
  return b;
}

Tensor view_of(const Tensor& base, const InputSpec& s) {
  const int r = s.shape.rank();
  switch (s.layout) {
    case Layout::Contiguous:
      return base;
    case Layout::Offset1:
      return base.slice(0, 1, base.numel()).view(s.shape);
    case Layout::Transposed:
      return r >= 2 ? base.transpose(-1, -2) : base;
    case Layout::Strided:
      return r >= 1 ? base.slice(-1, 0, base.size(-1), 2) : base;
    case Layout::Expanded:
      return r >= 1 ? base.expand(s.shape) : base;
  }
  return base;
}

std::string describe(const OpCase& c) {
  std::ostringstream os;
  os << c.name << " seed=" << c.seed << " inputs:";
  for (const auto& in : c.inputs) os << ' ' << in.shape << '/' << layout_name(in.layout) << '/' << in.dtype;
  return os.str();
}

}  // namespace

Comparison compare(const Tensor& got_in, const Tensor& ref_in, const Tolerance& tol) {
  Comparison r;
  if (got_in.shape() != ref_in.shape() || got_in.dtype() != ref_in.dtype()) {
    r.ok = false;
    r.first_bad = detail::str("shape/dtype differ: got ", got_in.shape(), " ", got_in.dtype(), ", expected ",
                              ref_in.shape(), " ", ref_in.dtype());
    return r;
  }
  const Tensor got = got_in.cpu().contiguous(), ref = ref_in.cpu().contiguous();
  MT_DISPATCH_DTYPE(got.dtype(), "compare", T, [&] {
    compare_values(static_cast<const T*>(got.data_ptr()), static_cast<const T*>(ref.data_ptr()), got.numel(),
                   tol, r);
  });
  return r;
}

Tensor make_input(const InputSpec& spec, std::uint64_t seed, Device device) {
  const Shape bshape = base_shape(spec);
  Tensor base = empty(bshape, spec.dtype, Device::cpu());
  MT_DISPATCH_DTYPE(spec.dtype, "make_input", T, [&] {
    T* p = static_cast<T*>(base.data_ptr());
    for (std::int64_t i = 0; i < base.numel(); ++i) p[i] = static_cast<T>(input_value(spec, seed, i));
  });
  return view_of(device.is_cpu() ? base : base.to(device), spec);
}

std::vector<Tensor> make_inputs(const OpCase& c, Device device) {
  std::vector<Tensor> out;
  for (size_t k = 0; k < c.inputs.size(); ++k)
    out.push_back(make_input(c.inputs[k], c.seed + 7919 * k, device));
  return out;
}

Guarded::Guarded(const Shape& shape, DType dtype, Device device, std::int64_t guard_elems)
    : m_guard(guard_elems) {
  m_buffer = empty(Shape{shape.numel() + 2 * guard_elems}, dtype, device);
  m_buffer.fill_(dtype == DType::F32 ? -9.87654e30 : dtype == DType::I32 ? -123456789.0 : 165.0);
  m_view = m_buffer.slice(0, guard_elems, guard_elems + shape.numel()).view(shape);
  // Poison the output itself, so unwritten elements show up in the comparison.
  if (dtype == DType::F32) m_view.fill_(std::numeric_limits<double>::quiet_NaN());
}

std::string Guarded::check() const {
  const Tensor host = m_buffer.cpu();
  const std::int64_t n = host.numel();
  std::string bad;
  MT_DISPATCH_DTYPE(host.dtype(), "guard", T, [&] {
    const T* p = static_cast<const T*>(host.data_ptr());
    const T sentinel = p[0];
    for (std::int64_t i = 0; i < n && bad.empty(); ++i) {
      if (i >= m_guard && i < n - m_guard) continue;
      if (std::memcmp(&p[i], &sentinel, sizeof(T)) != 0) {
        bad = detail::str("guard band overwritten at ", i < m_guard ? "front" : "back", " element ",
                          i < m_guard ? i : i - (n - m_guard));
      }
    }
    if (bad.empty() && m_guard > 0) {
      const T expect = host.dtype() == DType::F32
                           ? static_cast<T>(-9.87654e30)
                           : static_cast<T>(host.dtype() == DType::I32 ? -123456789 : 165);
      if (std::memcmp(&p[0], &expect, sizeof(T)) != 0) bad = "guard band overwritten at front element 0";
    }
  });
  return bad;
}

void run_case(const OpCase& c) {
  SCOPED_TRACE(describe(c));
  const std::vector<Tensor> cpu_in = make_inputs(c, Device::cpu());
  const Tensor ref = c.run(cpu_in);
  ASSERT_TRUE(ref.defined());
  if (c.run_out) {
    Guarded g(ref.shape(), ref.dtype(), Device::cpu());
    c.run_out(cpu_in, g.view());
    EXPECT_EQ(g.check(), "") << "cpu out=";
    const Comparison r = compare(g.view(), ref, Tolerance::exactly());
    EXPECT_TRUE(r.ok) << "cpu out= differs from the cpu result: " << r.summary();
  }
  // The CPU half ran above; the CUDA half cannot: the case reports SKIPPED with the reason, never PASSED.
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  const std::vector<Tensor> gpu_in = make_inputs(c, Device::cuda(0));
  const Tensor got = c.run(gpu_in);
  ASSERT_TRUE(got.defined());
  EXPECT_TRUE(got.is_cuda()) << "the op returned a " << got.device() << " tensor for CUDA inputs";
  const Comparison r = compare(got, ref, c.tol);
  EXPECT_TRUE(r.ok) << r.summary();
  if (c.run_out) {
    Guarded g(ref.shape(), ref.dtype(), Device::cuda(0));
    c.run_out(gpu_in, g.view());
    EXPECT_EQ(g.check(), "") << "cuda out=";
    const Comparison ro = compare(g.view(), ref, c.tol);
    EXPECT_TRUE(ro.ok) << "cuda out=: " << ro.summary();
  }
}

}  // namespace mt::test
