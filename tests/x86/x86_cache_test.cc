// The x86 cache writes, copies and gathers against the ref backend (bit-exact; fp8 NaN codes as
// NaN): reshape_and_cache_flash, reshape_and_cache, concat_and_cache_mla, swap_blocks, convert_fp8,
// cp_gather_cache and gather_and_maybe_dequant_cache over head/entry sizes, block sizes, kv modes,
// layouts, scale kinds, dtypes, with and without seq_starts, every input kind and every ISA path;
// multi-threaded rows; and the checked mode (an out-of-range index is an error with the ref's
// message and nothing is written).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "codegen/ref/ref.h"
#include "codegen/x86/x86_backend.h"
#include "ir/numeric.h"
#include "runtime/runtime.h"
#include "tests/harness/op_cases.h"
#include "tests/x86/x86_test_util.h"

namespace jit {
namespace {

using ir::KvCacheDtype;
using test::check_against_ref;
using test::InputKind;

const DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
const KvCacheDtype kKvModes[] = {KvCacheDtype::kAuto, KvCacheDtype::kFp8E4m3,
                                 KvCacheDtype::kFp8E5m2};
const int64_t kHeadSizes[] = {1, 16, 46, 64, 80, 128, 256};
const int64_t kBlockSizes[] = {1, 16, 32, 128};

// Up to avx512_fp16: avx512_vbmi adds the fast fp8 quantiser's byte tables, avx512_fp16 its
// 16-bit power-of-two steps; the cache generators emit the same code at amx as at avx512_fp16.
std::vector<X86Isa> isa_paths() {
  return test::isa_paths({X86Isa::kAvx2, X86Isa::kAvx512, X86Isa::kAvx512Bf16, X86Isa::kAvx512Vbmi,
                          X86Isa::kAvx512Fp16});
}

using test::compile_x86;

// The input kinds of `op`, or only normal and adversarial values (`few`): the grid sweeps
// shapes with those, each shape's code path being the same for every value.
std::vector<InputKind> kinds_for(OpKind op, bool few) {
  if (few) return {InputKind::kNormal, InputKind::kAdversarial};
  return test::input_kinds_for(op);
}

// Every input kind of the op (or `few`) over `size` rows; false at the first mismatch.
bool check_spec(const OpSpec& spec, X86Isa isa, int64_t size, Config config = {},
                bool few = false) {
  const Kernel kernel = compile_x86(spec, isa, config);
  for (InputKind kind : kinds_for(spec.op, few)) {
    auto c = test::make_case(spec, size, kind, /*seed=*/uint64_t(size) * 131 + 7);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    if (!c.is_ok()) return false;
    const auto report = check_against_ref(kernel, c.value());
    EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa) << " size=" << size
                           << " inputs=" << test::input_kind_name(kind) << "\n"
                           << report.message;
    if (!report.ok) return false;
  }
  return true;
}

OpSpec flash_spec(DType dtype, KvCacheDtype kv, int64_t heads, int64_t head_size,
                  int64_t block_size, ir::CacheLayout layout, bool per_head) {
  return OpSpec::make(
      OpKind::kReshapeAndCacheFlash,
      ir::FlashCacheWriteParams{dtype, kv, heads, head_size, block_size, layout, per_head});
}

OpSpec paged_spec(DType dtype, KvCacheDtype kv, int64_t heads, int64_t head_size,
                  int64_t block_size) {
  return OpSpec::make(OpKind::kReshapeAndCache,
                      ir::PagedCacheWriteParams{dtype, kv, heads, head_size, block_size});
}

OpSpec mla_spec(DType dtype, KvCacheDtype kv, int64_t rank, int64_t pe_dim, int64_t block_size) {
  return OpSpec::make(OpKind::kConcatAndCacheMla,
                      ir::MlaCacheWriteParams{dtype, kv, rank, pe_dim, block_size});
}

class X86CacheIsaTest : public ::testing::TestWithParam<X86Isa> {};

// ---- reshape_and_cache_flash -------------------------------------------------------------

// The full head size x block size grid for bf16 (all input kinds up to block size 16); f32
// and f16 change only the element loads, so they sweep the head sizes at block sizes 1 and 16.
bool in_grid(DType dtype, int64_t block_size) {
  return dtype == DType::kBF16 || block_size <= 16;
}

TEST_P(X86CacheIsaTest, FlashMatchesRefOverTheGrid) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      for (ir::CacheLayout layout : {ir::CacheLayout::kNhd, ir::CacheLayout::kHnd}) {
        for (bool per_head : {false, true}) {
          if (per_head && kv == KvCacheDtype::kAuto) continue;  // auto reads no scale
          for (int64_t d : kHeadSizes) {
            for (int64_t bs : kBlockSizes) {
              if (!in_grid(dtype, bs)) continue;
              const OpSpec spec = flash_spec(dtype, kv, 3, d, bs, layout, per_head);
              if (!check_spec(spec, isa, 5, {}, /*few=*/bs > 16)) return;
            }
          }
        }
      }
    }
  }
}

// vLLM's misaligned-rows regression (H=13, D=46) and heads whose rows span several loop steps.
TEST_P(X86CacheIsaTest, FlashUnalignedAndLongRowsMatchRef) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      for (ir::CacheLayout layout : {ir::CacheLayout::kNhd, ir::CacheLayout::kHnd}) {
        EXPECT_TRUE(check_spec(flash_spec(dtype, kv, 13, 46, 16, layout, false), isa, 21));
        EXPECT_TRUE(check_spec(flash_spec(dtype, kv, 8, 576, 16, layout, false), isa, 3, {},
                               /*few=*/true));
      }
    }
  }
}

// HND copies at AVX-512 load a token's heads in batches that fill the 32 vector registers, then
// store them (FlashWriteGenerator::copy_heads_in_batches): head counts of one batch, one batch
// and a rest, several batches (a loop) and a rest, at heads of 2, 3, 4, 8 and 32 vectors
// (batches of 16, 10 (30 registers), 8, 4 and 1 heads), bf16 and f32.
TEST_P(X86CacheIsaTest, FlashHndHeadBatchesMatchRef) {
  const X86Isa isa = GetParam();
  for (const auto& [dtype, d] : {std::pair{DType::kBF16, int64_t(64)},
                                 {DType::kBF16, int64_t(96)},
                                 {DType::kBF16, int64_t(128)},
                                 {DType::kF32, int64_t(128)},
                                 {DType::kBF16, int64_t(1024)}}) {
    for (int64_t heads : {4, 8, 9, 16, 17, 20}) {
      EXPECT_TRUE(check_spec(
          flash_spec(dtype, KvCacheDtype::kAuto, heads, d, 16, ir::CacheLayout::kHnd, false), isa,
          7));
    }
  }
}

// ---- reshape_and_cache -------------------------------------------------------------------

TEST_P(X86CacheIsaTest, PagedMatchesRefOverTheGrid) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      const int64_t x = ir::paged_key_x(dtype, kv);
      for (int64_t d : {4, 8, 16, 48, 64, 80, 128, 256, 576}) {
        if (d % x != 0) continue;  // the spec requires D % x == 0 (validate rejects the rest)
        for (int64_t bs : kBlockSizes) {
          if (!in_grid(dtype, bs)) continue;
          if (!check_spec(paged_spec(dtype, kv, 3, d, bs), isa, 5, {}, /*few=*/bs > 16)) return;
        }
      }
    }
  }
}

// ---- concat_and_cache_mla ---------------------------------------------------------------

// kv_c/k_pe rows are the two splits of one [T, R + P] projection (row stride R + P), so the
// row strides differ from the widths; every dtype and plain kv mode over the rank x pe_dim x
// block size grid.
TEST_P(X86CacheIsaTest, MlaMatchesRefOverTheGrid) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      for (int64_t rank : {16, 512}) {
        for (int64_t pe : {8, 64}) {
          for (int64_t bs : {1, 16, 64}) {
            if (!check_spec(mla_spec(dtype, kv, rank, pe, bs), isa, 9, {}, /*few=*/bs > 16)) {
              return;
            }
          }
        }
      }
    }
  }
}

// Widths that are not multiples of a vector (tails on both parts, odd entry offsets of k_pe).
TEST_P(X86CacheIsaTest, MlaOddWidthsMatchRef) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      for (auto [rank, pe] : {std::pair<int64_t, int64_t>{1, 1}, {7, 3}, {33, 17}, {100, 5}}) {
        if (!check_spec(mla_spec(dtype, kv, rank, pe, 16), isa, 7, {}, /*few=*/true)) return;
      }
    }
  }
}

// A cache view with padded entries and blocks (entry stride R + P + 5, block stride
// BS * (R + P + 5) + 3 elements): the kernel honours both strides, as the ref does.
TEST_P(X86CacheIsaTest, MlaPaddedCacheMatchesRef) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      for (int64_t bs : {1, 16}) {
        const OpSpec spec = mla_spec(dtype, kv, 16, 8, bs);
        const Kernel kernel = compile_x86(spec, isa);
        auto c = test::make_case(spec, 11, InputKind::kNormal, 17);
        ASSERT_TRUE(c.is_ok()) << c.status().to_string();
        const test::HostTensor& dense = c->tensors[2];
        const std::vector<int64_t> sizes = dense.sizes();
        const int64_t entry = sizes[2] + 5;
        test::HostTensor padded =
            test::HostTensor::strided(dense.dtype(), sizes, {bs * entry + 3, entry, 1});
        for (int64_t i = 0; i < dense.numel(); ++i) padded.set(i, dense.get(i));
        c->tensors[2] = padded;
        const auto report = check_against_ref(kernel, c.value());
        EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa) << "\n"
                               << report.message;
      }
    }
  }
}

// ---- swap_blocks and convert_fp8 ----------------------------------------------------------

