// mt::dist without a GPU: what a build without NCCL throws, the unique id's text and file forms, the shape
// rules, the environment defaults, typed errors for CPU tensors, and scripts/launch.sh.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "minitensor/dist/detail/watchdog.h"
#include "tests/dist/dist_harness.h"

namespace mt {
namespace {

using dist::UniqueId;

// Sets (or unsets, with nullopt) an environment variable for the scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (m_old) {
      ::setenv(m_name.c_str(), m_old->c_str(), 1);
    } else {
      ::unsetenv(m_name.c_str());
    }
  }

 private:
  std::string m_name;
  std::optional<std::string> m_old;
};

std::filesystem::path fresh_dir(const std::string& tag) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mt_dist_" + tag + "_" + std::to_string(::getpid()) + "_" +
                    std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::filesystem::create_directories(dir);
  return dir;
}

UniqueId random_id(unsigned seed) {
  std::mt19937 rng(seed);
  UniqueId id;
  for (char& b : id.bytes()) b = static_cast<char>(rng() & 255);
  return id;
}

TEST(DistBuild, NcclAvailabilityMatchesTheBuild) {
  EXPECT_EQ(dist::nccl_available(), static_cast<bool>(MT_TEST_HAVE_NCCL));
  EXPECT_EQ(dist::nccl_version().empty(), !dist::nccl_available());
}

TEST(DistBuild, NvlinkMulticastIsOffInTheseTests) {
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");  // tests/dist/nvls_off.cpp
  ASSERT_NE(nvls, nullptr);
  EXPECT_STREQ(nvls, "0");
}

TEST(DistBuild, WithoutNcclEveryEntryPointThrowsDistUnavailable) {
  if (dist::nccl_available()) GTEST_SKIP() << "built with NCCL " << dist::nccl_version();
  dist::Communicator comm;
  const Tensor x = zeros({4});
  EXPECT_THROW(UniqueId::create(), DistUnavailable);
  EXPECT_THROW(dist::Communicator::local({0, 1}), DistUnavailable);
  EXPECT_THROW(dist::Communicator::init(0, 2, UniqueId()), DistUnavailable);
  EXPECT_THROW(dist::Communicator::from_env(), DistUnavailable);
  EXPECT_THROW(comm.rank(), DistUnavailable);
  EXPECT_THROW(comm.synchronize(), DistUnavailable);
  EXPECT_THROW(dist::all_reduce(x, comm), DistUnavailable);
  EXPECT_THROW(dist::all_reduce(x, x, comm), DistUnavailable);
  EXPECT_THROW(dist::all_gather(x, x, comm), DistUnavailable);
  EXPECT_THROW(dist::reduce_scatter(x, x, comm), DistUnavailable);
  EXPECT_THROW(dist::broadcast(x, 0, comm), DistUnavailable);
  EXPECT_THROW(dist::send(x, 1, comm), DistUnavailable);
  EXPECT_THROW(dist::recv(x, 1, comm), DistUnavailable);
  EXPECT_THROW(dist::barrier(comm), DistUnavailable);
  EXPECT_THROW(dist::Group(), DistUnavailable);
  try {
    dist::all_reduce(x, comm);
  } catch (const DistUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("NCCL was not found at build time"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
  }
}

TEST(DistError, MessageNamesTheOpRankAndWorldSize) {
  const DistError e("NCCL error 'remote process exited' (6)", 6, "all_reduce", 1, 4);
  EXPECT_EQ(e.code(), 6);
  EXPECT_EQ(e.op(), "all_reduce");
  EXPECT_EQ(e.rank(), 1);
  EXPECT_EQ(e.world_size(), 4);
  EXPECT_NE(std::string(e.what()).find("all_reduce (rank 1 of 4): NCCL error 'remote process exited'"),
            std::string::npos)
      << e.what();
  const Error& base = e;  // one hierarchy: catch (const mt::Error&) catches it
  EXPECT_NE(std::string(base.what()).find("rank 1"), std::string::npos);
}

TEST(DistUniqueId, HexRoundTrip) {
  for (unsigned seed = 0; seed < 8; ++seed) {
    const UniqueId id = random_id(seed);
    const std::string hex = id.to_hex();
    ASSERT_EQ(hex.size(), 2 * UniqueId::kBytes);
    EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos) << hex;
    EXPECT_EQ(UniqueId::from_hex(hex), id);
    std::string upper = hex;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(UniqueId::from_hex(upper), id);
    EXPECT_EQ(UniqueId::from_hex("  " + hex + "\n"), id);
  }
  EXPECT_EQ(UniqueId().to_hex(), std::string(2 * UniqueId::kBytes, '0'));
}

