// The caching device allocator's policy, run against FakeBackend: no GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "minitensor/memory/detail/caching.h"
#include "minitensor/memory/detail/pinned.h"
#include "minitensor/runtime/error.h"

namespace mt {
namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

const cudaStream_t s1 = FakeBackend::fake_stream(1);
const cudaStream_t s2 = FakeBackend::fake_stream(2);
const cudaStream_t s3 = FakeBackend::fake_stream(3);

class CachingFake : public ::testing::Test {
 protected:
  void make(std::size_t capacity) {
    auto b = std::make_unique<FakeBackend>(capacity);
    fake = b.get();
    alloc = std::make_unique<CachingDeviceAllocator>(std::move(b));
  }
  void SetUp() override { make(1024 * MiB); }

  FakeBackend* fake = nullptr;
  std::unique_ptr<CachingDeviceAllocator> alloc;
};

bool inside(const void* p, const SegmentInfo& seg) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return a >= seg.address && a < seg.address + seg.size;
}

TEST(CachingSizes, RoundingAndSegments) {
  using A = CachingDeviceAllocator;
  EXPECT_EQ(A::round_size(1), 512u);
  EXPECT_EQ(A::round_size(512), 512u);
  EXPECT_EQ(A::round_size(513), 1024u);
  EXPECT_EQ(A::round_size(1000), 1024u);
  EXPECT_EQ(A::segment_size(512), 2 * MiB);
  EXPECT_EQ(A::segment_size(MiB), 2 * MiB);
  EXPECT_EQ(A::segment_size(MiB + 512), 20 * MiB);
  EXPECT_EQ(A::segment_size(10 * MiB), 20 * MiB);
  EXPECT_EQ(A::segment_size(10 * MiB + 512), 12 * MiB);
  EXPECT_EQ(A::segment_size(64 * MiB), 64 * MiB);
  EXPECT_EQ(CachingHostAllocator::bin_size(1), 512u);
  EXPECT_EQ(CachingHostAllocator::bin_size(513), 1024u);
  EXPECT_EQ(CachingHostAllocator::bin_size(3 * MiB), 4 * MiB);
}

TEST_F(CachingFake, ExactByteAccounting) {
  Allocation a = alloc->allocate(1000, s1);
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.allocated_bytes.current, 1024);
  EXPECT_EQ(st.requested_bytes.current, 1000);
  EXPECT_EQ(st.reserved_bytes.current, static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(st.segments.current, 1);
  EXPECT_EQ(st.cache_misses, 1);
  EXPECT_EQ(st.cache_hits, 0);
  EXPECT_EQ(st.splits, 1);
  EXPECT_EQ(a.size(), 1000u);
  EXPECT_EQ(a.stream(), s1);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 512, 0u);

  Allocation b = alloc->allocate(3000, s1);
  st = alloc->stats();
  EXPECT_EQ(st.allocated_bytes.current, 1024 + 3072);
  EXPECT_EQ(st.requested_bytes.current, 4000);
  EXPECT_EQ(st.allocations.current, 2);
  EXPECT_EQ(st.cache_hits, 1);
  EXPECT_EQ(st.splits, 2);
  EXPECT_EQ(static_cast<char*>(b.data()),
            static_cast<char*>(a.data()) + 1024);  // carved from the same segment

  a.reset();
  st = alloc->stats();
  EXPECT_EQ(st.allocated_bytes.current, 3072);
  EXPECT_EQ(st.allocated_bytes.peak, 4096);
  EXPECT_EQ(st.active_bytes.current, 3072);
  EXPECT_EQ(st.allocations.freed, 1);
  EXPECT_EQ(st.inactive_split_bytes.current, static_cast<std::int64_t>(2 * MiB - 3072));

  Allocation c = alloc->allocate(2 * MiB, s1);       // large pool: a 20 MiB segment
  Allocation d = alloc->allocate(12 * MiB + 1, s1);  // best fit: the 18 MiB rest of that segment
  Allocation e = alloc->allocate(30 * MiB + 1, s1);  // its own segment, rounded to 2 MiB
  st = alloc->stats();
  EXPECT_EQ(st.reserved_bytes.current, static_cast<std::int64_t>((2 + 20 + 32) * MiB));
  EXPECT_EQ(st.segments.current, 3);
  EXPECT_EQ(st.allocated_bytes.current,
            static_cast<std::int64_t>(3072 + 2 * MiB + 12 * MiB + 512 + 30 * MiB + 512));
  EXPECT_EQ(st.requested_bytes.current,
            static_cast<std::int64_t>(3000 + 2 * MiB + 12 * MiB + 1 + 30 * MiB + 1));
  EXPECT_EQ(st.device_mallocs, 3);
  EXPECT_EQ(fake->used(), (2 + 20 + 32) * MiB);
  EXPECT_EQ(static_cast<char*>(d.data()), static_cast<char*>(c.data()) + 2 * MiB);

  b.reset();
  c.reset();
  d.reset();
  e.reset();
  st = alloc->stats();
  EXPECT_EQ(st.allocated_bytes.current, 0);
  EXPECT_EQ(st.active_bytes.current, 0);
  EXPECT_EQ(st.allocations.current, 0);
  EXPECT_EQ(st.reserved_bytes.current, static_cast<std::int64_t>(54 * MiB));  // cached
  alloc->reset_peak_stats();
  EXPECT_EQ(alloc->stats().allocated_bytes.peak, 0);
  alloc->empty_cache();
  st = alloc->stats();
  EXPECT_EQ(st.reserved_bytes.current, 0);
  EXPECT_EQ(st.device_frees, 3);
  EXPECT_EQ(fake->used(), 0u);
}

TEST_F(CachingFake, ZeroBytesIsEmptyAndFree) {
  Allocation a = alloc->allocate(0, s1);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(alloc->stats().allocations.current, 0);
  a.reset();
  EXPECT_EQ(fake->n_allocs(), 0);
}

