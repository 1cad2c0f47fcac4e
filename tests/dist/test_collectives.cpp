// Each collective at 2 and 4 ranks from one process (Communicator::local, one thread per GPU, or one thread
// and a Group), against a host computation: sizes 0, 1, odd and large, every reduce op, non-contiguous
// tensors, in and out of place, asynchronous Work, CUDA-graph capture, and the dtypes NCCL carries.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>

#include "minitensor/runtime/error.h"
#include "minitensor/runtime/stream.h"
#include "tests/dist/dist_harness.h"

namespace mt {
namespace {

using dist::Communicator;
using dist::ReduceOp;
using test::on_each_rank;
using test::value;
using test::values;

constexpr std::int64_t kLarge = -1;  // a parameter meaning test::large_size()
constexpr float kGuard = 1234.0f;    // fills the elements a strided view skips: they must stay untouched

std::int64_t elements(std::int64_t param) {
  return param == kLarge ? test::large_size() : param;
}

// A 1-D view of n elements: contiguous, or every other element of an (n, 2) tensor whose other column holds
// kGuard.
Tensor make_vector(const std::vector<float>& data, bool contiguous, Device device) {
  const auto n = static_cast<std::int64_t>(data.size());
  if (contiguous) return from_vector(data, Shape{n}, device);
  std::vector<float> both(static_cast<std::size_t>(2 * n), kGuard);
  for (std::int64_t i = 0; i < n; ++i)
    both[static_cast<std::size_t>(2 * i)] = data[static_cast<std::size_t>(i)];
  return from_vector(both, Shape{n, 2}, device).select(1, 0);
}

// The kGuard column of a view made by make_vector(contiguous = false).
std::vector<float> guard_of(const Tensor& strided) {
  return strided.as_strided(strided.shape(), strided.strides(), strided.offset() + 1)
      .contiguous()
      .to_vector<float>();
}

std::vector<float> host(const Tensor& t) {
  return t.contiguous().to_vector<float>();
}

std::string case_name(const char* what, ReduceOp op, bool in_place, bool contiguous) {
  return std::string(what) + " " + dist::reduce_op_name(op) + (in_place ? " in place" : " out of place") +
         (contiguous ? "" : " non-contiguous");
}

// --- sizes x ranks

class DistSizes : public ::testing::TestWithParam<std::tuple<int, std::int64_t>> {};

TEST_P(DistSizes, AllReduce_EveryOp_InAndOutOfPlace) {
  const auto [n, param] = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  const std::int64_t count = elements(param);
  auto comms = Communicator::local(test::first_devices(n));
  for (ReduceOp op : test::kAllOps) {
    const std::vector<float> want = test::reduced(op, n, count);
    for (bool in_place : {true, false}) {
      for (bool contiguous : {true, false}) {
        const std::string what = case_name("all_reduce", op, in_place, contiguous);
        std::vector<std::vector<float>> got(static_cast<std::size_t>(n)), inputs(got), guards(got);
        on_each_rank(n, [&](int r) {
          const Device device = Device::cuda(r);
          Tensor x = make_vector(values(r, count), contiguous, device);
          Tensor out = in_place ? x
                                : make_vector(std::vector<float>(static_cast<std::size_t>(count), -99.f),
                                              contiguous, device);
          if (in_place) {
            dist::all_reduce(x, comms[static_cast<std::size_t>(r)], op);
          } else {
            dist::all_reduce(x, out, comms[static_cast<std::size_t>(r)], op);
          }
          comms[static_cast<std::size_t>(r)].synchronize();
          got[static_cast<std::size_t>(r)] = host(out);
          inputs[static_cast<std::size_t>(r)] = host(x);
          if (!contiguous) guards[static_cast<std::size_t>(r)] = guard_of(out);
        });
        for (int r = 0; r < n; ++r) {
          test::expect_equal(got[static_cast<std::size_t>(r)], want, what + ", rank " + std::to_string(r));
          if (!in_place)
            test::expect_equal(inputs[static_cast<std::size_t>(r)], values(r, count), what + ", input kept");
          if (!contiguous) {
            test::expect_equal(guards[static_cast<std::size_t>(r)],
                               std::vector<float>(static_cast<std::size_t>(count), kGuard),
                               what + ", skipped elements untouched");
          }
        }
      }
    }
  }
}

TEST_P(DistSizes, AllGather_AlongDim0AndDim1) {
  const auto [n, param] = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  const std::int64_t count = elements(param);
  auto comms = Communicator::local(test::first_devices(n));
  for (bool contiguous : {true, false}) {
    // dim 0 of a 1-D tensor: rank blocks end to end.
    std::vector<std::vector<float>> got(static_cast<std::size_t>(n));
    on_each_rank(n, [&](int r) {
      const Device device = Device::cuda(r);
      Tensor x = make_vector(values(r, count), contiguous, device);
      Tensor out =
          make_vector(std::vector<float>(static_cast<std::size_t>(n * count), -99.f), contiguous, device);
      dist::all_gather(x, out, comms[static_cast<std::size_t>(r)], 0);
      comms[static_cast<std::size_t>(r)].synchronize();
      got[static_cast<std::size_t>(r)] = host(out);
    });
    std::vector<float> want;
    for (int k = 0; k < n; ++k) {
      const auto v = values(k, count);
      want.insert(want.end(), v.begin(), v.end());
    }
    for (int r = 0; r < n; ++r)
      test::expect_equal(
          got[static_cast<std::size_t>(r)], want,
          "all_gather dim 0, rank " + std::to_string(r) + (contiguous ? "" : " non-contiguous"));

    // dim 1 of (3, count): out[i, k * count + j] = rank k's x[i, j]. Non-contiguous: transposed views. At
    // most 2^22 + 3 columns, so that MT_DIST_LARGE=1 stays within the host's memory.
    const std::int64_t columns = std::min<std::int64_t>(count, (std::int64_t{1} << 22) + 3);
    std::vector<std::vector<float>> got2(static_cast<std::size_t>(n));
    on_each_rank(n, [&](int r) {
      const Device device = Device::cuda(r);
      const std::vector<float> v = values(r, 3 * columns);
      Tensor x = from_vector(v, Shape{3, columns}, device);
      Tensor out = empty({3, n * columns}, DType::F32, device);
      if (!contiguous) {
        x = x.t().contiguous().t();  // same values, column-major
        out = empty({n * columns, 3}, DType::F32, device).t();
      }
      dist::all_gather(x, out, comms[static_cast<std::size_t>(r)], 1);
      comms[static_cast<std::size_t>(r)].synchronize();
      got2[static_cast<std::size_t>(r)] = host(out);
    });
    std::vector<float> want2(static_cast<std::size_t>(3 * n * columns));
    for (int k = 0; k < n; ++k)
      for (std::int64_t i = 0; i < 3; ++i)
        for (std::int64_t j = 0; j < columns; ++j)
          want2[static_cast<std::size_t>(i * n * columns + k * columns + j)] = value(k, i * columns + j);
    for (int r = 0; r < n; ++r)
      test::expect_equal(
          got2[static_cast<std::size_t>(r)], want2,
          "all_gather dim 1, rank " + std::to_string(r) + (contiguous ? "" : " non-contiguous"));
  }
}

TEST_P(DistSizes, ReduceScatter_EveryOp_AlongDim0AndDim1) {
  const auto [n, param] = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  const std::int64_t count = elements(param);
  auto comms = Communicator::local(test::first_devices(n));
  for (ReduceOp op : test::kAllOps) {
    // dim 0: input (n * count), rank r gets block r of the reduction.
    const std::vector<float> all = test::reduced(op, n, n * count);
    std::vector<std::vector<float>> got(static_cast<std::size_t>(n));
    on_each_rank(n, [&](int r) {
      const Device device = Device::cuda(r);
      Tensor x =
          make_vector(values(r, n * count), op != ReduceOp::Max, device);  // Max: a non-contiguous input
      Tensor out = empty({count}, DType::F32, device);
      dist::reduce_scatter(x, out, comms[static_cast<std::size_t>(r)], op, 0);
      comms[static_cast<std::size_t>(r)].synchronize();
      got[static_cast<std::size_t>(r)] = host(out);
    });
    for (int r = 0; r < n; ++r) {
      const std::vector<float> want(all.begin() + r * count, all.begin() + (r + 1) * count);
      test::expect_equal(
          got[static_cast<std::size_t>(r)], want,
          std::string("reduce_scatter dim 0 ") + dist::reduce_op_name(op) + ", rank " + std::to_string(r));
    }
    // dim 1: input (2, n * count), output (2, count) (non-contiguous for Min), at most 2^22 + 3 columns.
    const std::int64_t columns = std::min<std::int64_t>(count, (std::int64_t{1} << 22) + 3);
    const std::vector<float> all2 = test::reduced(op, n, 2 * n * columns);
    std::vector<std::vector<float>> got2(static_cast<std::size_t>(n));
    on_each_rank(n, [&](int r) {
      const Device device = Device::cuda(r);
      Tensor x = from_vector(values(r, 2 * n * columns), Shape{2, n * columns}, device);
      Tensor out = op == ReduceOp::Min ? empty({columns, 2}, DType::F32, device).t()
                                       : empty({2, columns}, DType::F32, device);
      dist::reduce_scatter(x, out, comms[static_cast<std::size_t>(r)], op, 1);
      comms[static_cast<std::size_t>(r)].synchronize();
      got2[static_cast<std::size_t>(r)] = host(out);
    });
    for (int r = 0; r < n; ++r) {
      std::vector<float> want(static_cast<std::size_t>(2 * columns));
      for (std::int64_t i = 0; i < 2; ++i)
        for (std::int64_t j = 0; j < columns; ++j)
          want[static_cast<std::size_t>(i * columns + j)] =
              all2[static_cast<std::size_t>(i * n * columns + r * columns + j)];
      test::expect_equal(
          got2[static_cast<std::size_t>(r)], want,
          std::string("reduce_scatter dim 1 ") + dist::reduce_op_name(op) + ", rank " + std::to_string(r));
    }
  }
}

TEST_P(DistSizes, Broadcast_FromTheLastRank) {
  const auto [n, param] = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  const std::int64_t count = elements(param);
  auto comms = Communicator::local(test::first_devices(n));
  for (bool contiguous : {true, false}) {
    std::vector<std::vector<float>> got(static_cast<std::size_t>(n)), guards(got);
    on_each_rank(n, [&](int r) {
      Tensor x = make_vector(values(r, count), contiguous, Device::cuda(r));
      dist::broadcast(x, n - 1, comms[static_cast<std::size_t>(r)]);
      comms[static_cast<std::size_t>(r)].synchronize();
      got[static_cast<std::size_t>(r)] = host(x);
      if (!contiguous) guards[static_cast<std::size_t>(r)] = guard_of(x);
    });
    for (int r = 0; r < n; ++r) {
      test::expect_equal(got[static_cast<std::size_t>(r)], values(n - 1, count),
                         "broadcast, rank " + std::to_string(r));
      if (!contiguous)
        test::expect_equal(guards[static_cast<std::size_t>(r)],
                           std::vector<float>(static_cast<std::size_t>(count), kGuard), "broadcast guard");
    }
  }
}

std::string sizes_name(const ::testing::TestParamInfo<std::tuple<int, std::int64_t>>& info) {
  const auto [n, param] = info.param;
  return "Ranks" + std::to_string(n) + "_" +
         (param == kLarge ? std::string("Large") : "Elements" + std::to_string(param));
}

INSTANTIATE_TEST_SUITE_P(Dist, DistSizes,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values(0, 1, 1001, kLarge)),
                         sizes_name);

// --- ranks only

class DistRanks : public ::testing::TestWithParam<int> {};

TEST_P(DistRanks, SendRecv_RingInsideAGroup) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  constexpr std::int64_t kCount = 1001;
  auto comms = Communicator::local(test::first_devices(n));
  std::vector<std::vector<float>> got(static_cast<std::size_t>(n));
  on_each_rank(n, [&](int r) {
    const Device device = Device::cuda(r);
    Communicator& comm = comms[static_cast<std::size_t>(r)];
    Tensor x = make_vector(values(r, kCount), false, device);  // non-contiguous on both sides
    Tensor y = make_vector(std::vector<float>(kCount, -99.f), false, device);
    {
      dist::Group group;
      dist::send(x, (r + 1) % n, comm);
      dist::recv(y, (r + n - 1) % n, comm);
      group.end();
    }
    comm.synchronize();
    got[static_cast<std::size_t>(r)] = host(y);
  });
  for (int r = 0; r < n; ++r)
    test::expect_equal(got[static_cast<std::size_t>(r)], values((r + n - 1) % n, kCount), "ring recv");
}

