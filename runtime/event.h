// Events: an RAII owner for ordering streams and timing device work.
#pragma once

#include <cuda_runtime_api.h>

namespace mt {

// Owns one CUDA event, created on the first record() (so a default-constructed Event costs nothing and
// touches no driver). Move-only.
class Event {
 public:
  explicit Event(bool timing = false) : m_timing(timing) {}
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t stream);
  void wait(
      cudaStream_t stream) const;  // makes `stream` wait for this event (no host block); no-op if unrecorded
  bool query() const;              // true once the recorded work has completed (or nothing was recorded)
  void synchronize() const;        // host blocks until the recorded work has completed
  bool recorded() const noexcept { return m_event != nullptr; }
  cudaEvent_t get() const noexcept { return m_event; }

  // Milliseconds between two recorded timing events.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  cudaEvent_t m_event = nullptr;
  bool m_timing;
};

}  // namespace mt