TEST_F(CachingFake, SplitThenCoalesceLeavesOneFreeBlock) {
  std::vector<Allocation> v;
  for (std::size_t size : {512u, 4096u, 100000u, 700u, 65536u, 3u}) v.push_back(alloc->allocate(size, s1));
  auto snap = alloc->snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].blocks.size(), 7u);  // six blocks and the rest
  for (int i : {3, 0, 5, 1, 4, 2}) v[static_cast<std::size_t>(i)].reset();
  snap = alloc->snapshot();
  ASSERT_EQ(snap.size(), 1u);
  ASSERT_EQ(snap[0].blocks.size(), 1u);
  EXPECT_EQ(snap[0].blocks[0].size, 2 * MiB);
  EXPECT_EQ(snap[0].blocks[0].state, BlockState::Free);
  EXPECT_EQ(alloc->stats().merges, 6);

  // Large pool: three pieces of a 20 MiB segment merge back too.
  Allocation a = alloc->allocate(3 * MiB, s1), b = alloc->allocate(5 * MiB, s1),
             c = alloc->allocate(4 * MiB, s1);
  snap = alloc->snapshot();
  ASSERT_EQ(snap.size(), 2u);
  b.reset();
  a.reset();
  c.reset();
  for (const SegmentInfo& seg : alloc->snapshot()) {
    ASSERT_EQ(seg.blocks.size(), 1u);
    EXPECT_EQ(seg.blocks[0].size, seg.size);
  }
}

TEST_F(CachingFake, LargeBlocksSplitOnlyWhenTheRestIsLarge) {
  Allocation a = alloc->allocate(19 * MiB + 512, s1);  // 20 MiB segment, rest 511.5 KiB: kept whole
  auto snap = alloc->snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].blocks.size(), 1u);
  EXPECT_EQ(alloc->stats().allocated_bytes.current, static_cast<std::int64_t>(20 * MiB));
  EXPECT_EQ(a.size(), 19 * MiB + 512);
}

TEST_F(CachingFake, SameStreamReusesAtOnce) {
  Allocation a = alloc->allocate(4096, s1);
  void* p = a.data();
  fake->submit(s1);  // work still using `a` is queued on s1
  a.reset();
  Allocation b = alloc->allocate(4096, s1);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(fake->n_events_created(), 0);
  EXPECT_EQ(alloc->stats().cache_hits, 1);
}

TEST_F(CachingFake, OtherStreamWaitsForTheReleaseEvent) {
  // Fill one small segment on s1 with two 1 MiB blocks, release both while s1 is busy.
  Allocation a1 = alloc->allocate(MiB, s1), a2 = alloc->allocate(MiB, s1);
  void* p = a1.data();
  fake->submit(s1);
  a1.reset();
  a2.reset();
  const SegmentInfo s1_segment = alloc->snapshot().at(0);

  // s2 must not get s1's memory while s1's work is pending.
  Allocation b1 = alloc->allocate(MiB, s2), b2 = alloc->allocate(MiB, s2);
  EXPECT_FALSE(inside(b1.data(), s1_segment));
  EXPECT_FALSE(inside(b2.data(), s1_segment));
  EXPECT_EQ(alloc->stats().cross_stream_hits, 0);
  EXPECT_EQ(alloc->stats().segments.current, 2);

  // Once s1 is done, it does, without a new segment.
  fake->complete(s1);
  Allocation c = alloc->allocate(MiB, s2);
  EXPECT_EQ(c.data(), p);
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.cross_stream_hits, 1);
  EXPECT_EQ(st.segments.current, 2);
  EXPECT_EQ(fake->n_event_waits(), 0);  // polled, never waited for

  // The whole segment moved to s2's pool: released there while s2 is busy, s1 must wait for s2 to get it
  // back.
  fake->submit(s2);
  c.reset();
  Allocation d = alloc->allocate(MiB, s1), e = alloc->allocate(MiB, s1);
  EXPECT_FALSE(inside(d.data(), s1_segment));
  EXPECT_FALSE(inside(e.data(), s1_segment));
  fake->complete(s2);
  Allocation f = alloc->allocate(MiB, s1);
  EXPECT_EQ(f.data(), p);
  EXPECT_EQ(alloc->stats().cross_stream_hits, 2);
}

// A stream about to be destroyed (an mt::Stream's hook calls stream_destroying): the allocator waits for its
// work and retires its pool. Other streams then take its free blocks, also one released after the stream
// died, and nothing records an event on the dead stream again. A new stream with the same handle is fenced
// as before.
TEST_F(CachingFake, DestroyedStreamIsNeverFencedAndLendsItsBlocks) {
  Allocation a1 = alloc->allocate(MiB, s1), a2 = alloc->allocate(MiB, s1);
  const SegmentInfo s1_segment = alloc->snapshot().at(0);
  fake->submit(s1);
  a1.reset();  // released while s1 is busy
  alloc->stream_destroying(s1);
  fake->destroy_stream(s1);
  EXPECT_EQ(fake->completed(s1), fake->submitted(s1));  // waited for
  a2.reset();                                           // a tensor that outlived its stream
  Allocation b1 = alloc->allocate(MiB, s2), b2 = alloc->allocate(MiB, s2);
  EXPECT_TRUE(inside(b1.data(), s1_segment));
  EXPECT_TRUE(inside(b2.data(), s1_segment));
  b1.reset();
  b2.reset();
  alloc->empty_cache();
  EXPECT_EQ(fake->n_events_on_destroyed_streams(), 0);

  fake->create_stream(s1);
  alloc->stream_created(s1);
  Allocation c1 = alloc->allocate(MiB, s1), c2 = alloc->allocate(MiB, s1);
  const void* c1_ptr = c1.data();
  fake->submit(s1);
  c1.reset();
  c2.reset();
  Allocation d1 = alloc->allocate(MiB, s2), d2 = alloc->allocate(MiB, s2);
  EXPECT_NE(d1.data(), c1_ptr);  // s1 is busy again: its releases wait for their fence
  EXPECT_NE(d2.data(), c1_ptr);
  fake->complete(s1);
  Allocation e = alloc->allocate(MiB, s3);
  EXPECT_EQ(e.data(), c1_ptr);
  EXPECT_EQ(fake->n_events_on_destroyed_streams(), 0);
}