TEST_P(X86CacheIsaTest, SwapBlocksMatchesRef) {
  const X86Isa isa = GetParam();
  for (int64_t bytes : {1, 7, 63, 64, 100, 1000, 4096, 65537}) {
    const OpSpec spec = OpSpec::make(OpKind::kSwapBlocks, ir::SwapBlocksParams{bytes});
    for (int64_t pairs : {1, 5, 33}) EXPECT_TRUE(check_spec(spec, isa, pairs));
  }
}

TEST_P(X86CacheIsaTest, ConvertFp8MatchesRefBothDirections) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (bool quantise : {true, false}) {
      const ir::ConvertFp8Params p = quantise ? ir::ConvertFp8Params{DType::kFp8E4m3, dtype}
                                              : ir::ConvertFp8Params{dtype, DType::kFp8E4m3};
      const OpSpec spec = OpSpec::make(OpKind::kConvertFp8, p);
      for (int64_t n : {1, 7, 8, 15, 16, 17, 100, 4095, 4096, 4097, 12345}) {
        if (!check_spec(spec, isa, n)) return;
      }
    }
  }
}

// convert_fp8 (-> e4m3) of every `dtype` value (bf16 or f16; then `tail` more of the case's
// values) at each of `scales`, against the ref. Returns the kernel.
Kernel check_convert_every_16bit_input(X86Isa isa, DType dtype,
                                       std::initializer_list<double> scales, int64_t tail) {
  const OpSpec spec =
      OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{DType::kFp8E4m3, dtype});
  const Kernel kernel = compile_x86(spec, isa);
  for (double scale : scales) {
    auto c = test::make_case(spec, 65536 + tail, InputKind::kNormal, 1);
    EXPECT_TRUE(c.is_ok());
    if (!c.is_ok()) break;
    for (int64_t i = 0; i < 65536; ++i) {
      const auto bits = uint16_t(i);
      c->tensors[1].set(i, dtype == DType::kBF16 ? double(numeric::bf16_to_f32(bits))
                                                 : double(numeric::f16_to_f32(bits)));
    }
    c->scalars[0] = scale;
    const auto report = check_against_ref(kernel, c.value());
    EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa) << " scale=" << scale
                           << "\n"
                           << report.message;
  }
  return kernel;
}

// The quantisers multiply by 1/scale and fall back to the division only next to an fp8
// rounding midpoint (CacheGenerator::load_scaled): every f16 and bf16 value (all 65536 bit
// patterns, so every midpoint neighbourhood of every binade the scale maps them to) against the
// ref's division, for scales whose reciprocal is inexact, a power of two, huge and tiny ones,
// and scales whose reciprocal overflows (denormal, zero: the NaN marker forces the division).
// 0.1, 0.05 and 0.02 (r = 10, 20, 50) take the exact steps through exact_products_bound();
// 1/3 (|r s - 1| = 2^-25 exactly) and 1e-3 (r = 1000 short, |r s - 1| = 4.7e-8) just miss it.
TEST_P(X86CacheIsaTest, ConvertFp8ReciprocalIsBitExactForEveryInput) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    check_convert_every_16bit_input(
        GetParam(), dtype,
        {0.1, 0.05, 0.02, 1.0 / 3.0, 0.3, 7.0, 0.25, 1e-3, 3e5, 1e-30, 0x1p-140, 0.0}, 0);
  }
}

// The exact-products steps (scales 0.1, 0.02: r = 10, 50) jump over the fp8-subnormal fix-up
// when none of a step's 64 lanes needs it: one value in the subnormal range (or zero) at each
// of the 64 positions of a step, among normal ones, must still take it: bf16 (whose steps split
// their values into even and odd vectors) and f16; f32 never takes these steps (its products
// are not exact) and is the control. Scale 0.3 takes the window steps, which at AVX2 give a
// zero lane a marker value and clear its code afterwards (ymm_window_encode): ±0 at every
// position of their 32-value steps too.
TEST_P(X86CacheIsaTest, ConvertFp8ExactProductsSubnormalLaneAtEveryPosition) {
  const X86Isa isa = GetParam();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    const OpSpec spec =
        OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{DType::kFp8E4m3, dtype});
    const Kernel kernel = compile_x86(spec, isa);
    for (double scale : {0.1, 0.02, 0.3}) {
      for (double small : {1e-5, -3e-5, 0.0, -0.0}) {
        auto c = test::make_case(spec, 64 * 64, InputKind::kNormal, 1);
        ASSERT_TRUE(c.is_ok());
        for (int64_t i = 0; i < 64 * 64; ++i) {
          c->tensors[1].set(i, i % 64 == i / 64 ? small : 0.75 + 0.001 * double(i % 7));
        }
        c->scalars[0] = scale;
        const auto report = check_against_ref(kernel, c.value());
        EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa)
                               << " scale=" << scale << " small=" << small << "\n"
                               << report.message;
      }
    }
  }
}

// Power-of-two scales (vLLM's default 1.0, the ue8m0 scales) take the 16-bit lanes of
// quantise_pow2_unit on AVX512-FP16: bf16 -> e4m3 for 2^k, k in [-100, 100], f16 -> e4m3 for k
// in [0, 15]; the fp32 steps outside (2^+-101 and, for f16, 2^1 and 2^-16). At AVX2 and the
// AVX-512 levels without AVX512-FP16 both take quantise_pow2_ymm_unit's 16-bit lanes on ymm for
// the same k (NaN and inf handled in the step), at VBMI the same steps on zmm. Every
// bf16 / f16 value (zero, denormals, the fp8 subnormal range and
// its ties, saturation, +-inf, NaN: on AVX512-FP16 a NaN sends its step to the generic path,
// and for f16 an inf), then a tail.
TEST_P(X86CacheIsaTest, ConvertFp8PowerOfTwoScalesAreBitExactForEveryInput) {
  const X86Isa isa = GetParam();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const Kernel kernel =
        check_convert_every_16bit_input(isa, dtype,
                                        {1.0, 0.5, 2.0, 0x1p-7, 0x1p-15, 0x1p-16, 0x1p-20, 0x1p20,
                                         0x1p-100, 0x1p100, 0x1p-101, 0x1p101},
                                        37);
    // The path is there exactly where AVX512-FP16 is (vaddph: its fp16 subnormal step).
    auto text = kernel.disassembly();
    ASSERT_TRUE(text.is_ok()) << text.status().to_string();
    EXPECT_EQ(text.value().find("vaddph") != std::string::npos, isa >= X86Isa::kAvx512Fp16)
        << dtype_name(dtype) << " isa=" << x86_isa_name(isa);
    // The 16-bit steps below AVX512-FP16: the normal range's arithmetic shift on words (the
    // fp32 steps have none), on a zmm at VBMI (quantise_pow2_zmm_unit), else on a ymm.
    if (isa < X86Isa::kAvx512Fp16) {
      const bool zmm = isa >= X86Isa::kAvx512Vbmi;
      EXPECT_EQ(std::regex_search(text.value(), std::regex("vpsraw[^\\n]*%zmm")), zmm)
          << dtype_name(dtype) << " isa=" << x86_isa_name(isa);
      EXPECT_EQ(std::regex_search(text.value(), std::regex("vpsraw[^\\n]*%ymm")), !zmm)
          << dtype_name(dtype) << " isa=" << x86_isa_name(isa);
    }
  }
}

// The specials on the power-of-two steps, one at each of a step's 64 positions among finite
// values: a NaN must send its step to the generic path (the others' codes unchanged), and +-inf
// must saturate there too (the bf16 steps read inf as 2^(128-k); f16 steps send it to the
// generic path); a zero and a value in e4m3's subnormal range among normal values must take
// their own lane's subnormal code (the f16 steps at VBMI convert the values to fp32 and put the
// lanes back in order, a misplaced lane gives a neighbour's); at scales 2^-100, 1, 2^15 and
// 2^100 (the ends of the paths' ranges), e4m3 through convert_fp8 (bf16 and f16) and e5m2
// through the flash write (a per-tensor scale).
TEST_P(X86CacheIsaTest, PowerOfTwoStepsHandleSpecialLanesAtEveryPosition) {
  const X86Isa isa = GetParam();
  const auto convert = [](DType dtype) {
    return OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{DType::kFp8E4m3, dtype});
  };
  const OpSpec specs[] = {
      convert(DType::kBF16), convert(DType::kF16),
      flash_spec(DType::kBF16, KvCacheDtype::kFp8E5m2, 8, 128, 16, ir::CacheLayout::kNhd, false)};
  const double nan = std::nan(""), inf = HUGE_VAL;
  for (const OpSpec& spec : specs) {
    const bool is_convert = spec.op == OpKind::kConvertFp8;
    const Kernel kernel = compile_x86(spec, isa);
    for (double special_class : {nan, inf, -inf, 0.0, -1.0}) {
      for (int k : {-100, 0, 15, 100}) {
        // -1: 1.25 * 2^(k-8), 2.5 quanta of e4m3's subnormal grid at this scale
        const double special = special_class == -1.0 ? std::ldexp(1.25, k - 8) : special_class;
        // convert: 4096 values; flash: 64 rows of 1024.
        auto c = test::make_case(spec, is_convert ? 64 * 64 : 64, InputKind::kNormal, 5);
        ASSERT_TRUE(c.is_ok());
        // Values 0..4095 of each operand: step i / 64 holds the special at position step % 64;
        // the others finite, normal codes at this scale (flash: the rest of the rows random).
        for (int operand = 0; operand < (is_convert ? 1 : 2); ++operand) {
          test::HostTensor& t = c->tensors[size_t(is_convert ? 1 : operand)];
          const int64_t row_stride = t.numel() / t.sizes()[0];
          for (int64_t i = 0; i < 64 * 64; ++i) {
            const int64_t index = is_convert ? i : (i / 1024) * row_stride + i % 1024;
            const double finite = std::ldexp(0.75 + 0.01 * double(i % 13), k + int(i % 9) - 4);
            t.set(index, i % 64 == (i / 64) % 64 ? special : (i % 2 ? -finite : finite));
          }
        }
        if (is_convert) {
          c->scalars[0] = std::ldexp(1.0, k);
        } else {
          for (int tensor : {5, 6}) c->tensors[size_t(tensor)].set(0, std::ldexp(1.0, k));
        }
        const auto report = check_against_ref(kernel, c.value());
        EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa)
                               << " special=" << special << " k=" << k << "\n"
                               << report.message;
      }
    }
  }
}

