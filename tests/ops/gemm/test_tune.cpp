// The SGEMM autotuner's CPU half: the problem key, configurations as text, the shortlist it times, and the
// cache file (round trip, a corrupt file, another device's file, writers in two threads and in two processes
// at once). The timing itself runs on a GPU (tests/ops/test_gemm.cpp, Gemm.F32_Tune*).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "minitensor/ops/gemm/detail/tune.h"
#include "tests/ops/gemm/problems.h"

namespace mt::detail::gemm {
namespace {

using test::dense_rows;
using test::shape_name;

TuneDevice h100_device() {
  return TuneDevice{"NVIDIA H100 80GB HBM3", 132, 12040, "0.1.0"};
}

// A fresh file path in a directory of its own (removed with the object).
class TempPath {
 public:
  explicit TempPath(const std::string& name) {
    m_dir = std::filesystem::temp_directory_path() /
            ("mt_tune_" + std::to_string(::getpid()) + "_" + name + "_" + std::to_string(std::rand()));
    std::filesystem::create_directories(m_dir);
  }
  ~TempPath() {
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
  }
  std::string file() const { return (m_dir / "sub" / "gemm_tune.json").string(); }
  std::vector<std::string> leftovers() const {  // temporaries that were not renamed
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(m_dir / "sub", ec))
      if (e.path().filename().string().find(".tmp.") != std::string::npos) out.push_back(e.path().string());
    return out;
  }

