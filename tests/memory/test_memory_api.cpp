// The memory statistics and cache controls as a user reaches them: through minitensor.h alone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "minitensor/minitensor.h"

namespace mt {
namespace {

// What caching would be without set_caching_enabled: on unless MT_DISABLE_CACHING says otherwise.
bool caching_default_from_env() {
  const char* env = std::getenv("MT_DISABLE_CACHING");
  return !(env && *env && std::string(env) != "0");
}

TEST(MemoryApi, StatsTypesAndFormatting) {
  StatValue v;
  v.increase(3);
  v.increase(2);
  v.decrease(4);
  EXPECT_EQ(v.current, 1);
  EXPECT_EQ(v.peak, 5);
  EXPECT_EQ(v.allocated, 5);
  EXPECT_EQ(v.freed, 4);
  const MemoryStats s;
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.ooms, 0);
  const SegmentInfo seg;
  EXPECT_TRUE(seg.blocks.empty());
  EXPECT_EQ(BlockInfo().state, BlockState::Free);
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3 * 1024 * 1024 / 2), "1.50 MiB");
}

TEST(MemoryApi, CacheControlsAndDeviceQueries) {
  empty_cache();  // no allocator yet, or every one: returns what is cached either way
  set_caching_enabled(false);
  set_caching_enabled(caching_default_from_env());
  if (!cuda_available()) {
    EXPECT_THROW(memory_stats(0), DeviceError);
    EXPECT_THROW(reset_peak_memory_stats(0), DeviceError);
    EXPECT_THROW(memory_summary(0), DeviceError);
    EXPECT_THROW(memory_snapshot(0), DeviceError);
    return;
  }
  reset_peak_memory_stats(0);
  {
    const Tensor t = empty({1024}, DType::F32, Device::cuda(0));
    const MemoryStats s = memory_stats(0);
    EXPECT_GE(s.allocated_bytes.current, 4096);
    EXPECT_GE(s.requested_bytes.current, 4096);
    bool found = false;
    for (const SegmentInfo& seg : memory_snapshot(0))
      for (const BlockInfo& b : seg.blocks)
        found |= b.address == reinterpret_cast<std::uintptr_t>(t.data_ptr());
    if (caching_default_from_env()) {  // uncached blocks live in no segment
      EXPECT_TRUE(found);
    }
    EXPECT_FALSE(memory_summary(0).empty());
  }
  synchronize(Device::cuda(0));
  empty_cache();
}

}  // namespace
}  // namespace mt
