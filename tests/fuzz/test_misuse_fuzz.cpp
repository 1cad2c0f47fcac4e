// Seeded misuse fuzzer: random calls over the public API on CPU tensors with hostile arguments (extents 0, 1,
// huge, negative; strides 0, negative, huge; offsets; axes out of range; dtypes; overlapping outputs; integer
// division by zero; bad graph nodes). Each call either returns a value equal to a naive reference computed
// here (elementwise, sum) or throws an mt::Error; any other exception fails, and a crash fails the binary.
// MT_FUZZ_SEED reproduces a run (the seed is printed); MT_FUZZ_ITERS overrides the number of calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "minitensor/graph/graph.h"
#include "minitensor/ops/elementwise.h"
#include "minitensor/ops/gemm.h"
#include "minitensor/ops/reduce.h"
#include "minitensor/ops/softmax.h"
#include "minitensor/tensor/tensor.h"

namespace mt {
namespace {

constexpr std::int64_t kMax64 = std::numeric_limits<std::int64_t>::max();

std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

struct Fuzzer {
  std::mt19937_64 rng;
  std::int64_t n_ok = 0, n_errors = 0, n_checked = 0;

  explicit Fuzzer(std::uint64_t seed) : rng(seed) {}
  int pick(int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); }
  bool coin() { return pick(2) == 0; }

  // Extents, strides, offsets and axes: mostly sane, sometimes hostile.
  std::int64_t extent() {
    switch (pick(12)) {
      case 0:
        return 0;
      case 1:
        return 1;
      case 2:
        return -1 - pick(3);
      case 3:
        return pick(2) ? kMax64 : (std::int64_t(1) << (31 + pick(32)));
      default:
        return 1 + pick(5);
    }
  }
  std::int64_t stride() {
    switch (pick(10)) {
      case 0:
        return 0;
      case 1:
        return -1 - pick(4);
      case 2:
        return pick(2) ? kMax64 : (std::int64_t(1) << (30 + pick(33)));
      default:
        return 1 + pick(6);
    }
  }
  std::int64_t offset() {
    switch (pick(8)) {
      case 0:
        return -1 - pick(3);
      case 1:
        return kMax64 - pick(3);
      default:
        return pick(8);
    }
  }
  std::int64_t axis(int rank) {
    if (pick(6) == 0) return pick(2) ? rank + pick(3) : -rank - 1 - pick(3);
    return rank == 0 ? 0 : pick(2 * rank) - rank;
  }
  Shape shape(bool hostile) {
    Shape s;
    const int rank = pick(4);
    for (int d = 0; d < rank; ++d) s.push_back(hostile ? extent() : 1 + pick(4));
    return s;
  }
  DType dtype() {
    const DType ds[] = {DType::F32, DType::I32, DType::U8};
    return ds[pick(3)];
  }

