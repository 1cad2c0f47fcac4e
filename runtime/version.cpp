#include "runtime/version.h"

namespace mt {

const char* version() noexcept {
  return MT_VERSION_STRING;
}

}  // namespace mt
