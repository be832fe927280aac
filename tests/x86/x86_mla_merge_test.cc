// The x86 MLA, indexer, merge and fused rope+flash kernels against the ref backend:
// concat_and_cache_mla with kv=fp8_ds_mla, concat_and_cache_mla_rope_fused,
// cp_gather_and_upconvert_fp8_kv_cache, indexer_k_quant_and_cache,
// cp_gather_indexer_k_quant_cache, merge_attn_states and rotary_embedding_and_cache_flash, on every
// ISA path, over the grid of spec/testing.md (one token, tails around the vector length, odd
// widths, block sizes 1 .. 128), every input kind of the op, multi-threaded rows; and the
// checked mode (an index outside its range is the ref's error, nothing written) and bad
// arguments (wrong dtype or shape) rejected before anything runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "codegen/ref/ref.h"
#include "codegen/x86/x86_backend.h"
#include "ir/params_norm_act.h"
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
const Config kParallel = Config().set("threads", 2).set("min_parallel_kib", 0);

using test::compile_x86;

// Every input kind of the op (or only normal and adversarial values: `few`) over `size`;
// false at the first mismatch.
bool check_spec(const OpSpec& spec, X86Isa isa, int64_t size, Config config = {},
                bool few = false) {
  const Kernel kernel = compile_x86(spec, isa, config);
  std::vector<InputKind> kinds = test::input_kinds_for(spec.op);
  if (few) kinds = {InputKind::kNormal, InputKind::kAdversarial};
  for (InputKind kind : kinds) {
    for (uint64_t seed : {uint64_t(size) * 131 + 7, uint64_t(size) * 17 + 2}) {
      auto c = test::make_case(spec, size, kind, seed);
      EXPECT_TRUE(c.is_ok()) << c.status().to_string();
      if (!c.is_ok()) return false;
      const auto report = check_against_ref(kernel, c.value());
      EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa) << " size=" << size
                             << " inputs=" << test::input_kind_name(kind) << " seed=" << seed
                             << "\n"
                             << report.message;
      if (!report.ok) return false;
    }
  }
  return true;
}

OpSpec ds_mla_spec(DType dtype, int64_t block_size) {
  return OpSpec::make(OpKind::kConcatAndCacheMla,
                      ir::MlaCacheWriteParams{dtype, KvCacheDtype::kFp8DsMla, 512, 64, block_size});
}

OpSpec rope_fused_spec(DType dtype, KvCacheDtype kv, int64_t rank, int64_t rot, int64_t heads,
                       ir::RopeStyle style, int64_t block_size) {
  return OpSpec::make(OpKind::kConcatAndCacheMlaRopeFused,
                      ir::MlaRopeCacheWriteParams{dtype, kv, rank, rot, heads, style, block_size});
}

OpSpec upconvert_spec(int64_t block_size) {
  return OpSpec::make(OpKind::kCpGatherAndUpconvertFp8KvCache,
                      ir::UpconvertGatherParams{block_size});
}

OpSpec indexer_quant_spec(DType dtype, int64_t dim, int64_t qbs, int64_t block_size,
                          ir::ScaleFormat fmt) {
  return OpSpec::make(OpKind::kIndexerKQuantAndCache,
                      ir::IndexerQuantParams{dtype, dim, qbs, block_size, fmt});
}

OpSpec indexer_gather_spec(int64_t dim, int64_t qbs, int64_t block_size) {
  return OpSpec::make(OpKind::kCpGatherIndexerKQuantCache,
                      ir::IndexerGatherParams{dim, qbs, block_size});
}

OpSpec merge_spec(DType dtype, bool fp8_out, int64_t heads, int64_t head_size, bool lse) {
  return OpSpec::make(
      OpKind::kMergeAttnStates,
      ir::MergeAttnStatesParams{dtype, fp8_out ? DType::kFp8E4m3 : dtype, heads, head_size, lse});
}

OpSpec rope_flash_spec(DType dtype, KvCacheDtype kv, int64_t heads_q, int64_t heads_kv,
                       int64_t head_size, int64_t rot, ir::RopeStyle style, int64_t block_size,
                       ir::CacheLayout layout, bool per_head) {
  return OpSpec::make(OpKind::kRotaryEmbeddingAndCacheFlash,
                      ir::RopeFlashCacheWriteParams{dtype, kv, heads_q, heads_kv, head_size, rot,
                                                    style, block_size, layout, per_head});
}

class X86MlaMergeIsaTest : public ::testing::TestWithParam<X86Isa> {};

// ---- rotary_embedding_and_cache_flash ---------------------------------------------------------

// Every dtype, kv mode, layout and scale kind with both pairings, over head sizes (tails,
// partial rot_dim, odd head sizes) and GQA ratios. 256/256: the bf16 pairs path's constants
// would overlap the hoisted cos/sin (Generator::plan_rope), so the rotation takes the
// per-vector path there.
TEST_P(X86MlaMergeIsaTest, RopeFlashMatchesRefOverTheGrid) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      for (ir::CacheLayout layout : {ir::CacheLayout::kNhd, ir::CacheLayout::kHnd}) {
        for (bool per_head : {false, true}) {
          if (per_head && kv == KvCacheDtype::kAuto) continue;
          for (ir::RopeStyle style : {ir::RopeStyle::kNeox, ir::RopeStyle::kGptj}) {
            for (auto [d, rot] : {std::pair<int64_t, int64_t>{128, 128},
                                  {64, 32},
                                  {80, 80},
                                  {46, 18},
                                  {2, 2},
                                  {256, 64},
                                  {256, 256}}) {
              for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 1}, {3, 3}}) {
                const OpSpec spec =
                    rope_flash_spec(dtype, kv, hq, hkv, d, rot, style, 16, layout, per_head);
                if (!check_spec(spec, isa, 5, {}, /*few=*/d != 128)) return;
              }
            }
          }
        }
      }
    }
  }
}

