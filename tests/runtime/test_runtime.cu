#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "minitensor/runtime/runtime.h"
#include "tests/common/gpu.h"

namespace mt {
namespace {

TEST(Errors, CudaCheckThrowsCudaErrorWithContext) {
  try {
    MT_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "no throw";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidValue);
    EXPECT_EQ(e.expr(), "cudaErrorInvalidValue");
    EXPECT_NE(std::string(e.what()).find("test_runtime.cu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cudaErrorInvalidValue"), std::string::npos) << e.what();
  }
}

TEST(Errors, HierarchyIsCatchableAsError) {
  EXPECT_THROW(MT_THROW(ShapeError, "bad shape ", 3), Error);
  EXPECT_THROW(MT_THROW(DTypeError, "x"), Error);
  EXPECT_THROW(MT_THROW(DeviceError, "x"), Error);
  EXPECT_THROW(MT_THROW(OutOfMemoryError, "x"), Error);
  EXPECT_THROW(MT_THROW(InvalidArgument, "x"), std::runtime_error);
  try {
    MT_CHECK(1 + 1 == 3, ShapeError, "add: cannot broadcast ", "(3, 4)", " with ", "(5, 4)");
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "add: cannot broadcast (3, 4) with (5, 4)");
  }
}

TEST(Errors, NothrowCheckLogsInsteadOfThrowing) {
  testing::internal::CaptureStderr();
  MT_CUDA_CHECK_NOTHROW(cudaErrorInvalidValue);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cudaErrorInvalidValue"), std::string::npos) << err;
}

TEST(Device, CpuAndCudaDescriptors) {
  EXPECT_TRUE(Device::cpu().is_cpu());
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
  EXPECT_EQ(Device::cuda(1), Device::cuda(1));
  EXPECT_NE(Device::cuda(0), Device::cpu());
  EXPECT_NO_THROW(check_device(Device::cpu()));
}

TEST(Device, NonexistentDeviceRaisesDeviceError) {
  const int n = cuda_device_count();
  EXPECT_GE(n, 0);
  try {
    check_device(Device::cuda(n + 5));
    FAIL() << "no throw";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:" + std::to_string(n + 5)), std::string::npos) << e.what();
  }
  EXPECT_THROW(device_properties(n + 5), DeviceError);
  EXPECT_THROW(DeviceGuard g(Device::cuda(n + 5)), DeviceError);
  EXPECT_THROW(current_stream(n + 5), DeviceError);
  EXPECT_THROW(Stream s(n + 5), DeviceError);
  // The process stays usable.
  EXPECT_EQ(cuda_device_count(), n);
  EXPECT_FALSE(device_report().empty());
}

TEST(Device, ReportDescribesTheDevicesOrTheirAbsence) {
  const std::string report = device_report();
  if (cuda_available()) {
    EXPECT_NE(report.find("CUDA devices: " + std::to_string(cuda_device_count())), std::string::npos)
        << report;
    EXPECT_NE(report.find("cuda:0"), std::string::npos) << report;
  } else {
    EXPECT_NE(report.find("none"), std::string::npos) << report;
    EXPECT_THROW(check_device(Device::cuda(0)), DeviceError);
  }
}

// Why there is no device, as one sentence, in the report and in check_device's error; a machine without the
// driver library is told that, not the runtime's "driver version is insufficient".
TEST(Device, UnavailableReasonNamesAMissingDriver) {
  const std::string reason = cuda_unavailable_reason();
  if (cuda_available()) {
    EXPECT_EQ(reason, "");
    return;
  }
  ASSERT_FALSE(reason.empty());
  EXPECT_EQ(device_report(), "CUDA devices: none (" + reason + ")\n");
  try {
    check_device(Device::cuda(0));
    FAIL() << "no throw";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver) {
    dlclose(driver);
    EXPECT_EQ(reason.find("libcuda.so.1 not loadable"), std::string::npos) << reason;
  } else {
    EXPECT_EQ(reason, "no NVIDIA driver found (libcuda.so.1 not loadable)");
    EXPECT_NE(reason.find("driver"), std::string::npos) << reason;
  }
  EXPECT_EQ(cuda_unavailable_reason(), reason);  // the same every time
}

