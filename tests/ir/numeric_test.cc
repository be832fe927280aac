// DType names and sizes, and the exact scalar conversions of ir/numeric.h.
#include "ir/numeric.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "ir/dtype.h"

namespace jit {
namespace {

using numeric::bf16_to_f32;
using numeric::f16_to_f32;
using numeric::f32_to_bf16;
using numeric::f32_to_f16;
using numeric::f32_to_fp8_e4m3;
using numeric::f32_to_fp8_e5m2;
using numeric::fp8_e4m3_to_f32;
using numeric::fp8_e5m2_to_f32;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t bits_of(float f) {
  return std::bit_cast<uint32_t>(f);
}
float float_of(uint32_t u) {
  return std::bit_cast<float>(u);
}

// ---- DType

TEST(DTypeTest, NamesSizesAndRoundTrip) {
  struct Row {
    DType dtype;
    const char* name;
    size_t size;
  };
  const Row rows[] = {{DType::kF32, "f32", 4},
                      {DType::kF16, "f16", 2},
                      {DType::kBF16, "bf16", 2},
                      {DType::kFp8E4m3, "fp8_e4m3", 1},
                      {DType::kFp8E5m2, "fp8_e5m2", 1},
                      {DType::kI8, "i8", 1},
                      {DType::kU8, "u8", 1},
                      {DType::kI32, "i32", 4},
                      {DType::kI64, "i64", 8}};
  ASSERT_EQ(std::size(rows), std::size(kAllDTypes));
  for (const Row& r : rows) {
    EXPECT_EQ(dtype_name(r.dtype), r.name);
    EXPECT_EQ(dtype_size(r.dtype), r.size) << r.name;
    EXPECT_EQ(parse_dtype(r.name), r.dtype) << r.name;
  }
  for (DType d : kAllDTypes) EXPECT_EQ(parse_dtype(dtype_name(d)), d);
}

TEST(DTypeTest, TorchAliasesAndUnknownNames) {
  EXPECT_EQ(parse_dtype("float32"), DType::kF32);
  EXPECT_EQ(parse_dtype("float"), DType::kF32);
  EXPECT_EQ(parse_dtype("float16"), DType::kF16);
  EXPECT_EQ(parse_dtype("half"), DType::kF16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::kFp8E4m3);
  EXPECT_EQ(parse_dtype("float8_e5m2"), DType::kFp8E5m2);
  EXPECT_EQ(parse_dtype("int8"), DType::kI8);
  EXPECT_EQ(parse_dtype("uint8"), DType::kU8);
  EXPECT_EQ(parse_dtype("int32"), DType::kI32);
  EXPECT_EQ(parse_dtype("int64"), DType::kI64);
  for (const char* bad : {"", "f64", "float64", "BF16", "bf16 ", "fp8", "e4m3", "int16"}) {
    EXPECT_FALSE(parse_dtype(bad).has_value()) << "'" << bad << "'";
  }
}

TEST(DTypeTest, FloatActivationTypes) {
  for (DType d : kAllDTypes) {
    const bool expected = d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
    EXPECT_EQ(is_float_activation(d), expected) << dtype_name(d);
  }
}

// ---- bf16

TEST(Bf16, DecodeIsTheTopHalfOfAnF32ForEveryCode) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    EXPECT_EQ(bits_of(bf16_to_f32(uint16_t(c))), c << 16) << std::hex << c;
  }
}

TEST(Bf16, EveryCodeRoundTripsAndNaNStaysNaN) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const float f = bf16_to_f32(uint16_t(c));
    const uint16_t back = f32_to_bf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(back))) << std::hex << c;
      EXPECT_EQ(back & 0x8000, c & 0x8000) << std::hex << c;
    } else {
      EXPECT_EQ(back, c) << std::hex << c;
    }
  }
  // A signalling NaN whose payload sits in the dropped half must not become infinity.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(float_of(0x7F800001)))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(float_of(0xFF800001)))));
}

