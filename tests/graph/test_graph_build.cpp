// Graph building, inference, errors, dumps, compile passes and memory plans: host only, run everywhere.
#include <gtest/gtest.h>

#include <algorithm>

#include "minitensor/graph/detail/codegen.h"
#include "minitensor/graph/detail/internal.h"
#include "minitensor/graph/detail/program.h"
#include "minitensor/graph/graph.h"
#include "random_graph.h"
#include "tests/common/op_harness.h"

namespace mt {
namespace {

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

Graph mlp_graph(std::int64_t b, std::int64_t h) {
  Graph g;
  auto x = g.input("x", {b, h});
  auto w1 = g.parameter("w1", zeros({h, h}));
  auto b1 = g.parameter("b1", zeros({h}));
  auto w2 = g.parameter("w2", zeros({h, h}));
  auto b2 = g.parameter("b2", zeros({h}));
  auto hdn = g.relu(g.matmul(x, w1) + b1).named("h");
  auto logits = (g.matmul(hdn, w2) + b2).named("logits");
  auto e = g.exp(logits - g.max(logits, -1, true));
  g.output("y", e / g.sum(e, -1, true));
  return g;
}

TEST(GraphBuild, InfersShapesAndDtypes) {
  Graph g;
  auto x = g.input("x", {4, 1, 3});
  auto y = g.input("y", {5, 1});
  auto z = x + y;
  EXPECT_EQ(z.shape(), Shape({4, 5, 3}));
  EXPECT_EQ(g.sum(z, 1).shape(), Shape({4, 3}));
  EXPECT_EQ(g.sum(z, -1, true).shape(), Shape({4, 5, 1}));
  EXPECT_EQ(g.reduce(ReduceOp::Max, z, {0, 2}).shape(), Shape({5}));
  EXPECT_EQ(g.reduce(ReduceOp::Sum, z).shape(), Shape());
  auto am = g.argmax(z, 1);
  EXPECT_EQ(am.dtype(), DType::I32);
  EXPECT_EQ(g.transpose(z, 0, 2).shape(), Shape({3, 5, 4}));
  EXPECT_EQ(g.permute(z, {1, 2, 0}).shape(), Shape({5, 3, 4}));
  EXPECT_EQ(g.reshape(z, {-1, 3}).shape(), Shape({20, 3}));
  EXPECT_EQ(g.view(z, {60}).shape(), Shape({60}));
  auto a = g.input("a", {2, 7, 3});
  auto b = g.input("b", {3, 5});
  EXPECT_EQ(g.matmul(a, b).shape(), Shape({2, 7, 5}));
  EXPECT_EQ(g.matmul(g.input("v", {3}), b).shape(), Shape({5}));
  EXPECT_EQ(g.linear(a, b, g.input("bias", {5}), Activation::Relu).shape(), Shape({2, 7, 5}));
  GemmNodeOptions t;
  t.trans_a = true;
  EXPECT_EQ(g.gemm(g.input("at", {3, 7}), b, t).shape(), Shape({7, 5}));
  EXPECT_EQ((2.0 * x - 1.0).shape(), x.shape());
  EXPECT_EQ(g.softmax(z, 1).shape(), z.shape());
}

TEST(GraphBuild, ShapeErrorsNameOpNodeAndShapes) {
  Graph g;
  auto x = g.input("x", {3, 4});
  auto y = g.input("y", {5, 4});
  const std::string e1 = error_of<ShapeError>([&] { g.binary(BinaryOp::Add, x, y, "h1"); });
  EXPECT_NE(e1.find("add"), std::string::npos) << e1;
  EXPECT_NE(e1.find("h1"), std::string::npos) << e1;
  EXPECT_NE(e1.find("(3, 4)"), std::string::npos) << e1;
  EXPECT_NE(e1.find("(5, 4)"), std::string::npos) << e1;
  const std::string e2 = error_of<ShapeError>([&] { g.matmul(x, y, "mm"); });
  EXPECT_NE(e2.find("matmul (node 'mm')"), std::string::npos) << e2;
  error_of<ShapeError>([&] { g.sum(x, 2); });
  error_of<ShapeError>([&] { g.reduce(ReduceOp::Sum, x, {1, 1}); });
  error_of<ShapeError>([&] { g.view(x, {5, -1}); });
  error_of<ShapeError>([&] { g.view(x, {-1, -1}); });
  error_of<ShapeError>([&] { g.permute(x, {0, 0}); });
  error_of<ShapeError>([&] { g.linear(x, g.input("w", {3, 2})); });
  error_of<ShapeError>([&] { g.linear(x, g.input("w2", {4, 2}), g.input("b", {3})); });
  error_of<ShapeError>([&] { g.softmax(x, 5); });
  error_of<ShapeError>([&] { g.gemm(x, g.input("w3", {4, 2}), {}, g.input("c", {7, 2})); });
}

TEST(GraphBuild, DTypeErrors) {
  Graph g;
  auto x = g.input("x", {3, 4});
  auto i = g.input("i", {3, 4}, DType::I32);
  const std::string e = error_of<DTypeError>([&] { g.binary(BinaryOp::Mul, x, i, "m"); });
  EXPECT_NE(e.find("float32"), std::string::npos) << e;
  EXPECT_NE(e.find("int32"), std::string::npos) << e;
  error_of<DTypeError>([&] { g.exp(i); });
  error_of<DTypeError>([&] { g.sum(i, 0); });
  error_of<DTypeError>([&] { g.matmul(i, x); });
  error_of<DTypeError>([&] { g.softmax(i); });
  EXPECT_EQ(g.relu(i).dtype(), DType::I32);  // defined on integers
}

TEST(GraphBuild, OwnershipAndNamingErrors) {
  Graph g1, g2;
  auto a = g1.input("a", {2});
  auto b = g2.input("b", {2});
  const std::string e = error_of<InvalidArgument>([&] { g1.add(a, b); });
  EXPECT_NE(e.find("another graph"), std::string::npos) << e;
  error_of<InvalidArgument>([&] { g1.output("y", b); });
  error_of<InvalidArgument>([&] { g1.relu(Node()); });
  error_of<InvalidArgument>([&] { g1.input("a", {3}); });  // duplicate input name
  g1.output("y", a);
  error_of<InvalidArgument>([&] { g1.output("y", a); });  // duplicate output name
  error_of<InvalidArgument>([&] { g1.output("", a); });
  error_of<InvalidArgument>([&] { Node() + 1.0; });
}

TEST(GraphBuild, GraphMoveKeepsNodesUsable) {
  Graph g;
  auto x = g.input("x", {2});
  Graph moved = std::move(g);
  auto y = x * 2.0;  // the operator finds the graph through the node
  EXPECT_EQ(moved.size(), 2);
  EXPECT_EQ(y.shape(), Shape({2}));
}

TEST(GraphBuild, DumpAndDot) {
  Graph g = mlp_graph(4, 8);
  const std::string d = g.dump();
  EXPECT_NE(d.find("'h'"), std::string::npos) << d;
  EXPECT_NE(d.find("relu"), std::string::npos);
  EXPECT_NE(d.find("output 'y'"), std::string::npos);
  const std::string dot = g.to_dot();
  EXPECT_EQ(dot.rfind("digraph minitensor {", 0), 0u);
  EXPECT_NE(dot.find("n0 -> n"), std::string::npos);
  EXPECT_NE(dot.find("out0"), std::string::npos);
  EXPECT_EQ(dot.back(), '\n');
}

// ---------------------------------------------------------------- passes
using detail::CompileFlags;
using detail::OpKind;
using detail::Program;
using detail::Step;

TEST(GraphPasses, MlpFusesToTwoGemms) {
  Graph g = mlp_graph(64, 32);
  const Program p = detail::build_program(g.data(), CompileFlags{});
  // linear + bias + relu, then linear + bias + softmax (the max/sub/exp/sum/div pattern, then the GEMM's
  // epilogue).
  ASSERT_EQ(p.steps.size(), 2u) << g.dump();
  const detail::NodeData &first = p.g.at(p.steps[0].root), &second = p.g.at(p.steps[1].root);
  EXPECT_EQ(first.kind, OpKind::Linear);
  EXPECT_EQ(first.gemm.activation, Activation::Relu);
  EXPECT_FALSE(first.gemm.softmax);
  EXPECT_TRUE(first.has_bias);
  EXPECT_EQ(second.kind, OpKind::Linear);
  EXPECT_EQ(second.gemm.activation, Activation::None);
  EXPECT_TRUE(second.gemm.softmax);
  EXPECT_TRUE(second.has_bias);
  EXPECT_EQ(detail::node_op_string(second), "linear+bias+softmax");
  // Without the GEMM epilogue fusion the softmax is a step of its own.
  CompileFlags no_epilogue;
  no_epilogue.fuse_gemm_epilogue = false;
  const Program r = detail::build_program(g.data(), no_epilogue);
  EXPECT_EQ(r.g.at(r.steps.back().root).kind, OpKind::Softmax);
  // Nothing fused: one step per op.
  CompileFlags none;
  none.fuse_elementwise = none.fuse_gemm_epilogue = none.fuse_softmax = false;
  const Program q = detail::build_program(g.data(), none);
  EXPECT_EQ(q.steps.size(), 10u);
}

// Both GELUs join the GEMM epilogue, each as its own activation: gelu (exact) as Gelu, gelu_tanh as GeluTanh.
TEST(GraphPasses, GeluFormsJoinTheGemmEpilogue) {
  Graph g;
  auto x = g.input("x", {8, 16});
  auto b = g.parameter("b", zeros({12}));
  // Two weights: one shared product would be computed once (common subexpressions) and feed both GELUs.
  g.output("exact", g.gelu(g.matmul(x, g.parameter("w1", zeros({16, 12}))) + b));
  g.output("approx", g.gelu_tanh(g.matmul(x, g.parameter("w2", zeros({16, 12}))) + b));
  const Program p = detail::build_program(g.data(), CompileFlags{});
  ASSERT_EQ(p.steps.size(), 2u) << g.dump();
  std::vector<Activation> acts;
  std::vector<std::string> ops;
  for (const Step& s : p.steps) {
    const detail::NodeData& n = p.g.at(s.root);
    EXPECT_EQ(n.kind, OpKind::Linear);
    acts.push_back(n.gemm.activation);
    ops.push_back(detail::node_op_string(n));
  }
  EXPECT_NE(std::find(acts.begin(), acts.end(), Activation::Gelu), acts.end());
  EXPECT_NE(std::find(acts.begin(), acts.end(), Activation::GeluTanh), acts.end());
  EXPECT_NE(std::find(ops.begin(), ops.end(), "linear+bias+gelu"), ops.end());
  EXPECT_NE(std::find(ops.begin(), ops.end(), "linear+bias+gelu_tanh"), ops.end());
}

// The softmax joins a GEMM only over the GEMM's last axis, and only where nothing else reads the GEMM's
// result.
TEST(GraphPasses, GemmSoftmaxFusionRules) {
  auto steps = [](Graph& g) { return detail::build_program(g.data(), CompileFlags{}).steps.size(); };
  {
    Graph g;
    auto x = g.input("x", {6, 5});
    auto w = g.parameter("w", zeros({5, 7}));
    g.output("y", g.softmax(g.matmul(x, w), 0));  // over the rows: not fused
    EXPECT_EQ(steps(g), 2u);
  }
  {
    Graph g;
    auto x = g.input("x", {6, 5});
    auto w = g.parameter("w", zeros({5, 7}));
    auto logits = g.matmul(x, w);
    g.output("logits", logits);  // read by the caller too: not fused
    g.output("y", g.softmax(logits, -1));
    EXPECT_EQ(steps(g), 2u);
  }
  {
    Graph g;
    auto x = g.input("x", {2, 6, 5});
    auto w = g.parameter("w", zeros({5, 7}));
    g.output("y", g.softmax(g.matmul(x, w), -1));  // batched x times a matrix: one fused step
    EXPECT_EQ(steps(g), 1u);
  }
  {
    // A GEMM built with its softmax: a ReLU after it stays a step of its own (the epilogue would apply it
    // before the softmax).
    Graph g;
    auto x = g.input("x", {6, 5});
    auto w = g.parameter("w", zeros({5, 7}));
    GemmNodeOptions o;
    o.softmax = true;
    g.output("y", g.relu(g.gemm(x, w, o)));
    EXPECT_EQ(steps(g), 2u);
  }
}

TEST(GraphPasses, TopologicalOrderDeadNodesAndCse) {
  Graph g;
  auto x = g.input("x", {4});
  auto dead = g.exp(x);                     // never reaches an output
  auto a = g.sigmoid(x), b = g.sigmoid(x);  // identical: merged
  auto y = a * b;
  g.output("y", y);
  const Program p = detail::build_program(g.data(), CompileFlags{});
  EXPECT_FALSE(p.live[static_cast<size_t>(dead.id())]);
  EXPECT_EQ(p.replaced_by[static_cast<size_t>(b.id())], a.id());
  EXPECT_FALSE(p.live[static_cast<size_t>(b.id())]);
  for (size_t i = 1; i < p.order.size(); ++i) EXPECT_LT(p.order[i - 1], p.order[i]);
  for (int id : p.order)
    for (int in : p.g.at(id).inputs) EXPECT_LT(in, id);
  ASSERT_EQ(p.steps.size(), 1u);  // sigmoid and mul in one kernel
  EXPECT_EQ(p.steps[0].kind, Step::Kind::Fused);
  EXPECT_EQ(p.steps[0].members.size(), 2u);
}

TEST(GraphPasses, ElementwiseFusionRules) {
  Graph g;
  auto x = g.input("x", {8, 16});
  auto v = g.input("v", {16});
  auto small = g.exp(v);  // (16): broadcast into (8, 16): not fused (would be recomputed 8 times)
  auto t = g.tanh(x + small);
  auto u = g.relu(t) * t;  // diamond inside one group
  auto r = g.sum(u, 1);    // a reduction ends the group (without row fusion)
  auto out2 = g.abs(t);    // t has a consumer outside u's group: t cannot join it
  g.output("r", r);
  g.output("o", out2);
  // The elementwise rules alone; with row fusion (below) the last-axis sum takes u's group.
  CompileFlags no_rows;
  no_rows.fuse_rows = false;
  const Program p = detail::build_program(g.data(), no_rows);
  EXPECT_EQ(p.step_of[static_cast<size_t>(small.id())], p.step_of[static_cast<size_t>(small.id())]);
  EXPECT_NE(p.step_of[static_cast<size_t>(small.id())], p.step_of[static_cast<size_t>(t.id())]);
  EXPECT_NE(p.step_of[static_cast<size_t>(t.id())], p.step_of[static_cast<size_t>(u.id())]);
  EXPECT_EQ(p.g.at(p.steps[static_cast<size_t>(p.step_of[static_cast<size_t>(u.id())])].root).kind,
            OpKind::Binary);
  const Step& su = p.steps[static_cast<size_t>(p.step_of[static_cast<size_t>(u.id())])];
  EXPECT_EQ(su.members.size(), 2u);  // relu, mul
  const Step& st = p.steps[static_cast<size_t>(p.step_of[static_cast<size_t>(t.id())])];
  EXPECT_EQ(st.members.size(), 2u);  // add, tanh
  EXPECT_EQ(st.reads.size(), 2u);    // x and exp(v)
  // Row fusion: relu and mul join the sum over their rows, one row kernel writing r; the rest is unchanged.
  const Program q = detail::build_program(g.data(), CompileFlags{});
  const Step& rows = q.steps[static_cast<size_t>(q.step_of[static_cast<size_t>(u.id())])];
  EXPECT_EQ(rows.kind, Step::Kind::Rows);
  EXPECT_EQ(rows.root, r.id());
  EXPECT_EQ(rows.members.size(), 3u);  // relu, mul, sum
  EXPECT_EQ(q.steps[static_cast<size_t>(q.step_of[static_cast<size_t>(t.id())])].members.size(), 2u);
}

TEST(GraphPasses, SoftmaxPatternNeedsExactShape) {
  Graph g;
  auto x = g.input("x", {4, 6});
  auto m = g.max(x, 1, true);
  auto e = g.exp(x - m);
  auto y = e / g.sum(e, 1, true);
  g.output("y", y);
  g.output("m", m);  // m is an output: the pattern may not swallow it
  const Program p = detail::build_program(g.data(), CompileFlags{});
  bool has_softmax = false;
  for (const Step& s : p.steps) has_softmax |= p.g.at(s.root).kind == OpKind::Softmax;
  EXPECT_FALSE(has_softmax);
}

// ---------------------------------------------------------------- memory plan
// No two arena intermediates whose lifetimes overlap share bytes (in-place pairs touch at one step only).
void expect_plan_sound(const Program& p, const detail::MemoryPlan& m, const std::string& what) {
  const int n_steps = static_cast<int>(p.steps.size());
  std::vector<int> def(p.g.nodes.size(), -1), last(p.g.nodes.size(), -1);
  auto root = [&](int id) {
    return m.where[static_cast<size_t>(id)] == detail::MemoryPlan::Where::Alias
               ? m.alias_of[static_cast<size_t>(id)]
               : id;
  };
  for (int i = 0; i < n_steps; ++i) {
    def[static_cast<size_t>(p.steps[static_cast<size_t>(i)].root)] = i;
    for (int r : p.steps[static_cast<size_t>(i)].reads)
      last[static_cast<size_t>(root(r))] = std::max(last[static_cast<size_t>(root(r))], i);
  }
  std::vector<int> arena;
  for (int id : p.order)
    if (m.where[static_cast<size_t>(id)] == detail::MemoryPlan::Where::Arena) arena.push_back(id);
  auto bytes = [&](int id) {
    return detail::align_up(static_cast<std::size_t>(p.g.at(id).shape.numel()) * dtype_size(p.g.at(id).dtype),
                            detail::kArenaAlignment);
  };
  for (int a : arena) {
    EXPECT_LE(m.offset[static_cast<size_t>(a)] + bytes(a), m.arena_bytes) << what;
    for (int b : arena) {
      if (a >= b) continue;
      const int da = def[static_cast<size_t>(a)], la = std::max(last[static_cast<size_t>(a)], da);
      const int db = def[static_cast<size_t>(b)], lb = std::max(last[static_cast<size_t>(b)], db);
      const bool inplace =
          m.inplace_of[static_cast<size_t>(b)] == a || m.inplace_of[static_cast<size_t>(a)] == b;
      const bool live_together = inplace ? (da < db ? la > db : lb > da) : !(la < db || lb < da);
      const bool share = m.offset[static_cast<size_t>(a)] < m.offset[static_cast<size_t>(b)] + bytes(b) &&
                         m.offset[static_cast<size_t>(b)] < m.offset[static_cast<size_t>(a)] + bytes(a);
      EXPECT_FALSE(live_together && share && bytes(a) > 0 && bytes(b) > 0)
          << what << ": " << p.g.label(a) << " [" << da << ", " << la << "] and " << p.g.label(b) << " ["
          << db << ", " << lb << "] overlap in memory";
    }
  }
}

TEST(GraphPlan, DisjointLifetimesShareMemoryAndPeakIsBelowSum) {
  Graph g;
  auto x = g.input("x", {256});
  Node h = x;
  for (int i = 0; i < 6; ++i)
    h = g.sum(g.reshape(g.exp(h), {16, 16}), 1, false) + g.reshape(h, {16, 16}).named("");
  g.output("y", h);
  CompileFlags none;
  none.fuse_elementwise = false;
  const Program p = detail::build_program(g.data(), none);
  const detail::MemoryPlan planned = detail::plan_memory(p, true, true);
  const detail::MemoryPlan unplanned = detail::plan_memory(p, false, false);
  expect_plan_sound(p, planned, "chain");
  expect_plan_sound(p, unplanned, "chain, no reuse");
  EXPECT_LT(planned.arena_bytes, planned.unplanned_bytes);
  EXPECT_EQ(unplanned.arena_bytes, unplanned.unplanned_bytes);
  EXPECT_EQ(planned.unplanned_bytes, unplanned.unplanned_bytes);
}

TEST(GraphPlan, InPlaceOverDyingInput) {
  Graph g;
  auto x = g.input("x", {1024});
  auto a = g.sum(g.reshape(x, {32, 32}), 1, true);  // (32, 1)
  auto b = g.exp(g.reshape(x, {32, 32}) - a);       // (32, 32), its own buffer
  auto c = g.relu(b);                               // may overwrite b (b dies here)
  g.output("y", g.sum(c, 0));
  CompileFlags none;
  none.fuse_elementwise = false;
  const Program p = detail::build_program(g.data(), none);
  const detail::MemoryPlan m = detail::plan_memory(p, true, true);
  expect_plan_sound(p, m, "inplace");
  EXPECT_EQ(m.inplace_of[static_cast<size_t>(c.id())], b.id());
  EXPECT_GE(m.n_inplace, 1);
  const detail::MemoryPlan no = detail::plan_memory(p, true, false);
  EXPECT_EQ(no.n_inplace, 0);
}

TEST(GraphPlan, OutputsAndViewsOfOutputsArePersistent) {
  Graph g;
  auto x = g.input("x", {4, 4});
  auto y = g.exp(x);
  g.output("flat", g.reshape(y, {16}));
  const Program p = detail::build_program(g.data(), CompileFlags{});
  const detail::MemoryPlan m = detail::plan_memory(p, true, true);
  EXPECT_EQ(m.where[static_cast<size_t>(y.id())], detail::MemoryPlan::Where::Persistent);
  EXPECT_EQ(m.arena_bytes, 0u);
}

TEST(GraphSchedule, IndependentBranchesGetTheirOwnStreams) {
  Graph g;
  auto x = g.input("x", {64, 64});
  auto w1 = g.parameter("w1", zeros({64, 64}));
  auto w2 = g.parameter("w2", zeros({64, 64}));
  auto a = g.matmul(x, w1);
  auto b = g.matmul(x, w2);
  g.output("y", g.softmax(a, -1) + g.softmax(b, -1));
  const Program p = detail::build_program(g.data(), CompileFlags{});
  const detail::MemoryPlan m = detail::plan_memory(p, true, true);
  const detail::Schedule multi = detail::schedule_streams(p, m, 4);
  const detail::Schedule single = detail::schedule_streams(p, m, 1);
  EXPECT_EQ(multi.n_streams, 2);
  // Memory planned after the streams keeps the branches apart (no cross-stream reuse waits).
  const detail::Schedule data = detail::schedule_streams(p, detail::plan_memory(p, false, false), 4);
  const detail::MemoryPlan ms = detail::plan_memory(p, true, true, &data.stream);
  const detail::Schedule fixed = detail::schedule_streams(p, ms, 4, &data.stream);
  EXPECT_EQ(fixed.n_streams, 2);
  EXPECT_EQ(single.n_streams, 1);
  for (const auto& w : single.waits) EXPECT_TRUE(w.empty());
  const int last = static_cast<int>(p.steps.size()) - 1;
  EXPECT_FALSE(multi.waits[static_cast<size_t>(last)].empty());  // the join waits for the other branch
}

TEST(GraphSchedule, ChainStaysOnOneStream) {
  Graph g = mlp_graph(8, 16);
  const Program p = detail::build_program(g.data(), CompileFlags{});
  const detail::Schedule s = detail::schedule_streams(p, detail::plan_memory(p, true, true), 4);
  EXPECT_EQ(s.n_streams, 1);
}

TEST(GraphPlan, RandomGraphsPlansAreSound) {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    test::RandomGraph rg = test::make_random_graph(seed);
    for (bool fuse : {true, false}) {
      CompileFlags f;
      f.fuse_elementwise = f.fuse_softmax = f.fuse_gemm_epilogue = fuse;
      const Program p = detail::build_program(rg.graph.data(), f);
      const detail::MemoryPlan m = detail::plan_memory(p, true, true);
      expect_plan_sound(p, m, "seed " + std::to_string(seed) + "\n" + rg.description);
      EXPECT_LE(m.arena_bytes, m.unplanned_bytes);
      // Each step's memory dependencies point backwards.
      for (size_t i = 0; i < m.extra_deps.size(); ++i)
        for (int d : m.extra_deps[i]) EXPECT_LT(d, static_cast<int>(i));
      const detail::Schedule s = detail::schedule_streams(p, m, 4);
      for (size_t i = 0; i < s.waits.size(); ++i)
        for (int w : s.waits[i]) EXPECT_LT(w, static_cast<int>(i));
      // The executor's order: streams from data dependencies, then a plan that reuses memory within a stream.
      const detail::Schedule data = detail::schedule_streams(p, detail::plan_memory(p, false, false), 4);
      const detail::MemoryPlan ms = detail::plan_memory(p, true, true, &data.stream);
      expect_plan_sound(p, ms, "stream-aware, seed " + std::to_string(seed) + "\n" + rg.description);
      for (size_t i = 0; i < ms.extra_deps.size(); ++i)
        for (int d : ms.extra_deps[i]) EXPECT_EQ(data.stream[static_cast<size_t>(d)], data.stream[i]);
      const detail::Schedule fixed = detail::schedule_streams(p, ms, 4, &data.stream);
      EXPECT_EQ(fixed.stream, data.stream);
    }
  }
}

// ---------------------------------------------------------------- codegen (NVRTC needs no GPU)
TEST(GraphCodegen, FusedSourceCompilesWithNvrtc) {
  Graph g;
  auto x = g.input("x", {8, 16});
  auto b = g.input("b", {16});
  g.output("y", g.clamp(g.gelu(x + b) * 2.0 - x, -1.0, 1.0));
  const Program p = detail::build_program(g.data(), CompileFlags{});
  ASSERT_EQ(p.steps.size(), 1u);
  const std::string src = detail::fused_kernel_source(p, p.steps[0]);
  EXPECT_NE(src.find("#include \"ops/functors.h\""), std::string::npos);
  EXPECT_NE(src.find("mt::fn::gelu"), std::string::npos) << src;
  EXPECT_NE(src.find("% 16LL"), std::string::npos) << src;  // b is broadcast along rows
  std::vector<char> cubin;
  std::string log;
  EXPECT_TRUE(detail::nvrtc_compile(src, 90, cubin, log)) << log << "\n" << src;
  EXPECT_GT(cubin.size(), 0u);
  std::string bad_log;
  EXPECT_FALSE(detail::nvrtc_compile(src + "\n#error broken\n", 90, cubin, bad_log));
  EXPECT_NE(bad_log.find("broken"), std::string::npos) << bad_log;
}

// Both GELUs in one fused kernel: gelu calls the erf form, gelu_tanh the tanh form, and NVRTC has erff.
TEST(GraphCodegen, GeluFormsFuseAndCompileWithNvrtc) {
  Graph g;
  auto x = g.input("x", {8, 16});
  g.output("y", g.gelu(x) - g.gelu_tanh(x * 2.0));
  const Program p = detail::build_program(g.data(), CompileFlags{});
  ASSERT_EQ(p.steps.size(), 1u);
  const std::string src = detail::fused_kernel_source(p, p.steps[0]);
  EXPECT_NE(src.find("mt::fn::gelu("), std::string::npos) << src;
  EXPECT_NE(src.find("mt::fn::gelu_tanh("), std::string::npos) << src;
  std::vector<char> cubin;
  std::string log;
  EXPECT_TRUE(detail::nvrtc_compile(src, 90, cubin, log)) << log << "\n" << src;
}

TEST(GraphCodegen, SameExpressionSameSource) {
  auto make = [] {
    Graph g;
    auto x = g.input("x", {5, 7});
    g.output("y", g.tanh(x) * x + 0.5);
    return g;
  };
  Graph a = make(), b = make();
  const Program pa = detail::build_program(a.data(), CompileFlags{}),
                pb = detail::build_program(b.data(), CompileFlags{});
  EXPECT_EQ(detail::fused_kernel_source(pa, pa.steps[0]), detail::fused_kernel_source(pb, pb.steps[0]));
}

// The host pipeline's pieces tile [0, total) in order, none longer than a chunk, and ramp at both ends.
TEST(GraphPipeline, PiecesCoverTheRangeAndRampAtTheEnds) {
  constexpr std::int64_t M = std::int64_t(1) << 20, K = std::int64_t(1) << 10;
  const std::pair<std::int64_t, std::int64_t> cases[] = {
      {0, 4 * M},     {1, 4 * M},           {4 * M - 1, 4 * M},   {4 * M, 4 * M}, {4 * M + 1, 4 * M},
      {8 * M, 4 * M}, {100'000'000, 4 * M}, {M + 12345, 128 * K}, {1000, 1},      {200 * K + 3, 64 * K},
      {3 * M, 0}};
  for (auto [total, chunk] : cases) {
    SCOPED_TRACE(::testing::Message() << "total " << total << ", chunk " << chunk);
    const std::vector<detail::PipelinePiece> p = detail::pipeline_pieces(total, chunk);
    std::int64_t off = 0;
    for (const auto& piece : p) {
      EXPECT_EQ(piece.offset, off);
      EXPECT_GT(piece.length, 0);
      EXPECT_LE(piece.length, std::max<std::int64_t>(1, chunk));
      off += piece.length;
    }
    EXPECT_EQ(off, total);
  }
  // 100 M floats in chunks of 4 M: 512 Ki, 512 Ki, 1 Mi, 2 Mi, then whole chunks, then 2 Mi, 1 Mi, 512 Ki,
  // 512 Ki (the middle's last piece is shorter).
  const auto p = detail::pipeline_pieces(100'000'000, 4 * M);
  ASSERT_GE(p.size(), 8u);
  const std::int64_t want[] = {512 * K, 512 * K, M, 2 * M};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(p[static_cast<size_t>(i)].length, want[i]) << "piece " << i;
    EXPECT_EQ(p[p.size() - 1 - static_cast<size_t>(i)].length, want[i]) << "piece " << p.size() - 1 - i;
  }
  EXPECT_EQ(p[4].length, 4 * M);
  // Small problems are not cut below 64 Ki elements: one piece.
  EXPECT_EQ(detail::pipeline_pieces(100 * K, 4 * M).size(), 1u);
  EXPECT_TRUE(detail::pipeline_pieces(0, 4 * M).empty());
}

