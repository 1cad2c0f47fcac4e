// The caching device allocator at scale and under faults, against FakeBackend: many short-lived streams,
// many pending releases, backend calls that block or throw, and out of memory under several threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <latch>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "minitensor/memory/detail/caching.h"
#include "minitensor/runtime/error.h"

namespace mt {
namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

const cudaStream_t s1 = FakeBackend::fake_stream(1);
const cudaStream_t s2 = FakeBackend::fake_stream(2);
const cudaStream_t s3 = FakeBackend::fake_stream(3);

class AllocatorScale : public ::testing::Test {
 protected:
  void make(std::size_t capacity) {
    auto b = std::make_unique<FakeBackend>(capacity);
    fake = b.get();
    alloc = std::make_unique<CachingDeviceAllocator>(std::move(b));
  }
  void SetUp() override { make(1024 * MiB); }

  // The figures every state must agree on, with `n_live` allocations of `live_bytes` requested bytes.
  void expect_consistent(std::int64_t n_live, std::int64_t live_bytes) {
    const MemoryStats st = alloc->stats();
    EXPECT_EQ(st.allocations.current, n_live);
    EXPECT_EQ(st.requested_bytes.current, live_bytes);
    EXPECT_GE(st.active_bytes.current, st.allocated_bytes.current);
    EXPECT_GE(st.reserved_bytes.current, st.active_bytes.current);
    EXPECT_EQ(static_cast<std::size_t>(st.reserved_bytes.current), fake->used());
    EXPECT_EQ(st.device_mallocs - st.device_frees, st.segments.current);
    EXPECT_EQ(st.segments.current, fake->n_live_allocations());
  }
  // After every allocation is gone and every stream done: nothing reserved, no event held.
  void expect_all_back() {
    fake->complete_all();
    alloc->empty_cache();
    const MemoryStats st = alloc->stats();
    EXPECT_EQ(st.allocations.current, 0);
    EXPECT_EQ(st.active_bytes.current, 0);
    EXPECT_EQ(st.reserved_bytes.current, 0);
    EXPECT_EQ(fake->n_live_allocations(), 0);
    EXPECT_EQ(fake->used(), 0u);
    EXPECT_EQ(fake->n_events_outstanding(), 0);
  }

  FakeBackend* fake = nullptr;
  std::unique_ptr<CachingDeviceAllocator> alloc;
};

bool inside(const void* p, const SegmentInfo& seg) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return a >= seg.address && a < seg.address + seg.size;
}

// An mt::Stream's life as its hooks tell the allocator.
void destroy(CachingDeviceAllocator& alloc, FakeBackend& fake, cudaStream_t s) {
  alloc.stream_destroying(s);
  fake.destroy_stream(s);
}
void create(CachingDeviceAllocator& alloc, FakeBackend& fake, cudaStream_t s) {
  fake.create_stream(s);
  alloc.stream_created(s);
}

// ---------------------------------------------------------------- destroyed streams

TEST_F(AllocatorScale, FiveThousandShortLivedStreamsAreReclaimed) {
  std::int64_t peak_reserved = 0;
  for (int i = 0; i < 5000; ++i) {
    const cudaStream_t s = FakeBackend::fake_stream(100 + i);
    create(*alloc, *fake, s);
    Allocation a = alloc->allocate(64 * KiB, s), b = alloc->allocate(3 * MiB, s);
    Allocation c = alloc->allocate(256 * KiB, s);
    alloc->record_stream(c, s1);  // a block used on a long-lived stream too
    fake->submit(s);
    a.reset();
    b.reset();
    c.reset();
    Allocation outlives = alloc->allocate(4 * KiB, s);  // a tensor that outlives its stream
    destroy(*alloc, *fake, s);
    outlives.reset();
    peak_reserved = std::max(peak_reserved, alloc->stats().reserved_bytes.current);
    if (i % 10 == 9) fake->complete(s1);
  }
  // Memory of dead streams is reused by the next ones: a few segments, not one set per stream.
  EXPECT_LE(peak_reserved, static_cast<std::int64_t>(64 * MiB));
  EXPECT_EQ(fake->n_events_on_destroyed_streams(), 0);
  // Far more streams than the table holds have come and gone; live ones still get pools.
  Allocation x = alloc->allocate(MiB, s2);
  EXPECT_NE(x.data(), nullptr);
  expect_consistent(1, static_cast<std::int64_t>(MiB));
  x.reset();
  expect_all_back();
}

