// Every process of the mt::dist tests keeps NVLink multicast off, as the shared GPU hosts require: set at
// static initialisation, before NCCL first reads its environment (its first call, inside a test).
#include <cstdlib>

namespace {

const bool kNvlsOff = [] { return ::setenv("NCCL_NVLS_ENABLE", "0", 1) == 0; }();

}  // namespace