// Flash (a per-tensor scale, NHD; per-head ones, HND) and paged writes, e4m3 and e5m2, over
// every bf16 value (64 rows of 1024: keys i, values 2i mod 2^16); element i of the scale
// tensors 5 and 6 set to scale_of(i, tensor).
template <class ScaleOf>
void check_cache_writes_every_bf16(X86Isa isa, const std::string& label, ScaleOf scale_of) {
  for (KvCacheDtype kv : {KvCacheDtype::kFp8E4m3, KvCacheDtype::kFp8E5m2}) {
    const OpSpec specs[] = {flash_spec(DType::kBF16, kv, 8, 128, 16, ir::CacheLayout::kNhd, false),
                            flash_spec(DType::kBF16, kv, 8, 128, 16, ir::CacheLayout::kHnd, true),
                            paged_spec(DType::kBF16, kv, 8, 128, 16)};
    for (const OpSpec& spec : specs) {
      const Kernel kernel = compile_x86(spec, isa);
      auto c = test::make_case(spec, 64, InputKind::kNormal, 3);  // 64 x 1024 = 65536 values
      ASSERT_TRUE(c.is_ok());
      for (int operand = 0; operand < 2; ++operand) {
        test::HostTensor& t = c->tensors[size_t(operand)];
        for (int64_t i = 0; i < 65536; ++i) {
          const int64_t row = i / 1024, col = i % 1024;
          t.set(row * (t.numel() / t.sizes()[0]) + col,
                double(numeric::bf16_to_f32(uint16_t(i * (operand + 1)))));
        }
      }
      for (int tensor : {5, 6}) {
        test::HostTensor& s = c->tensors[size_t(tensor)];
        for (int64_t i = 0; i < s.numel(); ++i) s.set(i, scale_of(i, tensor));
      }
      const auto report = check_against_ref(kernel, c.value());
      EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa) << " " << label
                             << "\n"
                             << report.message;
    }
  }
}

// The cache writers with power-of-two scales (e4m3 and e5m2 both take the 16-bit lanes on
// AVX512-FP16): scales 2^(base + j), j in {0, 1, -2, 3, -4, 5, -6} by head, with bases at the
// ends of the path's range [-100, 100] and past them.
TEST_P(X86CacheIsaTest, CacheWritesPowerOfTwoScalesAreBitExactForEveryBf16) {
  for (int base : {0, 20, -20, 94, -94, 100, -100, 101, -101}) {
    check_cache_writes_every_bf16(GetParam(), "base=" + std::to_string(base), [&](int64_t i, int) {
      return std::ldexp(1.0, base + int(i % 7) * (i % 2 ? 1 : -1));
    });
  }
}

// The reciprocal argument inside the cache writers: scales whose reciprocals are inexact.
TEST_P(X86CacheIsaTest, CacheWritesReciprocalIsBitExactForEveryBf16) {
  check_cache_writes_every_bf16(GetParam(), "scales 0.1·(i + 5|6)",
                                [](int64_t i, int tensor) { return 0.1 * double(i + tensor); });
}

// Scales that are not powers of two take the mantissa table for bf16 from the avx512_vbmi level
// (CacheGenerator::build_quantise_table) when they lie in [2^-60, 2^60]: every bf16 value at
// calibrated-like scales, at both ends of the range and where a table would be wrong, at a negative
// scale (no table), through convert_fp8 and through the flash, paged and rope-free cache
// writers (K and V scales from the list in pairs, e4m3 and e5m2). The table's lookup is in the
// code exactly from the avx512_vbmi level on.
TEST_P(X86CacheIsaTest, MantissaTableScalesAreBitExactForEveryBf16) {
  const X86Isa isa = GetParam();
  // 0x1.8p-120: a denormal x over it is no longer code 0; 0x1.8p126: x_m / s is no longer
  // a normal fp32. Both are outside the table's range and must not take it.
  const double scales[] = {3.1 / 448,  0.0213,    1.7,  0x1.8p-60,    0x1.8p60,
                           0x1.8p-120, 0x1.8p126, -0.3, 0x1.fffffep-1};
  const Kernel kernel =
      check_convert_every_16bit_input(isa, DType::kBF16,
                                      {scales[0], scales[1], scales[2], scales[3], scales[4],
                                       scales[5], scales[6], scales[7], scales[8]},
                                      45);
  auto text = kernel.disassembly();
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  EXPECT_EQ(text.value().find("vpermt2b") != std::string::npos, isa >= X86Isa::kAvx512Vbmi)
      << "isa=" << x86_isa_name(isa);
  for (size_t k = 0; k < std::size(scales); ++k) {
    const double k_scale = scales[k], v_scale = scales[(k + 4) % std::size(scales)];
    check_cache_writes_every_bf16(
        isa, "k_scale=" + std::to_string(k_scale) + " v_scale=" + std::to_string(v_scale),
        [&](int64_t i, int tensor) {
          const double s = tensor == 5 ? k_scale : v_scale;
          return i == 0 ? s : s * (1.0 + 0.01 * double(i));  // per-head scales vary
        });
  }
}

// reshape_and_cache's whole-block path (BS rows with the consecutive slots of one block write
// the block's lines; the value rows through gathers, or on AVX2, at the avx512_vbmi level and
// for fp8 without VBMI through in-register transposes): prefill slot
// mappings with full and partial blocks, blocks with a padding slot, a swapped pair or a shifted
// start inside (those take the per-token path), for 2- and 4-byte types and several head sizes,
// block sizes 16 to 128, single- and multi-threaded; and the same slot mappings into fp8 caches
// (e4m3, e5m2), normal and adversarial values.
TEST_P(X86CacheIsaTest, PagedWholeBlocksMatchRef) {
  const X86Isa isa = GetParam();
  const Config parallel = Config().set("threads", 2).set("min_parallel_kib", 0);
  for (int64_t bs : {16, 32, 64, 128}) {
    for (KvCacheDtype kv : kKvModes) {
      for (DType dtype : kDtypes) {
        for (int64_t d : {8, 24, 64, 80, 128}) {                   // multiples of x (16 bytes)
          if (kv != KvCacheDtype::kAuto && d % 16 != 0) continue;  // fp8: x = 16 elements
          if (bs == 64 && d != 80) continue;   // bs 64: one head size (the stage holds 3 heads)
          if (bs == 128 && d != 64) continue;  // bs 128: one head size (a stage of one head)
          const OpSpec spec = paged_spec(dtype, kv, 3, d, bs);
          for (const Config& config : {Config(), parallel}) {
            const Kernel kernel = compile_x86(spec, isa, config);
            auto text = kernel.disassembly();
            ASSERT_TRUE(text.is_ok()) << text.status().to_string();
            const bool fp8 = kv != KvCacheDtype::kAuto;
            const bool lanes = isa < X86Isa::kAvx512 || isa == X86Isa::kAvx512Vbmi ||
                               (fp8 && isa < X86Isa::kAvx512Vbmi);
            EXPECT_EQ(text.value().find("vpunpckhdq") != std::string::npos, lanes)
                << to_string(spec) << " isa=" << x86_isa_name(isa)
                << ": the value rows' transposes (vpunpckhdq) on AVX2, at the avx512_vbmi level "
                   "and for fp8 without VBMI";
            const int64_t tokens = bs * 6 + 5;
            for (InputKind kind : {InputKind::kNormal, InputKind::kAdversarial}) {
              auto c = test::make_case(spec, tokens, kind, uint64_t(d) * 7 + 1);
              ASSERT_TRUE(c.is_ok());
              const int64_t blocks = c->tensors[2].sizes()[0];
              ASSERT_GE(blocks, 8) << "the case's cache is too small for this test";
              // block of token group g (distinct, in reverse order)
              auto block_of = [&](int64_t g) { return blocks - 1 - g; };
              for (int64_t t = 0; t < tokens; ++t) {
                c->tensors[4].set(t, double(block_of(t / bs) * bs + t % bs));
              }
              c->tensors[4].set(bs + 7, -1.0);  // group 1: a padding row inside
              const double a = c->tensors[4].get(2 * bs + 3), b = c->tensors[4].get(2 * bs + 4);
              c->tensors[4].set(2 * bs + 3, b);  // group 2: two rows swapped
              c->tensors[4].set(2 * bs + 4, a);
              for (int64_t i = 0; i < bs; ++i) {  // group 3: the halves of two blocks
                const int64_t slot = block_of(3) * bs + bs / 2 + i;
                c->tensors[4].set(3 * bs + i,
                                  double(i < bs / 2 ? slot : block_of(7) * bs + i - bs / 2));
              }
              const auto report = check_against_ref(kernel, c.value());
              EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa)
                                     << (config.get("threads", 0) == 2 ? " 2 threads" : "")
                                     << " inputs=" << test::input_kind_name(kind) << "\n"
                                     << report.message;
            }
          }
        }
      }
    }
  }
}