TEST_F(AllocatorScale, LiveStreamsBeyondTheLimitStillRaise) {
  make(std::size_t(4096) * MiB);  // a segment each: no stream borrows another's blocks
  std::vector<Allocation> keep;
  for (int i = 0; i < 1024; ++i) keep.push_back(alloc->allocate(512, FakeBackend::fake_stream(10 + i)));
  EXPECT_THROW(alloc->allocate(512, FakeBackend::fake_stream(5000)), InvalidArgument);
  // One of them destroyed, its block still in use: not yet reclaimed.
  const cudaStream_t first = FakeBackend::fake_stream(10);
  destroy(*alloc, *fake, first);
  EXPECT_THROW(alloc->allocate(512, FakeBackend::fake_stream(5000)), InvalidArgument);
  keep.front().reset();  // its last block back: the slot is free
  Allocation a = alloc->allocate(512, FakeBackend::fake_stream(5000));
  EXPECT_NE(a.data(), nullptr);
  keep.clear();
  a.reset();
  expect_all_back();
}

// A stream destroyed with nothing in use loses its pool; a new stream with the same handle starts clean:
// fenced as any live stream, none of the old stream's figures.
TEST_F(AllocatorScale, ReusedHandleGetsACleanPool) {
  Allocation a = alloc->allocate(MiB, s1), b = alloc->allocate(MiB, s1);
  fake->submit(s1);
  a.reset();
  b.reset();
  destroy(*alloc, *fake, s1);
  create(*alloc, *fake, s1);
  Allocation c1 = alloc->allocate(MiB, s1), c2 = alloc->allocate(MiB, s1);
  const void* p = c1.data();
  fake->submit(s1);
  c1.reset();
  c2.reset();
  const std::vector<SegmentInfo> segs = alloc->snapshot();
  const SegmentInfo seg =
      *std::find_if(segs.begin(), segs.end(), [&](const SegmentInfo& x) { return inside(p, x); });
  EXPECT_EQ(seg.stream, s1);
  Allocation d1 = alloc->allocate(MiB, s2), d2 = alloc->allocate(MiB, s2);
  EXPECT_FALSE(inside(d1.data(), seg));  // s1 is busy: its releases wait for a fence
  EXPECT_FALSE(inside(d2.data(), seg));
  fake->complete(s1);
  Allocation e = alloc->allocate(MiB, s3);
  EXPECT_TRUE(inside(e.data(), seg));  // done: the segment moves to s3
  EXPECT_EQ(fake->n_events_on_destroyed_streams(), 0);
  d1.reset();
  d2.reset();
  e.reset();
  expect_all_back();
}

// ---------------------------------------------------------------- pending releases

// 10,000 blocks released on s1 while s2 still uses them: allocations keep polling a bounded number of events,
// and the blocks come back once s2 is done.
TEST_F(AllocatorScale, TenThousandPendingReleasesPollBoundedly) {
  std::vector<Allocation> blocks;
  for (int i = 0; i < 10000; ++i) {
    blocks.push_back(alloc->allocate(4 * KiB, s1));
    alloc->record_stream(blocks.back(), s2);
    fake->submit(s2);
  }
  blocks.clear();
  EXPECT_EQ(fake->n_events_outstanding(), 10000);
  const std::int64_t queries_before = fake->n_event_queries();
  for (int i = 0; i < 100; ++i) {
    Allocation x = alloc->allocate(3 * MiB, s1);  // own pool: polls the pending queue's front only
    Allocation y = alloc->allocate(3 * MiB, s3);
  }
  EXPECT_LE(fake->n_event_queries() - queries_before, 100 * 4);
  EXPECT_EQ(fake->n_events_outstanding(), 10000);
  EXPECT_EQ(alloc->stats().active_bytes.current, 10000 * 4 * static_cast<std::int64_t>(KiB));
  // Half of s2's work done: the first half of the releases come back, in order, over later allocations.
  fake->complete(s2);
  for (int i = 0; i < 400; ++i) Allocation x = alloc->allocate(3 * MiB, s1);
  EXPECT_EQ(fake->n_events_outstanding(), 0);
  EXPECT_EQ(alloc->stats().active_bytes.current, 0);
  expect_all_back();
}

