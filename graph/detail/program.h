// The compiled form of a graph: rewritten node list (CSE, fused softmax and GEMM epilogues), the live nodes
// in topological order, elementwise fusion groups, and the steps an executor launches. Built on the host
// only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "minitensor/graph/detail/ir.h"

namespace mt::detail {

// How a Rows step's kernel walks its rows (passes.cpp plan_rows; codegen.cpp row_kernel_source). The group's
// row shape R is (..., len): n_rows rows of len elements. Each row is `threads` threads (a multiple of 32, so
// no warp straddles two rows), `rows_per_block` rows per block; thread t owns slots t, t + threads, ... (up
// to `slots` of them) of `width` consecutive elements each (4: float4 loads and stores where the pointers
// are 16-byte aligned, checked at launch; len % 4 == 0 makes every slot start aligned).
struct RowPlan {
  Shape row_shape;  // R
  std::int64_t n_rows = 0, len = 0;
  int threads = 32, rows_per_block = 1, width = 1, slots = 1;
  std::vector<bool> read_varies;  // per read: varies along the row, else one value per row
  // per read: varies and feeds a reduction: kept on chip (registers) for the passes. Other varying reads
  // (a weight, a bias) are read once, where the root is computed.
  std::vector<bool> read_cached;
  bool out_varies = true;         // the root varies along the row (written per element), else once per row
  int cached_per_thread() const;  // floats each thread keeps on chip: cached reads * slots * width
};

struct Step {
  // Op: one node through its precompiled kernel. Fused: an elementwise group, one NVRTC kernel over the
  // elements. Rows: a row group (last-axis reductions with their elementwise producers and the elementwise
  // consumers that broadcast them back over the row), one NVRTC kernel over the rows.
  enum class Kind : std::uint8_t { Op, Fused, Rows };
  Kind kind = Kind::Op;
  int root = -1;             // the node whose value the step writes
  std::vector<int> members;  // Fused: the nodes computed in the kernel, topological, root last
  std::vector<int> reads;    // nodes read from memory (distinct, outside the step)
  RowPlan rows;              // Rows only
};

struct Program {
  GraphData g;  // the rewritten graph (ids unchanged; rewritten nodes changed in place, new ones appended)
  std::vector<int> topo;  // every node, topological: creation order, appended nodes before their first reader
  std::vector<int> order;  // live nodes, topological
  std::vector<bool> live;
  std::vector<int> n_uses;  // consumers among live nodes (an output counts as a use)
  std::vector<bool> is_output;
  std::vector<int> replaced_by;  // CSE: node -> the identical node kept (itself when kept)
  std::vector<int> step_of;  // node -> the step that writes it (fused members: their group's); -1 otherwise
  std::vector<Step> steps;
  // The layout of each node's tensor: element strides, and the element offset from its storage root's first
  // element (views only). Contiguous unless a view is folded into its consumers (a strided view of its
  // input's buffer) or a node writes the permuted layout its consumer reads (fold.cpp).
  std::vector<Shape> strides;
  std::vector<std::int64_t> view_offset;
  std::vector<bool> folded;              // a Permute computed by no step: a strided view of its input
  std::vector<std::string> log;          // fusion decisions, one line each
  std::string node_label(int id) const;  // label + op
};

struct CompileFlags {
  bool fuse_elementwise = true, fuse_gemm_epilogue = true, fuse_softmax = true;
  bool fold_views = true, merge_linears = true;
  bool fuse_rows = true;  // row fusion (with fuse_elementwise only: it extends the elementwise groups)
  int max_fused_nodes = 64, max_fused_reads = 24;
  // A row group keeps its varying reads on chip, in registers: at most this many floats per thread (with
  // 1024 threads a row, 32 floats are 128 KiB a row, half the register file; more would spill).
  int max_row_cached = 32;
};

// s lays out the rows of r: the same extents, leading 1s aside ((1, n, d) and (n, d) are the same rows).
bool row_shaped(const Shape& s, const Shape& r);

// The launch shape of a row group over rows `row_shape` (..., len) that reads `read_shapes` (those that feed
// a reduction: `read_in_pass`) and writes a root of `root_shape` (passes.cpp; a pure function, tested
// without a GPU).
RowPlan plan_rows(const Shape& row_shape, const std::vector<Shape>& read_shapes,
                  const std::vector<bool>& read_in_pass, const Shape& root_shape);

// Topological order, CSE, dead-node elimination, pattern fusion (softmax, GEMM epilogue), elementwise
// grouping.
Program build_program(const GraphData& graph, const CompileFlags& flags);

// Views folded into their consumers (fold.cpp): sets Program::strides, view_offset and folded. A Permute
// whose consumers all read strided operands (attention's q, k, v; a GEMM's a and b) becomes a view, and an
// attention whose one consumer is a permute keeping the head dim last writes that permute's contiguous
// layout, so the permute is a free view. Graph outputs keep their declared contiguous layout. With
// `fold` false only slices (merge_linears) and the views of them have a layout of their own.
void fold_views(Program& p, bool fold);
// Linears (and matmuls by a 2-D weight) of one input, one activation and parameter or constant weights,
// whose results can all be read as column slices, become one GEMM over the concatenated weights and biases
// (a snapshot taken here); each former linear is a SliceView of its columns. Returns whether any merged.
bool merge_linears(Program& p);
// Whether node `id`'s tensor is contiguous from its storage root's first element.
bool plain_layout(const Program& p, int id);

// Splits a fused step back into one step per member (the NVRTC fallback); keeps step order topological.
void unfuse_step(Program& p, int step_index);

// ---- memory plan
struct MemoryPlan {
  enum class Where : std::uint8_t { None, Leaf, Arena, Persistent, Alias };
  std::vector<Where> where;         // per node
  std::vector<std::size_t> offset;  // Arena / Persistent: byte offset in that buffer
  std::vector<int> alias_of;        // Alias: the node whose storage it views (resolved to the storage root)
  std::vector<std::vector<int>> extra_deps;  // per step: earlier steps that must finish first (memory reuse)
  std::vector<int> inplace_of;               // per node: the node whose memory it took over in place, or -1
  std::size_t arena_bytes = 0, persistent_bytes = 0, unplanned_bytes = 0;
  int n_intermediates = 0, n_inplace = 0;
};
// With `step_stream` (the stream of each step), a step reuses only memory whose earlier users all ran on its
// own stream, so reuse never adds a cross-stream wait (independent branches stay concurrent, at some memory
// cost).
MemoryPlan plan_memory(const Program& p, bool reuse, bool inplace,
                       const std::vector<int>* step_stream = nullptr);
// The plan as JSON: its totals, then each live node in topological order: {"node","name","where" (none, leaf,
// arena, output, alias),"bytes" (unpadded),"offset" (arena / output, else null),"alias_of","inplace_of" (-1:
// none)}.
std::string to_json(const Program& p, const MemoryPlan& m);

// ---- streams
struct Schedule {
  int n_streams = 1;
  std::vector<int> stream;              // per step
  std::vector<std::vector<int>> waits;  // per step: steps on other streams it waits for
  std::vector<bool> records;            // per step: another stream waits for it
};
// Chains stay on one stream; independent branches take new streams (up to max_streams). `fixed` keeps a
// stream assignment made earlier and only computes the waits (data and memory dependencies across streams).
Schedule schedule_streams(const Program& p, const MemoryPlan& m, int max_streams,
                          const std::vector<int>* fixed = nullptr);

inline constexpr std::size_t kArenaAlignment = 256;
inline std::size_t align_up(std::size_t n, std::size_t a) {
  return (n + a - 1) / a * a;
}

}  // namespace mt::detail
