// Views folded into their consumers: which permutes become strided views, the launches that saves, and the
// folded program's values. On the CPU the compiled program runs as the executor lays it out (the planned
// arena, every node at its place in its layout, views of their storage root), against the unfolded program
// and the CPU reference; on the GPU the folded executor runs against the unfolded one and check().
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "minitensor/graph/detail/internal.h"
#include "minitensor/graph/detail/program.h"
#include "minitensor/graph/graph.h"
#include "minitensor/ops/ops.h"
#include "random_graph.h"
#include "tests/common/gpu.h"
#include "tests/common/op_harness.h"

namespace mt {
namespace {

using detail::CompileFlags;
using detail::MemoryPlan;
using detail::OpKind;
using detail::Program;
using detail::str;

Tensor uniform(const Shape& s, std::uint64_t seed, double lo = -1, double hi = 1) {
  return rand(s, seed) * (hi - lo) + lo;
}

double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  return max(abs(a.cpu().contiguous() - b.cpu().contiguous())).item<float>();
}

// The program on the CPU as the executor lays it out: one arena and one output buffer (filled with NaN, so
// a read of memory nobody wrote shows), each node at its planned place in its planned layout, each step's
// nodes through the eager ops with the root's value written into its place (attention through
// attention_out, as the executor does). A buffer reused too early, or a stride or offset off, gives a wrong
// output.
TensorMap run_planned(const Program& p, const MemoryPlan& m, const TensorMap& inputs) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor arena = full({static_cast<std::int64_t>(m.arena_bytes / 4) + 1}, nan);
  const Tensor outs = full({static_cast<std::int64_t>(m.persistent_bytes / 4) + 1}, nan);
  std::vector<Tensor> t(p.g.nodes.size());
  for (int id : p.order) {
    const detail::NodeData& n = p.g.at(id);
    const auto i = static_cast<size_t>(id);
    EXPECT_EQ(n.dtype, DType::F32);
    switch (m.where[i]) {
      case MemoryPlan::Where::Leaf:
        t[i] = n.kind == OpKind::Input ? inputs.at(n.name).contiguous() : n.value.contiguous();
        break;
      case MemoryPlan::Where::Arena:
        t[i] = arena.as_strided(n.shape, p.strides[i], static_cast<std::int64_t>(m.offset[i] / 4));
        break;
      case MemoryPlan::Where::Persistent:
        t[i] = outs.as_strided(n.shape, p.strides[i], static_cast<std::int64_t>(m.offset[i] / 4));
        break;
      case MemoryPlan::Where::Alias: {
        const Tensor& base = t[static_cast<size_t>(m.alias_of[i])];
        t[i] = base.as_strided(n.shape, p.strides[i], base.offset() + p.view_offset[i]);
        break;
      }
      default:
        break;
    }
  }
  for (const detail::Step& s : p.steps) {
    std::vector<Tensor> local = t;
    for (int id : s.members) {
      const detail::NodeData& n = p.g.at(id);
      std::vector<Tensor> ins;
      for (int in : n.inputs) ins.push_back(local[static_cast<size_t>(in)]);
      if (id == s.root && n.kind == OpKind::Attention) {
        AttentionOptions o;
        o.causal = n.causal;
        o.scale = n.scalar;
        if (n.has_mask) o.mask = ins[3];
        Tensor out = t[static_cast<size_t>(id)];
        attention_out(ins[0], ins[1], ins[2], out, o);
        continue;
      }
      local[static_cast<size_t>(id)] = detail::eval_node(n, ins);
    }
    if (p.g.at(s.root).kind != OpKind::Attention)
      t[static_cast<size_t>(s.root)].copy_(local[static_cast<size_t>(s.root)]);
  }
  TensorMap out;
  for (const auto& [name, id] : p.g.outputs) out[name] = t[static_cast<size_t>(id)].contiguous();
  return out;
}

// The executor's plan: streams from the data first, then memory reuse that never crosses streams.
TensorMap run_compiled(const Graph& g, const CompileFlags& flags, const TensorMap& inputs, int* n_steps) {
  const Program p = detail::build_program(g.data(), flags);
  const detail::Schedule data_only = detail::schedule_streams(p, detail::plan_memory(p, false, false), 4);
  const MemoryPlan m = detail::plan_memory(p, true, true, &data_only.stream);
  if (n_steps) *n_steps = static_cast<int>(p.steps.size());
  return run_planned(p, m, inputs);
}