TEST_P(DistRanks, AsyncWork_WaitAndSynchronize) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  constexpr std::int64_t kCount = 1 << 20;
  auto comms = Communicator::local(test::first_devices(n));
  std::vector<std::vector<float>> waited(static_cast<std::size_t>(n)), synced(waited);
  on_each_rank(n, [&](int r) {
    const Device device = Device::cuda(r);
    Communicator& comm = comms[static_cast<std::size_t>(r)];
    Tensor x = from_vector(values(r, kCount), Shape{kCount}, device);
    dist::Work work = dist::all_reduce(x, comm, ReduceOp::Sum, {.async_op = true});
    EXPECT_TRUE(work.pending());
    work.wait();  // the current stream now follows the collective: reading x on it is ordered
    waited[static_cast<std::size_t>(r)] = host(x);
    Tensor y = from_vector(values(r, kCount), Shape{kCount}, device);
    Tensor z = empty({kCount}, DType::F32, device);
    dist::Work work2 = dist::all_reduce(y, z, comm, ReduceOp::Max, {.async_op = true});
    y = Tensor();  // freeing an input while the collective may still run is safe (record_stream)
    work2.synchronize();
    EXPECT_TRUE(work2.is_completed());
    synced[static_cast<std::size_t>(r)] = host(z);
  });
  for (int r = 0; r < n; ++r) {
    test::expect_equal(waited[static_cast<std::size_t>(r)], test::reduced(ReduceOp::Sum, n, kCount),
                       "async wait");
    test::expect_equal(synced[static_cast<std::size_t>(r)], test::reduced(ReduceOp::Max, n, kCount),
                       "async synchronize");
  }
}

