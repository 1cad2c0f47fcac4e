// bench_ops: the bandwidth-bound ops against the device's copy bandwidth.
//
// Row 0 is cudaMemcpy device-to-device (the ceiling); every other row reports GB/s (bytes read + written by
// the op, formula next to each row) and x_copy, its ratio to row 0. 2^28 float32 elements (1 GiB per tensor,
// far beyond L2, so no input rotation is needed); 16384 x 16384 for the row / column cases, softmax and
// transpose. Each row validates its result against the CPU reference before timing, warms up, then times
// every iteration with CUDA events on the op's stream; the counters use the median. Outputs are preallocated,
// so no allocation sits inside a timed region.
//
//   bench_ops --benchmark_out=ops.json --benchmark_out_format=json
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "minitensor/minitensor.h"
#include "minitensor/ops/detail/kernels.h"
#include "minitensor/ops/detail/norm.h"
#include "minitensor/runtime/stream.h"
#include "minitensor/tensor/detail/kernels.h"

namespace mt {
namespace {

constexpr std::int64_t kN = std::int64_t(1) << 28;
constexpr std::int64_t kSide = 16384;  // kSide^2 == kN
constexpr int kWarmup = 3;
constexpr int kIterations = 20;

cudaStream_t stream() {
  return current_stream(0);
}

// Inputs and outputs, made once. x and y hold 2^28 + 1 floats so that offset-1 views have 2^28 elements too.
struct Data {
  Tensor x_base, y_base, out_base, iout;
  Tensor x, y, out, x1, y1, out1;  // aligned views, offset-1 views
  Tensor m, mout;                  // x and out as 16384 x 16384
  Data() {
    const Device g = Device::cuda(0);
    x_base = randn({kN + 4}, 1, g);
    y_base = randn({kN + 4}, 2, g);
    out_base = empty({kN + 4}, DType::F32, g);
    iout = empty({kSide}, DType::I32, g);
    x = x_base.narrow(0, 0, kN), y = y_base.narrow(0, 0, kN), out = out_base.narrow(0, 0, kN);
    x1 = x_base.narrow(0, 1, kN), y1 = y_base.narrow(0, 1, kN), out1 = out_base.narrow(0, 1, kN);
    m = x.view({kSide, kSide});
    mout = out.view({kSide, kSide});
  }
};
Data& data() {
  static Data d;
  return d;
}

// Host copies of a few slices, for validation.
std::vector<float> host(const Tensor& t) {
  return t.contiguous().to_vector<float>();
}

bool close(const std::vector<float>& got, const std::vector<float>& ref, double rel, std::string* why) {
  if (got.size() != ref.size()) {
    *why = "size mismatch";
    return false;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], e = ref[i];
    if (std::isnan(g) != std::isnan(e) || std::fabs(g - e) > 1e-6 + rel * std::fabs(e)) {
      *why =
          "element " + std::to_string(i) + ": got " + std::to_string(g) + ", expected " + std::to_string(e);
      return false;
    }
  }
  return true;
}

// Median milliseconds of `launch` over the benchmark's iterations (each iteration timed by events).
double time_ms(benchmark::State& state, const std::function<void()>& launch) {
  cudaStream_t s = stream();
  for (int i = 0; i < kWarmup; ++i) launch();
  MT_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaEvent_t start, stop;
  MT_CUDA_CHECK(cudaEventCreate(&start));
  MT_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (auto _ : state) {
    MT_CUDA_CHECK(cudaEventRecord(start, s));
    launch();
    MT_CUDA_CHECK(cudaEventRecord(stop, s));
    MT_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    MT_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    state.SetIterationTime(t / 1e3);
    ms.push_back(t);
  }
  MT_CUDA_CHECK(cudaEventDestroy(start));
  MT_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? 0 : ms[ms.size() / 2];
}

// Device time per call with the host path taken out: `n` calls captured into one CUDA graph, the graph
// replayed `rounds` times between two events each, median per call. For ops whose single call is short
// enough that the host path before the kernel would be most of its time. `launch` must not allocate.
double graph_ms(const std::function<void()>& launch, int n = 20, int rounds = 11) {
  cudaStream_t s = stream();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < n; ++i) launch();
  MT_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  MT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  MT_CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm-up
  cudaEvent_t start, stop;
  MT_CUDA_CHECK(cudaEventCreate(&start));
  MT_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    MT_CUDA_CHECK(cudaEventRecord(start, s));
    MT_CUDA_CHECK(cudaGraphLaunch(exec, s));
    MT_CUDA_CHECK(cudaEventRecord(stop, s));
    MT_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    MT_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t / n);
  }
  MT_CUDA_CHECK(cudaEventDestroy(start));
  MT_CUDA_CHECK(cudaEventDestroy(stop));
  MT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MT_CUDA_CHECK(cudaGraphDestroy(graph));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double g_copy_gbps = 0;

