// Source generation for fused elementwise groups, and their NVRTC compile + load with two caches.
#include "minitensor/graph/detail/codegen.h"

#include "minitensor/ops/functors_source.h"
#include "minitensor/runtime/launch.h"

#include <nvrtc.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
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

// Node nd's value from its inputs' values (value_name), through the functors every elementwise kernel uses.
std::string elementwise_expr(const NodeData& nd) {
  switch (nd.kind) {
    case OpKind::Unary:
      return str("mt::fn::", op_name(nd.unary), "(", value_name(nd.inputs[0]), ")");
    case OpKind::Binary:
      return str("mt::fn::", op_name(nd.binary), "(", value_name(nd.inputs[0]), ", ",
                 value_name(nd.inputs[1]), ")");
    case OpKind::BinaryScalar:
      return str("mt::fn::", op_name(nd.binary), "(", value_name(nd.inputs[0]), ", ",
                 float_literal(nd.scalar), ")");
    case OpKind::ScalarBinary:
      return str("mt::fn::", op_name(nd.binary), "(", float_literal(nd.scalar), ", ",
                 value_name(nd.inputs[0]), ")");
    case OpKind::Clamp:
      return str("mt::fn::clamp(", value_name(nd.inputs[0]), ", ", float_literal(nd.scalar), ", ",
                 float_literal(nd.scalar2), ")");
    default:
      MT_THROW(InvalidArgument, "fused_kernel_source: ", node_op_string(nd), " is not elementwise");
  }
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
  for (int m : step.members)
    os << "    const float " << value_name(m) << " = " << elementwise_expr(p.g.at(m)) << ";\n";
  os << "    out[i] = " << value_name(step.root) << ";\n  }\n}\n";
  return os.str();
}

