// Test-only fault injection (graph/detail/executor_impl.h, tests/graph/test_executor_faults.cpp): every
// executor's runs fail at one step, with an out-of-memory or a launch error.
#include <atomic>

#include "minitensor/graph/detail/executor_impl.h"
#include "minitensor/runtime/error.h"

namespace mt::detail {

namespace {
// -1: no hook. Read once per run, relaxed: a test sets the hook before the runs it means to fail.
std::atomic<int> g_fault_step{-1};
std::atomic<int> g_fault_kind{0};
}  // namespace

void set_executor_fault_hook(const ExecutorFaultHook& hook) {
  g_fault_kind.store(static_cast<int>(hook.kind), std::memory_order_relaxed);
  g_fault_step.store(hook.step, std::memory_order_relaxed);
}

int executor_fault_step() {
  return g_fault_step.load(std::memory_order_relaxed);
}

void throw_executor_fault(const char* where, int step, int device) {
  const auto kind = static_cast<ExecutorFaultHook::Kind>(g_fault_kind.load(std::memory_order_relaxed));
  if (kind == ExecutorFaultHook::Kind::OutOfMemory)
    MT_THROW(OutOfMemoryError, where, ": out of memory at step ", step, " (injected fault)");
  throw CudaError(cudaErrorLaunchOutOfResources, str(where, ": launch of step ", step, " (injected fault)"),
                  __FILE__, __LINE__, device);
}

}  // namespace mt::detail
