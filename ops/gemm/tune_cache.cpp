// The autotuner's pure parts and its file (detail/tune.h): the problem's key, the shortlist it times, and
// the cache of winners shared by processes through one JSON file (advisory lock, atomic replace). No CUDA
// calls here: tests/ops/gemm/test_tune.cpp runs all of it on the CPU.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "minitensor/ops/gemm/detail/pack.h"
#include "minitensor/ops/gemm/detail/tune.h"
#include "minitensor/runtime/detail/json.h"

namespace mt::detail::gemm {

// ---------------------------------------------------------------- the key

std::string tune_key(const Problem& p, MathMode math) {
  // An operand's layout: which dim is contiguous, 16-byte runs along it, broadcast over the batch.
  auto operand = [](std::int64_t s_x, std::int64_t s_k, std::int64_t s_b, bool runs16, bool whole) {
    std::string o = s_k == 1 ? "k" : s_x == 1 ? "x" : "s";
    o += runs16 ? "4" : "1";
    o += whole ? "w" : "-";
    o += s_b == 0 ? "b" : "-";
    return o;
  };
  std::ostringstream os;
  os << p.m << "x" << p.n << "x" << p.k << "x" << p.batch << "|" << math_mode_name(math);
  os << "|a" << operand(p.a_sm, p.a_sk, p.a_sb, a_runs16(p), a_whole_runs(p));
  os << "|b" << operand(p.b_sn, p.b_sk, p.b_sb, b_runs16(p), b_whole_runs(p));
  os << "|c" << (p.c_sn == 1 ? "n" : p.c_sm == 1 ? "m" : "s") << (c_vectorisable(p) ? "4" : "1");
  os << "|" << (needs_pack(p) ? "P" : "-") << (ring16_ready(p) ? "R" : "-") << (tma_layout_ok(p) ? "T" : "-")
     << (lanes_ready(p) ? "L" : "-") << (b_vectorisable(p) ? "V" : "-");
  os << "|e" << (p.beta != 0.f ? "b" : "-") << (p.bias ? "+" : "-") << static_cast<int>(p.act)
     << (p.softmax ? "s" : "-");
  return os.str();
}

// ---------------------------------------------------------------- configurations as text

namespace {

const char* reduce_name(SplitReduce r) {
  return r == SplitReduce::Cluster ? "cluster" : "kernel";
}
const char* staging_name(Staging s) {
  switch (s) {
    case Staging::CpAsync:
      return "cpasync";
    case Staging::CpAsync16:
      return "cpasync16";
    case Staging::Tma:
      return "tma";
    default:
      return "registers";
  }
}

}  // namespace

std::optional<Config> config_from_fields(const std::string& kernel, int split_k, const std::string& math,
                                         const std::string& reduce, const std::string& staging, bool pack,
                                         bool swap, bool b_along_n) {
  Config c;
  bool found = false;
  for (const KernelInfo& k : kernel_table())
    if (kernel == k.name) c.kernel = k.kernel, found = true;
  if (!found || split_k < 1 || split_k > 64) return std::nullopt;
  c.split_k = split_k;
  bool math_ok = false;
  for (MathMode m : {MathMode::FP32, MathMode::TF32, MathMode::TF32x3})
    if (math == math_mode_name(m)) c.math = m, math_ok = true;
  if (!math_ok) return std::nullopt;
  if (reduce != "cluster" && reduce != "kernel") return std::nullopt;
  c.reduce = reduce == "cluster" ? SplitReduce::Cluster : SplitReduce::Kernel;
  bool staging_ok = false;
  for (Staging s : {Staging::Registers, Staging::CpAsync, Staging::CpAsync16, Staging::Tma})
    if (staging == staging_name(s)) c.staging = s, staging_ok = true;
  if (!staging_ok) return std::nullopt;
  c.pack = pack;
  c.swap = swap;
  c.b_along_n = b_along_n;
  return c;
}

// ---------------------------------------------------------------- the shortlist

std::vector<Config> tune_candidates(const Problem& p, MathMode math, const DeviceModel& model, int max) {
  const Config pick = choose(p, math, model);
  std::vector<Config> out{pick};
  if (max <= 1 || model.sm_count < 1) return out;
  auto same = [](const Config& x, const Config& y) {
    return x.kernel == y.kernel && x.split_k == y.split_k && x.math == y.math &&
           (x.split_k == 1 || x.reduce == y.reduce) && x.staging == y.staging && x.pack == y.pack &&
           x.swap == y.swap && x.b_along_n == y.b_along_n;
  };
  // A rough rate for ranking only (the timing decides): the tile's own rate, the share of its area inside C,
  // the share of the SMs its blocks keep busy over their waves, and ks / (ks + 32) for ks of K per split
  // (the fill of a k-loop pipeline; the short-K kernels have none).
  auto tile_rate = [&](Kernel k) {
    if (is_small_k(k)) return p.k <= kSmallKMax ? 1.0 : 0.6;
    const TileInfo t = tile_of(k);
    const double area = double(t.bm) * t.bn;
    return area >= 256 * 128 ? 1.0 : area >= 128 * 128 ? 0.95 : area >= 128 * 64 ? 0.85 : 0.7;
  };
  struct Ranked {
    Config config;
    double rate;
  };
  std::vector<Ranked> ranked;
  for (const Config& c : candidates(p, math, model)) {
    if (same(c, pick)) continue;
    const TileInfo t = tile_of(c.kernel);
    const int m = c.swap ? p.n : p.m, n = c.swap ? p.m : p.n;  // the extents the kernel's tiles cover
    const double tiles = std::ceil(m / double(t.bm)) * std::ceil(n / double(t.bn)) * p.batch;
    const double inside = double(m) * n * p.batch / (tiles * t.bm * t.bn);
    const int per_sm = double(t.bm) * t.bn > 128.0 * 128.0 ? 1 : 2;
    const double slots = double(per_sm) * model.slots(c.reduce == SplitReduce::Cluster ? c.split_k : 1);
    const double blocks = tiles * c.split_k;
    const double busy = blocks / (std::ceil(blocks / slots) * slots);
    const double ks = double(p.k) / c.split_k;
    double rate = tile_rate(c.kernel) * inside * busy * (is_small_k(c.kernel) ? 1.0 : ks / (ks + 32.0));
    if (c.pack) rate *= 0.9;                   // the copy
    if (c.kernel == Kernel::Gemv) rate = 2.0;  // a vector operand: the streaming kernel first
    ranked.push_back({c, rate});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Ranked& x, const Ranked& y) { return x.rate > y.rate; });
  for (const Ranked& r : ranked) {
    if (static_cast<int>(out.size()) >= max) break;
    const auto per_kernel =
        std::count_if(out.begin(), out.end(), [&](const Config& c) { return c.kernel == r.config.kernel; });
    if (per_kernel < 2) out.push_back(r.config);
  }
  return out;
}

