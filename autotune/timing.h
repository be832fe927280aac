// The timing harness of the autotuner: warm-up, samples until the median is stable, and a
// cold cache for memory-bound ops.
//
// Cold cache by rotation, not flushing: a memory-bound kernel is timed over several copies of
// its arguments whose total size is at least twice the last-level cache, one copy per call in
// turn, so every call finds its data in DRAM as a serving step does (the activations were
// evicted by the layers in between). Flushing (clflush over the buffers, or streaming a
// scratch buffer through the cache) between calls would cost far more than a decode-sized
// call and would have to be kept out of the timed region one call at a time, where the timer
// resolution is too coarse for a microsecond kernel; rotation lets a sample batch several
// calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "ir/op_spec.h"

namespace jit::autotune {

struct TimingOptions {
  int warmup_calls = 3;      ///< untimed calls first (code and TLB warm, OpenMP pool started)
  int min_samples = 7;       ///< at least this many samples before the median may be stable
  int max_samples = 101;     ///< the cap when the median does not settle
  double tolerance = 0.02;   ///< stable: the last few medians within this fraction of the median
  double max_seconds = 1.0;  ///< the cap on one measurement's wall time
  /// Calls per sample are raised until a sample takes at least this long, so that the clock's
  /// resolution and overhead (tens of ns) stay far below the tolerance.
  double min_sample_us = 20;
};

/// Quick settings: a first look at a candidate, enough to see that it is clearly worse.
TimingOptions quick_timing();

struct Timing {
  double median_us = 0;  ///< median over samples of the time per call
  int samples = 0;
  int calls_per_sample = 1;
  bool stable = false;  ///< false: stopped by max_samples or max_seconds
};

/// Times `call(i)` (i counts calls from 0, for rotating over argument copies).
Timing measure(const std::function<void(size_t call)>& call, const TimingOptions& options);

/// Bytes of the last-level cache (sysconf, else sysfs; 32 MiB when neither knows).
size_t last_level_cache_bytes();

/// Whether `spec` at `tokens` is memory-bound: fewer flops per byte moved than a core can
/// issue per byte of DRAM bandwidth (the ops kiln's CPU backends serve today all are).
bool memory_bound(const OpSpec& spec, int64_t tokens);

/// Copies of an argument set of `case_bytes` bytes needed so that rotating over them moves at
/// least twice the last-level cache (1 when not cold), at most 65536 copies and 1 GiB.
size_t rotation_copies(size_t case_bytes, bool cold);

}  // namespace jit::autotune