// ---------------------------------------------------------------- lifetimes, nodes that can never run
template <class F>
std::string invalid_what(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected InvalidArgument";
  return {};
}

TEST(GraphHostile, NodeOfADestroyedGraph) {
  Node dangling;
  std::uint64_t dead_id = 0;
  {
    Graph g;
    dangling = g.relu(g.input("x", {2}));
    dead_id = g.id();
  }
  const std::string what = invalid_what([&] { dangling.named("n"); });
  EXPECT_NE(what.find(std::to_string(dead_id)), std::string::npos) << what;
  EXPECT_NE(what.find("destroyed"), std::string::npos) << what;
  EXPECT_THROW(dangling.shape(), InvalidArgument);
  EXPECT_THROW(dangling.dtype(), InvalidArgument);
  EXPECT_THROW(dangling.name(), InvalidArgument);
  EXPECT_THROW(dangling + dangling, InvalidArgument);
  EXPECT_THROW(dangling * 2.0, InvalidArgument);
  EXPECT_THROW(-dangling, InvalidArgument);
  EXPECT_THROW(Graph::of(dangling), InvalidArgument);
  Graph other;
  const Node y = other.input("y", {2});
  const std::string w2 = invalid_what([&] { other.add(y, dangling); });
  EXPECT_NE(w2.find(std::to_string(dead_id)), std::string::npos) << w2;
  EXPECT_NE(w2.find(std::to_string(other.id())), std::string::npos) << w2;
  EXPECT_THROW(other.output("o", dangling), InvalidArgument);
}