// ---------------------------------------------------------------- no blocking call under a pool lock

// FakeBackend, with a probe run inside every call that may block (event waits and frees): it asks, from
// another thread, for what needs every pool's lock (a snapshot, an allocation on the same stream). Were a
// pool's lock held across the call, the probe would not finish.
class ProbingBackend final : public MemoryBackend {
 public:
  explicit ProbingBackend(std::size_t capacity) : m_fake(capacity) {}
  void* allocate(std::size_t bytes) override { return m_fake.allocate(bytes); }
  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    probe();
    m_fake.deallocate(ptr, bytes);
  }
  EventHandle record_event(cudaStream_t stream) override { return m_fake.record_event(stream); }
  bool event_done(EventHandle event) override { return m_fake.event_done(event); }
  void event_wait(EventHandle event) override {
    probe();
    m_fake.event_wait(event);
  }
  void release_event(EventHandle event) noexcept override { m_fake.release_event(event); }
  void memory_info(std::size_t& free_bytes, std::size_t& total_bytes) override {
    m_fake.memory_info(free_bytes, total_bytes);
  }
  Device device() const override { return m_fake.device(); }
  std::string name() const override { return "probing"; }

  FakeBackend& fake() { return m_fake; }
  std::function<void()> on_block;
  int n_probes = 0, n_stuck = 0;

 private:
  void probe() {
    if (!on_block || m_in_probe) return;
    m_in_probe = true;
    ++n_probes;
    auto done = std::async(std::launch::async, on_block);
    if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) ++n_stuck;
    m_in_probe = false;
    done.wait();  // (once the lock is gone, if it was held: the test then fails on n_stuck)
  }
  FakeBackend m_fake;
  bool m_in_probe = false;
};

TEST(AllocatorBlockingCalls, WaitsAndFreesRunWithoutAPoolLock) {
  auto owned = std::make_unique<ProbingBackend>(256 * MiB);
  ProbingBackend* backend = owned.get();
  CachingDeviceAllocator alloc(std::move(owned));
  backend->on_block = [&] {
    (void)alloc.snapshot();
    Allocation a = alloc.allocate(512, s1);
    Allocation b = alloc.allocate(512, s2);
  };
  Allocation a = alloc.allocate(30 * MiB, s1), b = alloc.allocate(MiB, s1);
  alloc.record_stream(b, s2);
  backend->fake().submit(s1);
  backend->fake().submit(s2);
  a.reset();
  b.reset();
  alloc.empty_cache();          // waits for s1 and s2, frees segments
  alloc.stream_destroying(s2);  // waits for s2
  EXPECT_GT(backend->n_probes, 0);
  EXPECT_EQ(backend->n_stuck, 0);
  // The OOM ladder too: waits and frees on the way to a segment that fits.
  backend->fake().set_capacity(64 * MiB);
  Allocation c = alloc.allocate(30 * MiB, s1);
  alloc.record_stream(c, s3);
  backend->fake().submit(s3);
  c.reset();
  Allocation d = alloc.allocate(40 * MiB, s1);
  EXPECT_NE(d.data(), nullptr);
  EXPECT_EQ(backend->n_stuck, 0);
  backend->on_block = nullptr;
}

// ---------------------------------------------------------------- faults

TEST_F(AllocatorScale, BackendAllocateThrowing) {
  Allocation keep = alloc->allocate(100, s1);
  fake->set_fail_allocate(true);
  EXPECT_THROW(alloc->allocate(3 * MiB, s1), CudaError);
  EXPECT_THROW(alloc->allocate(64 * MiB, s2), CudaError);
  expect_consistent(1, 100);
  Allocation hit = alloc->allocate(1000, s1);  // from the cached segment: no backend call
  EXPECT_NE(hit.data(), nullptr);
  fake->set_fail_allocate(false);
  // The cap sees only what is reserved: the failed calls gave back their share.
  alloc->set_memory_cap(24 * MiB);
  Allocation a = alloc->allocate(6 * MiB, s1);
  EXPECT_NE(a.data(), nullptr);
  expect_consistent(3, 100 + 1000 + 6 * static_cast<std::int64_t>(MiB));
  keep.reset();
  hit.reset();
  a.reset();
  expect_all_back();
}