int count_kind(const Program& p, OpKind k) {
  int n = 0;
  for (const detail::Step& s : p.steps) n += p.g.at(s.root).kind == k;
  return n;
}

// A GPT-2 style block as bench/graph builds it: layer_norm, q / k / v linears reshaped and permuted into
// heads, causal attention, its heads permuted back into (B * T, d), the projection and a residual, a second
// layer_norm, a GELU-tanh MLP and a residual.
struct Block {
  std::int64_t b, t, h, hd, d;
  Graph g;
  Block(std::int64_t b_, std::int64_t t_, std::int64_t h_, std::int64_t hd_)
      : b(b_), t(t_), h(h_), hd(hd_), d(h_ * hd_) {
    std::uint64_t seed = 100;
    const double s = 1.0 / std::sqrt(static_cast<double>(d));
    auto param = [&](const std::string& name, const Shape& shape, double lo, double hi) {
      return g.parameter(name, uniform(shape, seed++, lo, hi));
    };
    auto x = g.input("x", {b * t, d});
    auto heads = [&](Node n) { return g.permute(g.reshape(n, {b, t, h, hd}), {0, 2, 1, 3}); };
    auto h1 = g.layer_norm(x, param("ln1_w", {d}, 0.5, 1.5), param("ln1_b", {d}, -0.1, 0.1));
    auto q = heads(g.linear(h1, param("wq", {d, d}, -s, s), param("bq", {d}, -s, s)));
    auto k = heads(g.linear(h1, param("wk", {d, d}, -s, s), param("bk", {d}, -s, s)));
    auto v = heads(g.linear(h1, param("wv", {d, d}, -s, s), param("bv", {d}, -s, s)));
    auto a = g.reshape(g.permute(g.attention(q, k, v, Node(), true), {0, 2, 1, 3}), {b * t, d});
    auto x2 = x + g.linear(a, param("wo", {d, d}, -s, s), param("bo", {d}, -s, s));
    auto h2 = g.layer_norm(x2, param("ln2_w", {d}, 0.5, 1.5), param("ln2_b", {d}, -0.1, 0.1));
    auto f = g.linear(h2, param("w1", {d, 4 * d}, -s, s), param("b1", {4 * d}, -s, s), Activation::GeluTanh);
    g.output("y", x2 + g.linear(f, param("w2", {4 * d, d}, -s / 2, s / 2), param("b2", {d}, -s, s)));
  }
  TensorMap inputs(std::uint64_t seed) const { return {{"x", uniform({b * t, d}, seed)}}; }
};

struct BlockShape {
  std::int64_t b, t, h, hd;
};
// Batch 1, T = 1, primes, head dims 32 / 64 / 128.
const BlockShape kShapes[] = {{1, 1, 2, 32}, {2, 7, 3, 64}, {1, 13, 2, 128}, {3, 5, 4, 32}, {2, 17, 2, 64}};

// The four head permutes are views: the block runs in 11 steps (2 layer_norms, 6 GEMMs, attention, 2
// residual adds) instead of 15, and computes what the unfolded program and the CPU reference compute.
TEST(GraphFold, BlockPermutesAreViews) {
  for (const BlockShape& s : kShapes) {
    SCOPED_TRACE(str("block ", s.b, "x", s.t, " heads ", s.h, "x", s.hd));
    Block blk(s.b, s.t, s.h, s.hd);
    CompileFlags fold;
    fold.merge_linears = false;  // q, k and v as three GEMMs (SharedInputLinearsRunAsOneGemm merges them)
    const Program p = detail::build_program(blk.g.data(), fold);
    EXPECT_EQ(count_kind(p, OpKind::Permute), 0);
    EXPECT_EQ(p.steps.size(), 11u);
    int n_folded = 0;
    for (const auto& line : p.log) n_folded += line.rfind("view folded: ", 0) == 0;
    EXPECT_EQ(n_folded, 4);
    CompileFlags off = fold;
    off.fold_views = false;
    EXPECT_EQ(detail::build_program(blk.g.data(), off).steps.size(), 15u);

    const TensorMap in = blk.inputs(7);
    const Tensor ref = run_cpu(blk.g, in).at("y");
    int n_on = 0, n_off = 0;
    const Tensor on = run_compiled(blk.g, fold, in, &n_on).at("y");
    const Tensor unfolded = run_compiled(blk.g, off, in, &n_off).at("y");
    EXPECT_EQ(n_on, 11);
    EXPECT_EQ(n_off, 15);
    EXPECT_LT(max_diff(on, ref), 1e-5);
    EXPECT_LT(max_diff(on, unfolded), 1e-5);
  }
}

