// The transformer-block recipe (graph/models.h): the graph against the same block through the eager ops on the
// CPU (odd token counts, several heads, a named block), its shape errors, and on the GPU through the executor
// (fused, captured) against the CPU reference with check(), in fp32 and 3xTF32.
#include <gtest/gtest.h>

#include "minitensor/graph/graph.h"
#include "minitensor/graph/models.h"
#include "minitensor/ops/ops.h"
#include "tests/common/gpu.h"

namespace mt {
namespace {

double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.cpu().contiguous() - b.cpu().contiguous())).item<float>();
}

double max_abs(const Tensor& a) {
  return max(abs(a.cpu())).item<float>();
}

TEST(GraphModels, BlockEqualsTheEagerBlockOnTheCpu) {
  for (const BlockShape shape : {BlockShape{1, 1, 1}, BlockShape{2, 7, 2}, BlockShape{3, 13, 4}}) {
    SCOPED_TRACE(std::to_string(shape.batch) + "x" + std::to_string(shape.tokens) + ", heads " +
                 std::to_string(shape.heads));
    const std::int64_t d = 16 * shape.heads, rows = shape.batch * shape.tokens;
    const BlockWeights w = random_block_weights(d, 7);
    const Tensor x = rand({rows, d}, 3) * 2.0 - 1.0;
    Graph g;
    g.output("y", transformer_block(g, g.input("x", {rows, d}), shape, w, "block"));
    const Tensor got = run_cpu(g, {{"x", x}}).at("y");
    const Tensor want = transformer_block(x, shape, w);
    EXPECT_EQ(got.shape(), (Shape{rows, d}));
    EXPECT_LE(max_diff(got, want), 1e-5 * std::max(1.0, max_abs(want)));
  }
}

TEST(GraphModels, BlockShapeErrorsNameWhatIsWrong) {
  const BlockWeights w = random_block_weights(32);
  Graph g;
  Node x = g.input("x", {2 * 5, 32});
  EXPECT_THROW(transformer_block(g, x, {2, 5, 3}, w), ShapeError);                 // 3 heads do not divide 32
  EXPECT_THROW(transformer_block(g, x, {2, 6, 2}, w), ShapeError);                 // 12 rows, not 10
  EXPECT_THROW(transformer_block(g, g.input("x3", {10, 32, 1}), {2, 5, 2}, w), ShapeError);  // rank 3
  EXPECT_THROW(transformer_block(g, g.input("x48", {10, 48}), {2, 5, 2}, w), ShapeError);    // weights of 32
  BlockWeights missing = w;
  missing.w2 = Tensor();
  EXPECT_ANY_THROW(transformer_block(g, x, {2, 5, 2}, missing));
  try {
    transformer_block(g, x, {2, 5, 3}, w);
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("3 heads do not divide d = 32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(random_block_weights(0), ShapeError);
  EXPECT_THROW(transformer_block(rand({10, 32}, 1), {2, 5, 3}, w), ShapeError);
  // The graph is still usable: a valid block builds after the errors.
  EXPECT_NO_THROW(transformer_block(g, x, {2, 5, 2}, w));
}

TEST(GraphModels, GpuBlockPassesCheckInFp32And3xTf32) {
  MT_REQUIRE_GPU();
  const BlockShape shape{2, 37, 4};
  const std::int64_t d = 64 * shape.heads, rows = shape.batch * shape.tokens;
  const BlockWeights w = random_block_weights(d, 11, Device::cuda(0));
  Graph g;
  g.output("y", transformer_block(g, g.input("x", {rows, d}), shape, w));
  const Tensor x = rand({rows, d}, 5) * 2.0 - 1.0;
  const Tensor want = transformer_block(x, shape, random_block_weights(d, 11));  // the eager block, on the CPU
  const double tol = 1e-4 * std::max(1.0, max_abs(want));
  for (MathMode math : {MathMode::FP32, MathMode::TF32x3}) {
    SCOPED_TRACE(math_mode_name(math));
    ExecOptions o;
    o.device = Device::cuda(0);
    o.run.cuda_graph = true;
    o.compile.math = math;
    const CheckReport r = check(g, {{"x", x}}, o);
    EXPECT_TRUE(r.ok) << r;
    Executor e(g, o);
    const Tensor xd = x.cuda();
    for (int rep = 0; rep < 3; ++rep) EXPECT_LE(max_diff(e.run({{"x", xd}}).at("y"), want), tol) << "run " << rep;
  }
}

}  // namespace
}  // namespace mt
