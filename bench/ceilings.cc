#include "bench/ceilings.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>

namespace jit::bench {
namespace {

// copy_vector's plain loops: four vector loads, then their stores. (One template over the
// width does not work here: GCC will not inline the target-specific intrinsics into it, and
// its vector extensions compiled this loop to byte copies through the stack.)
__attribute__((target("avx512f"))) void copy_avx512(uint8_t* dst, const uint8_t* src,
                                                    size_t bytes) {
  size_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    const __m512i a = _mm512_loadu_si512(src + i), b = _mm512_loadu_si512(src + i + 64);
    const __m512i c = _mm512_loadu_si512(src + i + 128), d = _mm512_loadu_si512(src + i + 192);
    _mm512_storeu_si512(dst + i, a);
    _mm512_storeu_si512(dst + i + 64, b);
    _mm512_storeu_si512(dst + i + 128, c);
    _mm512_storeu_si512(dst + i + 192, d);
  }
  std::memcpy(dst + i, src + i, bytes - i);
}
__attribute__((target("avx2"))) void copy_avx2(uint8_t* dst, const uint8_t* src, size_t bytes) {
  const auto at = [](const uint8_t* p) { return reinterpret_cast<const __m256i*>(p); };
  const auto to = [](uint8_t* p) { return reinterpret_cast<__m256i*>(p); };
  size_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    const __m256i a = _mm256_loadu_si256(at(src + i)), b = _mm256_loadu_si256(at(src + i + 32));
    const __m256i c = _mm256_loadu_si256(at(src + i + 64)),
                  d = _mm256_loadu_si256(at(src + i + 96));
    _mm256_storeu_si256(to(dst + i), a);
    _mm256_storeu_si256(to(dst + i + 32), b);
    _mm256_storeu_si256(to(dst + i + 64), c);
    _mm256_storeu_si256(to(dst + i + 96), d);
  }
  std::memcpy(dst + i, src + i, bytes - i);
}

// copy_vector's streaming loop: 16-byte non-temporal stores (SSE2, on every x86-64; the write-
// combining buffers merge them into full lines, so wider stores move no more bytes), eight per
// round, into a destination aligned to 16 first.
void copy_streaming(uint8_t* dst, const uint8_t* src, size_t bytes) {
  constexpr size_t kRound = 8 * 16;
  size_t i = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, i);
  for (; i + kRound <= bytes; i += kRound) {
    __m128i v[8];
    for (size_t j = 0; j < 8; ++j) {
      v[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16 * j));
    }
    for (size_t j = 0; j < 8; ++j) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16 * j), v[j]);
    }
  }
  _mm_sfence();
  std::memcpy(dst + i, src + i, bytes - i);
}

}  // namespace

void copy_vector(uint8_t* dst, const uint8_t* src, size_t bytes, bool streaming) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  (streaming ? copy_streaming : avx512 ? copy_avx512 : copy_avx2)(dst, src, bytes);
}

CopyProbe::CopyProbe(size_t bytes, int threads)
    : floats_(bytes / sizeof(float)),
      threads_(threads > 0 ? threads : omp_get_max_threads()),
      src_(new float[floats_]),
      dst_(new float[floats_]) {
  // First touch from the threads that will copy (page placement), and fault everything in.
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (size_t i = 0; i < floats_; ++i) {
    src_[i] = float(i & 1023);
    dst_[i] = 0;
  }
}

double CopyProbe::measure(int repeats) {
  const size_t n = floats_;
  double best = 0;
  for (int r = 0; r < 3 * repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads_)
    {
      const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t begin = n * t / nt, end = n * (t + 1) / nt;
      auto* to = reinterpret_cast<uint8_t*>(dst_.get() + begin);
      const auto* from = reinterpret_cast<const uint8_t*>(src_.get() + begin);
      if (r % 3 == 0) {
        std::memcpy(to, from, (end - begin) * sizeof(float));
      } else {
        copy_vector(to, from, (end - begin) * sizeof(float), /*streaming=*/r % 3 == 2);
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * double(n * sizeof(float)) / seconds / 1e9);
  }
  return best;
}

double measure_copy_gbps(size_t bytes, int threads, int repeats) {
  return CopyProbe(bytes, threads).measure(repeats);
}

}  // namespace jit::bench
