// The x86 runners' host row conversions (codegen/x86/host_rows.h) against ir/numeric.h: every
// 16-bit pattern widened, and fp32 rounded to bf16 / f16 over a dense sweep of bit patterns
// (every sign and exponent, the halfway points of both formats and their neighbours, NaNs,
// infinities, subnormals), at scale 1 and at a scale, over lengths that leave every tail
// length of the 8-element steps. The words must be equal, NaN included (bf16 keeps the sign and
// high payload, f16 gives sign | 0x7E00); a widened f16 NaN must be a NaN (F16C keeps its
// payload, numeric::f16_to_f32 does not).
#include "codegen/x86/host_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "codegen/target.h"
#include "ir/numeric.h"

namespace jit::codegen::x86 {
namespace {

bool host_runs_x86_backend() {
  if (detect_host_x86_isa() >= X86Isa::kAvx2) return true;
  std::printf("note: host has no AVX2+FMA+F16C (the x86 backend's floor): host rows not run\n");
  return false;
}

// fp32 patterns: for every upper half (sign, exponent, 7 mantissa bits) the lower halves that
// decide bf16 rounding (0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF), the halfway points of f16's 13
// dropped bits and of its subnormals' 14 and 15 (0x1000, 0x2000, 0x4000, each with its
// neighbours), and 2 random ones; then the specials.
std::vector<float> rounding_sweep() {
  std::vector<float> values;
  std::mt19937 rng(11);
  for (uint32_t high = 0; high < 0x10000; ++high) {
    for (uint32_t low : {0u,
                         1u,
                         0x7FFFu,
                         0x8000u,
                         0x8001u,
                         0xFFFFu,
                         0x0FFFu,
                         0x1000u,
                         0x1001u,
                         0x1FFFu,
                         0x2000u,
                         0x2001u,
                         0x2FFFu,
                         0x3000u,
                         0x3001u,
                         0x3FFFu,
                         0x4000u,
                         0x4001u,
                         uint32_t(rng() & 0xFFFFu),
                         uint32_t(rng() & 0xFFFFu)}) {
      values.push_back(std::bit_cast<float>(high << 16 | low));
    }
  }
  for (uint32_t bits : {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u,
                        0x7FBFFFFFu, 0xFF812345u, 0x00000001u, 0x80000001u, 0x007FFFFFu,
                        0x477FEFFFu, 0x477FF000u, 0x477FF001u, 0x33000000u, 0x33000001u}) {
    values.push_back(std::bit_cast<float>(bits));
  }
  return values;
}

TEST(HostRows, WidenMatchesNumericOnEveryPattern) {
  if (!host_runs_x86_backend()) GTEST_SKIP() << "no AVX2+FMA+F16C";
  std::vector<uint16_t> words(0x10000);
  for (uint32_t w = 0; w < 0x10000; ++w) words[w] = uint16_t(w);
  std::vector<float> out(words.size());
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    // Every length 0..17 from an odd start (tails and misaligned loads) into a guarded
    // buffer (nothing written past n), then all patterns.
    for (int64_t n = 0; n <= 17; ++n) {
      std::fill(out.begin(), out.begin() + 32, -7.0f);
      widen_row(out.data(), dtype, words.data() + 0x3F01, n);
      for (int64_t e = n; e < 32; ++e) ASSERT_EQ(out[size_t(e)], -7.0f) << "n " << n;
      for (int64_t e = 0; e < n; ++e) {
        const uint16_t w = words[size_t(0x3F01 + e)];
        const float want = dtype == DType::kBF16 ? numeric::bf16_to_f32(w) : numeric::f16_to_f32(w);
        ASSERT_EQ(std::bit_cast<uint32_t>(out[size_t(e)]), std::bit_cast<uint32_t>(want));
      }
    }
    widen_row(out.data(), dtype, words.data(), int64_t(words.size()));
    for (uint32_t w = 0; w < 0x10000; ++w) {
      const float want = dtype == DType::kBF16 ? numeric::bf16_to_f32(uint16_t(w))
                                               : numeric::f16_to_f32(uint16_t(w));
      if (std::isnan(want)) {  // F16C keeps an f16 NaN's payload; the sign must match
        ASSERT_TRUE(std::isnan(out[w])) << dtype_name(dtype) << " word " << w;
        ASSERT_EQ(std::signbit(out[w]), std::signbit(want)) << dtype_name(dtype) << " word " << w;
      } else {
        ASSERT_EQ(std::bit_cast<uint32_t>(out[w]), std::bit_cast<uint32_t>(want))
            << dtype_name(dtype) << " word " << w;
      }
    }
  }
  std::vector<float> f32 = {1.5f, -0.0f, INFINITY, 3.0e-42f, 7.0f};
  widen_row(out.data(), DType::kF32, f32.data(), int64_t(f32.size()));
  for (size_t e = 0; e < f32.size(); ++e) {
    EXPECT_EQ(std::bit_cast<uint32_t>(out[e]), std::bit_cast<uint32_t>(f32[e]));
  }
}

TEST(HostRows, RoundMatchesNumericOnADenseSweep) {
  if (!host_runs_x86_backend()) GTEST_SKIP() << "no AVX2+FMA+F16C";
  const std::vector<float> values = rounding_sweep();
  std::vector<uint16_t> words(values.size());
  std::vector<float> f32(values.size());
  for (float scale : {1.0f, 0.0078125f, 3.1f, 0.0f, -2.5f}) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      round_row(words.data(), dtype, values.data(), int64_t(values.size()), scale);
      for (size_t i = 0; i < values.size(); ++i) {
        const float x = values[i] * scale;
        const uint16_t want =
            dtype == DType::kBF16 ? numeric::f32_to_bf16(x) : numeric::f32_to_f16(x);
        ASSERT_EQ(words[i], want) << dtype_name(dtype) << " value bits 0x" << std::hex
                                  << std::bit_cast<uint32_t>(values[i]) << " scale " << scale;
      }
    }
    round_row(f32.data(), DType::kF32, values.data(), int64_t(values.size()), scale);
    for (size_t i = 0; i < values.size(); ++i) {
      const float want = values[i] * scale;
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(f32[i]));
      } else {
        ASSERT_EQ(std::bit_cast<uint32_t>(f32[i]), std::bit_cast<uint32_t>(want));
      }
    }
  }
}

