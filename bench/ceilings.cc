#include "bench/ceilings.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>

namespace jit::bench {

double measure_copy_gbps(size_t bytes, int threads, int repeats) {
  if (threads <= 0) threads = omp_get_max_threads();
  const size_t n = bytes / sizeof(float);
  std::unique_ptr<float[]> src(new float[n]), dst(new float[n]);
  // First touch from the threads that will copy (page placement), and fault everything in.
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) {
    src[i] = float(i & 1023);
    dst[i] = 0;
  }
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t begin = n * t / nt, end = n * (t + 1) / nt;
      std::memcpy(dst.get() + begin, src.get() + begin, (end - begin) * sizeof(float));
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * double(n * sizeof(float)) / seconds / 1e9);
  }
  return best;
}

}  // namespace jit::bench
