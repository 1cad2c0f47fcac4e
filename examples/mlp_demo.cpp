// mlp_demo: build a 2-layer MLP with softmax as a graph and run it. On a CUDA GPU: check it against the Eigen
// reference node by node, time it in every executor mode, print the compiled plan (fusion, streams, memory
// plan) and write a Chrome trace of a profiled run. Without one: run it on the CPU (Eigen reference ops) with
// wall-clock timings and a Chrome trace of the eager ops. Either way the graph goes to a Graphviz file (and a
// PNG where `dot` is installed).
//
// With --model block: a GPT-2 style transformer block (graph/models.h) of --batch sequences of --tokens, width
// --hidden and --heads heads, with its check table against the Eigen reference and its time in fp32 and
// 3xTF32 next to the eager ops'.
//
// With --gpus N: the tensor-parallel (Megatron) MLP y = gelu(x W1 + b1) W2 + b2 (FFN 4 x hidden) on N GPUs of
// this process, one thread per rank, with each rank's check table against the unsplit MLP on the CPU and its
// time next to the single-GPU executor's.
//
//   mlp_demo [--batch N] [--hidden N] [--out-dir DIR] [--trace PATH] [--dot PATH] [--cpu] [--gpus N]
//            [--model mlp|block] [--tokens N] [--heads N]
//   mlp_demo [batch] [hidden] [trace.json]          (the positional form)
//
// Exit status: 0 ok, 1 runtime error, 2 usage error, 3 the check against the Eigen reference failed.

#include <algorithm>
#include <barrier>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "minitensor/graph/graph.h"
#include "minitensor/graph/parallel.h"
#include "minitensor/minitensor.h"

using namespace mt;

namespace {

// Bounds keep the two weights and the activations within a few GiB (hidden^2 and batch x hidden floats).
constexpr std::int64_t kMaxBatch = std::int64_t(1) << 20;
constexpr std::int64_t kMaxHidden = 16384;
constexpr std::int64_t kMaxActivations = std::int64_t(1) << 28;
constexpr std::int64_t kMaxGpus = 64;
constexpr std::int64_t kMaxTokens = 1 << 16;

constexpr const char* kSynopsis =
    "usage: mlp_demo [--batch N] [--hidden N] [--out-dir DIR] [--trace PATH] [--dot PATH] [--cpu] "
    "[--gpus N]\n"
    "                [--model mlp|block] [--tokens N] [--heads N]\n"
    "       mlp_demo [batch] [hidden] [trace.json]\n";
constexpr const char* kOptions =
    "\n"
    "Builds y = softmax(relu(x W1 + b1) W2 + b2) as a graph and runs it on the GPU (or on the CPU when "
    "there\n"
    "is no CUDA device), with timings, the executor's plan, a Chrome trace and a Graphviz drawing.\n"
    "\n"
    "  --batch N      rows of x (default 256, at most 1048576)\n"
    "  --hidden N     width of both layers (default 1024, at most 16384; batch x hidden at most 2^28)\n"
    "  --out-dir DIR  where mt_trace.json and mt_graph.dot (and mt_graph.png) go (default: .)\n"
    "  --trace PATH   the Chrome trace (default DIR/mt_trace.json; open in https://ui.perfetto.dev)\n"
    "  --dot PATH     the graph in Graphviz DOT (default DIR/mt_graph.dot; a PNG beside it if `dot` exists)\n"
    "  --cpu          run on the CPU even when a CUDA device is present\n"
    "  --gpus N       the tensor-parallel MLP (FFN 4 x hidden, GELU) on the first N GPUs, with each rank's\n"
    "                 check against the unsplit MLP and the time next to one GPU's (N divides 4 x hidden)\n"
    "  --model M      mlp (the default) or block: a GPT-2 style transformer block of --batch sequences\n"
    "                 (default 8) of --tokens (default 128), width --hidden (default 768) and --heads\n"
    "                 (default hidden / 64), checked against the Eigen reference and timed\n"
    "  --tokens N     tokens per sequence of the block (at most 65536)\n"
    "  --heads N      attention heads of the block (they divide --hidden)\n"
    "  -h, --help     this text\n"
    "\n"
    "Exit status: 0 ok, 1 runtime error, 2 usage error, 3 the check against the Eigen reference failed.\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::int64_t batch = 256, hidden = 1024;
  std::string out_dir = ".", trace, dot;
  std::int64_t gpus = 0;  // 0: the single-device demo
  bool cpu = false, help = false;
  bool block = false;  // --model block
  std::int64_t tokens = 128, heads = 0;  // the block's; heads 0: hidden / 64
  bool batch_given = false, hidden_given = false;
};