TEST(Bf16, RoundsToNearestEvenAtEveryMidpoint) {
  // Finite codes below the largest (whose upper neighbour is infinity), both signs.
  for (uint32_t c = 0; c < 0x7F7F; ++c) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const uint32_t lo = c | sign;
      const uint32_t mid = (lo << 16) | 0x8000;
      const uint16_t even = (c & 1) ? uint16_t(lo + 1) : uint16_t(lo);
      ASSERT_EQ(f32_to_bf16(float_of(mid)), even) << std::hex << mid;
      ASSERT_EQ(f32_to_bf16(float_of(mid - 1)), lo) << std::hex << mid;
      ASSERT_EQ(f32_to_bf16(float_of(mid + 1)), uint16_t(lo + 1)) << std::hex << mid;
    }
  }
  // Overflow rounds to infinity like IEEE; infinities stay infinities.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-kInf), 0xFF80);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
}

// ---- f16

TEST(F16, KnownCodes) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(f16_to_f32(0x7C00), kInf);
  EXPECT_EQ(f16_to_f32(0xFC00), -kInf);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7C01)));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // midpoint above the largest finite: to inf (even)
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(1e9f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e9f), 0xFC00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);   // half the smallest: ties to 0
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -26)), 0x0001);   // 0.75 of it: up
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);   // 1.5 quanta: to even 2
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -30)), 0x8000);  // signed zero
  EXPECT_EQ(f32_to_f16(kNaN) & 0x7C00, 0x7C00);
  EXPECT_NE(f32_to_f16(kNaN) & 0x03FF, 0);
}

TEST(F16, EveryCodeRoundTripsAndMidpointsGoToEven) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const float f = f16_to_f32(uint16_t(c));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << std::hex << c;
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), c) << std::hex << c;
    // Midpoint to the next code of larger magnitude (exact in fp32: 11 significant bits).
    if ((c & 0x7FFF) < 0x7BFF) {
      const float next = f16_to_f32(uint16_t(c + 1));
      const float mid = (f + next) / 2;
      const uint16_t even = (c & 1) ? uint16_t(c + 1) : uint16_t(c);
      ASSERT_EQ(f32_to_f16(mid), even) << std::hex << c;
      ASSERT_EQ(f32_to_f16(std::nextafter(mid, 0.0f)), c) << std::hex << c;
      ASSERT_EQ(f32_to_f16(std::nextafter(mid, std::copysign(kInf, mid))), uint16_t(c + 1))
          << std::hex << c;
    }
  }
}

#if defined(__FLT16_MAX__)
// The compiler's _Float16 conversions are IEEE (round to nearest even): an independent oracle.
TEST(F16, MatchesFloat16ForEveryCodeAndASweepOfF32) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const float ours = f16_to_f32(uint16_t(c));
    const float theirs = float(std::bit_cast<_Float16>(uint16_t(c)));
    if (std::isnan(theirs)) {
      ASSERT_TRUE(std::isnan(ours)) << std::hex << c;
    } else {
      ASSERT_EQ(bits_of(ours), bits_of(theirs)) << std::hex << c;
    }
  }
  // Every 4099th fp32 bit pattern (about a million values across all binades and signs).
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) {
    const float f = float_of(uint32_t(u));
    const uint16_t theirs = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    const uint16_t ours = f32_to_f16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(f16_to_f32(ours))) << std::hex << u;
    } else {
      ASSERT_EQ(ours, theirs) << std::hex << u << " = " << f;
    }
  }
}
#endif

// ---- fp8: independent decoders written from the format tables (spec/cache_ops.md §1.4).

float e4m3_reference(uint8_t c) {
  const int sign = c >> 7;
  const int e = (c >> 3) & 0xF;
  const int m = c & 0x7;
  if (e == 0xF && m == 0x7) return kNaN;
  const double mag = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(double(8 + m), e - 10);
  return float(sign ? -mag : mag);
}

float e5m2_reference(uint8_t c) {
  const int sign = c >> 7;
  const int e = (c >> 2) & 0x1F;
  const int m = c & 0x3;
  if (e == 0x1F) return m == 0 ? (sign ? -kInf : kInf) : kNaN;
  const double mag = e == 0 ? std::ldexp(double(m), -16) : std::ldexp(double(4 + m), e - 17);
  return float(sign ? -mag : mag);
}