void report(benchmark::State& state, double bytes, double ms) {
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  state.counters["GB/s"] = gbps;
  state.counters["x_copy"] = g_copy_gbps > 0 ? gbps / g_copy_gbps : 0;
  state.counters["median_us"] = ms * 1e3;
}

// Validates with `check` (empty string = ok), then times `launch` moving `bytes` per call.
void run(benchmark::State& state, double bytes, const std::function<void()>& launch,
         const std::function<std::string()>& check) {
  launch();
  MT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  const std::string why = check();
  if (!why.empty()) {
    state.SkipWithError(("validation failed: " + why).c_str());
    return;
  }
  report(state, bytes, time_ms(state, launch));
}

// ---- row 0: the ceiling. Bytes: 2 * 4 * n.
void BM_copy_d2d(benchmark::State& state) {
  Data& d = data();
  auto launch = [&] {
    MT_CUDA_CHECK(
        cudaMemcpyAsync(d.out.data_ptr(), d.x.data_ptr(), kN * 4, cudaMemcpyDeviceToDevice, stream()));
  };
  launch();
  const double ms = time_ms(state, launch);
  g_copy_gbps = 2.0 * 4 * kN / (ms * 1e-3) / 1e9;
  report(state, 2.0 * 4 * kN, ms);
}

// Elementwise validation: the first and last 4096 outputs against the CPU reference on the same inputs.
std::string check_elementwise(const Tensor& out,
                              const std::function<Tensor(std::int64_t, std::int64_t)>& ref_of) {
  std::string why;
  for (std::int64_t start : {std::int64_t(0), out.numel() - 4096}) {
    if (!close(host(out.narrow(0, start, 4096)), host(ref_of(start, 4096)), 2e-6, &why)) return why;
  }
  return "";
}

// ---- elementwise. Bytes: (inputs + 1) * 4 * n.
void BM_add_naive(benchmark::State& state) {
  Data& d = data();
  run(
      state, 12.0 * kN,
      [&] {
        detail::launch_add_naive(d.out.data<float>(), d.x.data<float>(), d.y.data<float>(), kN, stream());
      },
      [&] {
        return check_elementwise(d.out, [&](std::int64_t s, std::int64_t n) {
          return add(d.x.narrow(0, s, n).cpu(), d.y.narrow(0, s, n).cpu());
        });
      });
}

void elementwise_binary(benchmark::State& state, BinaryOp op, const Tensor& a, const Tensor& b, Tensor out) {
  run(
      state, 12.0 * kN, [&] { binary(op, a, b, out); },
      [&] {
        return check_elementwise(out, [&](std::int64_t s, std::int64_t n) {
          return binary(op, a.narrow(0, s, n).cpu(), b.narrow(0, s, n).cpu());
        });
      });
}

void elementwise_unary(benchmark::State& state, UnaryOp op, const Tensor& x, Tensor out) {
  run(
      state, 8.0 * kN, [&] { unary(op, x, out); },
      [&] {
        return check_elementwise(
            out, [&](std::int64_t s, std::int64_t n) { return unary(op, x.narrow(0, s, n).cpu()); });
      });
}