// Calls large enough (>= 4096 values per scale) for the quantiser's mantissa table (bf16 at a
// scale that is not a power of two, avx512_vbmi and up): the fused writers, e4m3 and e5m2.
TEST_P(X86MlaMergeIsaTest, FusedWritersLargeCallsMatchRef) {
  const X86Isa isa = GetParam();
  for (KvCacheDtype kv : {KvCacheDtype::kFp8E4m3, KvCacheDtype::kFp8E5m2}) {
    EXPECT_TRUE(check_spec(rope_flash_spec(DType::kBF16, kv, 8, 2, 128, 128, ir::RopeStyle::kNeox,
                                           16, ir::CacheLayout::kNhd, false),
                           isa, 40));
    EXPECT_TRUE(check_spec(rope_fused_spec(DType::kBF16, kv, 512, 64, 16, ir::RopeStyle::kGptj, 16),
                           isa, 12));
  }
}

TEST_P(X86MlaMergeIsaTest, RopeFlashBlockSizesAndTokenCounts) {
  const X86Isa isa = GetParam();
  for (int64_t bs : {1, 8, 32, 64, 128}) {
    for (int64_t tokens : {1, 2, 16, 33}) {
      EXPECT_TRUE(
          check_spec(rope_flash_spec(DType::kBF16, KvCacheDtype::kFp8E4m3, 8, 2, 128, 128,
                                     ir::RopeStyle::kNeox, bs, ir::CacheLayout::kNhd, false),
                     isa, tokens, {}, /*few=*/true));
    }
  }
}

// ---- concat_and_cache_mla, fp8_ds_mla ---------------------------------------------------------

TEST_P(X86MlaMergeIsaTest, DsMlaMatchesRef) {
  const X86Isa isa = GetParam();
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (int64_t bs : {1, 8, 16, 64, 128}) {
      for (int64_t tokens : {1, 9, 33}) {
        if (!check_spec(ds_mla_spec(dtype, bs), isa, tokens, {}, /*few=*/bs > 16)) return;
      }
    }
  }
}

// ---- concat_and_cache_mla_rope_fused ----------------------------------------------------------

// Every dtype, kv mode and pairing over rot_dim x heads (tails around the vector length on the
// pairs: rot/2 = 1, 8, 9, 16, 17, 32, 64) with vLLM's shape (R 512, rot 64) and odd ranks.
TEST_P(X86MlaMergeIsaTest, RopeFusedMatchesRefOverTheGrid) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      for (ir::RopeStyle style : {ir::RopeStyle::kNeox, ir::RopeStyle::kGptj}) {
        for (int64_t rot : {2, 16, 18, 32, 34, 64, 128}) {
          for (auto [rank, heads] : {std::pair<int64_t, int64_t>{512, 3}, {7, 1}, {33, 16}}) {
            const OpSpec spec = rope_fused_spec(dtype, kv, rank, rot, heads, style, 16);
            if (!check_spec(spec, isa, 9, {}, /*few=*/rot != 64)) return;
          }
        }
      }
    }
  }
}

TEST_P(X86MlaMergeIsaTest, RopeFusedBlockSizesAndOneToken) {
  const X86Isa isa = GetParam();
  for (int64_t bs : {1, 8, 32, 64, 128}) {
    for (int64_t tokens : {1, 11}) {
      EXPECT_TRUE(check_spec(rope_fused_spec(DType::kBF16, KvCacheDtype::kFp8E4m3, 512, 64, 16,
                                             ir::RopeStyle::kGptj, bs),
                             isa, tokens, {}, /*few=*/true));
    }
  }
}

// ---- cp_gather_and_upconvert_fp8_kv_cache ----------------------------------------------------

TEST_P(X86MlaMergeIsaTest, UpconvertGatherMatchesRef) {
  const X86Isa isa = GetParam();
  for (int64_t bs : {1, 4, 16, 64, 128}) {
    for (int64_t rows : {1, 8, 37}) {
      if (!check_spec(upconvert_spec(bs), isa, rows)) return;
    }
  }
}

// A call that writes >= 1 MiB per thread streams its rows (1152 bytes each) and prefetches each
// row's entry four rows ahead (CacheGenerator::prefetch_gather_source): 2400 rows on 1 and 2
// threads, against the ref.
TEST_P(X86MlaMergeIsaTest, UpconvertLargeCallsStreamAndMatchRef) {
  const X86Isa isa = GetParam();
  for (int threads : {1, 2}) {
    EXPECT_TRUE(check_spec(upconvert_spec(16), isa, 2400, Config().set("threads", threads)));
  }
}

// Every e4m3 code at every position of the 512 values, with tile scales that are positive,
// negative, tiny (denormal and zero products) and huge (products that overflow): on AVX-512
// the codes are decoded through a bf16 word table (CacheGenerator::dequantise_span_decoded),
// which this pins down code by code, NaN and -0 included.
TEST_P(X86MlaMergeIsaTest, UpconvertEveryCodeEveryScaleMatchesRef) {
  const X86Isa isa = GetParam();
  const OpSpec spec = upconvert_spec(16);
  const Kernel kernel = compile_x86(spec, isa);
  auto c = test::make_case(spec, 40, InputKind::kNormal, 9);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  test::HostTensor& cache = c->tensors[0];
  const int64_t entry = cache.sizes().back(), entries = cache.numel() / entry;
  const float scales[] = {0.1f, -2.5f, 1e-30f, 0x1p-140f, 3e38f, 1.0f};
  for (int64_t e = 0; e < entries; ++e) {
    for (int64_t i = 0; i < 512; ++i) cache.set(e * entry + i, double((i * 7 + e) % 256));
    for (int64_t tile = 0; tile < 4; ++tile) {
      const auto bits = std::bit_cast<uint32_t>(scales[size_t(e + tile) % std::size(scales)]);
      for (int64_t byte = 0; byte < 4; ++byte) {
        cache.set(e * entry + 512 + 4 * tile + byte, double((bits >> (8 * byte)) & 0xFF));
      }
    }
  }
  const auto report = check_against_ref(kernel, c.value());
  EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa) << "\n"
                         << report.message;
}