// The fast fp8 quantiser (avx512_vbmi and up) over fp32 bit patterns of the critical ranges, for
// both formats, through reshape_and_cache_flash with f32 input: every sign, every exponent,
// every combination of the kept mantissa bits and the rounding bit, with the bits below it 0
// (exact ties), 1, 2, 3, all ones, all ones - 1 and two random patterns; and a dense sweep of
// the fp8 subnormal range and its boundary (the top 12 mantissa bits of every exponent from 12
// binades below the min normal up to it, four low patterns each). Scale 1 and 0.5 take the
// exact-reciprocal variant (exact ties, subnormals, zero), 3 the product path with its window
// and the division retry; NaN, inf, saturation and zero go to the generic path.
std::vector<double> fp8_critical_values(DType format) {
  const int m = format == DType::kFp8E5m2 ? 2 : 3;
  const int bias = format == DType::kFp8E5m2 ? 15 : 7;
  const int kept = m + 1;  // the kept mantissa bits and the rounding bit
  const int low_bits = 23 - kept;
  const uint32_t low_max = (1u << low_bits) - 1;
  std::mt19937 rng(11);
  std::vector<double> values;
  auto add = [&](uint32_t bits) { values.push_back(double(std::bit_cast<float>(bits))); };
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t e = 0; e < 256; ++e) {
      for (uint32_t top = 0; top < (1u << kept); ++top) {
        for (uint32_t low : {0u, 1u, 2u, 3u, low_max, low_max - 1, uint32_t(rng()) & low_max,
                             uint32_t(rng()) & low_max}) {
          add(sign << 31 | e << 23 | top << low_bits | low);
        }
      }
    }
    const uint32_t min_normal_e = uint32_t(127 - bias + 1);
    for (uint32_t e = min_normal_e - 12; e <= min_normal_e; ++e) {
      for (uint32_t top = 0; top < (1u << 12); ++top) {
        for (uint32_t low : {0u, 1u, 0x7FFu, uint32_t(rng()) & 0x7FFu}) {
          add(sign << 31 | e << 23 | top << 11 | low);
        }
      }
    }
  }
  return values;
}

TEST_P(X86CacheIsaTest, FastQuantiserIsBitExactOnCriticalFp32Patterns) {
  const X86Isa isa = GetParam();
  for (KvCacheDtype kv : {KvCacheDtype::kFp8E4m3, KvCacheDtype::kFp8E5m2}) {
    const DType format = kv == KvCacheDtype::kFp8E5m2 ? DType::kFp8E5m2 : DType::kFp8E4m3;
    const std::vector<double> values = fp8_critical_values(format);
    const OpSpec spec =
        flash_spec(DType::kF32, kv, 8, 128, 16, ir::CacheLayout::kNhd, /*per_head=*/false);
    const Kernel kernel = compile_x86(spec, isa);
    const int64_t row = 8 * 128;
    const int64_t tokens = (int64_t(values.size()) + row - 1) / row;
    auto c = test::make_case(spec, tokens, InputKind::kNormal, 21);
    ASSERT_TRUE(c.is_ok());
    for (int operand = 0; operand < 2; ++operand) {
      test::HostTensor& t = c->tensors[size_t(operand)];
      for (int64_t i = 0; i < tokens * row; ++i) {
        // value: the same values shifted by half a row, so each lands in another step
        const size_t j = (size_t(i) + size_t(operand) * size_t(row / 2)) % values.size();
        t.set(i, values[j]);
      }
    }
    for (double scale : {1.0, 0.5, 3.0}) {
      for (int operand : {5, 6}) c->tensors[size_t(operand)].set(0, scale);
      for (int64_t t = 0; t < tokens; ++t) c->tensors[4].set(t, double(t));  // every slot written
      const auto report = check_against_ref(kernel, c.value());
      EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa)
                             << " scale=" << scale << " values=" << values.size() << "\n"
                             << report.message;
    }
  }
}

// Calls that write >= 1 MiB take the streaming-store loop (CacheGenerator::with_streaming_stores),
// which streams only 64-byte aligned rows: flash NHD/HND, auto/e4m3/e5m2, bf16, 600 tokens
// (3.75 MiB of cache writes) into 64-byte aligned caches and into caches 16 bytes off, with
// padding slots and scale 1 / an inexact scale, against the ref on the same buffers.
TEST_P(X86CacheIsaTest, LargeCallsStreamingStoresMatchRef) {
  const X86Isa isa = GetParam();
  constexpr int64_t kH = 8, kD = 128, kBs = 16, kTokens = 600, kBlocks = 2 * kTokens / kBs + 2;
  std::mt19937_64 rng(5);
  std::vector<uint16_t> key(size_t(kTokens * kH * kD)), value(key.size());
  for (auto& x : key) x = numeric::f32_to_bf16(float(int(rng() % 4001) - 2000) / 997.0f);
  for (auto& x : value) x = numeric::f32_to_bf16(float(int(rng() % 4001) - 2000) / 13.0f);
  std::vector<int64_t> slots(size_t(kBlocks * kBs));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(size_t(kTokens));
  for (int64_t t = 0; t < kTokens; t += 37) slots[size_t(t)] = -1;
  CompileOptions ref_options;
  ref_options.backend = BackendKind::kRef;
  for (KvCacheDtype kv : {KvCacheDtype::kAuto, KvCacheDtype::kFp8E4m3, KvCacheDtype::kFp8E5m2}) {
    for (ir::CacheLayout layout : {ir::CacheLayout::kNhd, ir::CacheLayout::kHnd}) {
      const OpSpec spec = flash_spec(DType::kBF16, kv, kH, kD, kBs, layout, false);
      const Kernel kernel = compile_x86(spec, isa);
      auto ref = test::x86_test_runtime().compile(spec, ref_options);
      ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
      const bool fp8 = kv != KvCacheDtype::kAuto;
      const DType cdt = fp8 ? DType::kU8 : DType::kBF16;
      const size_t cache_bytes = size_t(kBlocks * kBs * kH * kD) * (fp8 ? 1 : 2);
      for (size_t misalign : {size_t(0), size_t(16)}) {
        for (float scale : {1.0f, 0.037f}) {
          // [x86 key, x86 value, ref key, ref value], each 64-byte aligned + misalign
          const test::OffsetBuffers buffers = test::offset_buffers(4, cache_bytes, misalign);
          const std::vector<uint8_t*>& caches = buffers.at;
          auto cache_tensor = [&](void* data) {
            return layout == ir::CacheLayout::kNhd ? Tensor(data, cdt, {kBlocks, kBs, kH, kD})
                                                   : Tensor(data, cdt, {kBlocks, kBs, kH, kD},
                                                            {kH * kBs * kD, kD, kBs * kD, 1});
          };
          float k_scale = scale, v_scale = scale * 3;
          auto args = [&](uint8_t* kc, uint8_t* vc) {
            return KernelArgs(
                {Tensor(key.data(), DType::kBF16, {kTokens, kH, kD}),
                 Tensor(value.data(), DType::kBF16, {kTokens, kH, kD}), cache_tensor(kc),
                 cache_tensor(vc), Tensor(slots.data(), DType::kI64, {kTokens}),
                 Tensor(&k_scale, DType::kF32, {1}), Tensor(&v_scale, DType::kF32, {1})},
                {});
          };
          ASSERT_TRUE(kernel.run(args(caches[0], caches[1])).is_ok());
          ASSERT_TRUE(ref.value().run(args(caches[2], caches[3])).is_ok());
          EXPECT_EQ(std::memcmp(caches[0], caches[2], cache_bytes), 0)
              << to_string(spec) << " isa=" << x86_isa_name(isa) << " misalign=" << misalign
              << " scale=" << scale << " (key cache)";
          EXPECT_EQ(std::memcmp(caches[1], caches[3], cache_bytes), 0)
              << to_string(spec) << " isa=" << x86_isa_name(isa) << " misalign=" << misalign
              << " scale=" << scale << " (value cache)";
        }
      }
    }
  }
}