TEST_F(CachingFake, BlockLentAcrossStreamsWaitsForTheBorrower) {
  // Reclaim path: a device too full for a new segment lends a block of a partly used segment to another
  // stream; released there while that stream is busy, the owner must wait for it.
  make(2 * MiB);
  Allocation a1 = alloc->allocate(MiB, s1), a2 = alloc->allocate(MiB, s1);
  void* p = a1.data();
  a1.reset();
  Allocation b = alloc->allocate(MiB, s2);  // no room for a segment: wait, then borrow s1's free half
  EXPECT_EQ(b.data(), p);
  fake->submit(s2);
  b.reset();
  EXPECT_EQ(alloc->snapshot().at(0).blocks.at(0).state, BlockState::AwaitingStreams);
  fake->complete(s2);
  Allocation c = alloc->allocate(MiB, s1);
  EXPECT_EQ(c.data(), p);
}

TEST_F(CachingFake, RecordStreamKeepsBlockUntilEveryStreamIsDone) {
  Allocation a = alloc->allocate(8192, s1);
  void* p = a.data();
  alloc->record_stream(a, s1);  // its own stream: nothing to do
  alloc->record_stream(a, s2);
  alloc->record_stream(a, s3);
  alloc->record_stream(a, s2);
  fake->submit(s2);
  fake->submit(s3);
  a.reset();
  EXPECT_EQ(fake->n_events_outstanding(), 2);
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.allocated_bytes.current, 0);
  EXPECT_EQ(st.active_bytes.current, 8192);  // released, still in use by s2 and s3
  EXPECT_EQ(alloc->snapshot().at(0).blocks.at(0).state, BlockState::AwaitingStreams);

  Allocation b = alloc->allocate(8192, s1);
  EXPECT_NE(b.data(), p);
  fake->complete(s2);
  Allocation c = alloc->allocate(8192, s1);
  EXPECT_NE(c.data(), p);  // s3 still pending
  fake->complete(s3);
  Allocation d = alloc->allocate(8192, s1);
  EXPECT_EQ(d.data(), p);
  EXPECT_EQ(fake->n_events_outstanding(), 0);
  EXPECT_EQ(alloc->stats().active_bytes.current, 3 * 8192);
}

TEST_F(CachingFake, EventsArePooled) {
  Allocation keep = alloc->allocate(512, s1);
  for (int i = 0; i < 200; ++i) {
    Allocation a = alloc->allocate(4096, s1);
    alloc->record_stream(a, s2);
    fake->submit(s2);
    a.reset();
    fake->complete(s2);
  }
  EXPECT_LE(fake->n_events_created(), 2);
  EXPECT_EQ(alloc->stats().events_recorded, 200);
}

TEST_F(CachingFake, OomFreesOversizeCacheThenRaisesWithFigures) {
  make(64 * MiB);
  Allocation a = alloc->allocate(30 * MiB, s1);  // own 30 MiB segment
  a.reset();                                     // cached
  Allocation b = alloc->allocate(40 * MiB, s1);  // 30 + 40 > 64: free the cached oversize segment, retry
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.alloc_retries, 1);
  EXPECT_EQ(st.device_frees, 1);
  EXPECT_EQ(st.reserved_bytes.current, static_cast<std::int64_t>(40 * MiB));
  EXPECT_EQ(st.ooms, 0);

  Allocation small = alloc->allocate(100, s1);  // 2 MiB segment: 42 MiB reserved, 22 MiB free on the device
  try {
    Allocation c = alloc->allocate(30 * MiB, s1);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tried to allocate 30.00 MiB (31457280 B)"), std::string::npos) << m;
    EXPECT_NE(m.find("allocated 40.00 MiB (41943552 B)"), std::string::npos) << m;
    EXPECT_NE(m.find("reserved 42.00 MiB (44040192 B)"), std::string::npos) << m;
    EXPECT_NE(m.find("reserved but unallocated 2.00 MiB (2096640 B)"), std::string::npos) << m;
    EXPECT_NE(m.find("largest free cached block 2.00 MiB (2096640 B)"), std::string::npos) << m;
    EXPECT_NE(m.find("device free 22.00 MiB (23068672 B) of 64.00 MiB (67108864 B) total"), std::string::npos)
        << m;
  }
  EXPECT_EQ(alloc->stats().ooms, 1);
  EXPECT_EQ(alloc->stats().alloc_retries, 2);
  // Still works.
  Allocation d = alloc->allocate(10 * MiB, s1);
  EXPECT_NE(d.data(), nullptr);
  b.reset();
  Allocation e = alloc->allocate(30 * MiB, s1);
  EXPECT_NE(e.data(), nullptr);
}

TEST_F(CachingFake, OomWaitsForPendingEventsThenSearchesThePoolAgain) {
  make(20 * MiB);
  Allocation a = alloc->allocate(10 * MiB, s1);  // 20 MiB segment: a and a 10 MiB rest
  Allocation a2 = alloc->allocate(10 * MiB, s1);
  void* p = a.data();
  alloc->record_stream(a, s2);
  fake->submit(s2);
  a.reset();  // awaits s2
  // The pool's only fitting block is pending and the device is full: wait for s2, then take that block
  // without a device allocation.
  Allocation c = alloc->allocate(10 * MiB, s1);
  EXPECT_EQ(c.data(), p);
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.device_mallocs, 1);
  EXPECT_EQ(st.alloc_retries, 1);
  EXPECT_GE(st.host_waits, 1);
  EXPECT_EQ(st.ooms, 0);
  EXPECT_GE(fake->n_event_waits(), 1);
}

