// Source generation for fused elementwise groups, and their NVRTC compile + load with two caches.
#include "minitensor/graph/detail/codegen.h"

#include "minitensor/ops/functors_source.h"

#include <nvrtc.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace mt::detail {

std::uint64_t fnv1a64(const std::string& s, std::uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

namespace {

// A float literal that reproduces static_cast<float>(v) exactly (hex form; bit patterns for NaN and Inf).
std::string float_literal(double v) {
  const float f = static_cast<float>(v);
  if (std::isnan(f)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(f)) return f > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%af", static_cast<double>(f));
  return std::string("(") + buf + ")";
}

std::string value_name(int id) {
  return str("v", id);
}

}  // namespace

std::string fused_kernel_source(const Program& p, const Step& step) {
  const NodeData& root = p.g.at(step.root);
  const Shape& out_shape = root.shape;
  const std::int64_t n_out = out_shape.numel();
  std::ostringstream os;
  os << "// fused: ";
  for (int m : step.members) os << node_op_string(p.g.at(m)) << " ";
  os << "-> " << out_shape << "\n";
  os << "#include \"ops/functors.h\"\n";
  os << "extern \"C\" __global__ void " << kFusedKernelName << "(long long n";
  for (size_t j = 0; j < step.reads.size(); ++j) os << ", const float* in" << j;
  os << ", float* out) {\n";
  os << "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;"
        " i += (long long)gridDim.x * blockDim.x) {\n";
  // Broadcast reads: offsets from the output's multi-index (right-aligned shapes, stride 0 on size-1
  // extents).
  std::vector<size_t> bcast;
  for (size_t j = 0; j < step.reads.size(); ++j)
    if (p.g.at(step.reads[j]).shape.numel() != n_out) bcast.push_back(j);
  if (!bcast.empty()) {
    os << "    long long r_ = i;\n";
    for (size_t j : bcast) os << "    long long o" << j << " = 0;\n";
    const int rank = out_shape.rank();
    for (int d = rank - 1; d >= 0; --d) {
      std::string terms;
      for (size_t j : bcast) {
        const Shape& s = p.g.at(step.reads[j]).shape;
        const int dj = s.rank() - rank + d;
        if (dj < 0 || s[dj] == 1) continue;
        std::int64_t stride = 1;
        for (int e = dj + 1; e < s.rank(); ++e) stride *= s[e];
        terms += str(" o", j, " += c_ * ", stride, "LL;");
      }
      if (d == 0) {
        if (!terms.empty()) os << "    { const long long c_ = r_;" << terms << " }\n";
      } else {
        os << "    { const long long c_ = r_ % " << out_shape[d] << "LL; r_ /= " << out_shape[d] << "LL;"
           << terms << " }\n";
      }
    }
  }
  for (size_t j = 0; j < step.reads.size(); ++j) {
    const bool b = p.g.at(step.reads[j]).shape.numel() != n_out;
    os << "    const float " << value_name(step.reads[j]) << " = in" << j << "[" << (b ? str("o", j) : "i")
       << "];\n";
  }
  for (int m : step.members) {
    const NodeData& nd = p.g.at(m);
    os << "    const float " << value_name(m) << " = ";
    switch (nd.kind) {
      case OpKind::Unary:
        os << "mt::fn::" << op_name(nd.unary) << "(" << value_name(nd.inputs[0]) << ")";
        break;
      case OpKind::Binary:
        os << "mt::fn::" << op_name(nd.binary) << "(" << value_name(nd.inputs[0]) << ", "
           << value_name(nd.inputs[1]) << ")";
        break;
      case OpKind::BinaryScalar:
        os << "mt::fn::" << op_name(nd.binary) << "(" << value_name(nd.inputs[0]) << ", "
           << float_literal(nd.scalar) << ")";
        break;
      case OpKind::ScalarBinary:
        os << "mt::fn::" << op_name(nd.binary) << "(" << float_literal(nd.scalar) << ", "
           << value_name(nd.inputs[0]) << ")";
        break;
      case OpKind::Clamp:
        os << "mt::fn::clamp(" << value_name(nd.inputs[0]) << ", " << float_literal(nd.scalar) << ", "
           << float_literal(nd.scalar2) << ")";
        break;
      default:
        MT_THROW(InvalidArgument, "fused_kernel_source: ", node_op_string(nd), " is not elementwise");
    }
    os << ";\n";
  }
  os << "    out[i] = " << value_name(step.root) << ";\n  }\n}\n";
  return os.str();
}

// ---------------------------------------------------------------- NVRTC
namespace {

const std::string& functors_header() {
  static const std::string text = detail::kFunctorsSource;
  return text;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return str(major, ".", minor);
}

std::filesystem::path cache_directory(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* env = std::getenv("MT_KERNEL_CACHE_DIR"); env && *env) return env;
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::filesystem::path(home) / ".cache" / "minitensor" / "kernels";
  return std::filesystem::temp_directory_path() / "minitensor-kernels";
}

std::mutex g_cache_mutex;
std::unordered_map<std::uint64_t, std::shared_ptr<FusedKernel>>& memory_cache() {
  static auto* cache =
      new std::unordered_map<std::uint64_t, std::shared_ptr<FusedKernel>>();  // lives to exit
  return *cache;
}

std::shared_ptr<FusedKernel> load_cubin(const std::vector<char>& cubin, std::uint64_t hash,
                                        std::string& error) {
  cudaLibrary_t lib = nullptr;
  cudaError_t st = cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (st != cudaSuccess) {
    (void)cudaGetLastError();
    error = str("cudaLibraryLoadData: ", cudaGetErrorString(st));
    return nullptr;
  }
  cudaKernel_t k = nullptr;
  st = cudaLibraryGetKernel(&k, lib, kFusedKernelName);
  if (st != cudaSuccess) {
    (void)cudaGetLastError();
    error = str("cudaLibraryGetKernel: ", cudaGetErrorString(st));
    cudaLibraryUnload(lib);
    return nullptr;
  }
  return std::make_shared<FusedKernel>(lib, k, hash);
}

}  // namespace