// ---- indexer_k_quant_and_cache and cp_gather_indexer_k_quant_cache ----------------------------

TEST_P(X86MlaMergeIsaTest, IndexerQuantMatchesRefOverTheGrid) {
  const X86Isa isa = GetParam();
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (ir::ScaleFormat fmt : {ir::ScaleFormat::kPlain, ir::ScaleFormat::kUe8m0}) {
      // DeepSeek's (128, 128), groups that are tails of a vector, and many small groups (the
      // run-time group loop).
      for (auto [dim, qbs] : {std::pair<int64_t, int64_t>{128, 128},
                              {256, 128},
                              {96, 32},
                              {136, 17},
                              {64, 8},
                              {48, 1},
                              {7, 7}}) {
        for (int64_t bs : {1, 16, 64}) {
          for (int64_t tokens : {1, 17}) {
            const OpSpec spec = indexer_quant_spec(dtype, dim, qbs, bs, fmt);
            if (!check_spec(spec, isa, tokens, {}, /*few=*/bs != 16)) return;
          }
        }
      }
    }
  }
}

// Large calls (9000 rows, one thread) against the ref on the same buffers: DeepSeek's
// (128, 128) and two groups of 64, ue8m0 (bf16: the scales from the table of amax exponents)
// and plain scales, a prefill's slot mapping (consecutive slots of shuffled blocks, a padding
// row) and random slots. Each 64 values share a binade 2^e, e stepping through [-140, 127], so
// that groups take every scale class: below the 1e-4 floor (and zeros: bf16/f16 underflow),
// the table's ordinary entries, scales above the 16-bit steps' 2^100 (bf16), f16 overflow to
// infinity, and an infinite value in some groups besides. The compare covers 64 bytes past the
// cache, which no write may reach.
TEST_P(X86MlaMergeIsaTest, IndexerQuantLargeCallsMatchRef) {
  const X86Isa isa = GetParam();
  constexpr int64_t kTokens = 9000, kBs = 64, kBlocks = kTokens / kBs + 9;
  std::mt19937_64 rng(11);
  CompileOptions ref_options;
  ref_options.backend = BackendKind::kRef;
  std::vector<int64_t> prefill(static_cast<size_t>(kTokens)),
      random(static_cast<size_t>(kBlocks * kBs));
  std::vector<int64_t> order(static_cast<size_t>(kBlocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t t = 0; t < kTokens; ++t) prefill[size_t(t)] = order[size_t(t / kBs)] * kBs + t % kBs;
  prefill[size_t(5 * kBs + 3)] = -1;
  std::iota(random.begin(), random.end(), 0);
  std::shuffle(random.begin(), random.end(), rng);
  random.resize(size_t(kTokens));
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (auto [dim, qbs] : {std::pair<int64_t, int64_t>{128, 128}, {128, 64}}) {
      std::vector<uint16_t> k(size_t(kTokens * dim));
      for (size_t i = 0; i < k.size(); ++i) {
        const int e = int(i / 64 * 37 % 268) - 140;
        const float x =
            std::ldexp(1.0f + float(rng() % 1000) / 1000.0f, e) * (rng() % 2 ? 1.0f : -1.0f);
        k[i] = dtype == DType::kBF16 ? numeric::f32_to_bf16(x) : numeric::f32_to_f16(x);
      }
      const uint16_t inf = dtype == DType::kBF16 ? 0x7F80 : 0x7C00;
      for (size_t i = 7; i < k.size(); i += 9973) k[i] = inf;
      for (ir::ScaleFormat fmt : {ir::ScaleFormat::kUe8m0, ir::ScaleFormat::kPlain}) {
        const OpSpec spec = indexer_quant_spec(dtype, dim, qbs, kBs, fmt);
        const Kernel kernel = compile_x86(spec, isa, Config().set("threads", 1));
        auto ref = test::x86_test_runtime().compile(spec, ref_options);
        ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
        const int64_t entry = dim + 4 * (dim / qbs);
        const size_t cache_bytes = size_t(kBlocks * kBs * entry);
        for (std::vector<int64_t>* slots : {&prefill, &random}) {
          const test::OffsetBuffers buffers = test::offset_buffers(2, cache_bytes, 0);
          const std::vector<uint8_t*>& caches = buffers.at;
          auto args = [&](uint8_t* cache) {
            return KernelArgs({Tensor(k.data(), dtype, {kTokens, dim}),
                               Tensor(cache, DType::kU8, {kBlocks, kBs, entry}),
                               Tensor(slots->data(), DType::kI64, {kTokens})},
                              {});
          };
          ASSERT_TRUE(kernel.run(args(caches[0])).is_ok());
          ASSERT_TRUE(ref.value().run(args(caches[1])).is_ok());
          EXPECT_EQ(std::memcmp(caches[0], caches[1], cache_bytes + 64), 0)
              << to_string(spec) << " isa=" << x86_isa_name(isa)
              << (slots == &prefill ? " prefill slots" : " random slots");
        }
      }
    }
  }
}

// bf16 with ue8m0 scales takes each group's scale from the table of amax exponents (no
// division, no floor's vmaxss) where the 16-bit steps serve it: at VBMI the zmm steps take the
// table's round and C' (and at AVX512-FP16 quantise_pow2_unit its K2); at avx512_bf16 the scale
// is divided out. The numerics are the grid's and the large calls' tests above.
TEST(X86IndexerQuant, Ue8m0Bf16ScalesComeFromTheTableAtVbmi) {
  if (detect_host_x86_isa() < X86Isa::kAvx512Vbmi) {
    GTEST_SKIP() << "host lacks avx512_vbmi: the kernel at that level cannot be loaded here";
  }
  const OpSpec spec = indexer_quant_spec(DType::kBF16, 128, 128, 64, ir::ScaleFormat::kUe8m0);
  for (X86Isa isa : {X86Isa::kAvx512Bf16, X86Isa::kAvx512Vbmi}) {
    auto text = compile_x86(spec, isa).disassembly();
    ASSERT_TRUE(text.is_ok()) << text.status().to_string();
    const bool divides = text.value().find("vdivss") != std::string::npos ||
                         text.value().find("vmaxss") != std::string::npos;
    EXPECT_EQ(divides, isa < X86Isa::kAvx512Vbmi) << x86_isa_name(isa);
  }
}

