// Running graphs: CPU path (always), CUDA executor against the CPU and against itself in every mode (GPU).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "minitensor/graph/detail/codegen.h"
#include "minitensor/graph/detail/internal.h"
#include "minitensor/graph/graph.h"
#include "minitensor/ops/ops.h"
#include "minitensor/runtime/launch.h"
#include "random_graph.h"
#include "tests/common/gpu.h"

namespace mt {
namespace {

Tensor uniform(const Shape& s, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<float> v = rand(s, seed).to_vector<float>();
  for (float& f : v) f = static_cast<float>(lo + (hi - lo) * f);
  return from_vector(v, s);
}

struct Mlp {
  Graph g;
  Tensor w1, b1, w2, b2;
};

Mlp make_mlp(std::int64_t batch, std::int64_t hidden, bool spelled_out_softmax = true) {
  Mlp m;
  const double s = 1.0 / std::sqrt(static_cast<double>(hidden));
  m.w1 = uniform({hidden, hidden}, 11, -s, s);
  m.b1 = uniform({hidden}, 12, -0.1, 0.1);
  m.w2 = uniform({hidden, hidden}, 13, -s, s);
  m.b2 = uniform({hidden}, 14, -0.1, 0.1);
  Graph& g = m.g;
  auto x = g.input("x", {batch, hidden});
  auto h = g.relu(g.matmul(x, g.parameter("w1", m.w1)) + g.parameter("b1", m.b1)).named("h");
  auto logits = (g.matmul(h, g.parameter("w2", m.w2)) + g.parameter("b2", m.b2)).named("logits");
  if (spelled_out_softmax) {
    auto e = g.exp(logits - g.max(logits, -1, true));
    g.output("y", e / g.sum(e, -1, true));
  } else {
    g.output("y", g.softmax(logits, -1));
  }
  return m;
}

double max_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.cpu().contiguous().to_vector<float>(), vb = b.cpu().contiguous().to_vector<float>();
  EXPECT_EQ(va.size(), vb.size());
  double m = 0;
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i)
    m = std::max(m, static_cast<double>(std::fabs(va[i] - vb[i])));
  return m;
}

ExecOptions gpu_options() {
  ExecOptions o;
  o.device = Device::cuda(0);
  return o;
}

// ---------------------------------------------------------------- CPU (always)
TEST(GraphCpu, MlpMatchesEagerOps) {
  Mlp m = make_mlp(5, 12);
  const Tensor x = uniform({5, 12}, 1);
  const TensorMap out = run_cpu(m.g, {{"x", x}});
  const Tensor ref = softmax(linear(relu(linear(x, m.w1, m.b1)), m.w2, m.b2), -1);
  EXPECT_LT(max_diff(out.at("y"), ref), 1e-6);
  ExecOptions cpu;
  cpu.device = Device::cpu();
  Executor exec(m.g, cpu);
  EXPECT_LT(max_diff(exec.run({{"x", x}}).at("y"), ref), 1e-6);
}

TEST(GraphCpu, ExecOptionsGroupCompileAndRunOptions) {
  const ExecOptions o{.device = Device::cpu(),
                      .compile = {.fuse_softmax = false, .max_streams = 2},
                      .run = {.cuda_graph = false}};
  EXPECT_FALSE(o.compile.fuse_softmax);
  EXPECT_TRUE(o.compile.fuse_elementwise);
  EXPECT_EQ(o.compile.max_streams, 2);
  EXPECT_FALSE(o.run.cuda_graph);
  EXPECT_TRUE(o.run.host_pipeline);
  EXPECT_TRUE(o.kernel_cache_dir.empty());
  Mlp m = make_mlp(2, 4);
  Executor exec(m.g, o);
  EXPECT_EQ(exec.run({{"x", uniform({2, 4}, 1)}}).at("y").shape(), Shape({2, 4}));
}

