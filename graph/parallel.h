// Parallel recipes on the graph's collective nodes: tensor-parallel linear layers and the Megatron MLP
// (Megatron-LM's column- and row-parallel layers), and data parallelism over several GPUs of one process.
//
// Tensor parallel: every rank builds its own graph, g.set_world_size(n) first, calling the recipe with its
// rank and the full weights (the recipe keeps only the rank's shard, dist::shard, as parameters); rank r's
// executor runs on rank r's communicator (ExecOptions::comm), from its own thread or process:
//
//   mt::Graph g;
//   g.set_world_size(comm.size());
//   auto x = g.input("x", {tokens, d});
//   g.output("y", mt::megatron_mlp(g, x, weights, comm.rank()));
//   mt::ExecOptions options;
//   options.device = mt::Device::cuda(comm.device());
//   options.comm = &comm;
//   mt::Executor exec(g, options);
//
// One process driving several GPUs (Communicator::local, a thread per rank) has a hazard a process per GPU
// (scripts/launch.sh) has not: a collective's kernel spins on its GPU until the peers' kernels come, and some
// CUDA calls on that GPU wait for its queue to drain while holding a driver lock the peers' threads need to
// launch theirs. The first launch of a kernel is one (lazy module loading); a download into pageable memory
// another. So an executor's first run loads all its kernels before the ranks meet on the host and any of
// them launches a collective (Communicator::meet_local), and Tensor downloads wait for their stream before
// the copy. What remains to the caller: launch no kernel the executor has not (a new op) on a GPU while its
// collectives may still be in flight; synchronize the device first.
//
// The outputs of megatron_mlp and row_parallel_linear (and column_parallel_linear with gather_output) are the
// whole result on every rank; mlp() builds the unsplit reference they equal (check_parallel compares them).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "minitensor/graph/graph.h"

namespace mt {

// x (..., in), the same on every rank; w (in, out) and bias (out; may be undefined) the full weights. Rank r
// computes act(x w_r + b_r) with w_r = w[:, r out/n : (r+1) out/n] (its columns, the outputs): (..., out/n).
// gather_output: the shards all-gathered into (..., out) on every rank. ShapeError when n does not divide
// out.
Node column_parallel_linear(Graph& g, Node x, const Tensor& w, const Tensor& bias, int rank,
                            Activation activation = Activation::None, bool gather_output = false,
                            const std::string& name = "");

// x (..., in/n), rank r's shard of the inputs (what column_parallel_linear leaves); w (in, out) and bias
// (out; may be undefined) the full weights. Rank r multiplies by w's rows [r in/n, (r+1) in/n); the partial
// sums are all-reduced and the bias added once, after: (..., out) on every rank.
Node row_parallel_linear(Graph& g, Node x, const Tensor& w, const Tensor& bias, int rank,
                         const std::string& name = "");

// act(x w1 + b1) w2 + b2 with w1 (d, ffn), w2 (ffn, d_out), biases (ffn) and (d_out), which may be undefined.
struct MlpWeights {
  Tensor w1, b1, w2, b2;
  Activation activation = Activation::Gelu;
};

struct MegatronOptions {
  // The rows of x (all dims but the last, flattened) are split into this many chunks, each its own column ->
  // row chain and all-reduce: the executor's streams then overlap the all-reduce of one chunk with the GEMMs
  // of the next (the collectives share one stream, the chunks' GEMMs take the others). 1: no split, the
  // default: on NVLink the all-reduce is a few percent of the forward, and chunks of fewer rows cost the GEMMs
  // more than that (bench/dist/DESIGN.md measures 1, 2 and 4).
  int chunks = 1;
};

// The Megatron MLP: column-parallel first layer (activation fused, no communication), row-parallel second
// layer, one all-reduce (per chunk), b2 added once. x (..., d) the same on every rank -> (..., d_out).
Node megatron_mlp(Graph& g, Node x, const MlpWeights& w, int rank, const MegatronOptions& options = {},
                  const std::string& name = "");
// The unsplit MLP, the reference megatron_mlp equals.
Node mlp(Graph& g, Node x, const MlpWeights& w, const std::string& name = "");

// Tensor-parallel SGEMM: a (m, k) the same on every rank, b (k, n) split along n; each rank computes its
// columns of C and the shards are all-gathered: (m, n) on every rank.
Node tensor_parallel_matmul(Graph& g, Node a, const Tensor& b, int rank, const std::string& name = "");

// check() on a distributed graph: rank `graph` runs on the device with options.comm, `inputs` its inputs;
// each of its outputs is compared end to end with the CPU run of `reference` (the whole, unsplit graph) on
// `reference_inputs`: the output of the same name, or, when the shapes differ along one dim by the world
// size, this rank's (options.comm's) block of it (a sharded output). Collective: every rank calls it at the
// same time. Rows
// pass when max |got - ref| <= tolerance * max |ref| (1e-4 in FP32 and TF32x3, 1e-2 in TF32).
// A CPU executor (a world of one) is compared too: that checks a recipe's split on one rank without a GPU.
CheckReport check_parallel(const Graph& graph, const TensorMap& inputs, const Graph& reference,
                           const TensorMap& reference_inputs, ExecOptions options = {});

namespace detail {
struct DataParallelState;
}

// Data parallel, one process: a replica of `graph` per device; its inputs' and outputs' leading dims are one
// replica's batch. run() takes inputs n times as long along dim 0 (n = devices.size()), gives replica i the
// block i, runs the replicas, and returns each output concatenated along dim 0 (on the first device, or on
// the host when the inputs are there). The parameters are copied to every device when the replicas are built,
// then broadcast once from replica 0 (through NCCL: DistUnavailable without it), so every replica holds rank
// 0's. ExecOptions::device and comm are set per replica.
class DataParallel {
 public:
  DataParallel(const Graph& graph, const std::vector<int>& devices, ExecOptions options = {});
  ~DataParallel();
  DataParallel(DataParallel&&) noexcept;
  DataParallel& operator=(DataParallel&&) noexcept;

  TensorMap run(const TensorMap& inputs);
  int size() const;  // the number of replicas
  const Executor& replica(int i) const;

 private:
  std::unique_ptr<detail::DataParallelState> m_state;
};

}  // namespace mt