std::int64_t parse_count(std::string_view what, std::string_view text, std::int64_t max) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range)
    throw UsageError(std::string(what) + " '" + std::string(text) + "' is too large (at most " +
                     std::to_string(max) + ")");
  if (ec != std::errc() || end != text.data() + text.size())
    throw UsageError(std::string(what) + " '" + std::string(text) + "' is not a whole number");
  if (v <= 0) throw UsageError(std::string(what) + " must be at least 1, got " + std::string(text));
  if (v > max)
    throw UsageError(std::string(what) + " " + std::string(text) + " is too large (at most " +
                     std::to_string(max) + ")");
  return v;
}

// Named options (--name VALUE or --name=VALUE; the last one given wins) and up to three positionals.
Args parse_args(int argc, char** argv) {
  Args a;
  int n_positional = 0;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    const bool numeric =
        arg.size() > 1 && arg[0] == '-' && (std::isdigit(static_cast<unsigned char>(arg[1])));
    if (arg.starts_with("-") && !numeric) {
      std::string_view name = arg, value;
      bool has_value = false;
      if (const size_t eq = arg.find('='); eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        has_value = true;
      }
      auto take_value = [&]() -> std::string_view {
        if (has_value) return value;
        if (i + 1 >= argc) throw UsageError(std::string(name) + " needs a value");
        return argv[++i];
      };
      if (name == "-h" || name == "--help") {
        a.help = true;
      } else if (name == "--cpu") {
        a.cpu = true;
      } else if (name == "--batch") {
        a.batch = parse_count("--batch", take_value(), kMaxBatch);
        a.batch_given = true;
      } else if (name == "--model") {
        const std::string_view v = take_value();
        if (v != "mlp" && v != "block")
          throw UsageError("--model must be mlp or block, got '" + std::string(v) + "'");
        a.block = v == "block";
      } else if (name == "--tokens") {
        a.tokens = parse_count("--tokens", take_value(), kMaxTokens);
      } else if (name == "--heads") {
        a.heads = parse_count("--heads", take_value(), kMaxHidden);
      } else if (name == "--gpus") {
        a.gpus = parse_count("--gpus", take_value(), kMaxGpus);
      } else if (name == "--hidden") {
        a.hidden = parse_count("--hidden", take_value(), kMaxHidden);
        a.hidden_given = true;
      } else if (name == "--out-dir" || name == "--trace" || name == "--dot") {
        const std::string_view v = take_value();
        if (v.empty()) throw UsageError(std::string(name) + " needs a non-empty value");
        (name == "--out-dir" ? a.out_dir : name == "--trace" ? a.trace : a.dot) = std::string(v);
      } else {
        throw UsageError("unknown option '" + std::string(arg) + "'");
      }
      continue;
    }
    switch (n_positional++) {
      case 0:
        a.batch = parse_count("batch", arg, kMaxBatch);
        a.batch_given = true;
        break;
      case 1:
        a.hidden = parse_count("hidden", arg, kMaxHidden);
        a.hidden_given = true;
        break;
      case 2:
        if (arg.empty()) throw UsageError("the trace path is empty");
        a.trace = std::string(arg);
        break;
      default:
        throw UsageError("unexpected argument '" + std::string(arg) + "'");
    }
  }
  if (a.block) {
    if (!a.batch_given) a.batch = 8;
    if (!a.hidden_given) a.hidden = 768;
    if (a.heads == 0) a.heads = std::max<std::int64_t>(1, a.hidden / 64);
    if (a.gpus > 0) throw UsageError("--gpus runs the tensor-parallel MLP; --model block runs on one device");
    if (a.hidden % a.heads != 0)
      throw UsageError("--heads " + std::to_string(a.heads) + " does not divide --hidden " +
                       std::to_string(a.hidden));
    // The block's widest activation is its FFN's: rows x 4 hidden.
    if (a.batch * a.tokens * 4 * a.hidden > kMaxActivations)
      throw UsageError("batch x tokens x 4 hidden = " + std::to_string(a.batch * a.tokens * 4 * a.hidden) +
                       " is too large (at most " + std::to_string(kMaxActivations) + ")");
  }
  if (a.batch * a.hidden > kMaxActivations)
    throw UsageError("batch x hidden = " + std::to_string(a.batch * a.hidden) + " is too large (at most " +
                     std::to_string(kMaxActivations) + ")");
  if (a.gpus > 0 && a.cpu) throw UsageError("--gpus and --cpu exclude each other");
  if (a.gpus > 0 && (4 * a.hidden) % a.gpus != 0)
    throw UsageError("--gpus " + std::to_string(a.gpus) + " does not divide the FFN width 4 x " +
                     std::to_string(a.hidden));
  const std::filesystem::path dir = a.out_dir;
  if (a.trace.empty()) a.trace = (dir / "mt_trace.json").string();
  if (a.dot.empty()) a.dot = (dir / "mt_graph.dot").string();
  return a;
}

