// The autotuner: a search over a backend's configs with an injectable cost, and the real cost
// (kernels checked against ref, then timed) that `kiln tune` uses.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autotune/timing.h"
#include "codegen/backend.h"
#include "ir/op_spec.h"
#include "ir/status.h"
#include "runtime/runtime.h"
#include "runtime/tuning_db.h"

namespace jit::autotune {

/// How hard a cost function should look: a quick first estimate, or the full measurement.
enum class Effort : uint8_t { kQuick, kFull };

/// Microseconds per call of `config` (lower is better), or an error (the config fails to
/// compile or disagrees with ref; it is then never chosen). Injectable so tests can give
/// known costs.
using CostFn = std::function<Result<double>(const Config& config, Effort effort)>;

/// Progress of one search, after each candidate.
struct SearchProgress {
  size_t tried = 0;  ///< candidates looked at so far (default included)
  size_t total = 0;  ///< candidates the search will look at
  Config best;
  double best_us = 0;
  double default_us = 0;
};

struct SearchOptions {
  /// A candidate whose quick time exceeds this multiple of the best quick time is clearly
  /// worse: it is pruned without a full measurement (the early stop).
  double prune_ratio = 1.3;
  /// Spaces up to this size are searched exhaustively; larger ones on an evenly strided
  /// sample of this many candidates (the default always included).
  size_t exhaustive_limit = 64;
  /// A config other than the default wins only when it is faster by more than this fraction
  /// of the default's time: smaller gains are within the noise of a shared machine, and a
  /// noisy winner would make the database flip between runs.
  double min_gain = 0.03;
  /// Wall-time budget of the search in seconds (0: none). The default is always measured;
  /// candidates after the budget is spent are not tried.
  double budget_seconds = 0;
  std::function<void(const SearchProgress&)> progress;
};

struct CandidateResult {
  Config config;
  double quick_us = 0;
  double full_us = 0;  ///< 0 when pruned or failed
  bool pruned = false;
  std::string error;  ///< why the cost function rejected it
};

struct SearchResult {
  Config best;
  double best_us = 0;
  double default_us = 0;
  size_t tried = 0;   ///< candidates measured at least quickly (default included)
  size_t pruned = 0;  ///< of those, stopped early as clearly worse
  bool budget_exhausted = false;
  std::vector<CandidateResult> candidates;

  double speedup() const { return best_us > 0 ? default_us / best_us : 1; }
};

/// Searches `space` (space.front() is the default) for the config of least full cost. Fails
/// when the space is empty or the default itself fails (nothing to compare against).
Result<SearchResult> search(const std::vector<Config>& space, const CostFn& cost,
                            const SearchOptions& options = {});

struct TuneOptions {
  SearchOptions search;
  TimingOptions timing;  ///< the full measurement
  TimingOptions quick = quick_timing();
  bool cold_cache = true;  ///< rotate argument copies for memory-bound ops (see timing.h)
  uint64_t seed = 1;
};

/// The result of tuning one spec at one token count.
struct TuneResult {
  runtime::TuningEntry entry;  ///< ready for TuningDb::put
  SearchResult search;
};

/// The real cost of `spec` at `tokens` rows on `runtime`: each config is compiled, checked
/// against ref with check_against_ref (once; a mismatch is an error), then timed over
/// rotating argument copies (cold cache when memory-bound).
CostFn make_kernel_cost(Runtime& runtime, const OpSpec& spec, int64_t tokens,
                        const TuneOptions& options);

/// Tunes `spec` at `tokens` rows: dispatch picks the backend, its configs() are searched with
/// make_kernel_cost. kUnsupported when the backend offers a single config (nothing to tune).
Result<TuneResult> tune_spec(Runtime& runtime, const OpSpec& spec, int64_t tokens,
                             const TuneOptions& options = {});

}  // namespace jit::autotune