TEST(GraphCpu, InputErrorsAreTypedAndNameTheInput) {
  Mlp m = make_mlp(2, 4);
  ExecOptions cpu;
  cpu.device = Device::cpu();
  Executor exec(m.g, cpu);
  const Tensor x = uniform({2, 4}, 1);
  EXPECT_THROW(exec.run({}), InvalidArgument);
  EXPECT_THROW(exec.run({{"x", x}, {"extra", x}}), InvalidArgument);
  try {
    exec.run({{"X", x}});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'X'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(exec.run({{"x", uniform({3, 4}, 1)}}), ShapeError);
  EXPECT_THROW(exec.run({{"x", zeros({2, 4}, DType::I32)}}), DTypeError);
  EXPECT_NO_THROW(exec.run({{"x", x}}));  // still usable
  Graph empty;
  empty.input("x", {2});
  EXPECT_THROW(Executor(empty, cpu), InvalidArgument);
  EXPECT_THROW(run_cpu(empty, {{"x", zeros({2})}}), InvalidArgument);
}

// No device asked for and none present: Executor(g) and check(g, ...) run on the CPU and say so on stderr,
// once per process, with the reason (here: no driver). An explicit CUDA device stays a DeviceError. Where a
// device is present the default is the GPU, with no notice (GraphCuda.DefaultDeviceIsTheGpu checks more).
TEST(GraphCpu, DefaultDeviceFallsBackToTheCpuWithANotice) {
  if (cuda_available()) {
    Mlp m = make_mlp(3, 8);
    detail::reset_cpu_fallback_notice();
    testing::internal::CaptureStderr();
    Executor e(m.g);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
    EXPECT_TRUE(e.device().is_cuda());
    return;
  }
  Mlp m = make_mlp(3, 8);
  const Tensor x = uniform({3, 8}, 1);
  const Tensor ref = run_cpu(m.g, {{"x", x}}).at("y");
  detail::reset_cpu_fallback_notice();
  testing::internal::CaptureStderr();
  Executor first(m.g);
  Executor second(m.g, ExecOptions{});
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string notice =
      "minitensor: no CUDA device (" + cuda_unavailable_reason() + "); running on the CPU\n";
  EXPECT_EQ(err, notice);  // once, for both executors
  EXPECT_EQ(first.device(), Device::cpu());
  EXPECT_EQ(second.device(), Device::cpu());
  const TensorMap out = first.run({{"x", x}});
  EXPECT_TRUE(out.at("y").is_cpu());
  EXPECT_EQ(max_diff(out.at("y"), ref), 0.0);
  EXPECT_EQ(m.g.compile().device(), Device::cpu());

  detail::reset_cpu_fallback_notice();
  testing::internal::CaptureStderr();
  const CheckReport r = check(m.g, {{"x", x}});
  EXPECT_EQ(testing::internal::GetCapturedStderr(), notice);
  EXPECT_FALSE(r.compared) << r;
  EXPECT_NE(r.table().find("nothing compared"), std::string::npos) << r;

  // Asked for explicitly, the GPU is required.
  ExecOptions gpu;
  gpu.device = Device::cuda(0);
  EXPECT_THROW(Executor(m.g, gpu), DeviceError);
  EXPECT_THROW(check(m.g, {{"x", x}}, gpu), DeviceError);
  try {
    Executor e(m.g, gpu);
    FAIL() << "no throw";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find(cuda_unavailable_reason()), std::string::npos) << e.what();
  }
  // An explicit CPU says nothing.
  testing::internal::CaptureStderr();
  detail::reset_cpu_fallback_notice();
  ExecOptions cpu;
  cpu.device = Device::cpu();
  EXPECT_EQ(Executor(m.g, cpu).device(), Device::cpu());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

// g.gelu is the exact erf form and g.gelu_tanh the tanh approximation, as the eager ops (PyTorch's values).
TEST(GraphCpu, GeluFormsMatchEagerOps) {
  Graph g;
  auto x = g.input("x", {4});
  g.output("exact", g.gelu(x));
  g.output("approx", g.gelu_tanh(x));
  const Tensor xs = from_vector<float>({1.f, -1.f, 3.f, -3.f});
  const TensorMap out = run_cpu(g, {{"x", xs}});
  EXPECT_EQ(max_diff(out.at("exact"), gelu(xs)), 0.0);
  EXPECT_EQ(max_diff(out.at("approx"), gelu_tanh(xs)), 0.0);
  const std::vector<float> e = out.at("exact").to_vector<float>(), a = out.at("approx").to_vector<float>();
  EXPECT_NEAR(e[0], 0.8413447460685429, 1e-6);
  EXPECT_NEAR(e[1], -0.15865525393145707, 1e-6);
  EXPECT_NEAR(a[0], 0.8411919906082768, 1e-6);
  EXPECT_NEAR(e[2], 2.99595030590511, 1e-6);
}

TEST(GraphCpu, RandomGraphsRunOnCpu) {
  for (std::uint64_t seed = 0; seed < 100; ++seed) {
    test::RandomGraph rg = test::make_random_graph(seed);
    EXPECT_NO_THROW(run_cpu(rg.graph, rg.inputs)) << "seed " << seed << "\n" << rg.description;
  }
}

// ---------------------------------------------------------------- CUDA
TEST(GraphCuda, MlpFusedEqualsUnfusedEqualsEager) {
  MT_REQUIRE_GPU();
  Mlp m = make_mlp(64, 96);
  const Tensor x = uniform({64, 96}, 2).cuda();
  ExecOptions fused = gpu_options(), unfused = gpu_options();
  unfused.compile.fuse_elementwise = unfused.compile.fuse_gemm_epilogue = unfused.compile.fuse_softmax =
      false;
  Executor ef(m.g, fused), eu(m.g, unfused);
  EXPECT_EQ(ef.n_launches(), 2) << ef.summary();  // linear+bias+relu, linear+bias+softmax
  EXPECT_EQ(eu.n_launches(), 10) << eu.summary();
  const Tensor yf = ef.run({{"x", x}}).at("y").clone();
  const Tensor yu = eu.run({{"x", x}}).at("y").clone();
  const Tensor eager =
      softmax(linear(relu(linear(x, m.w1.cuda(), m.b1.cuda())), m.w2.cuda(), m.b2.cuda()), -1);
  EXPECT_LT(max_diff(yf, yu), 1e-5);
  EXPECT_LT(max_diff(yf, eager), 1e-5);
  EXPECT_LT(max_diff(yf, run_cpu(m.g, {{"x", x.cpu()}}).at("y")), 1e-4);
}

TEST(GraphCuda, ElementwiseFusionMatchesUnfused) {
  MT_REQUIRE_GPU();
  Graph g;
  auto x = g.input("x", {33, 65});
  auto b = g.input("b", {65});
  auto t = g.tanh(x * 1.5 + b);
  auto y = g.gelu(t) * t - g.sigmoid(x) / (g.abs(b) + 1.0);
  g.output("y", g.clamp(y, -0.75, 2.0));
  ExecOptions unfused = gpu_options();
  unfused.compile.fuse_elementwise = false;
  Executor ef(g, gpu_options()), eu(g, unfused);
  EXPECT_EQ(ef.n_launches(), 2);  // |b| + 1 is (65): its own kernel, broadcast into the main group
  EXPECT_TRUE(ef.warnings().empty());
  const TensorMap in = {{"x", uniform({33, 65}, 3, -3, 3).cuda()}, {"b", uniform({65}, 4).cuda()}};
  EXPECT_LT(max_diff(ef.run(in).at("y"), eu.run(in).at("y")), 2e-6);
}

TEST(GraphCuda, MultiStreamEqualsSingleStream) {
  MT_REQUIRE_GPU();
  Graph g;
  auto x = g.input("x", {128, 64});
  std::vector<Node> branches;
  for (int i = 0; i < 4; ++i) {
    auto w = g.parameter(detail::str("w", i), uniform({64, 64}, 20 + i, -0.2, 0.2));
    branches.push_back(g.softmax(g.tanh(g.matmul(x, w)) * double(i + 1), -1));
  }
  g.output("y", (branches[0] + branches[1]) * (branches[2] - branches[3]));
  ExecOptions single = gpu_options();
  single.compile.multi_stream = false;
  Executor em(g, gpu_options()), es(g, single);
  EXPECT_NE(em.summary().find("4 stream(s)"), std::string::npos) << em.summary();
  const TensorMap in = {{"x", uniform({128, 64}, 5).cuda()}};
  for (int rep = 0; rep < 3; ++rep) EXPECT_EQ(max_diff(em.run(in).at("y"), es.run(in).at("y")), 0.0);
}

TEST(GraphCuda, CudaGraphReplayEqualsPlainRunAndFollowsNewData) {
  MT_REQUIRE_GPU();
  Mlp m = make_mlp(32, 64);
  ExecOptions plain = gpu_options();
  plain.run.cuda_graph = false;
  Executor eg(m.g, gpu_options()), ep(m.g, plain);
  Tensor x = uniform({32, 64}, 6).cuda();
  for (int rep = 0; rep < 4; ++rep) {
    x.copy_(uniform({32, 64}, 100 + rep));  // new data, same pointer: replays must follow it
    const Tensor yg = eg.run({{"x", x}}).at("y").clone();
    const Tensor yp = ep.run({{"x", x}}).at("y").clone();
    EXPECT_EQ(max_diff(yg, yp), 0.0) << "rep " << rep;
  }
  EXPECT_EQ(eg.stats().n_plain_runs, 1);  // the warm-up
  EXPECT_EQ(eg.stats().n_captures, 1);
  EXPECT_EQ(eg.stats().n_replays, 2);
  // The MLP's launches run in sequence: the captured graph has edges, some of them may be programmatic.
  EXPECT_GT(eg.stats().n_graph_edges, 0);
  EXPECT_LE(eg.stats().n_programmatic_edges, eg.stats().n_graph_edges);
  EXPECT_GE(eg.stats().n_graph_kernels, eg.n_launches());  // a step launches one kernel or more
  // A new input pointer: the graph is updated (or re-instantiated), not stale.
  Tensor x2 = uniform({32, 64}, 7).cuda();
  const Tensor y2 = eg.run({{"x", x2}}).at("y").clone();
  EXPECT_EQ(max_diff(y2, ep.run({{"x", x2}}).at("y")), 0.0);
  EXPECT_EQ(eg.stats().n_graph_updates + eg.stats().n_reinstantiations, 1);
  EXPECT_EQ(ep.stats().n_replays, 0);
}

TEST(GraphCuda, HostInputsAndStridedInputs) {
  MT_REQUIRE_GPU();
  Graph g;
  auto x = g.input("x", {16, 8});
  auto y = g.input("y", {16, 8});
  g.output("z", g.matmul(g.transpose(x, 0, 1), y) * 0.5);
  Executor e(g, gpu_options());
  const Tensor xh = uniform({16, 8}, 8), yh = uniform({16, 8}, 9);
  const Tensor yt = uniform({8, 16}, 10).cuda().t();  // strided device input
  const Tensor ref = run_cpu(g, {{"x", xh}, {"y", yt.cpu().contiguous()}}).at("z");
  for (int rep = 0; rep < 3; ++rep) EXPECT_LT(max_diff(e.run({{"x", xh}, {"y", yt}}).at("z"), ref), 1e-5);
  const Tensor ref2 = run_cpu(g, {{"x", xh}, {"y", yh}}).at("z");
  EXPECT_LT(max_diff(e.run({{"x", xh.pin_memory()}, {"y", yh.cuda()}}).at("z"), ref2), 1e-5);
}

TEST(GraphCuda, RunErrorsLeaveTheExecutorUsable) {
  MT_REQUIRE_GPU();
  Mlp m = make_mlp(4, 8);
  Executor e(m.g, gpu_options());
  const Tensor x = uniform({4, 8}, 1).cuda();
  EXPECT_THROW(e.run({}), InvalidArgument);
  EXPECT_THROW(e.run({{"x", x}, {"w1", x}}), InvalidArgument);
  EXPECT_THROW(e.run({{"x", uniform({4, 9}, 1).cuda()}}), ShapeError);
  EXPECT_THROW(e.run({{"x", zeros({4, 8}, DType::I32, Device::cuda(0))}}), DTypeError);
  if (cuda_device_count() > 1) {
    EXPECT_THROW(e.run({{"x", uniform({4, 8}, 1).cuda(1)}}), DeviceError);
  }
  const Tensor y1 = e.run({{"x", x}}).at("y").clone();
  const Tensor y2 = e.run({{"x", x}}).at("y").clone();
  EXPECT_EQ(max_diff(y1, y2), 0.0);
  Graph none;
  none.input("x", {2});
  EXPECT_THROW(Executor(none, gpu_options()), InvalidArgument);
}

TEST(GraphCuda, NvrtcFailureFallsBackAndWarns) {
  MT_REQUIRE_GPU();
  Graph g;
  auto x = g.input("x", {40, 30});
  g.output("y", g.exp(g.tanh(x) * 2.0) - x);
  struct FaultInjection {  // on for the broken executor's build only, whatever it throws
    FaultInjection() { detail::set_nvrtc_fault_injection(true); }
    ~FaultInjection() { detail::set_nvrtc_fault_injection(false); }
  };
  const auto build_broken = [&] {
    FaultInjection on;
    return Executor(g, gpu_options());
  };
  Executor eb = build_broken(), ok(g, gpu_options());
  ASSERT_EQ(eb.warnings().size(), 1u);
  EXPECT_NE(eb.warnings()[0].find("NVRTC"), std::string::npos) << eb.warnings()[0];
  EXPECT_EQ(eb.n_launches(), 4);
  EXPECT_EQ(ok.n_launches(), 1);
  const TensorMap in = {{"x", uniform({40, 30}, 12, -2, 2).cuda()}};
  EXPECT_LT(max_diff(eb.run(in).at("y"), ok.run(in).at("y")), 1e-5);
}

TEST(GraphCuda, KernelCacheOnDisk) {
  MT_REQUIRE_GPU();
  const std::string dir = ::testing::TempDir() + "/mt_kernel_cache_test";
  Graph g;
  auto x = g.input("x", {3, 41});
  g.output("y", g.sigmoid(x) * x + 0.125);  // a group no other test builds
  ExecOptions o = gpu_options();
  o.kernel_cache_dir = dir;
  Executor e(g, o);
  bool found = false;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec))
    found |= f.path().extension() == ".cubin";
  EXPECT_TRUE(found) << dir;
}

