#include "ir/numeric.h"

#include <limits>

namespace jit::numeric {
namespace {

// Decodes a small float with `exp_bits` exponent bits and `man_bits` mantissa bits (bias
// 2^(exp_bits-1)-1). Value = (-1)^s * 2^(e-bias) * (1 + m/2^man_bits), subnormal for e == 0.
float decode_minifloat(uint32_t bits, int exp_bits, int man_bits) {
  const uint32_t sign = bits >> (exp_bits + man_bits);
  const uint32_t exponent = (bits >> man_bits) & ((1u << exp_bits) - 1);
  const uint32_t mantissa = bits & ((1u << man_bits) - 1);
  const int bias = (1 << (exp_bits - 1)) - 1;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(float(mantissa), 1 - bias - man_bits);
  } else {
    magnitude = std::ldexp(float(mantissa | (1u << man_bits)), int(exponent) - bias - man_bits);
  }
  return sign ? -magnitude : magnitude;
}

// Rounds a non-negative value below 2^24 to the nearest integer, ties to even, whatever
// rounding mode the calling thread has set (std::nearbyint would follow FE_UPWARD etc.).
// floor and the subtraction are exact for such values, so the comparison sees the true
// fraction.
uint32_t round_half_even(float value) {
  const float floor_value = std::floor(value);
  const float fraction = value - floor_value;
  uint32_t result = uint32_t(floor_value);
  if (fraction > 0.5f || (fraction == 0.5f && (result & 1u) != 0)) ++result;
  return result;
}

// Encodes |value| (finite, non-NaN) into a minifloat of `exp_bits`/`man_bits` with
// round-to-nearest-even; returns the unsigned code, which may carry into the next binade or
// past the largest finite code (callers saturate or map to inf).
uint32_t encode_minifloat_magnitude(float magnitude, int exp_bits, int man_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int min_exp = 1 - bias;  // exponent of the smallest normal
  if (magnitude == 0.0f) return 0;
  int e;
  std::frexp(magnitude, &e);                   // magnitude = f * 2^e, f in [0.5, 1)
  int unbiased = e - 1;                        // magnitude = 1.x * 2^unbiased
  if (unbiased < min_exp) unbiased = min_exp;  // subnormal: fixed quantum
  // Quantum (value of one mantissa step) at this binade.
  const int quantum_exp = unbiased - man_bits;
  // Scaled is exact in fp32 (power-of-two scaling of an fp32 value within range).
  const float scaled = std::ldexp(magnitude, -quantum_exp);
  const uint32_t steps = round_half_even(scaled);
  // steps counts quanta of 2^quantum_exp; assemble exponent/mantissa, letting carries propagate.
  if (unbiased == min_exp && steps < (1u << man_bits)) return steps;  // subnormal
  // Normal: steps in [2^man, 2^(man+1)] (the upper end carries into the next binade).
  uint32_t biased = uint32_t(unbiased + bias);
  return (biased << man_bits) + (steps - (1u << man_bits));
}

}  // namespace

float f16_to_f32(uint16_t bits) {
  const uint32_t exponent = (bits >> 10) & 0x1F;
  if (exponent == 0x1F) {
    const bool neg = bits & 0x8000;
    if (bits & 0x3FF)
      return std::copysign(std::numeric_limits<float>::quiet_NaN(), neg ? -1.0f : 1.0f);
    return neg ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  return decode_minifloat(bits, 5, 10);
}

uint16_t f32_to_f16(float value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  if (std::isnan(value)) return sign | 0x7E00;
  const float magnitude = std::fabs(value);
  if (std::isinf(magnitude)) return sign | 0x7C00;
  const uint32_t code = encode_minifloat_magnitude(magnitude, 5, 10);
  if (code >= 0x7C00) return sign | 0x7C00;  // overflow rounds to inf (IEEE)
  return sign | uint16_t(code);
}

float fp8_e4m3_to_f32(uint8_t code) {
  if ((code & 0x7F) == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  return decode_minifloat(code, 4, 3);
}

float fp8_e5m2_to_f32(uint8_t code) {
  const bool neg = code & 0x80;
  if ((code & 0x7C) == 0x7C) {
    if (code & 0x03) return std::numeric_limits<float>::quiet_NaN();
    return neg ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  return decode_minifloat(code, 5, 2);
}

uint8_t f32_to_fp8_e4m3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  if (std::isnan(value)) return sign | 0x7F;
  constexpr uint8_t kMaxFinite = 0x7E;  // 448
  const float magnitude = std::fabs(value);
  if (magnitude >= 448.0f) return sign | kMaxFinite;  // saturate (incl. inf)
  const uint32_t code = encode_minifloat_magnitude(magnitude, 4, 3);
  return sign | uint8_t(code > kMaxFinite ? kMaxFinite : code);
}

uint8_t f32_to_fp8_e5m2(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  if (std::isnan(value)) return sign | 0x7E;
  constexpr uint8_t kMaxFinite = 0x7B;  // 57344
  const float magnitude = std::fabs(value);
  if (magnitude >= 57344.0f) return sign | kMaxFinite;
  const uint32_t code = encode_minifloat_magnitude(magnitude, 5, 2);
  return sign | uint8_t(code > kMaxFinite ? kMaxFinite : code);
}

}  // namespace jit::numeric
