// Machine ceilings measured in the same run as the benchmarks that compare against them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace jit::bench {

/// Best-of-`repeats` copy bandwidth in GB/s (bytes read + bytes written per second) of a
/// `bytes`-sized buffer copied into another with `threads` OpenMP threads (0 = all), each
/// repeat timing memcpy, copy_vector and copy_vector with streaming stores in turn: glibc's
/// memcpy changes strategy with the size (`rep movsb` below its non-temporal threshold, 192 MiB
/// on the AMD EPYC VM, where a 2 x 32 MB `rep movsb` copy ran at 17-20 GB/s against 30 for the
/// streaming loop), so no single copy is the machine's ceiling at every size.
double measure_copy_gbps(size_t bytes, int threads, int repeats = 7);

/// measure_copy_gbps with its buffers kept between measurements (allocated and first touched
/// once), so that a benchmark can measure the ceiling again next to each of its rows.
class CopyProbe {
 public:
  /// Two `bytes`-sized buffers, first touched by the `threads` (0 = all) that will copy.
  CopyProbe(size_t bytes, int threads);
  /// Best-of-`repeats` GB/s, as measure_copy_gbps.
  double measure(int repeats);

 private:
  size_t floats_;
  int threads_;
  std::unique_ptr<float[]> src_, dst_;
};

/// Copies `bytes` from `src` to `dst` with the host's widest plain vector loop (AVX-512, else
/// AVX2: four 64- or 32-byte loads, then their stores), the same at every size; with
/// `streaming`, with non-temporal stores (no read for ownership of the destination: the fastest
/// copy once the buffers are past the caches) and an sfence.
void copy_vector(uint8_t* dst, const uint8_t* src, size_t bytes, bool streaming);

}  // namespace jit::bench