TEST_P(DistRanks, Group_OneThreadDrivesEveryGpu) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  constexpr std::int64_t kCount = 1001;
  auto comms = Communicator::local(test::first_devices(n));
  // The collectives of one group are independent: none reads what another writes.
  std::vector<Tensor> xs, ys, gathered;
  for (int r = 0; r < n; ++r) {
    xs.push_back(make_vector(values(r, kCount), r % 2 == 0, Device::cuda(r)));  // some non-contiguous
    ys.push_back(make_vector(values(r, kCount), r % 2 == 1, Device::cuda(r)));
    gathered.push_back(empty({1, n * kCount}, DType::F32, Device::cuda(r)));
  }
  {
    dist::Group group;
    for (int r = 0; r < n; ++r)
      dist::all_reduce(xs[static_cast<std::size_t>(r)], comms[static_cast<std::size_t>(r)], ReduceOp::Prod);
    for (int r = 0; r < n; ++r) {
      dist::all_gather(ys[static_cast<std::size_t>(r)].unsqueeze(0), gathered[static_cast<std::size_t>(r)],
                       comms[static_cast<std::size_t>(r)], 1);
    }
    group.end();
  }
  const std::vector<float> prod = test::reduced(ReduceOp::Prod, n, kCount);
  std::vector<float> tiled;
  for (int r = 0; r < n; ++r) {
    const std::vector<float> v = values(r, kCount);
    tiled.insert(tiled.end(), v.begin(), v.end());
  }
  for (int r = 0; r < n; ++r) {
    comms[static_cast<std::size_t>(r)].synchronize();
    DeviceGuard guard(r);
    test::expect_equal(host(xs[static_cast<std::size_t>(r)]), prod,
                       "grouped all_reduce, rank " + std::to_string(r));
    test::expect_equal(host(gathered[static_cast<std::size_t>(r)]), tiled,
                       "grouped all_gather, rank " + std::to_string(r));
  }
}

