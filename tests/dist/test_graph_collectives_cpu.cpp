// Collective, slice and concat graph nodes and the parallel recipes, without a GPU: shape inference, typed
// errors, the CPU executor as a world of one, and what the compiler decides (no fusion, one stream, buffers).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "minitensor/dist/dist.h"
#include "minitensor/graph/detail/collective.h"
#include "minitensor/graph/detail/program.h"
#include "minitensor/graph/parallel.h"

namespace mt {
namespace {

using detail::OpKind;

ExecOptions on(Device device, dist::Communicator* comm = nullptr) {
  ExecOptions o;
  o.device = device;
  o.comm = comm;
  return o;
}

template <class E, class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception of the expected type";
  return "";
}

std::vector<float> host(const Tensor& t) {
  return t.cpu().contiguous().to_vector<float>();
}

MlpWeights small_mlp(std::int64_t d, std::int64_t ffn, std::int64_t d_out) {
  MlpWeights w;
  w.w1 = randn({d, ffn}, 1);
  w.b1 = randn({ffn}, 2);
  w.w2 = randn({ffn, d_out}, 3);
  w.b2 = randn({d_out}, 4);
  return w;
}

TEST(GraphCollectives, ShapesFollowTheWorldSize) {
  Graph g;
  g.set_world_size(4);
  EXPECT_EQ(g.world_size(), 4);
  Node x = g.input("x", {8, 6});
  EXPECT_EQ(g.all_reduce(x).shape(), Shape({8, 6}));
  EXPECT_EQ(g.all_reduce(x, dist::ReduceOp::Max).shape(), Shape({8, 6}));
  EXPECT_EQ(g.all_gather(x, 0).shape(), Shape({32, 6}));
  EXPECT_EQ(g.all_gather(x, -1).shape(), Shape({8, 24}));
  EXPECT_EQ(g.reduce_scatter(x, 0).shape(), Shape({2, 6}));
  Node rs = g.reduce_scatter(x, 0, dist::ReduceOp::Avg, "rs");
  EXPECT_EQ(rs.shape(), Shape({2, 6}));
  g.output("y", rs);
  const std::string dump = g.dump();
  EXPECT_NE(dump.find("all_reduce(sum, world 4)"), std::string::npos) << dump;
  EXPECT_NE(dump.find("all_gather(1, world 4)"), std::string::npos) << dump;
  EXPECT_NE(dump.find("reduce_scatter(avg, 0, world 4)"), std::string::npos) << dump;
}

TEST(GraphCollectives, ReduceScatter_WorldNotDividingTheDim_IsShapeError) {
  Graph g;
  g.set_world_size(4);
  Node x = g.input("x", {6, 3});
  const std::string msg = message_of<ShapeError>([&] { g.reduce_scatter(x, 0, dist::ReduceOp::Sum, "rs"); });
  EXPECT_NE(msg.find("'rs'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a multiple of the world size 4"), std::string::npos) << msg;
}

TEST(GraphCollectives, BadDim_IsShapeError) {
  Graph g;
  g.set_world_size(2);
  Node x = g.input("x", {4, 3});
  EXPECT_THROW(g.all_gather(x, 2), ShapeError);
  EXPECT_THROW(g.reduce_scatter(x, -3), ShapeError);
  Node s = g.input("s", Shape{});
  EXPECT_THROW(g.all_gather(s, 0), ShapeError);
}

TEST(GraphCollectives, WorldSize_IsCheckedAgainstExistingNodes) {
  Graph g;
  EXPECT_THROW(g.set_world_size(0), InvalidArgument);
  g.set_world_size(2);
  Node x = g.input("x", {4});
  g.all_reduce(x, dist::ReduceOp::Sum, "ar");
  g.set_world_size(2);  // the same: fine
  const std::string msg = message_of<InvalidArgument>([&] { g.set_world_size(4); });
  EXPECT_NE(msg.find("'ar'"), std::string::npos) << msg;
}

TEST(GraphCollectives, GpuExecutor_WithoutCommunicator_IsTypedErrorNamingTheNode) {
  Graph g;
  g.set_world_size(2);
  Node x = g.input("x", {4, 4});
  g.output("y", g.all_reduce(g.relu(x), dist::ReduceOp::Sum, "sum_over_ranks"));
  ExecOptions o;
  o.device = Device::cuda(0);  // checked before the device is touched: runs without a GPU
  if (dist::nccl_available()) {
    const std::string msg = message_of<InvalidArgument>([&] { Executor e(g, o); });
    EXPECT_NE(msg.find("'sum_over_ranks'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("communicator"), std::string::npos) << msg;
  } else {
    const std::string msg = message_of<DistUnavailable>([&] { Executor e(g, o); });
    EXPECT_NE(msg.find("'sum_over_ranks'"), std::string::npos) << msg;
  }
}

TEST(GraphCollectives, CpuExecutor_IsAWorldOfOne) {
  Graph g;  // world size 1
  Node x = g.input("x", {4, 6});
  g.output("ar", g.all_reduce(x, dist::ReduceOp::Avg));
  g.output("ag", g.all_gather(x, 1));
  g.output("rs", g.reduce_scatter(x, 0));
  const Tensor xv = randn({4, 6}, 7);
  Executor e(g, on(Device::cpu()));
  const TensorMap out = e.run({{"x", xv}});
  for (const char* name : {"ar", "ag", "rs"}) EXPECT_EQ(host(out.at(name)), host(xv)) << name;
  const TensorMap ref = run_cpu(g, {{"x", xv}});
  EXPECT_EQ(host(ref.at("ag")), host(xv));
}

TEST(GraphCollectives, CpuExecutor_LargerWorld_IsInvalidArgumentNamingTheNode) {
  Graph g;
  g.set_world_size(2);
  Node x = g.input("x", {4});
  g.output("y", g.all_gather(x, 0, "gathered"));
  const std::string msg = message_of<InvalidArgument>([&] { Executor e(g, on(Device::cpu())); });
  EXPECT_NE(msg.find("'gathered'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("world of one"), std::string::npos) << msg;
  EXPECT_THROW(run_cpu(g, {{"x", randn({4}, 1)}}), InvalidArgument);
}

TEST(GraphSliceConcat, SliceThenConcat_GivesTheInputBack) {
  Graph g;
  Node x = g.input("x", {5, 3});
  Node a = g.slice(x, 0, 0, 2), b = g.slice(x, 0, 2, 2), c = g.slice(x, -2, 2, 5);
  EXPECT_EQ(b.shape(), Shape({0, 3}));
  EXPECT_EQ(c.shape(), Shape({3, 3}));
  g.output("y", g.concat({a, b, g.slice(x, 0, 2, 5)}, 0));
  g.output("z", g.concat({g.slice(x, 1, 0, 1), g.slice(x, 1, 1, 3)}, -1));
  const Tensor xv = randn({5, 3}, 3);
  const TensorMap out = run_cpu(g, {{"x", xv}});
  EXPECT_EQ(host(out.at("y")), host(xv));
  EXPECT_EQ(host(out.at("z")), host(xv));
}

TEST(GraphSliceConcat, BadRangesAndShapes_AreTypedErrors) {
  Graph g;
  Node x = g.input("x", {5, 3});
  EXPECT_THROW(g.slice(x, 0, 3, 2), ShapeError);
  EXPECT_THROW(g.slice(x, 0, 0, 6), ShapeError);
  EXPECT_THROW(g.slice(x, 2, 0, 1), ShapeError);
  Node y = g.input("y", {5, 4});
  EXPECT_THROW(g.concat({x, y}, 0), ShapeError);
  EXPECT_EQ(g.concat({x, y}, 1).shape(), Shape({5, 7}));
  EXPECT_THROW(g.concat({}, 0), InvalidArgument);
  Node i = g.input("i", {5, 3}, DType::I32);
  EXPECT_THROW(g.concat({x, i}, 0), DTypeError);
}

TEST(GraphCollectives, Compile_NoFusion_OneStream_OutOfPlaceBuffers) {
  // A chunked tensor-parallel MLP of world 2, as rank 0 builds it: its slices stay distinct (CSE keys on
  // the start), its collectives are steps of their own on one stream, and no collective's output shares
  // memory with what it reads.
  Graph g;
  g.set_world_size(2);
  Node x = g.input("x", {12, 8});
  g.output("y", megatron_mlp(g, x, small_mlp(8, 16, 8), 0, {.chunks = 3}));
  const detail::Program p = detail::build_program(g.data(), {});
  int n_slices = 0, n_collectives = 0;
  for (const detail::Step& s : p.steps) {
    const detail::NodeData& n = p.g.at(s.root);
    n_slices += n.kind == OpKind::Slice;
    if (!n.is_collective()) continue;
    ++n_collectives;
    EXPECT_EQ(s.kind, detail::Step::Kind::Op);
    EXPECT_EQ(s.members.size(), 1u);
  }
  EXPECT_EQ(n_slices, 3);
  EXPECT_EQ(n_collectives, 3);
  detail::Schedule data_only = detail::schedule_streams(p, detail::plan_memory(p, false, false), 4);
  EXPECT_GT(data_only.n_streams, 1);  // the chunks' chains run side by side
  detail::pin_collective_streams(p, data_only.stream);
  const detail::MemoryPlan m = detail::plan_memory(p, true, true, &data_only.stream);
  int stream = -1;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const detail::NodeData& n = p.g.at(p.steps[i].root);
    if (!n.is_collective()) continue;
    if (stream < 0) stream = data_only.stream[i];
    EXPECT_EQ(data_only.stream[i], stream) << "step " << i;
    const int in = n.inputs[0], out = p.steps[i].root;
    EXPECT_EQ(m.inplace_of[static_cast<size_t>(out)], -1);
    const std::size_t in_bytes = static_cast<std::size_t>(p.g.at(in).shape.numel()) * 4;
    const std::size_t out_bytes = static_cast<std::size_t>(n.shape.numel()) * 4;
    if (m.where[static_cast<size_t>(in)] == detail::MemoryPlan::Where::Arena &&
        m.where[static_cast<size_t>(out)] == detail::MemoryPlan::Where::Arena) {
      const std::size_t a = m.offset[static_cast<size_t>(in)], b = m.offset[static_cast<size_t>(out)];
      EXPECT_TRUE(a + in_bytes <= b || b + out_bytes <= a)
          << "collective at step " << i << " overlaps its input";
    }
  }
}

TEST(GraphCollectives, GatherAlongAnotherDim_IsNotCapturable) {
  Graph g;
  g.set_world_size(2);
  Node x = g.input("x", {4, 3});
  EXPECT_TRUE(detail::collective_allocates(g.data().at(g.all_gather(x, 1).id())));
  EXPECT_FALSE(detail::collective_allocates(g.data().at(g.all_gather(x, 0).id())));
  EXPECT_FALSE(detail::collective_allocates(g.data().at(g.all_reduce(x).id())));
}

TEST(DistShard, BlocksAlongADim) {
  const Tensor w = from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, Shape{2, 4});
  EXPECT_EQ(host(dist::shard(w, 1, 1, 2)), (std::vector<float>{2, 3, 6, 7}));
  EXPECT_EQ(host(dist::shard(w, 0, 1, 2)), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(host(dist::shard(w, -1, 0, 4)), (std::vector<float>{0, 4}));
  EXPECT_THROW(dist::shard(w, 1, 0, 3), ShapeError);
  EXPECT_THROW(dist::shard(w, 0, 2, 2), InvalidArgument);
}

TEST(ParallelRecipes, ShapesAtWorldTwo) {
  Graph g;
  g.set_world_size(2);
  Node x = g.input("x", {3, 5, 8});
  const MlpWeights w = small_mlp(8, 16, 6);
  EXPECT_EQ(column_parallel_linear(g, x, w.w1, w.b1, 1).shape(), Shape({3, 5, 8}));
  EXPECT_EQ(column_parallel_linear(g, x, w.w1, w.b1, 1, Activation::Relu, true).shape(), Shape({3, 5, 16}));
  Node h = g.input("h", {3, 5, 8});
  EXPECT_EQ(row_parallel_linear(g, h, w.w2, w.b2, 0).shape(), Shape({3, 5, 6}));
  EXPECT_EQ(megatron_mlp(g, x, w, 1, {.chunks = 4}).shape(), Shape({3, 5, 6}));
  Node a = g.input("a", {4, 8});
  EXPECT_EQ(tensor_parallel_matmul(g, a, w.w1, 1).shape(), Shape({4, 16}));
  const MlpWeights odd = small_mlp(8, 15, 6);
  EXPECT_THROW(megatron_mlp(g, x, odd, 0), ShapeError);
  EXPECT_THROW(row_parallel_linear(g, x, w.w1, Tensor(), 0), ShapeError);  // x's 8 != 16 / 2
}

// At world 1 a recipe is the unsplit layer, chunks and all: check_parallel on the CPU executor compares it.
TEST(ParallelRecipes, WorldOfOne_EqualsTheUnsplitGraph_OnTheCpu) {
  const MlpWeights w = small_mlp(8, 16, 6);
  const Tensor xv = randn({7, 8}, 11);
  Graph ref;
  ref.output("y", mlp(ref, ref.input("x", {7, 8}), w));
  for (int chunks : {1, 3, 7, 9}) {
    Graph g;
    g.output("y", megatron_mlp(g, g.input("x", {7, 8}), w, 0, {.chunks = chunks}));
    const CheckReport r = check_parallel(g, {{"x", xv}}, ref, {{"x", xv}}, on(Device::cpu()));
    EXPECT_TRUE(r.ok) << "chunks " << chunks << "\n" << r.table();
  }
  Graph tp;
  Node a = tp.input("x", {7, 8});
  tp.output("y", tensor_parallel_matmul(tp, a, w.w1, 0));
  Graph tp_ref;
  tp_ref.output("y", tp_ref.matmul(tp_ref.input("x", {7, 8}), tp_ref.parameter("b", w.w1)));
  EXPECT_TRUE(check_parallel(tp, {{"x", xv}}, tp_ref, {{"x", xv}}, on(Device::cpu())).ok);
}

TEST(DataParallelTest, NoDevices_IsInvalidArgument) {
  Graph g;
  g.output("y", g.relu(g.input("x", {2, 2})));
  EXPECT_THROW(DataParallel(g, {}), InvalidArgument);
}

}  // namespace
}  // namespace mt
