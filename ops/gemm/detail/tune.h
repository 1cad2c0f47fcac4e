// The opt-in SGEMM autotuner (GemmOptions::tune, MT_GEMM_TUNE=1, CompileOptions::tune_gemm): the first call
// for a (shape, layout, math mode, device) times choose()'s pick and a short list of alternatives on the
// caller's stream and keeps the fastest, in memory and in a JSON file shared by processes
// (~/.cache/minitensor/gemm_tune.json or $MT_GEMM_TUNE_FILE). Inside a CUDA graph capture nothing is timed:
// the call takes choose()'s pick and a later uncaptured call tunes.
//
// The file: {"format": "minitensor-gemm-tune", "version": 1, "device": {"name", "sm_count", "driver",
// "library"}, "entries": {key: {"kernel", "split_k", "math", "reduce", "staging", "pack", "swap",
// "b_along_n", "ms"}}} ("swap" and "b_along_n" may be absent: false). One device per file: a file written for
// another device, driver or library version, or one that does not parse, is ignored with one warning and
// replaced at the next write. Writes merge with the file under an advisory lock and replace it atomically (a
// temporary file renamed over it), so processes tuning at once lose nothing and readers never see half a
// file.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "minitensor/ops/gemm.h"
#include "minitensor/ops/gemm/detail/dispatch.h"
#include "minitensor/ops/gemm/detail/kernel_table.h"
#include "minitensor/ops/gemm/detail/problem.h"

namespace mt::detail::gemm {

// What a tuned choice is valid for: a file written for another identity is not used.
struct TuneDevice {
  std::string name;
  int sm_count = 0;
  int driver = 0;       // cudaDriverGetVersion
  std::string library;  // mt::version()
  bool operator==(const TuneDevice&) const = default;
  static TuneDevice current();  // the current CUDA device and this library
};

// The problem's class as far as the choice of configuration goes: extents, math mode, and every layout and
// epilogue property can_implement and choose look at (which dims are contiguous, 16-byte runs, broadcast
// batches, C's float4 runs, beta, bias, activation, softmax). Pure.
std::string tune_key(const Problem& p, MathMode math);

// A configuration as text and back ({"kernel": name, ...} fields; see the file format above).
std::optional<Config> config_from_fields(const std::string& kernel, int split_k, const std::string& math,
                                         const std::string& reduce, const std::string& staging, bool pack,
                                         bool swap = false, bool b_along_n = false);

// The configurations the tuner times for `p`: choose()'s pick first, then up to `max - 1` of candidates()
// ranked by a rough model (share of tile area inside C, waves over the SMs, K per split, the tile's rate),
// at most two per kernel. Pure.
std::vector<Config> tune_candidates(const Problem& p, MathMode math, const DeviceModel& model, int max = 6);

// The in-memory and on-disk record of tuned choices for one device. Thread-safe. Never throws for a bad or
// unwritable file: it warns once (stderr) and goes on without it.
class TuneCache {
 public:
  TuneCache(std::string path, TuneDevice device);

  std::optional<Config> find(const std::string& key);
  // Records the winner and writes the file (merged with what other processes wrote meanwhile).
  void put(const std::string& key, const Config& config, double ms);

  const std::string& path() const { return m_path; }
  int warnings() const;  // warnings printed (at most one per cache)
  std::size_t size() const;

 private:
  struct Entry {
    Config config;
    double ms = 0;
  };
  // Entries of the file at m_path when it parses and belongs to m_device; nullopt (and `why`) otherwise.
  std::optional<std::map<std::string, Entry>> read_file(std::string& why) const;
  void write_file(const std::map<std::string, Entry>& entries) const;
  void warn(const std::string& what) const;

  std::string m_path;
  TuneDevice m_device;
  mutable std::mutex m_mutex;
  bool m_loaded = false;
  std::map<std::string, Entry> m_entries;
  mutable int m_warnings = 0;
};

// $MT_GEMM_TUNE_FILE, else ~/.cache/minitensor/gemm_tune.json ($HOME unset: ./gemm_tune.json).
std::string default_tune_path();
// MT_GEMM_TUNE=1 (any value but "" and "0"): every GEMM call tunes, as with GemmOptions::tune.
bool tune_from_env();

// The configuration for `p` on the current device: the cached winner, else (outside a graph capture) the
// fastest of tune_candidates timed on `stream` into scratch (C itself is not written), recorded in the
// process-wide cache; inside a capture, choose()'s pick.
Config tuned_choice(const Problem& p, MathMode math, cudaStream_t stream);

}  // namespace mt::detail::gemm