// Why there is no CUDA device, in words (cuda_unavailable_reason: no driver at all, an old driver, no GPU).
std::string no_gpu_reason() {
  return "no CUDA device (" + cuda_unavailable_reason() + "): running on the CPU";
}

Tensor uniform(const Shape& s, std::uint64_t seed, double lo, double hi) {
  std::vector<float> v = rand(s, seed).to_vector<float>();
  for (float& f : v) f = static_cast<float>(lo + (hi - lo) * f);
  return from_vector(v, s);
}

ExecOptions on(Device device, dist::Communicator* comm = nullptr) {
  ExecOptions o;
  o.device = device;
  o.comm = comm;
  return o;
}

double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

// Best per-run microseconds over 5 batches of `reps` runs (warm-up first; synchronised on a GPU).
template <class F>
double us_per_run(F&& fn, Device d, int reps) {
  for (int i = 0; i < 3; ++i) fn();
  synchronize(d);
  double best = 1e300;
  for (int k = 0; k < 5; ++k) {
    const double t0 = now_us();
    for (int i = 0; i < reps; ++i) fn();
    synchronize(d);
    best = std::min(best, (now_us() - t0) / reps);
  }
  return best;
}

// One wall-clock event of the CPU trace.
struct CpuEvent {
  std::string name, track;
  double start_us, duration_us;
};

// Chrome trace JSON (the format Executor::write_trace writes), for the CPU path's wall-clock events.
void write_cpu_trace(const std::string& path, const std::vector<CpuEvent>& events) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot open '" + path + "' for writing");
  double t0 = events.empty() ? 0 : events.front().start_us;
  for (const CpuEvent& e : events) t0 = std::min(t0, e.start_us);
  std::vector<std::string> tracks;
  for (const CpuEvent& e : events)
    if (std::find(tracks.begin(), tracks.end(), e.track) == tracks.end()) tracks.push_back(e.track);
  f << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
    << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"minitensor cpu (wall "
       "clock)\"}}";
  for (size_t t = 0; t < tracks.size(); ++t)
    f << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" << t << ",\"args\":{\"name\":\""
      << tracks[t] << "\"}}";
  for (const CpuEvent& e : events) {
    const auto tid = std::find(tracks.begin(), tracks.end(), e.track) - tracks.begin();
    char num[96];
    std::snprintf(num, sizeof num, "\"ts\":%.3f,\"dur\":%.3f", e.start_us - t0, e.duration_us);
    f << ",\n{\"name\":\"" << e.name << "\",\"cat\":\"cpu\",\"ph\":\"X\",\"pid\":0,\"tid\":" << tid << ","
      << num << "}";
  }
  f << "\n]}\n";
}

// The graph as DOT, and as PNG where Graphviz is installed.
void write_graph(const Graph& g, const std::string& dot_path) {
  {
    std::ofstream f(dot_path);
    if (!f) throw std::runtime_error("cannot open '" + dot_path + "' for writing");
    f << g.to_dot();
  }
  std::cout << "graph written to " << dot_path;
  const std::string png = std::filesystem::path(dot_path).replace_extension(".png").string();
  auto quoted = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  if (std::system("command -v dot >/dev/null 2>&1") == 0 &&
      std::system(("dot -Tpng " + quoted(dot_path) + " -o " + quoted(png)).c_str()) == 0)
    std::cout << " and " << png << "\n";
  else
    std::cout << " (install Graphviz for a PNG: dot -Tpng " << dot_path << " -o " << png << ")\n";
}

