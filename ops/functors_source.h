// The text of ops/functors.h, embedded in the library at build time, so that run-time compiled (NVRTC)
// kernels use exactly the math the precompiled kernels were built with, with no source tree needed at run
// time.
#pragma once

namespace mt::detail {
extern const char* const kFunctorsSource;
}  // namespace mt::detail
