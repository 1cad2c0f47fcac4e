// JSON of the memory statistics and snapshots (memory/stats.h).
#include "minitensor/memory/stats.h"

#include "minitensor/runtime/detail/json.h"

namespace mt {

namespace {

void write_stat(detail::JsonWriter& w, const char* name, const StatValue& v) {
  w.key(name)
      .begin_object()
      .field("current", v.current)
      .field("peak", v.peak)
      .field("allocated", v.allocated)
      .field("freed", v.freed)
      .end_object();
}

const char* state_name(BlockState s) {
  switch (s) {
    case BlockState::Free:
      return "free";
    case BlockState::Allocated:
      return "allocated";
    case BlockState::AwaitingStreams:
      return "awaiting_streams";
  }
  return "unknown";
}

std::uint64_t stream_id(cudaStream_t stream) {
  return reinterpret_cast<std::uintptr_t>(stream);
}

}  // namespace

std::string to_json(const MemoryStats& stats) {
  detail::JsonWriter w;
  w.begin_object();
  write_stat(w, "allocations", stats.allocations);
  write_stat(w, "allocated_bytes", stats.allocated_bytes);
  write_stat(w, "requested_bytes", stats.requested_bytes);
  write_stat(w, "active_bytes", stats.active_bytes);
  write_stat(w, "reserved_bytes", stats.reserved_bytes);
  write_stat(w, "segments", stats.segments);
  write_stat(w, "inactive_split_bytes", stats.inactive_split_bytes);
  w.field("cache_hits", stats.cache_hits)
      .field("thread_cache_hits", stats.thread_cache_hits)
      .field("cache_misses", stats.cache_misses)
      .field("cross_stream_hits", stats.cross_stream_hits)
      .field("splits", stats.splits)
      .field("merges", stats.merges)
      .field("alloc_retries", stats.alloc_retries)
      .field("ooms", stats.ooms)
      .field("device_mallocs", stats.device_mallocs)
      .field("device_frees", stats.device_frees)
      .field("events_recorded", stats.events_recorded)
      .field("host_waits", stats.host_waits)
      .end_object();
  return w.take();
}

std::string to_json(const std::vector<SegmentInfo>& snapshot) {
  detail::JsonWriter w;
  w.begin_object().key("segments").begin_array();
  for (const SegmentInfo& seg : snapshot) {
    w.begin_object()
        .field("address", static_cast<std::uint64_t>(seg.address))
        .field("size", seg.size)
        .field("stream", stream_id(seg.stream))
        .field("small_pool", seg.small_pool)
        .key("blocks")
        .begin_array();
    for (const BlockInfo& b : seg.blocks) {
      w.begin_object()
          .field("address", static_cast<std::uint64_t>(b.address))
          .field("size", b.size)
          .field("requested", b.requested)
          .field("state", state_name(b.state))
          .field("stream", stream_id(b.stream))
          .end_object();
    }
    w.end_array().end_object();
  }
  w.end_array().end_object();
  return w.take();
}

}  // namespace mt