TEST(DeviceGpu, PropertiesAreCachedAndSane) {
  MT_REQUIRE_GPU();
  const DeviceProperties& p = device_properties(0);
  EXPECT_EQ(&p, &device_properties(0));
  EXPECT_GT(p.sm_count, 0);
  EXPECT_GT(p.l2_bytes, 0);
  EXPECT_GE(p.smem_per_block_optin, p.smem_per_block);
  EXPECT_GT(p.total_memory, 0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_NE(device_report().find(p.name), std::string::npos);
}

__global__ void dummy_kernel() {}

TEST(StreamGpu, OwnedStreamIsNonBlockingAndMovable) {
  MT_REQUIRE_GPU();
  Stream a(0);
  unsigned flags = 0;
  ASSERT_EQ(cudaStreamGetFlags(a, &flags), cudaSuccess);
  EXPECT_EQ(flags & cudaStreamNonBlocking, cudaStreamNonBlocking);
  cudaStream_t raw = a.get();
  Stream b = std::move(a);
  EXPECT_EQ(a.get(), nullptr);
  EXPECT_EQ(b.get(), raw);
  dummy_kernel<<<1, 1, 0, b>>>();
  MT_CUDA_CHECK_LAUNCH();
  b.synchronize();
  EXPECT_TRUE(b.query());
}

TEST(StreamGpu, CurrentStreamGuardAndPool) {
  MT_REQUIRE_GPU();
  cudaStream_t def = current_stream(0);
  EXPECT_EQ(def, default_stream(0));
  EXPECT_NE(def, nullptr) << "never the legacy default stream";
  {
    StreamGuard g(pool_stream(0, 3), 0);
    EXPECT_EQ(current_stream(0), pool_stream(0, 3));
    {
      StreamGuard inner(pool_stream(0, 1), 0);
      EXPECT_EQ(current_stream(0), pool_stream(0, 1));
    }
    EXPECT_EQ(current_stream(0), pool_stream(0, 3));
    // Per thread: another thread still sees the default.
    cudaStream_t other = nullptr;
    std::thread t([&] { other = current_stream(0); });
    t.join();
    EXPECT_EQ(other, def);
  }
  EXPECT_EQ(current_stream(0), def);
  EXPECT_EQ(pool_stream(0, kStreamPoolSize), pool_stream(0, 0));
  EXPECT_EQ(pool_stream(0, -1), pool_stream(0, kStreamPoolSize - 1));
}

// Two hook pairs that log what they hear while the test runs: the layer registered later hears of a creation
// after, and of a destruction before, the layer under it.
std::vector<int> g_hook_log;
bool g_hook_logging = false;
void log_hook(int code) {
  if (g_hook_logging) g_hook_log.push_back(code);
}

TEST(StreamGpu, HooksHearCreationInOrderAndDestructionInReverse) {
  MT_REQUIRE_GPU();
  static std::once_flag once;
  std::call_once(once, [] {
    add_stream_hooks([](int, cudaStream_t) { log_hook(1); }, [](int, cudaStream_t) { log_hook(-1); });
    add_stream_hooks([](int, cudaStream_t) { log_hook(2); }, [](int, cudaStream_t) { log_hook(-2); });
  });
  g_hook_log.clear();
  g_hook_logging = true;
  { Stream s(0); }
  g_hook_logging = false;
  EXPECT_EQ(g_hook_log, (std::vector<int>{1, 2, -2, -1}));
}

__global__ void spin_then_write(int* flag, long long cycles, int value) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  *flag = value;
}

__global__ void copy_flag(const int* src, int* dst) {
  *dst = *src;
}

TEST(EventGpu, RecordQueryElapsedAndCrossStreamOrdering) {
  MT_REQUIRE_GPU();
  int* d = nullptr;
  MT_CUDA_CHECK(cudaMalloc(&d, 2 * sizeof(int)));
  MT_CUDA_CHECK(cudaMemset(d, 0, 2 * sizeof(int)));
  Stream producer(0), consumer(0);
  Event start(true), done(true);
  start.record(producer);
  spin_then_write<<<1, 1, 0, producer>>>(d, 20'000'000, 42);  // ~10 ms
  MT_CUDA_CHECK_LAUNCH();
  done.record(producer);
  done.wait(consumer);
  copy_flag<<<1, 1, 0, consumer>>>(d, d + 1);
  MT_CUDA_CHECK_LAUNCH();
  consumer.synchronize();
  int h[2] = {};
  MT_CUDA_CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
  EXPECT_EQ(h[1], 42) << "the consumer ran before the event it waited on";
  EXPECT_TRUE(done.query());
  EXPECT_GT(Event::elapsed_ms(start, done), 0.f);
  Event untimed;
  EXPECT_TRUE(untimed.query()) << "an unrecorded event counts as complete";
  untimed.record(producer);
  EXPECT_THROW(Event::elapsed_ms(start, untimed), InvalidArgument);
  MT_CUDA_CHECK(cudaFree(d));
}

TEST(ForkJoinGpu, BranchWorkIsVisibleAfterJoin) {
  MT_REQUIRE_GPU();
  int* d = nullptr;
  MT_CUDA_CHECK(cudaMalloc(&d, 4 * sizeof(int)));
  Stream origin(0);
  MT_CUDA_CHECK(cudaMemsetAsync(d, 0, 4 * sizeof(int), origin));
  {
    ForkJoin fj(origin, 0, 3);
    EXPECT_EQ(fj.n_branches(), 3);
    for (int i = 0; i < 3; ++i) {
      spin_then_write<<<1, 1, 0, fj.branch(i)>>>(d + i, 2'000'000 * (3 - i), 10 + i);
      MT_CUDA_CHECK_LAUNCH();
    }
    EXPECT_THROW(fj.branch(3), InvalidArgument);
  }
  copy_flag<<<1, 1, 0, origin>>>(d, d + 3);  // origin must see branch 0's write after the join
  MT_CUDA_CHECK_LAUNCH();
  origin.synchronize();
  int h[4] = {};
  MT_CUDA_CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
  EXPECT_EQ(h[0], 10);
  EXPECT_EQ(h[1], 11);
  EXPECT_EQ(h[2], 12);
  EXPECT_EQ(h[3], 10);
  MT_CUDA_CHECK(cudaFree(d));
}

TEST(ForkJoin, RejectsTooManyBranches) {
  EXPECT_THROW(ForkJoin(nullptr, 0, kStreamPoolSize + 1), InvalidArgument);
  EXPECT_THROW(ForkJoin(nullptr, 0, -1), InvalidArgument);
}

}  // namespace
}  // namespace mt
