// Fused attention through the op harness against the float64 Eigen reference: head dims 32 / 64 / 128 (the
// fused kernel) and 48 (composed), T not a multiple of the 64-row tile, Tq != Tk, causal, additive masks
// (broadcast, fully masked rows), permuted and transposed views, ranks 2-4; error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "minitensor/ops/attention.h"
#include "minitensor/ops/detail/attention.h"
#include "minitensor/ops/elementwise.h"
#include "minitensor/ops/reduce.h"
#include "tests/common/gpu.h"
#include "tests/common/op_harness.h"

namespace mt {
namespace {

using test::InputSpec;
using test::Layout;
using test::OpCase;
using test::Tolerance;

void run_attention(const Shape& q, const Shape& kv, bool causal, Layout layout = Layout::Contiguous,
                   const Shape& mask = {}, bool with_mask = false) {
  OpCase c;
  c.name = std::string("attention") + (causal ? " causal" : "") + (with_mask ? " mask" : "");
  c.inputs = {InputSpec{q, layout}, InputSpec{kv, layout}, InputSpec{kv, Layout::Contiguous}};
  if (with_mask) c.inputs.push_back(InputSpec{mask, Layout::Contiguous, DType::F32, -3.0, 3.0});
  c.tol = Tolerance::close(2e-5, 1e-4);
  c.run = [=](const std::vector<Tensor>& in) {
    AttentionOptions o;
    o.causal = causal;
    if (with_mask) o.mask = in[3];
    return attention(in[0], in[1], in[2], o);
  };
  test::run_case(c);
}

TEST(Attention, HeadDims_Lengths_Causal) {
  for (std::int64_t d : {32, 64, 128, 48})
    for (std::int64_t t : {1, 17, 64, 130})
      for (bool causal : {false, true}) run_attention({2, 3, t, d}, {2, 3, t, d}, causal);
}

TEST(Attention, QueriesAndKeysDiffer) {
  for (bool causal : {false, true}) {
    run_attention({1, 2, 70, 64}, {1, 2, 150, 64}, causal);
    run_attention({1, 2, 150, 64}, {1, 2, 70, 64}, causal);
  }
}

TEST(Attention, Layouts_Ranks) {
  for (Layout l : {Layout::Offset1, Layout::Transposed, Layout::Strided})
    run_attention({2, 2, 65, 64}, {2, 2, 65, 64}, true, l);
  run_attention({6, 33, 32}, {6, 33, 32}, false);  // (batch * heads, T, D)
  run_attention({40, 64}, {40, 64}, true);         // (T, D)
  run_attention({2, 2, 2, 20, 32}, {2, 2, 2, 20, 32}, false);
}

TEST(Attention, AdditiveMasks) {
  run_attention({2, 3, 70, 64}, {2, 3, 70, 64}, false, Layout::Contiguous, {70, 70}, true);  // broadcast
  run_attention({2, 3, 70, 64}, {2, 3, 70, 64}, true, Layout::Contiguous, {2, 1, 70, 70}, true);
  run_attention({1, 2, 20, 128}, {1, 2, 90, 128}, false, Layout::Contiguous, {1, 2, 20, 90}, true);
  run_attention({1, 2, 20, 48}, {1, 2, 90, 48}, false, Layout::Contiguous, {20, 90}, true);  // composed
}

// Heads in (B, T, H, D) order viewed as (B, H, T, D): the kernel reads the strided rows in place.
TEST(Attention, PermutedHeads) {
  OpCase c;
  c.name = "attention permuted heads";
  c.inputs = {InputSpec{{2, 100, 4, 64}}, InputSpec{{2, 100, 4, 64}}, InputSpec{{2, 100, 4, 64}}};
  c.tol = Tolerance::close(2e-5, 1e-4);
  c.run = [](const std::vector<Tensor>& in) {
    AttentionOptions o;
    o.causal = true;
    return attention(in[0].permute({0, 2, 1, 3}), in[1].permute({0, 2, 1, 3}), in[2].permute({0, 2, 1, 3}),
                     o);
  };
  test::run_case(c);
}

// The result written straight into a (B, T, H, D) buffer through its (B, H, T, D) permuted view, at T not a
// multiple of the tile and batch 1; an out not contiguous along D is refused.
TEST(Attention, PermutedOut) {
  const Tensor q = rand({1, 2, 5, 32}, 1);
  Tensor bad = empty({1, 2, 32, 5}).transpose(-1, -2);
  EXPECT_THROW(attention_out(q, q, q, bad), InvalidArgument);
  const Tensor buf = full({1, 5, 2, 32}, 7.0);
  Tensor out = buf.permute({0, 2, 1, 3});
  attention_out(q, q, q, out);
  EXPECT_EQ(max(abs(buf.permute({0, 2, 1, 3}) - attention(q, q, q))).item<float>(), 0.f);
  for (std::int64_t d : {32, 64, 128}) {
    OpCase c;
    c.name = "attention into permuted out, head dim " + std::to_string(d);
    c.inputs = {InputSpec{{1, 3, 37, d}}, InputSpec{{1, 3, 37, d}}, InputSpec{{1, 3, 37, d}}};
    c.tol = Tolerance::close(2e-5, 1e-4);
    c.run = [d](const std::vector<Tensor>& in) {
      AttentionOptions o;
      o.causal = true;
      const Tensor buf = full({1, 37, 3, d}, 7.0, DType::F32, in[0].device());
      Tensor out = buf.permute({0, 2, 1, 3});
      attention_out(in[0], in[1], in[2], out, o);
      return buf.permute({0, 2, 1, 3});
    };
    test::run_case(c);
  }
}

// A row whose keys are all masked out gives zeros (no NaN); the other rows are untouched by it.
TEST(Attention, FullyMaskedRowsGiveZeros) {
  const std::int64_t t = 70;
  std::vector<float> m(static_cast<size_t>(t * t), 0.f);
  for (std::int64_t j = 0; j < t; ++j) m[static_cast<size_t>(3 * t + j)] = -INFINITY;  // row 3
  const Tensor mask = from_vector(m, Shape{t, t});
  const Tensor q = rand({1, 2, t, 64}, 1), k = rand({1, 2, t, 64}, 2), v = rand({1, 2, t, 64}, 3);
  AttentionOptions o;
  o.mask = mask;
  const Tensor ref = attention(q, k, v, o);
  const std::vector<float> r = ref.select(1, 1).select(1, 3).to_vector<float>();
  for (float x : r) EXPECT_EQ(x, 0.f);
  MT_REQUIRE_GPU();
  o.mask = mask.cuda();
  const Tensor got = attention(q.cuda(), k.cuda(), v.cuda(), o);
  const test::Comparison cmp = test::compare(got, ref, Tolerance::close(2e-5, 1e-4));
  EXPECT_TRUE(cmp.ok) << cmp.summary();
}

// The tensor-core kernel (AttentionOptions::math): TF32x3 within the float32 kernel's tolerance of the
// float64 reference, TF32 within TF32's (about 1e-3 relative on the scores); every head dim, ragged lengths,
// causal, masks, strided views. On the CPU the mode changes nothing (the harness's CPU half is the reference
// itself).
void run_attention_math(MathMode math, const Shape& q, const Shape& kv, bool causal,
                        Layout layout = Layout::Contiguous, const Shape& mask = {}, bool with_mask = false) {
  OpCase c;
  c.name = std::string("attention ") + math_mode_name(math) + (causal ? " causal" : "") +
           (with_mask ? " mask" : "");
  c.inputs = {InputSpec{q, layout}, InputSpec{kv, layout}, InputSpec{kv, Layout::Contiguous}};
  if (with_mask) c.inputs.push_back(InputSpec{mask, Layout::Contiguous, DType::F32, -3.0, 3.0});
  c.tol = math == MathMode::TF32x3 ? Tolerance::close(2e-5, 1e-4) : Tolerance::close(5e-3, 5e-3);
  c.run = [=](const std::vector<Tensor>& in) {
    AttentionOptions o;
    o.causal = causal;
    o.math = math;
    if (with_mask) o.mask = in[3];
    return attention(in[0], in[1], in[2], o);
  };
  test::run_case(c);
}

TEST(Attention, TensorCores_HeadDims_Lengths_Causal_Masks) {
  for (MathMode math : {MathMode::TF32x3, MathMode::TF32}) {
    for (std::int64_t d : {32, 64, 128})
      for (std::int64_t t : {1, 17, 64, 130})
        for (bool causal : {false, true}) run_attention_math(math, {2, 3, t, d}, {2, 3, t, d}, causal);
    run_attention_math(math, {1, 2, 70, 64}, {1, 2, 150, 64}, true);
    run_attention_math(math, {1, 2, 150, 64}, {1, 2, 70, 64}, false);
    run_attention_math(math, {2, 2, 65, 64}, {2, 2, 65, 64}, true, Layout::Strided);
    run_attention_math(math, {2, 3, 70, 64}, {2, 3, 70, 64}, false, Layout::Contiguous, {70, 70}, true);
    run_attention_math(math, {1, 2, 20, 128}, {1, 2, 90, 128}, false, Layout::Contiguous, {1, 2, 20, 90},
                       true);
  }
}

// Rows not 16-byte aligned on the tensor cores: q, k and v one float past an aligned start (4-byte tile
// copies), and an out whose rows start at odd offsets (scalar stores), every head dim with a kernel.
TEST(Attention, TensorCores_UnalignedRows) {
  for (std::int64_t d : {32, 64}) {
    OpCase c;
    c.name = "attention TF32x3 unaligned rows, head dim " + std::to_string(d);
    c.inputs = {InputSpec{{2, 2, 45, d}, Layout::Offset1}, InputSpec{{2, 2, 77, d}, Layout::Offset1},
                InputSpec{{2, 2, 77, d}, Layout::Offset1}};
    c.tol = Tolerance::close(2e-5, 1e-4);
    c.run = [d](const std::vector<Tensor>& in) {
      AttentionOptions o;
      o.causal = true;
      o.math = MathMode::TF32x3;
      const Tensor buf = full({2, 2, 45, d + 1}, 7.0, DType::F32, in[0].device());
      Tensor out = buf.narrow(-1, 1, d);
      attention_out(in[0], in[1], in[2], out, o);
      return out;
    };
    test::run_case(c);
  }
}

// More blocks than the card holds at once (3 per SM): later blocks reuse shared memory and registers of
// finished ones; a mask over Tq != Tk at head dim 32.
TEST(Attention, TensorCores_ManyBlocks) {
  for (bool causal : {false, true})
    run_attention_math(MathMode::TF32x3, {2, 12, 700, 64}, {2, 12, 700, 64}, causal);
  run_attention_math(MathMode::TF32x3, {2, 12, 700, 32}, {2, 12, 300, 32}, false, Layout::Contiguous,
                     {700, 300}, true);
}

// Few query tiles over long keys: the keys split over several blocks and a combining pass
// (detail::attention_kv_splits); causal (light first tiles whose later splits see no key), masks over
// Tq != Tk, head dims 32 and 64, both tensor-core modes.
TEST(Attention, TensorCores_KeySplits) {
  for (MathMode math : {MathMode::TF32x3, MathMode::TF32}) {
    for (bool causal : {false, true}) run_attention_math(math, {1, 3, 1000, 32}, {1, 3, 1000, 32}, causal);
    run_attention_math(math, {1, 2, 300, 64}, {1, 2, 700, 64}, false);
    run_attention_math(math, {1, 2, 700, 64}, {1, 2, 700, 64}, true, Layout::Strided);
    run_attention_math(math, {2, 1, 130, 64}, {2, 1, 900, 64}, false, Layout::Contiguous, {130, 900}, true);
  }
}

// The rule: only where the query tiles give under 2 blocks per SM, with at least 8 key tiles a split, and
// the blocks held to 6 per SM.
TEST(Attention, KeySplitRule) {
  using detail::attention_kv_splits;
  EXPECT_EQ(attention_kv_splits(1024, 1024, 12, 132), 4);  // 192 blocks, 32 key tiles
  EXPECT_EQ(attention_kv_splits(1024, 1024, 16, 132), 3);  // 256 blocks: 3 splits make 768 <= 792
  EXPECT_EQ(attention_kv_splits(512, 512, 48, 132), 1);    // 384 blocks: enough
  EXPECT_EQ(attention_kv_splits(128, 128, 96, 132), 1);    // 4 key tiles
  EXPECT_EQ(attention_kv_splits(300, 700, 2, 132), 2);     // 22 key tiles
  EXPECT_EQ(attention_kv_splits(64, 100000, 1, 132), detail::kMaxKvSplits);
  EXPECT_EQ(attention_kv_splits(0, 1024, 12, 132), 1);
  EXPECT_EQ(attention_kv_splits(1024, 0, 12, 132), 1);
  EXPECT_EQ(attention_kv_splits(1024, 1024, 12, 0), 1);  // no device
}

// A fully masked row (row 5 of a t x t mask) gives zeros on the tensor cores.
void check_fully_masked_row_tc(std::int64_t t) {
  std::vector<float> m(static_cast<size_t>(t * t), 0.f);
  for (std::int64_t j = 0; j < t; ++j) m[static_cast<size_t>(5 * t + j)] = -INFINITY;  // row 5
  const Tensor q = rand({1, 2, t, 64}, 4), k = rand({1, 2, t, 64}, 5), v = rand({1, 2, t, 64}, 6);
  AttentionOptions o;
  o.mask = from_vector(m, Shape{t, t});
  const Tensor ref = attention(q, k, v, o);
  MT_REQUIRE_GPU();
  o.mask = o.mask.cuda();
  o.math = MathMode::TF32x3;
  const Tensor got = attention(q.cuda(), k.cuda(), v.cuda(), o);
  for (float x : got.select(1, 0).select(1, 5).to_vector<float>()) EXPECT_EQ(x, 0.f);
  const test::Comparison cmp = test::compare(got, ref, Tolerance::close(2e-5, 1e-4));
  EXPECT_TRUE(cmp.ok) << cmp.summary();
}

// A fully masked row gives zeros on the tensor cores too, with and without key splits.
TEST(Attention, TensorCores_FullyMaskedRowsGiveZeros) {
  for (const std::int64_t t : {70, 600}) {
    SCOPED_TRACE("t " + std::to_string(t));
    check_fully_masked_row_tc(t);
  }
}

TEST(Attention, Errors) {
  const Tensor q = rand({2, 8, 16}, 1);
  EXPECT_THROW(attention(zeros({2, 8, 16}, DType::I32), q, q), DTypeError);
  EXPECT_THROW(attention(q, rand({2, 8, 8}, 2), q), ShapeError);                     // head dims differ
  EXPECT_THROW(attention(q, q, rand({2, 9, 16}, 3)), ShapeError);                    // key counts differ
  EXPECT_THROW(attention(q, rand({3, 8, 16}, 2), rand({3, 8, 16}, 3)), ShapeError);  // batch differs
  EXPECT_THROW(attention(rand({16}, 1), rand({16}, 1), rand({16}, 1)), ShapeError);
  AttentionOptions o;
  o.mask = rand({5, 8}, 4);
  EXPECT_THROW(attention(q, q, q, o), ShapeError);
  o.mask = Tensor();
  o.scale = std::numeric_limits<double>::infinity();
  EXPECT_THROW(attention(q, q, q, o), InvalidArgument);
  EXPECT_EQ(attention(rand({2, 0, 16}, 1), rand({2, 5, 16}, 1), rand({2, 5, 4}, 1)).shape(),
            (Shape{2, 0, 4}));
  if (cuda_available()) {
    EXPECT_THROW(attention(q.cuda(), q, q), DeviceError);
  }
}

}  // namespace
}  // namespace mt