TEST_F(CachingFake, OomWaitsThenFreesFullyFreeSegments) {
  make(24 * MiB);
  Allocation a = alloc->allocate(12 * MiB, s1);  // own 12 MiB segment
  alloc->record_stream(a, s2);
  fake->submit(s2);
  a.reset();
  Allocation b = alloc->allocate(16 * MiB, s1);  // needs a's segment back
  EXPECT_NE(b.data(), nullptr);
  EXPECT_EQ(alloc->stats().device_frees, 1);
  EXPECT_EQ(alloc->stats().reserved_bytes.current, static_cast<std::int64_t>(16 * MiB));
}

TEST_F(CachingFake, CapBytesAndFraction) {
  alloc->set_memory_cap(8 * MiB);
  EXPECT_EQ(alloc->memory_cap(), 8 * MiB);
  Allocation a = alloc->allocate(MiB, s1);  // 2 MiB segment: fits
  try {
    Allocation b = alloc->allocate(7 * MiB, s1);  // 20 MiB segment: over the cap
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("cap 8.00 MiB (8388608 B)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fake->used(), 2 * MiB);
  alloc->set_memory_fraction(0.5);
  EXPECT_EQ(alloc->memory_cap(), 512 * MiB);
  Allocation c = alloc->allocate(7 * MiB, s1);
  EXPECT_THROW(alloc->set_memory_fraction(0.0), InvalidArgument);
  EXPECT_THROW(alloc->set_memory_fraction(1.5), InvalidArgument);
  alloc->set_memory_cap(0);
  Allocation d = alloc->allocate(600 * MiB, s1);
  EXPECT_NE(d.data(), nullptr);
}

TEST_F(CachingFake, RequestLargerThanTheDeviceRaises) {
  EXPECT_THROW(alloc->allocate(2048 * MiB, s1), OutOfMemoryError);
  EXPECT_THROW(alloc->allocate(std::size_t(-1), s1), OutOfMemoryError);
  Allocation a = alloc->allocate(MiB, s1);
  EXPECT_NE(a.data(), nullptr);
}

TEST_F(CachingFake, BypassMeansOneBackendCallPerAllocation) {
  alloc->set_caching_enabled(false);
  EXPECT_FALSE(alloc->caching_enabled());
  {
    Allocation a = alloc->allocate(1000, s1), b = alloc->allocate(3 * MiB, s2);
    EXPECT_EQ(fake->n_allocs(), 2);
    EXPECT_EQ(fake->used(), 1000 + 3 * MiB);
    MemoryStats st = alloc->stats();
    EXPECT_EQ(st.allocated_bytes.current, static_cast<std::int64_t>(1000 + 3 * MiB));
    EXPECT_EQ(st.reserved_bytes.current, static_cast<std::int64_t>(1000 + 3 * MiB));
    EXPECT_EQ(st.device_mallocs, 2);
  }
  EXPECT_EQ(fake->n_frees(), 2);
  EXPECT_EQ(fake->used(), 0u);
  EXPECT_EQ(alloc->stats().reserved_bytes.current, 0);
  alloc->set_caching_enabled(true);
  Allocation c = alloc->allocate(1000, s1);
  EXPECT_EQ(fake->used(), 2 * MiB);
}

TEST_F(CachingFake, SummaryAndSnapshot) {
  Allocation a = alloc->allocate(1000, s1);
  Allocation b = alloc->allocate(5 * MiB, s2);
  const std::string summary = alloc->memory_summary();
  EXPECT_NE(summary.find("Allocated memory"), std::string::npos) << summary;
  EXPECT_NE(summary.find("Reserved memory"), std::string::npos) << summary;
  EXPECT_NE(summary.find("22.00 MiB"), std::string::npos) << summary;
  const auto snap = alloc->snapshot();
  ASSERT_EQ(snap.size(), 2u);
  std::size_t n_allocated = 0;
  for (const auto& seg : snap) {
    for (const auto& blk : seg.blocks) {
      if (blk.state != BlockState::Allocated) continue;
      ++n_allocated;
      if (blk.address == reinterpret_cast<std::uintptr_t>(a.data())) {
        EXPECT_EQ(blk.requested, 1000u);
        EXPECT_EQ(blk.size, 1024u);
        EXPECT_EQ(blk.stream, s1);
        EXPECT_TRUE(seg.small_pool);
      } else {
        EXPECT_EQ(blk.requested, 5 * MiB);
        EXPECT_EQ(blk.stream, s2);
        EXPECT_EQ(seg.stream, s2);
        EXPECT_FALSE(seg.small_pool);
      }
    }
  }
  EXPECT_EQ(n_allocated, 2u);
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3 * MiB / 2), "1.50 MiB");
}

// ---------------------------------------------------------------- fuzz

// Model of the stream rule, checked on every allocation: memory last released while stream Y had work queued
// (ticket) may go to stream X only if X == Y or Y has completed that work.
struct Released {
  std::uintptr_t end;
  std::vector<std::pair<cudaStream_t, std::uint64_t>> tickets;
};

struct Live {
  Allocation a;
  unsigned char pattern;
  std::vector<cudaStream_t> streams;
};

void fill(const Allocation& a, unsigned char pattern) {
  std::memset(a.data(), pattern, a.size());
}

bool check(const Allocation& a, unsigned char pattern) {
  const auto* p = static_cast<const unsigned char*>(a.data());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (p[i] != pattern) return false;
  return true;
}

