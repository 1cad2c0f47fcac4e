// The memory statistics and snapshots as JSON (memory/stats.h), from the caching allocator run against
// FakeBackend (no GPU), parsed back with nlohmann-json (tests only).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "minitensor/memory/detail/caching.h"
#include "minitensor/memory/stats.h"
#include "tests/common/json.h"

namespace mt {
namespace {

constexpr std::size_t MiB = 1024 * 1024;

#if MT_TEST_HAVE_JSON_PARSER
using nlohmann::json;

void expect_stat(const json& j, const StatValue& v, const char* name) {
  ASSERT_EQ(j.size(), 4u) << name;
  EXPECT_EQ(j.at("current").get<std::int64_t>(), v.current) << name;
  EXPECT_EQ(j.at("peak").get<std::int64_t>(), v.peak) << name;
  EXPECT_EQ(j.at("allocated").get<std::int64_t>(), v.allocated) << name;
  EXPECT_EQ(j.at("freed").get<std::int64_t>(), v.freed) << name;
}

void expect_stats(const json& j, const MemoryStats& s) {
  ASSERT_EQ(j.size(), 7u + 12u);  // seven StatValues, twelve counters
  expect_stat(j.at("allocations"), s.allocations, "allocations");
  expect_stat(j.at("allocated_bytes"), s.allocated_bytes, "allocated_bytes");
  expect_stat(j.at("requested_bytes"), s.requested_bytes, "requested_bytes");
  expect_stat(j.at("active_bytes"), s.active_bytes, "active_bytes");
  expect_stat(j.at("reserved_bytes"), s.reserved_bytes, "reserved_bytes");
  expect_stat(j.at("segments"), s.segments, "segments");
  expect_stat(j.at("inactive_split_bytes"), s.inactive_split_bytes, "inactive_split_bytes");
  EXPECT_EQ(j.at("cache_hits").get<std::int64_t>(), s.cache_hits);
  EXPECT_EQ(j.at("thread_cache_hits").get<std::int64_t>(), s.thread_cache_hits);
  EXPECT_EQ(j.at("cache_misses").get<std::int64_t>(), s.cache_misses);
  EXPECT_EQ(j.at("cross_stream_hits").get<std::int64_t>(), s.cross_stream_hits);
  EXPECT_EQ(j.at("splits").get<std::int64_t>(), s.splits);
  EXPECT_EQ(j.at("merges").get<std::int64_t>(), s.merges);
  EXPECT_EQ(j.at("alloc_retries").get<std::int64_t>(), s.alloc_retries);
  EXPECT_EQ(j.at("ooms").get<std::int64_t>(), s.ooms);
  EXPECT_EQ(j.at("device_mallocs").get<std::int64_t>(), s.device_mallocs);
  EXPECT_EQ(j.at("device_frees").get<std::int64_t>(), s.device_frees);
  EXPECT_EQ(j.at("events_recorded").get<std::int64_t>(), s.events_recorded);
  EXPECT_EQ(j.at("host_waits").get<std::int64_t>(), s.host_waits);
}

const char* state_name(BlockState s) {
  return s == BlockState::Free ? "free" : s == BlockState::Allocated ? "allocated" : "awaiting_streams";
}

void expect_snapshot(const json& j, const std::vector<SegmentInfo>& snap) {
  const json& segs = j.at("segments");
  ASSERT_EQ(segs.size(), snap.size());
  for (std::size_t i = 0; i < snap.size(); ++i) {
    const SegmentInfo& s = snap[i];
    const json& js = segs[i];
    EXPECT_EQ(js.at("address").get<std::uint64_t>(), s.address);
    EXPECT_EQ(js.at("size").get<std::uint64_t>(), s.size);
    EXPECT_EQ(js.at("stream").get<std::uint64_t>(), reinterpret_cast<std::uintptr_t>(s.stream));
    EXPECT_EQ(js.at("small_pool").get<bool>(), s.small_pool);
    ASSERT_EQ(js.at("blocks").size(), s.blocks.size());
    for (std::size_t k = 0; k < s.blocks.size(); ++k) {
      const BlockInfo& b = s.blocks[k];
      const json& jb = js.at("blocks")[k];
      EXPECT_EQ(jb.at("address").get<std::uint64_t>(), b.address);
      EXPECT_EQ(jb.at("size").get<std::uint64_t>(), b.size);
      EXPECT_EQ(jb.at("requested").get<std::uint64_t>(), b.requested);
      EXPECT_EQ(jb.at("state").get<std::string>(), state_name(b.state));
      EXPECT_EQ(jb.at("stream").get<std::uint64_t>(), reinterpret_cast<std::uintptr_t>(b.stream));
    }
  }
}
#endif

TEST(MemoryJson, StatsAndSnapshotOfTheCachingAllocator) {
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  const cudaStream_t s1 = FakeBackend::fake_stream(1), s2 = FakeBackend::fake_stream(2);
  CachingDeviceAllocator alloc(std::make_unique<FakeBackend>(1024 * MiB));
  Allocation a = alloc.allocate(1000, s1);
  Allocation b = alloc.allocate(3 * MiB, s2);
  Allocation c = alloc.allocate(5000, s1);
  a.reset();
  const MemoryStats stats = alloc.stats();
  ASSERT_GT(stats.allocated_bytes.peak, 0);
  expect_stats(json::parse(to_json(stats)), stats);

  const std::vector<SegmentInfo> snap = alloc.snapshot();
  ASSERT_EQ(snap.size(), 2u);  // a small segment on s1, a large one on s2
  const json j = json::parse(to_json(snap));
  expect_snapshot(j, snap);
  bool small = false, large = false;
  for (const json& seg : j.at("segments")) (seg.at("small_pool").get<bool>() ? small : large) = true;
  EXPECT_TRUE(small && large);
#endif
}

// Every block state, the largest values, the empty snapshot.
TEST(MemoryJson, ConstructedValuesRoundTrip) {
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  MemoryStats stats;
  stats.reserved_bytes.increase(std::int64_t(1) << 50);
  stats.reserved_bytes.decrease(3);
  stats.requested_bytes.current = -1;  // never in practice; a signed field stays signed
  stats.host_waits = 42;
  stats.ooms = 1;
  expect_stats(json::parse(to_json(stats)), stats);

  SegmentInfo seg;
  seg.address = UINTPTR_MAX - 4095;
  seg.size = 4096;
  seg.stream = FakeBackend::fake_stream(7);
  seg.small_pool = true;
  seg.blocks = {{.address = seg.address,
                 .size = 1024,
                 .requested = 1000,
                 .state = BlockState::Allocated,
                 .stream = seg.stream},
                {.address = seg.address + 1024,
                 .size = 1024,
                 .requested = 1,
                 .state = BlockState::AwaitingStreams,
                 .stream = FakeBackend::fake_stream(8)},
                {.address = seg.address + 2048, .size = 2048, .state = BlockState::Free}};
  const std::vector<SegmentInfo> snap = {seg};
  const json j = json::parse(to_json(snap));
  expect_snapshot(j, snap);
  EXPECT_EQ(j.at("segments")[0].at("blocks")[1].at("state"), "awaiting_streams");
  EXPECT_EQ(j.at("segments")[0].at("blocks")[2].at("stream").get<std::uint64_t>(), 0u);
  EXPECT_EQ(json::parse(to_json(std::vector<SegmentInfo>{})).at("segments").size(), 0u);
#endif
}

}  // namespace
}  // namespace mt