// The dynamic scales' amax (CacheGenerator::amax_span; on AVX-512 over the 16-bit lanes) sees
// every 16-bit input as a group's largest value: group n (of the op's groups or tiles, in
// order) holds the bits n at position 7n mod size and zeros elsewhere, so every finite
// magnitude, both infinities and every NaN (ignored: the scale falls to the amax floor) sits
// at every position mod 8 of a 32-value vector; odd n also put a NaN beside it (amax must
// ignore it), and every third group a value of the other sign and half the magnitude bits. Scales
// and codes exactly as the ref's.
TEST_P(X86MlaMergeIsaTest, DynamicScalesSeeEveryValueAsTheGroupMaximum) {
  const X86Isa isa = GetParam();
  struct Shape {
    OpSpec spec;
    int64_t row, group;  // values per token and per group (tile)
  };
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const int64_t inf_bits = dtype == DType::kBF16 ? 0x7F80 : 0x7C00;
    const uint64_t nan = uint64_t(inf_bits) + 1;  // signalling (glibc's fmaxf does not ignore it)
    for (const Shape& shape :
         {Shape{indexer_quant_spec(dtype, 128, 128, 64, ir::ScaleFormat::kUe8m0), 128, 128},
          Shape{indexer_quant_spec(dtype, 128, 32, 16, ir::ScaleFormat::kPlain), 128, 32},
          Shape{indexer_quant_spec(dtype, 96, 96, 16, ir::ScaleFormat::kUe8m0), 96, 96},
          Shape{ds_mla_spec(dtype, 64), 512, 128}}) {
      const int64_t groups_per_row = shape.row / shape.group;
      const int64_t tokens = 65536 / groups_per_row;
      const Kernel kernel = compile_x86(shape.spec, isa, kParallel);
      auto c = test::make_case(shape.spec, tokens, InputKind::kNormal, 5);
      ASSERT_TRUE(c.is_ok()) << c.status().to_string();
      test::HostTensor& x = c->tensors[0];
      const int64_t stride = x.numel() / tokens;  // ds_mla's kv_c rows are 512 wide
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t g = 0; g < groups_per_row; ++g) {
          const int64_t n = t * groups_per_row + g, first = t * stride + g * shape.group;
          const int64_t at = (7 * n) % shape.group;
          for (int64_t i = 0; i < shape.group; ++i) x.set_bits(first + i, 0);
          // A NaN's code may take its sign or not (spec §1.3): NaNs go in with a positive sign.
          const bool is_nan = (n & 0x7FFF) > inf_bits;
          x.set_bits(first + at, uint64_t(is_nan ? n & 0x7FFF : n));
          if (n % 2 == 1) x.set_bits(first + (at + 1) % shape.group, nan);
          if (n % 3 == 0) {
            const uint64_t smaller =
                ((uint64_t(n) & 0x8000) ^ 0x8000) | ((uint64_t(n) & 0x7FFF) >> 1);
            x.set_bits(first + (at + 2) % shape.group, smaller);
          }
        }
      }
      const auto report = check_against_ref(kernel, c.value());
      EXPECT_TRUE(report.ok) << to_string(shape.spec) << " isa=" << x86_isa_name(isa) << "\n"
                             << report.message;
    }
  }
}

// fp8_ds_mla's tiles take the window steps whatever their scale (quantise_span_window). A tile
// whose amax is 448·2^e has the scale 2^e exactly, where quotients land exactly on fp8 rounding
// midpoints (the window rejects those steps, and the division's exact encoder must round them
// to even): every tile here has such an amax (e in [-20, 20]) and fills its other values with
// midpoints of both signs, every other tile some zeros and fp8-subnormal midpoints too; every
// seventh tile holds NaNs only.
TEST_P(X86MlaMergeIsaTest, DsMlaPowerOfTwoScalesRoundMidpointsToEven) {
  const X86Isa isa = GetParam();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const OpSpec spec = ds_mla_spec(dtype, 64);
    constexpr int64_t kTokens = 41, kTiles = 4, kTile = 128;
    const Kernel kernel = compile_x86(spec, isa);
    auto c = test::make_case(spec, kTokens, InputKind::kNormal, 19);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    test::HostTensor& x = c->tensors[0];  // kv_c: [T + 1, 512], logical flat indices
    const int64_t stride = kTiles * kTile;
    auto bits_of = [&](float v) -> uint64_t {
      return dtype == DType::kBF16 ? numeric::f32_to_bf16(v) : numeric::f32_to_f16(v);
    };
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t k = 0; k < kTiles; ++k) {
        const int64_t n = t * kTiles + k, first = t * stride + k * kTile;
        if (n % 7 == 3) {  // a tile of NaNs only: amax 0 (NaNs ignored), the scale FLT_MIN
          for (int64_t i = 0; i < kTile; ++i) x.set_bits(first + i, bits_of(NAN));
          continue;
        }
        // f16 keeps 2^e · 448 finite and normal for e in [-16, 7].
        const int e = dtype == DType::kBF16 ? int(n % 41) - 20 : int(n % 24) - 16;
        const float scale = std::ldexp(1.0f, e);
        x.set_bits(first + int64_t(n % kTile), bits_of(448.0f * scale));
        for (int64_t i = 0; i < kTile; ++i) {
          if (i == n % kTile) continue;
          // A midpoint between two e4m3 codes: (m + 0.5) / 8 · 2^b with m in 8..15, b in -6..7
          // (below 448 in magnitude), or a subnormal midpoint, or zero.
          // Odd tiles hold normal midpoints only: their steps are not sent to the division by a
          // zero or subnormal lane, so the window steps alone must reject the midpoints.
          const int64_t r = n % 2 == 1 ? 4 + (i * 37 + n * 11) % 25 : (i * 37 + n * 11) % 29;
          float q;
          if (r == 0) {
            q = 0.0f;
          } else if (r < 4) {
            q = float(2 * (r % 8) + 1) * std::ldexp(1.0f, -10);  // (2j + 1) · 2^-10
          } else {
            q = (float((i + n) % 8 + 8) + 0.5f) / 8.0f * std::ldexp(1.0f, int(r % 14) - 6);
          }
          const float v = (i % 2 == 1 ? -q : q) * scale;
          x.set_bits(first + i, bits_of(v));
        }
      }
    }
    const auto report = check_against_ref(kernel, c.value());
    EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa) << "\n"
                           << report.message;
  }
}