TEST(GraphCuda, CheckReportOnMlp) {
  MT_REQUIRE_GPU();
  Mlp m = make_mlp(16, 32);
  const CheckReport r = check(m.g, {{"x", uniform({16, 32}, 3)}});
  EXPECT_TRUE(r.ok) << r;
  EXPECT_EQ(r.rows.size(), 3u) << r;  // linear+relu, linear+softmax, output y
  const std::string t = r.table();
  for (const char* col : {"max abs", "max rel", "NMSE", "tol", "pass"})
    EXPECT_NE(t.find(col), std::string::npos) << t;
}

// Both GELUs on the device against the CPU reference: in a fused elementwise kernel (NVRTC) and in the GEMM
// epilogue, node by node and end to end.
TEST(GraphCuda, CheckGeluForms_FusedAndEpilogue) {
  MT_REQUIRE_GPU();
  Graph g;
  auto x = g.input("x", {33, 48});
  auto w1 = g.parameter("w1", uniform({48, 40}, 7, -0.3, 0.3));
  auto w2 = g.parameter("w2", uniform({48, 40}, 10, -0.3, 0.3));
  auto b = g.parameter("b", uniform({40}, 8, -0.5, 0.5));
  g.output("fused", g.gelu(x * 1.5) * x - g.gelu_tanh(x + 0.25));
  g.output("epilogue_exact", g.gelu(g.matmul(x, w1) + b));
  g.output("epilogue_tanh", g.gelu_tanh(g.matmul(x, w2) + b));
  const CheckReport r = check(g, {{"x", uniform({33, 48}, 9, -3, 3)}}, gpu_options());
  EXPECT_TRUE(r.ok) << r;
  EXPECT_TRUE(r.compared) << r;
  const std::string t = r.table();
  EXPECT_NE(t.find("linear+bias+gelu "), std::string::npos) << t;
  EXPECT_NE(t.find("linear+bias+gelu_tanh"), std::string::npos) << t;
}