void BM_add(benchmark::State& state) {
  elementwise_binary(state, BinaryOp::Add, data().x, data().y, data().out);
}
// Inputs at element offset 1, output aligned: the inputs are read as scalars, the output written in float4.
void BM_add_offset1(benchmark::State& state) {
  elementwise_binary(state, BinaryOp::Add, data().x1, data().y1, data().out);
}
// Everything at offset 1: a scalar prologue, then float4 throughout.
void BM_add_offset1_all(benchmark::State& state) {
  elementwise_binary(state, BinaryOp::Add, data().x1, data().y1, data().out1);
}
void BM_relu(benchmark::State& state) {
  elementwise_unary(state, UnaryOp::Relu, data().x, data().out);
}
void BM_relu_offset1(benchmark::State& state) {
  elementwise_unary(state, UnaryOp::Relu, data().x1, data().out);
}
void BM_gelu(benchmark::State& state) {
  elementwise_unary(state, UnaryOp::Gelu, data().x, data().out);
}
void BM_gelu_tanh(benchmark::State& state) {
  elementwise_unary(state, UnaryOp::GeluTanh, data().x, data().out);
}
// ---- reductions. Bytes: 4 * n read (+ the outputs, negligible).
StridedLayout rows_layout(std::int64_t n_rows, std::int64_t row_len) {
  StridedLayout l;
  l.rank = 1;
  l.shape[0] = n_rows;
  l.stride[0] = row_len;
  return l;
}

void BM_sum(benchmark::State& state, bool offset1) {
  Data& d = data();
  const Tensor& x = offset1 ? d.x1 : d.x;
  run(
      state, 4.0 * kN,
      [&] {
        detail::launch_reduce_rows(ReduceOp::Sum, x.data<float>(), rows_layout(1, kN), 1, kN,
                                   d.out.data_ptr(), stream());
      },
      [&] {
        const std::vector<float> h = host(x);
        double ref = 0;
        for (float v : h) ref += v;
        std::string why;
        close({d.out.narrow(0, 0, 1).item<float>()}, {static_cast<float>(ref)}, 1e-6, &why);
        return why;
      });
}

// Row / column reductions of the 16384 x 16384 matrix, validated on every output against the float64 CPU
// reference (rows 0..63 for the row case; columns 0..255 for the column case).
void matrix_reduce(benchmark::State& state, ReduceOp op, bool rows) {
  Data& d = data();
  const bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  void* out = arg ? d.iout.data_ptr() : d.out.data_ptr();
  run(
      state, 4.0 * kN,
      [&] {
        if (rows) {
          detail::launch_reduce_rows(op, d.x.data<float>(), rows_layout(kSide, kSide), kSide, kSide, out,
                                     stream());
        } else {
          StridedLayout outer = rows_layout(1, 0);
          detail::launch_reduce_cols(op, d.x.data<float>(), outer, 1, kSide, kSide, kSide, out, stream());
        }
      },
      [&] {
        const Tensor sample = rows ? d.m.narrow(0, 0, 64).cpu() : d.m.narrow(1, 0, 256).cpu();
        const Tensor ref = reduce(op, sample, std::vector<std::int64_t>{rows ? 1 : 0});
        const std::int64_t n = ref.numel();
        std::string why;
        if (arg) {
          const auto got = d.iout.narrow(0, 0, n).to_vector<std::int32_t>();
          if (got != ref.to_vector<std::int32_t>()) why = "argmax indices differ";
        } else {
          close(host(d.out.narrow(0, 0, n)), ref.to_vector<float>(), 1e-6, &why);
        }
        return why;
      });
}

// ---- softmax over rows of the 16384 x 16384 matrix. Bytes: 8 * n.
void BM_softmax(benchmark::State& state, bool log, detail::SoftmaxKernel which) {
  Data& d = data();
  run(
      state, 8.0 * kN,
      [&] {
        detail::launch_softmax(log, d.x.data<float>(), d.out.data<float>(), kSide, kSide, 1, stream(), which);
      },
      [&] {
        const Tensor ref =
            log ? log_softmax(d.m.narrow(0, 0, 16).cpu()) : softmax(d.m.narrow(0, 0, 16).cpu());
        std::string why;
        close(host(d.mout.narrow(0, 0, 16).flatten()), ref.flatten().to_vector<float>(), 1e-5, &why);
        return why;
      });
}

