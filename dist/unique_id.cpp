#include "minitensor/dist/unique_id.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "minitensor/dist/error.h"
#include "minitensor/runtime/error.h"

#if MT_HAS_NCCL
#include <nccl.h>
static_assert(sizeof(ncclUniqueId) == mt::dist::UniqueId::kBytes, "UniqueId must hold an ncclUniqueId");
#endif

namespace mt::dist {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

UniqueId UniqueId::create() {
#if MT_HAS_NCCL
  ncclUniqueId id;
  const ncclResult_t result = ncclGetUniqueId(&id);
  if (result != ncclSuccess) {
    throw DistError(::mt::detail::str("ncclGetUniqueId failed: ", ncclGetErrorString(result), " (",
                                      static_cast<int>(result), "): ", ncclGetLastError(nullptr)),
                    static_cast<int>(result), "UniqueId::create", -1, 0);
  }
  UniqueId out;
  std::memcpy(out.m_bytes.data(), id.internal, kBytes);
  return out;
#else
  throw DistUnavailable("UniqueId::create");
#endif
}

std::string UniqueId::to_hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * kBytes, '0');
  for (std::size_t i = 0; i < kBytes; ++i) {
    const auto byte = static_cast<unsigned char>(m_bytes[i]);
    out[2 * i] = kDigits[byte >> 4];
    out[2 * i + 1] = kDigits[byte & 15];
  }
  return out;
}

UniqueId UniqueId::from_hex(std::string_view text) {
  const std::string_view hex = trim(text);
  MT_CHECK(hex.size() == 2 * kBytes, InvalidArgument, "UniqueId::from_hex: expected ", 2 * kBytes,
           " hex digits, got ", hex.size(), " characters");
  UniqueId out;
  for (std::size_t i = 0; i < 2 * kBytes; ++i) {
    MT_CHECK(hex_value(hex[i]) >= 0, InvalidArgument, "UniqueId::from_hex: character ", i, " ('", hex[i],
             "') is not a hex digit");
  }
  for (std::size_t i = 0; i < kBytes; ++i) {
    out.m_bytes[i] = static_cast<char>((hex_value(hex[2 * i]) << 4) | hex_value(hex[2 * i + 1]));
  }
  return out;
}

void UniqueId::write_file(const std::string& path) const {
  // Same folder, so the rename stays on one file system and is atomic.
  const std::string tmp = ::mt::detail::str(path, ".tmp.", ::getpid());
  {
    std::ofstream file(tmp, std::ios::out | std::ios::trunc);
    MT_CHECK(file.good(), InvalidArgument, "UniqueId::write_file: cannot create '", tmp, "'");
    file << to_hex() << '\n';
    file.flush();
    MT_CHECK(file.good(), InvalidArgument, "UniqueId::write_file: cannot write '", tmp, "'");
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) {
    std::filesystem::remove(tmp, error);
    MT_THROW(InvalidArgument, "UniqueId::write_file: cannot rename '", tmp, "' to '", path, "'");
  }
}

UniqueId UniqueId::read_file(const std::string& path, std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    std::ifstream file(path);
    if (file.good()) {
      std::stringstream text;
      text << file.rdbuf();
      return from_hex(text.str());
    }
    if (clock::now() - start >= timeout) {
      throw DistError(::mt::detail::str("no unique id appeared at '", path, "' within ",
                                        std::chrono::duration<double>(timeout).count(),
                                        " s (is rank 0 running, and is the path shared by every process?)"),
                      DistError::kNoCode, "UniqueId::read_file", -1, 0);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

UniqueId UniqueId::exchange_file(const std::string& path, int rank, std::chrono::milliseconds timeout) {
  MT_CHECK(rank >= 0, InvalidArgument, "UniqueId::exchange_file: rank ", rank, " is negative");
  if (rank == 0) {
    const UniqueId id = create();
    id.write_file(path);
    return id;
  }
  return read_file(path, timeout);
}

UniqueId UniqueId::from_env(const char* name) {
  const char* value = std::getenv(name);
  MT_CHECK(value != nullptr && *value != '\0', InvalidArgument, "UniqueId::from_env: ", name, " is not set");
  try {
    return from_hex(value);
  } catch (const InvalidArgument& e) {
    MT_THROW(InvalidArgument, "UniqueId::from_env: ", name, ": ", e.what());
  }
}

}  // namespace mt::dist