TEST_P(DistRanks, CapturedInACudaGraph_PerThread) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  constexpr std::int64_t kCount = 4099;
  auto comms = Communicator::local(test::first_devices(n));
  std::vector<std::vector<float>> got(static_cast<std::size_t>(n));
  on_each_rank(n, [&](int r) {
    const Device device = Device::cuda(r);
    Communicator& comm = comms[static_cast<std::size_t>(r)];
    Stream stream(r);
    StreamGuard on(stream.get(), r);
    Tensor x = from_vector(values(r, kCount), Shape{kCount}, device);
    dist::all_reduce(x, comm);  // outside capture first: NCCL connects its peers
    comm.synchronize();
    x.copy_(from_vector(values(r, kCount), Shape{kCount}));
    stream.synchronize();
    // Capture per thread, thread-local mode: several GPUs captured from one thread can deadlock.
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    MT_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    dist::all_reduce(x, comm);
    MT_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
    MT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    MT_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));  // x = sum over ranks
    MT_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));  // x = n * sum
    stream.synchronize();
    got[static_cast<std::size_t>(r)] = host(x);
    MT_CUDA_CHECK(cudaGraphExecDestroy(exec));
    MT_CUDA_CHECK(cudaGraphDestroy(graph));
  });
  std::vector<float> want = test::reduced(ReduceOp::Sum, n, kCount);
  for (float& v : want) v *= static_cast<float>(n);
  for (int r = 0; r < n; ++r)
    test::expect_equal(got[static_cast<std::size_t>(r)], want,
                       "captured all_reduce, rank " + std::to_string(r));
}