TEST(GraphHostile, NodeOfAnotherGraph) {
  Graph g1, g2;
  const Node a = g1.input("a", {3});
  const Node b = g2.input("b", {3});
  EXPECT_NE(g1.id(), g2.id());
  const std::string what = invalid_what([&] { g2.add(b, a); });
  EXPECT_NE(what.find(std::to_string(g1.id())), std::string::npos) << what;
  EXPECT_NE(what.find(std::to_string(g2.id())), std::string::npos) << what;
  EXPECT_THROW(a + b, InvalidArgument);  // operators: the left operand's graph
  EXPECT_THROW(g2.relu(a), InvalidArgument);
  EXPECT_THROW(g2.matmul(b, a), InvalidArgument);
  EXPECT_NO_THROW(a + a);
}

TEST(GraphHostile, MovedFromGraph) {
  Graph g;
  const Node x = g.input("x", {2});
  Graph moved = std::move(g);
  EXPECT_EQ(Graph::of(x).size(), 1);  // nodes follow their data
  EXPECT_NO_THROW(moved.relu(x));
  const std::string what = invalid_what([&] { g.input("y", {2}); });  // NOLINT(bugprone-use-after-move)
  EXPECT_NE(what.find("moved from"), std::string::npos) << what;
  EXPECT_THROW(g.size(), InvalidArgument);          // NOLINT(bugprone-use-after-move)
  EXPECT_THROW(g.dump(), InvalidArgument);          // NOLINT(bugprone-use-after-move)
  EXPECT_THROW(g.relu(x), InvalidArgument);         // NOLINT(bugprone-use-after-move)
  EXPECT_THROW(g.output("o", x), InvalidArgument);  // NOLINT(bugprone-use-after-move)
  EXPECT_THROW(run_cpu(g, {}), InvalidArgument);    // NOLINT(bugprone-use-after-move)
  Graph assigned;
  const Node old = assigned.input("z", {1});
  assigned = std::move(moved);
  EXPECT_THROW(old.shape(), InvalidArgument);  // the graph it replaced is gone
  EXPECT_EQ(Graph::of(x).size(), 2);
}