// ---- layer_norm / rms_norm over rows of d (transformer widths), the fused row kernel, weight and bias
// present. Bytes: 8 per element (read x once, write y once).
void BM_row_norm(benchmark::State& state, std::int64_t d, bool rms) {
  Data& d_ = data();
  const std::int64_t rows = kN / d;
  const Tensor x = d_.x.narrow(0, 0, rows * d).view({rows, d}),
               y = d_.out.narrow(0, 0, rows * d).view({rows, d});
  const Tensor w = d_.y.narrow(0, 0, d), b = d_.y.narrow(0, d, d);
  const detail::RowNorm kind = rms ? detail::RowNorm::Rms : detail::RowNorm::Layer;
  run(
      state, 8.0 * static_cast<double>(rows * d),
      [&] {
        detail::launch_row_norm(kind, x.data<float>(), w.data<float>(), rms ? nullptr : b.data<float>(),
                                y.data<float>(), rows, d, 1e-5f, stream());
      },
      [&] {
        const Tensor xs = x.narrow(0, 0, 4).cpu();
        const Tensor ref = rms ? rms_norm(xs, w.cpu(), 1e-5) : layer_norm(xs, w.cpu(), b.cpu(), 1e-5);
        std::string why;
        close(host(y.narrow(0, 0, 4).flatten()), ref.flatten().to_vector<float>(), 1e-5, &why);
        return why;
      });
}

// ---- fused attention, (B, 12 heads (16 in the _h16 rows), T, 64), fp32 (BM_attention: the CUDA-core kernel)
// or TF32x3 (BM_attention_tf32x3: the tensor-core kernel), causal or not (bench/ops/torch_attention.py times
// PyTorch's scaled_dot_product_attention in float32 on the same shapes). median_us times one call (host path
// included), graph_us the device time per call (20 calls replayed as one CUDA graph). Counter TFLOPs (from
// graph_us): 4 B H T^2 D (halved causal).
void BM_attention(benchmark::State& state, std::int64_t batch, std::int64_t t, bool causal, MathMode math,
                  std::int64_t heads = 12) {
  const std::int64_t dh = 64;
  const Device dev = Device::cuda(0);
  const Tensor q = randn({batch, heads, t, dh}, 1, dev), k = randn({batch, heads, t, dh}, 2, dev),
               v = randn({batch, heads, t, dh}, 3, dev);
  AttentionOptions o;
  o.causal = causal;
  o.math = math;
  Tensor out;
  auto launch = [&] { out = attention(q, k, v, o); };
  launch();
  MT_CUDA_CHECK(cudaDeviceSynchronize());
  const Tensor ref =
      attention(q.narrow(0, 0, 1).narrow(1, 0, 1).cpu(), k.narrow(0, 0, 1).narrow(1, 0, 1).cpu(),
                v.narrow(0, 0, 1).narrow(1, 0, 1).cpu(), o);
  std::string why;
  if (!close(host(out.narrow(0, 0, 1).narrow(1, 0, 1).contiguous().flatten()),
             ref.flatten().to_vector<float>(), 1e-4, &why)) {
    state.SkipWithError(("validation failed: " + why).c_str());
    return;
  }
  const double ms = time_ms(state, launch);
  const double replay = graph_ms([&] { attention_out(q, k, v, out, o); });
  state.counters["median_us"] = ms * 1e3;  // one call, its host path included
  state.counters["graph_us"] = replay * 1e3;
  state.counters["TFLOPs"] = 4.0 * batch * heads * t * t * dh * (causal ? 0.5 : 1.0) / (replay * 1e-3) / 1e12;
}

