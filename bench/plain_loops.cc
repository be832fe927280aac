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

// e4m3fn code -> fp32 as a plain scalar function: exponent field 0 is subnormal (m · 2^-9),
// S.1111.111 is NaN, else (1 + m/8) · 2^(e - 7).
inline float from_e4m3(uint8_t code) {
  const int e = (code >> 3) & 0xF;
  const int m = code & 7;
  float v;
  if (e == 0) {
    v = std::ldexp(float(m), -9);
  } else if (e == 15 && m == 7) {
    v = std::nanf("");
  } else {
    v = std::ldexp(float(8 + m), e - 10);
  }
  return (code & 0x80) ? -v : v;
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

void plain_cp_gather_bf16(uint16_t* dst, const uint16_t* cache, const int32_t* block_table,
                          int64_t table_stride, const int32_t* cu_seq_lens, int64_t batch,
                          int64_t entry, int64_t block_size, int threads) {
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t begin = cu_seq_lens[r];
    const int64_t rows = cu_seq_lens[r + 1] - begin;
    const int32_t* table = block_table + r * table_stride;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t p = 0; p < rows; ++p) {
      const uint16_t* src = cache + (table[p / block_size] * block_size + p % block_size) * entry;
      std::memcpy(dst + (begin + p) * entry, src, size_t(entry) * 2);
    }
  }
}

void plain_gather_dequant_e4m3_bf16(uint16_t* dst, const uint8_t* cache, const int32_t* block_table,
                                    int64_t table_stride, const int32_t* cu_seq_lens,
                                    const int32_t* token_to_seq, int64_t tokens, int64_t head_dim,
                                    int64_t block_size, float scale, int threads) {
  // A 256-entry decode table, the way a C++ port would dequantise.
  float decoded[256];
  for (int c = 0; c < 256; ++c) decoded[c] = from_e4m3(uint8_t(c));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t tok = 0; tok < tokens; ++tok) {
    const int64_t r = token_to_seq[tok];
    if (tok >= cu_seq_lens[r + 1]) continue;
    const int64_t pos = tok - cu_seq_lens[r];
    const int64_t block = block_table[r * table_stride + pos / block_size];
    const uint8_t* src = cache + (block * block_size + pos % block_size) * head_dim;
    uint16_t* out = dst + tok * head_dim;
    for (int64_t i = 0; i < head_dim; ++i) out[i] = to_bf16(decoded[src[i]] * scale);
  }
}

}  // namespace jit::bench