TEST(GraphHostile, NodesThatCanNeverRunAreRejectedAtBuild) {
  Graph g;
  const Node i = g.input("i", {4}, DType::I32);
  const Node u = g.input("u", {4}, DType::U8);
  EXPECT_THROW(i + 0.5, InvalidArgument);
  EXPECT_THROW(g.binary_scalar(BinaryOp::Mul, u, 256), InvalidArgument);
  EXPECT_THROW(g.binary_scalar(BinaryOp::Sub, u, -1), InvalidArgument);
  EXPECT_THROW(i / 0.0, InvalidArgument);
  EXPECT_THROW(g.binary_scalar(BinaryOp::Add, i, std::nan("")), InvalidArgument);
  EXPECT_THROW(g.clamp(i, 0.5, 2), InvalidArgument);
  EXPECT_THROW(g.exp(i), DTypeError);
  EXPECT_THROW(g.binary(BinaryOp::Pow, i, i), DTypeError);
  EXPECT_THROW(g.sum(i, 0), DTypeError);
  EXPECT_THROW(g.softmax(u), DTypeError);
  EXPECT_THROW(g.matmul(i, i), DTypeError);
  EXPECT_NO_THROW(0.0 / i);  // 0 / x: the divisor is the tensor (checked at run)
  EXPECT_NO_THROW(i + 3.0);
  EXPECT_NO_THROW(g.clamp(u, 0, 255));
  const int before = g.size();
  EXPECT_THROW(i * 1e10, InvalidArgument);
  EXPECT_EQ(g.size(), before);  // a refused node is not added
}