TEST_P(DistRanks, Barrier_AndItsAsyncForm) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  auto comms = Communicator::local(test::first_devices(n));
  on_each_rank(n, [&](int r) {
    Communicator& comm = comms[static_cast<std::size_t>(r)];
    EXPECT_FALSE(dist::barrier(comm).pending());
    dist::Work work = dist::barrier(comm, {.async_op = true});
    work.synchronize();
  });
}

TEST_P(DistRanks, IntegerDTypes) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  constexpr std::int64_t kCount = 1001;
  auto comms = Communicator::local(test::first_devices(n));
  const auto i32 = [](int r, std::int64_t i) { return static_cast<std::int32_t>((i * 5 + r * 3) % 11); };
  const auto u8 = [](int r, std::int64_t i) { return static_cast<std::uint8_t>((i * 37 + r * 101) % 256); };
  for (ReduceOp op : test::kAllOps) {
    std::vector<std::vector<std::int32_t>> got32(static_cast<std::size_t>(n));
    std::vector<std::vector<std::uint8_t>> got8(static_cast<std::size_t>(n));
    on_each_rank(n, [&](int r) {
      std::vector<std::int32_t> a(kCount);
      std::vector<std::uint8_t> b(kCount);
      for (std::int64_t i = 0; i < kCount; ++i) {
        a[static_cast<std::size_t>(i)] = i32(r, i);
        b[static_cast<std::size_t>(i)] = u8(r, i);
      }
      Tensor x = from_vector(a, Device::cuda(r));
      Tensor y = from_vector(b, Device::cuda(r));
      dist::all_reduce(x, comms[static_cast<std::size_t>(r)], op);
      dist::all_reduce(y, comms[static_cast<std::size_t>(r)], op);
      comms[static_cast<std::size_t>(r)].synchronize();
      got32[static_cast<std::size_t>(r)] = x.to_vector<std::int32_t>();
      got8[static_cast<std::size_t>(r)] = y.to_vector<std::uint8_t>();
    });
    std::vector<std::int32_t> want32(kCount);
    std::vector<std::uint8_t> want8(kCount);
    for (std::int64_t i = 0; i < kCount; ++i) {
      std::vector<std::int32_t> a;
      std::vector<std::uint8_t> b;
      for (int r = 0; r < n; ++r) {
        a.push_back(i32(r, i));
        b.push_back(u8(r, i));
      }
      want32[static_cast<std::size_t>(i)] = test::reduce_host(op, a);
      // uint8 sums and products wrap modulo 256, as NCCL's do; the average divides that wrapped sum.
      want8[static_cast<std::size_t>(i)] = test::reduce_host(op, b);
    }
    for (int r = 0; r < n; ++r) {
      test::expect_equal(got32[static_cast<std::size_t>(r)], want32,
                         std::string("int32 ") + dist::reduce_op_name(op));
      test::expect_equal(got8[static_cast<std::size_t>(r)], want8,
                         std::string("uint8 ") + dist::reduce_op_name(op));
    }
  }
}