TEST_F(CachingFake, Fuzz10000Steps) {
  make(256 * MiB);
  std::mt19937_64 rng(1234);
  const cudaStream_t streams[] = {s1, s2, s3};
  std::vector<Live> live;
  std::map<std::uintptr_t, Released> released;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int n_ooms = 0;
  auto random_size = [&]() -> std::size_t {
    const double top = unit(rng) < 0.03 ? std::log(40.0 * MiB) : std::log(4.0 * MiB);
    return static_cast<std::size_t>(std::exp(unit(rng) * top));
  };
  for (int step = 0; step < 10000; ++step) {
    const double r = unit(rng);
    if ((r < 0.42 && live.size() < 96) || live.empty()) {
      const std::size_t size = random_size();
      const cudaStream_t st = streams[rng() % 3];
      Allocation a;
      try {
        a = alloc->allocate(size, st);
      } catch (const OutOfMemoryError&) {
        ++n_ooms;
        continue;
      }
      if (size == 0) continue;
      const auto lo = reinterpret_cast<std::uintptr_t>(a.data()), hi = lo + size;
      // The stream rule, against every released range it overlaps.
      auto it = released.upper_bound(lo);
      if (it != released.begin()) --it;
      while (it != released.end() && it->first < hi) {
        if (it->second.end > lo) {
          for (auto [y, ticket] : it->second.tickets)
            ASSERT_TRUE(y == st || fake->completed(y) >= ticket)
                << "step " << step << ": memory went to another stream before its work was done";
          it = released.erase(it);
        } else {
          ++it;
        }
      }
      // No overlap with live allocations.
      for (const Live& l : live) {
        const auto llo = reinterpret_cast<std::uintptr_t>(l.a.data());
        ASSERT_TRUE(hi <= llo || lo >= llo + l.a.size()) << "step " << step << ": overlapping allocations";
      }
      const auto pattern = static_cast<unsigned char>(rng());
      fill(a, pattern);
      live.push_back({std::move(a), pattern, {st}});
    } else if (r < 0.84) {
      const std::size_t i = rng() % live.size();
      ASSERT_TRUE(check(live[i].a, live[i].pattern)) << "step " << step << ": pattern overwritten";
      Released rel{reinterpret_cast<std::uintptr_t>(live[i].a.data()) + live[i].a.size(), {}};
      for (cudaStream_t y : live[i].streams) rel.tickets.push_back({y, fake->submitted(y)});
      released[reinterpret_cast<std::uintptr_t>(live[i].a.data())] = rel;
      live[i] = std::move(live.back());
      live.pop_back();
    } else if (r < 0.92) {
      Live& l = live[rng() % live.size()];
      const cudaStream_t y = streams[rng() % 3];
      alloc->record_stream(l.a, y);
      if (std::find(l.streams.begin(), l.streams.end(), y) == l.streams.end()) l.streams.push_back(y);
    } else if (r < 0.96) {
      fake->submit(streams[rng() % 3]);
    } else if (r < 0.995) {
      fake->complete(streams[rng() % 3]);
    } else {
      alloc->empty_cache();
    }

    // Stats agree with the live set and the backend at every step.
    const MemoryStats st = alloc->stats();
    std::int64_t requested = 0;
    for (const Live& l : live) requested += static_cast<std::int64_t>(l.a.size());
    ASSERT_EQ(st.allocations.current, static_cast<std::int64_t>(live.size())) << "step " << step;
    ASSERT_EQ(st.requested_bytes.current, requested) << "step " << step;
    ASSERT_GE(st.allocated_bytes.current, requested) << "step " << step;
    ASSERT_GE(st.active_bytes.current, st.allocated_bytes.current) << "step " << step;
    ASSERT_GE(st.reserved_bytes.current, st.active_bytes.current) << "step " << step;
    ASSERT_EQ(static_cast<std::size_t>(st.reserved_bytes.current), fake->used()) << "step " << step;
    ASSERT_EQ(st.device_mallocs - st.device_frees, st.segments.current) << "step " << step;
    if (step % 500 == 0) {
      std::int64_t seg_bytes = 0, alloc_bytes = 0, n_alloc = 0;
      for (const SegmentInfo& seg : alloc->snapshot()) {
        seg_bytes += static_cast<std::int64_t>(seg.size);
        std::size_t covered = 0;
        for (const BlockInfo& b : seg.blocks) {
          ASSERT_EQ(b.address, seg.address + covered) << "blocks must tile their segment";
          covered += b.size;
          if (b.state == BlockState::Allocated) {
            alloc_bytes += static_cast<std::int64_t>(b.size);
            ++n_alloc;
          }
        }
        ASSERT_EQ(covered, seg.size);
      }
      ASSERT_EQ(seg_bytes, st.reserved_bytes.current);
      ASSERT_EQ(alloc_bytes, st.allocated_bytes.current);
      ASSERT_EQ(n_alloc, st.allocations.current);
    }
  }
  for (Live& l : live) ASSERT_TRUE(check(l.a, l.pattern));
  live.clear();
  fake->complete_all();
  alloc->empty_cache();
  const MemoryStats st = alloc->stats();
  EXPECT_EQ(st.allocated_bytes.current, 0);
  EXPECT_EQ(st.active_bytes.current, 0);
  EXPECT_EQ(st.reserved_bytes.current, 0);
  EXPECT_EQ(fake->used(), 0u);
  EXPECT_EQ(fake->n_events_outstanding(), 0);
  EXPECT_GT(st.cache_hits, 1000);
  EXPECT_GT(st.cross_stream_hits, 0);
  RecordProperty("ooms", n_ooms);
}

// ---------------------------------------------------------------- threads

