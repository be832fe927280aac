#include "bench/plain_loops.h"

#include <cmath>
#include <cstring>

namespace jit::bench {
namespace {

inline float from_bf16(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even (NaN handling omitted: the peer's inputs are finite).
inline uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

inline float round_bf16(float f) {
  return from_bf16(to_bf16(f));
}

}  // namespace

void plain_rms_norm_bf16(uint16_t* out, const uint16_t* x, const uint16_t* w, int64_t rows,
                         int64_t hidden, float eps, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* xr = x + r * hidden;
    float ss = 0;
    for (int64_t i = 0; i < hidden; ++i) ss += from_bf16(xr[i]) * from_bf16(xr[i]);
    const float inv = 1.0f / std::sqrt(ss / float(hidden) + eps);
    uint16_t* o = out + r * hidden;
    for (int64_t i = 0; i < hidden; ++i) {
      o[i] = to_bf16(round_bf16(from_bf16(xr[i]) * inv) * from_bf16(w[i]));
    }
  }
}

void plain_silu_and_mul_bf16(uint16_t* out, const uint16_t* in, int64_t rows, int64_t d,
                             int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* x = in + r * 2 * d;
    const uint16_t* y = x + d;
    uint16_t* o = out + r * d;
    for (int64_t i = 0; i < d; ++i) {
      const float f = from_bf16(x[i]);
      o[i] = to_bf16(round_bf16(f / (1.0f + std::exp(-f))) * from_bf16(y[i]));
    }
  }
}

void plain_rope_neox_bf16(uint16_t* query, const int64_t* positions, const uint16_t* cache,
                          int64_t tokens, int64_t heads, int64_t head_size, int threads) {
  const int64_t half = head_size / 2;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const uint16_t* row = cache + positions[t] * head_size;
    for (int64_t h = 0; h < heads; ++h) {
      uint16_t* q = query + (t * heads + h) * head_size;
      for (int64_t j = 0; j < half; ++j) {
        const float x = from_bf16(q[j]), y = from_bf16(q[half + j]);
        const float c = from_bf16(row[j]), s = from_bf16(row[half + j]);
        q[j] = to_bf16(round_bf16(x * c) - round_bf16(y * s));
        q[half + j] = to_bf16(round_bf16(y * c) + round_bf16(x * s));
      }
    }
  }
}

}  // namespace jit::bench
