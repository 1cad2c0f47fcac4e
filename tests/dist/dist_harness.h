// Helpers of the mt::dist tests: one thread per rank, exact per-rank values and their host reductions.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "minitensor/dist/dist.h"
#include "minitensor/runtime/device.h"
#include "minitensor/tensor/tensor.h"
#include "tests/common/gpu.h"

#define MT_REQUIRE_NCCL()                                                                   \
  do {                                                                                      \
    if (!::mt::dist::nccl_available()) GTEST_SKIP() << "minitensor was built without NCCL"; \
  } while (0)

namespace mt::test {

// Runs fn(rank) on one thread per rank with device `rank` current; joins them all, then rethrows the first
// exception (so a failing rank cannot leave the others' threads behind).
inline void on_each_rank(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        DeviceGuard guard(r);
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

inline std::vector<int> first_devices(int n) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(i);
  return out;
}

// Rank r's value at i: integers in [-8, 8], so sums, products and averages over 2 or 4 ranks are exact in
// float.
inline float value(int rank, std::int64_t i) {
  return static_cast<float>((i * 7 + rank * 13) % 17) - 8.0f;
}
inline std::vector<float> values(int rank, std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = value(rank, i);
  return out;
}

template <class T>
T reduce_host(dist::ReduceOp op, const std::vector<T>& xs) {
  T acc = xs[0];
  for (std::size_t k = 1; k < xs.size(); ++k) {
    switch (op) {
      case dist::ReduceOp::Sum:
      case dist::ReduceOp::Avg:
        acc = static_cast<T>(acc + xs[k]);
        break;
      case dist::ReduceOp::Max:
        acc = std::max(acc, xs[k]);
        break;
      case dist::ReduceOp::Min:
        acc = std::min(acc, xs[k]);
        break;
      case dist::ReduceOp::Prod:
        acc = static_cast<T>(acc * xs[k]);
        break;
    }
  }
  if (op == dist::ReduceOp::Avg) acc = static_cast<T>(acc / static_cast<T>(xs.size()));
  return acc;
}

// The reduction over `world` ranks of value(r, offset + i), i < n.
inline std::vector<float> reduced(dist::ReduceOp op, int world, std::int64_t n, std::int64_t offset = 0) {
  std::vector<float> out(static_cast<std::size_t>(n));
  std::vector<float> xs(static_cast<std::size_t>(world));
  for (std::int64_t i = 0; i < n; ++i) {
    for (int r = 0; r < world; ++r) xs[static_cast<std::size_t>(r)] = value(r, offset + i);
    out[static_cast<std::size_t>(i)] = reduce_host(op, xs);
  }
  return out;
}

// The large size of the size sweeps: 2^28 + 3 elements with MT_DIST_LARGE=1 (1 GiB of float32 per buffer),
// else 2^22 + 3.
inline std::int64_t large_size() {
  const char* env = std::getenv("MT_DIST_LARGE");
  return (env && std::strcmp(env, "1") == 0) ? (std::int64_t{1} << 28) + 3 : (std::int64_t{1} << 22) + 3;
}

constexpr dist::ReduceOp kAllOps[] = {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Max,
                                      dist::ReduceOp::Min, dist::ReduceOp::Prod};

// EXPECT that `got` equals `want` element for element, reporting the count and the first mismatch only.
template <class T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) {
      if (bad == 0) first = i;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ, the first at "
                     << first << ": got " << +got[first] << ", want " << +want[first];
}

}  // namespace mt::test