double row0_sum(const Tensor& y, std::int64_t hidden) {
  const std::vector<float> v = y.cpu().to_vector<float>();
  double s = 0;
  for (std::int64_t j = 0; j < hidden; ++j) s += v[static_cast<size_t>(j)];
  return s;
}

// On a GPU: prints the compiled plan and the check against the Eigen reference, then the timing's heading.
CheckReport plan_and_check(const Graph& g, const Tensor& x_host, const ExecOptions& options) {
  std::cout << "\n== compiled plan\n" << Executor(g, options).summary() << "\n";
  std::cout << "== check against the Eigen reference (per node, then end to end)\n";
  CheckReport report = check(g, {{"x", x_host}}, options);
  std::cout << report << "\n";
  std::cout << "== timing (us per run, " << device_properties(0).name << ")\n";
  return report;
}

// --model block: the GPT-2 style transformer block on one device. Returns the exit status.
int run_block(const Args& args) {
  const std::int64_t b = args.batch, t = args.tokens, d = args.hidden, rows = b * t;
  const BlockShape shape{.batch = b, .tokens = t, .heads = args.heads};
  const bool gpu = !args.cpu && cuda_available();
  const Device device = gpu ? Device::cuda(0) : Device::cpu();
  std::cout << "== devices\n"
            << (gpu ? device_report() : (args.cpu ? std::string("--cpu: running on the CPU") : no_gpu_reason()))
            << "\n\n== transformer block (GPT-2 style): " << b << " x " << t << " tokens, d " << d << ", "
            << shape.heads << " heads, FFN " << 4 * d << ", pre-LayerNorm, causal attention, GELU-tanh\n";
  const BlockWeights w = random_block_weights(d);
  const std::filesystem::path dot_dir = std::filesystem::path(args.dot).parent_path();
  if (!dot_dir.empty()) std::filesystem::create_directories(dot_dir);
  Graph g;
  g.output("y", transformer_block(g, g.input("x", {rows, d}), shape, w));
  write_graph(g, args.dot);
  const Tensor x_host = uniform({rows, d}, 1, -1, 1);
  ExecOptions base;
  base.device = device;
  const int reps = std::clamp(static_cast<int>(2e9 / (24.0 * double(rows) * double(d) * double(d))), 1, 100);
  if (!gpu) {
    Executor exec(g, base);
    const TensorMap in = {{"x", x_host}};
    const Tensor y = exec.run(in).at("y");
    const Tensor y_eager = transformer_block(x_host, shape, w);
    const double diff = mt::max(abs(y - y_eager)).item<float>();
    std::cout << "\n== timing (wall clock, us per run, CPU)\n";
    std::printf("%-34s %12.1f\n", "executor (Eigen reference)", us_per_run([&] { (void)exec.run(in); }, device, reps));
    std::printf("%-34s %12.1f\n", "eager ops",
                us_per_run([&] { (void)transformer_block(x_host, shape, w); }, device, reps));
    std::cout << "\nexecutor vs eager ops: max abs difference " << diff
              << "\nGPU numbers (fused kernels, CUDA graphs, 3xTF32): run this demo on a machine with a CUDA GPU.\n";
    return diff < 1e-4 ? 0 : 3;
  }
  const CheckReport report = plan_and_check(g, x_host, base);
  const TensorMap in = {{"x", x_host.cuda()}};
  const BlockWeights wd = random_block_weights(d, 100, device);
  const Tensor xd = in.at("x");
  std::printf("%-34s %10s %9s\n", "mode", "us/run", "launches");
  std::printf("%-34s %10.1f %9s\n", "eager ops",
              us_per_run([&] { (void)transformer_block(xd, shape, wd); }, device, reps), "-");
  for (MathMode math : {MathMode::FP32, MathMode::TF32x3}) {
    ExecOptions o = base;
    o.compile.math = math;
    Executor ex(g, o);
    const double us = us_per_run([&] { (void)ex.run(in); }, device, reps);
    std::printf("%-34s %10.1f %9d\n",
                (std::string("executor + CUDA graph, ") + math_mode_name(math)).c_str(), us, ex.n_launches());
  }
  std::cout << "PyTorch beside it: bench_graph's Block rows and bench/graph/torch_block.py (bench/graph/DESIGN.md)\n";
  return report.ok ? 0 : 3;
}