// ---------------------------------------------------------------- row groups
//
// One row per `threads` threads (RowPlan), rows_per_block rows per block. The kernel
// 1. loads the row's part of every read that varies along the row into registers (float4 where aligned),
//    and every per-row read once;
// 2. computes the per-row values in topological order: a reduction is a pass over the thread's cached
//    elements, evaluating the elementwise members between the cached reads and the reduction's input at each
//    element (inline, from registers), folding them, then a warp butterfly and, for rows wider than a warp, a
//    shared-memory exchange between the row's warps; an elementwise member of one value per row is computed
//    once;
// 3. evaluates the root: per element from the registers and the per-row values (written with float4 stores
//    where aligned), or once per row (a per-row root, written by the row's first thread).
// Every thread of a row ends each pass with the same value (IEEE addition is commutative, so both halves of a
// butterfly exchange compute the same sum; the warps' partials are folded in one fixed order), so each row
// is reduced deterministically. Sums and means accumulate in float64 and round once, max and min fold with
// fn::max_combine / fn::min_combine (NaN wins, then the larger; -0 < +0): the reduce kernels' rules.
//
// Napkin maths per row of len elements: 4 * len bytes read per varying read (once: the passes re-read
// registers, never memory), 4 bytes per per-row read, 4 * len bytes written (4 for a per-row root). LayerNorm
// from primitives (x, weight, bias): 12 * len bytes against the ~40 * len of its six unfused steps.
std::string row_kernel_source(const Program& p, const Step& step) {
  const RowPlan& rp = step.rows;
  MT_CHECK(step.kind == Step::Kind::Rows && rp.read_varies.size() == step.reads.size() &&
               rp.read_cached.size() == step.reads.size(),
           InvalidArgument, "row_kernel_source: step at ", p.node_label(step.root),
           " is not a planned row group");
  const NodeData& root = p.g.at(step.root);
  const Shape& r = rp.row_shape;
  const int k_rows = r.rank() - 1;  // the row index's dims: r[0 .. k_rows)
  const int n_warps = rp.threads / 32;
  std::ostringstream os;
  os << "// row fusion: ";
  for (int m : step.members) os << node_op_string(p.g.at(m)) << " ";
  os << "-> " << root.shape << "; " << rp.n_rows << " rows of " << rp.len << ", " << rp.threads
     << " threads a row, " << rp.rows_per_block << " rows a block, " << rp.slots << " slots of " << rp.width
     << "\n";
  os << "#include \"ops/functors.h\"\n";
  os << "extern \"C\" __global__ void __launch_bounds__(" << rp.threads * rp.rows_per_block << ") "
     << kFusedKernelName << "(long long n_rows";
  for (size_t j = 0; j < step.reads.size(); ++j) os << ", const float* in" << j;
  os << ", float* out, int vec) {\n";
  os << "  constexpr int L = " << rp.len << ", T = " << rp.threads << ", W = " << rp.width
     << ", E = " << rp.slots << ";\n";
  os << "  const int tid = threadIdx.x % T, sub_ = threadIdx.x / T;\n";
  os << "  const long long row_ = (long long)blockIdx.x * " << rp.rows_per_block << " + sub_;\n";
  os << "  const bool live_ = row_ < n_rows;\n";
  // Threads past the last row compute the last row again and write nothing: they still meet every barrier.
  os << "  const long long row = live_ ? row_ : n_rows - 1;\n";
  os << "  (void)vec; (void)tid;\n";

  // Read offsets: the element offset of (row, 0) in each read; varying reads step 1 along the row.
  for (size_t j = 0; j < step.reads.size(); ++j) {
    const Shape& s = p.g.at(step.reads[j]).shape;
    const bool v = rp.read_varies[j];
    std::string off;
    if (v && s.numel() == rp.n_rows * rp.len && row_shaped(s, r)) {
      off = "row * L";
    } else if (!v && s.numel() == rp.n_rows && s.numel() > 1) {
      off = "row";
    } else if (s.numel() == (v ? rp.len : 1)) {
      off = "0";
    } else {  // broadcast along some of the row dims: digits of the row index
      std::string terms;
      os << "  long long o" << j << " = 0;\n  { long long r_ = row;";
      for (int d = k_rows - 1; d >= 0; --d) {
        const int dj = s.rank() - r.rank() + d;
        os << " { const long long c_ = r_ % " << r[d] << "LL; r_ /= " << r[d] << "LL;";
        if (dj >= 0 && s[dj] != 1) {
          std::int64_t stride = 1;
          for (int e = dj + 1; e < s.rank(); ++e) stride *= s[e];
          os << " o" << j << " += c_ * " << stride << "LL;";
        }
        os << " }";
      }
      os << " }\n";
      off = str("o", j);
    }
    if (off != str("o", j)) os << "  const long long o" << j << " = " << off << ";\n";
    if (!v) {
      os << "  const float " << value_name(step.reads[j]) << " = in" << j << "[o" << j << "];\n";
      continue;
    }
    if (!rp.read_cached[j]) continue;  // read where the root is computed
    os << "  float c" << j << "[E * W];\n";
    os << "#pragma unroll\n  for (int k = 0; k < E; ++k) {\n";
    os << "    const int j0 = (k * T + tid) * W;\n    if (j0 < L) {\n";
    if (rp.width == 4) {
      os << "      if (vec) {\n        const float4 q = *reinterpret_cast<const float4*>(in" << j << " + o"
         << j << " + j0);\n";
      os << "        c" << j << "[k * 4] = q.x; c" << j << "[k * 4 + 1] = q.y; c" << j
         << "[k * 4 + 2] = q.z; c" << j << "[k * 4 + 3] = q.w;\n      } else {\n";
      os << "#pragma unroll\n        for (int c = 0; c < 4; ++c) c" << j << "[k * 4 + c] = in" << j << "[o"
         << j << " + j0 + c];\n      }\n";
    } else {
      os << "      c" << j << "[k] = in" << j << "[o" << j << " + j0];\n";
    }
    os << "    }\n  }\n";
  }

  // Which values vary along the row: varying reads, and elementwise members with a varying input.
  std::map<int, bool> varies;
  for (size_t j = 0; j < step.reads.size(); ++j) varies[step.reads[j]] = rp.read_varies[j];
  for (int m : step.members) {
    const NodeData& nd = p.g.at(m);
    bool v = false;
    if (nd.kind != OpKind::Reduce)
      for (int in : nd.inputs) v = v || varies[in];
    varies[m] = v;
  }
  // The per-element statements that compute `target` (a varying value) from the cached reads and the
  // per-row values, in topological order.
  auto element_code = [&](int target, const std::string& indent) {
    std::set<int> need{target};
    for (auto it = step.members.rbegin(); it != step.members.rend(); ++it)
      if (need.count(*it) && varies[*it])
        for (int in : p.g.at(*it).inputs)
          if (varies[in]) need.insert(in);
    std::string code;
    for (size_t j = 0; j < step.reads.size(); ++j)
      if (rp.read_varies[j] && need.count(step.reads[j]))
        code += str(indent, "const float ", value_name(step.reads[j]), " = ", rp.read_cached[j] ? "c" : "q",
                    j, rp.read_cached[j] ? "[k * W + c]" : "[c]", ";\n");
    for (int m : step.members)
      if (need.count(m) && varies[m])
        code += str(indent, "const float ", value_name(m), " = ", elementwise_expr(p.g.at(m)), ";\n");
    return code;
  };

  int pass = 0;
  for (int m : step.members) {
    const NodeData& nd = p.g.at(m);
    if (varies[m]) continue;  // computed per element where used
    if (nd.kind != OpKind::Reduce) {
      os << "  const float " << value_name(m) << " = " << elementwise_expr(nd) << ";\n";
      continue;
    }
    const bool sum = nd.reduce == ReduceOp::Sum || nd.reduce == ReduceOp::Mean;
    const std::string type = sum ? "double" : "float";
    const std::string combine = nd.reduce == ReduceOp::Max   ? "mt::fn::max_combine"
                                : nd.reduce == ReduceOp::Min ? "mt::fn::min_combine"
                                                             : "";
    auto fold = [&](const std::string& a, const std::string& b) {
      return combine.empty() ? str(a, " + ", b) : str(combine, "(", a, ", ", b, ")");
    };
    const std::string acc = str("a", pass, "_");
    const std::string identity = sum                          ? "0.0"
                                 : nd.reduce == ReduceOp::Max ? "__int_as_float(0xff800000)"
                                                              : "__int_as_float(0x7f800000)";
    os << "  // pass " << pass << ": " << p.g.label(m) << " " << node_op_string(nd) << "\n";
    os << "  " << type << " " << acc << " = " << identity << ";\n";
    const int x = nd.inputs[0];
    if (varies[x]) {
      os << "#pragma unroll\n  for (int k = 0; k < E; ++k) {\n";
      os << "    if ((k * T + tid) * W < L) {\n#pragma unroll\n      for (int c = 0; c < W; ++c) {\n";
      os << element_code(x, "        ");
      os << "        " << acc << " = " << fold(acc, sum ? str("(double)", value_name(x)) : value_name(x))
         << ";\n";
      os << "      }\n    }\n  }\n";
    } else {  // rows of one element: the row's value, once (the row's first thread holds it)
      os << "  if (tid == 0) " << acc << " = " << (sum ? str("(double)", value_name(x)) : value_name(x))
         << ";\n";
    }
    os << "#pragma unroll\n  for (int d = 16; d > 0; d >>= 1) " << acc << " = "
       << fold(acc, str("__shfl_xor_sync(0xffffffffu, ", acc, ", d)")) << ";\n";
    if (n_warps > 1) {
      const std::string buf = str("red", pass, "_");
      os << "  __shared__ " << type << " " << buf << "[" << rp.rows_per_block << "][" << n_warps << "];\n";
      os << "  if (threadIdx.x % 32 == 0) " << buf << "[sub_][tid / 32] = " << acc << ";\n";
      os << "  __syncthreads();\n";
      os << "  " << acc << " = " << buf << "[sub_][0];\n";
      os << "#pragma unroll\n  for (int w = 1; w < " << n_warps << "; ++w) " << acc << " = "
         << fold(acc, str(buf, "[sub_][w]")) << ";\n";
    }
    os << "  const float " << value_name(m) << " = ";
    if (nd.reduce == ReduceOp::Mean)
      os << "(float)(" << acc << " / " << rp.len << ".0);\n";
    else if (sum)
      os << "(float)" << acc << ";\n";
    else
      os << acc << ";\n";
    ++pass;
  }

  // The root.
  if (!varies[step.root]) {
    os << "  if (live_ && tid == 0) out[row] = " << value_name(step.root) << ";\n}\n";
    return os.str();
  }
  os << "  if (!live_) return;\n";
  os << "#pragma unroll\n  for (int k = 0; k < E; ++k) {\n";
  os << "    const int j0 = (k * T + tid) * W;\n    if (j0 < L) {\n      float o_[W];\n";
  for (size_t j = 0; j < step.reads.size(); ++j) {  // the varying reads no pass needed: read here, once
    if (!rp.read_varies[j] || rp.read_cached[j]) continue;
    os << "      float q" << j << "[W];\n";
    if (rp.width == 4) {
      os << "      if (vec) {\n        const float4 t_ = *reinterpret_cast<const float4*>(in" << j << " + o"
         << j << " + j0);\n        q" << j << "[0] = t_.x; q" << j << "[1] = t_.y; q" << j << "[2] = t_.z; q"
         << j << "[3] = t_.w;\n      } else {\n";
      os << "#pragma unroll\n        for (int c = 0; c < 4; ++c) q" << j << "[c] = in" << j << "[o" << j
         << " + j0 + c];\n      }\n";
    } else {
      os << "      q" << j << "[0] = in" << j << "[o" << j << " + j0];\n";
    }
  }
  os << "#pragma unroll\n      for (int c = 0; c < W; ++c) {\n";
  os << element_code(step.root, "        ");
  os << "        o_[c] = " << value_name(step.root) << ";\n      }\n";
  if (rp.width == 4) {
    os << "      if (vec) {\n        *reinterpret_cast<float4*>(out + row * L + j0) = make_float4(o_[0], "
          "o_[1], "
          "o_[2], o_[3]);\n      } else {\n";
    os << "#pragma unroll\n        for (int c = 0; c < 4; ++c) out[row * L + j0 + c] = o_[c];\n      }\n";
  } else {
    os << "      out[row * L + j0] = o_[0];\n";
  }
  os << "    }\n  }\n}\n";
  return os.str();
}