// ---------------------------------------------------------------- a small JSON reader (the file's own
// format)

namespace {

struct JsonValue {
  enum class Type { Null, Bool, Number, String, Array, Object } type = Type::Null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> fields;
  const JsonValue* get(const std::string& k) const {
    for (const auto& [key, v] : fields)
      if (key == k) return &v;
    return nullptr;
  }
};

// Recursive descent over RFC 8259 JSON; false on any syntax error (nesting limited, so a hostile file
// cannot exhaust the stack).
class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : m_s(text) {}
  bool parse(JsonValue& out) {
    if (!value(out, 0)) return false;
    skip();
    return m_i == m_s.size();
  }

 private:
  void skip() {
    while (m_i < m_s.size() && (m_s[m_i] == ' ' || m_s[m_i] == '\t' || m_s[m_i] == '\n' || m_s[m_i] == '\r'))
      ++m_i;
  }
  bool literal(const char* word) {
    const std::size_t n = std::char_traits<char>::length(word);
    if (m_s.compare(m_i, n, word) != 0) return false;
    m_i += n;
    return true;
  }
  bool string(std::string& out) {
    if (m_i >= m_s.size() || m_s[m_i] != '"') return false;
    ++m_i;
    while (m_i < m_s.size()) {
      const char ch = m_s[m_i++];
      if (ch == '"') return true;
      if (static_cast<unsigned char>(ch) < 0x20) return false;
      if (ch != '\\') {
        out += ch;
        continue;
      }
      if (m_i >= m_s.size()) return false;
      const char e = m_s[m_i++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (m_i + 4 > m_s.size()) return false;
          unsigned cp = 0;
          for (int d = 0; d < 4; ++d) {
            const char h = m_s[m_i++];
            cp = cp * 16 + (h >= '0' && h <= '9'   ? h - '0'
                            : h >= 'a' && h <= 'f' ? h - 'a' + 10
                            : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                   : 99);
            if (cp > 0xFFFF) return false;
          }
          // Keys and names here are ASCII; other code points are kept as UTF-8 of the BMP.
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6)), out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12)), out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }
  // The items of an object or array up to `close` (its opening bracket read), each read by item(), separated
  // by commas.
  template <class Item>
  bool items(char close, Item item) {
    skip();
    if (m_i < m_s.size() && m_s[m_i] == close) return ++m_i, true;
    while (true) {
      if (!item()) return false;
      skip();
      if (m_i >= m_s.size()) return false;
      if (m_s[m_i] != ',') return m_s[m_i++] == close;
      ++m_i;
    }
  }
  bool value(JsonValue& v, int depth) {
    if (depth > 32) return false;
    skip();
    if (m_i >= m_s.size()) return false;
    const char ch = m_s[m_i];
    if (ch == '{') {
      v.type = JsonValue::Type::Object;
      ++m_i;
      return items('}', [&] {
        skip();
        std::string key;
        if (!string(key)) return false;
        skip();
        if (m_i >= m_s.size() || m_s[m_i++] != ':') return false;
        JsonValue item;
        if (!value(item, depth + 1)) return false;
        v.fields.emplace_back(std::move(key), std::move(item));
        return true;
      });
    }
    if (ch == '[') {
      v.type = JsonValue::Type::Array;
      ++m_i;
      return items(']', [&] {
        JsonValue item;
        if (!value(item, depth + 1)) return false;
        v.items.push_back(std::move(item));
        return true;
      });
    }
    if (ch == '"') {
      v.type = JsonValue::Type::String;
      return string(v.str);
    }
    if (literal("true")) return v.type = JsonValue::Type::Bool, v.b = true, true;
    if (literal("false")) return v.type = JsonValue::Type::Bool, v.b = false, true;
    if (literal("null")) return v.type = JsonValue::Type::Null, true;
    // A number: JSON's grammar, checked by strtod consuming exactly the characters that may form one.
    const std::size_t start = m_i;
    while (m_i < m_s.size() && std::string_view("+-0123456789.eE").find(m_s[m_i]) != std::string_view::npos)
      ++m_i;
    if (m_i == start) return false;
    const std::string num = m_s.substr(start, m_i - start);
    char* end = nullptr;
    v.type = JsonValue::Type::Number;
    v.num = std::strtod(num.c_str(), &end);
    return end == num.c_str() + num.size() && std::isfinite(v.num);
  }

  const std::string& m_s;
  std::size_t m_i = 0;
};