// --gpus N: the Megatron MLP on N GPUs, one thread per rank. Returns the exit status.
int run_tensor_parallel(const Args& args) {
  const int n = static_cast<int>(args.gpus);
  const int found = cuda_available() ? cuda_device_count() : 0;
  if (found < n) {
    std::cerr << "mlp_demo: --gpus " << n << " needs " << n << " CUDA devices, but "
              << (found == 0 ? "there is none (" + cuda_unavailable_reason() + ")"
                             : "only " + std::to_string(found) + " are present (try --gpus " +
                                   std::to_string(found) + ")")
              << "\n";
    return 1;
  }
  const std::int64_t batch = args.batch, d = args.hidden, ffn = 4 * args.hidden;
  std::cout << "== tensor-parallel MLP on " << n << " GPU(s): x (" << batch << ", " << d << "), W1 (" << d
            << ", " << ffn << ") split by columns, W2 (" << ffn << ", " << d
            << ") split by rows, one all-reduce per chunk\n";
  MlpWeights w;
  w.w1 = uniform({d, ffn}, 2, -1 / std::sqrt(double(d)), 1 / std::sqrt(double(d)));
  w.b1 = uniform({ffn}, 3, -0.1, 0.1);
  w.w2 = uniform({ffn, d}, 4, -1 / std::sqrt(double(ffn)), 1 / std::sqrt(double(ffn)));
  w.b2 = uniform({d}, 5, -0.1, 0.1);
  const Tensor x = uniform({batch, d}, 1, -1, 1);
  Graph ref;
  ref.output("y", mlp(ref, ref.input("x", {batch, d}), w));
  const int reps = d >= 4096 ? 5 : 50;
  double one_us = 0;
  {
    Executor one(ref, on(Device::cuda(0)));
    const Tensor x0 = x.cuda(0);
    one_us = us_per_run([&] { (void)one.run({{"x", x0}}); }, Device::cuda(0), reps);
  }
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) devices.push_back(r);
  std::vector<dist::Communicator> comms = dist::Communicator::local(devices);
  // One chunk: splitting the tokens to overlap the all-reduce costs more GEMM rate than it hides at the sizes
  // a demo runs (bench/dist/DESIGN.md, chunks).
  const int chunks = 1;
  std::vector<std::string> tables(static_cast<size_t>(n));
  std::vector<double> us(static_cast<size_t>(n));
  std::vector<char> ok(static_cast<size_t>(n), 0);
  std::vector<std::string> errors(static_cast<size_t>(n));
  // The ranks meet between checking and timing, so that no rank builds while a peer's collectives run
  // (graph/parallel.h: one process driving several GPUs).
  std::barrier<> meet(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        DeviceGuard guard(r);
        Graph g;
        g.set_world_size(n);
        g.output("y", megatron_mlp(g, g.input("x", {batch, d}), w, r, {.chunks = chunks}));
        const ExecOptions o = on(Device::cuda(r), &comms[static_cast<size_t>(r)]);
        const Tensor xr = x.cuda(r);
        const CheckReport report = check_parallel(g, {{"x", xr}}, ref, {{"x", x}}, o);
        tables[static_cast<size_t>(r)] = report.table();
        ok[static_cast<size_t>(r)] = report.ok;
        Executor exec(g, o);
        meet.arrive_and_wait();
        us[static_cast<size_t>(r)] = us_per_run([&] { (void)exec.run({{"x", xr}}); }, Device::cuda(r), reps);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        meet.arrive_and_drop();
      }
    });
  }
  for (auto& t : threads) t.join();
  bool all_ok = true;
  for (int r = 0; r < n; ++r) {
    if (!errors[static_cast<size_t>(r)].empty()) {
      std::cerr << "mlp_demo: rank " << r << ": " << errors[static_cast<size_t>(r)] << "\n";
      return 1;
    }
    std::cout << "\n== rank " << r << " (cuda:" << r << ") against the unsplit MLP on the CPU\n"
              << tables[static_cast<size_t>(r)];
    all_ok = all_ok && ok[static_cast<size_t>(r)];
  }
  const double tn = *std::max_element(us.begin(), us.end());
  std::cout << "\n== timing (us per run, " << device_properties(0).name << ", chunks " << chunks << ")\n";
  std::printf("%-34s %12.1f\n", "1 GPU, unsplit MLP", one_us);
  std::printf("%-34s %12.1f   speed-up %.2fx, efficiency %.2f\n",
              (std::to_string(n) + " GPU(s), tensor parallel").c_str(), tn, one_us / tn, one_us / (n * tn));
  return all_ok ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "mlp_demo: " << e.what() << "\n" << kSynopsis << "(mlp_demo --help for the options)\n";
    return 2;
  }
  if (args.help) {
    std::cout << kSynopsis << kOptions;
    return 0;
  }
  const std::int64_t batch = args.batch, hidden = args.hidden;
  if (args.block) {
    try {
      return run_block(args);
    } catch (const std::exception& e) {
      std::cerr << "mlp_demo: " << e.what() << "\n";
      return 1;
    }
  }
  if (args.gpus > 0) {
    try {
      return run_tensor_parallel(args);
    } catch (const std::exception& e) {
      std::cerr << "mlp_demo: " << e.what() << "\n";
      return 1;
    }
  }
  try {
    for (const std::string& p : {args.trace, args.dot}) {
      const std::filesystem::path parent = std::filesystem::path(p).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
    }
    const bool gpu = !args.cpu && cuda_available();
    const Device device = gpu ? Device::cuda(0) : Device::cpu();
    std::cout << "== devices\n";
    if (gpu)
      std::cout << device_report() << "\n";
    else
      std::cout << (args.cpu ? std::string("--cpu: running on the CPU") : no_gpu_reason())
                << " (Eigen reference ops; no fusion, CUDA graphs or memory plan: those are the GPU "
                   "executor's)\n\n";

    // y = softmax(relu(x W1 + b1) W2 + b2), the softmax spelled out so the compiler has a pattern to find.
    const double s = 1.0 / std::sqrt(static_cast<double>(hidden));
    Graph g;
    auto x = g.input("x", {batch, hidden});
    const Tensor W1 = uniform({hidden, hidden}, 2, -s, s), B1 = uniform({hidden}, 3, -0.1, 0.1);
    const Tensor W2 = uniform({hidden, hidden}, 4, -s, s), B2 = uniform({hidden}, 5, -0.1, 0.1);
    auto w1 = g.parameter("w1", W1);
    auto b1 = g.parameter("b1", B1);
    auto w2 = g.parameter("w2", W2);
    auto b2 = g.parameter("b2", B2);
    auto h = g.relu(g.matmul(x, w1) + b1).named("hidden");
    auto logits = (g.matmul(h, w2) + b2).named("logits");
    auto e = g.exp(logits - g.max(logits, -1, true)).named("e");
    g.output("y", (e / g.sum(e, -1, true)).named("probs"));
    std::cout << "== graph (" << batch << " x " << hidden << ")\n" << g.dump() << "\n";
    write_graph(g, args.dot);

    const Tensor x_host = uniform({batch, hidden}, 1, -1, 1);
    ExecOptions base;
    base.device = device;

    if (!gpu) {
      std::cout
          << "\n== plan\nthe CPU path evaluates the graph's nodes one by one, in order, through the Eigen "
             "reference ops; a GPU run prints the compiled plan here (fused steps, streams, memory "
             "arena)\n";
      Executor exec(g, base);
      const TensorMap in = {{"x", x_host}};
      // Repetitions for about a second of work, from one timed run.
      const double t_one = now_us();
      const Tensor y = exec.run(in).at("y");
      const int reps = std::clamp(static_cast<int>(2e5 / std::max(now_us() - t_one, 1.0)), 1, 100);

      std::cout << "\n== timing (wall clock, us per run, CPU)\n";
      std::printf("%-34s %12s\n", "mode", "us/run");
      const double exec_us = us_per_run([&] { (void)exec.run(in); }, device, reps);
      const double eager_us = us_per_run(
          [&] { (void)softmax(matmul(relu(matmul(x_host, W1) + B1), W2) + B2, -1); }, device, reps);
      std::printf("%-34s %12.1f\n", "executor (Eigen reference)", exec_us);
      std::printf("%-34s %12.1f\n", "eager ops", eager_us);

      // One traced run of each: the eager ops one by one, then the executor's run as a whole.
      std::vector<CpuEvent> events;
      auto timed = [&](const std::string& name, const std::string& track, const std::function<Tensor()>& f) {
        const double t0 = now_us();
        Tensor t = f();
        events.push_back({name, track, t0, now_us() - t0});
        return t;
      };
      const Tensor z1 = timed("matmul x W1", "eager ops", [&] { return matmul(x_host, W1); });
      const Tensor a1 = timed("add b1", "eager ops", [&] { return z1 + B1; });
      const Tensor r1 = timed("relu", "eager ops", [&] { return relu(a1); });
      const Tensor z2 = timed("matmul h W2", "eager ops", [&] { return matmul(r1, W2); });
      const Tensor a2 = timed("add b2", "eager ops", [&] { return z2 + B2; });
      const Tensor y_eager = timed("softmax", "eager ops", [&] { return softmax(a2, -1); });
      (void)timed("Executor::run (Eigen reference)", "executor", [&] { return exec.run(in).at("y"); });
      write_cpu_trace(args.trace, events);

      const double r0 = row0_sum(y, hidden);
      const Tensor diff = abs(y - y_eager);
      const double max_diff = mt::max(diff).cpu().to_vector<float>()[0];
      std::cout << "\nsoftmax row 0 sums to " << r0 << "; executor vs eager ops: max abs difference "
                << max_diff << "\n";
      std::cout << "trace written to " << args.trace
                << " (wall clock; open in https://ui.perfetto.dev or chrome://tracing)\n";
      std::cout << "\nGPU numbers: run this demo on a machine with a CUDA GPU (it then times every executor "
                   "mode and traces the kernels); `bash scripts/gpu_check.sh` there runs the tests and the "
                   "full benchmarks.\n";
      return std::fabs(r0 - 1.0) < 1e-3 && max_diff < 1e-5 ? 0 : 3;
    }

    const CheckReport report = plan_and_check(g, x_host, base);
    const Tensor x_dev = x_host.cuda();
    const TensorMap in = {{"x", x_dev}};
    const Tensor w1d = W1.cuda(), b1d = B1.cuda(), w2d = W2.cuda(), b2d = B2.cuda();
    const int reps = hidden >= 4096 ? 5 : 100;
    struct Mode {
      const char* name;
      ExecOptions o;
    };
    ExecOptions unfused = base, fused = base, graphed = base, graphed_x3 = base;
    graphed_x3.compile.math = MathMode::TF32x3;
    unfused.compile.fuse_elementwise = unfused.compile.fuse_gemm_epilogue = unfused.compile.fuse_softmax =
        false;
    unfused.run.cuda_graph = fused.run.cuda_graph = false;
    std::printf("%-34s %10s %9s\n", "mode", "us/run", "launches");
    const double eager_us = us_per_run(
        [&] { (void)softmax(matmul(relu(matmul(x_dev, w1d) + b1d), w2d) + b2d, -1); }, device, reps);
    std::printf("%-34s %10.1f %9d\n", "eager ops", eager_us, 6);
    for (const Mode& m :
         {Mode{"executor, no fusion", unfused}, Mode{"executor, fused", fused},
          Mode{"executor, fused + CUDA graph", graphed}, Mode{"  ... with TF32x3 GEMMs", graphed_x3}}) {
      Executor ex(g, m.o);
      const double us = us_per_run([&] { (void)ex.run(in); }, device, reps);
      std::printf("%-34s %10.1f %9d\n", m.name, us, ex.n_launches());
    }

    std::cout << "\n== profile (one run, per-step device time)\n";
    ExecOptions prof = base;
    prof.run.profile = true;
    Executor profiled(g, prof);
    profiled.run({{"x", x_host}});  // a host input: the trace shows its copy
    profiled.run({{"x", x_host}});
    std::cout << profiled.profile_table();
    profiled.write_trace(args.trace);
    std::cout << "trace written to " << args.trace
              << " (open in https://ui.perfetto.dev or chrome://tracing)\n";
    std::cout
        << "full benchmarks: bash scripts/gpu_check.sh (then python3 scripts/plot_bench.py out/gpu_check)\n";
    return report.ok ? 0 : 3;
  } catch (const std::exception& e) {
    std::cerr << "mlp_demo: " << e.what() << "\n";
    return 1;
  }
}