std::string step_kernel_source(const Program& p, const Step& step) {
  return step.kind == Step::Kind::Rows ? row_kernel_source(p, step) : fused_kernel_source(p, step);
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
  // Grid-stride: up to 8 resident 256-thread blocks per SM of the current device (enough to saturate
  // bandwidth on sm_80/90); counted per call, as GPUs of one process may differ.
  const int max_blocks = std::max(1, current_sm_count()) * 8;
  const std::int64_t want = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<std::int64_t>(want, max_blocks));
  MT_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(m_kernel), dim3(blocks), dim3(kThreads),
                                 args.data(), 0, stream));
  MT_CUDA_CHECK_LAUNCH();
}

void FusedKernel::launch_rows(const RowPlan& plan, const std::vector<const void*>& ins, void* out, bool vec,
                              cudaStream_t stream) const {
  if (plan.n_rows <= 0 || plan.len <= 0) return;
  long long n_rows = plan.n_rows;
  int v = vec ? 1 : 0;
  std::vector<void*> args;
  args.reserve(ins.size() + 3);
  args.push_back(&n_rows);
  std::vector<const void*> ptrs = ins;
  for (auto& p : ptrs) args.push_back(&p);
  args.push_back(&out);
  args.push_back(&v);
  const std::int64_t blocks = (plan.n_rows + plan.rows_per_block - 1) / plan.rows_per_block;
  MT_CHECK(blocks <= 0x7fffffff, InvalidArgument, "row kernel: ", plan.n_rows, " rows need ", blocks,
           " blocks (limit 2^31 - 1)");
  MT_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(m_kernel), dim3(static_cast<unsigned>(blocks)),
                                 dim3(static_cast<unsigned>(plan.threads * plan.rows_per_block)), args.data(),
                                 0, stream));
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