// reshape_and_cache's whole blocks in a call that writes >= 1 MiB: lines of 64 bytes as
// streaming stores into 64-byte aligned caches, ordinary stores (the per-token path) into
// caches 16 bytes off. A prefill's slot mapping (consecutive slots of shuffled blocks) with a
// padding slot and a partial last block; heads × head sizes × block sizes 4 × 384 × 16 (fp8:
// two stages of two heads), 8 × 80 × 16 (a stage of 640 codes per row, not a multiple of 64)
// and 4 × 128 × 32 (two groups of 16 tokens per line column); auto, e4m3, e5m2;
// bf16 and f32 inputs (the 2-byte and 4-byte value lines); against the ref on the same buffers.
TEST_P(X86CacheIsaTest, PagedLargeCallsStreamWholeBlocksMatchRef) {
  const X86Isa isa = GetParam();
  std::mt19937_64 rng(7);
  CompileOptions ref_options;
  ref_options.backend = BackendKind::kRef;
  for (auto [heads, dim, tokens, kBs] :
       {std::tuple{int64_t(4), int64_t(384), int64_t(700), int64_t(16)},
        std::tuple{int64_t(8), int64_t(80), int64_t(1700), int64_t(16)},
        std::tuple{int64_t(4), int64_t(128), int64_t(1300), int64_t(32)}}) {
    const int64_t blocks = tokens / kBs + 3;
    std::vector<int64_t> order(static_cast<size_t>(blocks));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> slots(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) slots[size_t(t)] = order[size_t(t / kBs)] * kBs + t % kBs;
    slots[size_t(3 * kBs + 5)] = -1;  // a padding row: that block takes the per-token path
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      const size_t esize = dtype_size(dtype);
      std::vector<uint8_t> key = test::random_rows(dtype, size_t(tokens * heads * dim), rng);
      std::vector<uint8_t> value = test::random_rows(dtype, key.size() / esize, rng);
      for (KvCacheDtype kv :
           {KvCacheDtype::kAuto, KvCacheDtype::kFp8E4m3, KvCacheDtype::kFp8E5m2}) {
        const OpSpec spec = paged_spec(dtype, kv, heads, dim, kBs);
        const Kernel kernel = compile_x86(spec, isa, Config().set("threads", 1));
        auto ref = test::x86_test_runtime().compile(spec, ref_options);
        ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
        const bool fp8 = kv != KvCacheDtype::kAuto;
        const DType cdt = fp8 ? DType::kU8 : dtype;
        const int64_t x = ir::paged_key_x(dtype, kv);
        const size_t cache_bytes = size_t(blocks * heads * dim * kBs) * (fp8 ? 1 : esize);
        for (size_t misalign : {size_t(0), size_t(16)}) {
          // [x86 key, x86 value, ref key, ref value], each 64-byte aligned + misalign
          const test::OffsetBuffers buffers = test::offset_buffers(4, cache_bytes, misalign);
          const std::vector<uint8_t*>& caches = buffers.at;
          float k_scale = 0.037f, v_scale = 0.02f;
          auto args = [&](uint8_t* kc, uint8_t* vc) {
            return KernelArgs(
                {Tensor(key.data(), dtype, {tokens, heads, dim}),
                 Tensor(value.data(), dtype, {tokens, heads, dim}),
                 Tensor(kc, cdt, {blocks, heads, dim / x, kBs, x}),
                 Tensor(vc, cdt, {blocks, heads, dim, kBs}),
                 Tensor(slots.data(), DType::kI64, {tokens}), Tensor(&k_scale, DType::kF32, {1}),
                 Tensor(&v_scale, DType::kF32, {1})},
                {});
          };
          ASSERT_TRUE(kernel.run(args(caches[0], caches[1])).is_ok());
          ASSERT_TRUE(ref.value().run(args(caches[2], caches[3])).is_ok());
          EXPECT_EQ(std::memcmp(caches[0], caches[2], cache_bytes), 0)
              << to_string(spec) << " isa=" << x86_isa_name(isa) << " misalign=" << misalign
              << " (key cache)";
          EXPECT_EQ(std::memcmp(caches[1], caches[3], cache_bytes), 0)
              << to_string(spec) << " isa=" << x86_isa_name(isa) << " misalign=" << misalign
              << " (value cache)";
        }
      }
    }
  }
}

// convert_fp8's quantising direction streams its codes when a thread writes >= 1 MiB (rows of
// 4096 codes; only a 64-byte aligned row is streamed): 3 Mi + 1000 values (a partial last row)
// on 1 and 2 threads, into an aligned buffer and one 16 bytes off, scale 1 and an inexact
// scale, bf16 and f16, byte for byte against the ref on the same input.
TEST_P(X86CacheIsaTest, ConvertFp8LargeCallsStreamingStoresMatchRef) {
  const X86Isa isa = GetParam();
  constexpr int64_t kElements = (int64_t(3) << 20) + 1000;
  std::mt19937_64 rng(11);
  CompileOptions ref_options;
  ref_options.backend = BackendKind::kRef;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> src(static_cast<size_t>(kElements));
    for (auto& x : src) {
      const float v = float(int(rng() % 20001) - 10000) / 997.0f;  // within e4m3 at 0.037
      x = dtype == DType::kBF16 ? numeric::f32_to_bf16(v) : numeric::f32_to_f16(v);
    }
    const OpSpec spec =
        OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{DType::kFp8E4m3, dtype});
    auto ref = test::x86_test_runtime().compile(spec, ref_options);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    std::vector<uint8_t> storage(2 * size_t(kElements) + 256);
    const auto base = (reinterpret_cast<uintptr_t>(storage.data()) + 63) / 64 * 64;
    uint8_t* ref_dst = reinterpret_cast<uint8_t*>(base + size_t(kElements) + 64);
    for (int threads : {1, 2}) {
      const Kernel kernel = compile_x86(spec, isa, Config().set("threads", threads));
      for (size_t misalign : {size_t(0), size_t(16)}) {
        uint8_t* dst = reinterpret_cast<uint8_t*>(base + misalign);
        for (double scale : {1.0, 0.037}) {
          auto args = [&](uint8_t* out) {
            return KernelArgs(
                {Tensor(out, DType::kU8, {kElements}), Tensor(src.data(), dtype, {kElements})},
                {scale});
          };
          std::fill(storage.begin(), storage.end(), uint8_t(0xA5));
          ASSERT_TRUE(kernel.run(args(dst)).is_ok());
          ASSERT_TRUE(ref.value().run(args(ref_dst)).is_ok());
          EXPECT_EQ(std::memcmp(dst, ref_dst, size_t(kElements)), 0)
              << to_string(spec) << " isa=" << x86_isa_name(isa) << " threads=" << threads
              << " misalign=" << misalign << " scale=" << scale;
          if (misalign == 16) {
            EXPECT_EQ(storage[size_t(base - reinterpret_cast<uintptr_t>(storage.data())) + 15],
                      0xA5)
                << "a byte before the output was written";
          }
        }
      }
    }
  }
}

// The dequantising direction streams too (the table path, AVX-512 with 16-bit outputs): every
// code but the two NaNs (whose payload bits the contract leaves open, so a byte comparison
// would not hold), 3 Mi + 1000 of them, into bf16 and f16, aligned and 16 bytes off, 1 and 2
// threads. (Fp8DequantEveryCodeEveryScaleMatchesRef covers the NaN codes, as NaN.)
TEST_P(X86CacheIsaTest, ConvertFp8DequantLargeCallsStreamingStoresMatchRef) {
  const X86Isa isa = GetParam();
  constexpr int64_t kElements = (int64_t(3) << 20) + 1000;
  std::vector<uint8_t> src(static_cast<size_t>(kElements));
  for (size_t i = 0; i < src.size(); ++i) {
    const auto code = uint8_t((i * 7 + i / 4096) % 256);
    src[i] = (code & 0x7F) == 0x7F ? uint8_t(code ^ 1) : code;
  }
  CompileOptions ref_options;
  ref_options.backend = BackendKind::kRef;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const OpSpec spec =
        OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{dtype, DType::kFp8E4m3});
    auto ref = test::x86_test_runtime().compile(spec, ref_options);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    const size_t bytes = 2 * size_t(kElements);
    std::vector<uint8_t> storage(2 * bytes + 256);
    const auto base = (reinterpret_cast<uintptr_t>(storage.data()) + 63) / 64 * 64;
    uint8_t* ref_dst = reinterpret_cast<uint8_t*>(base + bytes + 64);
    for (int threads : {1, 2}) {
      const Kernel kernel = compile_x86(spec, isa, Config().set("threads", threads));
      for (size_t misalign : {size_t(0), size_t(16)}) {
        uint8_t* dst = reinterpret_cast<uint8_t*>(base + misalign);
        auto args = [&](uint8_t* out) {
          return KernelArgs(
              {Tensor(out, dtype, {kElements}), Tensor(src.data(), DType::kU8, {kElements})},
              {0.37});
        };
        std::fill(storage.begin(), storage.end(), uint8_t(0xA5));
        ASSERT_TRUE(kernel.run(args(dst)).is_ok());
        ASSERT_TRUE(ref.value().run(args(ref_dst)).is_ok());
        EXPECT_EQ(std::memcmp(dst, ref_dst, bytes), 0)
            << to_string(spec) << " isa=" << x86_isa_name(isa) << " threads=" << threads
            << " misalign=" << misalign;
      }
    }
  }
}

// ---- cp_gather_cache and gather_and_maybe_dequant_cache -------------------------------------

const int64_t kGatherWidths[] = {1, 7, 64, 576};
const int64_t kGatherBlockSizes[] = {1, 16, 64};

OpSpec cp_gather_spec(DType dtype, int64_t entry_size, int64_t block_size) {
  return OpSpec::make(OpKind::kCpGatherCache,
                      ir::CpGatherCacheParams{dtype, entry_size, block_size});
}

OpSpec gather_spec(DType dtype, KvCacheDtype kv, int64_t head_dim, int64_t block_size) {
  return OpSpec::make(OpKind::kGatherAndMaybeDequantCache,
                      ir::GatherCacheParams{dtype, kv, head_dim, block_size});
}

// The tensor index of seq_starts in the gathers' argument lists.
int seq_starts_index(OpKind op) {
  return op == OpKind::kCpGatherCache ? 4 : 6;
}

// check_spec for the gathers, with seq_starts passed or absent.
bool check_gather(const OpSpec& spec, X86Isa isa, int64_t rows, bool seq_starts, Config config = {},
                  bool few = false) {
  const Kernel kernel = compile_x86(spec, isa, config);
  for (InputKind kind : kinds_for(spec.op, few)) {
    auto c = test::make_case(spec, rows, kind, /*seed=*/uint64_t(rows) * 131 + 11);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    if (!c.is_ok()) return false;
    c->present[size_t(seq_starts_index(spec.op))] = seq_starts;
    const auto report = check_against_ref(kernel, c.value());
    EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa) << " rows=" << rows
                           << " seq_starts=" << seq_starts
                           << " inputs=" << test::input_kind_name(kind) << "\n"
                           << report.message;
    if (!report.ok) return false;
  }
  return true;
}

// Every element width (1, 2, 4 bytes) over entry sizes and block sizes.
TEST_P(X86CacheIsaTest, CpGatherMatchesRefOverTheGrid) {
  const X86Isa isa = GetParam();
  for (DType dtype : {DType::kU8, DType::kFp8E4m3, DType::kF16, DType::kBF16, DType::kF32}) {
    for (int64_t e : kGatherWidths) {
      for (int64_t bs : kGatherBlockSizes) {
        for (bool seq_starts : {true, false}) {
          if (!check_gather(cp_gather_spec(dtype, e, bs), isa, 37, seq_starts, {},
                            /*few=*/e > 64)) {
            return;
          }
        }
      }
    }
  }
}

