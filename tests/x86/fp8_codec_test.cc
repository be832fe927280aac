// The Generator's vectorised fp8 encoder and decoder on their own, against ir/numeric.h, on
// every ISA path this host runs. The encoder is proved on a dense sweep of fp32 (every bit
// pattern whose low 8 bits are a fixed random byte: 2^24 values spanning every exponent and
// sign), every upper half (2^16) with 16 random lower halves, every midpoint between adjacent
// fp8 values and its fp32 neighbours, and the specials (±0, ±inf, NaNs, the largest and
// smallest subnormals of both fp8 formats and of fp32, the saturation thresholds). Codes must
// be equal; a NaN from ref must be a NaN code from the kernel. The decoder is checked on all
// 256 codes.
#define KILN_TEST_MAP_GENERATOR
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "codegen/code_arena.h"
#include "ir/numeric.h"
#include "tests/x86/x86_test_util.h"

namespace jit::codegen::x86 {
namespace {

// dst[v] = encode(src[v]) (fp32 -> int32 codes) or decode (int32 codes -> fp32) over whole
// vectors.
class Fp8MapGenerator : public test::VectorMapGenerator {
 public:
  Fp8MapGenerator(X86Isa isa, DType format, bool encode)
      : VectorMapGenerator(isa), format_(format), encode_(encode) {
    generate();
  }

 protected:
  void apply() override {
    if (encode_) {
      fp8_encode(vmm(0), format_);
    } else {
      fp8_decode(vmm(0), format_);
    }
  }

 private:
  DType format_;
  bool encode_;
};

std::vector<X86Isa> isa_paths() {
  return test::isa_paths({X86Isa::kAvx2, X86Isa::kAvx512});
}

// Runs the generated map over `src` (padded to whole vectors) and returns the lanes.
template <class Out, class In>
std::vector<Out> run_map(X86Isa isa, DType format, bool encode, const std::vector<In>& src) {
  Fp8MapGenerator gen(isa, format, encode);
  auto code = gen.finish();
  EXPECT_TRUE(code.is_ok()) << code.status().to_string();
  auto address = CodeArena::global().add(code.value());
  EXPECT_TRUE(address.is_ok());
  const auto fn = reinterpret_cast<KernelFn>(const_cast<void*>(address.value()));
  const size_t lanes = size_t(gen.vector_lanes());
  std::vector<In> padded = src;
  padded.resize((src.size() + lanes - 1) / lanes * lanes);
  std::vector<Out> dst(padded.size());
  const test::MapArgs args{padded.data(), dst.data()};
  fn(&args, 0, int64_t(padded.size() / lanes));
  dst.resize(src.size());
  return dst;
}

uint8_t ref_encode(DType format, float x) {
  return format == DType::kFp8E5m2 ? numeric::f32_to_fp8_e5m2(x) : numeric::f32_to_fp8_e4m3(x);
}
float ref_decode(DType format, uint8_t code) {
  return format == DType::kFp8E5m2 ? numeric::fp8_e5m2_to_f32(code)
                                   : numeric::fp8_e4m3_to_f32(code);
}
bool is_nan_code(DType format, uint32_t code) {
  return std::isnan(ref_decode(format, uint8_t(code)));
}

// The boundary inputs: midpoints of adjacent fp8 values (and of the largest finite value and
// the next step it would round to) with their fp32 neighbours, and the specials.
std::vector<float> boundary_inputs(DType format) {
  std::vector<float> v;
  auto with_neighbours = [&](float x) {
    for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)}) {
      v.push_back(y);
      v.push_back(-y);
    }
  };
  const uint8_t max_code = format == DType::kFp8E5m2 ? 0x7B : 0x7E;
  for (uint8_t c = 0; c < max_code; ++c) {
    const float a = ref_decode(format, c), b = ref_decode(format, uint8_t(c + 1));
    with_neighbours(a);
    with_neighbours(a + (b - a) / 2);  // exact: adjacent fp8 values differ by a power of two
  }
  const float max = ref_decode(format, max_code);
  const float step = max - ref_decode(format, uint8_t(max_code - 1));
  with_neighbours(max);
  with_neighbours(max + step / 2);  // rounds to the (saturated) next step
  with_neighbours(max + step);
  with_neighbours(ref_decode(format, 1));                                        // min subnormal
  with_neighbours(ref_decode(format, format == DType::kFp8E5m2 ? 0x03 : 0x07));  // max subnormal
  const float specials[] = {0.0f,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::denorm_min(),
                            std::bit_cast<float>(0x007FFFFFu),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::bit_cast<float>(0x7F800001u),  // signalling NaN
                            std::bit_cast<float>(0x7FFFFFFFu),
                            1e30f,
                            1e-30f};
  for (float x : specials) with_neighbours(x);
  return v;
}