// The attention's output is laid out (B, T, H, D): its permute back into (B, T, H, D) is a contiguous view
// and the projection reads it as (B * T, d) rows.
TEST(GraphFold, AttentionWritesItsConsumersLayout) {
  Block blk(2, 5, 3, 32);
  CompileFlags fold;
  fold.merge_linears = false;
  const Program p = detail::build_program(blk.g.data(), fold);
  for (const detail::Step& s : p.steps) {
    const detail::NodeData& n = p.g.at(s.root);
    if (n.kind != OpKind::Attention) continue;
    // (B, H, T, D) written with the strides of a (B, T, H, D) buffer.
    EXPECT_EQ(p.strides[static_cast<size_t>(s.root)], (Shape{5 * 3 * 32, 32, 3 * 32, 1}));
    // q, k and v are (B, H, T, D) views of the (B * T, d) linears' results.
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(p.strides[static_cast<size_t>(n.inputs[static_cast<size_t>(k)])], (Shape{5 * 96, 32, 96, 1}));
  }
}

// A permute read by an elementwise op, or declared an output, stays a copy; one read by a transpose that is
// itself copied folds into that copy; batched matmuls read heads in place where the batch dims collapse.
TEST(GraphFold, CopiesRemainWhereNoConsumerTakesStrides) {
  for (std::int64_t b : {1, 2}) {
    SCOPED_TRACE(str("batch ", b));
    const std::int64_t t = 11, h = 2, hd = 32, d = h * hd;
    Graph g;
    auto x = g.input("x", {b * t, d});
    auto heads = [&](Node n) { return g.permute(g.reshape(n, {b, t, h, hd}), {0, 2, 1, 3}); };
    auto q = heads(g.matmul(x, g.parameter("wq", uniform({d, d}, 1, -0.2, 0.2))));
    auto k = heads(g.matmul(x, g.parameter("wk", uniform({d, d}, 2, -0.2, 0.2))));
    auto v = heads(g.matmul(x, g.parameter("wv", uniform({d, d}, 3, -0.2, 0.2))));
    auto sc = g.softmax(g.matmul(q, g.transpose(k, -1, -2)) * 0.125, -1);
    auto o = g.matmul(sc, v);
    g.output("y", g.reshape(g.permute(o, {0, 2, 1, 3}), {b * t, d}));
    g.output("qt", g.permute(q, {0, 1, 3, 2}));  // an output: materialised, contiguous
    g.output("e", g.exp(v));                     // v read by an elementwise op: v's permute is a copy
    const Program p = detail::build_program(g.data(), CompileFlags{});
    // (B, H, T, D) views of (B * T, d) collapse their batch dims only at batch 1: there q, k and k's
    // transpose are views; at batch 2 k is read in place by its transpose's copy. v (read by exp), qt (an
    // output) and o's permute back (no view of it is (B * T, d)) are copies either way.
    const int expected_permutes = b == 1 ? 3 : 5;
    EXPECT_EQ(count_kind(p, OpKind::Permute), expected_permutes);
    CompileFlags off;
    off.fold_views = false;
    const TensorMap in = {{"x", uniform({b * t, d}, 5)}};
    const TensorMap ref = run_cpu(g, in);
    const TensorMap on = run_compiled(g, CompileFlags{}, in, nullptr);
    const TensorMap unfolded = run_compiled(g, off, in, nullptr);
    for (const char* name : {"y", "qt", "e"}) {
      EXPECT_LT(max_diff(on.at(name), ref.at(name)), 1e-5) << name;
      EXPECT_LT(max_diff(on.at(name), unfolded.at(name)), 1e-5) << name;
    }
  }
}