TEST_P(X86MlaMergeIsaTest, IndexerGatherMatchesRef) {
  const X86Isa isa = GetParam();
  for (auto [dim, qbs] :
       {std::pair<int64_t, int64_t>{128, 128}, {256, 64}, {7, 7}, {136, 17}, {48, 1}}) {
    for (int64_t bs : {1, 16, 64}) {
      for (int64_t rows : {1, 9, 40}) {
        if (!check_spec(indexer_gather_spec(dim, qbs, bs), isa, rows)) return;
      }
    }
  }
}

// ---- merge_attn_states -----------------------------------------------------------------------

// Heads around the vector length (the LSE groups), head sizes with tails and the looped form,
// fp8 output, with and without output_lse (the case draws prefill_tokens_with_context from
// None, T/2 and T).
TEST_P(X86MlaMergeIsaTest, MergeMatchesRefOverTheGrid) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (bool fp8 : {false, true}) {
      for (int64_t heads : {1, 3, 8, 9, 16, 17, 32}) {
        for (int64_t d : {1, 7, 32, 48, 64, 96, 128, 256, 520}) {
          for (bool lse : {true, false}) {
            if (!check_spec(merge_spec(dtype, fp8, heads, d, lse), isa, 5, {},
                            /*few=*/heads != 9 && d != 64)) {
              return;
            }
          }
        }
      }
    }
  }
}

// Rotations of more than 16 steps (vectors of each half, or of pairs) loop over one step's code
// (Generator::emit_steps): rot_dim 320 (AVX2 f32: 20 vectors; the bf16 pairs path: 10
// NeoX steps of 16, 20 GPT-J steps of 8), 998 (62 vectors and a tail of 3 at AVX2) and 4096
// (the IR's largest, whose unrolled bf16 rotations outgrew the code buffer), for
// rotary_embedding (query and key, a cache of T and of f32) and both fused writers, both
// pairings, every dtype.
TEST_P(X86MlaMergeIsaTest, LongRotationsLoopOverTheSteps) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (ir::RopeStyle style : {ir::RopeStyle::kNeox, ir::RopeStyle::kGptj}) {
      for (int64_t rot : {320, 998, 4096}) {
        for (DType cache_dtype : {dtype, DType::kF32}) {
          const ir::RopeParams p{dtype, cache_dtype, 4096, rot, style, 2, 1, true};
          EXPECT_TRUE(check_spec(OpSpec::make(OpKind::kRotaryEmbedding, p), isa, 3, {}, true));
        }
        EXPECT_TRUE(
            check_spec(rope_fused_spec(dtype, KvCacheDtype::kFp8E4m3, 64, rot, 2, style, 16), isa,
                       3, {}, true));
        EXPECT_TRUE(check_spec(rope_flash_spec(dtype, KvCacheDtype::kAuto, 2, 1, rot, rot, style,
                                               16, ir::CacheLayout::kNhd, false),
                               isa, 3, {}, true));
      }
    }
  }
}

// The rotary writers at the largest rot_dim the IR allows, and at the largest still emitted in
// line at AVX-512 (16 vectors and a tail: 542, ~106 KiB for the flash writer with fp8), generate
// at every level (the test above runs them on the host's), with fp8 caches and per-head scales;
// so does merge_attn_states at 4096 heads.
TEST(X86MlaMergeLevels, LargestWritersFitTheCodeBuffer) {
  const auto backend = codegen::x86::make_backend();
  for (X86Isa isa : test::kX86Levels) {
    Target target;
    target.backend = BackendKind::kX86;
    target.isa = isa;
    const auto expect_generates = [&](const OpSpec& spec) {
      ASSERT_TRUE(backend->supports(spec, target).ok) << to_string(spec);
      const auto artifact = backend->lower(spec, Config{}, target);
      EXPECT_TRUE(artifact.is_ok()) << to_string(spec) << " at " << x86_isa_name(isa) << ": "
                                    << artifact.status().to_string();
    };
    for (DType dtype : kDtypes) {
      for (ir::RopeStyle style : {ir::RopeStyle::kNeox, ir::RopeStyle::kGptj}) {
        for (int64_t rot : {542, 4096}) {
          const ir::RopeParams rope{dtype, DType::kF32, 4096, rot, style, 32, 8, true};
          expect_generates(OpSpec::make(OpKind::kRotaryEmbedding, rope));
          expect_generates(
              rope_fused_spec(dtype, KvCacheDtype::kFp8E4m3, 512, rot, 128, style, 16));
          expect_generates(rope_flash_spec(dtype, KvCacheDtype::kFp8E4m3, 32, 8, 4096, rot, style,
                                           16, ir::CacheLayout::kNhd, true));
        }
      }
      for (bool fp8 : {false, true}) {
        for (int64_t head_size : {1, 128, 4096}) {
          expect_generates(merge_spec(dtype, fp8, 4096, head_size, true));
        }
      }
    }
  }
}