// ---- transposes of the 16384 x 16384 matrix. Bytes: 8 * n.
void transpose_rung(benchmark::State& state, detail::TransposeKernel k) {
  Data& d = data();
  run(
      state, 8.0 * kN,
      [&] { detail::launch_transpose_2d(k, d.out.data_ptr(), d.x.data_ptr(), kSide, kSide, stream()); },
      [&] {
        // Rows 0..31 of the output are columns 0..31 of the input.
        const std::vector<float> got = host(d.mout.narrow(0, 0, 32));
        const std::vector<float> ref = host(d.m.narrow(1, 0, 32).cpu().t());
        std::string why;
        close(got, ref, 0, &why);
        return why;
      });
}
// The eager path: Tensor::copy_ of a transposed view (the tiled copy; what contiguous() and
// mt::transpose_copy use).
void BM_transpose_copy(benchmark::State& state, bool offset1) {
  Data& d = data();
  const Tensor src = offset1 ? d.x1.view({kSide, kSide}).t() : d.m.t();
  Tensor dst = d.mout;
  run(
      state, 8.0 * kN, [&] { dst.copy_(src); },
      [&] {
        std::string why;
        close(host(dst.narrow(0, 0, 32)), host(src.narrow(0, 0, 32).cpu()), 0, &why);
        return why;
      });
}
// A batched permute that moves the innermost dim: (64, 2048, 2048) -> (64, 2048, 2048) via dims (0, 2, 1).
void BM_permute_021(benchmark::State& state) {
  Data& d = data();
  const Tensor src = d.x.view({64, 2048, 2048}).permute({0, 2, 1});
  Tensor dst = d.out.view({64, 2048, 2048});
  run(
      state, 8.0 * kN, [&] { dst.copy_(src); },
      [&] {
        std::string why;
        close(host(dst.select(0, 63).narrow(0, 0, 8)), host(src.select(0, 63).narrow(0, 0, 8).cpu()), 0,
              &why);
        return why;
      });
}

// Every row: CUDA-event times (manual), a fixed iteration count, microseconds.
void timed(benchmark::internal::Benchmark* b) {
  b->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_copy_d2d)->Apply(timed);
BENCHMARK(BM_add_naive)->Apply(timed);
BENCHMARK(BM_add)->Apply(timed);
BENCHMARK(BM_add_offset1)->Apply(timed);
BENCHMARK(BM_add_offset1_all)->Apply(timed);
BENCHMARK(BM_relu)->Apply(timed);
BENCHMARK(BM_relu_offset1)->Apply(timed);
BENCHMARK(BM_gelu)->Apply(timed);
BENCHMARK(BM_gelu_tanh)->Apply(timed);
BENCHMARK_CAPTURE(BM_sum, aligned, false)->Apply(timed);
BENCHMARK_CAPTURE(BM_sum, offset1, true)->Apply(timed);
BENCHMARK_CAPTURE(matrix_reduce, row_sum, ReduceOp::Sum, true)->Apply(timed);
BENCHMARK_CAPTURE(matrix_reduce, col_sum, ReduceOp::Sum, false)->Apply(timed);
BENCHMARK_CAPTURE(matrix_reduce, row_max, ReduceOp::Max, true)->Apply(timed);
BENCHMARK_CAPTURE(matrix_reduce, col_max, ReduceOp::Max, false)->Apply(timed);
BENCHMARK_CAPTURE(matrix_reduce, row_argmax, ReduceOp::ArgMax, true)->Apply(timed);
BENCHMARK_CAPTURE(BM_softmax, rows, false, detail::SoftmaxKernel::Auto)->Apply(timed);
BENCHMARK_CAPTURE(BM_softmax, log_rows, true, detail::SoftmaxKernel::Auto)->Apply(timed);
BENCHMARK_CAPTURE(BM_softmax, rows_shared_single_buffer, false, detail::SoftmaxKernel::SharedCached)
    ->Apply(timed);