TEST(GraphCuda, DefaultDeviceIsTheGpu) {
  MT_REQUIRE_GPU();
  Mlp m = make_mlp(3, 8);
  detail::reset_cpu_fallback_notice();
  testing::internal::CaptureStderr();
  Executor e(m.g);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(e.device(), Device::cuda(0));
  EXPECT_TRUE(check(m.g, {{"x", uniform({3, 8}, 1)}}).compared);
}

TEST(GraphCuda, CheckReportOnMlpTf32x3) {
  MT_REQUIRE_GPU();
  Mlp m = make_mlp(64, 256);
  ExecOptions o = gpu_options();
  o.compile.math = MathMode::TF32x3;  // float32-class accuracy: the FP32 tolerances hold
  const CheckReport r = check(m.g, {{"x", uniform({64, 256}, 3)}}, o);
  EXPECT_TRUE(r.ok) << r;
}

// TF32 modes pack each GEMM's constant B once (CompileOptions::pack_weights): the results are bit-identical
// to packing it at every run, in plain runs and CUDA-graph replays with new data, for linear (matmul + bias),
// matmul and gemm with a transposed constant.
TEST(GraphCuda, PackedWeightsEqualPackingEveryRun) {
  MT_REQUIRE_GPU();
  Mlp m = make_mlp(256, 256);
  const Tensor wt = uniform({200, 256}, 15, -0.1, 0.1);  // used transposed: (256, 200)
  {
    auto y = m.g.gemm(m.g.input("u", {130, 256}), m.g.constant(wt, "wt"), GemmNodeOptions{false, true});
    m.g.output("z", y);
  }
  for (MathMode math : {MathMode::TF32x3, MathMode::TF32}) {
    ExecOptions packed = gpu_options(), unpacked = gpu_options();
    packed.compile.math = unpacked.compile.math = math;
    unpacked.compile.pack_weights = false;
    Executor ep(m.g, packed), eu(m.g, unpacked);
    Tensor x = uniform({256, 256}, 6).cuda(), u = uniform({130, 256}, 8).cuda();
    for (int rep = 0; rep < 3; ++rep) {
      x.copy_(uniform({256, 256}, 200 + rep));
      const TensorMap a = ep.run({{"x", x}, {"u", u}}), b = eu.run({{"x", x}, {"u", u}});
      EXPECT_EQ(max_diff(a.at("y"), b.at("y")), 0.0) << math_mode_name(math) << " rep " << rep;
      EXPECT_EQ(max_diff(a.at("z"), b.at("z")), 0.0) << math_mode_name(math) << " rep " << rep;
    }
    EXPECT_GT(ep.stats().n_replays, 0);
  }
}

