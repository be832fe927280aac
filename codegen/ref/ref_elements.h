// Element access and rounding shared by the ref backend's families: exact widening loads and
// correctly rounded stores of f32/f16/bf16 (and fp8 e4m3) elements.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ir/dtype.h"
#include "ir/numeric.h"
#include "ir/tensor.h"

namespace jit::codegen::ref {

inline std::byte* bytes(const Tensor& t) {
  return static_cast<std::byte*>(t.data());
}

/// Element `index` (in elements from `base`) of an f32/f16/bf16 buffer, widened exactly.
inline float load(DType dtype, const std::byte* base, int64_t index) {
  if (dtype == DType::kF16 || dtype == DType::kBF16) {
    uint16_t bits;
    std::memcpy(&bits, base + index * 2, 2);
    return dtype == DType::kF16 ? numeric::f16_to_f32(bits) : numeric::bf16_to_f32(bits);
  }
  float value;
  std::memcpy(&value, base + index * 4, 4);
  return value;
}

/// Element `index` of a buffer of T (integers, raw codes).
template <class T>
T load_as(const std::byte* base, int64_t index) {
  T v;
  std::memcpy(&v, base + index * int64_t(sizeof(T)), sizeof(T));
  return v;
}

/// rnd_T(v): the value of T nearest to the fp32 `v` (RNE), as fp32. Identity for f32.
inline float rnd(DType dtype, float v) {
  switch (dtype) {
    case DType::kF16: return numeric::round_to_f16(v);
    case DType::kBF16: return numeric::round_to_bf16(v);
    default: return v;
  }
}

/// Rounds a double to fp32 with round-to-odd: truncate toward zero, then set the last bit when
/// the result is inexact. A round-to-odd value with at least two more fraction bits than the
/// target (fp32 has 23; f16 10, bf16 7, fp8 3) rounds to the target exactly as the double would,
/// so rnd_T(round_to_odd(v)) is the correctly rounded rnd_T(v): no double-rounding error.
/// NaN, infinities and exact values pass through.
inline float round_to_odd_f32(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v) return f;
  // RNE rounded away from zero (possibly to inf): step back toward zero to get the truncation.
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

/// rnd_T of a double, correctly rounded (for f32: one RNE rounding).
inline float rnd_from_double(DType dtype, double v) {
  if (dtype == DType::kF32) return static_cast<float>(v);
  return rnd(dtype, round_to_odd_f32(v));
}

/// Stores the fp32 `value` at element `index`, rounded to the dtype (RNE).
inline void store(DType dtype, std::byte* base, int64_t index, float value) {
  if (dtype == DType::kF16 || dtype == DType::kBF16) {
    const uint16_t bits =
        dtype == DType::kF16 ? numeric::f32_to_f16(value) : numeric::f32_to_bf16(value);
    std::memcpy(base + index * 2, &bits, 2);
    return;
  }
  std::memcpy(base + index * 4, &value, 4);
}

/// Stores the double `value` at element `index`, rounded once (correctly, RNE) to the dtype:
/// f32, f16, bf16, or fp8 e4m3 (saturating to ±448).
inline void store_rounded(DType dtype, std::byte* base, int64_t index, double value) {
  switch (dtype) {
    case DType::kF32: {
      const auto f = static_cast<float>(value);
      std::memcpy(base + index * 4, &f, 4);
      return;
    }
    case DType::kFp8E4m3: {
      const uint8_t code = numeric::f32_to_fp8_e4m3(round_to_odd_f32(value));
      std::memcpy(base + index, &code, 1);
      return;
    }
    default: store(dtype, base, index, round_to_odd_f32(value)); return;
  }
}

}  // namespace jit::codegen::ref
