// Collective graph nodes and the parallel recipes on 2 and 4 GPUs (one thread per rank, Communicator::local):
// the nodes against a host computation, plainly and inside the executor's CUDA graph; the tensor-parallel
// recipes against the single-GPU executor of the unsplit graph, and check_parallel; DataParallel. Each test
// skips below the GPUs it needs.
#include <algorithm>
#include <cmath>
#include <string>

#include "minitensor/graph/parallel.h"
#include "tests/dist/dist_harness.h"

namespace mt {
namespace {

using dist::Communicator;
using dist::ReduceOp;
using test::on_each_rank;

ExecOptions on(Device device, dist::Communicator* comm = nullptr) {
  ExecOptions o;
  o.device = device;
  o.comm = comm;
  return o;
}

std::vector<float> host(const Tensor& t) {
  return t.cpu().contiguous().to_vector<float>();
}

// max |a - b| <= tol * max |b|
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double err = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_LE(err, tol * std::max(scale, 1e-30)) << what;
}

class GraphDist : public ::testing::TestWithParam<int> {};

// Rank r's x (rows, cols): value(r, i). all_reduce (sum and max), all_gather and reduce_scatter along dim 0,
// run three times: plain, captured, replayed.
TEST_P(GraphDist, CollectiveNodes_MatchTheHost_InAndOutOfCapture) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  const std::int64_t rows = 4 * n, cols = 33;
  auto comms = Communicator::local(test::first_devices(n));
  on_each_rank(n, [&](int r) {
    Graph g;
    g.set_world_size(n);
    Node x = g.input("x", {rows, cols});
    g.output("sum", g.all_reduce(x * 1.0));
    g.output("max", g.all_reduce(x, ReduceOp::Max));
    g.output("gathered", g.all_gather(x, 0));
    g.output("scattered", g.reduce_scatter(x, 0));
    Communicator& comm = comms[static_cast<size_t>(r)];
    Executor exec(g, on(Device::cuda(r), &comm));
    const Tensor xv = from_vector(test::values(r, rows * cols), Shape{rows, cols}, Device::cuda(r));
    for (int run = 0; run < 3; ++run) {
      const TensorMap out = exec.run({{"x", xv}});
      synchronize(Device::cuda(r));
      const std::string when = "rank " + std::to_string(r) + ", run " + std::to_string(run);
      test::expect_equal(host(out.at("sum")), test::reduced(ReduceOp::Sum, n, rows * cols), "sum, " + when);
      test::expect_equal(host(out.at("max")), test::reduced(ReduceOp::Max, n, rows * cols), "max, " + when);
      std::vector<float> gathered;
      for (int k = 0; k < n; ++k)
        for (float v : test::values(k, rows * cols)) gathered.push_back(v);
      test::expect_equal(host(out.at("gathered")), gathered, "all_gather, " + when);
      const std::int64_t block = rows / n * cols;
      test::expect_equal(host(out.at("scattered")), test::reduced(ReduceOp::Sum, n, block, r * block),
                         "reduce_scatter, " + when);
    }
    EXPECT_EQ(exec.stats().n_captures, 1);
    EXPECT_EQ(exec.stats().n_replays, 1);
  });
}

