#include "autotune/timing.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

namespace jit::autotune {
namespace {

using Clock = std::chrono::steady_clock;

// Consecutive medians that must agree (within the tolerance) for the median to be stable.
constexpr int kStableWindow = 5;
// Flops per byte below which an op is memory-bound: a core does ~16-64 flops per cycle while
// DRAM delivers a few bytes per cycle per core; 4 keeps every elementwise and norm op in.
constexpr double kMemoryBoundFlopsPerByte = 4.0;
// Ceilings on the rotation: machines with huge last-level caches (480 MiB on some Xeons)
// would otherwise ask for gigabytes; past these the data is still far larger than L2 and
// mostly out of L3 for the calls between two visits of one copy.
constexpr size_t kMaxRotationCopies = size_t(1) << 16;
constexpr size_t kMaxRotationBytes = size_t(1) << 30;
constexpr size_t kFallbackLlcBytes = size_t(32) << 20;

double median_of(std::vector<double> values) {
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  if (values.size() % 2 == 1) return values[mid];
  const double upper = values[mid];
  return (*std::max_element(values.begin(), values.begin() + mid) + upper) / 2;
}

}  // namespace

TimingOptions quick_timing() {
  TimingOptions options;
  options.warmup_calls = 2;
  options.min_samples = 3;
  options.max_samples = 5;
  options.max_seconds = 0.2;
  return options;
}

Timing measure(const std::function<void(size_t call)>& call, const TimingOptions& options) {
  size_t index = 0;
  for (int i = 0; i < options.warmup_calls; ++i) call(index++);
  const auto start = Clock::now();
  const auto elapsed_s = [&] {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  // Calibrate the batch: one timed call tells how many make a sample of min_sample_us.
  Timing timing;
  {
    const auto t0 = Clock::now();
    call(index++);
    const double one_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    timing.calls_per_sample =
        int(std::clamp(std::ceil(options.min_sample_us / std::max(one_us, 1e-3)), 1.0, 10000.0));
  }
  std::vector<double> samples;
  std::vector<double> medians;
  while (true) {
    const auto t0 = Clock::now();
    for (int c = 0; c < timing.calls_per_sample; ++c) call(index++);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    samples.push_back(us / timing.calls_per_sample);
    medians.push_back(median_of(samples));
    const int n = int(samples.size());
    if (n >= options.min_samples && n >= kStableWindow) {
      const double m = medians.back();
      bool stable = true;
      for (int i = n - kStableWindow; i < n; ++i) {
        stable = stable && std::abs(medians[size_t(i)] - m) <= options.tolerance * m;
      }
      if (stable) {
        timing.stable = true;
        break;
      }
    }
    if (n >= options.max_samples || elapsed_s() > options.max_seconds) break;
  }
  timing.samples = int(samples.size());
  timing.median_us = medians.back();
  return timing;
}

size_t last_level_cache_bytes() {
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE); l3 > 0) return size_t(l3);
#endif
  // The highest cache index sysfs lists is the last level ("32768K").
  for (int index = 4; index >= 0; --index) {
    std::ifstream file("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) +
                       "/size");
    std::string text;
    if (!(file >> text) || text.empty()) continue;
    size_t value = std::stoull(text);
    if (text.back() == 'K') value <<= 10;
    if (text.back() == 'M') value <<= 20;
    if (value > 0) return value;
  }
  return kFallbackLlcBytes;
}

bool memory_bound(const OpSpec& spec, int64_t tokens) {
  const Estimate e = estimates(spec, {.tokens = tokens});
  return e.bytes > 0 && e.flops / e.bytes < kMemoryBoundFlopsPerByte;
}

size_t rotation_copies(size_t case_bytes, bool cold) {
  if (!cold || case_bytes == 0) return 1;
  const size_t want = 2 * last_level_cache_bytes();
  const size_t cap =
      std::max<size_t>(2, std::min(kMaxRotationCopies, kMaxRotationBytes / case_bytes));
  return std::clamp<size_t>((want + case_bytes - 1) / case_bytes + 1, 2, cap);
}

}  // namespace jit::autotune