// The packed weight is a snapshot of a device parameter: with pack_weights on, a parameter changed in place
// is not seen; with it off, the next run reads the new values.
TEST(GraphCuda, PackWeightsSnapshotsDeviceParameters) {
  MT_REQUIRE_SM90();
  Graph g;
  Tensor w = uniform({256, 192}, 21).cuda();
  g.output("y", g.matmul(g.input("x", {256, 256}), g.parameter("w", w)));
  ExecOptions on = gpu_options(), off = gpu_options();
  on.compile.math = off.compile.math = MathMode::TF32x3;
  off.compile.pack_weights = false;
  Executor e_on(g, on), e_off(g, off);
  const Tensor x = uniform({256, 256}, 22).cuda();
  const Tensor before = e_on.run({{"x", x}}).at("y").clone();
  EXPECT_EQ(max_diff(e_off.run({{"x", x}}).at("y"), before), 0.0);
  w.copy_(uniform({256, 192}, 23));
  EXPECT_EQ(max_diff(e_on.run({{"x", x}}).at("y"), before), 0.0);
  const Tensor after = e_off.run({{"x", x}}).at("y").clone();
  EXPECT_GT(max_diff(after, before), 0.1);
  EXPECT_LT(max_diff(after, matmul(x, w, MathMode::TF32x3)), 1e-5);
}

