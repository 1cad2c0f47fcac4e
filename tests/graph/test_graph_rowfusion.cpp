// Row fusion: a last-axis reduction with the elementwise ops around it as one NVRTC kernel a row. The pass's
// groups and the generated sources (NVRTC needs no GPU) always; on a GPU, fused against unfused and against
// the CPU reference over awkward shapes, NaN/Inf, CUDA graph replay and the NVRTC fallback.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "minitensor/graph/detail/codegen.h"
#include "minitensor/graph/detail/program.h"
#include "minitensor/graph/graph.h"
#include "minitensor/ops/ops.h"
#include "tests/common/gpu.h"

namespace mt {
namespace {

using detail::CompileFlags;
using detail::OpKind;
using detail::Program;
using detail::Step;

Tensor uniform(const Shape& s, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<float> v = rand(s, seed).to_vector<float>();
  for (float& f : v) f = static_cast<float>(lo + (hi - lo) * f);
  return from_vector(v, s);
}

// LayerNorm from primitives: mean, sub, mul, mean, add eps, rsqrt (or sqrt and div), mul, mul weight, add
// bias.
Node layer_norm_primitives(Graph& g, Node x, Node w, Node b, bool use_sqrt = false) {
  auto m = g.mean(x, -1, true);
  auto xc = x - m;
  auto v = g.mean(xc * xc, -1, true);
  auto y = use_sqrt ? xc / g.sqrt(v + 1e-5) : xc * g.rsqrt(v + 1e-5);
  if (w) y = y * w;
  if (b) y = y + b;
  return y;
}

Node rms_norm_primitives(Graph& g, Node x, Node w) {
  auto y = x * g.rsqrt(g.mean(g.square(x), -1, true) + 1e-6);
  return w ? y * w : y;
}

Node softmax_primitives(Graph& g, Node x) {
  auto e = g.exp(x - g.max(x, -1, true));
  return e / g.sum(e, -1, true);
}

// log-softmax with a min in it too: x - max - log(sum(exp(x - max))) + 0 * min (a max and a min pass).
Node log_softmax_primitives(Graph& g, Node x) {
  auto s = x - g.max(x, -1, true);
  return s - g.log(g.sum(g.exp(s), -1, true)) + g.min(x, -1, true) * 0.0;
}

CompileFlags rows_only() {
  CompileFlags f;
  f.fuse_softmax = false;  // the max/sub/exp/sum/div pattern would take the softmax first
  return f;
}

int count_kind(const Program& p, Step::Kind k) {
  int n = 0;
  for (const Step& s : p.steps) n += s.kind == k;
  return n;
}

bool log_has(const Program& p, const std::string& what) {
  for (const auto& l : p.log)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

std::string log_of(const Program& p) {
  std::string s;
  for (const auto& l : p.log) s += l + "\n";
  return s;
}

// ---------------------------------------------------------------- the pass (CPU)
TEST(GraphRowFusion, LayerNormFromPrimitivesIsOneStep) {
  for (bool use_sqrt : {false, true}) {
    Graph g;
    auto x = g.input("x", {2, 5, 768});
    auto w = g.parameter("w", uniform({768}, 1));
    auto b = g.parameter("b", uniform({768}, 2));
    g.output("y", layer_norm_primitives(g, x, w, b, use_sqrt));
    const Program p = detail::build_program(g.data(), CompileFlags{});
    ASSERT_EQ(p.steps.size(), 1u) << log_of(p);
    const Step& s = p.steps[0];
    EXPECT_EQ(s.kind, Step::Kind::Rows);
    EXPECT_EQ(s.members.size(), 9u);  // mean, sub, mul, mean, add eps, rsqrt|sqrt, mul|div, mul w, add b
    EXPECT_EQ(s.reads.size(), 3u);    // x, w, b
    EXPECT_EQ(s.rows.n_rows, 10);
    EXPECT_EQ(s.rows.len, 768);
    EXPECT_TRUE(s.rows.out_varies);
    EXPECT_TRUE(log_has(p, "row fusion: 9 nodes into one kernel over 10 rows of 768")) << log_of(p);
    // Row fusion off: the reductions are steps of their own again.
    CompileFlags off;
    off.fuse_rows = false;
    const Program q = detail::build_program(g.data(), off);
    EXPECT_EQ(count_kind(q, Step::Kind::Rows), 0);
    EXPECT_GE(q.steps.size(), 5u) << log_of(q);
  }
}

TEST(GraphRowFusion, RmsNormAndSoftmaxFromPrimitivesAreOneStep) {
  {
    Graph g;
    auto x = g.input("x", {7, 4097});
    g.output("y", rms_norm_primitives(g, x, g.parameter("w", uniform({4097}, 3))));
    const Program p = detail::build_program(g.data(), CompileFlags{});
    ASSERT_EQ(p.steps.size(), 1u) << log_of(p);
    EXPECT_EQ(p.steps[0].kind, Step::Kind::Rows);
    EXPECT_EQ(p.steps[0].rows.width, 1);  // 4097 is odd: scalar slots
  }
  {
    Graph g;
    auto x = g.input("x", {13, 33});
    g.output("y", softmax_primitives(g, x));
    const Program p = detail::build_program(g.data(), rows_only());
    ASSERT_EQ(p.steps.size(), 1u) << log_of(p);
    EXPECT_EQ(p.steps[0].kind, Step::Kind::Rows);
    EXPECT_EQ(p.steps[0].members.size(), 5u);
    // With the softmax pattern on, the pattern wins: one softmax op.
    const Program q = detail::build_program(g.data(), CompileFlags{});
    ASSERT_EQ(q.steps.size(), 1u);
    EXPECT_EQ(q.g.at(q.steps[0].root).kind, OpKind::Softmax);
  }
  {
    Graph g;
    auto x = g.input("x", {3, 1000});
    g.output("y", log_softmax_primitives(g, x));
    const Program p = detail::build_program(g.data(), CompileFlags{});
    ASSERT_EQ(p.steps.size(), 1u) << log_of(p);
    EXPECT_EQ(p.steps[0].kind, Step::Kind::Rows);
  }
}

// Row fusion joins what the elementwise grouping does: off with fuse_elementwise, or with fuse_rows.
TEST(GraphRowFusion, FlagsTurnItOff) {
  Graph g;
  auto x = g.input("x", {4, 64});
  g.output("y", rms_norm_primitives(g, x, Node()));
  CompileFlags no_rows, no_elementwise;
  no_rows.fuse_rows = false;
  no_elementwise.fuse_elementwise = false;
  const Program a = detail::build_program(g.data(), no_rows),
                b = detail::build_program(g.data(), no_elementwise);
  EXPECT_EQ(count_kind(a, Step::Kind::Rows), 0);
  EXPECT_EQ(count_kind(b, Step::Kind::Rows), 0);
  EXPECT_EQ(b.steps.size(), 5u);  // square, mean, add, rsqrt, mul
  EXPECT_EQ(a.steps.size(), 4u);  // square, mean, (add, rsqrt), mul: the per-row chain is a group of its own
}

TEST(GraphRowFusion, NonLastAxisDoesNotFuse) {
  Graph g;
  auto x = g.input("x", {16, 24});
  auto m = g.mean(x, 0, true);  // (1, 24): over the columns
  g.output("y", (x - m) * 2.0);
  const Program p = detail::build_program(g.data(), CompileFlags{});
  EXPECT_EQ(count_kind(p, Step::Kind::Rows), 0) << log_of(p);
  EXPECT_EQ(p.steps.size(), 2u);  // the reduction, then the elementwise group
  const Step& red = p.steps[static_cast<size_t>(p.step_of[static_cast<size_t>(m.id())])];
  EXPECT_EQ(red.members.size(), 1u);
}

TEST(GraphRowFusion, ConsumerThatDoesNotBroadcastOverTheRowDoesNotFuse) {
  {
    // sum without keepdim: (24) broadcasts into (24, 24) along the columns, not the rows.
    Graph g;
    auto x = g.input("x", {24, 24});
    auto s = g.sum(x, -1);
    g.output("y", x + s);
    const Program p = detail::build_program(g.data(), CompileFlags{});
    EXPECT_EQ(count_kind(p, Step::Kind::Rows), 0) << log_of(p);
    EXPECT_NE(p.step_of[static_cast<size_t>(s.id())], p.step_of[static_cast<size_t>(p.g.outputs[0].second)]);
    EXPECT_TRUE(log_has(p, "no row fusion")) << log_of(p);
  }
  {
    // A reduction read by a GEMM: no elementwise consumer to join; its producer still joins it.
    Graph g;
    auto x = g.input("x", {8, 16});
    auto s = g.sum(g.exp(x), -1, true);  // (8, 1)
    g.output("y", g.matmul(s, g.parameter("w", uniform({1, 4}, 4))));
    const Program p = detail::build_program(g.data(), CompileFlags{});
    ASSERT_EQ(p.steps.size(), 2u) << log_of(p);
    EXPECT_EQ(p.steps[0].kind, Step::Kind::Rows);  // exp + sum, a per-row root
    EXPECT_FALSE(p.steps[0].rows.out_varies);
    EXPECT_EQ(p.steps[0].root, s.id());
  }
}

// A per-row value read outside the group (an output here) stays the root of its own step; its consumers
// read it as a per-row input.
TEST(GraphRowFusion, PerRowValueReadOutsideIsWritten) {
  Graph g;
  auto x = g.input("x", {6, 40});
  auto ss = g.sum(x * x, -1, true);
  g.output("ss", ss);
  g.output("y", x * g.rsqrt(ss + 1.0));
  const Program p = detail::build_program(g.data(), CompileFlags{});
  ASSERT_EQ(p.steps.size(), 2u) << log_of(p);
  const Step& a = p.steps[0];
  EXPECT_EQ(a.kind, Step::Kind::Rows);  // x * x and the sum
  EXPECT_EQ(a.root, ss.id());
  EXPECT_FALSE(a.rows.out_varies);
  // x * rsqrt(ss + 1): a row group without a reduction (the per-row chain computed once a row).
  const Step& b = p.steps[1];
  EXPECT_EQ(b.kind, Step::Kind::Rows) << log_of(p);
  EXPECT_EQ(b.members.size(), 3u);
}

TEST(GraphRowFusion, RowsOverTheOnChipLimitDoNotFuse) {
  Graph g;
  auto x = g.input("x", {2, 40000});
  g.output("y", layer_norm_primitives(g, x, Node(), Node()));
  const Program p = detail::build_program(g.data(), CompileFlags{});
  EXPECT_EQ(count_kind(p, Step::Kind::Rows), 0) << log_of(p);
  EXPECT_TRUE(log_has(p, "no row fusion: group at")) << log_of(p);
  EXPECT_TRUE(log_has(p, "floats per thread on chip (limit 32)")) << log_of(p);
  // The elementwise groups it falls back to are today's.
  CompileFlags off;
  off.fuse_rows = false;
  EXPECT_EQ(p.steps.size(), detail::build_program(g.data(), off).steps.size());
  // A smaller limit refuses a row the default takes.
  Graph h;
  auto y = h.input("y", {2, 4096});
  h.output("z", rms_norm_primitives(h, y, Node()));
  CompileFlags small;
  small.max_row_cached = 8;
  EXPECT_EQ(count_kind(detail::build_program(h.data(), small), Step::Kind::Rows), 0);
  EXPECT_EQ(count_kind(detail::build_program(h.data(), CompileFlags{}), Step::Kind::Rows), 1);
}

TEST(GraphRowFusion, PlanRows) {
  using detail::plan_rows;
  // x feeds the reductions (kept on chip), the weight only the root (read there), a per-row and a scalar
  // read.
  const detail::RowPlan a =
      plan_rows({10, 768}, {{10, 768}, {768}, {10, 1}, {}}, {true, false, false, false}, {10, 768});
  EXPECT_EQ(a.width, 4);
  EXPECT_EQ(a.threads, 64);
  EXPECT_EQ(a.slots, 3);
  EXPECT_EQ(a.rows_per_block, 2);
  EXPECT_EQ(a.read_varies, (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(a.read_cached, (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(a.cached_per_thread(), 1 * 3 * 4);
  const detail::RowPlan b = plan_rows({3, 4097}, {{3, 4097}}, {true}, {3, 1});
  EXPECT_EQ(b.width, 1);
  EXPECT_EQ(b.threads, 1024);
  EXPECT_EQ(b.slots, 5);
  EXPECT_EQ(b.rows_per_block, 1);
  EXPECT_FALSE(b.out_varies);
  const detail::RowPlan c = plan_rows({5, 1}, {{5, 1}}, {true}, {5, 1});
  EXPECT_EQ(c.len, 1);
  EXPECT_EQ(c.threads, 32);
  EXPECT_EQ(c.rows_per_block, 4);
  EXPECT_FALSE(c.read_varies[0]);
  EXPECT_FALSE(c.read_cached[0]);  // rows of one element: each row's value is read once
  EXPECT_FALSE(c.out_varies);
  for (std::int64_t len : {1, 3, 31, 32, 33, 127, 768, 1000, 1024, 4096, 4097, 32768}) {
    const detail::RowPlan r = plan_rows({2, len}, {{2, len}}, {true}, {2, len});
    EXPECT_EQ(r.threads % 32, 0);
    EXPECT_LE(r.threads, 1024);
    EXPECT_GE(static_cast<std::int64_t>(r.threads) * r.slots * r.width, len) << len;
    EXPECT_LT(static_cast<std::int64_t>(r.threads) * (r.slots - 1) * r.width, len) << len;  // no idle slot
  }
}

// ---------------------------------------------------------------- generated sources (NVRTC, no GPU)
struct SourceCase {
  std::string name;
  std::function<void(Graph&)> build;
  CompileFlags flags;
};

std::vector<SourceCase> source_cases() {
  return {
      {"layer_norm_768",
       [](Graph& g) {
         auto x = g.input("x", {2, 5, 768});
         g.output("y", layer_norm_primitives(g, x, g.input("w", {768}), g.input("b", {768})));
       },
       CompileFlags{}},
      {"layer_norm_sqrt_1000",
       [](Graph& g) {
         auto x = g.input("x", {7, 1000});
         g.output("y", layer_norm_primitives(g, x, g.input("w", {1000}), Node(), true));
       },
       CompileFlags{}},
      {"rms_norm_4097",
       [](Graph& g) {
         g.output("y", rms_norm_primitives(g, g.input("x", {3, 4097}), g.input("w", {4097})));
       },
       CompileFlags{}},
      {"softmax_1",
       [](Graph& g) {
         g.output("y", softmax_primitives(g, g.input("x", {5, 1})));
       },
       rows_only()},
      {"softmax_3",
       [](Graph& g) {
         g.output("y", softmax_primitives(g, g.input("x", {5, 3})));
       },
       rows_only()},
      {"log_softmax_min_4096",
       [](Graph& g) {
         g.output("y", log_softmax_primitives(g, g.input("x", {2, 4096})));
       },
       CompileFlags{}},
      {"per_row_root",
       [](Graph& g) {
         g.output("y", g.max(g.abs(g.input("x", {9, 32})), -1, true));
       },
       CompileFlags{}},
      {"broadcast_reads",  // (B, 1, d) and (B, T, 1) reads: offsets from the row's digits
       [](Graph& g) {
         auto x = g.input("x", {3, 4, 64});
         auto bias = g.input("bias", {3, 1, 64});
         auto scale = g.input("scale", {3, 4, 1});
         auto t = x + bias;
         g.output("y", (t - g.mean(t, -1, true)) * scale + g.input("s0", {}));
       },
       CompileFlags{}},
  };
}

TEST(GraphRowFusion, GeneratedSourcesCompileWithNvrtc) {
  for (const SourceCase& c : source_cases()) {
    SCOPED_TRACE(c.name);
    Graph g;
    c.build(g);
    const Program p = detail::build_program(g.data(), c.flags);
    int n_rows = 0;
    for (const Step& s : p.steps) {
      if (s.kind != Step::Kind::Rows) continue;
      ++n_rows;
      const std::string src = detail::step_kernel_source(p, s);
      EXPECT_NE(src.find("#include \"ops/functors.h\""), std::string::npos);
      EXPECT_NE(src.find("extern \"C\" __global__"), std::string::npos);
      if (s.rows.width == 4) {
        EXPECT_NE(src.find("float4"), std::string::npos) << src;
      }
      std::vector<char> cubin;
      std::string log;
      EXPECT_TRUE(detail::nvrtc_compile(src, 90, cubin, log)) << log << "\n" << src;
      EXPECT_GT(cubin.size(), 0u);
    }
    EXPECT_EQ(n_rows, 1) << log_of(p);
  }
}

// The same graph gives the same source (the kernel caches key on it), and a different row length another.
TEST(GraphRowFusion, SourceIsAFunctionOfTheGroup) {
  auto source = [](std::int64_t len) {
    Graph g;
    g.output("y", rms_norm_primitives(g, g.input("x", {4, len}), Node()));
    const Program p = detail::build_program(g.data(), CompileFlags{});
    return detail::step_kernel_source(p, p.steps.at(0));
  };
  EXPECT_EQ(source(256), source(256));
  EXPECT_NE(source(256), source(260));
  EXPECT_NE(source(256).find("mt::fn::rsqrt"), std::string::npos);
  EXPECT_NE(source(256).find("__shfl_xor_sync"), std::string::npos);
}

// ---------------------------------------------------------------- GPU
ExecOptions gpu_options(bool rows = true, bool cuda_graph = false) {
  ExecOptions o;
  o.device = Device::cuda(0);
  o.compile.fuse_rows = rows;
  o.compile.fuse_softmax = false;  // the spelled-out softmax stays primitives
  o.run.cuda_graph = cuda_graph;
  return o;
}

// |a - b| <= atol + rtol * |b| everywhere, NaN where b has NaN, the same infinities.
::testing::AssertionResult close(const Tensor& got, const Tensor& ref, double atol, double rtol) {
  const auto a = got.cpu().contiguous().to_vector<float>(), b = ref.cpu().contiguous().to_vector<float>();
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    const bool ok = std::isnan(b[i])   ? std::isnan(a[i])
                    : std::isinf(b[i]) ? a[i] == b[i]
                                       : std::fabs(a[i] - b[i]) <= atol + rtol * std::fabs(b[i]);
    if (!ok) return ::testing::AssertionFailure() << "at " << i << ": " << a[i] << " vs " << b[i];
  }
  return ::testing::AssertionSuccess();
}

using GraphBuilder = std::function<void(Graph&, const Shape&)>;

struct GpuCase {
  std::string name;
  GraphBuilder build;
};

std::vector<GpuCase> gpu_cases() {
  return {
      {"layer_norm",
       [](Graph& g, const Shape& s) {
         g.output("y", layer_norm_primitives(g, g.input("x", s), g.input("w", {s.back()}),
                                             g.input("b", {s.back()})));
       }},
      {"layer_norm_sqrt",
       [](Graph& g, const Shape& s) {
         g.output("y", layer_norm_primitives(g, g.input("x", s), Node(), Node(), true));
       }},
      {"rms_norm",
       [](Graph& g, const Shape& s) {
         g.output("y", rms_norm_primitives(g, g.input("x", s), g.input("w", {s.back()})));
       }},
      {"softmax", [](Graph& g, const Shape& s) { g.output("y", softmax_primitives(g, g.input("x", s))); }},
      {"log_softmax_min",
       [](Graph& g, const Shape& s) { g.output("y", log_softmax_primitives(g, g.input("x", s))); }},
      {"max_min_per_row",  // per-row root
       [](Graph& g, const Shape& s) {
         auto x = g.input("x", s);
         g.output("y", g.max(x * 2.0, -1, true) - g.min(g.exp(x), -1, true));
       }},
      {"sum_per_row_out",  // a per-row value read outside the group
       [](Graph& g, const Shape& s) {
         auto x = g.input("x", s);
         auto ss = g.sum(x * x, -1, true);
         g.output("ss", ss);
         g.output("y", x * g.rsqrt(ss + 1.0));
       }},
  };
}

TensorMap inputs_for(const Graph& g, std::uint64_t seed) {
  TensorMap in;
  for (const auto& n : g.data().nodes)
    if (n.kind == OpKind::Input) in[n.name] = uniform(n.shape, seed++, -2, 2).cuda();
  return in;
}

// Fused == unfused (row fusion off) == the CPU reference.
void expect_fused_matches(const GpuCase& c, const Shape& shape, const TensorMap& in_given = {},
                          bool cuda_graph = false) {
  SCOPED_TRACE(::testing::Message() << c.name << " " << shape);
  Graph g;
  c.build(g, shape);
  const TensorMap in =
      in_given.empty() ? inputs_for(g, 100 + static_cast<std::uint64_t>(shape.back())) : in_given;
  Executor fused(g, gpu_options(true, cuda_graph)), unfused(g, gpu_options(false));
  EXPECT_LT(fused.n_launches(), unfused.n_launches()) << fused.summary();
  EXPECT_TRUE(fused.warnings().empty());
  TensorMap cpu_in;
  for (const auto& [k, v] : in) cpu_in[k] = v.cpu();
  const TensorMap ref = run_cpu(g, cpu_in);
  const TensorMap u = unfused.run(in);
  for (int rep = 0; rep < (cuda_graph ? 3 : 1); ++rep) {
    const TensorMap f = fused.run(in);
    for (const auto& [name, t] : ref) {
      EXPECT_TRUE(close(f.at(name), u.at(name), 2e-6, 2e-5)) << name << " fused vs unfused, run " << rep;
      EXPECT_TRUE(close(f.at(name), t, 1e-5, 1e-4)) << name << " fused vs CPU, run " << rep;
    }
  }
  if (cuda_graph) {
    EXPECT_GE(fused.stats().n_captures, 1) << fused.summary();
    EXPECT_GE(fused.stats().n_replays, 1);
  }
}

TEST(GraphRowFusionCuda, FusedMatchesUnfusedAndCpuOverAwkwardRows) {
  MT_REQUIRE_GPU();
  for (const GpuCase& c : gpu_cases())
    for (std::int64_t len : {1, 3, 31, 32, 33, 127, 768, 1000, 1024, 4096, 4097})
      for (std::int64_t rows : {1, 7, 13}) expect_fused_matches(c, Shape{rows, len});
}

TEST(GraphRowFusionCuda, Rank3Input) {
  MT_REQUIRE_GPU();
  for (const GpuCase& c : gpu_cases())
    for (std::int64_t len : {33, 768}) expect_fused_matches(c, Shape{3, 5, len});
}

TEST(GraphRowFusionCuda, BroadcastReads) {
  MT_REQUIRE_GPU();
  const GpuCase c{"broadcast_reads", [](Graph& g, const Shape& s) {
                    auto x = g.input("x", s);
                    auto bias = g.input("bias", {s[0], 1, s[2]});
                    auto scale = g.input("scale", {s[0], s[1], 1});
                    auto t = x + bias;
                    g.output("y", (t - g.mean(t, -1, true)) * scale + g.input("s0", {}));
                  }};
  for (std::int64_t len : {3, 64, 1000}) expect_fused_matches(c, Shape{3, 4, len});
}

TEST(GraphRowFusionCuda, NanAndInfPropagate) {
  MT_REQUIRE_GPU();
  for (const GpuCase& c : gpu_cases()) {
    for (std::int64_t len : {3, 768, 4097}) {
      Graph g;
      const Shape shape{6, len};
      c.build(g, shape);
      TensorMap in = inputs_for(g, 7);
      std::vector<float> x = in.at("x").cpu().to_vector<float>();
      const float inf = std::numeric_limits<float>::infinity();
      x[static_cast<size_t>(0 * len + len / 2)] = std::nanf("");  // row 0: a NaN
      x[static_cast<size_t>(1 * len)] = inf;                      // row 1: +Inf
      x[static_cast<size_t>(2 * len + len - 1)] = -inf;           // row 2: -Inf
      x[static_cast<size_t>(3 * len)] = inf;                      // row 3: +Inf and -Inf
      x[static_cast<size_t>(3 * len + len - 1)] = -inf;
      x[static_cast<size_t>(4 * len)] = -0.0f;  // row 4: signed zero
      in["x"] = from_vector(x, shape).cuda();
      expect_fused_matches(c, shape, in);
    }
  }
}

TEST(GraphRowFusionCuda, CudaGraphReplay) {
  MT_REQUIRE_GPU();
  for (const GpuCase& c : gpu_cases()) expect_fused_matches(c, Shape{13, 768}, {}, /*cuda_graph=*/true);
}

// Row pointers that are not 16-byte aligned take the scalar loads and stores.
TEST(GraphRowFusionCuda, MisalignedInput) {
  MT_REQUIRE_GPU();
  const Shape shape{5, 256};
  const Tensor big = uniform({5 * 256 + 1}, 3).cuda();
  const Tensor x = big.narrow(0, 1, 5 * 256).view(shape);  // 4 bytes past a 16-byte boundary
  ASSERT_NE(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16, 0u);
  const TensorMap in = {{"x", x}, {"w", uniform({256}, 4).cuda()}, {"b", uniform({256}, 5).cuda()}};
  expect_fused_matches(
      {"layer_norm_misaligned",
       [&](Graph& h, const Shape& s) {
         h.output("y", layer_norm_primitives(h, h.input("x", s), h.input("w", {256}), h.input("b", {256})));
       }},
      shape, in);
}

// check(): every step, the row group as one, against the CPU.
TEST(GraphRowFusionCuda, CheckPasses) {
  MT_REQUIRE_GPU();
  Graph g;
  auto x = g.input("x", {2, 9, 1000});
  // h is read by a GEMM first, then by the row group last: an intermediate the row kernel may write over.
  auto h = g.input("r", {2, 9, 1000}) + x;
  g.output("p", g.matmul(h, g.parameter("wp", uniform({1000, 4}, 6, -0.05, 0.05))));
  g.output("y", layer_norm_primitives(g, h, g.input("w", {1000}), g.input("b", {1000})));
  const CheckReport report = check(g, inputs_for(g, 5), gpu_options());
  EXPECT_TRUE(report.ok) << report;
}

TEST(GraphRowFusionCuda, NvrtcFailureFallsBackToSeparateSteps) {
  MT_REQUIRE_GPU();
  Graph g;
  const Shape shape{13, 768};
  g.output("y", layer_norm_primitives(g, g.input("x", shape), g.input("w", {768}), g.input("b", {768})));
  struct FaultInjection {  // on for the broken executor's build only, whatever it throws
    FaultInjection() { detail::set_nvrtc_fault_injection(true); }
    ~FaultInjection() { detail::set_nvrtc_fault_injection(false); }
  };
  const auto build_broken = [&] {
    FaultInjection on;
    return Executor(g, gpu_options(true, true));
  };
  Executor broken = build_broken(), ok(g, gpu_options(true, true));
  ASSERT_EQ(broken.warnings().size(), 1u);
  EXPECT_NE(broken.warnings()[0].find("NVRTC could not compile the row group"), std::string::npos)
      << broken.warnings()[0];
  EXPECT_EQ(ok.n_launches(), 1);
  EXPECT_EQ(broken.n_launches(), 9);  // one step per member
  const TensorMap in = inputs_for(g, 11);
  TensorMap cpu_in;
  for (const auto& [k, v] : in) cpu_in[k] = v.cpu();
  const Tensor ref = run_cpu(g, cpu_in).at("y");
  for (int rep = 0; rep < 3; ++rep) {  // plain, captured, replayed
    EXPECT_TRUE(close(broken.run(in).at("y"), ref, 1e-5, 1e-4));
    EXPECT_TRUE(close(ok.run(in).at("y"), ref, 1e-5, 1e-4));
  }
}

}  // namespace
}  // namespace mt