constexpr const char* kFormat = "minitensor-gemm-tune";
constexpr int kFormatVersion = 1;

// An advisory lock on `path` + ".lock" for the life of the object (flock: between processes, and between
// threads that open the file separately). Without a lock file (no directory, read-only) it holds nothing:
// the rename still keeps the file whole, only a concurrent update may be lost.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    m_fd = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (m_fd >= 0 && ::flock(m_fd, LOCK_EX) != 0) {
      ::close(m_fd);
      m_fd = -1;
    }
  }
  ~FileLock() {
    if (m_fd >= 0) {
      ::flock(m_fd, LOCK_UN);
      ::close(m_fd);
    }
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int m_fd = -1;
};

}  // namespace

// ---------------------------------------------------------------- the cache

TuneCache::TuneCache(std::string path, TuneDevice device)
    : m_path(std::move(path)), m_device(std::move(device)) {}

void TuneCache::warn(const std::string& what) const {
  if (m_warnings > 0) return;
  ++m_warnings;
  std::fprintf(stderr, "minitensor: GEMM tune cache %s: %s\n", m_path.c_str(), what.c_str());
}

int TuneCache::warnings() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_warnings;
}

std::size_t TuneCache::size() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_entries.size();
}

std::optional<std::map<std::string, TuneCache::Entry>> TuneCache::read_file(std::string& why) const {
  std::ifstream f(m_path, std::ios::binary);
  if (!f) return std::map<std::string, Entry>{};  // no file yet: nothing to warn about
  std::stringstream ss;
  ss << f.rdbuf();
  JsonValue root;
  if (!JsonReader(ss.str()).parse(root) || root.type != JsonValue::Type::Object) {
    why = "not valid JSON; ignored";
    return std::nullopt;
  }
  const JsonValue* format = root.get("format");
  const JsonValue* version = root.get("version");
  if (!format || format->str != kFormat || !version || version->num != kFormatVersion) {
    why = "not a minitensor GEMM tune file of version " + std::to_string(kFormatVersion) + "; ignored";
    return std::nullopt;
  }
  const JsonValue* dev = root.get("device");
  const JsonValue* entries = root.get("entries");
  if (!dev || dev->type != JsonValue::Type::Object || !entries || entries->type != JsonValue::Type::Object) {
    why = "no device or entries; ignored";
    return std::nullopt;
  }
  TuneDevice d;
  const JsonValue* name = dev->get("name");
  const JsonValue* sms = dev->get("sm_count");
  const JsonValue* driver = dev->get("driver");
  const JsonValue* library = dev->get("library");
  if (name) d.name = name->str;
  if (sms) d.sm_count = static_cast<int>(sms->num);
  if (driver) d.driver = static_cast<int>(driver->num);
  if (library) d.library = library->str;
  if (!(d == m_device)) {
    why = "written for another device, driver or library (" + d.name + ", " + std::to_string(d.sm_count) +
          " SMs, driver " + std::to_string(d.driver) + ", minitensor " + d.library + "); ignored";
    return std::nullopt;
  }
  std::map<std::string, Entry> out;
  for (const auto& [key, e] : entries->fields) {
    const JsonValue* kernel = e.get("kernel");
    const JsonValue* split = e.get("split_k");
    const JsonValue* math = e.get("math");
    const JsonValue* reduce = e.get("reduce");
    const JsonValue* staging = e.get("staging");
    const JsonValue* pack = e.get("pack");
    const JsonValue* swap = e.get("swap");
    const JsonValue* b_along_n = e.get("b_along_n");
    const JsonValue* ms = e.get("ms");
    std::optional<Config> c;
    if (kernel && split && math && reduce && staging && pack)
      c = config_from_fields(kernel->str, static_cast<int>(split->num), math->str, reduce->str, staging->str,
                             pack->b, swap && swap->b, b_along_n && b_along_n->b);
    if (!c) {
      why = "entry '" + key + "' is not a configuration; file ignored";
      return std::nullopt;
    }
    out[key] = Entry{*c, ms ? ms->num : 0.0};
  }
  return out;
}

