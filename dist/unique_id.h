// The NCCL unique id: 128 bytes that rank 0 makes and every rank passes to Communicator::init. It travels as
// text (256 hex digits) through an environment variable or a file on a path every process can read.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace mt::dist {

class UniqueId {
 public:
  static constexpr std::size_t kBytes = 128;  // NCCL_UNIQUE_ID_BYTES

  UniqueId() = default;  // all zero: not an id NCCL made

  // ncclGetUniqueId: call it on one rank (rank 0) and hand the result to the others. It starts NCCL's
  // bootstrap listener in this process, so an id serves one communicator: make a new one to rebuild.
  static UniqueId create();

  std::string to_hex() const;  // 256 lowercase hex digits
  // InvalidArgument naming the length or the first character that is not a hex digit. Surrounding
  // whitespace (a trailing newline) is ignored.
  static UniqueId from_hex(std::string_view hex);

  // Writes to_hex() and a newline to `path`, atomically: a temporary file beside it, then a rename, so a
  // reader never sees half an id. InvalidArgument when the file cannot be written.
  void write_file(const std::string& path) const;
  // Waits for `path` to appear (polling) and reads it; DistError once `timeout` has passed without it,
  // InvalidArgument when what it holds is not an id.
  static UniqueId read_file(const std::string& path, std::chrono::milliseconds timeout);
  // Rank 0 creates an id and writes it to `path`; the other ranks read it (waiting up to `timeout`). The path
  // must be fresh (no file of an earlier run there): scripts/launch.sh makes one per run.
  static UniqueId exchange_file(const std::string& path, int rank, std::chrono::milliseconds timeout);
  // The hex id in environment variable `name`; InvalidArgument when unset or malformed.
  static UniqueId from_env(const char* name = "MT_NCCL_ID");

  const std::array<char, kBytes>& bytes() const noexcept { return m_bytes; }
  std::array<char, kBytes>& bytes() noexcept { return m_bytes; }
  bool operator==(const UniqueId&) const = default;

 private:
  std::array<char, kBytes> m_bytes{};
};

}  // namespace mt::dist
