// The one op-test harness. A case names the op, its input shapes and layouts, dtype and tolerance; the
// harness makes seeded inputs, runs the op on CUDA and on the CPU (the Eigen reference), compares the results
// (max abs, max rel, NMSE; exact ops bit for bit), checks the guard bands around `out` buffers, and prints
// the seed, shapes and layouts on failure. Adding an op means adding cases, not a new harness.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "minitensor/tensor/tensor.h"

namespace mt::test {

struct Tolerance {
  double abs = 1e-5;  // per element: |got - ref| <= abs + rel * |ref|
  double rel = 1e-5;
  bool exact = false;  // bit-identical (NaN matches any NaN; -0 differs from +0)
  static Tolerance exactly() { return {0, 0, true}; }
  static Tolerance close(double abs, double rel) { return {abs, rel, false}; }
};

struct Comparison {
  bool ok = true;
  std::int64_t n_bad = 0;
  double max_abs = 0, max_rel = 0, nmse = 0;
  std::string first_bad;  // "index 17: got 1.5, expected 1.25"
  std::string summary() const;
};

// Compares two tensors of equal shape and dtype, on any devices. NaN must stand where the reference has NaN,
// and infinities must match exactly.
Comparison compare(const Tensor& got, const Tensor& ref, const Tolerance& tol);

// How an input is laid out in memory. Every layout holds the same logical values for the same seed.
enum class Layout {
  Contiguous,
  Offset1,     // contiguous, but starting one element into its storage (never 16-byte aligned)
  Transposed,  // the last two dims stored swapped (a transpose view); rank < 2: contiguous
  Strided,     // every other element of the last dim (stride 2)
  Expanded,    // dim 0 stored once and broadcast with stride 0 (all rows equal); rank 0: contiguous
};
const char* layout_name(Layout l);

struct InputSpec {
  Shape shape;
  Layout layout = Layout::Contiguous;
  DType dtype = DType::F32;
  double lo = -2.0, hi = 2.0;     // uniform range (integers: rounded)
  double special_fraction = 0.0;  // fraction of elements replaced by NaN, +-Inf, -0, denormals (float32)
};

struct OpCase {
  std::string name;
  std::vector<InputSpec> inputs;
  Tolerance tol;
  std::uint64_t seed = 1234;
  // Runs the op on tensors that all live on one device (CPU: the Eigen reference path; CUDA: the kernels).
  std::function<Tensor(const std::vector<Tensor>&)> run;
  // Optional: the same op writing into a given `out` (checked with guard bands on both devices).
  std::function<void(const std::vector<Tensor>&, Tensor& out)> run_out;
};

// Makes the case's inputs on `device`: identical values on every device for the same seed.
std::vector<Tensor> make_inputs(const OpCase& c, Device device);
Tensor make_input(const InputSpec& spec, std::uint64_t seed, Device device);

// Runs CPU and CUDA and compares. Without a GPU, only the CPU path runs (it must not throw, and its out= form
// must match it and keep its guard bands), then the case reports GTEST_SKIP "no CUDA device: <reason>".
void run_case(const OpCase& c);

// A tensor view in the middle of a buffer whose guard bands hold a sentinel pattern.
class Guarded {
 public:
  Guarded(const Shape& shape, DType dtype, Device device, std::int64_t guard_elems = 64);
  Tensor& view() { return m_view; }
  // Empty when the guard bands are intact, else a description of the first overwritten sentinel.
  std::string check() const;

 private:
  Tensor m_buffer, m_view;
  std::int64_t m_guard;
};

}  // namespace mt::test