  // A small valid tensor with random values (integers small, divisors sometimes 0) and maybe a view layout.
  Tensor tensor(const Shape& s, DType dt) {
    Tensor t = empty(s, dt);
    const std::int64_t n = t.numel();
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = dt == DType::F32   ? (static_cast<double>(pick(2001)) - 1000) / 250.0
                       : dt == DType::I32 ? static_cast<double>(pick(11) - 5)
                                          : static_cast<double>(pick(7));
      if (dt == DType::F32) t.data<float>()[i] = static_cast<float>(v);
      if (dt == DType::I32) t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v);
      if (dt == DType::U8) t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v);
    }
    if (s.rank() >= 2 && coin()) t = t.transpose(0, 1).contiguous().transpose(0, 1);  // same values, strided
    return t;
  }

  // Values as doubles, in row-major order of the logical shape, read by a naive strided walk.
  static std::vector<double> values(const Tensor& t) {
    std::vector<double> out;
    const std::int64_t n = t.numel();
    out.reserve(static_cast<std::size_t>(n));
    const char* base = static_cast<const char*>(t.data_ptr());
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t rem = i, off = 0;
      for (int d = t.dim() - 1; d >= 0; --d) {
        off += (rem % t.shape()[d]) * t.strides()[d];
        rem /= t.shape()[d];
      }
      const char* p = base + off * static_cast<std::int64_t>(t.element_size());
      switch (t.dtype()) {
        case DType::F32:
          out.push_back(*reinterpret_cast<const float*>(p));
          break;
        case DType::I32:
          out.push_back(*reinterpret_cast<const std::int32_t*>(p));
          break;
        default:
          out.push_back(*reinterpret_cast<const std::uint8_t*>(p));
          break;
      }
    }
    return out;
  }

  // The naive reference of a binary op on one pair of values (integers: the documented wrap-around).
  static double ref_binary(BinaryOp op, double a, double b, DType dt) {
    if (dt == DType::F32) {
      const float x = static_cast<float>(a), y = static_cast<float>(b);
      switch (op) {
        case BinaryOp::Add:
          return x + y;
        case BinaryOp::Sub:
          return x - y;
        case BinaryOp::Mul:
          return x * y;
        case BinaryOp::Div:
          return x / y;
        case BinaryOp::Maximum:
          return std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y);
        case BinaryOp::Minimum:
          return std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y);
        case BinaryOp::Pow:
          return powf(x, y);
      }
    }
    const auto ia = static_cast<std::int64_t>(a), ib = static_cast<std::int64_t>(b);
    std::int64_t r = 0;
    switch (op) {
      case BinaryOp::Add:
        r = ia + ib;
        break;
      case BinaryOp::Sub:
        r = ia - ib;
        break;
      case BinaryOp::Mul:
        r = ia * ib;
        break;
      case BinaryOp::Div:
        r = ia / ib;
        break;  // callers never pass 0 here
      case BinaryOp::Maximum:
        r = std::max(ia, ib);
        break;
      case BinaryOp::Minimum:
        r = std::min(ia, ib);
        break;
      default:
        break;
    }
    if (dt == DType::U8) return static_cast<double>(static_cast<std::uint8_t>(r & 0xff));
    return static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(r & 0xffffffff)));
  }

  void expect_close(const std::vector<double>& got, const std::vector<double>& ref, DType dt,
                    const char* what) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(ref[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << what << " element " << i;
      } else if (dt != DType::F32 || std::isinf(ref[i])) {
        EXPECT_EQ(got[i], ref[i]) << what << " element " << i;
      } else {
        EXPECT_LE(std::fabs(got[i] - ref[i]), 1e-4 + 1e-4 * std::fabs(ref[i])) << what << " element " << i;
      }
    }
    ++n_checked;
  }

  // ---- the calls
  void views() {
    const Tensor t = tensor(shape(false), dtype());
    Tensor v;
    switch (pick(9)) {
      case 0:
        v = t.as_strided(shape(true), Shape(), 0);
        break;
      case 1: {
        Shape s = shape(true), st;
        for (int d = 0; d < s.rank(); ++d) st.push_back(stride());
        v = t.as_strided(s, st, offset());
        break;
      }
      case 2:
        v = t.view(shape(true));
        break;
      case 3:
        v = t.reshape(shape(true));
        break;
      case 4:
        v = t.expand(shape(true));
        break;
      case 5:
        v = t.slice(axis(t.dim()), offset(), offset(), pick(3) ? 1 + pick(3) : stride());
        break;
      case 6:
        v = t.transpose(axis(t.dim()), axis(t.dim()));
        break;
      case 7:
        v = t.narrow(axis(t.dim()), offset(), extent());
        break;
      default:
        v = pick(2) ? t.select(axis(t.dim()), offset()) : t.unsqueeze(axis(t.dim() + 1));
        break;
    }
    // Whatever came back is a valid view: every element readable (ASan checks), numel consistent. A huge
    // broadcast view (stride 0) is valid too, but not walked here.
    EXPECT_GE(v.numel(), 0);
    if (v.numel() > (1 << 16)) return;
    const std::vector<double> vals = values(v);
    EXPECT_EQ(static_cast<std::int64_t>(vals.size()), v.numel());
    if (coin()) values(v.contiguous());
  }

  void elementwise() {
    const DType dt = dtype();
    const Shape s = shape(false);
    const Tensor a = tensor(s, dt);
    Shape sb = s;
    if (coin() && sb.rank() > 0) sb[pick(sb.rank())] = 1 + pick(2);  // maybe not broadcastable
    const Tensor b = tensor(sb, pick(10) == 0 ? dtype() : dt);
    const BinaryOp ops[] = {BinaryOp::Add,     BinaryOp::Sub,     BinaryOp::Mul, BinaryOp::Div,
                            BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Pow};
    const BinaryOp op = ops[pick(7)];
    const int form = pick(3);
    double sc = pick(4) == 0 ? 0.5 : static_cast<double>(pick(9) - 4);
    if (pick(10) == 0) sc = 1e12;
    std::optional<Tensor> out;
    if (pick(5) == 0) out = pick(2) ? zeros(s, dt) : zeros(Shape{1}, dt).expand(s);  // maybe overlapping
    Tensor r;
    if (form == 0)
      r = binary(op, a, b, out);
    else if (form == 1)
      r = binary_scalar(op, a, sc, out);
    else
      r = scalar_binary(op, sc, a, out);
    // It returned: compare with the naive reference.
    const std::vector<double> av = values(a.expand(r.shape()));  // b may broadcast a
    std::vector<double> ref(av.size());
    if (form == 0) {
      const std::vector<double> bv = values(b.expand(r.shape()));
      for (std::size_t i = 0; i < av.size(); ++i) ref[i] = ref_binary(op, av[i], bv[i], dt);
    } else {
      for (std::size_t i = 0; i < av.size(); ++i)
        ref[i] = form == 1 ? ref_binary(op, av[i], sc, dt) : ref_binary(op, sc, av[i], dt);
    }
    expect_close(values(r), ref, dt, op_name(op));
  }

  void unary_call() {
    const DType dt = dtype();
    const Tensor a = tensor(shape(false), dt);
    const UnaryOp ops[] = {UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu, UnaryOp::Square, UnaryOp::Exp};
    const UnaryOp op = ops[pick(5)];
    const Tensor r = unary(op, a);
    const std::vector<double> av = values(a);
    std::vector<double> ref(av.size());
    for (std::size_t i = 0; i < av.size(); ++i) {
      const double x = av[i];
      double y = 0;
      switch (op) {
        case UnaryOp::Neg:
          y = -x;
          break;
        case UnaryOp::Abs:
          y = std::fabs(x);
          break;
        case UnaryOp::Relu:
          y = x > 0 ? x : 0;
          break;
        case UnaryOp::Square:
          y = x * x;
          break;
        default:
          y = std::exp(static_cast<float>(x));
          break;
      }
      if (dt == DType::F32) y = static_cast<float>(y);
      if (dt == DType::U8)
        y = static_cast<double>(static_cast<std::uint8_t>(static_cast<std::int64_t>(y) & 0xff));
      ref[i] = y;
    }
    expect_close(values(r), ref, dt, op_name(op));
  }

  void reduction() {
    const DType dt = pick(5) == 0 ? dtype() : DType::F32;
    const Tensor a = tensor(shape(false), dt);
    std::vector<std::int64_t> axes;
    const int n_axes = pick(3);
    for (int i = 0; i < n_axes; ++i) axes.push_back(axis(a.dim()));
    const bool keepdim = coin();
    const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::ArgMax};
    const ReduceOp op = ops[pick(4)];
    const Tensor r = reduce(op, a, axes, keepdim);
    if (op == ReduceOp::Sum && axes.empty()) {
      double total = 0;
      for (double v : values(a)) total += v;
      expect_close(values(r), {total}, DType::F32, "sum");
    }
    values(r);
  }

  void softmax_matmul() {
    const Tensor a = tensor(shape(false), pick(6) == 0 ? dtype() : DType::F32);
    if (coin()) {
      values(pick(2) ? softmax(a, axis(a.dim())) : log_softmax(a, axis(a.dim())));
    } else {
      const Tensor b = tensor(shape(false), pick(6) == 0 ? dtype() : DType::F32);
      values(matmul(a, b));
    }
  }

  void copies() {
    const DType dt = dtype();
    const Shape s = shape(false);
    Tensor dst = tensor(s, dt);
    if (pick(3) == 0 && s.rank() > 0) dst = zeros(Shape{1}, dt).expand(s);
    const Tensor src = tensor(pick(4) ? s : shape(false), pick(8) ? dt : dtype());
    if (coin()) {
      dst.copy_(src);
      expect_close(values(dst), values(src.expand(s)), dt, "copy_");
    } else {
      dst.fill_(pick(4) ? static_cast<double>(pick(5)) : -0.5);
    }
  }

  void graph_build() {
    Graph g;
    std::vector<Node> nodes;
    const int n_in = 1 + pick(2);
    for (int i = 0; i < n_in; ++i)
      nodes.push_back(g.input(detail::str("x", i), shape(pick(4) == 0), dtype()));
    Node foreign;
    std::optional<Graph> other;
    if (pick(4) == 0) {
      other.emplace();
      foreign = other->input("f", {2});
      if (coin()) other.reset();  // now a node of a destroyed graph
    }
    for (int k = 0; k < 4; ++k) {
      const Node a = pick(8) == 0 && foreign.valid()
                         ? foreign
                         : nodes[static_cast<std::size_t>(pick(static_cast<int>(nodes.size())))];
      const Node b = nodes[static_cast<std::size_t>(pick(static_cast<int>(nodes.size())))];
      Node r;
      switch (pick(8)) {
        case 0:
          r = g.binary(BinaryOp::Add, a, b);
          break;
        case 1:
          r = g.binary_scalar(pick(2) ? BinaryOp::Div : BinaryOp::Add, a, pick(3) ? 0.0 : 0.5);
          break;
        case 2:
          r = g.unary(pick(2) ? UnaryOp::Exp : UnaryOp::Neg, a);
          break;
        case 3:
          r = g.reduce(ReduceOp::Sum, a, {axis(a.shape().rank())}, coin());
          break;
        case 4:
          r = g.softmax(a, axis(a.shape().rank()));
          break;
        case 5:
          r = g.reshape(a, shape(true));
          break;
        case 6:
          r = g.matmul(a, b);
          break;
        default:
          r = g.clamp(a, pick(2) ? 0.5 : 0.0, pick(2) ? 3.0 : -1.0);
          break;
      }
      nodes.push_back(r);
    }
    g.output("y", nodes.back());
    if (pick(4) == 0) {
      Graph moved = std::move(g);
      g.size();  // NOLINT(bugprone-use-after-move): a moved-from graph throws
    }
  }

  void one_call() {
    switch (pick(8)) {
      case 0:
        return views();
      case 1:
      case 2:
        return elementwise();
      case 3:
        return unary_call();
      case 4:
        return reduction();
      case 5:
        return softmax_matmul();
      case 6:
        return copies();
      default:
        return graph_build();
    }
  }
};