// Along the last dim the executor runs the gather plainly (it stages the blocks in a buffer it allocates).
TEST_P(GraphDist, GatherAndScatterAlongTheLastDim) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  const std::int64_t rows = 5, cols = 2 * n;
  auto comms = Communicator::local(test::first_devices(n));
  on_each_rank(n, [&](int r) {
    Graph g;
    g.set_world_size(n);
    Node x = g.input("x", {rows, cols});
    g.output("gathered", g.all_gather(x, -1));
    g.output("scattered", g.reduce_scatter(x, 1));
    Executor exec(g, on(Device::cuda(r), &comms[static_cast<size_t>(r)]));
    const Tensor xv = from_vector(test::values(r, rows * cols), Shape{rows, cols}, Device::cuda(r));
    for (int run = 0; run < 2; ++run) {
      const TensorMap out = exec.run({{"x", xv}});
      const std::vector<float> got = host(out.at("gathered")), part = host(out.at("scattered"));
      for (std::int64_t i = 0; i < rows; ++i) {
        for (int k = 0; k < n; ++k)
          for (std::int64_t j = 0; j < cols; ++j)
            ASSERT_EQ(got[static_cast<size_t>(i * cols * n + k * cols + j)], test::value(k, i * cols + j));
        const std::int64_t w = cols / n;
        for (std::int64_t j = 0; j < w; ++j) {
          std::vector<float> xs;
          for (int k = 0; k < n; ++k) xs.push_back(test::value(k, i * cols + r * w + j));
          ASSERT_EQ(part[static_cast<size_t>(i * w + j)], test::reduce_host(ReduceOp::Sum, xs));
        }
      }
    }
  });
}

TEST_P(GraphDist, CommunicatorOfAnotherSize_IsInvalidArgument) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  auto comms = Communicator::local(test::first_devices(n));
  Graph g;
  g.set_world_size(n + 1);
  g.output("y", g.all_reduce(g.input("x", {4})));
  EXPECT_THROW(Executor(g, on(Device::cuda(0), &comms[0])), InvalidArgument);
  Graph h;
  h.set_world_size(n);
  h.output("y", h.all_reduce(h.input("x", {4})));
  EXPECT_THROW(Executor(h, on(Device::cuda(1), &comms[0])), DeviceError);
}

MlpWeights mlp_weights(std::int64_t d, std::int64_t ffn, std::int64_t d_out) {
  MlpWeights w;
  w.w1 = randn({d, ffn}, 21) * (1.0 / std::sqrt(static_cast<double>(d)));
  w.b1 = randn({ffn}, 22);
  w.w2 = randn({ffn, d_out}, 23) * (1.0 / std::sqrt(static_cast<double>(ffn)));
  w.b2 = randn({d_out}, 24);
  return w;
}

// The tensor-parallel MLP, chunked or not, equals the single-GPU executor of the unsplit MLP, and
// check_parallel passes on every rank.
TEST_P(GraphDist, MegatronMlp_EqualsTheSingleGpuExecutor) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  const std::int64_t tokens = 96, d = 64, ffn = 256;
  const MlpWeights w = mlp_weights(d, ffn, d);
  const Tensor x = randn({tokens, d}, 5);
  Graph ref;
  ref.output("y", mlp(ref, ref.input("x", {tokens, d}), w));
  std::vector<float> want;
  {
    Executor one(ref, on(Device::cuda(0)));
    want = host(one.run({{"x", x.cuda(0)}}).at("y"));
  }
  auto comms = Communicator::local(test::first_devices(n));
  for (int chunks : {1, 3}) {
    on_each_rank(n, [&](int r) {
      Graph g;
      g.set_world_size(n);
      g.output("y", megatron_mlp(g, g.input("x", {tokens, d}), w, r, {.chunks = chunks}));
      Communicator& comm = comms[static_cast<size_t>(r)];
      const ExecOptions o = on(Device::cuda(r), &comm);
      Executor exec(g, o);
      const Tensor xr = x.cuda(r);
      for (int run = 0; run < 3; ++run)
        expect_close(host(exec.run({{"x", xr}}).at("y")), want, 1e-4,
                     "rank " + std::to_string(r) + ", chunks " + std::to_string(chunks));
      const CheckReport report = check_parallel(g, {{"x", xr}}, ref, {{"x", x}}, o);
      EXPECT_TRUE(report.ok) << report.table();
    });
  }
}