TEST_F(AllocatorScale, RecordEventThrowing) {
  Allocation a = alloc->allocate(8192, s1), other = alloc->allocate(512, s1);
  void* p = a.data();
  alloc->record_stream(a, s2);
  fake->submit(s2);
  fake->set_fail_record_event(true);
  a.reset();  // no event on s2 can be had: the block waits
  expect_consistent(1, 512);
  EXPECT_EQ(alloc->stats().active_bytes.current, 8192 + 512);
  Allocation b = alloc->allocate(8192, s1);
  EXPECT_NE(b.data(), p);
  Allocation c = alloc->allocate(3 * MiB, s3);  // another stream misses: no fence on s1 can be had either
  EXPECT_NE(c.data(), nullptr);
  fake->set_fail_record_event(false);
  Allocation d = alloc->allocate(8192, s1);  // the event is recorded now; s2 is still busy
  EXPECT_NE(d.data(), p);
  fake->complete(s2);
  Allocation e = alloc->allocate(8192, s1);
  EXPECT_EQ(e.data(), p);
  expect_consistent(5, 512 + 3 * 8192 + 3 * static_cast<std::int64_t>(MiB));
  b.reset();
  c.reset();
  d.reset();
  e.reset();
  other.reset();
  expect_all_back();
}

TEST_F(AllocatorScale, RecordEventThrowingThenEmptyCacheRecovers) {
  Allocation a = alloc->allocate(3 * MiB, s1);
  alloc->record_stream(a, s2);
  fake->submit(s2);
  fake->set_fail_record_event(true);
  a.reset();
  alloc->empty_cache();  // cannot fence s2 yet: the segment stays
  expect_consistent(0, 0);
  EXPECT_EQ(fake->n_live_allocations(), 1);
  fake->set_fail_record_event(false);
  alloc->empty_cache();  // now it can: waits for s2, frees the segment
  EXPECT_EQ(fake->n_live_allocations(), 0);
  expect_all_back();
}

TEST_F(AllocatorScale, EventQueryThrowing) {
  Allocation a = alloc->allocate(3 * MiB, s1), keep = alloc->allocate(512, s1);
  void* p = a.data();
  alloc->record_stream(a, s2);
  fake->submit(s2);
  a.reset();
  fake->set_fail_event_query(true);
  // Polling fails: the error reaches the caller, nothing is lost or handed out twice.
  EXPECT_THROW(alloc->allocate(3 * MiB, s1), CudaError);
  expect_consistent(1, 512);
  EXPECT_THROW(alloc->empty_cache(), CudaError);
  expect_consistent(1, 512);
  fake->set_fail_event_query(false);
  Allocation b = alloc->allocate(3 * MiB, s1);
  EXPECT_NE(b.data(), p);  // s2 still busy
  fake->complete(s2);
  Allocation c = alloc->allocate(3 * MiB, s1);
  EXPECT_EQ(c.data(), p);
  expect_consistent(3, 512 + 6 * static_cast<std::int64_t>(MiB));
  b.reset();
  c.reset();
  keep.reset();
  expect_all_back();
}

// ---------------------------------------------------------------- out of memory, 8 threads

