// mt::dist across processes: run by ctest through scripts/launch.sh (tests/dist/run_launched.sh), one process
// per GPU, each rank's communicator from the environment. Run directly, without RANK set, they skip.
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "tests/dist/dist_harness.h"

namespace mt {
namespace {

using dist::Communicator;
using dist::ReduceOp;
using test::values;

#define MT_REQUIRE_LAUNCHED()                                                                       \
  do {                                                                                              \
    if (!std::getenv("RANK"))                                                                       \
      GTEST_SKIP() << "runs as several processes: ctest -R dist.launch2 (scripts/launch.sh 2 ...)"; \
  } while (0)

// One communicator for the suite's tests in this process: the id file of a launch serves one id.
Communicator& launched_comm() {
  // Left to the process's exit on purpose: destroying communicators after main needs a live CUDA runtime.
  static Communicator* comm = new Communicator(Communicator::from_env());
  return *comm;
}

TEST(DistLaunched, AllReduceAllGatherReduceScatterBroadcast) {
  MT_REQUIRE_GPUS(2);
  MT_REQUIRE_NCCL();
  MT_REQUIRE_LAUNCHED();
  Communicator& comm = launched_comm();
  const int n = comm.size(), r = comm.rank();
  const Device device = Device::cuda(comm.device());
  DeviceGuard guard(device);
  constexpr std::int64_t kCount = 1001;

  Tensor x = from_vector(values(r, kCount), device);
  dist::all_reduce(x, comm, ReduceOp::Sum);
  comm.synchronize();
  test::expect_equal(x.to_vector<float>(), test::reduced(ReduceOp::Sum, n, kCount), "all_reduce");

  Tensor gathered = empty({n * kCount}, DType::F32, device);
  dist::all_gather(from_vector(values(r, kCount), device), gathered, comm);
  comm.synchronize();
  std::vector<float> want;
  for (int k = 0; k < n; ++k) {
    const auto v = values(k, kCount);
    want.insert(want.end(), v.begin(), v.end());
  }
  test::expect_equal(gathered.to_vector<float>(), want, "all_gather");

  Tensor scattered = empty({kCount}, DType::F32, device);
  dist::reduce_scatter(from_vector(values(r, n * kCount), device), scattered, comm, ReduceOp::Max);
  comm.synchronize();
  const auto all = test::reduced(ReduceOp::Max, n, n * kCount);
  test::expect_equal(scattered.to_vector<float>(),
                     std::vector<float>(all.begin() + r * kCount, all.begin() + (r + 1) * kCount),
                     "reduce_scatter");

  Tensor b = from_vector(values(r, kCount), device);
  dist::broadcast(b, 0, comm);
  comm.synchronize();
  test::expect_equal(b.to_vector<float>(), values(0, kCount), "broadcast");
}

TEST(DistLaunched, SendRecvAndBarrier) {
  MT_REQUIRE_GPUS(2);
  MT_REQUIRE_NCCL();
  MT_REQUIRE_LAUNCHED();
  Communicator& comm = launched_comm();
  const int r = comm.rank();
  const Device device = Device::cuda(comm.device());
  DeviceGuard guard(device);
  constexpr std::int64_t kCount = 4097;
  if (r == 0) {
    dist::send(from_vector(values(0, kCount), device), 1, comm);
  } else if (r == 1) {
    Tensor y = empty({kCount}, DType::F32, device);
    dist::recv(y, 0, comm);
    comm.synchronize();
    test::expect_equal(y.to_vector<float>(), values(0, kCount), "recv from rank 0");
  }
  dist::barrier(comm);
  dist::barrier(comm, {.async_op = true}).synchronize();
}

TEST(DistLaunchedFault, ARankThatThrowsBeforeACollectiveGivesItsPeerDistError) {
  MT_REQUIRE_GPUS(2);
  MT_REQUIRE_NCCL();
  MT_REQUIRE_LAUNCHED();
  dist::CommOptions options;
  options.timeout = std::chrono::seconds(10);
  options.checked = false;
  Communicator comm = Communicator::from_env(options);
  const Device device = Device::cuda(comm.device());
  DeviceGuard guard(device);
  Tensor x = from_vector(values(comm.rank(), 1001), device);
  dist::all_reduce(x, comm);  // together once: the peers are connected
  comm.synchronize();
  if (comm.rank() == 1) {
    try {
      throw std::runtime_error("rank 1 fails before the collective");
    } catch (const std::runtime_error&) {
      comm.abort();  // and leaves: no collective, no hang at exit
      return;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    dist::all_reduce(x, comm, ReduceOp::Sum, {.async_op = true}).synchronize();
    comm.synchronize();
    FAIL() << "the all_reduce finished without rank 1";
  } catch (const DistError& e) {
    EXPECT_EQ(e.rank(), comm.rank());
    EXPECT_EQ(e.world_size(), comm.size());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(40));
  EXPECT_TRUE(comm.aborted());
}

// A peer that is alive but never joins, as processes: the first collective of a fresh blocking communicator
// waits inside NCCL (connecting the ranks needs the peer), and the watchdog ends it with DistError at the
// timeout. Its own launch (a communicator per launch: the id file serves one id).
TEST(DistLaunchedWatchdog, AFirstCollectiveWithoutItsPeerTimesOutInsideNccl) {
  MT_REQUIRE_GPUS(2);
  MT_REQUIRE_NCCL();
  MT_REQUIRE_LAUNCHED();
  dist::CommOptions options;
  options.timeout = std::chrono::seconds(3);
  options.checked = false;
  options.blocking = true;
  Communicator comm = Communicator::from_env(options);
  if (comm.rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(8));  // alive, and never in the collective
    comm.abort();
    return;
  }
  const Device device = Device::cuda(comm.device());
  DeviceGuard guard(device);
  Tensor x = from_vector(values(0, 1001), device);
  const auto start = std::chrono::steady_clock::now();
  try {
    dist::all_reduce(x, comm);
    comm.synchronize();
    FAIL() << "the first all_reduce finished without its peers";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("timed out after 3 s"), std::string::npos) << e.what();
    EXPECT_EQ(e.rank(), 0);
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, std::chrono::milliseconds(2500));
  EXPECT_LT(elapsed, std::chrono::seconds(30));
  EXPECT_TRUE(comm.aborted());
  // The device is usable afterwards.
  Tensor y = from_vector(values(0, 16), device);
  test::expect_equal(y.to_vector<float>(), values(0, 16), "the device after the watchdog");
}

}  // namespace
}  // namespace mt