// More heads than the groups emitted in line (8 vectors: 64 heads at AVX2, 128 at AVX-512)
// loop over one group's code: 131 (a partial group after the loop), 256, and the IR's 4096
// (its unrolled code outgrew the code buffer), every dtype, fp8 output, with the LSE output.
TEST_P(X86MlaMergeIsaTest, MergeManyHeadsLoopOverTheGroups) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (int64_t heads : {131, 256}) {
      for (bool fp8 : {false, true}) {
        EXPECT_TRUE(check_spec(merge_spec(dtype, fp8, heads, 40, true), isa, 5, {}, true));
      }
    }
  }
  EXPECT_TRUE(check_spec(merge_spec(DType::kBF16, false, 4096, 128, true), isa, 3, {}, true));
  EXPECT_TRUE(check_spec(merge_spec(DType::kF32, true, 4096, 8, false), isa, 3, {}, true));
}

// Tiles of 16 tokens (merge_tile, copy_tile) beside the single tokens: 37 tokens (a tile, then
// with_context at T/2 = 18 leaves two single tokens before the copy tile, and three after it)
// and 67 on two threads (33 / 34: single tokens after each thread's tiles), every dtype, fp8
// output, with and without output_lse, heads below, at and above a chunk of the tile
// (kChunkHeads = 32: 33 is one chunk and a rest, 64 two chunks, 70 two chunks and a rest).
TEST_P(X86MlaMergeIsaTest, MergeTilesOfTokensMatchRef) {
  const X86Isa isa = GetParam();
  for (DType dtype : kDtypes) {
    for (bool fp8 : {false, true}) {
      for (int64_t heads : {1, 9, 16, 33, 64, 70}) {
        for (bool lse : {true, false}) {
          const OpSpec spec = merge_spec(dtype, fp8, heads, heads == 16 ? 128 : 40, lse);
          if (!check_spec(spec, isa, 37, {}, /*few=*/heads != 9)) return;
          if (!check_spec(spec, isa, 67, kParallel, /*few=*/true)) return;
        }
      }
    }
  }
}

// A bf16 merge writing >= 1 MiB of output per thread into a 64-byte aligned output stores the
// blend with streaming stores; a misaligned one (or a smaller call) keeps the ordinary stores.
// Both against the ref: 300 tokens of 16 x 128 (4 KiB of output each) on one thread, the case's
// output replaced by an aligned buffer (misaligned by 16 bytes for the second run).
TEST_P(X86MlaMergeIsaTest, MergeLargeCallsStreamMatchRef) {
  const X86Isa isa = GetParam();
  const OpSpec spec = merge_spec(DType::kBF16, false, 16, 128, true);
  const Kernel kernel = compile_x86(spec, isa, Config().set("threads", 1));
  auto text = kernel.disassembly();
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  EXPECT_NE(text.value().find("vmovntdq"), std::string::npos) << x86_isa_name(isa);
  CompileOptions ref_options;
  ref_options.backend = BackendKind::kRef;
  auto ref = compile(spec, ref_options);
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  for (int64_t misalign : {0, 16}) {
    auto c = test::make_case(spec, 300, InputKind::kNormal, 11);
    ASSERT_TRUE(c.is_ok());
    const test::HostTensor& out = c->tensors[0];
    const size_t bytes = size_t(out.numel()) * 2;
    std::vector<uint8_t> memory(bytes + 128, 0xEE);
    uint8_t* data =
        memory.data() + (64 - reinterpret_cast<uintptr_t>(memory.data()) % 64) + misalign;
    KernelArgs args = c->args();
    args.tensors[0] = Tensor(data, DType::kBF16, {out.sizes()[0], out.sizes()[1], out.sizes()[2]});
    ASSERT_TRUE(kernel.run(args).is_ok());
    ASSERT_TRUE(ref.value().run(c->args()).is_ok());  // the case's own output: the ref's
    // The case's own tolerance for the output (the attention tolerance), as check_spec uses.
    ASSERT_FALSE(c->tolerances.empty());
    const test::CompareResult r = test::compare(args.tensors[0], out.tensor(), c->tolerances[0]);
    EXPECT_TRUE(r.ok()) << x86_isa_name(isa) << " misalign=" << misalign << "\n" << r.message;
  }
}

TEST_P(X86MlaMergeIsaTest, MergeOneTokenAndManyTokens) {
  const X86Isa isa = GetParam();
  for (int64_t tokens : {1, 2, 3, 37}) {
    EXPECT_TRUE(check_spec(merge_spec(DType::kBF16, false, 16, 128, true), isa, tokens));
  }
}

// ---- threads ---------------------------------------------------------------------------------

TEST_P(X86MlaMergeIsaTest, MultiThreadedRowsMatchRef) {
  const X86Isa isa = GetParam();
  EXPECT_TRUE(check_spec(ds_mla_spec(DType::kBF16, 16), isa, 67, kParallel));
  for (KvCacheDtype kv : kKvModes) {
    EXPECT_TRUE(check_spec(rope_fused_spec(DType::kBF16, kv, 512, 64, 16, ir::RopeStyle::kNeox, 16),
                           isa, 67, kParallel));
  }
  EXPECT_TRUE(check_spec(upconvert_spec(16), isa, 67, kParallel));
  EXPECT_TRUE(check_spec(indexer_quant_spec(DType::kBF16, 128, 128, 64, ir::ScaleFormat::kUe8m0),
                         isa, 67, kParallel));
  EXPECT_TRUE(check_spec(indexer_gather_spec(128, 128, 64), isa, 67, kParallel));
  EXPECT_TRUE(check_spec(merge_spec(DType::kF16, false, 8, 128, true), isa, 67, kParallel));
  for (KvCacheDtype kv : kKvModes) {
    EXPECT_TRUE(check_spec(rope_flash_spec(DType::kBF16, kv, 32, 8, 128, 128, ir::RopeStyle::kNeox,
                                           16, ir::CacheLayout::kHnd, false),
                           isa, 67, kParallel));
  }
}