TEST(HostRows, RoundWritesExactlyTheRow) {
  if (!host_runs_x86_backend()) GTEST_SKIP() << "no AVX2+FMA+F16C";
  // Every length 0..17 into a guarded buffer: nothing past n is written.
  std::vector<float> src(17);
  for (size_t i = 0; i < src.size(); ++i) src[i] = float(i) * 0.37f - 2.0f;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    const size_t esize = dtype_size(dtype);
    for (int64_t n = 0; n <= 17; ++n) {
      std::vector<uint8_t> dst((size_t(n) + 8) * esize, 0xAB);
      round_row(dst.data(), dtype, src.data(), n, 0.5f);
      for (size_t b = size_t(n) * esize; b < dst.size(); ++b) {
        ASSERT_EQ(dst[b], 0xAB) << dtype_name(dtype) << " n " << n << " byte " << b;
      }
      for (int64_t e = 0; e < n; ++e) {
        const float x = src[size_t(e)] * 0.5f;
        if (dtype == DType::kF32) {
          float got;
          std::memcpy(&got, dst.data() + e * 4, 4);
          ASSERT_EQ(got, x);
        } else {
          uint16_t got;
          std::memcpy(&got, dst.data() + e * 2, 2);
          ASSERT_EQ(got, dtype == DType::kBF16 ? numeric::f32_to_bf16(x) : numeric::f32_to_f16(x));
        }
      }
    }
  }
}

}  // namespace
}  // namespace jit::codegen::x86
