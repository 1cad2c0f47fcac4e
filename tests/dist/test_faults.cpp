// Faults at 2 ranks from one process: mismatched calls in checked mode are typed errors on every rank, an
// aborted communicator is rebuilt and works, and a peer that never joins gives DistError within the
// timeout instead of a hang.
#include <chrono>
#include <string>

#include "tests/dist/dist_harness.h"

namespace mt {
namespace {

using dist::CommOptions;
using dist::Communicator;
using dist::ReduceOp;
using test::on_each_rank;
using test::values;

CommOptions checked_options() {
  CommOptions options;
  options.checked = true;
  options.timeout = std::chrono::seconds(60);
  return options;
}

// What each rank's call threw (its what()), "" when it returned.
template <class Error, class Fn>
std::vector<std::string> errors_on_each_rank(int n, Fn&& fn) {
  std::vector<std::string> out(static_cast<std::size_t>(n));
  on_each_rank(n, [&](int r) {
    try {
      fn(r);
    } catch (const Error& e) {
      out[static_cast<std::size_t>(r)] = e.what();
    }
  });
  return out;
}

TEST(DistFaults, CheckedMode_MismatchedShapeDTypeOrOpIsATypedErrorOnEveryRank) {
  MT_REQUIRE_GPUS(2);
  MT_REQUIRE_NCCL();
  auto comms = Communicator::local({0, 1}, checked_options());
  const auto shapes = errors_on_each_rank<ShapeError>(2, [&](int r) {
    Tensor x = zeros({5 + r}, DType::F32, Device::cuda(r));
    dist::all_reduce(x, comms[static_cast<std::size_t>(r)]);
  });
  for (const std::string& what : shapes) {
    EXPECT_NE(what.find("rank 0 has shape (5) but rank 1 has (6)"), std::string::npos) << what;
    EXPECT_NE(what.find("all_reduce"), std::string::npos) << what;
  }
  const auto dtypes = errors_on_each_rank<DTypeError>(2, [&](int r) {
    Tensor x = zeros({8}, r == 0 ? DType::F32 : DType::I32, Device::cuda(r));
    dist::broadcast(x, 0, comms[static_cast<std::size_t>(r)]);
  });
  for (const std::string& what : dtypes)
    EXPECT_NE(what.find("rank 0 has dtype float32 but rank 1 has int32"), std::string::npos) << what;
  const auto ops = errors_on_each_rank<InvalidArgument>(2, [&](int r) {
    Tensor x = zeros({8}, DType::F32, Device::cuda(r));
    dist::all_reduce(x, comms[static_cast<std::size_t>(r)], r == 0 ? ReduceOp::Sum : ReduceOp::Max);
  });
  for (const std::string& what : ops)
    EXPECT_NE(what.find("rank 0 reduces with sum but rank 1 with max"), std::string::npos) << what;
  // The communicator is still good: a matching call goes through.
  std::vector<std::vector<float>> got(2);
  on_each_rank(2, [&](int r) {
    Tensor x = from_vector(values(r, 1001), Device::cuda(r));
    dist::all_reduce(x, comms[static_cast<std::size_t>(r)]);
    comms[static_cast<std::size_t>(r)].synchronize();
    got[static_cast<std::size_t>(r)] = x.to_vector<float>();
  });
  for (const auto& g : got)
    test::expect_equal(g, test::reduced(ReduceOp::Sum, 2, 1001), "after the mismatches");
}

TEST(DistFaults, WrongDeviceIsDeviceError) {
  MT_REQUIRE_GPUS(2);
  MT_REQUIRE_NCCL();
  auto comms = Communicator::local({0, 1});
  Tensor on_1 = zeros({4}, DType::F32, Device::cuda(1));
  try {
    dist::all_reduce(on_1, comms[0]);
    FAIL() << "a tensor on cuda:1 went through rank 0's communicator";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("is on cuda:1 but the communicator (rank 0) is on cuda:0"),
              std::string::npos)
        << e.what();
  }
}

TEST(DistFaults, AbortThenRebuildThenACollectiveSucceeds) {
  MT_REQUIRE_GPUS(2);
  MT_REQUIRE_NCCL();
  auto comms = Communicator::local({0, 1});
  on_each_rank(2, [&](int r) {
    Tensor x = from_vector(values(r, 1001), Device::cuda(r));
    dist::all_reduce(x, comms[static_cast<std::size_t>(r)]);
    comms[static_cast<std::size_t>(r)].synchronize();
  });
  for (auto& c : comms) c.abort();
  EXPECT_TRUE(comms[0].aborted());
  Tensor x0 = zeros({4}, DType::F32, Device::cuda(0));
  try {
    dist::all_reduce(x0, comms[0]);
    FAIL() << "an aborted communicator took a collective";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
    EXPECT_EQ(e.rank(), 0);
    EXPECT_EQ(e.world_size(), 2);
  }
  Communicator::rebuild_local(comms);
  EXPECT_FALSE(comms[0].aborted());
  std::vector<std::vector<float>> got(2);
  on_each_rank(2, [&](int r) {
    Tensor x = from_vector(values(r, 1001), Device::cuda(r));
    dist::all_reduce(x, comms[static_cast<std::size_t>(r)], ReduceOp::Min);
    comms[static_cast<std::size_t>(r)].synchronize();
    got[static_cast<std::size_t>(r)] = x.to_vector<float>();
  });
  for (const auto& g : got) test::expect_equal(g, test::reduced(ReduceOp::Min, 2, 1001), "after rebuild");
}

// Both kinds of communicator. A blocking one (the default) waits for the absent peer inside NCCL when the
// collective is the first between the two ranks (the barrier below): the watchdog aborts it.
TEST(DistFaults, APeerThatNeverJoinsGivesDistErrorWithinTheTimeout) {
  MT_REQUIRE_GPUS(2);
  MT_REQUIRE_NCCL();
  for (const bool blocking : {true, false}) {
    SCOPED_TRACE(blocking ? "blocking" : "nonblocking");
    CommOptions options;
    options.timeout = std::chrono::seconds(5);
    options.checked = false;
    options.blocking = blocking;
    auto comms = Communicator::local({0, 1}, options);
    // Once together, so that the peers are connected: what follows is the collective rank 1 never joins.
    on_each_rank(2, [&](int r) {
      Tensor x = from_vector(values(r, 1001), Device::cuda(r));
      dist::all_reduce(x, comms[static_cast<std::size_t>(r)]);
      comms[static_cast<std::size_t>(r)].synchronize();
    });
    DeviceGuard guard(0);
    Tensor x = from_vector(values(0, 1001), Device::cuda(0));
    const auto start = std::chrono::steady_clock::now();
    try {
      dist::Work work = dist::all_reduce(x, comms[0], ReduceOp::Sum, {.async_op = true});
      work.synchronize();
      FAIL() << "an all_reduce without its peer finished";
    } catch (const DistError& e) {
      EXPECT_NE(std::string(e.what()).find("timed out after 5 s"), std::string::npos) << e.what();
      EXPECT_EQ(e.op(), "all_reduce");
    }
    const auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_GE(elapsed, std::chrono::seconds(4));
    EXPECT_LT(elapsed, std::chrono::seconds(30));
    EXPECT_TRUE(comms[0].aborted());
    comms[1].abort();
    // The device is usable again: NCCL's kernel left when the communicator was aborted.
    Tensor y = from_vector(values(0, 16), Device::cuda(0));
    test::expect_equal(y.to_vector<float>(), values(0, 16), "device 0 after the abort");

    // A barrier (a host wait) without its peer, the first collective of fresh communicators: the same.
    Communicator::rebuild_local(comms);
    comms[0].set_timeout(std::chrono::seconds(3));
    const auto start2 = std::chrono::steady_clock::now();
    try {
      dist::barrier(comms[0]);
      FAIL() << "a barrier without its peer returned";
    } catch (const DistError& e) {
      EXPECT_NE(std::string(e.what()).find("timed out after 3 s"), std::string::npos) << e.what();
      EXPECT_EQ(e.op(), "barrier");
    }
    EXPECT_GE(std::chrono::steady_clock::now() - start2, std::chrono::milliseconds(2500));
    EXPECT_LT(std::chrono::steady_clock::now() - start2, std::chrono::seconds(30));
    EXPECT_TRUE(comms[0].aborted());
    comms[1].abort();
    // And the pair works again once rebuilt.
    Communicator::rebuild_local(comms);
    on_each_rank(2, [&](int r) {
      Tensor z = from_vector(values(r, 33), Device::cuda(r));
      dist::all_reduce(z, comms[static_cast<std::size_t>(r)]);
      comms[static_cast<std::size_t>(r)].synchronize();
      test::expect_equal(z.to_vector<float>(), test::reduced(ReduceOp::Sum, 2, 33), "after the timeout");
    });
  }
}

}  // namespace
}  // namespace mt