TEST(GraphHostile, Rank0ReduceMatchesEager) {
  Graph g;
  const Node x = g.input("x", {});
  g.output("s", g.sum(x, 0));
  g.output("m", g.max(x, -1, true));
  const Tensor xv = full({}, 1.5);
  const TensorMap out = run_cpu(g, {{"x", xv}});
  EXPECT_EQ(out.at("s").shape(), Shape{});
  EXPECT_EQ(out.at("s").item<float>(), sum(xv, 0).item<float>());
  EXPECT_EQ(out.at("m").shape(), max(xv, -1, true).shape());
  EXPECT_THROW(g.sum(x, 1), ShapeError);
}

TEST(GraphHostile, IntegerGraphMatchesEagerAndDivByZeroThrows) {
  Graph g;
  const Node a = g.input("a", {3}, DType::I32);
  const Node b = g.input("b", {3}, DType::I32);
  g.output("q", a / b);
  g.output("w", a * 2.0 + 1.0);
  const Tensor av = from_vector<std::int32_t>({std::numeric_limits<std::int32_t>::min(), 7, -7});
  const Tensor bv = from_vector<std::int32_t>({-1, 2, 2});
  const TensorMap out = run_cpu(g, {{"a", av}, {"b", bv}});
  EXPECT_EQ(out.at("q").to_vector<std::int32_t>(), div(av, bv).to_vector<std::int32_t>());
  EXPECT_EQ(out.at("w").to_vector<std::int32_t>(), (av * 2.0 + 1.0).to_vector<std::int32_t>());
  EXPECT_THROW(run_cpu(g, {{"a", av}, {"b", from_vector<std::int32_t>({1, 0, 1})}}), InvalidArgument);
}