TEST(DistUniqueId, FromHexNamesWhatIsWrong) {
  const std::string hex = random_id(1).to_hex();
  try {
    UniqueId::from_hex(hex.substr(1));
    FAIL() << "a short id was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("expected 256 hex digits, got 255"), std::string::npos) << e.what();
  }
  std::string bad = hex;
  bad[17] = 'g';
  try {
    UniqueId::from_hex(bad);
    FAIL() << "a non-hex id was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("character 17 ('g')"), std::string::npos) << e.what();
  }
  EXPECT_THROW(UniqueId::from_hex(""), InvalidArgument);
}

TEST(DistUniqueId, FileRoundTripIsAtomic) {
  const auto dir = fresh_dir("id");
  const std::string path = (dir / "nccl_id").string();
  const UniqueId id = random_id(7);
  id.write_file(path);
  EXPECT_EQ(UniqueId::read_file(path, std::chrono::seconds(1)), id);
  // Only the id is left: the temporary file was renamed onto it.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
  // A second write replaces the first.
  const UniqueId other = random_id(8);
  other.write_file(path);
  EXPECT_EQ(UniqueId::read_file(path, std::chrono::seconds(1)), other);
  std::filesystem::remove_all(dir);
}

TEST(DistUniqueId, ReadFileWaitsForTheWriter) {
  const auto dir = fresh_dir("wait");
  const std::string path = (dir / "nccl_id").string();
  const UniqueId id = random_id(3);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    id.write_file(path);
  });
  const UniqueId got = UniqueId::read_file(path, std::chrono::seconds(20));
  writer.join();
  EXPECT_EQ(got, id);
  std::filesystem::remove_all(dir);
}

TEST(DistUniqueId, ReadFileTimesOutWithDistError) {
  const auto dir = fresh_dir("timeout");
  const std::string path = (dir / "never_written").string();
  const auto start = std::chrono::steady_clock::now();
  try {
    UniqueId::read_file(path, std::chrono::milliseconds(200));
    FAIL() << "read_file returned without a file";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("no unique id appeared"), std::string::npos) << e.what();
    EXPECT_EQ(e.code(), DistError::kNoCode);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  std::filesystem::remove_all(dir);
}

