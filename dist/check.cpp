// Checked mode: before a collective, every rank's signature (collective, reduce op, argument, dtype, shape)
// is all-gathered and compared with rank 0's, so a mismatch is a typed error on every rank instead of garbage
// or a hang.
#if MT_HAS_NCCL

#include <array>
#include <cstring>

#include "minitensor/dist/detail/call.h"
#include "minitensor/memory/allocator.h"
#include "minitensor/runtime/error.h"

namespace mt::dist::detail {
namespace {

// One signature as int64 words: magic, kind, reduce op, arg, dtype, rank, shape (kMaxDims extents).
constexpr std::int64_t kMagic = 0x6d74646973744348;  // "mtdistCH": a peer in another call shows as garbage
constexpr int kWords = 6 + kMaxDims;

std::array<std::int64_t, kWords> encode(const Signature& s) {
  std::array<std::int64_t, kWords> w{};
  w[0] = kMagic;
  w[1] = s.kind;
  w[2] = s.reduce_op;
  w[3] = s.arg;
  w[4] = static_cast<std::int64_t>(s.dtype);
  w[5] = s.shape.rank();
  for (int d = 0; d < s.shape.rank(); ++d) w[static_cast<std::size_t>(6 + d)] = s.shape[d];
  return w;
}

const char* kind_name(std::int64_t kind) {
  switch (kind) {
    case Signature::AllReduce:
      return "all_reduce";
    case Signature::AllGather:
      return "all_gather";
    case Signature::ReduceScatter:
      return "reduce_scatter";
    case Signature::Broadcast:
      return "broadcast";
    case Signature::Barrier:
      return "barrier";
  }
  return "an unknown call";
}

Shape shape_of(const std::int64_t* w) {
  Shape s;
  const int rank = static_cast<int>(std::min<std::int64_t>(std::max<std::int64_t>(w[5], 0), kMaxDims));
  for (int d = 0; d < rank; ++d) s.push_back(w[6 + d]);
  return s;
}

std::string dtype_text(std::int64_t code) {
  if (code >= 0 && code <= static_cast<std::int64_t>(DType::U8)) return dtype_name(static_cast<DType>(code));
  return ::mt::detail::str("dtype code ", code);
}

}  // namespace

void Call::check_across_ranks(const Signature& signature) {
  if (!m_state->checked || m_grouped || m_capturing) return;
  const int world = m_state->world;
  const std::size_t bytes = sizeof(std::int64_t) * kWords * static_cast<std::size_t>(world);
  Allocation host = pinned_allocator().allocate(bytes, nullptr);
  Allocation device = cuda_allocator(m_state->device).allocate(bytes, m_stream);
  auto* words = static_cast<std::int64_t*>(host.data());
  auto* mine = static_cast<char*>(device.data()) +
               sizeof(std::int64_t) * kWords * static_cast<std::size_t>(m_state->rank);
  const auto encoded = encode(signature);
  std::memcpy(words, encoded.data(), sizeof(encoded));
  MT_CUDA_CHECK(cudaMemcpyAsync(mine, words, sizeof(encoded), cudaMemcpyHostToDevice, m_stream));
  const std::string op = m_op + " (checked mode)";
  check(
      *m_state,
      watched({m_state}, op,
              [&] { return ncclAllGather(mine, device.data(), kWords, ncclInt64, m_state->comm, m_stream); }),
      op);
  MT_CUDA_CHECK(cudaMemcpyAsync(words, device.data(), bytes, cudaMemcpyDeviceToHost, m_stream));
  Event copied;
  copied.record(m_stream);
  poll_until(*m_state, op, m_state->timeout, [&] { return copied.query(); });

  // Every rank compares every rank with rank 0, in rank order, so all throw the same error.
  const std::int64_t* first = words;
  for (int r = 1; r < world; ++r) {
    const std::int64_t* w = words + static_cast<std::ptrdiff_t>(r) * kWords;
    const auto where = [&] {
      return ::mt::detail::str("mt::dist ", m_op, " (rank ", m_state->rank, " of ", world,
                               ", checked mode): ");
    };
    MT_CHECK(w[0] == kMagic && first[0] == kMagic, InvalidArgument, where(), "rank ", r,
             " is not in a checked collective (is MT_DIST_CHECK the same on every rank?)");
    MT_CHECK(w[1] == first[1], InvalidArgument, where(), "rank 0 calls ", kind_name(first[1]), " but rank ",
             r, " calls ", kind_name(w[1]));
    MT_CHECK(w[2] == first[2], InvalidArgument, where(), "rank 0 reduces with ",
             first[2] >= 0 ? reduce_op_name(static_cast<ReduceOp>(first[2])) : "none", " but rank ", r,
             " with ", w[2] >= 0 ? reduce_op_name(static_cast<ReduceOp>(w[2])) : "none");
    MT_CHECK(w[3] == first[3], InvalidArgument, where(), "rank 0 passes ",
             first[1] == Signature::Broadcast ? "root " : "dim ", first[3], " but rank ", r, " passes ",
             w[3]);
    MT_CHECK(w[4] == first[4], DTypeError, where(), "rank 0 has dtype ", dtype_text(first[4]), " but rank ",
             r, " has ", dtype_text(w[4]));
    MT_CHECK(shape_of(w) == shape_of(first), ShapeError, where(), "rank 0 has shape ", shape_of(first),
             " but rank ", r, " has ", shape_of(w));
  }
}

}  // namespace mt::dist::detail

#endif  // MT_HAS_NCCL