// auto (a bit copy of f32/f16/bf16) and fp8 e4m3/e5m2 dequantised into each float type.
TEST_P(X86CacheIsaTest, GatherAndMaybeDequantMatchesRefOverTheGrid) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      for (int64_t d :
           {int64_t(1), int64_t(7), int64_t(17), int64_t(64), int64_t(320), int64_t(576)}) {
        for (int64_t bs : kGatherBlockSizes) {
          for (bool seq_starts : {true, false}) {
            if (!check_gather(gather_spec(dtype, kv, d, bs), isa, 37, seq_starts, {},
                              /*few=*/d > 64)) {
              return;
            }
          }
        }
      }
    }
  }
}

// Gathers whose calls write >= 1 MiB per thread: the dequantising table steps take the
// streaming-store loop (GatherGenerator; the copies keep ordinary stores): bf16 rows of 576
// values (64-byte aligned rows, streamed), bf16 and f32 rows of 100 (rows at every 16-byte
// offset, streamed or not row by row), auto and e4m3, on 1 and 2 threads, against the ref.
TEST_P(X86CacheIsaTest, GathersLargeCallsStreamAndMatchRef) {
  const X86Isa isa = GetParam();
  constexpr int64_t kMinBytesPerThread = int64_t(5) << 19;  // 2.5 MiB: past 1 MiB on 2 threads
  for (auto [dtype, width] :
       {std::pair{DType::kBF16, int64_t(576)}, std::pair{DType::kBF16, int64_t(100)},
        std::pair{DType::kF32, int64_t(100)}}) {
    const int64_t rows = kMinBytesPerThread / (width * int64_t(dtype_size(dtype))) + 1;
    for (int threads : {1, 2}) {
      const Config config = Config().set("threads", threads);
      EXPECT_TRUE(check_gather(cp_gather_spec(dtype, width, 16), isa, rows, true, config,
                               /*few=*/true));
      for (KvCacheDtype kv : {KvCacheDtype::kAuto, KvCacheDtype::kFp8E4m3}) {
        EXPECT_TRUE(check_gather(gather_spec(dtype, kv, width, 16), isa, rows, true, config,
                                 /*few=*/true));
      }
    }
  }
}

// Every fp8 code at every position of a row against the ref, for scales that are positive,
// negative, tiny (denormal and zero products), huge (products that overflow), infinite and
// NaN (a payload whose low half is all ones, which a rounding on the bits would carry into
// the sign): the 16-bit outputs on AVX-512 come from a per-call table of the codes 0..127 with
// the sign bit applied afterwards (CacheGenerator::dequantise_span_table), on AVX2 (e4m3 to
// bf16) from two 8-word tables of the scale on 16-bit lanes (dequantise_word_steps, for
// |scale| in [2^-100, 2^101): -2^-100 and 0x1.fffffep100 are its ends, 0x1.fffffep-101 and
// 2^101 just outside it (the per-vector path's, as every zero, denormal, infinite, NaN or
// overflowing scale; the tables would still be exact there: 2^-118 and 2^120 are where they
// would not); 0x1.01p0 and -0x1.03p-3 put products on bf16 rounding ties, which the tables
// must round to even); this pins both down code by code, NaN, inf and -0 included.
TEST_P(X86CacheIsaTest, Fp8DequantEveryCodeEveryScaleMatchesRef) {
  const X86Isa isa = GetParam();
  const uint32_t nan_scale = 0x7FFFFFFFu;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (KvCacheDtype kv : {KvCacheDtype::kFp8E4m3, KvCacheDtype::kFp8E5m2}) {
      const OpSpec spec = gather_spec(dtype, kv, 256 + 19, 16);
      const Kernel kernel = compile_x86(spec, isa);
      if (isa == X86Isa::kAvx2) {  // the tables' byte indices (vpmullw by 0x0202): e4m3 -> bf16
        auto text = kernel.disassembly();
        ASSERT_TRUE(text.is_ok()) << text.status().to_string();
        EXPECT_EQ(text.value().find("vpmullw") != std::string::npos,
                  dtype == DType::kBF16 && kv == KvCacheDtype::kFp8E4m3)
            << dtype_name(dtype);
      }
      for (double scale :
           {0.1,      1.0,          -2.5,      1e-30,          0x1p-140, 3e38,
            HUGE_VAL, std::nan(""), 0.5,       0x1p-117,       0x1p-118, 0x1p119,
            0x1p120,  -1.0,         -0x1p-100, 0x1.fffffep100, 0x1p101,  0x1.fffffep-101,
            0x1.01p0, -0x1.03p-3}) {
        auto c = test::make_case(spec, 21, InputKind::kNormal, 5);
        ASSERT_TRUE(c.is_ok()) << c.status().to_string();
        test::HostTensor& src = c->tensors[0];
        for (int64_t i = 0; i < src.numel(); ++i)
          src.set_bits(i, uint64_t((i * 7 + i / 275) % 256));
        if (std::isnan(scale)) {
          c->tensors[5].set_bits(0, nan_scale);
        } else {
          c->tensors[5].set(0, scale);
        }
        const auto report = check_against_ref(kernel, c.value());
        EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa)
                               << " scale=" << scale << "\n"
                               << report.message;
      }
    }
    // convert_fp8's dequantising direction takes the same table for its full rows.
    const OpSpec spec =
        OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{dtype, DType::kFp8E4m3});
    const Kernel kernel = compile_x86(spec, isa);
    for (double scale : {0.1, 1.0, -2.5, 1e-30, 0x1p-140, 3e38, 0x1p-117, 0x1p119}) {
      auto c = test::make_case(spec, 2 * 4096 + 77, InputKind::kNormal, 5);
      ASSERT_TRUE(c.is_ok()) << c.status().to_string();
      test::HostTensor& src = c->tensors[1];
      for (int64_t i = 0; i < src.numel(); ++i) src.set_bits(i, uint64_t((i * 7 + i / 4096) % 256));
      c->scalars[0] = scale;
      const auto report = check_against_ref(kernel, c.value());
      EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa)
                             << " scale=" << scale << "\n"
                             << report.message;
    }
  }
}

TEST_P(X86CacheIsaTest, MultiThreadedRowsMatchRef) {
  const X86Isa isa = GetParam();
  // min_parallel_kib=0 forces the parallel region even for these small calls.
  const Config parallel = Config().set("threads", 2).set("min_parallel_kib", 0);
  for (KvCacheDtype kv : kKvModes) {
    for (ir::CacheLayout layout : {ir::CacheLayout::kNhd, ir::CacheLayout::kHnd}) {
      EXPECT_TRUE(
          check_spec(flash_spec(DType::kBF16, kv, 8, 128, 16, layout, false), isa, 67, parallel));
    }
    EXPECT_TRUE(check_spec(paged_spec(DType::kBF16, kv, 8, 128, 16), isa, 67, parallel));
    EXPECT_TRUE(check_spec(mla_spec(DType::kBF16, kv, 512, 64, 16), isa, 67, parallel));
  }
  EXPECT_TRUE(
      check_spec(OpSpec::make(OpKind::kSwapBlocks, ir::SwapBlocksParams{4096}), isa, 40, parallel));
  EXPECT_TRUE(check_spec(
      OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{DType::kFp8E4m3, DType::kBF16}), isa,
      40000, parallel));
  for (bool seq_starts : {true, false}) {
    EXPECT_TRUE(check_gather(cp_gather_spec(DType::kBF16, 576, 16), isa, 67, seq_starts, parallel));
    for (KvCacheDtype kv : kKvModes) {
      EXPECT_TRUE(
          check_gather(gather_spec(DType::kBF16, kv, 576, 16), isa, 67, seq_starts, parallel));
    }
  }
}