TEST_F(CachingFake, EightThreadsConcurrently) {
  make(2048 * MiB);
  constexpr int kThreads = 8, kSteps = 3000;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
      // Threads share streams in pairs, so pools see concurrent users as well as concurrent pools.
      const cudaStream_t own = FakeBackend::fake_stream(1 + t / 2);
      std::vector<std::pair<Allocation, unsigned char>> mine;
      for (int i = 0; i < kSteps; ++i) {
        if (mine.size() < 16 && (rng() % 3 != 0 || mine.empty())) {
          const std::size_t size = 1 + rng() % (rng() % 8 == 0 ? 12 * MiB : 64 * KiB);
          Allocation a = alloc->allocate(size, own);
          const auto pattern = static_cast<unsigned char>(rng());
          std::memset(a.data(), pattern, size);
          if (rng() % 8 == 0)
            alloc->record_stream(a, FakeBackend::fake_stream(1 + static_cast<int>(rng() % 4)));
          mine.emplace_back(std::move(a), pattern);
        } else {
          const std::size_t k = rng() % mine.size();
          if (!check(mine[k].first, mine[k].second)) failures.fetch_add(1);
          mine[k] = std::move(mine.back());
          mine.pop_back();
        }
        if (i % 50 == 0) fake->complete(FakeBackend::fake_stream(1 + static_cast<int>(rng() % 4)));
        if (i % 37 == 0) fake->submit(own);
      }
      for (auto& [a, pattern] : mine)
        if (!check(a, pattern)) failures.fetch_add(1);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.allocations.current, 0);
  EXPECT_EQ(st.allocated_bytes.current, 0);
  EXPECT_EQ(st.requested_bytes.current, 0);
  EXPECT_EQ(st.allocations.allocated, st.allocations.freed);
  EXPECT_EQ(static_cast<std::size_t>(st.reserved_bytes.current), fake->used());
  fake->complete_all();
  alloc->empty_cache();
  st = alloc->stats();
  EXPECT_EQ(st.active_bytes.current, 0);
  EXPECT_EQ(st.reserved_bytes.current, 0);
  EXPECT_EQ(fake->n_events_outstanding(), 0);
}

}  // namespace
}  // namespace mt

// ---------------------------------------------------------------- thread caches

namespace mt {
namespace {

TEST_F(CachingFake, ThreadCacheServesTheSameSizeOnTheSameStream) {
  Allocation a = alloc->allocate(4000, s1);  // rounds to 4096
  void* p = a.data();
  a.reset();
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.allocations.current, 0);
  EXPECT_EQ(st.allocated_bytes.current, 0);
  EXPECT_EQ(st.active_bytes.current, 0);
  EXPECT_EQ(st.requested_bytes.current, 0);
  // Kept by this thread: free, not mergeable, so counted with the free bytes of its split segment.
  EXPECT_EQ(st.inactive_split_bytes.current, static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(st.merges, 0);

  Allocation b = alloc->allocate(4096, s1);  // same rounded size
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 4096u);
  st = alloc->stats();
  EXPECT_EQ(st.cache_hits, 1);
  EXPECT_EQ(st.thread_cache_hits, 1);
  EXPECT_EQ(st.requested_bytes.current, 4096);
  EXPECT_EQ(st.allocated_bytes.current, 4096);
  EXPECT_EQ(st.allocated_bytes.peak, 4096);
  b.reset();

  Allocation c = alloc->allocate(4608, s1);  // another rounded size: the pool, not the thread cache
  EXPECT_NE(c.data(), p);
  EXPECT_EQ(alloc->stats().thread_cache_hits, 1);
  EXPECT_EQ(fake->n_events_created(), 0);
}

TEST_F(CachingFake, ThreadCacheNeverHandsABlockToAnotherStream) {
  Allocation a = alloc->allocate(4096, s1);
  void* p = a.data();
  fake->submit(s1);  // work still using `a` is queued on s1
  a.reset();         // kept by this thread, for s1
  Allocation b = alloc->allocate(4096, s2);
  EXPECT_NE(b.data(), p);
  EXPECT_EQ(alloc->stats().thread_cache_hits, 0);
  EXPECT_EQ(alloc->stats().segments.current, 2);
  SegmentInfo s1_segment;
  for (const SegmentInfo& seg : alloc->snapshot())
    if (inside(p, seg)) s1_segment = seg;
  ASSERT_EQ(s1_segment.blocks.size(), 1u);  // back in s1's pool, whole
  // Once s1 is done with it, s2 may have that segment when its own is full.
  Allocation c1 = alloc->allocate(MiB, s2), c2 = alloc->allocate(MiB - 4096, s2);
  EXPECT_FALSE(inside(c1.data(), s1_segment));
  EXPECT_FALSE(inside(c2.data(), s1_segment));
  fake->complete(s1);
  Allocation d = alloc->allocate(4096, s2);
  EXPECT_EQ(d.data(), p);
  EXPECT_EQ(alloc->stats().cross_stream_hits, 1);
}

TEST_F(CachingFake, ThreadCacheKeepsSixteenSmallBlocksOldestOut) {
  std::vector<Allocation> v;
  for (int i = 1; i <= 20; ++i) v.push_back(alloc->allocate(static_cast<std::size_t>(i) * 512, s1));
  v.clear();  // released in order: the first 4 go back to the pool when the 17th to 20th come in
  std::int64_t merges = alloc->stats().merges;
  EXPECT_GT(merges, 0);
  for (int i = 1; i <= 20; ++i) v.push_back(alloc->allocate(static_cast<std::size_t>(i) * 512, s1));
  EXPECT_EQ(alloc->stats().thread_cache_hits, 16);
  v.clear();

  // Kept or free, the small segment's bytes are all inactive.
  EXPECT_EQ(alloc->stats().inactive_split_bytes.current, static_cast<std::int64_t>(2 * MiB));

  // A miss (no large segment yet) returns the thread's cache first: the small segment is whole again.
  Allocation a = alloc->allocate(2 * MiB, s1);
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.inactive_split_bytes.current, static_cast<std::int64_t>(18 * MiB));
  EXPECT_EQ(st.device_mallocs, 2);

