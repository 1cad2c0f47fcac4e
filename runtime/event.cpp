#include "minitensor/runtime/event.h"

#include <utility>

#include "minitensor/runtime/error.h"

namespace mt {

Event::~Event() {
  if (m_event) MT_CUDA_CHECK_NOTHROW(cudaEventDestroy(m_event));
}

Event::Event(Event&& other) noexcept
    : m_event(std::exchange(other.m_event, nullptr)), m_timing(other.m_timing) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (m_event) MT_CUDA_CHECK_NOTHROW(cudaEventDestroy(m_event));
    m_event = std::exchange(other.m_event, nullptr);
    m_timing = other.m_timing;
  }
  return *this;
}

void Event::record(cudaStream_t stream) {
  if (!m_event)
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&m_event, m_timing ? cudaEventDefault : cudaEventDisableTiming));
  MT_CUDA_CHECK(cudaEventRecord(m_event, stream));
}

void Event::wait(cudaStream_t stream) const {
  if (m_event) MT_CUDA_CHECK(cudaStreamWaitEvent(stream, m_event, 0));
}

bool Event::query() const {
  if (!m_event) return true;
  const cudaError_t status = cudaEventQuery(m_event);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  MT_CUDA_CHECK(status);
  return true;
}

void Event::synchronize() const {
  if (m_event) MT_CUDA_CHECK(cudaEventSynchronize(m_event));
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  MT_CHECK(start.m_event && end.m_event, InvalidArgument,
           "Event::elapsed_ms: both events must have been recorded");
  MT_CHECK(start.m_timing && end.m_timing, InvalidArgument,
           "Event::elapsed_ms: both events must be created with timing = true");
  float ms = 0.f;
  MT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.m_event, end.m_event));
  return ms;
}

}  // namespace mt