std::string isa_name(const ::testing::TestParamInfo<X86Isa>& info) {
  return std::string(x86_isa_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllIsas, X86CacheIsaTest, ::testing::ValuesIn(isa_paths()), isa_name);

// ---- order and checked mode ---------------------------------------------------------------

// Repeated destinations and a chain (a block copied, then overwritten) must follow mapping
// order, as vLLM's stream-ordered copies do; the runner then stays on one thread.
TEST(X86SwapBlocks, RepeatedDestinationsFollowMappingOrder) {
  const OpSpec spec = OpSpec::make(OpKind::kSwapBlocks, ir::SwapBlocksParams{96});
  const Config parallel = Config().set("threads", 2).set("min_parallel_kib", 0);
  for (X86Isa isa : isa_paths()) {
    const Kernel kernel = compile_x86(spec, isa, parallel);
    auto c = test::make_case(spec, 6, InputKind::kNormal, 3);
    ASSERT_TRUE(c.is_ok());
    for (int64_t i = 0; i < 6; ++i) c->tensors[2].set(2 * i + 1, double(i % 2));
    const auto report = check_against_ref(kernel, c.value());
    EXPECT_TRUE(report.ok) << x86_isa_name(isa) << "\n" << report.message;
  }
}

// swap_blocks copies a block forward or, when dst - src mod 4096 is in (0, 2048), from its end
// down (4K aliasing, SwapBlocksGenerator::copy_block): every offset class either side of the
// split, with block sizes that give the loop, the vectors above it and a masked / scalar tail,
// against memcpy, bytes around every destination block untouched. Both directions give the
// same bytes there, so a block copied onto itself shifted by 64 bytes probes which one ran:
// dst = src + 64 (backward) and dst = src - 64 (d = 4032: forward) both move like memmove, and
// either copy in the other direction would smear the block.
TEST(X86SwapBlocks, BothCopyDirectionsMatchMemcpy) {
  for (X86Isa isa : isa_paths()) {
    for (int64_t bytes : {200, 1000, 4096 + 80, 65536}) {
      const OpSpec spec = OpSpec::make(OpKind::kSwapBlocks, ir::SwapBlocksParams{bytes});
      const Kernel kernel = compile_x86(spec, isa, Config());
      for (int64_t delta : {0, 1, 64, 2047, 2048, 3000, 4095}) {
        constexpr int64_t kBlocks = 3;
        const int64_t span = kBlocks * bytes;
        // src at a page boundary, dst `delta` bytes past a page boundary a page clear of src's
        // blocks (so dst - src = delta mod 4096 for every block when the block size is a
        // multiple of 4096, and varying with the block index otherwise); 64 guard bytes of
        // 0xEE either side of dst's blocks.
        const int64_t dst_at = (span + 4095) / 4096 * 4096 + 4096 + delta;
        std::vector<uint8_t> memory(size_t(dst_at + span + 3 * 4096), 0xEE);
        const auto base = reinterpret_cast<uintptr_t>(memory.data());
        uint8_t* src = memory.data() + (4096 - base % 4096);
        uint8_t* dst = src + dst_at;
        for (int64_t i = 0; i < span; ++i) src[i] = uint8_t(i * 7 + 3);
        std::vector<int64_t> mapping = {0, 2, 2, 0, 1, 1};
        std::vector<uint8_t> expected(dst - 64, dst + span + 64);
        for (size_t p = 0; p < 3; ++p) {
          std::memcpy(expected.data() + 64 + mapping[2 * p + 1] * bytes,
                      src + mapping[2 * p] * bytes, size_t(bytes));
        }
        const KernelArgs args(
            {Tensor(src, DType::kU8, {kBlocks, bytes}), Tensor(dst, DType::kU8, {kBlocks, bytes}),
             Tensor(mapping.data(), DType::kI64, {3, 2})},
            {});
        ASSERT_TRUE(kernel.run(args).is_ok());
        EXPECT_TRUE(std::equal(expected.begin(), expected.end(), dst - 64))
            << x86_isa_name(isa) << " bytes=" << bytes << " delta=" << delta;
      }
      for (int64_t shift : {64, -64}) {
        std::vector<uint8_t> memory(size_t(bytes + 3 * 4096));
        const auto base = reinterpret_cast<uintptr_t>(memory.data());
        uint8_t* page = memory.data() + (4096 - base % 4096) + 64;
        for (size_t i = 0; i < memory.size(); ++i) memory[i] = uint8_t(i * 5 + 1);
        uint8_t* src = shift > 0 ? page : page + 64;
        uint8_t* dst = src + shift;
        std::vector<uint8_t> expected = memory;
        std::memmove(expected.data() + (dst - memory.data()),
                     expected.data() + (src - memory.data()), size_t(bytes));
        std::vector<int64_t> mapping = {0, 0};
        const KernelArgs args(
            {Tensor(src, DType::kU8, {1, bytes}), Tensor(dst, DType::kU8, {1, bytes}),
             Tensor(mapping.data(), DType::kI64, {1, 2})},
            {});
        ASSERT_TRUE(kernel.run(args).is_ok());
        EXPECT_EQ(memory, expected) << x86_isa_name(isa) << " bytes=" << bytes
                                    << ": a block moved by " << shift << " bytes onto itself";
      }
    }
  }
}

// A swap_blocks call of at least 8 MiB per thread takes streaming stores for its 64-byte
// aligned destination blocks and ordinary ones for the rest (and for the tails): aligned and
// misaligned destinations, a block size that aligns every 4th block (65552 = 16 mod 64), one
// thread. (A streaming store to a misaligned block would fault.)
TEST(X86SwapBlocks, LargeCallsStreamAndMatchMemcpy) {
  constexpr int64_t kPairs = 130;  // 130 x 64 KiB > 8 MiB
  for (X86Isa isa : isa_paths()) {
    for (int64_t bytes : {65536, 65536 + 16}) {
      const OpSpec spec = OpSpec::make(OpKind::kSwapBlocks, ir::SwapBlocksParams{bytes});
      const Kernel kernel = compile_x86(spec, isa, Config().set("threads", 1));
      auto text = kernel.disassembly();
      ASSERT_TRUE(text.is_ok()) << text.status().to_string();
      EXPECT_NE(text.value().find("vmovntps"), std::string::npos) << x86_isa_name(isa);
      for (int64_t misalign : {0, 16}) {
        const int64_t span = kPairs * bytes;
        std::vector<uint8_t> memory(size_t(2 * span + 3 * 4096), 0xEE);
        const auto base = reinterpret_cast<uintptr_t>(memory.data());
        uint8_t* src = memory.data() + (4096 - base % 4096);
        uint8_t* dst = src + (span + 4095) / 4096 * 4096 + misalign;
        for (int64_t i = 0; i < span; ++i) src[i] = uint8_t(i * 13 + i / 4096);
        std::vector<int64_t> mapping(size_t(2 * kPairs));
        for (int64_t p = 0; p < kPairs; ++p) {
          mapping[size_t(2 * p)] = p;
          mapping[size_t(2 * p + 1)] = kPairs - 1 - p;
        }
        std::vector<uint8_t> expected(dst, dst + span + 64);
        for (int64_t p = 0; p < kPairs; ++p) {
          std::memcpy(expected.data() + (kPairs - 1 - p) * bytes, src + p * bytes, size_t(bytes));
        }
        const KernelArgs args(
            {Tensor(src, DType::kU8, {kPairs, bytes}), Tensor(dst, DType::kU8, {kPairs, bytes}),
             Tensor(mapping.data(), DType::kI64, {kPairs, 2})},
            {});
        ASSERT_TRUE(kernel.run(args).is_ok());
        EXPECT_TRUE(std::equal(expected.begin(), expected.end(), dst))
            << x86_isa_name(isa) << " bytes=" << bytes << " misalign=" << misalign;
      }
    }
  }
}

// rep_movsb=1 (the default on Zen 5, host_core_traits().prefers_rep_movsb) copies each block with
// `rep movsb`: blocks of 1 byte to 64 KiB + 16, repeated destinations in mapping order, one and two
// threads, small calls and one past the vector loops' streaming size, against memcpy with the
// bytes around the destination untouched; the code holds the string copy and no vector loop.
TEST(X86SwapBlocks, RepMovsbMatchesMemcpy) {
  for (X86Isa isa : isa_paths()) {
    for (int64_t bytes : {1, 200, 4096 + 80, 65536 + 16}) {
      const OpSpec spec = OpSpec::make(OpKind::kSwapBlocks, ir::SwapBlocksParams{bytes});
      for (int64_t threads : {1, 2}) {
        const Kernel kernel = compile_x86(
            spec, isa,
            Config().set("threads", threads).set("min_parallel_kib", 0).set("rep_movsb", 1));
        auto text = kernel.disassembly();
        ASSERT_TRUE(text.is_ok()) << text.status().to_string();
        EXPECT_NE(text.value().find("rep movsb"), std::string::npos) << x86_isa_name(isa);
        EXPECT_EQ(text.value().find("vmovups"), std::string::npos) << x86_isa_name(isa);
        EXPECT_EQ(text.value().find("vmovntps"), std::string::npos) << x86_isa_name(isa);
        // 130 pairs of 64 KiB: past the 8 MiB at which the vector loops stream.
        const int64_t pairs = bytes > 65536 ? 130 : 7;
        const int64_t blocks = pairs + 1;
        std::vector<uint8_t> src(size_t(blocks * bytes));
        for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 13 + i / 4096);
        std::vector<uint8_t> dst(size_t(blocks * bytes + 128), 0xEE);
        std::vector<int64_t> mapping(size_t(2 * pairs));
        for (int64_t p = 0; p < pairs; ++p) {
          mapping[size_t(2 * p)] = (p * 5 + 1) % blocks;
          // block 0 is written twice (pairs 0 and 1): the later pair's bytes stay
          mapping[size_t(2 * p + 1)] = p < 2 ? 0 : blocks - p;
        }
        std::vector<uint8_t> expected = dst;
        for (int64_t p = 0; p < pairs; ++p) {
          std::memcpy(expected.data() + 64 + mapping[size_t(2 * p + 1)] * bytes,
                      src.data() + mapping[size_t(2 * p)] * bytes, size_t(bytes));
        }
        const KernelArgs args({Tensor(src.data(), DType::kU8, {blocks, bytes}),
                               Tensor(dst.data() + 64, DType::kU8, {blocks, bytes}),
                               Tensor(mapping.data(), DType::kI64, {pairs, 2})},
                              {});
        ASSERT_TRUE(kernel.run(args).is_ok());
        EXPECT_TRUE(dst == expected)
            << x86_isa_name(isa) << " bytes=" << bytes << " threads=" << threads;
      }
    }
  }
}