void TuneCache::write_file(const std::map<std::string, Entry>& entries) const {
  JsonWriter w;
  w.begin_object().field("format", kFormat).field("version", kFormatVersion);
  w.key("device").begin_object().field("name", m_device.name).field("sm_count", m_device.sm_count);
  w.field("driver", m_device.driver).field("library", m_device.library).end_object();
  w.key("entries").begin_object();
  for (const auto& [key, e] : entries) {
    w.key(key)
        .begin_object()
        .field("kernel", kernel_name(e.config.kernel))
        .field("split_k", e.config.split_k);
    w.field("math", math_mode_name(e.config.math)).field("reduce", reduce_name(e.config.reduce));
    w.field("staging", staging_name(e.config.staging)).field("pack", e.config.pack);
    w.field("swap", e.config.swap).field("b_along_n", e.config.b_along_n).field("ms", e.ms);
    w.end_object();
  }
  w.end_object().end_object();
  std::string text = w.take();
  text += '\n';
  // A temporary beside the file, unique to this process and call, then renamed over it: readers see the old
  // file or the new one, never a part.
  static std::atomic<unsigned> counter{0};
  const std::string tmp = m_path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())) + "." +
                          std::to_string(counter++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      warn("cannot write " + tmp + "; tuned choices kept in memory only");
      return;
    }
  }
  if (std::rename(tmp.c_str(), m_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    warn("cannot replace the file; tuned choices kept in memory only");
  }
}

std::optional<Config> TuneCache::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (!m_loaded) {
    m_loaded = true;
    std::string why;
    if (auto file = read_file(why))
      m_entries = std::move(*file);
    else
      warn(why);
  }
  const auto it = m_entries.find(key);
  if (it == m_entries.end()) return std::nullopt;
  return it->second.config;
}

void TuneCache::put(const std::string& key, const Config& config, double ms) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_loaded = true;
  m_entries[key] = Entry{config, ms};
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(m_path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  FileLock file_lock(m_path);
  // What other processes (or other caches) wrote meanwhile, ours taking precedence; a foreign or corrupt
  // file is replaced (it was warned about when first read).
  std::string why;
  if (auto file = read_file(why))
    for (auto& [k, e] : *file) m_entries.try_emplace(k, e);
  write_file(m_entries);
}

// ---------------------------------------------------------------- the environment

std::string default_tune_path() {
  if (const char* env = std::getenv("MT_GEMM_TUNE_FILE"); env && *env) return env;
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/minitensor/gemm_tune.json";
  return "gemm_tune.json";
}

bool tune_from_env() {
  static const bool on = [] {
    const char* env = std::getenv("MT_GEMM_TUNE");
    return env && *env && std::string(env) != "0";
  }();
  return on;
}

}  // namespace mt::detail::gemm