// What was folded is in the summary's decisions (the program's log).
TEST(GraphFold, LoggedInTheDecisions) {
  Block blk(1, 4, 2, 32);
  const Program p = detail::build_program(blk.g.data(), CompileFlags{});
  std::string all;
  for (const auto& line : p.log) all += line + "\n";
  EXPECT_NE(all.find("is a strided view, read in place by"), std::string::npos) << all;
  EXPECT_NE(all.find("attention writes"), std::string::npos) << all;
}

// The block's q, k and v linears read one input: one GEMM over their concatenated weights and biases, whose
// column slices, reshaped and permuted into heads, attention reads in place. 9 steps: 2 layer_norms, 4
// GEMMs, attention, 2 residual adds.
TEST(GraphFold, SharedInputLinearsRunAsOneGemm) {
  for (const BlockShape& s : kShapes) {
    SCOPED_TRACE(str("block ", s.b, "x", s.t, " heads ", s.h, "x", s.hd));
    Block blk(s.b, s.t, s.h, s.hd);
    const Program p = detail::build_program(blk.g.data(), CompileFlags{});
    EXPECT_EQ(p.steps.size(), 9u);
    EXPECT_EQ(count_kind(p, OpKind::Linear), 4);
    EXPECT_EQ(count_kind(p, OpKind::Permute), 0);
    int n_merged = 0;
    for (const auto& line : p.log) n_merged += line.rfind("linears merged: ", 0) == 0;
    EXPECT_EQ(n_merged, 1);
    CompileFlags separate;
    separate.merge_linears = false;
    CompileFlags neither = separate;
    neither.fold_views = false;
    CompileFlags merged_only;
    merged_only.fold_views = false;

    const TensorMap in = blk.inputs(3);
    const Tensor ref = run_cpu(blk.g, in).at("y");
    int n_on = 0, n_sep = 0, n_none = 0, n_merged_only = 0;
    const Tensor on = run_compiled(blk.g, CompileFlags{}, in, &n_on).at("y");
    const Tensor sep = run_compiled(blk.g, separate, in, &n_sep).at("y");
    const Tensor none = run_compiled(blk.g, neither, in, &n_none).at("y");
    const Tensor mo = run_compiled(blk.g, merged_only, in, &n_merged_only).at("y");
    EXPECT_EQ(n_on, 9);
    EXPECT_EQ(n_sep, 11);
    EXPECT_EQ(n_none, 15);
    EXPECT_EQ(n_merged_only, 13);  // the merged GEMM, its three slices' head permutes copied
    for (const Tensor* t : {&on, &sep, &mo}) {
      EXPECT_LT(max_diff(*t, ref), 1e-5);
      EXPECT_LT(max_diff(*t, none), 1e-5);
    }
  }
}

