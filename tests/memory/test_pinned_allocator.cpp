// The caching pinned-host allocator's policy on FakeBackend.
#include <gtest/gtest.h>

#include "minitensor/memory/detail/pinned.h"
#include "minitensor/runtime/error.h"

namespace mt {
namespace {

constexpr std::size_t MiB = 1024 * 1024;
const cudaStream_t s1 = FakeBackend::fake_stream(1);
const cudaStream_t s2 = FakeBackend::fake_stream(2);

class PinnedFake : public ::testing::Test {
 protected:
  void make(std::size_t capacity) {
    auto b = std::make_unique<FakeBackend>(capacity, Device::cpu());
    fake = b.get();
    alloc = std::make_unique<CachingHostAllocator>(std::move(b));
  }
  void SetUp() override { make(256 * MiB); }
  FakeBackend* fake = nullptr;
  std::unique_ptr<CachingHostAllocator> alloc;
};

TEST_F(PinnedFake, BinsAndImmediateReuse) {
  Allocation a = alloc->allocate(3000);
  EXPECT_EQ(a.size(), 3000u);
  EXPECT_EQ(a.device(), Device::cpu());
  void* p = a.data();
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.allocated_bytes.current, 4096);
  EXPECT_EQ(st.requested_bytes.current, 3000);
  EXPECT_EQ(st.reserved_bytes.current, 4096);
  a.reset();
  Allocation b = alloc->allocate(4000);  // same bin
  EXPECT_EQ(b.data(), p);
  Allocation c = alloc->allocate(5000);  // next bin
  EXPECT_NE(c.data(), p);
  st = alloc->stats();
  EXPECT_EQ(st.cache_hits, 1);
  EXPECT_EQ(st.cache_misses, 2);
  EXPECT_EQ(st.reserved_bytes.current, 4096 + 8192);
}

// A block whose copy ran on a stream that is then destroyed: the destruction waits for the copy, and the
// release records no event on the dead stream (recording on a destroyed CUDA stream is undefined).
TEST_F(PinnedFake, DestroyedStreamIsWaitedForAndNeverRecordedOn) {
  fake->create_stream(s1);
  Allocation a = alloc->allocate(MiB);
  void* p = a.data();
  alloc->record_stream(a, s1);
  fake->submit(s1);
  alloc->stream_destroying(s1);  // as an mt::Stream's destruction hook does
  fake->destroy_stream(s1);
  a.reset();
  EXPECT_EQ(fake->n_events_on_destroyed_streams(), 0);
  Allocation b = alloc->allocate(MiB);  // its copy was waited for: reused at once
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(fake->n_events_outstanding(), 0);
}

TEST_F(PinnedFake, ReuseWaitsForTheCopyEvent) {
  Allocation a = alloc->allocate(MiB);
  void* p = a.data();
  alloc->record_stream(a, s1);  // an async copy reads it on s1
  fake->submit(s1);
  a.reset();
  EXPECT_EQ(alloc->stats().active_bytes.current, static_cast<std::int64_t>(MiB));
  Allocation b = alloc->allocate(MiB);
  EXPECT_NE(b.data(), p);
  fake->complete(s1);
  Allocation c = alloc->allocate(MiB);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(fake->n_events_outstanding(), 0);
}

TEST_F(PinnedFake, SeveralStreams) {
  Allocation a = alloc->allocate(1000);
  void* p = a.data();
  alloc->record_stream(a, s1);
  alloc->record_stream(a, s2);
  fake->submit(s1);
  fake->submit(s2);
  a.reset();
  fake->complete(s1);
  Allocation b = alloc->allocate(1000);
  EXPECT_NE(b.data(), p);
  fake->complete(s2);
  Allocation c = alloc->allocate(1000);
  EXPECT_EQ(c.data(), p);
}

TEST_F(PinnedFake, EmptyCacheWaitsAndFrees) {
  Allocation a = alloc->allocate(MiB), b = alloc->allocate(2 * MiB);
  alloc->record_stream(b, s1);
  fake->submit(s1);
  a.reset();
  b.reset();
  EXPECT_EQ(fake->used(), 3 * MiB);
  alloc->empty_cache();
  EXPECT_EQ(fake->used(), 0u);
  const MemoryStats st = alloc->stats();
  EXPECT_EQ(st.reserved_bytes.current, 0);
  EXPECT_EQ(st.active_bytes.current, 0);
  EXPECT_EQ(st.device_frees, 2);
  EXPECT_GE(st.host_waits, 1);
}

TEST_F(PinnedFake, OomFreesCacheThenRaises) {
  make(8 * MiB);
  Allocation a = alloc->allocate(4 * MiB);
  a.reset();
  Allocation b = alloc->allocate(8 * MiB);  // needs the cached 4 MiB back
  EXPECT_EQ(alloc->stats().alloc_retries, 1);
  try {
    Allocation c = alloc->allocate(MiB);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("tried to allocate 1.00 MiB (1048576 B"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(alloc->stats().ooms, 1);
  b.reset();
  Allocation d = alloc->allocate(MiB);
  EXPECT_NE(d.data(), nullptr);
}

TEST_F(PinnedFake, BypassFreesAtOnce) {
  alloc->set_caching_enabled(false);
  {
    Allocation a = alloc->allocate(3000);
    EXPECT_EQ(fake->used(), 3000u);
  }
  EXPECT_EQ(fake->used(), 0u);
  EXPECT_EQ(alloc->stats().reserved_bytes.current, 0);
  EXPECT_NE(alloc->memory_summary().find("caching off"), std::string::npos);
}

}  // namespace
}  // namespace mt