// Every fp32 pattern with a fixed random low byte, every upper half with 16 random lower
// halves.
std::vector<float> sweep_inputs() {
  std::mt19937 rng(2024);
  const auto low = uint32_t(rng() & 0xFF);
  std::vector<float> v;
  v.reserve((size_t(1) << 24) + (size_t(1) << 20));
  for (uint32_t hi = 0; hi < (1u << 24); ++hi) v.push_back(std::bit_cast<float>(hi << 8 | low));
  for (uint32_t upper = 0; upper < (1u << 16); ++upper) {
    for (int k = 0; k < 16; ++k)
      v.push_back(std::bit_cast<float>(upper << 16 | uint32_t(rng() & 0xFFFF)));
  }
  return v;
}

void expect_encodes_like_ref(X86Isa isa, DType format, const std::vector<float>& inputs,
                             const std::vector<uint8_t>& expected) {
  const auto codes = run_map<uint32_t>(isa, format, /*encode=*/true, inputs);
  int64_t failures = 0;
  for (size_t i = 0; i < inputs.size() && failures < 10; ++i) {
    const bool ok = is_nan_code(format, expected[i])
                        ? codes[i] <= 0xFF && is_nan_code(format, codes[i])
                        : codes[i] == expected[i];
    if (!ok) {
      ++failures;
      ADD_FAILURE() << x86_isa_name(isa) << " " << dtype_name(format) << ": x = " << inputs[i]
                    << " (0x" << std::hex << std::bit_cast<uint32_t>(inputs[i]) << ") gave 0x"
                    << codes[i] << ", expected 0x" << int(expected[i]) << std::dec;
    }
  }
}

TEST(Fp8Codec, EncoderMatchesNumericOnBoundaries) {
  for (DType format : {DType::kFp8E4m3, DType::kFp8E5m2}) {
    const std::vector<float> inputs = boundary_inputs(format);
    std::vector<uint8_t> expected;
    for (float x : inputs) expected.push_back(ref_encode(format, x));
    for (X86Isa isa : isa_paths()) expect_encodes_like_ref(isa, format, inputs, expected);
  }
}

TEST(Fp8Codec, EncoderMatchesNumericOnADenseSweep) {
  const std::vector<float> inputs = sweep_inputs();
  for (DType format : {DType::kFp8E4m3, DType::kFp8E5m2}) {
    std::vector<uint8_t> expected(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) expected[i] = ref_encode(format, inputs[i]);
    for (X86Isa isa : isa_paths()) expect_encodes_like_ref(isa, format, inputs, expected);
  }
}

TEST(Fp8Codec, DecoderMatchesNumericOnEveryCode) {
  std::vector<uint32_t> codes(256);
  for (uint32_t c = 0; c < 256; ++c) codes[c] = c;
  for (DType format : {DType::kFp8E4m3, DType::kFp8E5m2}) {
    for (X86Isa isa : isa_paths()) {
      const auto values = run_map<float>(isa, format, /*encode=*/false, codes);
      for (uint32_t c = 0; c < 256; ++c) {
        const float expected = ref_decode(format, uint8_t(c));
        if (std::isnan(expected)) {
          EXPECT_TRUE(std::isnan(values[c])) << dtype_name(format) << " code 0x" << std::hex << c;
        } else {
          EXPECT_EQ(std::bit_cast<uint32_t>(values[c]), std::bit_cast<uint32_t>(expected))
              << x86_isa_name(isa) << " " << dtype_name(format) << " code 0x" << std::hex << c
              << ": got " << values[c] << ", expected " << expected;
        }
      }
    }
  }
}

}  // namespace
}  // namespace jit::codegen::x86
