// Exact scalar conversions between fp32 and the 16-bit and 8-bit float formats.
// Shared by the ref backend, the tests and the host side of every backend.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace jit::numeric {

/// bf16 bits -> fp32: exact (bf16 is the top half of an fp32).
inline float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(uint32_t(bits) << 16);
}

/// fp32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN with its sign.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return uint16_t((bits >> 16) | 0x40);
  // Adding 0x7FFF plus the lowest kept bit rounds half to even on the truncated 16 bits.
  uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

/// fp16 bits -> fp32: exact, incl. subnormals, inf and NaN.
float f16_to_f32(uint16_t bits);
/// fp32 -> fp16 bits, round to nearest even, overflow to inf, gradual underflow.
uint16_t f32_to_f16(float value);

/// OCP fp8 e4m3fn byte -> fp32 (exact). 0x7F/0xFF are NaN; there is no infinity.
float fp8_e4m3_to_f32(uint8_t code);
/// fp8 e5m2 byte -> fp32 (exact).
float fp8_e5m2_to_f32(uint8_t code);
/// fp32 -> e4m3fn with round-to-nearest-even and saturation to +-448 (inf too); NaN -> 0x7F|sign.
uint8_t f32_to_fp8_e4m3(float value);
/// fp32 -> e5m2 with round-to-nearest-even and saturation to +-57344 (inf too); NaN -> 0x7E|sign.
uint8_t f32_to_fp8_e5m2(float value);

/// Round an fp32 value to the grid of a 16-bit type and back (identity for fp32).
inline float round_to_bf16(float v) {
  return bf16_to_f32(f32_to_bf16(v));
}
inline float round_to_f16(float v) {
  return f16_to_f32(f32_to_f16(v));
}

}  // namespace jit::numeric