// 3xTF32 on Hopper: each wgmma GEMM is launched to overlap the kernel before it (its A pack), and the
// captured graph keeps those edges programmatic. The first product (128 rows, a (3072, 768) weight) splits K
// past a cluster, its splits added by the reduce kernel. Replays equal plain runs and follow new data.
TEST(GraphCuda, TF32x3GemmsOverlapTheKernelBefore) {
  MT_REQUIRE_SM90();
  Graph g;
  auto x = g.input("x", {128, 3072});
  auto h = g.matmul(x, g.parameter("w1", uniform({3072, 768}, 31, -0.05, 0.05)));
  g.output("y", g.matmul(g.tanh(h), g.parameter("w2", uniform({768, 256}, 32, -0.05, 0.05))));
  ExecOptions o = gpu_options(), plain = gpu_options();
  o.compile.math = plain.compile.math = MathMode::TF32x3;
  plain.run.cuda_graph = false;
  Executor eg(g, o), ep(g, plain);
  Tensor x_dev = uniform({128, 3072}, 33).cuda();
  for (int rep = 0; rep < 4; ++rep) {
    const Tensor xh = uniform({128, 3072}, 300 + rep);
    x_dev.copy_(xh);
    const Tensor yg = eg.run({{"x", x_dev}}).at("y").clone();
    EXPECT_EQ(max_diff(yg, ep.run({{"x", x_dev}}).at("y")), 0.0) << "rep " << rep;
    EXPECT_LT(max_diff(yg, run_cpu(g, {{"x", xh}}).at("y")), 1e-5) << "rep " << rep;
  }
  EXPECT_GT(eg.stats().n_replays, 0);
  if (programmatic_launch()) EXPECT_GT(eg.stats().n_programmatic_edges, 0);
}

