// Streams: an RAII owner, the per-device pool, and the per-thread current stream.
//
// Nothing in minitensor runs on the legacy default stream: every launch takes an explicit cudaStream_t, and
// the ops pick `current_stream(device)` unless told otherwise. Pool streams are non-blocking and live for the
// process.
#pragma once

#include <cuda_runtime_api.h>

namespace mt {

// Owns one non-blocking CUDA stream. Move-only.
class Stream {
 public:
  Stream() = default;  // holds no stream
  explicit Stream(int device, int priority = 0);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const noexcept { return m_stream; }
  operator cudaStream_t() const noexcept { return m_stream; }
  int device() const noexcept { return m_device; }
  void synchronize() const;
  bool query() const;  // true when all work queued so far has finished

 private:
  cudaStream_t m_stream = nullptr;
  int m_device = -1;
};

// What the layers above keep per stream (the caching allocator's pools) hears when an mt::Stream creates its
// CUDA stream (`created`) and just before it destroys it (`destroying`): a destroyed stream takes no more
// work, not even an event, and the next stream created may get the same handle. Plain functions that must
// not throw, registered once per process by the layer that needs them (at most 8 pairs). `created` hooks run
// in registration order and `destroying` hooks in reverse, as constructors and destructors do: a user of a
// lower layer registers after it, so what it frees onto the dying stream reaches the layer below before that
// layer retires the stream.
using StreamHook = void (*)(int device, cudaStream_t stream);
void add_stream_hooks(StreamHook created, StreamHook destroying);

inline constexpr int kStreamPoolSize = 8;

// The device's default minitensor stream: non-blocking, created on first use, never destroyed.
cudaStream_t default_stream(int device);

// Stream i (taken modulo kStreamPoolSize) of the device's pool of side streams.
cudaStream_t pool_stream(int device, int i);

// The next pool stream, round robin across threads.
cudaStream_t next_pool_stream(int device);

// The calling thread's current stream on `device`: the one a StreamGuard set, else default_stream(device).
cudaStream_t current_stream(int device);

// Makes `stream` the calling thread's current stream on `device` for the guard's lifetime.
class StreamGuard {
 public:
  StreamGuard(cudaStream_t stream, int device);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t m_previous;
  int m_device;
};

void synchronize_stream(cudaStream_t stream);

}  // namespace mt