void expect_same_value(float ours, float reference, int code) {
  if (std::isnan(reference)) {
    EXPECT_TRUE(std::isnan(ours)) << "code 0x" << std::hex << code;
  } else {
    EXPECT_EQ(bits_of(ours), bits_of(reference))
        << "code 0x" << std::hex << code << ": " << ours << " vs " << reference;
  }
}

TEST(Fp8E4m3, DecodesAll256Codes) {
  for (int c = 0; c < 256; ++c)
    expect_same_value(fp8_e4m3_to_f32(uint8_t(c)), e4m3_reference(uint8_t(c)), c);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xFF)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
  // No infinities: 0x78 (exponent all ones, mantissa 0) is the finite 256.
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);
}

TEST(Fp8E4m3, EncodeRoundTripsEveryFiniteCodeAndRoundsMidpointsToEven) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(uint8_t(c))), c) << std::hex << c;
  }
  for (int c = 0; c < 0x7E; ++c) {  // every pair of adjacent finite positive codes
    const float lo = fp8_e4m3_to_f32(uint8_t(c));
    const float hi = fp8_e4m3_to_f32(uint8_t(c + 1));
    const float mid = (lo + hi) / 2;  // exact: 4 significant bits plus one
    const int even = (c & 1) ? c + 1 : c;
    EXPECT_EQ(f32_to_fp8_e4m3(mid), even) << std::hex << c;
    EXPECT_EQ(f32_to_fp8_e4m3(-mid), 0x80 | even) << std::hex << c;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 0.0f)), c) << std::hex << c;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, kInf)), c + 1) << std::hex << c;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal
  EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(f32_to_fp8_e4m3(1e-30f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e-30f), 0x80);
}

TEST(Fp8E4m3, SaturatesAndKeepsNaN) {
  EXPECT_EQ(f32_to_fp8_e4m3(1e9f), 0x7E);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e9f), 0xFE);
  EXPECT_EQ(f32_to_fp8_e4m3(kInf), 0x7E);
  EXPECT_EQ(f32_to_fp8_e4m3(-kInf), 0xFE);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::max()), 0x7E);
  for (float v : {448.5f, 460.0f, 464.0f, 470.0f, 480.0f, 500.0f}) {
    EXPECT_EQ(f32_to_fp8_e4m3(v), 0x7E) << v;
  }
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(kNaN))));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(-kNaN))));
  EXPECT_EQ(f32_to_fp8_e4m3(kNaN) & 0x7F, 0x7F);
}

TEST(Fp8E5m2, DecodesAll256Codes) {
  for (int c = 0; c < 256; ++c)
    expect_same_value(fp8_e5m2_to_f32(uint8_t(c)), e5m2_reference(uint8_t(c)), c);
  EXPECT_EQ(fp8_e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(fp8_e5m2_to_f32(0xFB), -57344.0f);
  EXPECT_EQ(fp8_e5m2_to_f32(0x7C), kInf);
  EXPECT_EQ(fp8_e5m2_to_f32(0xFC), -kInf);
  for (int c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) {
    EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(uint8_t(c)))) << std::hex << c;
  }
  EXPECT_EQ(fp8_e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_e5m2_to_f32(0x04), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8_e5m2_to_f32(0x3C), 1.0f);
}

TEST(Fp8E5m2, EncodeRoundTripsEveryFiniteCodeAndRoundsMidpointsToEven) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7C) == 0x7C) continue;  // inf and NaN
    EXPECT_EQ(f32_to_fp8_e5m2(fp8_e5m2_to_f32(uint8_t(c))), c) << std::hex << c;
  }
  for (int c = 0; c < 0x7B; ++c) {
    const float lo = fp8_e5m2_to_f32(uint8_t(c));
    const float hi = fp8_e5m2_to_f32(uint8_t(c + 1));
    const float mid = (lo + hi) / 2;
    const int even = (c & 1) ? c + 1 : c;
    EXPECT_EQ(f32_to_fp8_e5m2(mid), even) << std::hex << c;
    EXPECT_EQ(f32_to_fp8_e5m2(-mid), 0x80 | even) << std::hex << c;
    EXPECT_EQ(f32_to_fp8_e5m2(std::nextafter(mid, 0.0f)), c) << std::hex << c;
    EXPECT_EQ(f32_to_fp8_e5m2(std::nextafter(mid, kInf)), c + 1) << std::hex << c;
  }
  EXPECT_EQ(f32_to_fp8_e5m2(std::ldexp(1.0f, -17)), 0x00);
  EXPECT_EQ(f32_to_fp8_e5m2(-std::ldexp(1.0f, -20)), 0x80);
}