std::string isa_name(const ::testing::TestParamInfo<X86Isa>& info) {
  return std::string(x86_isa_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    AllIsas, X86MlaMergeIsaTest,
    ::testing::ValuesIn(test::isa_paths({X86Isa::kAvx2, X86Isa::kAvx512, X86Isa::kAvx512Bf16,
                                         X86Isa::kAvx512Vbmi, X86Isa::kAvx512Fp16})),
    isa_name);

// ---- checked mode and bad arguments ------------------------------------------------------------

// Runs `spec` on a case with one index made bad by `corrupt`: the kernel's error equals the
// ref's (kInvalidArgument, same message, naming `needle`) and the outputs are untouched, on
// every ISA path, checked and unchecked, with threads.
template <class Corrupt>
void expect_index_error(const OpSpec& spec, int64_t size, const std::string& needle,
                        Corrupt corrupt) {
  for (X86Isa isa : test::isa_paths()) {
    const Kernel kernel = compile_x86(spec, isa, kParallel);
    auto c = test::make_case(spec, size, InputKind::kNormal, 5);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    corrupt(c.value());
    test::OpCase expected = c.value();
    const Status ref = codegen::ref::run(spec, expected.args());
    ASSERT_EQ(ref.code(), StatusCode::kInvalidArgument) << to_string(spec) << ref.to_string();
    std::vector<std::vector<std::byte>> before;
    for (int out : c->outputs) before.push_back(c->tensors[size_t(out)].storage());
    for (bool unchecked : {false, true}) {
      const Status status = unchecked ? kernel.run_unchecked(c->args()) : kernel.run(c->args());
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << to_string(spec);
      EXPECT_EQ(status.message(), ref.message()) << to_string(spec);
      EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
      for (size_t i = 0; i < c->outputs.size(); ++i) {
        EXPECT_EQ(c->tensors[size_t(c->outputs[i])].storage(), before[i]) << to_string(spec);
      }
    }
  }
}

TEST(X86MlaMergeChecked, SlotOutsideTheCacheIsAnErrorAndWritesNothing) {
  const OpSpec ds = ds_mla_spec(DType::kBF16, 16);
  expect_index_error(ds, 9, "slot_mapping[6]", [](test::OpCase& c) {
    c.tensors[3].set(6, double(c.tensors[2].sizes()[0] * 16));
  });
  const OpSpec fused =
      rope_fused_spec(DType::kF16, KvCacheDtype::kFp8E4m3, 512, 64, 4, ir::RopeStyle::kNeox, 16);
  expect_index_error(fused, 9, "slot_mapping[6]", [](test::OpCase& c) {
    c.tensors[5].set(6, double(c.tensors[6].sizes()[0] * 16));
  });
  const OpSpec rope_flash = rope_flash_spec(DType::kBF16, KvCacheDtype::kAuto, 4, 2, 64, 64,
                                            ir::RopeStyle::kNeox, 16, ir::CacheLayout::kNhd, false);
  expect_index_error(rope_flash, 9, "slot_mapping[6]", [](test::OpCase& c) {
    c.tensors[7].set(6, double(c.tensors[5].sizes()[0] * 16));
  });
  const OpSpec quant = indexer_quant_spec(DType::kBF16, 128, 128, 64, ir::ScaleFormat::kPlain);
  expect_index_error(quant, 9, "slot_mapping[6]", [](test::OpCase& c) {
    c.tensors[2].set(6, double(c.tensors[1].sizes()[0] * 64));
  });
}

TEST(X86MlaMergeChecked, PositionOutsideTheTableIsAnErrorAndRotatesNothing) {
  const OpSpec fused =
      rope_fused_spec(DType::kBF16, KvCacheDtype::kAuto, 16, 64, 4, ir::RopeStyle::kGptj, 16);
  const OpSpec rope_flash = rope_flash_spec(DType::kF16, KvCacheDtype::kFp8E5m2, 4, 2, 64, 32,
                                            ir::RopeStyle::kGptj, 16, ir::CacheLayout::kHnd, true);
  for (double bad : {-1.0, 64.0}) {
    expect_index_error(fused, 9, "positions[4]",
                       [bad](test::OpCase& c) { c.tensors[0].set(4, bad); });
    // The extra (slot-less) row is checked too.
    expect_index_error(rope_flash, 9, "positions[9]",
                       [bad](test::OpCase& c) { c.tensors[0].set(9, bad); });
  }
}

TEST(X86MlaMergeChecked, BlockTableOutsideTheCacheIsAnErrorAndWritesNothing) {
  const auto every_entry = [](int table, int cache) {
    return [table, cache](test::OpCase& c) {
      for (int64_t i = 0; i < c.tensors[size_t(table)].numel(); ++i) {
        c.tensors[size_t(table)].set(i, double(c.tensors[size_t(cache)].sizes()[0]));
      }
    };
  };
  expect_index_error(upconvert_spec(16), 20, "block_table", every_entry(2, 0));
  expect_index_error(indexer_gather_spec(128, 128, 16), 20, "block_table", every_entry(3, 0));
  // workspace_starts decreasing / cu_seq_lens past dst.
  expect_index_error(upconvert_spec(4), 20, "workspace_starts",
                     [](test::OpCase& c) { c.tensors[4].set(0, 5.0); });
  expect_index_error(indexer_gather_spec(128, 128, 16), 20, "cu_seq_lens", [](test::OpCase& c) {
    const int64_t n = c.tensors[4].numel();
    c.tensors[4].set(n - 1, 1000.0);
  });
}

// An unknown kv_cache_dtype (or indexer scale format) string never reaches a kernel: the spec
// text is rejected naming the field, the value and the allowed values; and kv modes an op does
// not take (fp8_ds_mla outside concat_and_cache_mla) are rejected by the spec's validation.
TEST(X86MlaMergeChecked, UnknownKvCacheDtypeStringsAreRejected) {
  const char* bad[] = {
      "concat_and_cache_mla(dtype=bf16,kv=fp8_inc,kv_lora_rank=512,pe_dim=64,block_size=16)",
      "concat_and_cache_mla_rope_fused(dtype=bf16,kv=nvfp4,kv_lora_rank=512,rot_dim=64,"
      "heads_q=16,block_size=64)",
      "rotary_embedding_and_cache_flash(dtype=bf16,kv=int8,heads_q=8,heads_kv=2,head_size=64,"
      "rot_dim=64,block_size=16)",
      "indexer_k_quant_and_cache(dtype=bf16,head_dim=128,quant_block=128,block_size=64,"
      "scale_fmt=e8m0)",
  };
  for (const char* text : bad) {
    const Result<OpSpec> spec = parse_spec(text);
    ASSERT_FALSE(spec.is_ok()) << text;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(spec.status().message().find("allowed"), std::string::npos)
        << spec.status().message();
  }
  for (const char* text :
       {"rotary_embedding_and_cache_flash(dtype=bf16,kv=fp8_ds_mla,heads_q=8,heads_kv=2,"
        "head_size=64,rot_dim=64,block_size=16)",
        "concat_and_cache_mla_rope_fused(dtype=bf16,kv=fp8_ds_mla,kv_lora_rank=512,rot_dim=64,"
        "heads_q=16,block_size=64)"}) {
    const Result<OpSpec> spec = parse_spec(text);
    ASSERT_FALSE(spec.is_ok()) << text;
    EXPECT_NE(spec.status().message().find("fp8_ds_mla"), std::string::npos)
        << spec.status().message();
  }
}

// Wrong dtypes and shapes are rejected by the argument checks, naming the argument.
TEST(X86MlaMergeChecked, WrongDtypesAndShapesAreRejected) {
  struct Bad {
    OpSpec spec;
    int index;
    DType dtype;
    std::vector<int64_t> sizes;  // empty: the case's sizes
    std::string needle;
  };
  const std::vector<Bad> bad = {
      {ds_mla_spec(DType::kBF16, 16), 3, DType::kI32, {}, "slot_mapping"},
      {ds_mla_spec(DType::kBF16, 16), 2, DType::kU8, {4, 16, 600}, "kv_cache"},
      {rope_fused_spec(DType::kBF16, KvCacheDtype::kAuto, 16, 64, 4, ir::RopeStyle::kNeox, 16),
       1,
       DType::kF16,
       {},
       "q_pe"},
      {rope_fused_spec(DType::kBF16, KvCacheDtype::kAuto, 16, 64, 4, ir::RopeStyle::kNeox, 16),
       5,
       DType::kI32,
       {},
       "slot_mapping"},
      {upconvert_spec(16), 1, DType::kF16, {}, "dst"},
      {upconvert_spec(16), 2, DType::kI64, {}, "block_table"},
      {indexer_quant_spec(DType::kBF16, 128, 128, 16, ir::ScaleFormat::kPlain),
       0,
       DType::kF32,
       {},
       "k"},
      {indexer_quant_spec(DType::kBF16, 128, 128, 16, ir::ScaleFormat::kPlain),
       1,
       DType::kU8,
       {4, 16, 100},
       "kv_cache"},
      {indexer_gather_spec(128, 128, 16), 4, DType::kI64, {}, "cu_seq_lens"},
      {merge_spec(DType::kBF16, false, 4, 64, true), 2, DType::kF16, {}, "prefix_output"},
      {merge_spec(DType::kBF16, false, 4, 64, true), 3, DType::kF32, {4, 3}, "prefix_lse"},
      {rope_flash_spec(DType::kBF16, KvCacheDtype::kAuto, 4, 2, 64, 64, ir::RopeStyle::kNeox, 16,
                       ir::CacheLayout::kNhd, false),
       1,
       DType::kF16,
       {},
       "query"},
      {rope_flash_spec(DType::kBF16, KvCacheDtype::kAuto, 4, 2, 64, 64, ir::RopeStyle::kNeox, 16,
                       ir::CacheLayout::kNhd, false),
       7,
       DType::kI32,
       {},
       "slot_mapping"},
      {rope_flash_spec(DType::kBF16, KvCacheDtype::kAuto, 4, 2, 64, 64, ir::RopeStyle::kNeox, 16,
                       ir::CacheLayout::kNhd, false),
       7,
       DType::kI64,
       {20},
       "slot_mapping"},  // more slots than positions
      {rope_flash_spec(DType::kBF16, KvCacheDtype::kFp8E4m3, 4, 2, 64, 64, ir::RopeStyle::kNeox, 16,
                       ir::CacheLayout::kNhd, false),
       5,
       DType::kBF16,
       {2, 16, 2, 64},
       "key_cache"},
      {rope_flash_spec(DType::kBF16, KvCacheDtype::kAuto, 4, 2, 64, 64, ir::RopeStyle::kNeox, 16,
                       ir::CacheLayout::kNhd, false),
       4,
       DType::kBF16,
       {64, 32},
       "cos_sin_cache"},
  };
  for (const Bad& b : bad) {
    const Kernel kernel = compile_x86(b.spec, test::isa_paths().back());
    auto c = test::make_case(b.spec, 6, InputKind::kNormal, 1);
    ASSERT_TRUE(c.is_ok());
    std::vector<int64_t> sizes = b.sizes.empty() ? c->tensors[size_t(b.index)].sizes() : b.sizes;
    c->tensors[size_t(b.index)] = test::HostTensor::zeros(b.dtype, sizes);
    const Status status = kernel.run(c->args());
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << to_string(b.spec);
    EXPECT_NE(status.message().find(b.needle), std::string::npos)
        << to_string(b.spec) << ": " << status.message();
  }
}

}  // namespace
}  // namespace jit