  // Large requests are not kept: they go back to their pool and merge there.
  a.reset();
  EXPECT_EQ(alloc->stats().inactive_split_bytes.current, 0);
  Allocation b = alloc->allocate(2 * MiB, s1);
  st = alloc->stats();
  EXPECT_EQ(st.thread_cache_hits, 16);
  EXPECT_EQ(st.inactive_split_bytes.current, static_cast<std::int64_t>(18 * MiB));
}

TEST_F(CachingFake, RecordStreamBlocksAreNotThreadCached) {
  Allocation a = alloc->allocate(4096, s1);
  void* p = a.data();
  alloc->record_stream(a, s2);
  fake->submit(s2);
  a.reset();
  Allocation b = alloc->allocate(4096, s1);
  EXPECT_NE(b.data(), p);  // s2 may still use it
  EXPECT_EQ(alloc->stats().thread_cache_hits, 0);
  fake->complete(s2);
  b.reset();
  Allocation c = alloc->allocate(4096, s1);  // b, from the thread cache
  Allocation d = alloc->allocate(4096, s1);  // a's block, back in the pool
  EXPECT_EQ(d.data(), p);
}

TEST_F(CachingFake, DisablingTheThreadCacheReturnsItsBlocks) {
  EXPECT_TRUE(alloc->thread_cache_enabled());
  std::vector<Allocation> v;
  for (std::size_t size : {512u, 4096u, 100000u}) v.push_back(alloc->allocate(size, s1));
  v.clear();
  EXPECT_EQ(alloc->stats().merges, 0);
  alloc->set_thread_cache_enabled(false);
  EXPECT_FALSE(alloc->thread_cache_enabled());
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.merges, 3);
  EXPECT_EQ(st.inactive_split_bytes.current, 0);  // one free block spans the segment again
  Allocation a = alloc->allocate(4096, s1);
  a.reset();
  Allocation b = alloc->allocate(4096, s1);
  st = alloc->stats();
  EXPECT_EQ(st.thread_cache_hits, 0);
  EXPECT_EQ(st.cache_hits, 4);  // 4096 and 100000 carved from the segment, a and b from the pool
  alloc->set_thread_cache_enabled(true);
}

// Another thread parks blocks and stays alive; the allocator must get them back when it needs them.
class ParkedElsewhere {
 public:
  ParkedElsewhere(CachingDeviceAllocator& alloc, std::vector<std::size_t> sizes, cudaStream_t stream)
      : m_thread([&alloc, sizes, stream, this] {
          std::vector<Allocation> v;
          for (std::size_t size : sizes) v.push_back(alloc.allocate(size, stream));
          for (const Allocation& a : v) m_pointers.push_back(a.data());
          v.clear();  // into this thread's cache
          {
            std::unique_lock<std::mutex> lock(m_mutex);
            m_parked = true;
            m_cv.notify_all();
            m_cv.wait(lock, [this] { return m_go; });
          }
          if (m_then) m_then();
        }) {
    std::unique_lock<std::mutex> lock(m_mutex);
    m_cv.wait(lock, [this] { return m_parked; });
  }
  // Lets the thread go on (running `then` first) and waits for it to end.
  void finish(std::function<void()> then = {}) {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_then = std::move(then);
      m_go = true;
      m_cv.notify_all();
    }
    m_thread.join();
  }
  ~ParkedElsewhere() {
    if (m_thread.joinable()) finish();
  }
  const std::vector<void*>& pointers() const { return m_pointers; }

 private:
  std::mutex m_mutex;
  std::condition_variable m_cv;
  bool m_parked = false, m_go = false;
  std::function<void()> m_then;
  std::vector<void*> m_pointers;
  std::thread m_thread;  // last: starts once the rest is built
};

TEST_F(CachingFake, EmptyCacheTakesBackOtherThreadsCaches) {
  ParkedElsewhere other(*alloc, {MiB, MiB / 2, 1000}, s1);
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.allocations.current, 0);
  EXPECT_EQ(st.reserved_bytes.current, static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(st.inactive_split_bytes.current, static_cast<std::int64_t>(2 * MiB));
  alloc->empty_cache();
  st = alloc->stats();
  EXPECT_EQ(st.reserved_bytes.current, 0);
  EXPECT_EQ(st.inactive_split_bytes.current, 0);
  EXPECT_EQ(fake->used(), 0u);
  // The other thread goes on with an empty cache.
  std::int64_t hits = -1;
  other.finish([&] {
    Allocation a = alloc->allocate(MiB, s1);
    hits = alloc->stats().thread_cache_hits;
  });
  EXPECT_EQ(hits, 0);
  EXPECT_EQ(alloc->stats().device_mallocs, 2);
}

TEST_F(CachingFake, OomTakesBackOtherThreadsCachesBeforeGivingUp) {
  make(2 * MiB);
  ParkedElsewhere other(*alloc, {MiB, MiB},
                        s1);  // the device's only segment, parked whole in the other thread
  // Same stream: the blocks, back in s1's pool and merged, serve this one.
  Allocation a = alloc->allocate(MiB, s1);
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.ooms, 0);
  EXPECT_EQ(st.alloc_retries, 1);
  EXPECT_EQ(st.device_mallocs, 1);
  EXPECT_EQ(a.data(), other.pointers().at(0));
  a.reset();
  alloc->set_thread_cache_enabled(false);  // (a was kept by this thread)
  alloc->set_thread_cache_enabled(true);
  other.finish();

  // Another stream: the segment, once whole again, moves to it.
  ParkedElsewhere again(*alloc, {MiB, MiB}, s1);
  Allocation b = alloc->allocate(MiB, s2);
  EXPECT_EQ(alloc->stats().ooms, 0);
  EXPECT_EQ(b.data(), again.pointers().at(0));
}