// Both kinds of communicator (CommOptions::blocking: launched in the calling thread, the default; or handed
// to NCCL's thread): the same collectives, the same results; a rebuild keeps the setting.
TEST_P(DistRanks, BlockingAndNonblockingCommunicators_AllReduceAndAllGather) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  for (const bool blocking : {true, false}) {
    SCOPED_TRACE(blocking ? "blocking" : "nonblocking");
    dist::CommOptions options;
    options.blocking = blocking;
    auto comms = Communicator::local(test::first_devices(n), options);
    for (int round = 0; round < 2; ++round) {
      on_each_rank(n, [&](int r) {
        Communicator& comm = comms[static_cast<std::size_t>(r)];
        Tensor x = full({1001}, 1.0 + r, DType::F32, Device::cuda(r));
        dist::all_reduce(x, comm);
        Tensor g = empty({n * 3}, DType::F32, Device::cuda(r));
        dist::all_gather(full({3}, 1.0 * r, DType::F32, Device::cuda(r)), g, comm);
        comm.synchronize();
        const std::vector<float> sum = x.to_vector<float>();
        EXPECT_EQ(sum.front(), n * (n + 1) / 2.0f);
        EXPECT_EQ(sum.back(), n * (n + 1) / 2.0f);
        const std::vector<float> gathered = g.to_vector<float>();
        for (int i = 0; i < n * 3; ++i)
          EXPECT_EQ(gathered[static_cast<std::size_t>(i)], static_cast<float>(i / 3));
      });
      if (round == 0) Communicator::rebuild_local(comms);
    }
  }
}

// The ranks of a local() set meet on the host: nobody passes before the last comes; a rank left alone times
// out with DistError, and the set meets again afterwards.
TEST_P(DistRanks, MeetLocal_WaitsForEveryRank_AndTimesOutAlone) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  auto comms = Communicator::local(test::first_devices(n));
  std::atomic<int> arrived{0};
  for (int round = 0; round < 2; ++round) {
    on_each_rank(n, [&](int r) {
      if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      arrived.fetch_add(1);
      comms[static_cast<std::size_t>(r)].meet_local();
      EXPECT_GE(arrived.load(), (round + 1) * n);  // every rank of this round came first
    });
    arrived.store((round + 1) * n);
    if (round == 0) {
      comms[0].set_timeout(std::chrono::milliseconds(200));
      try {
        comms[0].meet_local();
        ADD_FAILURE() << "a rank meeting alone passed";
      } catch (const DistError& e) {
        EXPECT_NE(std::string(e.what()).find("other ranks of this process"), std::string::npos) << e.what();
      }
      EXPECT_FALSE(comms[0].aborted());
      comms[0].set_timeout(std::chrono::seconds(60));
    }
  }
}

// One process, a thread per rank: rank 0 downloads its all-reduce's result while the other ranks are still
// allocating fresh device memory before they join. The download must not block inside the driver while its
// collective waits for them (their cudaMalloc would wait for that lock: a deadlock). A watchdog turns a hang
// into a failure: the stuck threads cannot be joined, so the process exits.
TEST_P(DistRanks, DownloadWhileAPeerStillAllocates_Finishes) {
  const int n = GetParam();
  MT_REQUIRE_GPUS(n);
  MT_REQUIRE_NCCL();
  auto comms = Communicator::local(test::first_devices(n));
  auto done = std::make_shared<std::promise<std::string>>();
  std::thread([&comms, n, done] {
    std::string failure;
    try {
      on_each_rank(n, [&](int r) {
        Communicator& comm = comms[static_cast<std::size_t>(r)];
        Tensor x = full({1 << 20}, 1.0 + r, DType::F32, Device::cuda(r));
        if (r != 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          // Larger than anything a test caches: a fresh cudaMalloc.
          Tensor fresh = empty({std::int64_t{3} << 28}, DType::F32, Device::cuda(r));
          (void)fresh;
        }
        dist::all_reduce(x, comm);
        const std::vector<float> sum = x.to_vector<float>();
        if (sum.front() != n * (n + 1) / 2.0f || sum.back() != n * (n + 1) / 2.0f)
          throw std::runtime_error("rank " + std::to_string(r) + ": wrong sum " +
                                   std::to_string(sum.front()));
      });
    } catch (const std::exception& e) {
      failure = e.what();
    }
    done->set_value(failure);
  }).detach();
  std::future<std::string> result = done->get_future();
  if (result.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "deadlock: rank 0's download and a peer's allocation still wait after 60 s";
    std::fflush(stdout);
    std::_Exit(1);
  }
  EXPECT_EQ(result.get(), "");
}

INSTANTIATE_TEST_SUITE_P(Dist, DistRanks, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "Ranks" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace mt