TEST(DistUniqueId, ReadFileRejectsAFileThatIsNotAnId) {
  const auto dir = fresh_dir("junk");
  const std::string path = (dir / "nccl_id").string();
  std::ofstream(path) << "not an id\n";
  EXPECT_THROW(UniqueId::read_file(path, std::chrono::seconds(1)), InvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(DistUniqueId, FromEnv) {
  const UniqueId id = random_id(11);
  {
    ScopedEnv env("MT_TEST_NCCL_ID", id.to_hex());
    EXPECT_EQ(UniqueId::from_env("MT_TEST_NCCL_ID"), id);
  }
  {
    ScopedEnv env("MT_TEST_NCCL_ID", std::nullopt);
    EXPECT_THROW(UniqueId::from_env("MT_TEST_NCCL_ID"), InvalidArgument);
  }
  {
    ScopedEnv env("MT_TEST_NCCL_ID", "abc");
    EXPECT_THROW(UniqueId::from_env("MT_TEST_NCCL_ID"), InvalidArgument);
  }
}

TEST(DistUniqueId, CreateAndExchangeThroughAFile) {
  MT_REQUIRE_NCCL();
  const UniqueId a = UniqueId::create();
  const UniqueId b = UniqueId::create();
  EXPECT_NE(a, b);
  EXPECT_NE(a, UniqueId());
  const auto dir = fresh_dir("exchange");
  const std::string path = (dir / "nccl_id").string();
  UniqueId got_by_rank1;
  std::thread rank1([&] { got_by_rank1 = UniqueId::exchange_file(path, 1, std::chrono::seconds(20)); });
  const UniqueId made_by_rank0 = UniqueId::exchange_file(path, 0, std::chrono::seconds(20));
  rank1.join();
  EXPECT_EQ(got_by_rank1, made_by_rank0);
  std::filesystem::remove_all(dir);
}

TEST(DistCommunicator, FromEnvNamesWhatIsMissing) {
  MT_REQUIRE_NCCL();
  ScopedEnv rank("RANK", std::nullopt);
  ScopedEnv world("WORLD_SIZE", "2");
  try {
    dist::Communicator::from_env();
    FAIL() << "from_env without RANK";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("RANK is not set"), std::string::npos) << e.what();
  }
  ScopedEnv bad_rank("RANK", "one");
  EXPECT_THROW(dist::Communicator::from_env(), InvalidArgument);
}

TEST(DistCommunicator, EmptyCommunicatorAccessorsAreInvalidArgument) {
  MT_REQUIRE_NCCL();
  dist::Communicator comm;
  EXPECT_FALSE(comm.defined());
  EXPECT_FALSE(comm.aborted());
  comm.abort();  // nothing to abort: a no-op
  EXPECT_THROW(comm.rank(), InvalidArgument);
  EXPECT_THROW(comm.synchronize(), InvalidArgument);
  EXPECT_THROW(dist::Communicator::init(2, 2, UniqueId()), InvalidArgument);
  EXPECT_THROW(dist::Communicator::local({}), InvalidArgument);
}

TEST(DistCollectives, CpuTensorIsDeviceError) {
  dist::Communicator comm;  // the tensor is checked first: no communicator is needed to reject it
  const Tensor x = zeros({4});
  if (!dist::nccl_available()) {
    EXPECT_THROW(dist::all_reduce(x, comm), DistUnavailable);
    return;
  }
  EXPECT_THROW(dist::all_reduce(x, comm), DeviceError);
  EXPECT_THROW(dist::all_reduce(x, x, comm, dist::ReduceOp::Max), DeviceError);
  EXPECT_THROW(dist::all_gather(x, x, comm), DeviceError);
  EXPECT_THROW(dist::reduce_scatter(x, x, comm), DeviceError);
  EXPECT_THROW(dist::broadcast(x, 0, comm), DeviceError);
  EXPECT_THROW(dist::send(x, 1, comm), DeviceError);
  EXPECT_THROW(dist::recv(x, 1, comm), DeviceError);
  try {
    dist::all_reduce(x, comm);
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce: the input is on cpu"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dist::all_reduce(Tensor(), comm), InvalidArgument);
}

TEST(DistCollectives, ShapeRules) {
  EXPECT_EQ(dist::all_gather_shape({3, 4}, 2, 0), (Shape{6, 4}));
  EXPECT_EQ(dist::all_gather_shape({3, 4}, 4, 1), (Shape{3, 16}));
  EXPECT_EQ(dist::all_gather_shape({3, 4}, 4, -1), (Shape{3, 16}));
  EXPECT_EQ(dist::all_gather_shape({0}, 4, 0), (Shape{0}));
  EXPECT_THROW(dist::all_gather_shape({3, 4}, 2, 2), ShapeError);
  EXPECT_THROW(dist::all_gather_shape(Shape{}, 2, 0), ShapeError);
  EXPECT_EQ(dist::reduce_scatter_shape({6, 4}, 3, 0), (Shape{2, 4}));
  EXPECT_EQ(dist::reduce_scatter_shape({6, 4}, 2, 1), (Shape{6, 2}));
  EXPECT_EQ(dist::reduce_scatter_shape({0, 4}, 2, 0), (Shape{0, 4}));
  try {
    dist::reduce_scatter_shape({5, 4}, 2, 0);
    FAIL() << "5 rows scattered over 2 ranks";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of the world size 2"), std::string::npos)
        << e.what();
  }
  EXPECT_STREQ(dist::reduce_op_name(dist::ReduceOp::Avg), "avg");
  EXPECT_STREQ(dist::reduce_op_name(dist::ReduceOp::Prod), "prod");
}

TEST(DistOptions, TimeoutAndCheckedModeFromTheEnvironment) {
  {
    ScopedEnv env("MT_DIST_TIMEOUT_S", std::nullopt);
    EXPECT_EQ(dist::default_timeout(), std::chrono::minutes(5));
  }
  {
    ScopedEnv env("MT_DIST_TIMEOUT_S", "2.5");
    EXPECT_EQ(dist::default_timeout(), std::chrono::milliseconds(2500));
    EXPECT_EQ(dist::CommOptions().timeout, std::chrono::milliseconds(2500));
  }
  for (const char* bad : {"0", "-1", "soon", "5s"}) {
    ScopedEnv env("MT_DIST_TIMEOUT_S", bad);
    EXPECT_THROW(dist::default_timeout(), InvalidArgument) << bad;
  }
  {
    ScopedEnv env("MT_DIST_CHECK", "1");
    EXPECT_TRUE(dist::default_checked());
  }
  {
    ScopedEnv env("MT_DIST_CHECK", "0");
    EXPECT_FALSE(dist::default_checked());
  }
  {
    ScopedEnv env("MT_DIST_CHECK", "yes");
    EXPECT_THROW(dist::default_checked(), InvalidArgument);
  }
  {
    ScopedEnv env("MT_DIST_BLOCKING", std::nullopt);
    EXPECT_TRUE(dist::default_blocking());
  }
  {
    ScopedEnv env("MT_DIST_BLOCKING", "0");
    EXPECT_FALSE(dist::default_blocking());
    EXPECT_FALSE(dist::CommOptions().blocking);
  }
  {
    ScopedEnv env("MT_DIST_BLOCKING", "1");
    EXPECT_TRUE(dist::default_blocking());
    EXPECT_TRUE(dist::CommOptions().blocking);
  }
  for (const char* bad : {"yes", "2", "true"}) {
    ScopedEnv env("MT_DIST_BLOCKING", bad);
    EXPECT_THROW(dist::default_blocking(), InvalidArgument) << bad;
  }
  {
    ScopedEnv env("MT_DIST_CHECK", std::nullopt);
#ifdef NDEBUG
    EXPECT_FALSE(dist::default_checked());
#else
    EXPECT_TRUE(dist::default_checked());
#endif
  }
}

// scripts/launch.sh, run through the shell: its exit status, and what it printed to `out`.
int run_launcher(const std::string& args, const std::string& out = "/dev/null", const std::string& env = "") {
  const std::string command =
      env + " bash " + std::string(MT_TEST_SOURCE_DIR) + "/scripts/launch.sh " + args + " > " + out + " 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The watchdog behind blocking communicators (dist/detail/watchdog.h), on the host alone: a watch runs its
// callback once after its timeout, never when disarmed in time; a short watch armed after a long one is not
// held up by it; a callback that throws leaves the watchdog working.
TEST(DistWatchdog, FiresOnceAfterItsTimeoutAndNeverWhenDisarmedInTime) {
  using dist::detail::Watch;
  using std::chrono::milliseconds;
  std::atomic<int> calls{0};
  {
    Watch quick(milliseconds(10'000), [&] { calls += 100; });
    quick.disarm();
    EXPECT_FALSE(quick.fired());
  }
  const auto start = std::chrono::steady_clock::now();
  {
    Watch slow(milliseconds(600'000), [&] { calls += 1000; });
    Watch watch(milliseconds(50), [&] { calls += 1; });
    while (!watch.fired() && std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
      std::this_thread::sleep_for(milliseconds(5));
    EXPECT_TRUE(watch.fired());
    EXPECT_FALSE(slow.fired());
    std::this_thread::sleep_for(milliseconds(100));
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, milliseconds(50));
  EXPECT_LT(elapsed, std::chrono::seconds(20));
  EXPECT_EQ(calls.load(), 1);  // once, and neither the disarmed nor the long watch
  {
    Watch throws(milliseconds(1), [] { throw std::runtime_error("a callback that throws"); });
    std::this_thread::sleep_for(milliseconds(50));
  }
  Watch after(milliseconds(1), [&] { calls += 1; });
  while (!after.fired() && std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
    std::this_thread::sleep_for(milliseconds(5));
  after.disarm();
  EXPECT_EQ(calls.load(), 2);
}

TEST(DistLaunchScript, UsageErrorsExitWithStatus2) {
  EXPECT_EQ(run_launcher(""), 2);
  EXPECT_EQ(run_launcher("2"), 2);
  EXPECT_EQ(run_launcher("0 true"), 2);
  EXPECT_EQ(run_launcher("-1 true"), 2);
  EXPECT_EQ(run_launcher("two true"), 2);
  EXPECT_EQ(run_launcher("2 /nonexistent/program"), 2);
  EXPECT_EQ(run_launcher("2 true", "/dev/null", "MT_NNODES=2 MT_NCCL_ID_FILE="),
            2);  // hosts need a shared id file
  EXPECT_EQ(run_launcher("2 true", "/dev/null", "MT_NNODES=2 MT_NODE_RANK=2 MT_NCCL_ID_FILE=/tmp/x"), 2);
}

TEST(DistLaunchScript, SetsTheRankEnvironmentOfEveryProcess) {
  const auto dir = fresh_dir("launch");
  const std::string out = (dir / "out.txt").string();
  ASSERT_EQ(run_launcher(
                "3 bash -c 'echo \"$RANK $WORLD_SIZE $LOCAL_RANK $NCCL_NVLS_ENABLE $MT_NCCL_ID_FILE\"'", out),
            0);
  std::ifstream in(out);
  std::vector<int> ranks;
  std::string id_file;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int rank = -1, world = -1, local = -1, nvls = -1;
    std::string file;
    fields >> rank >> world >> local >> nvls >> file;
    EXPECT_EQ(world, 3) << line;
    EXPECT_EQ(local, rank) << line;
    EXPECT_EQ(nvls, 0) << line;
    EXPECT_FALSE(file.empty()) << line;
    if (id_file.empty()) id_file = file;
    EXPECT_EQ(file, id_file) << "every rank shares one id file";
    ranks.push_back(rank);
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2}));
  std::filesystem::remove_all(dir);
}

TEST(DistLaunchScript, StopsTheOthersWhenOneFails) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(run_launcher("3 bash -c 'if [ \"$RANK\" = 1 ]; then exit 3; fi; sleep 120'"), 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

}  // namespace
}  // namespace mt