// The stream rule of the single-thread fuzz test (test_caching_allocator.cpp), shared by 8 threads on a
// device too small for all of them: memory last released while stream Y had work queued (ticket) may go to
// stream X only if X == Y or Y has completed that work; live allocations never overlap.
TEST_F(AllocatorScale, OutOfMemoryUnderEightThreadsKeepsTheStreamRule) {
  make(96 * MiB);
  struct Released {
    std::uintptr_t end;
    std::vector<std::pair<cudaStream_t, std::uint64_t>> tickets;
  };
  std::mutex model_mutex;
  std::map<std::uintptr_t, Released> released;
  std::map<std::uintptr_t, std::uintptr_t> live;  // start -> end
  std::atomic<int> violations{0}, ooms{0}, allocations{0};
  const cudaStream_t streams[] = {s1, s2, s3, FakeBackend::fake_stream(4)};

  auto on_allocate = [&](const Allocation& a, cudaStream_t st) {
    const auto lo = reinterpret_cast<std::uintptr_t>(a.data()), hi = lo + a.size();
    std::lock_guard<std::mutex> lock(model_mutex);
    auto it = released.upper_bound(lo);
    if (it != released.begin()) --it;
    while (it != released.end() && it->first < hi) {
      if (it->second.end > lo) {
        for (auto [y, ticket] : it->second.tickets)
          if (y != st && fake->completed(y) < ticket) violations.fetch_add(1);
        it = released.erase(it);
      } else {
        ++it;
      }
    }
    auto next = live.lower_bound(lo);
    if (next != live.end() && next->first < hi) violations.fetch_add(1);
    if (next != live.begin() && std::prev(next)->second > lo) violations.fetch_add(1);
    live[lo] = hi;
  };
  auto on_release = [&](const Allocation& a, const std::vector<cudaStream_t>& used) {
    const auto lo = reinterpret_cast<std::uintptr_t>(a.data());
    std::lock_guard<std::mutex> lock(model_mutex);
    Released rel{lo + a.size(), {}};
    for (cudaStream_t y : used) rel.tickets.push_back({y, fake->submitted(y)});
    released[lo] = rel;
    live.erase(lo);
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(77 + static_cast<unsigned>(t));
      struct Mine {
        Allocation a;
        std::vector<cudaStream_t> used;
      };
      std::vector<Mine> mine;
      for (int step = 0; step < 1500; ++step) {
        const unsigned r = static_cast<unsigned>(rng() % 100);
        if (r < 45 || mine.empty()) {
          const cudaStream_t st = streams[rng() % 4];
          const std::size_t size = rng() % 10 == 0 ? 4 * MiB + rng() % (20 * MiB) : 1 + rng() % (512 * KiB);
          Allocation a;
          try {
            a = alloc->allocate(size, st);
          } catch (const OutOfMemoryError&) {
            ooms.fetch_add(1);
            continue;
          }
          allocations.fetch_add(1);
          on_allocate(a, st);
          mine.push_back({std::move(a), {st}});
        } else if (r < 85) {
          const std::size_t i = rng() % mine.size();
          on_release(mine[i].a, mine[i].used);
          mine[i] = std::move(mine.back());
          mine.pop_back();
        } else if (r < 92) {
          Mine& m = mine[rng() % mine.size()];
          const cudaStream_t y = streams[rng() % 4];
          alloc->record_stream(m.a, y);
          if (std::find(m.used.begin(), m.used.end(), y) == m.used.end()) m.used.push_back(y);
        } else if (r < 97) {
          fake->submit(streams[rng() % 4]);
        } else {
          fake->complete(streams[rng() % 4]);
        }
      }
      for (Mine& m : mine) on_release(m.a, m.used);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(ooms.load(), 0) << "the device should have been too small at times";
  EXPECT_GT(allocations.load(), 1000);
  expect_consistent(0, 0);
  expect_all_back();
}

// ---------------------------------------------------------------- threads sharing one stream

// The stream rule of the OOM test above, with every thread on one stream (each allocates from a shard of its
// pool): random sizes through the thread caches, the shards and the dedicated segments, blocks released by
// the thread that allocated them or handed to another, now and then used on a second stream or allocated
// there, and a cache emptied under the threads' feet. Afterwards the figures agree with the backend and with
// a snapshot, and empty_cache gives everything back.
TEST_F(AllocatorScale, EightThreadsHammerOneStream) {
  make(std::size_t(4096) * MiB);  // room for every thread's shard: no out-of-memory path here
  constexpr int kThreads = 8, kSteps = 4000;
  struct Released {
    std::uintptr_t end;
    std::vector<std::pair<cudaStream_t, std::uint64_t>> tickets;
  };
  struct Held {
    Allocation a;
    unsigned char pattern;
    std::vector<cudaStream_t> used;
  };
  std::mutex model_mutex;
  std::map<std::uintptr_t, Released> released;
  std::map<std::uintptr_t, std::uintptr_t> live;  // start -> end
  std::vector<Held> mailbox;                      // blocks one thread hands to another to release
  std::atomic<int> violations{0}, allocations{0}, ooms{0};

  // Head and tail bytes carry the owner's pattern: an overlapping allocation would overwrite them.
  auto mark = [](const Allocation& a, unsigned char pattern) {
    const std::size_t n = std::min<std::size_t>(64, a.size());
    std::memset(a.data(), pattern, n);
    std::memset(static_cast<char*>(a.data()) + a.size() - n, pattern, n);
  };
  auto intact = [](const Allocation& a, unsigned char pattern) {
    const std::size_t n = std::min<std::size_t>(64, a.size());
    const auto* p = static_cast<const unsigned char*>(a.data());
    for (std::size_t i = 0; i < n; ++i)
      if (p[i] != pattern || p[a.size() - 1 - i] != pattern) return false;
    return true;
  };
  auto on_allocate = [&](const Allocation& a, cudaStream_t st) {
    const auto lo = reinterpret_cast<std::uintptr_t>(a.data()), hi = lo + a.size();
    std::lock_guard<std::mutex> lock(model_mutex);
    auto it = released.upper_bound(lo);
    if (it != released.begin()) --it;
    while (it != released.end() && it->first < hi) {
      if (it->second.end > lo) {
        for (auto [y, ticket] : it->second.tickets)
          if (y != st && fake->completed(y) < ticket) violations.fetch_add(1);
        it = released.erase(it);
      } else {
        ++it;
      }
    }
    auto next = live.lower_bound(lo);
    if (next != live.end() && next->first < hi) violations.fetch_add(1);
    if (next != live.begin() && std::prev(next)->second > lo) violations.fetch_add(1);
    live[lo] = hi;
  };
  // Called just before the allocation is released.
  auto on_release = [&](Held& h) {
    if (!intact(h.a, h.pattern)) violations.fetch_add(1);
    const auto lo = reinterpret_cast<std::uintptr_t>(h.a.data());
    std::lock_guard<std::mutex> lock(model_mutex);
    Released rel{lo + h.a.size(), {}};
    for (cudaStream_t y : h.used) rel.tickets.push_back({y, fake->submitted(y)});
    released[lo] = rel;
    live.erase(lo);
  };

  std::latch started(kThreads);  // all threads live at once: each has a slot (a shard) of its own
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(4242 + static_cast<unsigned>(t));
      std::vector<Held> mine;
      started.arrive_and_wait();
      for (int step = 0; step < kSteps; ++step) {
        const unsigned r = static_cast<unsigned>(rng() % 100);
        if ((r < 50 && mine.size() < 24) || mine.empty()) {
          const unsigned kind = static_cast<unsigned>(rng() % 20);
          const std::size_t size = kind < 14   ? 1 + rng() % MiB              // thread caches, small pool
                                   : kind < 19 ? MiB + 1 + rng() % (9 * MiB)  // large segments
                                               : 10 * MiB + 1 + rng() % (14 * MiB);  // dedicated segments
          const cudaStream_t st = rng() % 16 == 0 ? s2 : s1;
          Held h{{}, static_cast<unsigned char>(rng()), {st}};
          try {
            h.a = alloc->allocate(size, st);
          } catch (const OutOfMemoryError&) {
            ooms.fetch_add(1);
            continue;
          }
          allocations.fetch_add(1);
          on_allocate(h.a, st);
          mark(h.a, h.pattern);
          mine.push_back(std::move(h));
        } else if (r < 80) {
          const std::size_t i = rng() % mine.size();
          on_release(mine[i]);
          mine[i] = std::move(mine.back());
          mine.pop_back();  // released here
        } else if (r < 88) {
          // Handed to whichever thread looks next: released there (back to the shard it came from).
          const std::size_t i = rng() % mine.size();
          std::lock_guard<std::mutex> lock(model_mutex);
          mailbox.push_back(std::move(mine[i]));
          mine[i] = std::move(mine.back());
          mine.pop_back();
        } else if (r < 92) {
          std::vector<Held> taken;
          {
            std::lock_guard<std::mutex> lock(model_mutex);
            taken.swap(mailbox);
          }
          for (Held& h : taken) on_release(h);
        } else if (r < 95) {
          Held& h = mine[rng() % mine.size()];
          const cudaStream_t y = rng() % 2 ? s2 : s3;
          alloc->record_stream(h.a, y);
          if (std::find(h.used.begin(), h.used.end(), y) == h.used.end()) h.used.push_back(y);
        } else if (r < 98) {
          fake->submit(rng() % 4 ? s1 : s2);
        } else {
          fake->complete(rng() % 3 == 0 ? s3 : rng() % 2 ? s1 : s2);
        }
        if (t == 0 && step % 500 == 250) alloc->empty_cache();
      }
      for (Held& h : mine) on_release(h);
    });
  }
  for (auto& th : threads) th.join();
  for (Held& h : mailbox) on_release(h);
  mailbox.clear();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(ooms.load(), 0);
  EXPECT_GT(allocations.load(), kThreads * kSteps / 4);

  const MemoryStats st = alloc->stats();
  EXPECT_EQ(st.allocations.allocated, allocations.load());
  EXPECT_EQ(st.allocations.freed, allocations.load());
  EXPECT_EQ(st.allocated_bytes.allocated, st.allocated_bytes.freed);
  EXPECT_EQ(st.requested_bytes.allocated, st.requested_bytes.freed);
  EXPECT_EQ(st.cache_hits + st.cache_misses, allocations.load());
  EXPECT_GT(st.cache_hits, st.cache_misses);
  expect_consistent(0, 0);
  // A snapshot (every thread cache back in its shard) agrees: blocks tile their segments, none is allocated.
  std::int64_t seg_bytes = 0;
  for (const SegmentInfo& seg : alloc->snapshot()) {
    seg_bytes += static_cast<std::int64_t>(seg.size);
    std::size_t covered = 0;
    for (const BlockInfo& b : seg.blocks) {
      EXPECT_EQ(b.address, seg.address + covered);
      EXPECT_NE(b.state, BlockState::Allocated);
      covered += b.size;
    }
    EXPECT_EQ(covered, seg.size);
  }
  EXPECT_EQ(seg_bytes, alloc->stats().reserved_bytes.current);
  expect_all_back();  // every shard's segments go back
}

