// The raw-memory backends under the caching allocators.
//
// The pool policy (size classes, splitting, stream rules, OOM ladder, stats) lives in memory/detail/caching.h
// and memory/detail/pinned.h and talks to memory only through MemoryBackend. The CUDA backends call
// cudaMalloc / cudaHostAlloc and CUDA events; FakeBackend serves host memory with a configurable capacity and
// streams whose "work" the caller queues and completes by hand, so the whole policy runs in tests on a
// machine without a GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "minitensor/runtime/device.h"

namespace mt {

class MemoryBackend {
 public:
  using EventHandle = void*;

  virtual ~MemoryBackend() = default;

  // nullptr when the memory is not there (out of memory is an expected answer, not an error); throws on any
  // other failure.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) noexcept = 0;

  // An event marking the work queued on `stream` so far. Events come from a pool: hand each back with
  // release_event once it is no longer needed. A stream being captured into a CUDA graph takes none
  // (CudaError cudaErrorStreamCaptureUnsupported): an event recorded there is a node of the graph, and
  // polling it would invalidate the capture.
  virtual EventHandle record_event(cudaStream_t stream) = 0;
  virtual bool event_done(EventHandle event) = 0;  // polls, never blocks the host
  virtual void event_wait(EventHandle event) = 0;  // blocks the host until the event's work is done
  virtual void release_event(EventHandle event) noexcept = 0;

  virtual void memory_info(std::size_t& free_bytes, std::size_t& total_bytes) = 0;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
};

// cudaMalloc / cudaFree on `device`, pooled cudaEvent_t (timing disabled).
std::unique_ptr<MemoryBackend> make_cuda_backend(int device);

// cudaHostAlloc(portable) / cudaFreeHost; events are recorded on the device of the stream they mark.
std::unique_ptr<MemoryBackend> make_pinned_backend();

// Host memory posing as a device. Streams are opaque handles: submit(s) queues one unit of work on s,
// complete(s) finishes everything queued on s so far. An event recorded on s is done once the work queued on
// s before it has completed. deallocate() completes every stream, as cudaFree synchronises the device.
// Thread-safe.
class FakeBackend final : public MemoryBackend {
 public:
  explicit FakeBackend(std::size_t capacity_bytes, Device device = Device::cuda(0));
  ~FakeBackend() override;

  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) noexcept override;
  EventHandle record_event(cudaStream_t stream) override;
  bool event_done(EventHandle event) override;
  void event_wait(EventHandle event) override;
  void release_event(EventHandle event) noexcept override;
  void memory_info(std::size_t& free_bytes, std::size_t& total_bytes) override;
  Device device() const override { return m_device; }
  std::string name() const override { return "fake"; }

  // Stream control for tests.
  void submit(cudaStream_t stream);
  void complete(cudaStream_t stream);
  void complete_all();
  bool pending(cudaStream_t stream) const;
  std::uint64_t submitted(cudaStream_t stream) const;  // units of work queued on the stream so far
  std::uint64_t completed(cudaStream_t stream) const;  // of which done
  // A destroyed stream takes no events (CUDA's behaviour there is undefined): the backend counts those it is
  // asked for. create_stream() makes the handle live again.
  void destroy_stream(cudaStream_t stream);
  void create_stream(cudaStream_t stream);
  std::int64_t n_events_on_destroyed_streams() const;

  // A stream handle for tests: fake_stream(1), fake_stream(2), ... (never dereferenced).
  static cudaStream_t fake_stream(int i) {
    return reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(i));
  }

  std::size_t capacity() const { return m_capacity; }
  void set_capacity(std::size_t bytes);
  std::size_t used() const;
  std::int64_t n_allocs() const;
  std::int64_t n_frees() const;
  std::int64_t n_events_created() const;  // distinct event objects made (the pool reuses them)
  std::int64_t n_events_outstanding() const;
  std::int64_t n_event_waits() const;
  std::int64_t n_live_allocations() const;  // handed out by allocate and not yet deallocated
  std::int64_t n_event_queries() const;     // event_done calls

  // Fault injection: while set, the call throws mt::CudaError (cudaErrorUnknown) instead of doing its work.
  void set_fail_allocate(bool fail);
  void set_fail_record_event(bool fail);
  void set_fail_event_query(bool fail);  // event_done and event_wait

 private:
  struct FakeEvent {
    cudaStream_t stream = nullptr;
    std::uint64_t ticket = 0;
  };
  struct Queue {
    std::uint64_t submitted = 0, completed = 0;
  };

  mutable std::mutex m_mutex;
  Device m_device;
  std::size_t m_capacity;
  std::size_t m_used = 0;
  std::unordered_map<void*, std::size_t> m_live;
  std::unordered_map<cudaStream_t, Queue> m_queues;
  std::vector<FakeEvent*> m_event_pool;
  std::vector<std::unique_ptr<FakeEvent>> m_events;
  std::unordered_set<cudaStream_t> m_destroyed;
  std::int64_t m_n_allocs = 0, m_n_frees = 0, m_n_outstanding = 0, m_n_waits = 0, m_n_dead_records = 0,
               m_n_queries = 0;
  bool m_fail_allocate = false, m_fail_record = false, m_fail_query = false;
};

}  // namespace mt