TEST(Fp8E5m2, SaturatesInsteadOfProducingInfinityAndKeepsNaN) {
  EXPECT_EQ(f32_to_fp8_e5m2(1e9f), 0x7B);
  EXPECT_EQ(f32_to_fp8_e5m2(-1e9f), 0xFB);
  EXPECT_EQ(f32_to_fp8_e5m2(kInf), 0x7B);
  EXPECT_EQ(f32_to_fp8_e5m2(-kInf), 0xFB);
  EXPECT_EQ(f32_to_fp8_e5m2(61440.0f), 0x7B);  // would be the next binade
  EXPECT_EQ(f32_to_fp8_e5m2(59392.0f), 0x7B);  // midpoint to it
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(f32_to_fp8_e5m2(kNaN))));
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(f32_to_fp8_e5m2(-kNaN))));
}

TEST(Numeric, RoundingIgnoresTheFloatingPointEnvironment) {
  // The conversions are defined as round-to-nearest-even whatever rounding mode the calling
  // thread has set (a caller may run with FE_UPWARD, e.g. for interval arithmetic).
  struct Tie {
    float value;
    uint8_t e4m3;
    uint8_t e5m2;
  };
  // 1.0625 lies between e4m3 codes 1.0 (0x38) and 1.125 (0x39): ties to the even 0x38.
  // 1.125 lies between e5m2 codes 1.0 (0x3C) and 1.25 (0x3D): ties to 0x3C; e4m3 exact 0x39.
  const Tie ties[] = {
      {1.0625f, 0x38, 0x3C}, {1.125f, 0x39, 0x3C}, {-1.0625f, 0xB8, 0xBC}, {1.1875f, 0x3A, 0x3D}};
  const float f16_tie = 1.0f + std::ldexp(1.0f, -11);  // between 0x3C00 and 0x3C01
  for (int mode : {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO}) {
    ASSERT_EQ(std::fesetround(mode), 0);
    for (const Tie& t : ties) {
      EXPECT_EQ(f32_to_fp8_e4m3(t.value), t.e4m3) << t.value << " mode " << mode;
      EXPECT_EQ(f32_to_fp8_e5m2(t.value), t.e5m2) << t.value << " mode " << mode;
    }
    EXPECT_EQ(f32_to_f16(f16_tie), 0x3C00) << "mode " << mode;
    EXPECT_EQ(f32_to_f16(-f16_tie), 0xBC00) << "mode " << mode;
    std::fesetround(FE_TONEAREST);
  }
}

TEST(Fp8, RandomValuesRoundToANearestCode) {
  // Property: the encoded value is one of the two codes around x and no farther than the other.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 64.0f);
  // The comparison against all 256 codes is quadratic: a few thousand values suffice.
  for (int i = 0; i < 3000; ++i) {
    const float x = normal(rng) * (i % 3 == 0 ? 1e-3f : 1.0f);
    const float e4 = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x));
    const float e5 = fp8_e5m2_to_f32(f32_to_fp8_e5m2(x));
    const float cx4 = std::clamp(x, -448.0f, 448.0f);
    const float cx5 = std::clamp(x, -57344.0f, 57344.0f);
    // Every other code is at least as far away as the chosen one.
    for (int c = 0; c < 256; ++c) {
      const float v4 = fp8_e4m3_to_f32(uint8_t(c));
      if (!std::isnan(v4)) {
        ASSERT_LE(std::fabs(e4 - cx4), std::fabs(v4 - cx4)) << x;
      }
      const float v5 = fp8_e5m2_to_f32(uint8_t(c));
      if (std::isfinite(v5)) {
        ASSERT_LE(std::fabs(e5 - cx5), std::fabs(v5 - cx5)) << x;
      }
    }
  }
}

}  // namespace
}  // namespace jit
