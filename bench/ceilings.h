// Machine ceilings measured in the same run as the benchmarks that compare against them.
#pragma once

#include <cstddef>

namespace jit::bench {

/// Best-of-`repeats` copy bandwidth in GB/s (bytes read + bytes written per second) of a
/// `bytes`-sized buffer copied into another with `threads` OpenMP threads (0 = all).
/// Buffers are far larger than the caches, so this is DRAM bandwidth.
double measure_copy_gbps(size_t bytes, int threads, int repeats = 7);

}  // namespace jit::bench
