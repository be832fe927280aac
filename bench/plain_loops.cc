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

// fp32 -> e4m3fn, saturating round-to-nearest-even, as a plain scalar function (the way a C++
// port would write it): NaN -> 0x7F, |x| >= 448 -> 0x7E, subnormals by rounding |x| / 2^-9.
inline uint8_t to_e4m3(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  const uint32_t a = bits & 0x7FFFFFFF;
  if (a > 0x7F800000) return sign | 0x7F;
  if (a >= 0x43E00000) return sign | 0x7E;  // 448
  if (a < 0x3C800000) {                     // below 2^-6: subnormal grid of 2^-9
    float m;
    std::memcpy(&m, &a, 4);
    return sign | uint8_t(std::nearbyint(m * 512.0f));
  }
  const uint32_t r = a + 0x7FFFF + ((a >> 20) & 1);
  const uint32_t code = (r >> 20) - (120 << 3);
  return sign | uint8_t(code > 0x7E ? 0x7E : code);
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

void plain_reshape_and_cache_flash_bf16(void* key_cache, void* value_cache, const uint16_t* key,
                                        const uint16_t* value, const int64_t* slots, int64_t tokens,
                                        int64_t heads, int64_t head_size, int64_t block_size,
                                        bool hnd, bool fp8, float k_scale, float v_scale,
                                        int threads) {
  const int64_t row = heads * head_size;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t s = slots[t];
    if (s < 0) continue;
    const int64_t b = s / block_size, o = s % block_size;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base =
          b * block_size * row + (hnd ? (h * block_size + o) * head_size : o * row + h * head_size);
      const uint16_t* k = key + t * row + h * head_size;
      const uint16_t* v = value + t * row + h * head_size;
      if (fp8) {
        auto* kc = static_cast<uint8_t*>(key_cache) + base;
        auto* vc = static_cast<uint8_t*>(value_cache) + base;
        for (int64_t d = 0; d < head_size; ++d) {
          kc[d] = to_e4m3(from_bf16(k[d]) / k_scale);
          vc[d] = to_e4m3(from_bf16(v[d]) / v_scale);
        }
      } else {
        auto* kc = static_cast<uint16_t*>(key_cache) + base;
        auto* vc = static_cast<uint16_t*>(value_cache) + base;
        for (int64_t d = 0; d < head_size; ++d) kc[d] = k[d];
        for (int64_t d = 0; d < head_size; ++d) vc[d] = v[d];
      }
    }
  }
}

void plain_reshape_and_cache_bf16(void* key_cache, void* value_cache, const uint16_t* key,
                                  const uint16_t* value, const int64_t* slots, int64_t tokens,
                                  int64_t heads, int64_t head_size, int64_t block_size, bool fp8,
                                  float k_scale, float v_scale, int threads) {
  const int64_t x = fp8 ? 16 : 8;
  const int64_t row = heads * head_size;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t s = slots[t];
    if (s < 0) continue;
    const int64_t b = s / block_size, o = s % block_size;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t head = (b * heads + h) * head_size * block_size;
      const uint16_t* k = key + t * row + h * head_size;
      const uint16_t* v = value + t * row + h * head_size;
      for (int64_t d = 0; d < head_size; ++d) {
        const int64_t ki = head + (d / x * block_size + o) * x + d % x;
        const int64_t vi = head + d * block_size + o;
        if (fp8) {
          static_cast<uint8_t*>(key_cache)[ki] = to_e4m3(from_bf16(k[d]) / k_scale);
          static_cast<uint8_t*>(value_cache)[vi] = to_e4m3(from_bf16(v[d]) / v_scale);
        } else {
          static_cast<uint16_t*>(key_cache)[ki] = k[d];
          static_cast<uint16_t*>(value_cache)[vi] = v[d];
        }
      }
    }
  }
}

void plain_swap_blocks(uint8_t* dst, const uint8_t* src, const int64_t* mapping, int64_t pairs,
                       int64_t block_bytes, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < pairs; ++i) {
    std::memcpy(dst + mapping[2 * i + 1] * block_bytes, src + mapping[2 * i] * block_bytes,
                size_t(block_bytes));
  }
}

void plain_convert_fp8_bf16(uint8_t* dst, const uint16_t* src, int64_t elements, float scale,
                            int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < elements; ++i) dst[i] = to_e4m3(from_bf16(src[i]) / scale);
}

}  // namespace jit::bench