TEST(GraphCuda, CheckMatchesNanPositions) {
  MT_REQUIRE_GPU();
  // log of negative numbers is NaN on both sides: the report passes because the NaN positions match.
  Graph g;
  auto x = g.input("x", {4, 5});
  g.output("y", g.log(x));
  EXPECT_TRUE(check(g, {{"x", uniform({4, 5}, 3)}}).ok);
}

TEST(GraphCuda, ProfileAndTrace) {
  MT_REQUIRE_GPU();
  Mlp m = make_mlp(64, 128);
  ExecOptions o = gpu_options();
  o.run.profile = true;
  Executor e(m.g, o);
  e.run({{"x", uniform({64, 128}, 3)}});   // host input: the trace shows the copy
  ASSERT_EQ(e.last_profile().size(), 2u);  // linear+bias+relu, linear+bias+softmax
  for (const auto& t : e.last_profile()) EXPECT_GT(t.duration_us, 0.0);
  EXPECT_NE(e.profile_table().find("linear"), std::string::npos);
  const std::string path = ::testing::TempDir() + "/mt_trace_test.json";
  e.write_trace(path);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(ss.str().find("H2D"), std::string::npos);
  EXPECT_NE(ss.str().find("stream 0"), std::string::npos);
}

TEST(GraphCuda, HostPipelineMatchesPlainRun) {
  MT_REQUIRE_GPU();
  const std::int64_t n = (1 << 20) + 12345;
  Graph g;
  auto a = g.input("a", {n});
  auto b = g.input("b", {n});
  g.output("c", a * 2.0 + b);
  ExecOptions o = gpu_options();
  o.run.pipeline_chunk = 1 << 17;
  Executor e(g, o);
  const Tensor ah = uniform({n}, 1), bh = uniform({n}, 2).pin_memory();
  const Tensor c = e.run({{"a", ah}, {"b", bh}}).at("c");
  EXPECT_TRUE(c.is_cpu());
  EXPECT_EQ(e.stats().n_pipelined_runs, 1);
  EXPECT_LT(max_diff(c, run_cpu(g, {{"a", ah}, {"b", bh}}).at("c")), 1e-6);
  // Device inputs take the normal path.
  EXPECT_TRUE(e.run({{"a", ah.cuda()}, {"b", bh.cuda()}}).at("c").is_cuda());
}

TEST(GraphCuda, RandomGraphsDifferential) {
  MT_REQUIRE_GPU();
  int n_fail = 0;
  for (std::uint64_t seed = 0; seed < 500; ++seed) {
    test::RandomGraph rg = test::make_random_graph(seed);
    ExecOptions o = gpu_options();
    o.compile.multi_stream = seed % 2 == 0;
    const bool fuse = seed % 5 != 4;
    o.compile.fuse_elementwise = o.compile.fuse_gemm_epilogue = o.compile.fuse_softmax = fuse;
    const CheckReport r = check(rg.graph, rg.inputs, o);
    if (!r.ok && ++n_fail <= 5) ADD_FAILURE() << "seed " << seed << "\n" << rg.description << r;
  }
  EXPECT_EQ(n_fail, 0);
}

TEST(GraphCuda, RandomGraphsCudaGraphEqualsPlain) {
  MT_REQUIRE_GPU();
  for (std::uint64_t seed = 1000; seed < 1040; ++seed) {
    test::RandomGraph rg = test::make_random_graph(seed);
    ExecOptions plain = gpu_options();
    plain.run.cuda_graph = false;
    Executor eg(rg.graph, gpu_options()), ep(rg.graph, plain);
    TensorMap in;
    for (auto& [k, v] : rg.inputs) in[k] = v.cuda();
    for (int rep = 0; rep < 3; ++rep) {
      const TensorMap a = eg.run(in), b = ep.run(in);
      for (const auto& [name, t] : a) {
        if (t.dtype() == DType::F32) {
          EXPECT_EQ(max_diff(t, b.at(name)), 0.0) << "seed " << seed << " " << name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace mt