bool nvrtc_compile(const std::string& source, int arch, std::vector<char>& cubin, std::string& log) {
  const std::string& header = functors_header();
  const char* headers[] = {header.c_str()};
  const char* names[] = {"ops/functors.h"};
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nvrtcCreateProgram(&prog, source.c_str(), "mt_fused.cu", 1, headers, names);
  if (r != NVRTC_SUCCESS) {
    log = str("nvrtcCreateProgram: ", nvrtcGetErrorString(r));
    return false;
  }
  const std::string arch_opt = str("--gpu-architecture=sm_", arch);
  // No FMA contraction: the fused kernel rounds like the unfused ops do, one op at a time.
  const char* opts[] = {arch_opt.c_str(), "--std=c++17", "--fmad=false", "-default-device"};
  r = nvrtcCompileProgram(prog, 4, opts);
  std::size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  std::string program_log(log_size, '\0');
  if (log_size) nvrtcGetProgramLog(prog, program_log.data());
  while (!program_log.empty() && program_log.back() == '\0') program_log.pop_back();
  bool ok = r == NVRTC_SUCCESS;
  if (ok) {
    std::size_t size = 0;
    ok = nvrtcGetCUBINSize(prog, &size) == NVRTC_SUCCESS;
    cubin.resize(size);
    ok = ok && nvrtcGetCUBIN(prog, cubin.data()) == NVRTC_SUCCESS;
  }
  if (!ok) log = str(nvrtcGetErrorString(r), "\n", program_log);
  nvrtcDestroyProgram(&prog);
  return ok;
}

FusedKernel::~FusedKernel() {
  if (m_library) MT_CUDA_CHECK_NOTHROW(cudaLibraryUnload(m_library));
}

void FusedKernel::launch(std::int64_t n, const std::vector<const void*>& ins, void* out,
                         cudaStream_t stream) const {
  if (n <= 0) return;
  long long nn = n;
  std::vector<void*> args;
  args.reserve(ins.size() + 2);
  args.push_back(&nn);
  std::vector<const void*> ptrs = ins;
  for (auto& p : ptrs) args.push_back(&p);
  args.push_back(&out);
  constexpr int kThreads = 256;
  // Grid-stride: up to 8 resident 256-thread blocks per SM (enough to saturate bandwidth on sm_80/90).
  static const int max_blocks = [] {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return std::max(1, sms) * 8;
  }();
  const std::int64_t want = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<std::int64_t>(want, max_blocks));
  MT_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(m_kernel), dim3(blocks), dim3(kThreads),
                                 args.data(), 0, stream));
  MT_CUDA_CHECK_LAUNCH();
}

namespace {
std::atomic<bool> g_nvrtc_fault_injection{false};
}  // namespace

void set_nvrtc_fault_injection(bool on) {
  g_nvrtc_fault_injection.store(on);
}

bool nvrtc_fault_injection() {
  return g_nvrtc_fault_injection.load();
}

CompileResult compile_fused_kernel(const std::string& source_in, int arch, const std::string& cache_dir,
                                   bool inject_error) {
  CompileResult res;
  const std::string source = inject_error ? source_in + "\n#error \"injected NVRTC failure\"\n" : source_in;
  const std::uint64_t hash =
      fnv1a64(source + "|sm_" + std::to_string(arch) + "|nvrtc " + nvrtc_version() + "|" + functors_header());
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    auto it = memory_cache().find(hash);
    if (it != memory_cache().end()) {
      res.kernel = it->second;
      res.from_memory = true;
      return res;
    }
  }
  char hex[32];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  const std::filesystem::path dir = cache_directory(cache_dir);
  const std::filesystem::path file = dir / str("fused_", hex, "_sm", arch, ".cubin");
  std::vector<char> cubin;
  {
    std::ifstream f(file, std::ios::binary);
    if (f) {
      cubin.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
      res.from_disk = !cubin.empty();
    }
  }
  if (!res.from_disk) {
    if (!nvrtc_compile(source, arch, cubin, res.error)) return res;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (!ec) {  // write-then-rename: a concurrent reader never sees half a file
      const std::filesystem::path tmp = file.string() + str(".tmp", std::rand());
      {
        std::ofstream f(tmp, std::ios::binary);
        f.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
      }
      std::filesystem::rename(tmp, file, ec);
      if (ec) std::filesystem::remove(tmp, ec);
    }
  }
  res.kernel = load_cubin(cubin, hash, res.error);
  if (!res.kernel && res.from_disk) {  // a stale or damaged cache file: compile afresh
    res.from_disk = false;
    if (!nvrtc_compile(source, arch, cubin, res.error)) return res;
    res.kernel = load_cubin(cubin, hash, res.error);
  }
  if (res.kernel) {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    memory_cache().emplace(hash, res.kernel);
  }
  return res;
}

}  // namespace mt::detail
