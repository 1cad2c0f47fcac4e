// Memory planning: every intermediate gets an offset in one arena from its lifetime (in step order), best fit
// over a merging free list, in place where an elementwise step may overwrite a dying input of its size.
//
// Multi-stream safety: a freed block remembers the steps that used it (its producer and readers). A step that
// reuses the block records them as extra dependencies, so the scheduler orders it after them even when they
// run on other streams.
#include <algorithm>

#include "minitensor/graph/detail/program.h"
#include "minitensor/runtime/detail/json.h"

namespace mt::detail {

namespace {

struct FreeBlock {
  std::size_t offset, size;
  std::vector<int> deps;
};

void merge_into(std::vector<int>& a, const std::vector<int>& b) {
  for (int x : b)
    if (std::find(a.begin(), a.end(), x) == a.end()) a.push_back(x);
}

void add_free(std::vector<FreeBlock>& list, FreeBlock b) {
  list.push_back(std::move(b));
  std::sort(list.begin(), list.end(),
            [](const FreeBlock& x, const FreeBlock& y) { return x.offset < y.offset; });
  std::vector<FreeBlock> merged;
  for (auto& f : list) {
    if (!merged.empty() && merged.back().offset + merged.back().size == f.offset) {
      merged.back().size += f.size;
      merge_into(merged.back().deps, f.deps);
    } else {
      merged.push_back(std::move(f));
    }
  }
  list = std::move(merged);
}

}  // namespace

MemoryPlan plan_memory(const Program& p, bool reuse, bool inplace, const std::vector<int>* step_stream) {
  const int n = static_cast<int>(p.g.nodes.size());
  const int n_steps = static_cast<int>(p.steps.size());
  MemoryPlan m;
  m.where.assign(static_cast<size_t>(n), MemoryPlan::Where::None);
  m.offset.assign(static_cast<size_t>(n), 0);
  m.alias_of.assign(static_cast<size_t>(n), -1);
  m.inplace_of.assign(static_cast<size_t>(n), -1);
  m.extra_deps.assign(static_cast<size_t>(n_steps), {});

  auto storage_root = [&](int id) {
    return m.where[static_cast<size_t>(id)] == MemoryPlan::Where::Alias ? m.alias_of[static_cast<size_t>(id)]
                                                                        : id;
  };
  for (int id : p.order) {
    const NodeData& nd = p.g.at(id);
    if (nd.is_leaf()) {
      m.where[static_cast<size_t>(id)] = MemoryPlan::Where::Leaf;
    } else if (nd.kind == OpKind::View || nd.kind == OpKind::SliceView || p.folded[static_cast<size_t>(id)]) {
      m.where[static_cast<size_t>(id)] = MemoryPlan::Where::Alias;
      m.alias_of[static_cast<size_t>(id)] = storage_root(nd.inputs[0]);
    } else {
      const int s = p.step_of[static_cast<size_t>(id)];
      if (s >= 0 && p.steps[static_cast<size_t>(s)].root == id)
        m.where[static_cast<size_t>(id)] = MemoryPlan::Where::Arena;
    }
  }
  for (const auto& o : p.g.outputs) {
    const int r = storage_root(o.second);
    if (m.where[static_cast<size_t>(r)] == MemoryPlan::Where::Arena)
      m.where[static_cast<size_t>(r)] = MemoryPlan::Where::Persistent;
  }

  // Lifetimes: the last step reading a storage root (directly or through a view), and every step touching it.
  std::vector<int> last(static_cast<size_t>(n), -1);
  std::vector<std::vector<int>> users(static_cast<size_t>(n));
  for (int i = 0; i < n_steps; ++i) {
    const Step& s = p.steps[static_cast<size_t>(i)];
    users[static_cast<size_t>(s.root)].push_back(i);
    for (int x : s.reads) {
      const int r = storage_root(x);
      last[static_cast<size_t>(r)] = std::max(last[static_cast<size_t>(r)], i);
      users[static_cast<size_t>(r)].push_back(i);
    }
  }

  auto bytes_of = [&](int id) {
    const NodeData& nd = p.g.at(id);
    return align_up(static_cast<std::size_t>(nd.shape.numel()) * dtype_size(nd.dtype), kArenaAlignment);
  };

  auto same_stream = [&](int i, const std::vector<int>& users) {
    if (!step_stream) return true;
    for (int u : users)
      if ((*step_stream)[static_cast<size_t>(u)] != (*step_stream)[static_cast<size_t>(i)]) return false;
    return true;
  };
  std::vector<FreeBlock> free_list;
  std::vector<bool> taken(static_cast<size_t>(n), false);  // memory handed over to an in-place successor
  for (int i = 0; i < n_steps; ++i) {
    const Step& s = p.steps[static_cast<size_t>(i)];
    const int r = s.root;
    const std::size_t size = bytes_of(r);
    if (m.where[static_cast<size_t>(r)] == MemoryPlan::Where::Persistent) {
      m.offset[static_cast<size_t>(r)] = m.persistent_bytes;
      m.persistent_bytes += size;
    } else if (m.where[static_cast<size_t>(r)] == MemoryPlan::Where::Arena) {
      m.unplanned_bytes += size;
      ++m.n_intermediates;
      bool placed = false;
      if (!reuse) {
        m.offset[static_cast<size_t>(r)] = m.arena_bytes;
        m.arena_bytes += size;
        placed = true;
      }
      // A row kernel may write over a read too when it writes per element: each thread loads its elements
      // of the row before any barrier and stores the same elements last. A per-row root is written by one
      // thread, maybe before another warp of its row has loaded the value: not in place.
      const bool rows_ok = s.kind != Step::Kind::Rows || s.rows.out_varies;
      if (!placed && inplace && rows_ok && p.g.at(r).is_elementwise()) {
        for (int x : s.reads) {
          const int rx = storage_root(x);
          // In place only over memory read element for element as written (no strided view).
          if (m.where[static_cast<size_t>(rx)] != MemoryPlan::Where::Arena ||
              taken[static_cast<size_t>(rx)] || last[static_cast<size_t>(rx)] != i || bytes_of(rx) != size ||
              !plain_layout(p, x) || !plain_layout(p, rx) ||
              p.g.at(x).shape.numel() != p.g.at(r).shape.numel() || p.g.at(x).dtype != p.g.at(r).dtype ||
              !same_stream(i, users[static_cast<size_t>(rx)]))
            continue;
          m.offset[static_cast<size_t>(r)] = m.offset[static_cast<size_t>(rx)];
          taken[static_cast<size_t>(rx)] = true;
          m.inplace_of[static_cast<size_t>(r)] = rx;
          ++m.n_inplace;
          for (int u : users[static_cast<size_t>(rx)])
            if (u != i) merge_into(m.extra_deps[static_cast<size_t>(i)], {u});
          placed = true;
          break;
        }
      }
      if (!placed) {
        int best = -1;
        for (int b = 0; b < static_cast<int>(free_list.size()); ++b)
          if (free_list[static_cast<size_t>(b)].size >= size &&
              same_stream(i, free_list[static_cast<size_t>(b)].deps) &&
              (best < 0 ||
               free_list[static_cast<size_t>(b)].size < free_list[static_cast<size_t>(best)].size))
            best = b;
        if (best < 0 && !free_list.empty() &&
            free_list.back().offset + free_list.back().size == m.arena_bytes &&
            free_list.back().size < size && same_stream(i, free_list.back().deps)) {
          best = static_cast<int>(free_list.size()) - 1;  // the block at the end grows
          m.arena_bytes = free_list.back().offset + size;
          free_list.back().size = size;
        }
        if (best >= 0) {
          FreeBlock& b = free_list[static_cast<size_t>(best)];
          m.offset[static_cast<size_t>(r)] = b.offset;
          merge_into(m.extra_deps[static_cast<size_t>(i)], b.deps);
          if (b.size > size) {
            b.offset += size;
            b.size -= size;
          } else {
            free_list.erase(free_list.begin() + best);
          }
        } else {
          m.offset[static_cast<size_t>(r)] = m.arena_bytes;
          m.arena_bytes += size;
        }
      }
    }
    if (!reuse) continue;
    // Storage whose last reader is this step goes back to the free list.
    for (int x : s.reads) {
      const int rx = storage_root(x);
      if (m.where[static_cast<size_t>(rx)] != MemoryPlan::Where::Arena || taken[static_cast<size_t>(rx)] ||
          last[static_cast<size_t>(rx)] != i)
        continue;
      taken[static_cast<size_t>(rx)] = true;  // freed once
      add_free(free_list,
               FreeBlock{m.offset[static_cast<size_t>(rx)], bytes_of(rx), users[static_cast<size_t>(rx)]});
    }
  }
  for (auto& d : m.extra_deps) std::sort(d.begin(), d.end());
  return m;
}

std::string to_json(const Program& p, const MemoryPlan& m) {
  static constexpr const char* kWhere[] = {"none", "leaf", "arena", "output", "alias"};
  JsonWriter w;
  w.begin_object()
      .field("arena_bytes", m.arena_bytes)
      .field("persistent_bytes", m.persistent_bytes)
      .field("unplanned_bytes", m.unplanned_bytes)
      .field("n_intermediates", m.n_intermediates)
      .field("n_inplace", m.n_inplace)
      .key("nodes")
      .begin_array();
  for (int id : p.order) {
    const auto i = static_cast<size_t>(id);
    const NodeData& nd = p.g.at(id);
    const MemoryPlan::Where where = i < m.where.size() ? m.where[i] : MemoryPlan::Where::None;
    w.begin_object()
        .field("node", id)
        .field("name", nd.name)
        .field("where", kWhere[static_cast<int>(where)])
        .field("bytes", static_cast<std::uint64_t>(nd.shape.numel()) * dtype_size(nd.dtype))
        .key("offset");
    if (where == MemoryPlan::Where::Arena || where == MemoryPlan::Where::Persistent)
      w.value(m.offset[i]);
    else
      w.null();
    w.field("alias_of", i < m.alias_of.size() ? m.alias_of[i] : -1)
        .field("inplace_of", i < m.inplace_of.size() ? m.inplace_of[i] : -1)
        .end_object();
  }
  w.end_array().end_object();
  return w.take();
}

Schedule schedule_streams(const Program& p, const MemoryPlan& m, int max_streams,
                          const std::vector<int>* fixed) {
  const int n_steps = static_cast<int>(p.steps.size());
  Schedule sch;
  sch.stream.assign(static_cast<size_t>(n_steps), 0);
  sch.waits.assign(static_cast<size_t>(n_steps), {});
  sch.records.assign(static_cast<size_t>(n_steps), false);
  max_streams = std::max(1, max_streams);

  auto producer = [&](int id) {
    const int r = m.where[static_cast<size_t>(id)] == MemoryPlan::Where::Alias
                      ? m.alias_of[static_cast<size_t>(id)]
                      : id;
    return p.step_of[static_cast<size_t>(r)];
  };
  std::vector<int> tail(static_cast<size_t>(max_streams), -1);  // last step on each stream
  int n_used = 1;
  for (int i = 0; i < n_steps; ++i) {
    std::vector<int> deps;
    for (int x : p.steps[static_cast<size_t>(i)].reads) {
      const int d = producer(x);
      if (d >= 0 && std::find(deps.begin(), deps.end(), d) == deps.end()) deps.push_back(d);
    }
    for (int d : m.extra_deps[static_cast<size_t>(i)])
      if (std::find(deps.begin(), deps.end(), d) == deps.end()) deps.push_back(d);
    int s = fixed ? (*fixed)[static_cast<size_t>(i)] : -1;
    if (fixed) n_used = std::max(n_used, s + 1);
    // Continue the stream of a dependency that ends there (a chain stays on one stream).
    for (int d : fixed ? std::vector<int>() : deps) {
      const int ds = sch.stream[static_cast<size_t>(d)];
      if (tail[static_cast<size_t>(ds)] == d && (s < 0 || ds < s)) s = ds;
    }
    if (s < 0) {
      if (tail[0] < 0)
        s = 0;
      else if (n_used < max_streams)
        s = n_used++;
      else if (!deps.empty())
        s = sch.stream[static_cast<size_t>(deps[0])];
      else
        s = i % max_streams;
    }
    sch.stream[static_cast<size_t>(i)] = s;
    for (int d : deps) {
      if (sch.stream[static_cast<size_t>(d)] == s) continue;
      sch.waits[static_cast<size_t>(i)].push_back(d);
      sch.records[static_cast<size_t>(d)] = true;
    }
    tail[static_cast<size_t>(s)] = i;
  }
  sch.n_streams = n_used;
  return sch;
}

}  // namespace mt::detail