 private:
  std::filesystem::path m_dir;
};

void write_text(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

// "<prefix><i>" (appended, not `prefix + std::to_string(i)`, which GCC 12 misreads as an overlapping copy).
std::string key_of(const std::string& prefix, int i) {
  std::string k = prefix;
  k += std::to_string(i);
  return k;
}

bool same_config(const Config& x, const Config& y) {
  return x.kernel == y.kernel && x.split_k == y.split_k && x.math == y.math && x.reduce == y.reduce &&
         x.staging == y.staging && x.pack == y.pack && x.swap == y.swap && x.b_along_n == y.b_along_n;
}

// ---------------------------------------------------------------- key and text

TEST(GemmTune, KeySeparatesWhatTheChoiceDependsOn) {
  const Problem p = dense_rows(349, 517, 7);
  EXPECT_EQ(tune_key(p, MathMode::FP32), tune_key(dense_rows(349, 517, 7), MathMode::FP32));
  EXPECT_NE(tune_key(p, MathMode::FP32), tune_key(p, MathMode::TF32));
  EXPECT_NE(tune_key(p, MathMode::FP32), tune_key(dense_rows(349, 517, 8), MathMode::FP32));
  Problem t = p;
  t.b_sk = 1, t.b_sn = 7;  // B transposed
  EXPECT_NE(tune_key(p, MathMode::FP32), tune_key(t, MathMode::FP32));
  Problem off = dense_rows(348, 516, 8);
  Problem off1 = off;
  off1.a = reinterpret_cast<const float*>(std::uintptr_t{4});  // 4 bytes in: no 16-byte runs
  EXPECT_NE(tune_key(off, MathMode::FP32), tune_key(off1, MathMode::FP32));
  Problem beta = p;
  beta.beta = 1.f;
  EXPECT_NE(tune_key(p, MathMode::FP32), tune_key(beta, MathMode::FP32));
  Problem batched = p;
  batched.batch = 3, batched.a_sb = 349 * 7, batched.b_sb = 0, batched.c_sb = 349 * 517;
  EXPECT_NE(tune_key(p, MathMode::FP32), tune_key(batched, MathMode::FP32));
}

TEST(GemmTune, EveryKernelRoundTripsThroughItsFields) {
  for (const KernelInfo& k : kernel_table())
    for (Staging st : {Staging::Registers, Staging::CpAsync, Staging::CpAsync16, Staging::Tma}) {
      const char* staging = st == Staging::Registers   ? "registers"
                            : st == Staging::CpAsync   ? "cpasync"
                            : st == Staging::CpAsync16 ? "cpasync16"
                                                       : "tma";
      const std::optional<Config> c = config_from_fields(k.name, 3, "tf32x3", "cluster", staging, true);
      ASSERT_TRUE(c) << k.name;
      EXPECT_EQ(c->kernel, k.kernel);
      EXPECT_EQ(c->split_k, 3);
      EXPECT_EQ(c->math, MathMode::TF32x3);
      EXPECT_EQ(c->reduce, SplitReduce::Cluster);
      EXPECT_EQ(c->staging, st);
      EXPECT_TRUE(c->pack);
    }
  const std::optional<Config> swapped =
      config_from_fields("simt_32x128x8_w32x32_t8x4_s4", 4, "fp32", "kernel", "cpasync", false, true);
  ASSERT_TRUE(swapped);
  EXPECT_TRUE(swapped->swap);
  EXPECT_FALSE(config_from_fields("gemv", 1, "fp32", "kernel", "registers", false)->swap);
  const std::optional<Config> bn = config_from_fields("simt_256x128x16_w64x64_t16x8_s3", 1, "fp32", "kernel",
                                                      "registers", false, false, true);
  ASSERT_TRUE(bn);
  EXPECT_TRUE(bn->b_along_n);
  EXPECT_FALSE(bn->swap);
  EXPECT_FALSE(config_from_fields("no_such_kernel", 1, "fp32", "kernel", "registers", false));
  EXPECT_FALSE(config_from_fields("gemv", 0, "fp32", "kernel", "registers", false));
  EXPECT_FALSE(config_from_fields("gemv", 1, "fp16", "kernel", "registers", false));
  EXPECT_FALSE(config_from_fields("gemv", 1, "fp32", "atomics", "registers", false));
  EXPECT_FALSE(config_from_fields("gemv", 1, "fp32", "kernel", "smem", false));
}

// ---------------------------------------------------------------- the shortlist

TEST(GemmTune, CandidatesStartWithThePickAndCanRun) {
  for (const DeviceModel& model : {DeviceModel::h100(), DeviceModel::h200(), DeviceModel::a100()}) {
    Problem qkv = dense_rows(64, 3072, 768);
    qkv.b_sk = 1, qkv.b_sn = 768;
    Problem batched = dense_rows(150, 150, 256);
    batched.batch = 32, batched.a_sb = 150 * 256, batched.b_sb = 256 * 150, batched.c_sb = 150 * 150;
    for (const Problem& p : {dense_rows(349, 5842, 7), dense_rows(4096, 4096, 4096), qkv, batched,
                             dense_rows(127, 129, 255), dense_rows(1, 14160, 208)})
      for (MathMode math : {MathMode::FP32, MathMode::TF32}) {
        SCOPED_TRACE(shape_name(p) + " " + math_mode_name(math));
        const std::vector<Config> list = tune_candidates(p, math, model);
        ASSERT_FALSE(list.empty());
        EXPECT_LE(list.size(), 6u);
        EXPECT_TRUE(same_config(list.front(), choose(p, math, model)));
        for (std::size_t i = 0; i < list.size(); ++i) {
          EXPECT_TRUE(can_implement(p, list[i], model)) << config_name(list[i]);
          for (std::size_t j = 0; j < i; ++j)
            EXPECT_FALSE(same_config(list[i], list[j])) << config_name(list[i]);
        }
        if (p.m > 1 && p.n > 1 && p.k >= 64) {
          EXPECT_GT(list.size(), 1u);
        }
      }
  }
  // A short K offers both short-K tiles.
  const std::vector<Config> small =
      tune_candidates(dense_rows(349, 5842, 7), MathMode::FP32, DeviceModel::h100());
  for (Kernel k : small_k_kernels())
    EXPECT_TRUE(std::any_of(small.begin(), small.end(), [&](const Config& c) { return c.kernel == k; }));
  EXPECT_EQ(tune_candidates(dense_rows(349, 5842, 7), MathMode::FP32, DeviceModel::h100(), 1).size(), 1u);
}

// ---------------------------------------------------------------- the file

TEST(GemmTune, Cache_RoundTrip) {
  const TempPath dir("roundtrip");
  const Config a{Kernel::SimtTma128x64, 2, MathMode::FP32, SplitReduce::Cluster, Staging::Tma};
  const Config b{Kernel::SmallK64x64, 1, MathMode::TF32};
  const Config c{Kernel::Simt32x128, 4, MathMode::FP32, SplitReduce::Kernel, Staging::CpAsync, false, true};
  Config d{Kernel::Simt256x128k16, 1, MathMode::FP32};
  d.b_along_n = true;
  {
    TuneCache cache(dir.file(), h100_device());
    EXPECT_FALSE(cache.find("k1"));  // no file yet: no warning
    cache.put("k1", a, 0.5);
    cache.put("k2 \"quoted\"\n", b, 0.25);
    cache.put("k4", c, 0.125);
    cache.put("k5", d, 2.0);
    ASSERT_TRUE(cache.find("k1"));
    EXPECT_TRUE(same_config(*cache.find("k1"), a));
    EXPECT_EQ(cache.warnings(), 0);
  }
  TuneCache again(dir.file(), h100_device());
  ASSERT_TRUE(again.find("k1"));
  EXPECT_TRUE(same_config(*again.find("k1"), a));
  ASSERT_TRUE(again.find("k2 \"quoted\"\n"));
  EXPECT_TRUE(same_config(*again.find("k2 \"quoted\"\n"), b));
  ASSERT_TRUE(again.find("k4"));
  EXPECT_TRUE(same_config(*again.find("k4"), c));
  ASSERT_TRUE(again.find("k5"));
  EXPECT_TRUE(same_config(*again.find("k5"), d));
  EXPECT_FALSE(again.find("k3"));
  EXPECT_EQ(again.size(), 4u);
  EXPECT_EQ(again.warnings(), 0);
  EXPECT_TRUE(dir.leftovers().empty());
}

// An entry written before configurations had "swap" (or "b_along_n") reads as the product run as stated.
TEST(GemmTune, Cache_EntryWithoutSwapReadsAsUnswapped) {
  const TempPath dir("noswap");
  write_text(dir.file(),
             "{\"format\": \"minitensor-gemm-tune\", \"version\": 1, \"device\": {\"name\": \"NVIDIA H100 "
             "80GB HBM3\", \"sm_count\": 132, \"driver\": 12040, \"library\": \"0.1.0\"}, \"entries\": "
             "{\"k\": {\"kernel\": \"simt_64x64x8_w32x32_t8x4_s4\", \"split_k\": 2, \"math\": \"fp32\", "
             "\"reduce\": \"kernel\", \"staging\": \"cpasync\", \"pack\": false, \"ms\": 1.0}}}");
  TuneCache cache(dir.file(), h100_device());
  ASSERT_TRUE(cache.find("k"));
  EXPECT_EQ(cache.find("k")->kernel, Kernel::Simt64x64);
  EXPECT_FALSE(cache.find("k")->swap);
  EXPECT_FALSE(cache.find("k")->b_along_n);
  EXPECT_EQ(cache.warnings(), 0);
}

TEST(GemmTune, Cache_CorruptFileIsIgnoredWithOneWarning) {
  const std::string bad_files[] = {
      "{\"format\": \"minitensor-gemm-tune\", \"version\": 1, \"device\": {",  // cut short
      "not json at all", "", "[1, 2, 3]", "{\"format\": \"something-else\", \"version\": 1}",
      "{\"format\": \"minitensor-gemm-tune\", \"version\": 2, \"device\": {}, \"entries\": {}}",
      // The right device, an entry that names no kernel.
      "{\"format\": \"minitensor-gemm-tune\", \"version\": 1, \"device\": {\"name\": \"NVIDIA H100 80GB "
      "HBM3\", "
      "\"sm_count\": 132, \"driver\": 12040, \"library\": \"0.1.0\"}, \"entries\": {\"k\": {\"kernel\": "
      "\"nope\", \"split_k\": 1, \"math\": \"fp32\", \"reduce\": \"kernel\", \"staging\": \"registers\", "
      "\"pack\": false, \"ms\": 1.0}}}",
      std::string(100000, '['),  // deep nesting
  };
  for (const std::string& text : bad_files) {
    SCOPED_TRACE(text.substr(0, 80));
    const TempPath dir("corrupt");
    write_text(dir.file(), text);
    TuneCache cache(dir.file(), h100_device());
    EXPECT_FALSE(cache.find("k"));
    EXPECT_FALSE(cache.find("k2"));
    EXPECT_EQ(cache.warnings(), 1);
    // The next write replaces it with a good file.
    cache.put("k", Config{Kernel::Simt64x64}, 1.0);
    EXPECT_EQ(cache.warnings(), 1);
    TuneCache fresh(dir.file(), h100_device());
    EXPECT_TRUE(fresh.find("k"));
    EXPECT_EQ(fresh.warnings(), 0);
  }
}

TEST(GemmTune, Cache_AnotherDevicesFileIsIgnored) {
  const TempPath dir("foreign");
  {
    TuneCache h100(dir.file(), h100_device());
    h100.put("k", Config{Kernel::Simt256x128}, 1.0);
  }
  for (int field = 0; field < 4; ++field) {
    TuneDevice other = h100_device();
    if (field == 0) other.name = "NVIDIA A100-SXM4-80GB";
    if (field == 1) other.sm_count = 114;
    if (field == 2) other.driver = 12080;
    if (field == 3) other.library = "0.2.0";
    TuneCache cache(dir.file(), other);
    EXPECT_FALSE(cache.find("k"));
    EXPECT_EQ(cache.warnings(), 1);
  }
  TuneCache same(dir.file(), h100_device());
  EXPECT_TRUE(same.find("k"));
  EXPECT_EQ(same.warnings(), 0);
}

// Two caches on one file in two threads, each writing its own keys at once: every entry of both is in the
// file afterwards, and no temporary is left behind.
TEST(GemmTune, Cache_TwoThreadsWritingAtOnce) {
  const TempPath dir("threads");
  constexpr int kKeys = 40;
  auto writer = [&](int id) {
    TuneCache cache(dir.file(), h100_device());
    for (int i = 0; i < kKeys; ++i)
      cache.put(key_of(key_of("t", id) + "_", i), Config{Kernel::Simt64x64, 1 + id}, i);
  };
  std::thread t0(writer, 0), t1(writer, 1);
  t0.join();
  t1.join();
  TuneCache all(dir.file(), h100_device());
  for (int id : {0, 1})
    for (int i = 0; i < kKeys; ++i) {
      const std::optional<Config> c = all.find(key_of(key_of("t", id) + "_", i));
      ASSERT_TRUE(c) << id << " " << i;
      EXPECT_EQ(c->split_k, 1 + id);
    }
  EXPECT_EQ(all.size(), 2u * kKeys);
  EXPECT_EQ(all.warnings(), 0);
  EXPECT_TRUE(dir.leftovers().empty());
}

// The same with two processes (fork).
TEST(GemmTune, Cache_TwoProcessesWritingAtOnce) {
  const TempPath dir("fork");
  constexpr int kKeys = 40;
  auto write_keys = [&](const char* prefix) {
    TuneCache cache(dir.file(), h100_device());
    for (int i = 0; i < kKeys; ++i) cache.put(key_of(prefix, i), Config{Kernel::Simt32x64}, i);
  };
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    write_keys("child_");
    std::_Exit(0);
  }
  write_keys("parent_");
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  TuneCache all(dir.file(), h100_device());
  for (const char* prefix : {"child_", "parent_"})
    for (int i = 0; i < kKeys; ++i) EXPECT_TRUE(all.find(key_of(prefix, i))) << prefix << i;
  EXPECT_EQ(all.size(), 2u * kKeys);
  EXPECT_EQ(all.warnings(), 0);
  EXPECT_TRUE(dir.leftovers().empty());
}

// An unwritable place: one warning, the choice kept in memory, no exception.
TEST(GemmTune, Cache_UnwritablePathWarnsOnce) {
  const TempPath dir("unwritable");
  write_text(dir.file(), "");  // a file where the cache wants a directory
  TuneCache cache(dir.file() + "/inside/gemm_tune.json", h100_device());
  EXPECT_NO_THROW(cache.put("k", Config{Kernel::Simt64x64}, 1.0));
  EXPECT_NO_THROW(cache.put("k2", Config{Kernel::Simt64x64}, 1.0));
  EXPECT_TRUE(cache.find("k"));
  EXPECT_TRUE(cache.find("k2"));
  EXPECT_EQ(cache.warnings(), 1);
}

TEST(GemmTune, DefaultPathFollowsTheEnvironment) {
  const char* old = std::getenv("MT_GEMM_TUNE_FILE");
  const std::string saved = old ? old : "";
  ::setenv("MT_GEMM_TUNE_FILE", "/tmp/x/tune.json", 1);
  EXPECT_EQ(default_tune_path(), "/tmp/x/tune.json");
  ::unsetenv("MT_GEMM_TUNE_FILE");
  if (const char* home = std::getenv("HOME"); home && *home) {
    EXPECT_EQ(default_tune_path(), std::string(home) + "/.cache/minitensor/gemm_tune.json");
  }
  if (old) ::setenv("MT_GEMM_TUNE_FILE", saved.c_str(), 1);
}

}  // namespace
}  // namespace mt::detail::gemm