// The random graphs on the CPU executor against the eager ops, op by op (random_graph.h builds both).
TEST(GraphHostile, RandomGraphsMatchEagerEvaluation) {
  for (std::uint64_t seed = 0; seed < 100; ++seed) {
    test::RandomGraph rg = test::make_random_graph(seed);
    const TensorMap got = run_cpu(rg.graph, rg.inputs);
    ASSERT_EQ(got.size(), rg.expected.size()) << "seed " << seed;
    for (const auto& [name, ref] : rg.expected) {
      const Tensor& t = got.at(name);
      ASSERT_EQ(t.shape(), ref.shape()) << "seed " << seed << " output " << name << "\n" << rg.description;
      const test::Comparison c = test::compare(t, ref, test::Tolerance::close(1e-5, 1e-4));
      EXPECT_TRUE(c.ok) << "seed " << seed << " output " << name << ": " << c.summary() << "\n"
                        << rg.description;
    }
  }
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// check() on the CPU has no device run to compare with: it says so rather than "pass".
TEST(GraphCheck, CpuCheckSaysNothingWasCompared) {
  Graph g;
  Node x = g.input("x", {3, 4});
  g.output("y", g.relu(x));
  ExecOptions options;
  options.device = Device::cpu();
  const CheckReport report = check(g, {{"x", randn({3, 4}, 7)}}, options);
  EXPECT_FALSE(report.compared);
  ASSERT_EQ(report.rows.size(), 1u);
  const std::string table = report.table();
  EXPECT_NE(table.find("nothing compared"), std::string::npos) << table;
  EXPECT_EQ(table.find("all rows pass"), std::string::npos) << table;
}

}  // namespace
}  // namespace mt