// The rep_movsb knob: 0 / 1 only, swap_blocks only (other ops refuse it, naming their knobs);
// every point of swap_blocks' tuning space says which copy it takes, and the default (the
// space's first point) is the host's (host_core_traits().prefers_rep_movsb); the knob changes the
// code.
TEST(X86SwapBlocks, RepMovsbKnob) {
  const OpSpec swap = OpSpec::make(OpKind::kSwapBlocks, ir::SwapBlocksParams{4096});
  CompileOptions options;
  options.backend = BackendKind::kX86;
  options.use_disk_cache = false;
  options.config = Config().set("rep_movsb", 2);
  auto refused = compile(swap, options);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("rep_movsb=2 is not allowed; allowed: 1"),
            std::string::npos)
      << refused.status().message();
  options.config = Config().set("rep_movsb", 1);
  const OpSpec norm = parse_spec("rms_norm(dtype=bf16,hidden=64,weight=true)").value();
  auto other = compile(norm, options);
  ASSERT_FALSE(other.is_ok());
  EXPECT_NE(other.status().message().find("rep_movsb"), std::string::npos)
      << other.status().message();
  EXPECT_NE(other.status().message().find("min_parallel_kib"), std::string::npos)
      << other.status().message();

  auto backend = codegen::x86::make_backend();
  const auto space = backend->configs(swap, host_target());
  ASSERT_GT(space.size(), 2u);
  EXPECT_EQ(space.front().get("rep_movsb", 0), host_core_traits().prefers_rep_movsb ? 1 : 0);
  for (size_t i = 1; i < space.size(); ++i) {
    EXPECT_NE(space[i].get("rep_movsb", -1), -1) << space[i].to_string();
  }
  const auto norm_space = backend->configs(norm, host_target());
  for (const Config& c : norm_space) EXPECT_EQ(c.get("rep_movsb", -1), -1) << c.to_string();

  Target target;
  target.backend = BackendKind::kX86;
  target.isa = X86Isa::kAvx2;
  auto loops = backend->lower(swap, Config().set("rep_movsb", 0), target);
  auto string_copy = backend->lower(swap, Config().set("rep_movsb", 1), target);
  auto by_default = backend->lower(swap, Config(), target);
  ASSERT_TRUE(loops.is_ok() && string_copy.is_ok() && by_default.is_ok());
  EXPECT_NE(loops->code, string_copy->code);
  EXPECT_EQ(loops->code, by_default->code) << "an empty config is the vector loops";
}

// A slot >= num_blocks * block_size: kInvalidArgument naming slot_mapping and the index, and
// both caches untouched (the scan runs before the launch, whatever the thread count).
TEST(X86CacheChecked, SlotOutsideTheCacheIsAnErrorAndWritesNothing) {
  const Config parallel = Config().set("threads", 2).set("min_parallel_kib", 0);
  const OpSpec specs[] = {
      flash_spec(DType::kBF16, KvCacheDtype::kAuto, 2, 64, 16, ir::CacheLayout::kNhd, false),
      flash_spec(DType::kF16, KvCacheDtype::kFp8E4m3, 2, 64, 16, ir::CacheLayout::kHnd, true),
      paged_spec(DType::kF32, KvCacheDtype::kFp8E5m2, 2, 64, 16),
      paged_spec(DType::kBF16, KvCacheDtype::kAuto, 2, 64, 16)};
  for (const OpSpec& spec : specs) {
    for (X86Isa isa : isa_paths()) {
      const Kernel kernel = compile_x86(spec, isa, parallel);
      auto c = test::make_case(spec, 9, InputKind::kNormal, 5);
      ASSERT_TRUE(c.is_ok());
      const int64_t capacity = c->tensors[2].sizes()[0] * 16;
      c->tensors[4].set(6, double(capacity));  // one past the last slot
      const auto key_before = c->tensors[2].storage();
      const auto value_before = c->tensors[3].storage();
      for (bool unchecked : {false, true}) {
        const Status status = unchecked ? kernel.run_unchecked(c->args()) : kernel.run(c->args());
        EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << to_string(spec);
        EXPECT_NE(status.message().find("slot_mapping[6]"), std::string::npos) << status.message();
        EXPECT_EQ(c->tensors[2].storage(), key_before) << to_string(spec);
        EXPECT_EQ(c->tensors[3].storage(), value_before) << to_string(spec);
      }
    }
  }
}

// concat_and_cache_mla: a slot >= num_blocks * block_size is kInvalidArgument with the ref's
// message, and the cache is untouched.
TEST(X86CacheChecked, MlaSlotOutsideTheCacheIsAnErrorAndWritesNothing) {
  const Config parallel = Config().set("threads", 2).set("min_parallel_kib", 0);
  const OpSpec specs[] = {mla_spec(DType::kBF16, KvCacheDtype::kAuto, 512, 64, 16),
                          mla_spec(DType::kF32, KvCacheDtype::kFp8E4m3, 16, 8, 16),
                          mla_spec(DType::kF16, KvCacheDtype::kFp8E5m2, 16, 64, 1)};
  for (const OpSpec& spec : specs) {
    const int64_t block_size = spec.get<ir::MlaCacheWriteParams>().block_size;
    for (X86Isa isa : isa_paths()) {
      const Kernel kernel = compile_x86(spec, isa, parallel);
      auto c = test::make_case(spec, 9, InputKind::kNormal, 5);
      ASSERT_TRUE(c.is_ok());
      const int64_t capacity = c->tensors[2].sizes()[0] * block_size;
      c->tensors[3].set(6, double(capacity));  // one past the last slot
      test::OpCase expected = c.value();
      const Status ref = codegen::ref::run(spec, expected.args());
      ASSERT_EQ(ref.code(), StatusCode::kInvalidArgument) << ref.to_string();
      const auto before = c->tensors[2].storage();
      for (bool unchecked : {false, true}) {
        const Status status = unchecked ? kernel.run_unchecked(c->args()) : kernel.run(c->args());
        EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << to_string(spec);
        EXPECT_EQ(status.message(), ref.message()) << to_string(spec);
        EXPECT_NE(status.message().find("slot_mapping[6]"), std::string::npos) << status.message();
        EXPECT_EQ(c->tensors[2].storage(), before) << to_string(spec);
      }
    }
  }
}

TEST(X86CacheChecked, BlockIdOutsideSwapBuffersIsAnErrorAndWritesNothing) {
  const OpSpec spec = OpSpec::make(OpKind::kSwapBlocks, ir::SwapBlocksParams{64});
  for (X86Isa isa : isa_paths()) {
    const Kernel kernel = compile_x86(spec, isa);
    for (int64_t column : {0, 1}) {
      auto c = test::make_case(spec, 4, InputKind::kNormal, 9);
      ASSERT_TRUE(c.is_ok());
      c->tensors[2].set(2 * 3 + column, double(c->tensors[column].sizes()[0]));
      const auto before = c->tensors[1].storage();
      const Status status = kernel.run_unchecked(c->args());
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(status.message().find("block_mapping[3, " + std::to_string(column) + "]"),
                std::string::npos)
          << status.message();
      EXPECT_EQ(c->tensors[1].storage(), before);
    }
  }
}

// A block-table entry outside the cache, a block-table column past its end and a negative
// seq_starts: kInvalidArgument with the ref's message, and dst untouched (the scan runs before
// the launch, whatever the thread count).
TEST(X86CacheChecked, GatherIndicesOutsideTheirRangesAreErrorsAndWriteNothing) {
  const Config parallel = Config().set("threads", 2).set("min_parallel_kib", 0);
  const OpSpec specs[] = {cp_gather_spec(DType::kBF16, 64, 16), cp_gather_spec(DType::kU8, 7, 1),
                          gather_spec(DType::kF32, KvCacheDtype::kFp8E4m3, 64, 16),
                          gather_spec(DType::kBF16, KvCacheDtype::kAuto, 576, 16)};
  enum class Bad { kBlockId, kColumn, kSeqStart };
  for (const OpSpec& spec : specs) {
    for (X86Isa isa : isa_paths()) {
      const Kernel kernel = compile_x86(spec, isa, parallel);
      for (Bad bad : {Bad::kBlockId, Bad::kColumn, Bad::kSeqStart}) {
        auto c = test::make_case(spec, 40, InputKind::kNormal, 5);
        ASSERT_TRUE(c.is_ok());
        test::HostTensor& table = c->tensors[2];
        const int64_t num_blocks = c->tensors[0].sizes()[0];
        const int64_t seq = seq_starts_index(spec.op);
        if (bad == Bad::kBlockId) {
          // Every entry, so that whichever the first row reads is out of range.
          for (int64_t i = 0; i < table.numel(); ++i) table.set(i, double(num_blocks));
        } else if (bad == Bad::kColumn) {
          c->tensors[size_t(seq)].set(1, double(table.sizes()[1] * 1000));
        } else {
          c->tensors[size_t(seq)].set(0, -1000.0);
        }
        test::OpCase expected = c.value();
        const Status ref = codegen::ref::run(spec, expected.args());
        ASSERT_EQ(ref.code(), StatusCode::kInvalidArgument) << ref.to_string();
        const auto before = c->tensors[1].storage();
        for (bool unchecked : {false, true}) {
          const Status status = unchecked ? kernel.run_unchecked(c->args()) : kernel.run(c->args());
          EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << to_string(spec);
          EXPECT_EQ(status.message(), ref.message()) << to_string(spec);
          EXPECT_EQ(c->tensors[1].storage(), before) << to_string(spec);
        }
      }
    }
  }
}

// The argument checks in front of the kernels: an int32 slot_mapping and a cache of the wrong
// dtype are rejected before anything runs.
TEST(X86CacheChecked, WrongDtypesAreRejected) {
  const OpSpec spec =
      flash_spec(DType::kBF16, KvCacheDtype::kFp8E4m3, 2, 64, 16, ir::CacheLayout::kNhd, false);
  const Kernel kernel = compile_x86(spec, isa_paths().back());
  auto c = test::make_case(spec, 4, InputKind::kNormal, 1);
  ASSERT_TRUE(c.is_ok());
  test::OpCase bad_slots = c.value();
  bad_slots.tensors[4] = test::HostTensor::zeros(DType::kI32, {4});
  Status status = kernel.run(bad_slots.args());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("slot_mapping"), std::string::npos) << status.message();
  test::OpCase bad_cache = c.value();
  bad_cache.tensors[2] = test::HostTensor::zeros(DType::kBF16, c->tensors[2].sizes());
  status = kernel.run(bad_cache.args());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("key_cache"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace jit
