// Row conversions with AVX2 + F16C, 8 elements per step, the tails by ir/numeric.h.
//
// bf16 narrowing, round to nearest even as numeric::f32_to_bf16: with b the fp32 bits,
//   bf16 = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
// (the carry out of the dropped 16 bits rounds up past the half, and at exactly the half only
// when the kept lowest bit is 1), except NaN, which keeps its sign and high payload and is made
// quiet: (b >> 16) | 0x40. Infinities and the overflow of the largest finite values to infinity
// come out of the same sum. f16 narrowing is vcvtps2ph (round to nearest even, overflow to
// infinity, gradual underflow) with NaN replaced by sign | 0x7E00, numeric::f32_to_f16's NaN.
#include "codegen/x86/host_rows.h"

#include <immintrin.h>

#include <cstring>

#include "ir/numeric.h"

namespace jit::codegen::x86 {
namespace {

__attribute__((target("avx2"))) void widen_bf16(float* dst, const uint16_t* src, int64_t n) {
  int64_t e = 0;
  for (; e + 8 <= n; e += 8) {
    const __m256i words =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + e)));
    _mm256_storeu_ps(dst + e, _mm256_castsi256_ps(_mm256_slli_epi32(words, 16)));
  }
  for (; e < n; ++e) dst[e] = numeric::bf16_to_f32(src[e]);
}

__attribute__((target("avx2,f16c"))) void widen_f16(float* dst, const uint16_t* src, int64_t n) {
  int64_t e = 0;
  for (; e + 8 <= n; e += 8) {
    _mm256_storeu_ps(dst + e,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + e))));
  }
  for (; e < n; ++e) dst[e] = numeric::f16_to_f32(src[e]);
}

// The 8 dwords of `v` (each < 2^16) as 8 words, in order.
__attribute__((target("avx2"))) __m128i pack_words(__m256i v) {
  return _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

// x · scale, or x itself at scale 1 (a multiply by 1 would flush a denormal x under DAZ).
__attribute__((target("avx2"))) __m256 scaled(const float* src, __m256 scale, bool unit) {
  const __m256 x = _mm256_loadu_ps(src);
  return unit ? x : _mm256_mul_ps(x, scale);
}
float scaled(float x, float scale, bool unit) {
  return unit ? x : x * scale;
}

__attribute__((target("avx2"))) void round_bf16(uint16_t* dst, const float* src, int64_t n,
                                                float scale) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  const bool unit = scale == 1.0f;
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7FFF);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  int64_t e = 0;
  for (; e + 8 <= n; e += 8) {
    const __m256 x = scaled(src + e, scale_v, unit);
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i high = _mm256_srli_epi32(bits, 16);
    const __m256i carry = _mm256_add_epi32(bias, _mm256_and_si256(high, one));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, carry), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i words = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, quiet), nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + e), pack_words(words));
  }
  for (; e < n; ++e) dst[e] = numeric::f32_to_bf16(scaled(src[e], scale, unit));
}

__attribute__((target("avx2,f16c"))) void round_f16(uint16_t* dst, const float* src, int64_t n,
                                                    float scale) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  const bool unit = scale == 1.0f;
  const __m128i sign = _mm_set1_epi16(int16_t(0x8000)), nan_word = _mm_set1_epi16(0x7E00);
  int64_t e = 0;
  for (; e + 8 <= n; e += 8) {
    const __m256 x = scaled(src + e, scale_v, unit);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // The NaN lanes' dword masks (all ones) packed to word masks.
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m128i nan_words =
        _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
    const __m128i canonical = _mm_or_si128(_mm_and_si128(h, sign), nan_word);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + e), _mm_blendv_epi8(h, canonical, nan_words));
  }
  for (; e < n; ++e) dst[e] = numeric::f32_to_f16(scaled(src[e], scale, unit));
}

__attribute__((target("avx2"))) void round_f32(float* dst, const float* src, int64_t n,
                                               float scale) {
  if (scale == 1.0f) {  // the bits as they are (a product would quieten a signalling NaN)
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
  const __m256 scale_v = _mm256_set1_ps(scale);
  int64_t e = 0;
  for (; e + 8 <= n; e += 8)
    _mm256_storeu_ps(dst + e, _mm256_mul_ps(_mm256_loadu_ps(src + e), scale_v));
  for (; e < n; ++e) dst[e] = src[e] * scale;
}

}  // namespace

void widen_row(float* dst, DType dtype, const void* src, int64_t n) {
  switch (dtype) {
    case DType::kBF16: widen_bf16(dst, static_cast<const uint16_t*>(src), n); break;
    case DType::kF16: widen_f16(dst, static_cast<const uint16_t*>(src), n); break;
    default: std::memcpy(dst, src, size_t(n) * sizeof(float)); break;
  }
}

void round_row(void* dst, DType dtype, const float* src, int64_t n, float scale) {
  switch (dtype) {
    case DType::kBF16: round_bf16(static_cast<uint16_t*>(dst), src, n, scale); break;
    case DType::kF16: round_f16(static_cast<uint16_t*>(dst), src, n, scale); break;
    default: round_f32(static_cast<float*>(dst), src, n, scale); break;
  }
}

}  // namespace jit::codegen::x86
