// What holds with or without NCCL: whether it is there, and the defaults read from the environment.
#include <cstdlib>
#include <cstring>
#include <string>

#include "minitensor/dist/communicator.h"
#include "minitensor/runtime/error.h"

#if MT_HAS_NCCL
#include <nccl.h>
#endif

namespace mt::dist {

bool nccl_available() noexcept {
#if MT_HAS_NCCL
  return true;
#else
  return false;
#endif
}

std::string nccl_version() {
#if MT_HAS_NCCL
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "";
  // Since NCCL 2.9 the code is major * 10000 + minor * 100 + patch.
  return ::mt::detail::str(code / 10000, ".", (code / 100) % 100, ".", code % 100);
#else
  return "";
#endif
}

std::chrono::milliseconds default_timeout() {
  const char* text = std::getenv("MT_DIST_TIMEOUT_S");
  if (text && *text) {
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    MT_CHECK(end != text && *end == '\0' && seconds > 0, InvalidArgument, "MT_DIST_TIMEOUT_S='", text,
             "' is not a positive number of seconds");
    return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0 + 0.5));
  }
  return std::chrono::minutes(5);
}

bool default_checked() {
  const char* text = std::getenv("MT_DIST_CHECK");
  if (text && *text) {
    MT_CHECK(std::strcmp(text, "0") == 0 || std::strcmp(text, "1") == 0, InvalidArgument, "MT_DIST_CHECK='",
             text, "' must be 0 or 1");
    return text[0] == '1';
  }
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

bool default_blocking() {
  const char* text = std::getenv("MT_DIST_BLOCKING");
  if (!text || !*text) return true;
  MT_CHECK(std::strcmp(text, "0") == 0 || std::strcmp(text, "1") == 0, InvalidArgument, "MT_DIST_BLOCKING='",
           text, "' must be 0 or 1");
  return text[0] == '1';
}

}  // namespace mt::dist
