// Per-stream scratch: device buffers an op keeps between launches on one stream (split partials, packed
// operands, work queues), so that a launch allocates nothing in the steady state. One registry for every op;
// each use names its slot.
//
// Reuse rule: work on one stream runs in order, so the launches that use a stream's buffer never overlap and
// reuse needs no sync. A buffer outgrown by an eager launch is released (stream-ordered) and a larger one
// allocated.
//
// CUDA-graph capture rule: a launch captured into a graph runs again at every replay, perhaps while eager
// launches on the same stream run elsewhere (a graph replays on the stream it is launched on), so captured
// launches get scratch of their own, keyed apart from the stream's eager scratch and allocated with the
// thread's capture mode relaxed (the allocation is not part of the graph; the buffer outlives it). A graph
// keeps the pointers it captured, so those buffers are never freed: an outgrown one is retired, not released.
// Graphs captured from one stream share its capture scratch, so they must not be replayed concurrently with
// each other (the graph executor captures on streams of its own for that reason). A slot whose contents must
// not be shared by eager and captured launches at all (a queue that a launch leaves as it found it) asks for
// ScratchOptions::eager_only and gets no buffer while capturing.
//
// Lifetime: the eager scratch of an mt::Stream goes back to the allocator when the stream is destroyed (a
// stream hook). Capture scratch lives for the process, since graphs captured from a stream may outlive it,
// unless its stream's owner releases it (release_capture_scratch); a destroyed stream's capture scratch is
// kept apart from a later stream given the same handle. Scratch of streams made outside mt::Stream, and of
// the default and pool streams, lives for the process (freeing at exit would outlive the CUDA runtime).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>

namespace mt {

// The named slots: each (device, stream, captured) has one buffer per slot.
enum class ScratchSlot {
  GemmSplitPartials,  // split-K partial tiles of the GEMM
  GemmPacked,         // operands the GEMM packs before its main kernel
  ReducePartials,     // partials of two-pass reductions
  SoftmaxRowQueue,    // the row queue of the bulk-copy softmax ring
  AttentionPartials,  // the key splits' partial rows of the tensor-core attention
};

struct ScratchOptions {
  std::size_t min_bytes = 0;  // a (re)allocation takes at least this many bytes: growth is amortised
  bool zero_on_allocate =
      false;                // zeroed on the stream when allocated (while capturing, the graph zeroes it)
  bool eager_only = false;  // no buffer (nullptr) while the stream is being captured
};

// A device buffer of at least `bytes` for `slot` of `stream` on the current device, valid for work enqueued
// on that stream until the slot is next asked for more than its size. bytes == 0: nullptr, nothing allocated.
void* stream_scratch(ScratchSlot slot, std::size_t bytes, cudaStream_t stream,
                     const ScratchOptions& options = {});

// Frees the capture scratch of `stream` on `device`. Only for the owner of a stream that has destroyed every
// graph captured from it after the last replay finished (the graph executor's private capture streams, before
// it destroys them): otherwise capture scratch lives for the process. Never throws.
void release_capture_scratch(int device, cudaStream_t stream) noexcept;

// Holds the registry's lock while alive. A caller that enqueues several launches on a buffer holds one across
// stream_scratch and the launches, so a concurrent caller on the same stream cannot release the buffer
// between the pointer and its use.
class StreamScratchLock {
 public:
  StreamScratchLock();
  StreamScratchLock(const StreamScratchLock&) = delete;
  StreamScratchLock& operator=(const StreamScratchLock&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> m_lock;
};

}  // namespace mt