TEST_P(GraphDist, ColumnAndRowParallel_EqualTheUnsplitLayers) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  const std::int64_t tokens = 40, d = 32, ffn = 64;
  const MlpWeights w = mlp_weights(d, ffn, d);
  const Tensor x = randn({2, tokens / 2, d}, 6);
  Graph ref;
  Node rx = ref.input("x", {2, tokens / 2, d});
  Node h = ref.linear(rx, ref.parameter("w1", w.w1), ref.parameter("b1", w.b1), Activation::Relu);
  ref.output("h", h);
  ref.output("h_shard", h);
  ref.output("y", ref.linear(h, ref.parameter("w2", w.w2), ref.parameter("b2", w.b2)));
  ref.output("c", ref.matmul(rx, ref.parameter("w1b", w.w1)));
  auto comms = Communicator::local(test::first_devices(n));
  on_each_rank(n, [&](int r) {
    Graph g;
    g.set_world_size(n);
    Node gx = g.input("x", {2, tokens / 2, d});
    g.output("h", column_parallel_linear(g, gx, w.w1, w.b1, r, Activation::Relu, /*gather_output=*/true));
    Node shard = column_parallel_linear(g, gx, w.w1, w.b1, r, Activation::Relu);
    g.output("h_shard", shard);
    g.output("y", row_parallel_linear(g, shard, w.w2, w.b2, r));
    g.output("c", tensor_parallel_matmul(g, gx, w.w1, r));
    const ExecOptions o = on(Device::cuda(r), &comms[static_cast<size_t>(r)]);
    const CheckReport report = check_parallel(g, {{"x", x.cuda(r)}}, ref, {{"x", x}}, o);
    EXPECT_TRUE(report.ok) << report.table();
    EXPECT_EQ(report.rows.size(), 4u);
  });
}

TEST_P(GraphDist, DataParallelMlp_EqualsOneGpu) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  const std::int64_t batch = 8, d = 64;
  const MlpWeights w = mlp_weights(d, 4 * d, d);
  Graph replica;
  replica.output("y", mlp(replica, replica.input("x", {batch, d}), w));
  Graph whole;
  whole.output("y", mlp(whole, whole.input("x", {batch * n, d}), w));
  const Tensor x = randn({batch * n, d}, 9);
  Executor one(whole, on(Device::cuda(0)));
  const std::vector<float> want = host(one.run({{"x", x.cuda(0)}}).at("y"));
  DataParallel dp(replica, test::first_devices(n));
  EXPECT_EQ(dp.size(), n);
  for (int run = 0; run < 2; ++run) {
    expect_close(host(dp.run({{"x", x.cuda(0)}}).at("y")), want, 1e-4, "device inputs");
    expect_close(host(dp.run({{"x", x}}).at("y")), want, 1e-4, "host inputs");
    // On another replica's GPU (its own block a view, the others copied to their GPUs), and as a strided
    // view (copied through Tensor::to).
    expect_close(host(dp.run({{"x", x.cuda(n - 1)}}).at("y")), want, 1e-4, "inputs on the last GPU");
    const Tensor strided = x.t().contiguous().cuda(0).t();
    ASSERT_FALSE(strided.is_contiguous());
    expect_close(host(dp.run({{"x", strided}}).at("y")), want, 1e-4, "strided inputs");
  }
  // New data in the same buffers: each run's copies land before its replicas read them.
  const Tensor x2 = randn({batch * n, d}, 10);
  const std::vector<float> want2 = host(one.run({{"x", x2.cuda(0)}}).at("y"));
  for (int run = 0; run < 3; ++run) {
    const bool second = run % 2 == 1;
    expect_close(host(dp.run({{"x", (second ? x2 : x).cuda(0)}}).at("y")), second ? want2 : want, 1e-4,
                 "alternating inputs");
  }
  EXPECT_THROW(dp.run({{"x", randn({batch * n + 1, d}, 1)}}), ShapeError);
}

INSTANTIATE_TEST_SUITE_P(Dist, GraphDist, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "Ranks" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace mt