TEST_F(CachingFake, ThreadExitReturnsItsCacheAndKeepsItsFigures) {
  std::thread([&] {
    Allocation a = alloc->allocate(4096, s1), b = alloc->allocate(8192, s1);
    a.reset();
    Allocation c = alloc->allocate(4096, s1);  // thread-cache hit
  }).join();
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.allocations.current, 0);
  EXPECT_EQ(st.allocations.allocated, 3);
  EXPECT_EQ(st.allocations.freed, 3);
  EXPECT_EQ(st.thread_cache_hits, 1);
  EXPECT_EQ(st.inactive_split_bytes.current, 0);  // all back and merged
  const auto snap = alloc->snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].blocks.size(), 1u);
  // Many short-lived threads: each adopts a cache left by one before it.
  for (int i = 0; i < 50; ++i)
    std::thread([&] {
      Allocation a = alloc->allocate(512, s2);
      a.reset();
      Allocation b = alloc->allocate(512, s2);
    }).join();
  st = alloc->stats();
  EXPECT_EQ(st.thread_cache_hits, 51);
  EXPECT_EQ(st.allocations.current, 0);
  EXPECT_EQ(st.inactive_split_bytes.current, 0);
}

// A thread_local object built before this thread first used the allocator is destroyed after the thread's
// caches: its release goes through the allocator's stand-in for exiting threads.
struct LateRelease {
  Allocation a;
};

TEST_F(CachingFake, ReleaseAfterTheThreadCachesAreGone) {
  std::thread([&] {
    thread_local LateRelease late;  // built here, before this thread's caches
    late.a = alloc->allocate(4096, s1);
    Allocation b = alloc->allocate(512, s1);  // kept by the thread cache, returned at exit
  }).join();
  const MemoryStats st = alloc->stats();
  EXPECT_EQ(st.allocations.current, 0);
  EXPECT_EQ(st.allocations.freed, 2);
  EXPECT_EQ(st.active_bytes.current, 0);
  const auto snap = alloc->snapshot();
  ASSERT_EQ(snap.size(), 1u);
  ASSERT_EQ(snap[0].blocks.size(), 1u);
  EXPECT_EQ(snap[0].blocks[0].state, BlockState::Free);
}

TEST(CachingThreadCache, ThreadOutlivesItsAllocator) {
  std::mutex mutex;
  std::condition_variable cv;
  int phase = 0;
  auto wait_for = [&](int p) {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return phase >= p; });
  };
  auto advance = [&](int p) {
    std::lock_guard<std::mutex> lock(mutex);
    phase = p;
    cv.notify_all();
  };
  auto alloc = std::make_unique<CachingDeviceAllocator>(std::make_unique<FakeBackend>(64 * MiB));
  std::thread t([&] {
    Allocation a = alloc->allocate(4096, s1);
    a.reset();  // kept in this thread's cache of the first allocator
    advance(1);
    wait_for(2);
    // The first allocator is gone (perhaps a new one sits at its address): this thread must not touch it,
    // now or at exit.
    Allocation b = alloc->allocate(4096, s1);
    b.reset();
    Allocation c = alloc->allocate(4096, s1);
    EXPECT_EQ(alloc->stats().thread_cache_hits, 1);
  });
  wait_for(1);
  alloc.reset();  // takes the block back from the thread's cache and frees everything
  alloc = std::make_unique<CachingDeviceAllocator>(std::make_unique<FakeBackend>(64 * MiB));
  advance(2);
  t.join();
  EXPECT_EQ(alloc->stats().allocations.current, 0);
}

TEST_F(CachingFake, ThreadsSharingOneStreamWhileOthersDrainAndRead) {
  make(1024 * MiB);
  constexpr int kThreads = 8, kSteps = 4000;
  std::atomic<int> failures{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) * 104729u + 7);
      std::vector<std::pair<Allocation, unsigned char>> mine;
      for (int i = 0; i < kSteps; ++i) {
        if (mine.size() < 12 && (rng() % 2 == 0 || mine.empty())) {
          // Few sizes, so that thread caches hit; now and then a large one through the pool.
          const std::size_t size = rng() % 16 == 0 ? 3 * MiB : 512 * (1 + rng() % 6);
          Allocation a = alloc->allocate(size, s1);
          const auto pattern = static_cast<unsigned char>(rng());
          std::memset(a.data(), pattern, size);
          mine.emplace_back(std::move(a), pattern);
        } else {
          const std::size_t k = rng() % mine.size();
          if (!check(mine[k].first, mine[k].second)) failures.fetch_add(1);
          mine[k] = std::move(mine.back());
          mine.pop_back();
        }
      }
      for (auto& [a, pattern] : mine)
        if (!check(a, pattern)) failures.fetch_add(1);
    });
  }
  std::thread reader([&] {
    for (int i = 0; !done.load(); ++i) {
      const MemoryStats st = alloc->stats();
      if (st.allocations.current < 0 || st.allocations.current > kThreads * 12) failures.fetch_add(1);
      if (i % 3 == 0) alloc->empty_cache();
      if (i % 7 == 0) alloc->snapshot();
      std::this_thread::yield();
    }
  });
  for (auto& th : threads) th.join();
  done.store(true);
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.allocations.current, 0);
  EXPECT_EQ(st.allocated_bytes.current, 0);
  EXPECT_EQ(st.active_bytes.current, 0);
  EXPECT_EQ(st.requested_bytes.current, 0);
  EXPECT_EQ(st.allocations.allocated, st.allocations.freed);
  EXPECT_GT(st.thread_cache_hits, 1000);
  EXPECT_EQ(static_cast<std::size_t>(st.reserved_bytes.current), fake->used());
  alloc->empty_cache();
  st = alloc->stats();
  EXPECT_EQ(st.reserved_bytes.current, 0);
  EXPECT_EQ(fake->used(), 0u);
}

}  // namespace
}  // namespace mt