// Linears are merged only where every result can be read as a column slice and they share the input and the
// activation: an output, a result read by an elementwise op, another activation stay separate.
TEST(GraphFold, MergeOnlyWhereSlicesAreRead) {
  const std::int64_t n = 6, d = 32;
  Graph g;
  auto x = g.input("x", {n, d});
  auto w = [&](std::uint64_t seed) { return g.parameter(str("w", seed), uniform({d, d}, seed, -0.3, 0.3)); };
  auto bias = [&](std::uint64_t seed) { return g.parameter(str("b", seed), uniform({d}, seed, -0.3, 0.3)); };
  auto heads = [&](Node t) { return g.permute(g.reshape(t, {1, n, 2, 16}), {0, 2, 1, 3}); };
  auto a = g.linear(x, w(1), bias(11));
  auto b = g.linear(x, w(2), bias(12));
  auto c = g.linear(x, w(3), bias(13));
  auto r = g.linear(x, w(4), bias(14), Activation::Relu);      // another activation
  auto o = g.linear(x, w(5), bias(15));                        // an output
  auto e = g.linear(x, w(6), bias(16));                        // read by an elementwise op
  g.output("att", g.attention(heads(a), heads(b), heads(c)));  // a, b, c: merged
  g.output("r", g.matmul(heads(r), g.transpose(heads(r), -1, -2)));
  g.output("o", o);
  g.output("e", g.exp(e));
  const Program p = detail::build_program(g.data(), CompileFlags{});
  std::string merged;
  for (const auto& line : p.log)
    if (line.rfind("linears merged: ", 0) == 0) merged += line + "\n";
  EXPECT_NE(merged.find(str("#", a.id(), " ")), std::string::npos) << merged;
  EXPECT_NE(merged.find(str("#", c.id(), " ")), std::string::npos) << merged;
  for (Node s : {r, o, e}) EXPECT_EQ(merged.find(str("#", s.id(), " ")), std::string::npos) << merged;
  CompileFlags off;
  off.merge_linears = off.fold_views = false;
  const TensorMap in = {{"x", uniform({n, d}, 9)}};
  const TensorMap ref = run_cpu(g, in);
  const TensorMap got = run_compiled(g, CompileFlags{}, in, nullptr);
  const TensorMap plain = run_compiled(g, off, in, nullptr);
  for (const char* name : {"att", "r", "o", "e"}) {
    EXPECT_LT(max_diff(got.at(name), ref.at(name)), 1e-5) << name;
    EXPECT_LT(max_diff(got.at(name), plain.at(name)), 1e-5) << name;
  }
}

// Random graphs (transposes into GEMMs, views, reductions, broadcasting) laid out as the executor lays them
// out equal the CPU reference, folded or not.
TEST(GraphFold, RandomGraphsPlannedMatchCpu) {
  int n_run = 0;
  for (std::uint64_t seed = 0; seed < 150; ++seed) {
    test::RandomGraph rg = test::make_random_graph(seed);
    const Program p = detail::build_program(rg.graph.data(), CompileFlags{});
    bool f32 = true;
    for (int id : p.order) f32 = f32 && p.g.at(id).dtype == DType::F32;
    if (!f32) continue;  // the simulated arena holds float32
    ++n_run;
    const TensorMap ref = run_cpu(rg.graph, rg.inputs);
    for (bool fold : {true, false}) {
      CompileFlags f;
      f.fold_views = fold;
      const TensorMap got = run_compiled(rg.graph, f, rg.inputs, nullptr);
      for (const auto& [name, want] : ref) {
        const test::Comparison c = test::compare(got.at(name), want, test::Tolerance::close(1e-5, 1e-4));
        EXPECT_TRUE(c.ok) << "seed " << seed << " fold " << fold << " output " << name << ": " << c.summary()
                          << "\n"
                          << rg.description;
      }
    }
  }
  EXPECT_GT(n_run, 50);
}

// On the GPU: the folded and merged executor (9 launches, captured) equals the unfolded one and passes
// check().
TEST(GraphFold, GpuBlockFoldedMatchesUnfolded) {
  MT_REQUIRE_GPU();
  for (const BlockShape& s : kShapes) {
    SCOPED_TRACE(str("block ", s.b, "x", s.t, " heads ", s.h, "x", s.hd));
    Block blk(s.b, s.t, s.h, s.hd);
    const TensorMap in = blk.inputs(11);
    ExecOptions o;
    o.device = Device::cuda(0);
    ExecOptions off = o;
    off.compile.fold_views = off.compile.merge_linears = false;
    Executor folded(blk.g, o), unfolded(blk.g, off);
    EXPECT_EQ(folded.n_launches(), 9);
    EXPECT_EQ(unfolded.n_launches(), 15);
    const Tensor ref = run_cpu(blk.g, in).at("y");
    for (int rep = 0; rep < 3; ++rep) {  // plain, captured, replayed
      const Tensor a = folded.run(in).at("y").clone();
      const Tensor u = unfolded.run(in).at("y").clone();
      EXPECT_LT(max_diff(a, u), 2e-5);  // the merged GEMM may sum in another order
      EXPECT_LT(max_diff(a, ref), 2e-5);
    }
    const CheckReport r = check(blk.g, in, o);
    EXPECT_TRUE(r.ok) << r;
  }
}

}  // namespace
}  // namespace mt