// A segment moved between two shards of a stream (no fence: the stream orders that reuse) still carries the
// stream rule for other streams: a part the stream's queued work used goes to another stream only once that
// work is done.
TEST_F(AllocatorScale, SegmentMovedBetweenShardsKeepsTheStreamRule) {
  make(20 * MiB);        // one large segment and no room for another
  alloc->empty_cache();  // this thread takes its slot (its shard) now, so the next thread gets another
  std::uint64_t ticket = 0;
  void* second = nullptr;
  std::thread([&] {
    Allocation a1 = alloc->allocate(3 * MiB, s1), a2 = alloc->allocate(5 * MiB, s1);
    second = a2.data();
    fake->submit(s1);  // work on s1 uses both
    ticket = fake->submitted(s1);
  }).join();  // released on s1, merged: one whole free segment in that thread's shard
  Allocation b = alloc->allocate(3 * MiB, s1);  // this thread's shard takes it over
  MemoryStats st = alloc->stats();
  EXPECT_EQ(st.device_mallocs, 1);
  EXPECT_EQ(st.cross_stream_hits, 0);
  EXPECT_EQ(st.alloc_retries, 0);
  Allocation c = alloc->allocate(5 * MiB, s2);  // only the rest of that segment can serve it
  EXPECT_EQ(c.data(), second);
  EXPECT_GE(fake->completed(s1), ticket) << "s2 got memory s1's queued work was using";
  st = alloc->stats();
  EXPECT_EQ(st.device_mallocs, 1);
  EXPECT_EQ(st.cross_stream_hits, 1);
  b.reset();
  c.reset();
  expect_all_back();
}