BENCHMARK_CAPTURE(BM_softmax, rows_registers, false, detail::SoftmaxKernel::RegisterCached)->Apply(timed);
BENCHMARK_CAPTURE(BM_softmax, rows_two_pass, false, detail::SoftmaxKernel::TwoPass)->Apply(timed);
BENCHMARK_CAPTURE(BM_softmax, rows_bulk_lean, false, detail::SoftmaxKernel::BulkLean)->Apply(timed);
BENCHMARK_CAPTURE(BM_softmax, log_rows_bulk_lean, true, detail::SoftmaxKernel::BulkLean)->Apply(timed);
BENCHMARK_CAPTURE(BM_softmax, rows_bulk_lean_static, false, detail::SoftmaxKernel::BulkLeanStatic)
    ->Apply(timed);
BENCHMARK_CAPTURE(BM_softmax, log_rows_bulk_lean_static, true, detail::SoftmaxKernel::BulkLeanStatic)
    ->Apply(timed);
BENCHMARK_CAPTURE(transpose_rung, naive, detail::TransposeKernel::Naive)->Apply(timed);
BENCHMARK_CAPTURE(transpose_rung, smem_nopad, detail::TransposeKernel::SharedNoPad)->Apply(timed);
BENCHMARK_CAPTURE(transpose_rung, smem_padded, detail::TransposeKernel::SharedPadded)->Apply(timed);
BENCHMARK_CAPTURE(transpose_rung, vec4_wide, detail::TransposeKernel::Vec4Wide)->Apply(timed);
BENCHMARK_CAPTURE(transpose_rung, best, detail::TransposeKernel::Best)->Apply(timed);
BENCHMARK_CAPTURE(BM_row_norm, layer_norm_768, 768, false)->Apply(timed);
BENCHMARK_CAPTURE(BM_row_norm, layer_norm_1024, 1024, false)->Apply(timed);
BENCHMARK_CAPTURE(BM_row_norm, layer_norm_4096, 4096, false)->Apply(timed);
BENCHMARK_CAPTURE(BM_row_norm, rms_norm_4096, 4096, true)->Apply(timed);
BENCHMARK_CAPTURE(BM_attention, 8x128, 8, 128, false, MathMode::FP32)->Apply(timed);
BENCHMARK_CAPTURE(BM_attention, 8x128_causal, 8, 128, true, MathMode::FP32)->Apply(timed);
BENCHMARK_CAPTURE(BM_attention, 4x512, 4, 512, false, MathMode::FP32)->Apply(timed);
BENCHMARK_CAPTURE(BM_attention, 4x512_causal, 4, 512, true, MathMode::FP32)->Apply(timed);
BENCHMARK_CAPTURE(BM_attention, 1x1024_causal, 1, 1024, true, MathMode::FP32)->Apply(timed);
BENCHMARK_CAPTURE(BM_attention, 1x1024_causal_h16, 1, 1024, true, MathMode::FP32, 16)->Apply(timed);
void BM_attention_tf32x3(benchmark::State& state, std::int64_t batch, std::int64_t t, bool causal,
                         std::int64_t heads = 12) {
  BM_attention(state, batch, t, causal, MathMode::TF32x3, heads);
}
BENCHMARK_CAPTURE(BM_attention_tf32x3, 8x128, 8, 128, false)->Apply(timed);
BENCHMARK_CAPTURE(BM_attention_tf32x3, 8x128_causal, 8, 128, true)->Apply(timed);
BENCHMARK_CAPTURE(BM_attention_tf32x3, 4x512, 4, 512, false)->Apply(timed);
BENCHMARK_CAPTURE(BM_attention_tf32x3, 4x512_causal, 4, 512, true)->Apply(timed);
BENCHMARK_CAPTURE(BM_attention_tf32x3, 1x1024_causal, 1, 1024, true)->Apply(timed);
BENCHMARK_CAPTURE(BM_attention_tf32x3, 1x1024_causal_h16, 1, 1024, true, 16)->Apply(timed);
BENCHMARK_CAPTURE(BM_transpose_copy, aligned, false)->Apply(timed);
BENCHMARK_CAPTURE(BM_transpose_copy, offset1, true)->Apply(timed);
BENCHMARK(BM_permute_021)->Apply(timed);

}  // namespace
}  // namespace mt

BENCHMARK_MAIN();