TEST(MisuseFuzz, RandomCallsReturnTheReferenceOrThrowTypedErrors) {
  const std::uint64_t seed = env_u64("MT_FUZZ_SEED", std::random_device{}());
  const std::uint64_t iters = env_u64("MT_FUZZ_ITERS", 10000);
  std::printf("[ fuzz ] MT_FUZZ_SEED=%llu MT_FUZZ_ITERS=%llu\n", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(iters));
  RecordProperty("seed", std::to_string(seed));
  Fuzzer f(seed);
  for (std::uint64_t i = 0; i < iters; ++i) {
    SCOPED_TRACE(testing::Message() << "MT_FUZZ_SEED=" << seed << ", call " << i);
    try {
      f.one_call();
      ++f.n_ok;
    } catch (const Error&) {
      ++f.n_errors;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not an mt::Error: " << typeid(e).name() << ": " << e.what();
    }
    if (HasFatalFailure() || testing::Test::HasFailure()) {
      ADD_FAILURE() << "reproduce with MT_FUZZ_SEED=" << seed << " (failed at call " << i << ")";
      break;
    }
  }
  std::printf("[ fuzz ] %lld calls returned (%lld checked against the reference), %lld threw mt::Error\n",
              static_cast<long long>(f.n_ok), static_cast<long long>(f.n_checked),
              static_cast<long long>(f.n_errors));
  EXPECT_GT(f.n_ok, 0);
  EXPECT_GT(f.n_errors, 0);
}

}  // namespace
}  // namespace mt