// The shards of a stream count as one stream against the limit, and a destroyed stream's shards are all
// reclaimed: its memory is lent to the next stream and its place in the table is free again.
TEST_F(AllocatorScale, SharedStreamShardsAreOneStreamAndReclaimed) {
  make(std::size_t(4096) * MiB);  // a segment each: no stream borrows another's blocks
  std::vector<Allocation> keep;
  for (int i = 0; i < 1023; ++i) keep.push_back(alloc->allocate(512, FakeBackend::fake_stream(10 + i)));
  const cudaStream_t shared = FakeBackend::fake_stream(5000), next = FakeBackend::fake_stream(6000);
  create(*alloc, *fake, shared);
  std::mutex mutex;
  std::vector<Allocation> held;  // one block of each thread, still in use when the stream goes
  std::atomic<int> refused{0};
  std::latch allocated(8);  // every thread holds its blocks before any leaves: 8 slots, 8 shards
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      try {
        Allocation a = alloc->allocate(3 * MiB + static_cast<std::size_t>(t) * 4096, shared);
        Allocation b = alloc->allocate(4096, shared);
        Allocation c = alloc->allocate(16 * MiB, shared);
        allocated.arrive_and_wait();
        fake->submit(shared);
        std::lock_guard<std::mutex> lock(mutex);
        held.push_back(std::move(a));
      } catch (const InvalidArgument&) {
        refused.fetch_add(1);  // a shard counted as a stream
        allocated.count_down();
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(refused.load(), 0);
  // 1024 streams are live, the shared one with up to 8 pools: the next stream is one too many.
  EXPECT_THROW(alloc->allocate(512, next), InvalidArgument);
  destroy(*alloc, *fake, shared);
  EXPECT_THROW(alloc->allocate(512, next), InvalidArgument);  // its blocks are still in use
  held.clear();  // the last blocks back: every shard is reclaimed
  const std::int64_t mallocs = alloc->stats().device_mallocs;
  Allocation a = alloc->allocate(16 * MiB, next);
  EXPECT_NE(a.data(), nullptr);
  EXPECT_EQ(alloc->stats().device_mallocs, mallocs);  // a segment of the dead stream's
  EXPECT_EQ(fake->n_events_on_destroyed_streams(), 0);
  expect_consistent(1024, 1023 * 512 + 16 * static_cast<std::int64_t>(MiB));
  keep.clear();
  a.reset();
  expect_all_back();
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// Random stream lifetimes (handles reused), blocks allocated on them, recorded on others, kept past their
// stream's destruction and released in random order: no event is ever recorded on a destroyed stream (on a
// GPU that is undefined), including streams that never allocated but were named by record_stream.
TEST(AllocatorStreamLife, RandomLifetimesNeverRecordOnADestroyedStream) {
  for (int seed = 0; seed < 100; ++seed) {
    auto owned = std::make_unique<FakeBackend>(std::size_t(1) << 32);
    FakeBackend* fake = owned.get();
    auto alloc = std::make_unique<CachingDeviceAllocator>(std::move(owned));
    std::mt19937 rng(static_cast<unsigned>(seed));
    std::vector<Allocation> live;
    bool alive[4] = {true, false, false, false};
    const cudaStream_t st[4] = {FakeBackend::fake_stream(1), FakeBackend::fake_stream(2),
                                FakeBackend::fake_stream(3), FakeBackend::fake_stream(4)};
    for (int it = 0; it < 400; ++it) {
      const int s = static_cast<int>(rng() % 4), op = static_cast<int>(rng() % 7);
      if (op == 0 && s > 0) {
        if (alive[s]) {
          alloc->stream_destroying(st[s]);
          fake->destroy_stream(st[s]);
        } else {
          fake->create_stream(st[s]);
          alloc->stream_created(st[s]);
        }
        alive[s] = !alive[s];
      } else if (op <= 2 && alive[s]) {
        const std::size_t bytes = rng() % 3 == 0 ? MiB * (1 + rng() % 4) : 512 * (1 + rng() % 64);
        live.push_back(alloc->allocate(bytes, st[s]));
      } else if (op == 3 && !live.empty() && alive[s]) {
        alloc->record_stream(live[rng() % live.size()], st[s]);
      } else if (op == 4 && !live.empty()) {
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(rng() % live.size()));
      } else if (op == 5) {
        fake->complete_all();
      } else if (op == 6 && rng() % 8 == 0) {
        alloc->empty_cache();
      }
      if (alive[s] && rng() % 3 == 0) fake->submit(st[s]);
    }
    live.clear();
    fake->complete_all();
    alloc->empty_cache();
    ASSERT_EQ(fake->n_events_on_destroyed_streams(), 0) << "seed " << seed;
    EXPECT_EQ(fake->n_live_allocations(), 0) << "seed " << seed;
  }
}

}  // namespace
}  // namespace mt
