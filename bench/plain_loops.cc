#include "bench/plain_loops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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
// S.1111.111 is NaN, else (1 + m/8) · 2^(e - 7), built on the bits (std::ldexp and
// std::nanf("") calls made this peer ~30x slower on codes that cover the whole range).
inline float from_e4m3(uint8_t code) {
  const uint32_t e = (code >> 3) & 0xF;
  const uint32_t m = code & 7;
  float v;
  if (e == 0) {
    v = float(m) * 0x1p-9f;
  } else if (e == 15 && m == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else {
    const uint32_t bits = (e + 120) << 23 | m << 20;
    std::memcpy(&v, &bits, 4);
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

void plain_fused_add_rms_norm_bf16(uint16_t* x, uint16_t* residual, const uint16_t* w, int64_t rows,
                                   int64_t hidden, float eps, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* xr = x + r * hidden;
    uint16_t* rr = residual + r * hidden;
    float ss = 0;
    for (int64_t i = 0; i < hidden; ++i) {
      const float z = round_bf16(from_bf16(xr[i]) + from_bf16(rr[i]));
      rr[i] = to_bf16(z);
      ss += z * z;
    }
    const float inv = 1.0f / std::sqrt(ss / float(hidden) + eps);
    for (int64_t i = 0; i < hidden; ++i) {
      xr[i] = to_bf16(round_bf16(from_bf16(rr[i]) * inv) * from_bf16(w[i]));
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

void plain_convert_e4m3_to_bf16(uint16_t* dst, const uint8_t* src, int64_t elements, float scale,
                                int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < elements; ++i) dst[i] = to_bf16(from_e4m3(src[i]) * scale);
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

void plain_ds_mla_bf16(uint8_t* cache, const uint16_t* kv_c, const uint16_t* k_pe,
                       const int64_t* slots, int64_t tokens, int64_t block_size, int threads) {
  constexpr int64_t kEntry = 656;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    uint8_t* entry = cache + slots[t] * kEntry;  // dense cache: block * BS + offset = slot
    const uint16_t* x = kv_c + t * 512;
    for (int64_t k = 0; k < 4; ++k) {
      float amax = 0;
      for (int64_t i = 128 * k; i < 128 * (k + 1); ++i)
        amax = std::fmax(amax, std::fabs(from_bf16(x[i])));
      const float scale = std::max(amax / 448.0f, 1.17549435e-38f);
      for (int64_t i = 128 * k; i < 128 * (k + 1); ++i) entry[i] = to_e4m3(from_bf16(x[i]) / scale);
      std::memcpy(entry + 512 + 4 * k, &scale, 4);
    }
    std::memcpy(entry + 528, k_pe + t * 64, 128);
  }
  (void)block_size;
}

namespace {
// NeoX rotation of rot values at v with the cos/sin row `cs` (the rotary rounding).
inline void rotate_neox(uint16_t* v, const uint16_t* cs, int64_t rot) {
  const int64_t half = rot / 2;
  for (int64_t j = 0; j < half; ++j) {
    const float x = from_bf16(v[j]), y = from_bf16(v[half + j]);
    const float c = from_bf16(cs[j]), s = from_bf16(cs[half + j]);
    v[j] = to_bf16(round_bf16(x * c) - round_bf16(y * s));
    v[half + j] = to_bf16(round_bf16(y * c) + round_bf16(x * s));
  }
}
}  // namespace

void plain_mla_rope_fused_bf16(uint16_t* cache, uint16_t* q_pe, uint16_t* k_pe,
                               const uint16_t* kv_c, const uint16_t* cos_sin,
                               const int64_t* positions, const int64_t* slots, int64_t tokens,
                               int64_t heads_q, int64_t rot, int64_t rank, int64_t block_size,
                               int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const uint16_t* cs = cos_sin + positions[t] * rot;
    for (int64_t h = 0; h < heads_q; ++h) rotate_neox(q_pe + (t * heads_q + h) * rot, cs, rot);
    if (slots[t] < 0) continue;
    rotate_neox(k_pe + t * rot, cs, rot);
    uint16_t* entry = cache + slots[t] * (rank + rot);
    std::memcpy(entry, kv_c + t * rank, size_t(rank) * 2);
    std::memcpy(entry + rank, k_pe + t * rot, size_t(rot) * 2);
  }
  (void)block_size;
}

void plain_upconvert_gather(uint16_t* dst, const uint8_t* cache, const int32_t* block_table,
                            int64_t rows, int64_t block_size, int threads) {
  float decoded[256];
  for (int c = 0; c < 256; ++c) decoded[c] = from_e4m3(uint8_t(c));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t o = 0; o < rows; ++o) {
    const uint8_t* e = cache + (block_table[o / block_size] * block_size + o % block_size) * 656;
    uint16_t* out = dst + o * 576;
    float scale[4];
    std::memcpy(scale, e + 512, 16);
    for (int64_t i = 0; i < 512; ++i) out[i] = to_bf16(decoded[e[i]] * scale[i / 128]);
    std::memcpy(out + 512, e + 528, 128);
  }
}

void plain_indexer_quant_bf16(uint8_t* cache, const uint16_t* k, const int64_t* slots,
                              int64_t tokens, int64_t head_dim, int64_t block_size, int threads) {
  const int64_t groups = head_dim / 128;
  const int64_t block_bytes = block_size * (head_dim + 4 * groups);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    const int64_t o = slots[t] % block_size;
    uint8_t* block = cache + slots[t] / block_size * block_bytes;
    const uint16_t* x = k + t * head_dim;
    for (int64_t g = 0; g < groups; ++g) {
      float amax = 0;
      for (int64_t i = 128 * g; i < 128 * (g + 1); ++i)
        amax = std::fmax(amax, std::fabs(from_bf16(x[i])));
      const float sc = std::exp2(std::ceil(std::log2(std::fmax(amax, 1e-4f) / 448.0f)));
      for (int64_t i = 128 * g; i < 128 * (g + 1); ++i) {
        block[o * head_dim + i] = to_e4m3(from_bf16(x[i]) / sc);
      }
      std::memcpy(block + block_size * head_dim + 4 * (o * groups + g), &sc, 4);
    }
  }
}

void plain_indexer_gather(uint8_t* dst_k, uint8_t* dst_scale, const uint8_t* cache,
                          const int32_t* block_table, int64_t table_stride,
                          const int32_t* cu_seq_lens, int64_t batch, int64_t head_dim,
                          int64_t block_size, int threads) {
  const int64_t scale_bytes = 4 * (head_dim / 128);
  const int64_t block_bytes = block_size * (head_dim + scale_bytes);
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t begin = cu_seq_lens[r];
    const int64_t rows = cu_seq_lens[r + 1] - begin;
    const int32_t* table = block_table + r * table_stride;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t p = 0; p < rows; ++p) {
      const uint8_t* block = cache + table[p / block_size] * block_bytes;
      const int64_t o = p % block_size;
      std::memcpy(dst_k + (begin + p) * head_dim, block + o * head_dim, size_t(head_dim));
      std::memcpy(dst_scale + (begin + p) * scale_bytes,
                  block + block_size * head_dim + o * scale_bytes, size_t(scale_bytes));
    }
  }
}

void plain_merge_attn_states_bf16(uint16_t* out, float* out_lse, const uint16_t* prefix,
                                  const float* prefix_lse, const uint16_t* suffix,
                                  const float* suffix_lse, int64_t tokens, int64_t heads,
                                  int64_t head_size, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      float p = prefix_lse[h * tokens + t], s = suffix_lse[h * tokens + t];
      if (std::isinf(p)) p = -INFINITY;
      if (std::isinf(s)) s = -INFINITY;
      const float m = std::fmax(p, s);
      const int64_t base = (t * heads + h) * head_size;
      if (std::isinf(m)) {
        std::memcpy(out + base, prefix + base, size_t(head_size) * 2);
        out_lse[h * tokens + t] = m;
        continue;
      }
      const float a = std::exp(p - m), b = std::exp(s - m), z = a + b;
      const float ca = a / z, cb = b / z;
      for (int64_t d = 0; d < head_size; ++d) {
        out[base + d] =
            to_bf16(from_bf16(prefix[base + d]) * ca + from_bf16(suffix[base + d]) * cb);
      }
      out_lse[h * tokens + t] = std::log(z) + m;
    }
  }
}

}  // namespace jit::bench
