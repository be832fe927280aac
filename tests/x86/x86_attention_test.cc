// cpu_attention_with_kv_cache and cpu_attn_reshape_and_cache on the x86 backend against the ref
// backend: head sizes, block sizes, GQA ratios, dtypes, every feature flag, split and unsplit
// partitions, fully masked rows, and every ISA path this host runs (AVX2, AVX-512 fp32,
// AVX512_BF16 vdpbf16ps).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/ref/ref.h"
#include "codegen/x86/attention_kernel.h"
#include "codegen/x86/paged_copy.h"
#include "codegen/x86/x86_backend.h"
#include "ir/numeric.h"
#include "ir/params_attention.h"
#include "ir/params_cache.h"
#include "ir/params_cpu.h"
#include "runtime/runtime.h"
#include "tests/harness/op_cases.h"
#include "tests/x86/x86_test_util.h"

namespace jit {
namespace {

using ir::CpuAttnIsa;
using test::check_against_ref;
using test::InputKind;

using test::compile_x86;

Runtime& test_runtime() {
  return test::x86_test_runtime();
}

struct Features {
  bool causal = true;
  bool window = false;
  bool alibi = false;
  bool softcap = false;
  bool sinks = false;
};

OpSpec attention_spec(CpuAttnIsa isa, DType dtype, int64_t head, int64_t block, int64_t hq,
                      int64_t hkv, Features f = {}) {
  return OpSpec::make(OpKind::kCpuAttentionWithKvCache,
                      ir::CpuAttentionParams{isa, dtype, head, block, hq, hkv, f.causal, f.window,
                                             f.alibi, f.softcap, f.sinks});
}

// The vec-layout spec with an fp8 cache of `kv`.
OpSpec fp8_spec(ir::KvCacheDtype kv, DType dtype, int64_t head, int64_t block, int64_t hq,
                int64_t hkv, Features f = {}) {
  OpSpec spec = attention_spec(CpuAttnIsa::kVec, dtype, head, block, hq, hkv, f);
  auto p = spec.get<ir::CpuAttentionParams>();
  p.kv = kv;
  return OpSpec::make(OpKind::kCpuAttentionWithKvCache, p);
}

// Every input kind of the harness on `requests` requests; stops at the first failure.
void check(const OpSpec& spec, X86Isa isa, int64_t requests, Config config = {},
           std::vector<InputKind> kinds = {InputKind::kNormal, InputKind::kSmallInt,
                                           InputKind::kEqual}) {
  const Kernel kernel = compile_x86(spec, isa, config);
  for (InputKind kind : kinds) {
    auto c = test::make_case(spec, requests, kind, uint64_t(requests) * 977 + 3);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    const auto report = check_against_ref(kernel, c.value());
    EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa)
                           << " config=" << config.to_string()
                           << " inputs=" << test::input_kind_name(kind) << "\n"
                           << report.message;
    if (!report.ok) return;
  }
}

// Splits forced (64-key splits, a 32-key tile) and splitting off: both partitions vs ref.
const Config kForceSplit = Config().set("min_split", 32).set("kv_tile", 32).set("q_passes", 1);
const Config kNoSplit = Config().set("min_split", 0);
// An fp8 cache on the fp32 path decoded by the kernel in every pass, or once per KV tile.
const Config kFp8Decodes[] = {Config().set("predecode", 0), Config().set("predecode", 1)};

class X86AttentionTest : public ::testing::TestWithParam<X86Isa> {};

TEST_P(X86AttentionTest, HeadSizesVec) {
  for (int64_t head : {32, 64, 96, 128, 160, 192, 256}) {
    check(attention_spec(CpuAttnIsa::kVec, DType::kBF16, head, 32, 8, 2), GetParam(), 5, {},
          {InputKind::kNormal});
  }
}

TEST_P(X86AttentionTest, HeadSizesVec16) {
  // 16·odd head sizes: the half-width (16-dim) tail of the 32-dim P·V chunks.
  for (int64_t head : {16, 48, 80, 112, 208}) {
    check(attention_spec(CpuAttnIsa::kVec16, DType::kBF16, head, 16, 4, 4), GetParam(), 5, {},
          {InputKind::kNormal});
  }
}

TEST_P(X86AttentionTest, BlockSizes) {
  for (int64_t block : {32, 64, 128}) {
    check(attention_spec(CpuAttnIsa::kVec, DType::kBF16, 64, block, 8, 2), GetParam(), 4);
  }
  for (int64_t block : {16, 48}) {
    check(attention_spec(CpuAttnIsa::kVec16, DType::kBF16, 64, block, 8, 2), GetParam(), 4);
  }
}

TEST_P(X86AttentionTest, GqaRatios) {
  // MHA, GQA 4, GQA 8, MQA and a group larger than one pass (16 heads per KV head).
  for (auto [hq, hkv] : {std::pair{4, 4}, {8, 2}, {16, 2}, {8, 1}, {16, 1}, {9, 3}}) {
    check(attention_spec(CpuAttnIsa::kVec, DType::kBF16, 64, 32, hq, hkv), GetParam(), 4);
  }
}

TEST_P(X86AttentionTest, Dtypes) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    check(attention_spec(CpuAttnIsa::kVec, dtype, 64, 32, 8, 2), GetParam(), 5);
    check(attention_spec(CpuAttnIsa::kVec16, dtype, 48, 16, 4, 1), GetParam(), 5);
  }
}

TEST_P(X86AttentionTest, Features) {
  const Features variants[] = {{.window = true},
                               {.alibi = true},
                               {.softcap = true},
                               {.sinks = true},
                               {.causal = false},
                               {.causal = false, .window = true},
                               {true, true, true, true, true},
                               {false, true, true, true, true}};
  for (const Features& f : variants) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      check(attention_spec(CpuAttnIsa::kVec, dtype, 64, 32, 8, 2, f), GetParam(), 5);
    }
    check(attention_spec(CpuAttnIsa::kVec16, DType::kBF16, 80, 16, 4, 4, f), GetParam(), 4);
  }
}

// Small GQA groups (MHA: 1 query head per KV head, 2, 4): decode calls of fewer than 8 rows,
// whose 32-key groups take the row softmax at AVX-512 (the batched one computes 8 rows), with
// every feature, beside prefill passes of 8 rows.
TEST_P(X86AttentionTest, SmallGroupsEveryFeature) {
  const Features variants[] = {{.window = true},
                               {.alibi = true},
                               {.softcap = true},
                               {.sinks = true},
                               {.causal = false, .window = true},
                               {true, true, true, true, true}};
  for (const Features& f : variants) {
    for (auto [hq, hkv] : {std::pair{4, 4}, {4, 2}, {8, 2}}) {
      check(attention_spec(CpuAttnIsa::kVec, DType::kBF16, 64, 32, hq, hkv, f), GetParam(), 5, {},
            {InputKind::kNormal});
    }
    check(attention_spec(CpuAttnIsa::kVec, DType::kF32, 96, 32, 3, 1, f), GetParam(), 5, {},
          {InputKind::kNormal});
    check(fp8_spec(ir::KvCacheDtype::kFp8E4m3, DType::kBF16, 128, 32, 2, 2, f), GetParam(), 5, {},
          {InputKind::kNormal});
  }
}

TEST_P(X86AttentionTest, SplitAndUnsplitPartitions) {
  for (const Config& config : {kForceSplit, kNoSplit}) {
    check(attention_spec(CpuAttnIsa::kVec, DType::kBF16, 128, 32, 8, 1, {.sinks = true}),
          GetParam(), 6, config);
    check(attention_spec(CpuAttnIsa::kVec, DType::kF16, 64, 64, 4, 4, {.window = true}), GetParam(),
          6, config);
    check(attention_spec(CpuAttnIsa::kVec16, DType::kBF16, 112, 16, 8, 2,
                         {.alibi = true, .softcap = true}),
          GetParam(), 6, config);
  }
}

// Non-causal window (0, 0) with seq_len 1: query tokens 1.. of a prefill see no key (rows
// fully masked by the sliding window), written as zeros (with sinks: also zeros).
TEST_P(X86AttentionTest, FullyMaskedRows) {
  for (bool sinks : {false, true}) {
    for (const Config& config : {Config{}, kForceSplit}) {
      const OpSpec spec = attention_spec(CpuAttnIsa::kVec, DType::kBF16, 64, 32, 8, 2,
                                         {.causal = false, .window = true, .sinks = sinks});
      const Kernel kernel = compile_x86(spec, GetParam(), config);
      auto made = test::make_case(spec, 4, InputKind::kNormal, 11);
      ASSERT_TRUE(made.is_ok()) << made.status().to_string();
      test::OpCase c = std::move(made).value();
      // Request 1 (a prefill of >= 2 tokens): seq_len 1, window 1 on both sides.
      c.tensors[5].set(1, 1.0);
      c.scalars[1] = 0.0;
      c.scalars[2] = 0.0;
      const OpSpec sched =
          OpSpec::make(OpKind::kCpuAttnGetSchedulerMetadata,
                       ir::CpuAttnSchedulerParams{CpuAttnIsa::kVec, DType::kBF16, 64, 8, 2, false});
      ASSERT_TRUE(codegen::ref::run(sched, KernelArgs({c.tensors[8].tensor(), c.tensors[5].tensor(),
                                                       c.tensors[4].tensor()},
                                                      {4.0, 1.0, 1.0}))
                      .is_ok());
      const auto report = check_against_ref(kernel, c);
      EXPECT_TRUE(report.ok) << "sinks=" << sinks << " config=" << config.to_string() << "\n"
                             << report.message;
    }
  }
}

// Slab element index of (key t, dim d) for the layouts of spec §3.3 (the ref's own).
int64_t slab_index(CpuAttnIsa isa, bool key, int64_t t, int64_t d, int64_t bs, int64_t head) {
  return key ? codegen::ref::cpu_attn_key_index(isa, t, d, bs, head)
             : codegen::ref::cpu_attn_value_index(isa, t, d, bs, head);
}

// NaN in every cache slot past a request's seq_len (in its last, partial block): the kernel
// must not let them reach the output (ref never reads them). Any spec of the vec / vec16 / amx
// layouts (an fp8 cache gets the NaN code).
void check_nan_past_sequence(const OpSpec& spec, X86Isa target) {
  const auto& p = spec.get<ir::CpuAttentionParams>();
  const CpuAttnIsa isa = p.isa;
  const int64_t bs = p.block_size, head = p.head_size, hkv = p.head_count_kv;
  const Kernel kernel = compile_x86(spec, target);
  auto made = test::make_case(spec, 6, InputKind::kNormal, 21);
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  test::OpCase c = std::move(made).value();
  const int64_t requests = c.tensors[5].tensor().size(0);
  const int64_t max_blocks = c.tensors[7].tensor().size(1);
  int poisoned = 0;
  for (int64_t r = 0; r < requests; ++r) {
    const auto seq_len = int64_t(c.tensors[5].get(r));
    if (seq_len % bs == 0) continue;
    const auto block = int64_t(c.tensors[7].get(r * max_blocks + (seq_len - 1) / bs));
    for (int64_t g = 0; g < hkv; ++g) {
      for (int64_t t = seq_len % bs; t < bs; ++t) {
        for (int64_t d = 0; d < head; ++d) {
          const int64_t slab = (block * hkv + g) * bs * head;
          c.tensors[1].set(slab + slab_index(isa, true, t, d, bs, head), std::nan(""));
          c.tensors[2].set(slab + slab_index(isa, false, t, d, bs, head), std::nan(""));
          ++poisoned;
        }
      }
    }
  }
  ASSERT_GT(poisoned, 0);
  const auto report = check_against_ref(kernel, c);
  EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(target) << "\n"
                         << report.message;
}

void check_nan_past_sequence(CpuAttnIsa isa, X86Isa target) {
  check_nan_past_sequence(attention_spec(isa, DType::kBF16, 64, 32, 8, 2), target);
}

// ±inf and NaN values at keys that some rows of a kernel call mask, inside the sequence: the
// last key of a causal prefill (only its last query token sees it), the key just before the
// last token's window (earlier tokens see it) and, without causality, the key just past the
// first token's window (later tokens see it). A row that sees one returns what the ref returns
// (±inf or NaN); a row that masks it must not see it. The kernel's P·V weighs a masked key by
// p = 0 and 0·inf = NaN, so the runner hands such calls to its exact path (attention_runner.cc).
// Values per dim: +inf, −inf, NaN (fp8: e5m2 codes 0x7C, 0xFC, 0x7E; e4m3 has only NaN, 0x7F).
void check_non_finite_at_masked_keys(const OpSpec& spec, X86Isa target, const Config& config = {}) {
  const auto& p = spec.get<ir::CpuAttentionParams>();
  const int64_t bs = p.block_size, head = p.head_size, hkv = p.head_count_kv;
  const Kernel kernel = compile_x86(spec, target, config);
  auto made = test::make_case(spec, 10, InputKind::kNormal, 31);
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  test::OpCase c = std::move(made).value();
  const int64_t requests = c.tensors[5].tensor().size(0);
  const int64_t max_blocks = c.tensors[7].tensor().size(1);
  const auto left = int64_t(c.scalars[1]);
  const auto right = int64_t(c.scalars[2]);
  const auto poison = [&](int64_t r, int64_t j) {
    const auto block = int64_t(c.tensors[7].get(r * max_blocks + j / bs));
    for (int64_t g = 0; g < hkv; ++g) {
      for (int64_t d = 0; d < head; ++d) {
        const int64_t flat =
            (block * hkv + g) * bs * head + slab_index(p.isa, false, j % bs, d, bs, head);
        const int64_t kind = d % 3;  // +inf, −inf, NaN
        switch (p.kv) {
          case ir::KvCacheDtype::kFp8E5m2:
            c.tensors[2].set_bits(flat, kind == 0 ? 0x7C : kind == 1 ? 0xFC : 0x7E);
            break;
          case ir::KvCacheDtype::kFp8E4m3: c.tensors[2].set_bits(flat, 0x7F); break;
          default:
            c.tensors[2].set(
                flat, kind == 2 ? std::nan("") : std::copysign(HUGE_VAL, kind == 0 ? 1.0 : -1.0));
        }
      }
    }
  };
  int poisoned = 0;
  for (int64_t r = 0; r < requests; ++r) {
    const auto seq_len = int64_t(c.tensors[5].get(r));
    const auto q_len = int64_t(c.tensors[4].get(r + 1) - c.tensors[4].get(r));
    if (p.causal && q_len >= 2) {
      poison(r, seq_len - 1);
      ++poisoned;
    }
    const int64_t last = p.causal ? seq_len - 1 : q_len - 1;  // the last token's position
    if (left >= 0 && last - left - 1 >= 0) {
      poison(r, last - left - 1);
      ++poisoned;
    }
    if (right >= 0 && q_len >= 2 && right + 1 < seq_len) {
      poison(r, right + 1);  // past the first token's window (position 0), in the second's
      ++poisoned;
    }
  }
  ASSERT_GE(poisoned, 3);
  const auto report = check_against_ref(kernel, c);
  EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(target)
                         << " config=" << config.to_string() << "\n"
                         << report.message;
}

TEST_P(X86AttentionTest, NonFiniteValuesAtMaskedKeysNeverReachTheirRows) {
  const bool dot = GetParam() >= X86Isa::kAvx512Bf16;
  for (bool causal : {true, false}) {
    const Features f{.causal = causal, .window = true};
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      check_non_finite_at_masked_keys(attention_spec(CpuAttnIsa::kVec, dtype, 64, 32, 8, 2, f),
                                      GetParam());
    }
    if (dot) {
      check_non_finite_at_masked_keys(
          attention_spec(CpuAttnIsa::kVec, DType::kBF16, 64, 32, 8, 2, f), GetParam(),
          Config().set("dpbf16", 0));
    }
    check_non_finite_at_masked_keys(
        attention_spec(CpuAttnIsa::kVec16, DType::kBF16, 40, 16, 4, 1, f), GetParam(), kForceSplit);
    for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
      for (const Config& decode : kFp8Decodes) {  // the non-finite codes decoded either way
        check_non_finite_at_masked_keys(fp8_spec(kv, DType::kBF16, 64, 32, 8, 2, f), GetParam(),
                                        decode);
      }
    }
  }
}

TEST_P(X86AttentionTest, NanPastSequenceNeverRead) {
  check_nan_past_sequence(CpuAttnIsa::kVec, GetParam());
}

// ---- any head size (vec / vec16 layouts; vLLM has 32·k and 16·k only) -----------------------
// Head sizes off vLLM's list run with the same slab formulas: the Q·Kᵀ dim rest after the
// unrolled loop, an odd last dim paired with zero (vdpbf16ps), and P·V / accumulator chunks
// that do not fill their last vector read and write under masks (AVX-512 k-masks, AVX2
// vmaskmovps or staged tails). Every dtype, so every tail load (f32, f16, bf16) is exercised.

TEST_P(X86AttentionTest, AnyHeadSizeSmall) {
  // 1..17: every tail of a ymm (8 lanes) and a zmm (16 lanes), and one past.
  for (int64_t head = 1; head <= 17; ++head) {
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      check(attention_spec(CpuAttnIsa::kVec, dtype, head, 32, 4, 1), GetParam(), 3, {},
            {InputKind::kNormal});
    }
    check(attention_spec(CpuAttnIsa::kVec16, DType::kBF16, head, 16, 8, 1), GetParam(), 3, {},
          {InputKind::kNormal});
  }
}

TEST_P(X86AttentionTest, AnyHeadSizeGridGqaBlocks) {
  // GQA 1, 4 and 8; block 32 (vec) and 16 (vec16); every input kind on bf16, normal on f32.
  for (int64_t head : {40, 57, 72, 100}) {
    for (auto [hq, hkv] : {std::pair{4, 4}, {8, 2}, {8, 1}}) {
      check(attention_spec(CpuAttnIsa::kVec, DType::kBF16, head, 32, hq, hkv), GetParam(), 4);
      check(attention_spec(CpuAttnIsa::kVec16, DType::kBF16, head, 16, hq, hkv), GetParam(), 4);
    }
    check(attention_spec(CpuAttnIsa::kVec, DType::kF32, head, 32, 8, 2), GetParam(), 4, {},
          {InputKind::kNormal});
    check(attention_spec(CpuAttnIsa::kVec16, DType::kF16, head, 16, 8, 1), GetParam(), 4, {},
          {InputKind::kNormal});
  }
}

TEST_P(X86AttentionTest, AnyHeadSizeFeaturesAndPartitions) {
  const Features all_causal{true, true, true, true, true};
  const Features all_bidirectional{false, true, true, true, true};
  for (int64_t head : {40, 57, 100}) {
    for (const Features& f : {all_causal, all_bidirectional}) {
      check(attention_spec(CpuAttnIsa::kVec, DType::kBF16, head, 32, 8, 1, f), GetParam(), 5);
      check(attention_spec(CpuAttnIsa::kVec16, DType::kF32, head, 16, 8, 2, f), GetParam(), 4, {},
            {InputKind::kNormal});
    }
    for (const Config& config : {kForceSplit, kNoSplit}) {
      check(attention_spec(CpuAttnIsa::kVec, DType::kBF16, head, 32, 8, 2, {.sinks = true}),
            GetParam(), 6, config, {InputKind::kNormal});
    }
  }
}

TEST_P(X86AttentionTest, AnyHeadSizeNanPastSequenceNeverRead) {
  for (int64_t head : {5, 40, 57, 100}) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      check_nan_past_sequence(attention_spec(CpuAttnIsa::kVec, dtype, head, 32, 8, 2), GetParam());
      check_nan_past_sequence(attention_spec(CpuAttnIsa::kVec16, dtype, head, 16, 4, 1),
                              GetParam());
    }
  }
}

TEST_P(X86AttentionTest, AnyHeadSizeCacheWriteBitExact) {
  for (CpuAttnIsa isa : {CpuAttnIsa::kVec, CpuAttnIsa::kVec16}) {
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      for (int64_t head : {1, 3, 7, 17, 40, 57, 72, 100}) {
        const OpSpec spec = OpSpec::make(
            OpKind::kCpuAttnReshapeAndCache,
            ir::CpuAttnCacheWriteParams{isa, dtype, 2, head, isa == CpuAttnIsa::kVec16 ? 16 : 32});
        const Kernel kernel = compile_x86(spec, GetParam());
        for (InputKind kind : test::input_kinds_for(spec.op)) {
          auto c = test::make_case(spec, 37, kind, 9);
          ASSERT_TRUE(c.is_ok()) << c.status().to_string();
          const auto report = check_against_ref(kernel, c.value());
          EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(GetParam()) << "\n"
                                 << report.message;
        }
      }
    }
  }
}

TEST_P(X86AttentionTest, RejectsForeignMetadata) {
  const OpSpec spec = attention_spec(CpuAttnIsa::kVec, DType::kBF16, 64, 32, 8, 2);
  const Kernel kernel = compile_x86(spec, GetParam());
  auto made = test::make_case(spec, 3, InputKind::kNormal, 5);
  ASSERT_TRUE(made.is_ok());
  test::OpCase c = std::move(made).value();
  c.tensors[5].set(0, 2.0);  // seq_lens changed after the metadata was built
  const Status s = kernel.run(c.args());
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("scheduler_metadata"), std::string::npos) << s.message();
}

TEST_P(X86AttentionTest, CacheWriteBitExact) {
  for (CpuAttnIsa isa : {CpuAttnIsa::kVec, CpuAttnIsa::kVec16, CpuAttnIsa::kAmx}) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      for (int64_t head : {16, 64, 80}) {
        if (isa != CpuAttnIsa::kVec16 && head % 32 != 0) continue;
        if (isa == CpuAttnIsa::kAmx && dtype != DType::kBF16) continue;  // amx: bf16 only
        const OpSpec spec =
            OpSpec::make(OpKind::kCpuAttnReshapeAndCache,
                         ir::CpuAttnCacheWriteParams{isa, dtype, 2, head,
                                                     isa == CpuAttnIsa::kVec16 ? 16
                                                     : isa == CpuAttnIsa::kAmx ? 64
                                                                               : 32});
        const Kernel kernel = compile_x86(spec, GetParam());
        for (InputKind kind : test::input_kinds_for(spec.op)) {
          auto c = test::make_case(spec, 37, kind, 9);
          ASSERT_TRUE(c.is_ok()) << c.status().to_string();
          const auto report = check_against_ref(kernel, c.value());
          EXPECT_TRUE(report.ok) << to_string(spec) << "\n" << report.message;
        }
      }
    }
  }
}

// cpu_attn_reshape_and_cache's whole blocks (a prefill's consecutive slots of a block, written
// head slab by head slab; attention_cache.cc) on every ISA path of the host up to avx512_fp16
// (the K slab by gathers, or by in-register transposes on AVX2, for fp8 without VBMI and for
// 16- and 32-bit keys at avx512_vbmi; amx
// emits the same cache-write code): vec (bs 32), vec16 (bs 16) and
// amx (bs 64, bf16, heads 64 and 128) slabs, f32/f16/bf16 and fp8 e4m3/e5m2, head sizes whose K
// columns are whole dwords and one that is not (57: the per-token path); token groups of whole
// blocks, one with a padding row, one with two rows swapped, one across two blocks, and a partial
// last block, in 1- and 2-thread calls.
TEST(X86AttentionCacheWrite, WholeBlocksMatchRef) {
  const Config parallel = Config().set("threads", 2);
  for (X86Isa target : test::isa_paths({X86Isa::kAvx2, X86Isa::kAvx512, X86Isa::kAvx512Bf16,
                                        X86Isa::kAvx512Vbmi, X86Isa::kAvx512Fp16})) {
    for (CpuAttnIsa isa : {CpuAttnIsa::kVec, CpuAttnIsa::kVec16, CpuAttnIsa::kAmx}) {
      const int64_t bs = isa == CpuAttnIsa::kVec16 ? 16 : isa == CpuAttnIsa::kAmx ? 64 : 32;
      for (ir::KvCacheDtype kv :
           {ir::KvCacheDtype::kAuto, ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
        if (kv != ir::KvCacheDtype::kAuto && isa != CpuAttnIsa::kVec) continue;
        for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
          if (isa == CpuAttnIsa::kAmx && dtype != DType::kBF16) continue;  // amx: bf16 only
          for (int64_t head : {8, 40, 57, 128, 64}) {
            if (isa == CpuAttnIsa::kAmx ? head % 32 != 0 : head == 64) continue;
            const OpSpec spec =
                OpSpec::make(OpKind::kCpuAttnReshapeAndCache,
                             ir::CpuAttnCacheWriteParams{isa, dtype, 3, head, bs, kv});
            for (const Config& config : {Config(), parallel}) {
              const Kernel kernel = compile_x86(spec, target, config);
              const int64_t tokens = 6 * bs + 5;
              auto made = test::make_case(spec, tokens, InputKind::kNormal, uint64_t(head) + 3);
              ASSERT_TRUE(made.is_ok()) << made.status().to_string();
              test::OpCase c = std::move(made).value();
              const int64_t blocks = c.tensors[2].tensor().size(0);
              ASSERT_GE(blocks, 8) << "the case's cache is too small for this test";
              const auto block_of = [&](int64_t g) { return blocks - 1 - g; };
              for (int64_t t = 0; t < tokens; ++t) {
                c.tensors[4].set(t, double(block_of(t / bs) * bs + t % bs));
              }
              c.tensors[4].set(bs + 7, -1.0);  // group 1: a padding row inside
              const double a = c.tensors[4].get(2 * bs + 3), b = c.tensors[4].get(2 * bs + 4);
              c.tensors[4].set(2 * bs + 3, b);  // group 2: two rows swapped
              c.tensors[4].set(2 * bs + 4, a);
              for (int64_t i = 0; i < bs; ++i) {  // group 3: the halves of two blocks
                const int64_t slot = block_of(3) * bs + bs / 2 + i;
                c.tensors[4].set(3 * bs + i,
                                 double(i < bs / 2 ? slot : block_of(7) * bs + i - bs / 2));
              }
              const auto report = check_against_ref(kernel, c);
              EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(target)
                                     << " config=" << config.to_string() << "\n"
                                     << report.message;
            }
          }
        }
      }
    }
  }
}

// Whole blocks in calls that write >= 1 MiB: the K slab's pieces and the V rows as streaming
// stores into 64-byte aligned caches, ordinary stores (the per-token path) into caches 16 bytes
// off; 4 KV heads x 128, bs 32, a prefill's slot mapping with a padding row and a partial last
// block; bf16 and f32, auto / e4m3 / e5m2 (scales 1.0 and 0.037) in vec slabs, bf16 in amx
// slabs (AVX-512), against the ref; on AVX2 and AVX-512 (gathers, or in-register transposes).
TEST(X86AttentionCacheWrite, LargeCallsStreamWholeBlocksMatchRef) {
  constexpr int64_t kH = 4, kD = 128, kBs = 32, kTokens = 1300, kBlocks = kTokens / kBs + 3;
  std::mt19937_64 rng(11);
  std::vector<int64_t> order(static_cast<size_t>(kBlocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int64_t> slots(static_cast<size_t>(kTokens));
  for (int64_t t = 0; t < kTokens; ++t) slots[size_t(t)] = order[size_t(t / kBs)] * kBs + t % kBs;
  slots[size_t(5 * kBs + 9)] = -1;
  CompileOptions ref_options;
  ref_options.backend = BackendKind::kRef;
  for (X86Isa target : test::isa_paths(
           {X86Isa::kAvx2, X86Isa::kAvx512, X86Isa::kAvx512Vbmi, X86Isa::kAvx512Fp16})) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      const size_t esize = dtype_size(dtype);
      std::vector<uint8_t> key = test::random_rows(dtype, size_t(kTokens * kH * kD), rng);
      std::vector<uint8_t> value = test::random_rows(dtype, key.size() / esize, rng);
      for (auto [layout, kv] : {std::pair{CpuAttnIsa::kVec, ir::KvCacheDtype::kAuto},
                                {CpuAttnIsa::kVec, ir::KvCacheDtype::kFp8E4m3},
                                {CpuAttnIsa::kVec, ir::KvCacheDtype::kFp8E5m2},
                                {CpuAttnIsa::kAmx, ir::KvCacheDtype::kAuto}}) {
        if (layout == CpuAttnIsa::kAmx && (dtype != DType::kBF16 || target < X86Isa::kAvx512)) {
          continue;  // amx: bf16 slabs, written by the AVX-512 levels
        }
        const OpSpec spec =
            OpSpec::make(OpKind::kCpuAttnReshapeAndCache,
                         ir::CpuAttnCacheWriteParams{layout, dtype, kH, kD, kBs, kv});
        const Kernel kernel = compile_x86(spec, target, Config().set("threads", 1));
        auto ref = test_runtime().compile(spec, ref_options);
        ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
        const bool fp8 = kv != ir::KvCacheDtype::kAuto;
        const DType cdt = fp8 ? DType::kU8 : dtype;
        const size_t cache_bytes = size_t(kBlocks * kH * kBs * kD) * (fp8 ? 1 : esize);
        for (size_t misalign : {size_t(0), size_t(16)}) {
          for (double scale : fp8 ? std::vector<double>{1.0, 0.037} : std::vector<double>{1.0}) {
            // [x86 key, x86 value, ref key, ref value], each 64-byte aligned + misalign
            const test::OffsetBuffers buffers = test::offset_buffers(4, cache_bytes, misalign);
            const std::vector<uint8_t*>& caches = buffers.at;
            auto args = [&](uint8_t* kc, uint8_t* vc) {
              KernelArgs a(
                  {Tensor(key.data(), dtype, {kTokens, kH, kD}),
                   Tensor(value.data(), dtype, {kTokens, kH, kD}),
                   Tensor(kc, cdt, {kBlocks, kH, kBs, kD}), Tensor(vc, cdt, {kBlocks, kH, kBs, kD}),
                   Tensor(slots.data(), DType::kI64, {kTokens})},
                  {});
              if (fp8) a.add_scalar(scale).add_scalar(scale * 3);
              return a;
            };
            ASSERT_TRUE(kernel.run(args(caches[0], caches[1])).is_ok());
            ASSERT_TRUE(ref.value().run(args(caches[2], caches[3])).is_ok());
            EXPECT_EQ(std::memcmp(caches[0], caches[2], cache_bytes), 0)
                << to_string(spec) << " isa=" << x86_isa_name(target) << " misalign=" << misalign
                << " scale=" << scale << " (key cache)";
            EXPECT_EQ(std::memcmp(caches[1], caches[3], cache_bytes), 0)
                << to_string(spec) << " isa=" << x86_isa_name(target) << " misalign=" << misalign
                << " scale=" << scale << " (value cache)";
          }
        }
      }
    }
  }
}

// ---- fp8 KV caches (spec §3.6: isa=vec; stored fp8(x / scale), read fp8·scale) --------------

// Every path this host runs (AVX2 ymm, AVX-512 fp32; fp8 never takes vdpbf16ps: the decoded
// keys are fp32) against the ref reading the same codes: dtypes, heads, blocks, GQA, every
// feature, split and unsplit partitions.
TEST_P(X86AttentionTest, Fp8KvCache) {
  for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
    for (const Config& decode : kFp8Decodes) {
      for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
        check(fp8_spec(kv, dtype, 64, 32, 8, 2), GetParam(), 5, decode);
      }
      for (int64_t head : {32, 128, 256}) {
        check(fp8_spec(kv, DType::kBF16, head, 64, 4, 4), GetParam(), 4, decode,
              {InputKind::kNormal});
      }
      check(fp8_spec(kv, DType::kBF16, 64, 128, 9, 3), GetParam(), 4, decode, {InputKind::kNormal});
      check(fp8_spec(kv, DType::kBF16, 96, 32, 16, 1, {true, true, true, true, true}), GetParam(),
            5, decode);
      check(fp8_spec(kv, DType::kF32, 64, 32, 8, 2, {false, true, true, true, true}), GetParam(), 5,
            decode);
      for (const Config& split : {kForceSplit, kNoSplit}) {
        Config config = split;
        for (const auto& [name, value] : decode.knobs) config.set(name, value);
        check(fp8_spec(kv, DType::kBF16, 128, 32, 8, 1, {.sinks = true}), GetParam(), 6, config);
      }
    }
    // Prefill-sized calls (many passes over each KV tile, several tiles) and a tile that starts
    // inside a block (kv_tile 48 at block 32): each tile decodes the blocks it touches.
    for (const Config& decode : kFp8Decodes) {
      Config config = decode;
      config.set("kv_tile", 48);
      check(fp8_spec(kv, DType::kBF16, 64, 32, 8, 2, {.causal = true, .window = true}), GetParam(),
            2, config, {InputKind::kNormal});
    }
  }
}

// jit::compile of `spec` on the x86 backend with `config` fails, and its message holds
// `fragment` (the knob and its value).
void expect_compile_refused(const OpSpec& spec, const Config& config, std::string_view fragment) {
  CompileOptions options;
  options.backend = BackendKind::kX86;
  options.config = config;
  auto kernel = test_runtime().compile(spec, options);
  ASSERT_FALSE(kernel.is_ok()) << to_string(spec) << " config=" << config.to_string();
  EXPECT_NE(kernel.status().to_string().find(fragment), std::string::npos)
      << kernel.status().to_string();
}

// The two ways the fp32 path decodes an fp8 cache: by tiles in the runner (predecode=1, the
// kernel reads bf16 words) and in the kernel's every pass (0).
TEST(X86AttentionConfig, PredecodeKnobChecksAndTuningSpace) {
  if (detect_host_x86_isa() < X86Isa::kAvx2) GTEST_SKIP() << "no AVX2: no x86 attention here";
  const OpSpec fp8 = fp8_spec(ir::KvCacheDtype::kFp8E4m3, DType::kBF16, 64, 32, 8, 1);
  const OpSpec bf16 = attention_spec(CpuAttnIsa::kVec, DType::kBF16, 64, 32, 8, 1, {});
  expect_compile_refused(bf16, Config().set("predecode", 1), "predecode=1 needs an fp8 cache");
  expect_compile_refused(fp8, Config().set("predecode", 2), "predecode=2: allowed values are 1");
  // Default: by tiles where the GQA group takes more than one pass of the kernel's rows.
  const X86Isa isa = detect_host_x86_isa();
  const int64_t rows = codegen::x86::attention_max_rows(fp8, isa);
  EXPECT_EQ(codegen::x86::attention_predecodes_fp8(fp8, Config{}, isa), 8 > rows);
  EXPECT_FALSE(codegen::x86::attention_predecodes_fp8(bf16, Config{}, isa));
  // One pass per task (q_passes 1): each task would decode its tile for itself.
  EXPECT_FALSE(codegen::x86::attention_predecodes_fp8(fp8, Config().set("q_passes", 1), isa));
  // The artifact records the way its code decodes (the runner built at load follows it).
  CompileOptions options;
  options.backend = BackendKind::kX86;
  options.config = Config().set("threads", 1);
  auto kernel = Runtime::global().compile(fp8, options);
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  EXPECT_EQ(kernel->info().config.get("predecode", -1), 8 > rows ? 1 : 0)
      << kernel->info().config.to_string();
  // The tuning space offers the other way.
  Target target;
  target.backend = BackendKind::kX86;
  target.isa = isa;
  const std::vector<Config> space = codegen::x86::cpu_attention_configs(fp8, target);
  const int64_t other = 8 > rows ? 0 : 1;
  EXPECT_TRUE(std::find(space.begin(), space.end(), Config().set("predecode", other)) !=
              space.end());
}

// Every fp8 code through P·V, exactly: all keys 0 (every logit 0, so every probability is 1
// before the normalisation), every value row the same 128 codes (base .. base + 127), v_scale
// 1: each output element is decode(code) exactly (NaN codes: NaN), on every arithmetic path
// of the ISA (vdpbf16ps: codes decoded to bf16 words; fp32 path), the e5m2 infinities
// included (the causally masked keys that hold one go to the runner's exact path).
TEST_P(X86AttentionTest, Fp8EveryCodeDecodesExactly) {
  const bool dot = GetParam() >= X86Isa::kAvx512Bf16;
  for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
    const OpSpec spec = fp8_spec(kv, DType::kBF16, 128, 32, 8, 2);
    // vdpbf16ps (dot hosts), then the fp32 path with the kernel's decode and with the runner's.
    std::vector<Config> configs = {Config().set("predecode", 0), Config().set("predecode", 1)};
    if (dot) configs.insert(configs.begin(), Config().set("dpbf16", 1));
    for (const Config& config : configs) {
      const Kernel kernel = compile_x86(spec, GetParam(), config);
      for (uint32_t base : {0u, 128u}) {
        auto c = test::make_case(spec, 3, InputKind::kNormal, 17);
        ASSERT_TRUE(c.is_ok()) << c.status().to_string();
        test::HostTensor& keys = c->tensors[1];
        test::HostTensor& values = c->tensors[2];
        for (int64_t i = 0; i < keys.numel(); ++i) keys.set_bits(i, 0);
        for (int64_t i = 0; i < values.numel(); ++i) {
          values.set_bits(i, (base + uint32_t(i % 128)) & 0xFF);
        }
        c->scalars[5] = 1.0;  // v_scale
        c->tolerances = {test::Tolerance::exact()};
        const auto report = check_against_ref(kernel, c.value());
        EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(GetParam())
                               << " config=" << config.to_string() << " codes " << base << ".."
                               << base + 127 << "\n"
                               << report.message;
      }
    }
  }
}

// fp8 caches at head sizes off vLLM's list: the masked fp8 tail loads of P·V.
TEST_P(X86AttentionTest, Fp8KvCacheAnyHeadSize) {
  for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
    for (int64_t head : {1, 9, 40, 57, 100}) {
      check(fp8_spec(kv, DType::kBF16, head, 32, 8, 2), GetParam(), 4, {}, {InputKind::kNormal});
    }
    check(fp8_spec(kv, DType::kF32, 72, 32, 8, 1, {true, true, true, true, true}), GetParam(), 5);
    check(fp8_spec(kv, DType::kF16, 57, 32, 4, 4, {false, true, true, true, true}), GetParam(), 5);
    check(fp8_spec(kv, DType::kBF16, 40, 32, 8, 1, {.sinks = true}), GetParam(), 6, kForceSplit);
  }
}

// The fp8 cache write (the cache writers' quantiser) is bit-exact with the ref for every input
// kind, specials and out-of-range values included; any head size (the D % lanes tail, rows
// shorter than one 64-value step); the case's scales, then each class of the quantiser's steps:
// powers of two (1.0, 2^-7: the 16-bit lanes for bf16), short reciprocals (0.02) and full-width
// ones (3.1 / 448).
void check_fp8_cache_write_bit_exact(X86Isa isa) {
  for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      for (int64_t head : {1, 7, 32, 57, 64, 100, 256}) {
        const OpSpec spec =
            OpSpec::make(OpKind::kCpuAttnReshapeAndCache,
                         ir::CpuAttnCacheWriteParams{CpuAttnIsa::kVec, dtype, 2, head, 32, kv});
        const Kernel kernel = compile_x86(spec, isa);
        for (InputKind kind : test::input_kinds_for(spec.op)) {
          for (double scale : {0.0, 1.0, 0x1p-7, 0.02, 3.1 / 448}) {  // 0: the case's own
            auto c = test::make_case(spec, 37, kind, 9);
            ASSERT_TRUE(c.is_ok()) << c.status().to_string();
            if (scale != 0.0) c->scalars = {scale, scale * 2};
            const auto report = check_against_ref(kernel, c.value());
            EXPECT_TRUE(report.ok)
                << to_string(spec) << " isa=" << x86_isa_name(isa)
                << " inputs=" << test::input_kind_name(kind) << " scale=" << scale << "\n"
                << report.message;
          }
        }
      }
    }
  }
}

TEST_P(X86AttentionTest, Fp8CacheWriteBitExact) {
  check_fp8_cache_write_bit_exact(GetParam());
}

// The same at the levels where bf16 rows at scales that are not powers of two take the
// quantiser's mantissa table (avx512_vbmi) and powers of two its 16-bit steps (avx512_fp16;
// amx emits the same cache-write code).
TEST(X86AttentionQuantiserLevels, Fp8CacheWriteBitExact) {
  const std::vector<X86Isa> levels = test::isa_paths({X86Isa::kAvx512Vbmi, X86Isa::kAvx512Fp16});
  if (levels.empty()) {
    GTEST_SKIP() << "host CPU has no AVX512_VBMI: the fast quantiser's cache-write steps are not "
                    "run here";
  }
  for (X86Isa isa : levels) check_fp8_cache_write_bit_exact(isa);
}

// NaN codes in every slot past a request's seq_len: never read (as for the bf16 caches).
void check_fp8_nan_past_sequence(int64_t head, X86Isa target) {
  check_nan_past_sequence(fp8_spec(ir::KvCacheDtype::kFp8E4m3, DType::kBF16, head, 32, 8, 2),
                          target);
}

TEST_P(X86AttentionTest, Fp8NanPastSequenceNeverRead) {
  for (int64_t head : {64, 57}) check_fp8_nan_past_sequence(head, GetParam());
}

// vLLM's own fp8 test (spec §3.6): the fp8 cache's output against the same op over the bf16
// cache it was quantised from, atol 0.2 (e4m3) / 0.3 (e5m2), rtol 0.1. The quantisation is
// element-wise, so it is applied to the slabs directly (the layout is a permutation).
TEST_P(X86AttentionTest, Fp8CloseToTheBf16CacheAsInVllmsTest) {
  const double k_scale = 0.5, v_scale = 0.25;
  for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
    const OpSpec bf16 = attention_spec(CpuAttnIsa::kVec, DType::kBF16, 128, 32, 8, 2);
    const OpSpec fp8 = fp8_spec(kv, DType::kBF16, 128, 32, 8, 2);
    auto made = test::make_case(bf16, 6, InputKind::kNormal, 17);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    test::OpCase c = std::move(made).value();
    test::OpCase c8 = c;
    for (int t : {1, 2}) {
      const test::HostTensor& src = c.tensors[size_t(t)];
      test::HostTensor q = test::HostTensor::strided(ir::cpu_attn_cache_dtype(DType::kBF16, kv),
                                                     src.sizes(), src.strides());
      const float scale = float(t == 1 ? k_scale : v_scale);
      for (int64_t i = 0; i < src.numel(); ++i) q.set(i, src.get_float(i) / scale);
      c8.tensors[size_t(t)] = q;
    }
    c8.scalars.push_back(k_scale);
    c8.scalars.push_back(v_scale);
    ASSERT_TRUE(compile_x86(bf16, GetParam()).run(c.args()).is_ok());
    ASSERT_TRUE(compile_x86(fp8, GetParam()).run(c8.args()).is_ok());
    const double atol = kv == ir::KvCacheDtype::kFp8E4m3 ? 0.2 : 0.3;
    const test::CompareResult r =
        test::compare(c8.tensors[3], c.tensors[3], test::Tolerance::abs_rel(atol, 0.1));
    EXPECT_TRUE(r.ok()) << enum_name(kv) << " isa=" << x86_isa_name(GetParam()) << ": "
                        << r.message;
    // Not vacuous: the fp8 output does differ from the bf16 one.
    EXPECT_GT(test::compare(c8.tensors[3], c.tensors[3], test::Tolerance::exact()).mismatches, 0);
  }
}

// Every finite fp8 code of magnitude <= 4 (subnormals, the smallest normals, both signs) in
// the keys and values decodes exactly on every path: codes cycle through the cache slots of
// a few requests and the output must match the ref's.
TEST_P(X86AttentionTest, Fp8SmallCodesDecodeExactly) {
  for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
    const DType format = ir::cpu_attn_cache_dtype(DType::kBF16, kv);
    std::vector<uint8_t> codes;
    for (int code = 0; code < 256; ++code) {
      const float v = format == DType::kFp8E5m2 ? numeric::fp8_e5m2_to_f32(uint8_t(code))
                                                : numeric::fp8_e4m3_to_f32(uint8_t(code));
      if (std::isfinite(v) && std::fabs(v) <= 4.0f) codes.push_back(uint8_t(code));
    }
    for (int64_t head : {16, 57}) {
      const OpSpec spec = fp8_spec(kv, DType::kBF16, head, 32, 4, 1);
      const Kernel kernel = compile_x86(spec, GetParam());
      auto made = test::make_case(spec, 3, InputKind::kNormal, 31);
      ASSERT_TRUE(made.is_ok()) << made.status().to_string();
      test::OpCase c = std::move(made).value();
      for (int t : {1, 2}) {
        const Tensor view = c.tensors[size_t(t)].tensor();
        auto* bytes = static_cast<uint8_t*>(view.data());
        for (int64_t i = 0; i < view.numel(); ++i) {
          bytes[test::element_offset(view, i)] = codes[size_t(i * 37 + t) % codes.size()];
        }
      }
      const auto report = check_against_ref(kernel, c);
      EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(GetParam()) << "\n"
                             << report.message;
    }
  }
}

// fp8 with the amx layout is valid IR (vLLM has it) but not generated here: a clear no.
TEST(X86AttentionFp8, AmxLayoutRejectedWithReason) {
  for (OpKind op : {OpKind::kCpuAttentionWithKvCache, OpKind::kCpuAttnReshapeAndCache}) {
    const OpSpec spec =
        op == OpKind::kCpuAttentionWithKvCache
            ? OpSpec::make(op, ir::CpuAttentionParams{CpuAttnIsa::kAmx, DType::kBF16, 64, 32, 8, 2,
                                                      true, false, false, false, false,
                                                      ir::KvCacheDtype::kFp8E4m3})
            : OpSpec::make(op, ir::CpuAttnCacheWriteParams{CpuAttnIsa::kAmx, DType::kBF16, 2, 64,
                                                           32, ir::KvCacheDtype::kFp8E5m2});
    ASSERT_TRUE(validate(spec).is_ok()) << validate(spec).to_string();
    CompileOptions options;
    options.backend = BackendKind::kX86;
    options.isa = X86Isa::kAvx2;
    auto kernel = test_runtime().compile(spec, options);
    ASSERT_FALSE(kernel.is_ok()) << to_string(spec);
    EXPECT_NE(kernel.status().to_string().find("isa=amx and kv=fp8"), std::string::npos)
        << kernel.status().to_string();
  }
}

// ---- paged_attention_v1 / v2 ----------------------------------------------------------------

OpSpec paged_spec(bool v2, DType dtype, ir::KvCacheDtype kv, int64_t head, int64_t block,
                  int64_t hq, int64_t hkv, bool alibi, int64_t partition = 512,
                  bool blocksparse = false) {
  return OpSpec::make(v2 ? OpKind::kPagedAttentionV2 : OpKind::kPagedAttentionV1,
                      ir::PagedAttentionParams{dtype, kv, head, block, hq, hkv, alibi, blocksparse,
                                               v2 ? partition : 0});
}

TEST_P(X86AttentionTest, PagedHeadSizesAndBlocks) {
  // Head sizes off the 16 grid (40, 72, 200) run through the zero-padded head.
  for (bool v2 : {false, true}) {
    // v1 every size; v2 (whose sequences are ~10x longer) the off-grid ones and the extremes.
    const std::vector<int64_t> heads =
        v2 ? std::vector<int64_t>{40, 72, 128, 256}
           : std::vector<int64_t>{32, 40, 64, 72, 80, 96, 112, 128, 192, 200, 256};
    for (int64_t head : heads) {
      check(paged_spec(v2, DType::kBF16, ir::KvCacheDtype::kAuto, head, 16, 8, 2, false),
            GetParam(), 6, {}, {InputKind::kNormal});
    }
    for (int64_t block :
         v2 ? std::vector<int64_t>{1, 32} : std::vector<int64_t>{1, 8, 16, 32, 128}) {
      check(paged_spec(v2, DType::kBF16, ir::KvCacheDtype::kAuto, 64, block, 8, 2, false),
            GetParam(), 6, {}, {InputKind::kNormal});
    }
  }
}

TEST_P(X86AttentionTest, PagedDtypesFp8GqaAlibi) {
  for (bool v2 : {false, true}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      // f32 with ALiBi over v2's ~1000-token sequences: logits of |slope|·L ~ 500, held to the
      // harness's tolerance for that magnitude (paged_attention_case).
      check(paged_spec(v2, dtype, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, true), GetParam(), 6);
    }
    for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
      check(paged_spec(v2, DType::kBF16, kv, 128, 16, 8, 1, false), GetParam(), 6);
      check(paged_spec(v2, DType::kF16, kv, 80, 32, 4, 4, true), GetParam(), 6);
    }
    for (auto [hq, hkv] : {std::pair{8, 8}, {8, 1}, {16, 2}, {32, 4}}) {
      check(paged_spec(v2, DType::kBF16, ir::KvCacheDtype::kAuto, 64, 16, hq, hkv, true),
            GetParam(), 6);
    }
  }
  // A small partition: many partitions per sequence in the v2 reduce.
  check(paged_spec(true, DType::kF32, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, true, 64), GetParam(),
        6);
}

// The gather from the legacy layout: 16-bit caches by 8 x 8 transposes, with chunks that start
// inside a block (128-key chunks over blocks of 256: runs from slot 128) and 16-key chunks (the
// chunk knob at 16 over a partition of 144 = 16 · 9: 16-key groups in the tile kernel), and fp8
// by the per-call value tables at both.
TEST_P(X86AttentionTest, PagedChunksInsideBlocks) {
  for (auto [block, partition, chunk] :
       {std::tuple<int64_t, int64_t, int64_t>{256, 256, 0}, {16, 144, 16}}) {
    const Config config = chunk == 0 ? Config{} : Config().set("chunk", chunk);
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      check(paged_spec(true, dtype, ir::KvCacheDtype::kAuto, 72, block, 8, 2, false, partition),
            GetParam(), 6, config);
    }
    check(paged_spec(true, DType::kBF16, ir::KvCacheDtype::kFp8E4m3, 64, block, 8, 2, true,
                     partition),
          GetParam(), 6, config);
  }
}

// Block-sparse mode (§2.5) with the harness's pattern: 2 local sparse blocks of 2 cache blocks,
// vertical stride 3, sliding step −1 (6 sequences: per KV head) and +1 (5: per query head, so
// the rows of a group attend different blocks). v2's ~1000-token sequences mask most sparse
// blocks (whole partitions too: their exp sums count the tokens); block 8 puts several sparse
// blocks in one 128-key chunk (runs that start inside a token group).
TEST_P(X86AttentionTest, PagedBlockSparse) {
  for (bool v2 : {false, true}) {
    for (int64_t requests : {6, 5}) {
      check(paged_spec(v2, DType::kBF16, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, false, 512, true),
            GetParam(), requests, {}, {InputKind::kNormal});
      check(paged_spec(v2, DType::kF16, ir::KvCacheDtype::kAuto, 80, 8, 8, 1, true, 512, true),
            GetParam(), requests, {}, {InputKind::kNormal});
      check(paged_spec(v2, DType::kF32, ir::KvCacheDtype::kAuto, 64, 32, 4, 4, false, 512, true),
            GetParam(), requests, {}, {InputKind::kNormal});
      check(
          paged_spec(v2, DType::kBF16, ir::KvCacheDtype::kFp8E4m3, 128, 16, 16, 2, true, 256, true),
          GetParam(), requests, {}, {InputKind::kNormal});
    }
  }
}

// Block-sparse patterns beyond the harness's, with every key and value of a block that no
// query head of its KV head's group attends set to NaN (§2.5: not read). local 0 leaves rows
// (v1) and partitions (v2: exp sum = the token count) with nothing attended; sliding steps 0
// (one pattern for all heads), +2, +1 (rows of a group attending different blocks: passes of
// some rows) and −3; tp_rank 1; sparse blocks of one cache block and of three; v2 partitions
// of 128.
TEST_P(X86AttentionTest, PagedBlockSparseNeverReadsMaskedBlocks) {
  struct Pattern {
    int64_t tp_rank, local, vert, sparse_blocks, step;
    bool inf = false;  // +inf in a value of each sequence's first block (see below)
  };
  for (bool v2 : {false, true}) {
    for (const Pattern& pat :
         {Pattern{0, 0, 2, 1, 0}, Pattern{1, 1, 3, 3, 2}, Pattern{0, 0, 4, 1, -3},
          Pattern{0, 2, 2, 3, 1}, Pattern{0, 0, 2, 1, 1, true}}) {
      const int64_t block = 16, hq = 8, hkv = 2, group = hq / hkv;
      const OpSpec spec = paged_spec(v2, DType::kBF16, ir::KvCacheDtype::kAuto, 64, block, hq, hkv,
                                     true, 128, true);
      const Kernel kernel = compile_x86(spec, GetParam());
      auto made = test::make_case(spec, 6, InputKind::kNormal, 31);
      ASSERT_TRUE(made.is_ok()) << made.status().to_string();
      test::OpCase c = std::move(made).value();
      const int64_t sb = pat.sparse_blocks * block;
      c.scalars[2] = double(pat.tp_rank);
      c.scalars[3] = double(pat.local);
      c.scalars[4] = double(pat.vert);
      c.scalars[5] = double(sb);
      c.scalars[6] = double(pat.step);
      const int first = v2 ? 4 : 1;
      test::HostTensor& keys = c.tensors[size_t(first + 1)];
      test::HostTensor& values = c.tensors[size_t(first + 2)];
      const test::HostTensor& tables = c.tensors[size_t(first + 3)];
      const test::HostTensor& lens = c.tensors[size_t(first + 4)];
      const int64_t width = tables.tensor().size(1), per_head = 64 * block;
      int poisoned = 0;
      for (int64_t s = 0; s < lens.tensor().size(0); ++s) {
        const auto len = int64_t(lens.get(s));
        for (int64_t g = 0; g < hkv; ++g) {
          for (int64_t j = 0; j < len; j += block) {
            const int64_t kb = j / sb, qb = (len - 1) / sb;
            bool read = false;
            for (int64_t h = g * group; h < (g + 1) * group; ++h) {
              const int64_t off = pat.step >= 0 ? (pat.tp_rank * hq + h) * pat.step + 1
                                                : (pat.tp_rank * hkv + g) * -pat.step + 1;
              read = read || (kb + off) % pat.vert == 0 || kb > qb - pat.local;
            }
            if (read) continue;
            const auto b = int64_t(tables.get(s * width + j / block));
            for (int64_t i = 0; i < per_head; ++i) {
              keys.set((b * hkv + g) * per_head + i, std::nan(""));
              values.set((b * hkv + g) * per_head + i, std::nan(""));
            }
            ++poisoned;
          }
        }
      }
      // The inf pattern: heads of odd and even index attend alternate 16-token sparse blocks,
      // so the run of tokens 16-31 starts inside the first 32-key group, whose keys 0-15 (a
      // run that the other rows attend, with the inf) must not reach its rows as 0·inf.
      for (int64_t s = 0; pat.inf && s < lens.tensor().size(0); ++s) {
        if (int64_t(lens.get(s)) < 2 * block) continue;
        const auto b = int64_t(tables.get(s * width));
        values.set((b * hkv + 0) * per_head + 3 * block + 5,
                   std::numeric_limits<double>::infinity());
      }
      // With a per-query-head pattern (step > 0) the group's 4 heads attend every residue of
      // the stride between them: nothing is masked for all, and rows attend different blocks.
      if (pat.step <= 0) {
        EXPECT_GT(poisoned, 0) << "v2=" << v2 << " step=" << pat.step;
      }
      const auto report = check_against_ref(kernel, c);
      EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(GetParam())
                             << " local=" << pat.local << " vert=" << pat.vert
                             << " sparse_block=" << sb << " step=" << pat.step << "\n"
                             << report.message;
    }
  }
}

// ---- The dpbf16 config knob (vdpbf16ps or the fp32 path for bf16 at AVX512_BF16) -----------

// Both arithmetic paths match the ref (GQA 8 at D 128, a head size with a tail, an odd one,
// softcap + ALiBi, fp8 e4m3 / e5m2 caches with every feature, splits forced and not), and the
// knob changes the kernel (the two codes differ; were it ignored they would be the same bytes).
TEST(X86AttentionConfig, Dpbf16KnobPicksTheArithmeticAndBothMatchRef) {
  const std::vector<X86Isa> paths = test::isa_paths();
  if (std::find(paths.begin(), paths.end(), X86Isa::kAvx512Bf16) == paths.end()) {
    GTEST_SKIP() << "host lacks AVX512_BF16: both knob values need it to run (the refusals "
                    "are tested in BadDpbf16KnobIsAClearError)";
  }
  const Features extras{.causal = true, .alibi = true, .softcap = true};
  for (const OpSpec& spec : {attention_spec(CpuAttnIsa::kVec, DType::kBF16, 128, 32, 32, 4),
                             attention_spec(CpuAttnIsa::kVec, DType::kBF16, 80, 64, 8, 8, extras),
                             attention_spec(CpuAttnIsa::kVec, DType::kBF16, 57, 32, 8, 1),
                             fp8_spec(ir::KvCacheDtype::kFp8E4m3, DType::kBF16, 128, 32, 8, 2),
                             fp8_spec(ir::KvCacheDtype::kFp8E5m2, DType::kBF16, 57, 64, 8, 1,
                                      {true, true, true, true, true})}) {
    auto dot =
        codegen::x86::generate_cpu_attention(spec, Config().set("dpbf16", 1), X86Isa::kAvx512Bf16);
    auto fma =
        codegen::x86::generate_cpu_attention(spec, Config().set("dpbf16", 0), X86Isa::kAvx512Bf16);
    ASSERT_TRUE(dot.is_ok() && fma.is_ok());
    EXPECT_NE(dot.value(), fma.value()) << to_string(spec);
    for (int64_t knob : {0, 1}) {
      check(spec, X86Isa::kAvx512Bf16, 3, Config().set("dpbf16", knob));
      check(spec, X86Isa::kAvx512Bf16, 3, Config(kForceSplit).set("dpbf16", knob));
    }
  }
}

// The knob's default follows the ISA level: bf16 caches take vdpbf16ps at avx512_bf16 and
// avx512_vbmi (Cooper Lake, AMD Zen 4/5) and the fp32 path at avx512_fp16 and amx (Intel cores
// whose zmm vdpbf16ps holds both vector ports for two cycles); fp8 caches the fp32 path
// everywhere. The default's code is the code of the knob it stands for, byte for byte.
TEST(X86AttentionConfig, DefaultArithmeticFollowsTheIsaLevel) {
  const OpSpec bf16 = attention_spec(CpuAttnIsa::kVec, DType::kBF16, 128, 32, 8, 1);
  const OpSpec fp8 = fp8_spec(ir::KvCacheDtype::kFp8E4m3, DType::kBF16, 128, 32, 8, 2);
  const std::pair<X86Isa, int64_t> expected[] = {{X86Isa::kAvx512Bf16, 1},
                                                 {X86Isa::kAvx512Vbmi, 1},
                                                 {X86Isa::kAvx512Fp16, 0},
                                                 {X86Isa::kAmx, 0}};
  for (const auto& [isa, dot] : expected) {
    SCOPED_TRACE(x86_isa_name(isa));
    EXPECT_EQ(codegen::x86::attention_default_dpbf16(bf16, isa), dot);
    EXPECT_EQ(codegen::x86::attention_default_dpbf16(fp8, isa), 0);
    EXPECT_EQ(codegen::x86::attention_uses_dpbf16(bf16, Config{}, isa), dot == 1);
    auto by_default = codegen::x86::generate_cpu_attention(bf16, Config{}, isa);
    auto by_knob = codegen::x86::generate_cpu_attention(bf16, Config().set("dpbf16", dot), isa);
    ASSERT_TRUE(by_default.is_ok() && by_knob.is_ok());
    EXPECT_EQ(by_default.value(), by_knob.value());
  }
}

// A value outside {0, 1}, dpbf16=1 where vdpbf16ps does not serve the spec, and dpbf16=0 for
// the amx layout are refused with the knob's name and what is allowed, through the generator
// and through jit::compile.
TEST(X86AttentionConfig, BadDpbf16KnobIsAClearError) {
  const OpSpec bf16 = attention_spec(CpuAttnIsa::kVec, DType::kBF16, 128, 32, 8, 1);
  const OpSpec f16 = attention_spec(CpuAttnIsa::kVec, DType::kF16, 128, 32, 8, 1);
  const OpSpec amx = attention_spec(CpuAttnIsa::kAmx, DType::kBF16, 128, 32, 8, 1);
  const auto expect_refused = [](const OpSpec& spec, int64_t knob, X86Isa isa,
                                 std::string_view fragment) {
    auto code = codegen::x86::generate_cpu_attention(spec, Config().set("dpbf16", knob), isa);
    ASSERT_FALSE(code.is_ok()) << to_string(spec) << " dpbf16=" << knob;
    const std::string message = code.status().to_string();
    EXPECT_NE(message.find("dpbf16"), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  };
  expect_refused(bf16, 2, X86Isa::kAvx512Bf16, "allowed values are 1 (vdpbf16ps) and 0");
  expect_refused(bf16, -3, X86Isa::kAvx512Bf16, "allowed values are 1 (vdpbf16ps) and 0");
  expect_refused(f16, 1, X86Isa::kAvx512Bf16, "dtype=f16");
  expect_refused(bf16, 1, X86Isa::kAvx512, "target avx512");
  expect_refused(amx, 0, X86Isa::kAmx, "isa=amx");
  expect_compile_refused(bf16, Config().set("dpbf16", 7), "dpbf16=7");
}

// paged_attention's chunk knob (here for the gather: keys per gathered chunk, the tile kernel's
// block): every allowed value matches ref on v1 and on v2 (whose partitions the chunk divides),
// with block-sparse runs across chunk edges; other values are refused through the generator and
// jit::compile, naming the knob and the allowed values.
TEST_P(X86AttentionTest, PagedChunkKnobMatchesRef) {
  for (int64_t chunk : {16, 32, 64, 128, 256, 512}) {
    const Config config = Config().set("chunk", chunk);
    // bf16 through the gather (direct=0; the direct kernel's chunks: PagedDirectKernelMatchesRef).
    check(paged_spec(false, DType::kBF16, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, true), GetParam(),
          6, Config(config).set("direct", 0), {InputKind::kNormal});
    if (chunk <= 256) {  // dividing the partition
      check(
          paged_spec(true, DType::kF16, ir::KvCacheDtype::kFp8E4m3, 80, 16, 8, 2, false, 256, true),
          GetParam(), 5, config, {InputKind::kNormal});
    }
  }
}

// The direct kernel (16-bit caches read in place, no gather) against ref where it serves, forced
// by its knob: every row count of a pass (GQA 1 .. 8, and 12 = 8 + 4, 16 = 8 + 8), rows that
// pad to 2, 4 or 8 (3, 5, 6, 7), block sizes 16 and 48 (groups of halves read apart), 32, 64
// and 128 (groups inside one block: value rows read as one line), head sizes 16 .. 256, v1 and
// v2 with partitions of 512 and of three blocks (144 at block 16) in chunks of 16, ALiBi, and the
// sequences' partial last groups (their values staged, NaN in the slots past them); the
// harness's other input kinds (ties, small integers, ...) on the shapes of 6 and 8 query
// heads. Then direct=0 (the gather) on the same specs; chunks of 16 .. 512 keys. AVX2 runs its
// own generator (paged_direct_avx2.cc: 1, 2 or 4 quarters of 8 keys per pass over the dims).
TEST_P(X86AttentionTest, PagedDirectKernelMatchesRef) {
  struct Shape {
    int64_t head, block, hq, hkv;
    bool alibi;
  };
  for (bool v2 : {false, true}) {
    for (const Shape& sh :
         {Shape{64, 16, 8, 8, false}, Shape{128, 16, 8, 1, true}, Shape{80, 32, 6, 2, true},
          Shape{112, 64, 10, 2, false}, Shape{64, 32, 5, 1, true}, Shape{96, 16, 7, 1, false},
          Shape{256, 16, 24, 2, true}, Shape{48, 32, 16, 1, false}, Shape{16, 16, 2, 1, true},
          Shape{64, 48, 6, 1, false}, Shape{256, 128, 8, 1, true}}) {
      // v2: 512 (480 = 10 blocks of 48) and three blocks (48 for block 16 is 144), the small
      // one in chunks of 16 keys (the default would take it in one chunk).
      const int64_t large = 512 / sh.block * sh.block;
      const int64_t small = sh.block == 16 ? 144 : 3 * sh.block;
      for (int64_t partition : v2 ? std::vector<int64_t>{large, small} : std::vector<int64_t>{0}) {
        const OpSpec spec = paged_spec(v2, DType::kBF16, ir::KvCacheDtype::kAuto, sh.head, sh.block,
                                       sh.hq, sh.hkv, sh.alibi, partition);
        const Config direct_config = partition == small ? Config().set("direct", 1).set("chunk", 16)
                                                        : Config().set("direct", 1);
        for (int64_t direct : {1, 0}) {
          check(spec, GetParam(), 6, Config(direct_config).set("direct", direct),
                {InputKind::kNormal});
        }
        if (sh.hq == 8 || sh.hq == 6) check(spec, GetParam(), 6, direct_config);
        // f16 (converted by vcvtph2ps; its values as halves, not by parity) on every other shape.
        if (sh.hq % 2 == 0) {
          check(paged_spec(v2, DType::kF16, ir::KvCacheDtype::kAuto, sh.head, sh.block, sh.hq,
                           sh.hkv, sh.alibi, partition),
                GetParam(), 6, direct_config);
        }
      }
    }
  }
  // Chunks of 16 .. 512 keys: several chunks per sequence (the state rescaled between calls).
  for (int64_t chunk : {16, 32, 64, 128, 256, 512}) {
    for (int64_t block : {16, 32}) {
      check(paged_spec(false, DType::kBF16, ir::KvCacheDtype::kAuto, 64, block, 8, 2, true),
            GetParam(), 6, Config().set("direct", 1).set("chunk", chunk), {InputKind::kNormal});
    }
  }
}

// v2 partitions that no chunk of 16 .. 512 keys divides (a multiple of a block size off the 16
// grid): each partition ends in a partial chunk, and the next partition's first chunk starts
// inside a block and off the token groups. The direct kernel (its stage) and the gather, a
// 16-bit and an fp8 cache, ALiBi, block-sparse, and a chunk knob that does not divide the
// partition (64 keys of 96).
TEST_P(X86AttentionTest, PagedPartitionsOffTheSixteenGrid) {
  struct Shape {
    DType dtype;
    ir::KvCacheDtype kv;
    int64_t head, block, hq, hkv, partition;
    bool alibi, blocksparse;
  };
  for (const Shape& sh :
       {Shape{DType::kBF16, ir::KvCacheDtype::kAuto, 64, 25, 8, 2, 100, true, false},
        Shape{DType::kF16, ir::KvCacheDtype::kAuto, 80, 138, 6, 1, 414, false, false},
        Shape{DType::kBF16, ir::KvCacheDtype::kFp8E4m3, 64, 3, 4, 4, 9, true, false},
        Shape{DType::kF32, ir::KvCacheDtype::kAuto, 48, 7, 4, 2, 21, false, false},
        Shape{DType::kBF16, ir::KvCacheDtype::kAuto, 64, 10, 8, 2, 30, false, true}}) {
    const OpSpec spec = paged_spec(true, sh.dtype, sh.kv, sh.head, sh.block, sh.hq, sh.hkv,
                                   sh.alibi, sh.partition, sh.blocksparse);
    const bool direct_serves =
        codegen::x86::paged_direct_serves(spec.get<ir::PagedAttentionParams>(), GetParam());
    for (int64_t direct : {1, 0}) {
      if (direct == 1 && !direct_serves) continue;
      check(spec, GetParam(), 6, Config().set("direct", direct), {InputKind::kNormal});
    }
  }
  // Multiples of 16 whose default chunk does not divide them either: 144 in one chunk of 256
  // (gather: 128 + 16), 1008 = 16 · 63 in chunks of 512 + 496 (gather: 7 of 128 + 112); one
  // sequence, the harness's long one (three partitions).
  for (int64_t partition : {144, 1008}) {
    const OpSpec spec =
        paged_spec(true, DType::kBF16, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, true, partition);
    for (int64_t direct : {1, 0}) {
      check(spec, GetParam(), 1, Config().set("direct", direct), {InputKind::kNormal});
    }
  }
  check(paged_spec(true, DType::kBF16, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, true, 96), GetParam(),
        6, Config().set("chunk", 64));
}

// The direct kernel on 16-bit caches whose block or head size is off the 16 grid, each chunk
// copied into the stage (one block of the chunk's tokens, the head padded with zero dims), against
// ref and through the gather: blocks 1 (a run per token), 8 and 24 (chunk edges inside blocks),
// heads 40, 72, 120 and 200 (padded to 48, 80, 128, 208) at blocks 16 and 32, GQA 1 .. 12, v1 and
// v2 with partitions of about 512 and of a few blocks (in chunks of 16), bf16 and f16.
TEST_P(X86AttentionTest, PagedDirectStagedCopyMatchesRef) {
  struct Shape {
    DType dtype;
    int64_t head, block, hq, hkv, small_partition;
    bool alibi;
  };
  for (bool v2 : {false, true}) {
    for (const Shape& sh :
         {Shape{DType::kBF16, 64, 1, 8, 1, 48, true}, Shape{DType::kF16, 128, 8, 6, 2, 64, false},
          Shape{DType::kBF16, 96, 24, 5, 1, 96, false},
          Shape{DType::kBF16, 40, 16, 8, 2, 144, true},
          Shape{DType::kF16, 72, 32, 12, 1, 96, false},
          Shape{DType::kBF16, 120, 16, 4, 4, 144, true},
          Shape{DType::kBF16, 200, 32, 8, 1, 96, false}}) {
      // Partitions that are multiples of 16 (PagedPartitionsOffTheSixteenGrid has the others).
      const int64_t unit = std::lcm(sh.block, int64_t(16));
      const int64_t large = 512 / unit * unit;
      for (int64_t partition :
           v2 ? std::vector<int64_t>{large, sh.small_partition} : std::vector<int64_t>{0}) {
        const OpSpec spec = paged_spec(v2, sh.dtype, ir::KvCacheDtype::kAuto, sh.head, sh.block,
                                       sh.hq, sh.hkv, sh.alibi, partition);
        const Config chunk = partition == sh.small_partition ? Config().set("chunk", 16) : Config{};
        for (int64_t direct : {1, 0}) {
          check(spec, GetParam(), 6, Config(chunk).set("direct", direct), {InputKind::kNormal});
        }
      }
    }
  }
  check(paged_spec(false, DType::kBF16, ir::KvCacheDtype::kAuto, 72, 8, 8, 2, true), GetParam(), 6,
        Config().set("direct", 1));
}

// The direct kernel on fp8 caches, each chunk decoded into the stage by the tables (the magnitude's
// value, the sign by the code's bit 7; vpermi2b byte planes from AVX512_VBMI, vpermi2w words at
// avx512 and avx512_bf16, the exponent steps at avx2), against ref: e4m3 and e5m2 (both signs;
// the NaN code in every slot no sequence owns, which the stage never decodes), bf16 and f16
// queries; blocks of 1 (runs shorter than a decode vector, row by row), 8 (whole blocks decoded
// as one run, then copied), 16, 48 (chunk edges inside blocks: partial runs) and 128 (a block
// larger than the 64-key chunk); head sizes 16 .. 256; GQA 1 .. 12; v1 and v2; chunks of 16 ..
// 512 keys. Each spec also through the gather (direct=0), which shares the tables. (Every code
// and scale: Fp8StageDecodersMatchTables.)
TEST_P(X86AttentionTest, PagedDirectFp8MatchesRef) {
  struct Shape {
    ir::KvCacheDtype kv;
    DType dtype;
    int64_t head, block, hq, hkv, chunk;
    bool alibi;
  };
  constexpr auto e4m3 = ir::KvCacheDtype::kFp8E4m3, e5m2 = ir::KvCacheDtype::kFp8E5m2;
  for (bool v2 : {false, true}) {
    for (const Shape& sh : {Shape{e4m3, DType::kBF16, 128, 16, 8, 1, 0, false},
                            Shape{e5m2, DType::kBF16, 64, 1, 4, 4, 0, true},
                            Shape{e4m3, DType::kF16, 80, 8, 6, 2, 32, false},
                            Shape{e5m2, DType::kF16, 256, 48, 8, 1, 0, true},
                            Shape{e4m3, DType::kBF16, 16, 128, 12, 1, 64, false},
                            Shape{e4m3, DType::kBF16, 96, 32, 5, 1, 16, true}}) {
      // v2: partitions of about 512 (the shape's chunk, or the default) and small ones of a
      // few blocks (chunks of 16).
      const int64_t large = 512 / sh.block * sh.block;
      const int64_t small = sh.block <= 16 ? 144 : sh.block == 128 ? 256 : 3 * sh.block;
      for (int64_t partition : v2 ? std::vector<int64_t>{large, small} : std::vector<int64_t>{0}) {
        const OpSpec spec =
            paged_spec(v2, sh.dtype, sh.kv, sh.head, sh.block, sh.hq, sh.hkv, sh.alibi, partition);
        Config config = Config().set("direct", 1);
        if (partition == small) {
          config.set("chunk", 16);
        } else if (sh.chunk != 0) {
          config.set("chunk", sh.chunk);
        }
        check(spec, GetParam(), 6, config, {InputKind::kNormal});
        check(spec, GetParam(), 6, Config(config).set("direct", 0), {InputKind::kNormal});
      }
    }
  }
  // The harness's other input kinds (small integers, equal values) on two shapes.
  check(paged_spec(false, DType::kBF16, e4m3, 64, 16, 8, 2, true), GetParam(), 6,
        Config().set("direct", 1));
  check(paged_spec(true, DType::kF16, e5m2, 128, 32, 8, 1, false), GetParam(), 6,
        Config().set("direct", 1));
}

// The stage's fp8 decoders (paged_copy.h) against rnd_T(fp8(c) · scale) computed directly, for
// every code of e4m3 and e5m2, bf16 and f16 values, scales 0.5, 0.02, −0.25 (the sign flip is an
// XOR), 0 (±0, and NaN for inf codes), 1e-30 and 3e4 (f16 flushes or overflows: AVX2's exponent
// steps refused), on every decoder the host runs, AVX2's with and without its exponent steps:
// contiguous runs of 1 .. 300 codes (tails), rows of 16 / 24 / 8 codes that lie back to back (the
// segment and buffered paths) and apart (row by row), and key runs of 1 .. 7 and 16 tokens. NaN
// matches any NaN (the sign of a NaN is not kept).
TEST(X86AttentionPaged, Fp8StageDecodersMatchTables) {
  using codegen::x86::Fp8Decoder;
  const std::vector<X86Isa> paths = test::isa_paths();
  const auto host_has = [&](X86Isa isa) {
    return std::find(paths.begin(), paths.end(), isa) != paths.end() ||
           std::any_of(paths.begin(), paths.end(), [&](X86Isa p) { return p > isa; });
  };
  std::vector<Fp8Decoder> decoders{Fp8Decoder::kAvx2};
  if (host_has(X86Isa::kAvx512)) decoders.push_back(Fp8Decoder::kAvx512Bw);
  if (host_has(X86Isa::kAvx512Vbmi)) decoders.push_back(Fp8Decoder::kVbmi);
  std::vector<uint8_t> codes(600);
  std::mt19937 rng(3);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = i < 256 ? uint8_t(i) : uint8_t(rng());
  for (bool e5m2 : {false, true}) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (float scale : {0.5f, 0.02f, -0.25f, 0.0f, 1e-30f, 3e4f}) {
        SCOPED_TRACE(
            fmt::format("{} {} scale {}", e5m2 ? "e5m2" : "e4m3", dtype_name(dtype), scale));
        const auto value = [&](uint8_t c) {
          const float f =
              (e5m2 ? numeric::fp8_e5m2_to_f32(c) : numeric::fp8_e4m3_to_f32(c)) * scale;
          return dtype == DType::kBF16 ? numeric::f32_to_bf16(f) : numeric::f32_to_f16(f);
        };
        const auto is_nan = [&](uint16_t bits) {
          return dtype == DType::kBF16 ? std::isnan(numeric::bf16_to_f32(bits))
                                       : std::isnan(numeric::f16_to_f32(bits));
        };
        const auto same = [&](uint16_t got, uint8_t c) {
          const uint16_t want = value(c);
          return got == want || (is_nan(got) && is_nan(want));
        };
        alignas(64) codegen::x86::Fp8Tables16 tables{};
        for (int m = 0; m < 128; ++m) {
          tables.words[m] = value(uint8_t(m));
          tables.lo[m] = uint8_t(tables.words[m]);
          tables.hi[m] = uint8_t(tables.words[m] >> 8);
        }
        for (int c = 0; c < 256; ++c) tables.by_code[c] = value(uint8_t(c));
        codegen::x86::prepare_fp8_exponent_steps(tables, e5m2 ? 2 : 3,
                                                 dtype == DType::kBF16 ? 7 : 10);
        // bf16 has fp32's exponent range: the steps hold at every nonzero scale here; 0 (every
        // value ±0) and, in f16, results that overflow or are subnormal take the fallback.
        if (dtype == DType::kBF16) {
          EXPECT_EQ(tables.exponent_steps, scale != 0.0f);
        }
        if (dtype == DType::kF16 && (scale == 1e-30f || scale == 3e4f)) {
          EXPECT_FALSE(tables.exponent_steps);
        }
        std::vector<std::pair<Fp8Decoder, bool>> runs;  // (decoder, exponent steps)
        for (Fp8Decoder decoder : decoders) runs.emplace_back(decoder, tables.exponent_steps);
        if (tables.exponent_steps) runs.emplace_back(Fp8Decoder::kAvx2, false);  // the fallback
        for (const auto& [decoder, steps] : runs) {
          SCOPED_TRACE(fmt::format("decoder {} steps {}", int(decoder), steps));
          tables.exponent_steps = steps;
          for (int64_t n : {1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 256, 300}) {
            std::vector<uint16_t> words(size_t(n) + 1, 0xBEEF);
            codegen::x86::fp8_to_words(decoder, codes.data(), n, tables, words.data());
            for (int64_t i = 0; i < n; ++i)
              ASSERT_TRUE(same(words[size_t(i)], codes[size_t(i)])) << i;
            ASSERT_EQ(words[size_t(n)], 0xBEEF) << "wrote past " << n;
          }
          struct Rows {
            int64_t rows, count, src_stride;
          };
          for (const Rows& r : {Rows{9, 16, 16}, Rows{5, 24, 24}, Rows{7, 8, 8}, Rows{4, 16, 20},
                                Rows{3, 5, 9}, Rows{2, 48, 48}}) {
            const int64_t dst_stride = r.count + 13;
            std::vector<uint16_t> words(size_t(r.rows * dst_stride), 0xBEEF);
            codegen::x86::fp8_rows_to_words(decoder, codes.data(), r.src_stride, r.rows, r.count,
                                            tables, words.data(), dst_stride);
            for (int64_t row = 0; row < r.rows; ++row) {
              for (int64_t i = 0; i < dst_stride; ++i) {
                const uint16_t got = words[size_t(row * dst_stride + i)];
                if (i < r.count) {
                  ASSERT_TRUE(same(got, codes[size_t(row * r.src_stride + i)])) << row << " " << i;
                } else {
                  ASSERT_EQ(got, 0xBEEF) << "row " << row << " written past " << r.count;
                }
              }
            }
          }
          for (int64_t count : {1, 2, 3, 4, 5, 7, 16}) {
            std::vector<uint16_t> lo(size_t(count * 8) + 1, 0xBEEF), hi(lo.size(), 0xBEEF);
            codegen::x86::fp8_key_run_to_words(decoder, codes.data(), count, tables, lo.data(),
                                               hi.data());
            for (int64_t t = 0; t < count; ++t) {
              for (int64_t e = 0; e < 8; ++e) {
                ASSERT_TRUE(same(lo[size_t(t * 8 + e)], codes[size_t(t * 16 + e)]));
                ASSERT_TRUE(same(hi[size_t(t * 8 + e)], codes[size_t(t * 16 + 8 + e)]));
              }
            }
            ASSERT_EQ(lo[size_t(count * 8)], 0xBEEF);
            ASSERT_EQ(hi[size_t(count * 8)], 0xBEEF);
          }
        }
      }
    }
  }
}

// The fp8 stage is reused from chunk to chunk and task to task: the values past a chunk's keys
// up to its group's end are stale (an earlier chunk's), and a stale ±inf weighed by p = 0 would be
// NaN. One thread runs sequence 2 (all values +inf: its output is +inf, as ref's) and then
// sequence 4, cut to 5 tokens, whose group spans stage slots 5 .. 31 where sequence 2's values
// were: it must match ref (the stage zeroes them).
TEST_P(X86AttentionTest, PagedFp8StageHoldsNoStaleValues) {
  for (bool v2 : {false, true}) {
    const OpSpec spec =
        paged_spec(v2, DType::kBF16, ir::KvCacheDtype::kFp8E5m2, 64, 16, 4, 1, false, 512);
    const Kernel kernel =
        compile_x86(spec, GetParam(), Config().set("direct", 1).set("threads", 1));
    auto made = test::make_case(spec, 6, InputKind::kNormal, 31);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    test::OpCase c = std::move(made).value();
    const auto arg = [&](std::string_view name) -> test::HostTensor& {
      const auto at = std::find(c.names.begin(), c.names.end(), name);
      return c.tensors[size_t(at - c.names.begin())];
    };
    test::HostTensor& values = arg("value_cache");
    const test::HostTensor& tables = arg("block_tables");
    test::HostTensor& lens = arg("seq_lens");
    const int64_t bs = 16, d = 64, width = tables.tensor().size(1);
    const auto len2 = int64_t(lens.get(2));
    ASSERT_GT(len2, 31);
    for (int64_t j = 0; j < len2; j += bs) {
      const auto block = int64_t(tables.get(2 * width + j / bs));
      for (int64_t i = 0; i < d * bs; ++i) {
        values.set_bits(block * d * bs + i, 0x7C);  // e5m2 +inf (set() would saturate)
      }
    }
    // Sequence 3 is empty (the harness's), so sequence 4 follows sequence 2 on the thread.
    ASSERT_EQ(int64_t(lens.get(3)), 0);
    lens.set(4, 5.0);  // its slots from 5 on become unowned: ref does not read them
    const auto report = check_against_ref(kernel, c);
    EXPECT_TRUE(report.ok) << to_string(spec) << "\n" << report.message;
  }
}

// The direct knob: 0 or 1; 1 only where the direct kernel serves (bf16 / f16, dense, any kv),
// each refusal naming the knob and what is allowed.
TEST(X86AttentionConfig, BadPagedDirectKnobIsAClearError) {
  const auto expect_refused = [](const OpSpec& spec, int64_t direct, X86Isa isa,
                                 std::string_view fragment) {
    auto code = codegen::x86::generate_paged_attention(spec, Config().set("direct", direct), isa);
    ASSERT_FALSE(code.is_ok()) << to_string(spec) << " direct=" << direct;
    const std::string message = code.status().to_string();
    EXPECT_NE(message.find(fmt::format("direct={}", direct)), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  };
  const auto spec = [](DType dtype, ir::KvCacheDtype kv, int64_t head, int64_t block, bool sparse) {
    return paged_spec(false, dtype, kv, head, block, 8, 2, false, 512, sparse);
  };
  const OpSpec served = spec(DType::kBF16, ir::KvCacheDtype::kAuto, 64, 16, false);
  expect_refused(served, 2, X86Isa::kAvx512, "allowed values are 1 (the direct kernel) and 0");
  expect_refused(spec(DType::kF32, ir::KvCacheDtype::kAuto, 64, 16, false), 1, X86Isa::kAvx2,
                 "dtype=f32 kv=auto blocksparse=false block_size=16 head_size=64 at avx2");
  // fp8 caches (the stage's decode), any block size.
  expect_refused(spec(DType::kF32, ir::KvCacheDtype::kFp8E5m2, 64, 16, false), 1,
                 X86Isa::kAvx512Vbmi, "dtype=f32");
  expect_refused(spec(DType::kBF16, ir::KvCacheDtype::kFp8E4m3, 64, 16, true), 1,
                 X86Isa::kAvx512Vbmi, "blocksparse=true");
  for (X86Isa isa : {X86Isa::kAvx2, X86Isa::kAvx512, X86Isa::kAvx512Vbmi}) {
    EXPECT_TRUE(codegen::x86::generate_paged_attention(
                    spec(DType::kBF16, ir::KvCacheDtype::kFp8E4m3, 64, 8, false),
                    Config().set("direct", 1), isa)
                    .is_ok());
  }
  expect_refused(spec(DType::kBF16, ir::KvCacheDtype::kAuto, 64, 16, true), 1, X86Isa::kAvx512,
                 "blocksparse=true");
  // Block and head sizes off the 16 grid are served through the stage.
  for (const auto& [head, block] : {std::pair<int64_t, int64_t>{64, 8}, {72, 16}, {40, 1}}) {
    EXPECT_TRUE(codegen::x86::generate_paged_attention(
                    spec(DType::kBF16, ir::KvCacheDtype::kAuto, head, block, false),
                    Config().set("direct", 1), X86Isa::kAvx512)
                    .is_ok())
        << head << " " << block;
  }
  for (X86Isa isa : {X86Isa::kAvx2, X86Isa::kAvx512}) {
    for (int64_t direct : {0, 1}) {
      EXPECT_TRUE(
          codegen::x86::generate_paged_attention(served, Config().set("direct", direct), isa)
              .is_ok());
    }
  }
  expect_compile_refused(served, Config().set("direct", 5), "direct=5");
}

// paged attention's tuning space: every entry generates (the chunks, the thread counts, and the
// kernel that is not the default exactly where both serve: direct=0, or direct=1 for 16-bit
// caches with blocks of fewer than 8 keys, where the gather is the default, as for fp8).
TEST(X86AttentionConfig, PagedTuningSpaceGenerates) {
  struct Case {
    OpSpec spec;
    X86Isa isa;
    bool direct_served;
  };
  for (const Case& c :
       {Case{paged_spec(false, DType::kBF16, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, false),
             X86Isa::kAvx512, true},
        Case{paged_spec(true, DType::kBF16, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, false, 144),
             X86Isa::kAvx512Fp16, true},
        Case{paged_spec(false, DType::kBF16, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, false),
             X86Isa::kAvx2, true},
        Case{paged_spec(false, DType::kF16, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, false),
             X86Isa::kAvx2, true},
        Case{paged_spec(false, DType::kF16, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, false),
             X86Isa::kAvx512, true},
        Case{paged_spec(false, DType::kF32, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, false),
             X86Isa::kAvx512, false},
        Case{paged_spec(true, DType::kBF16, ir::KvCacheDtype::kFp8E4m3, 64, 8, 8, 2, false),
             X86Isa::kAvx512Vbmi, true},
        Case{paged_spec(false, DType::kBF16, ir::KvCacheDtype::kFp8E4m3, 64, 16, 8, 2, false),
             X86Isa::kAvx512, true},
        Case{paged_spec(false, DType::kBF16, ir::KvCacheDtype::kFp8E4m3, 64, 16, 8, 2, false),
             X86Isa::kAvx2, true},
        Case{paged_spec(false, DType::kBF16, ir::KvCacheDtype::kAuto, 64, 1, 8, 2, false),
             X86Isa::kAvx512, true}}) {
    Target target = host_target(BackendKind::kX86);
    target.isa = c.isa;
    const std::vector<Config> space = codegen::x86::cpu_attention_configs(c.spec, target);
    const int64_t not_default =
        codegen::x86::paged_direct_default(c.spec.get<ir::PagedAttentionParams>(), c.isa) ? 0 : 1;
    int direct_entries = 0;
    for (const Config& config : space) {
      const int64_t knob = config.get("direct", -1);
      if (knob != -1) {
        ++direct_entries;
        EXPECT_EQ(knob, not_default) << to_string(c.spec);
      }
      EXPECT_TRUE(codegen::x86::generate_paged_attention(c.spec, config, c.isa).is_ok())
          << to_string(c.spec) << " at " << x86_isa_name(c.isa);
    }
    EXPECT_EQ(direct_entries, c.direct_served ? 1 : 0) << to_string(c.spec);
  }
}

// Every variant of the largest kernels fits the code buffer at every level (nothing runs):
// heads up to 256 with every feature, both 16-bit layouts and f32,
// 8 query rows per KV head (AVX2's two halves per group up to D = 128), and the paged
// gather's tile kernel at heads 320 (f32) and 512 (bf16). A session's first form of the AVX2
// halves overflowed it from D = 192 with softcap.
// Heads past 256 dims walk P·V as a loop over the dims (emit_dim_chunks): steps of one, two or
// four chunks (by the bytes of a chunk's V row), the whole chunks past the last whole step and a
// tail after it. 264 (16 chunks of 16 at AVX2, 8 steps of 2, and an 8-dim tail), 280 (17: one
// whole chunk after the steps), 300 (a 12-dim tail; fp8 steps of 4 leave two chunks), vLLM's
// newest 512, 1000 (62 chunks of 16) and 4096 (the IR's largest); 1, 2, 5 and 8 rows per call
// (the accumulator sets, the two halves' row offsets), every dtype and fp8 cache (both decodes),
// every feature, splits forced and off, and the paged gather.
TEST_P(X86AttentionTest, LargeHeadsLoopOverTheDims) {
  const Features all{true, true, true, true, true};
  for (int64_t head : {264, 280, 300, 512, 1000}) {
    check(attention_spec(CpuAttnIsa::kVec, DType::kBF16, head, 32, 8, 1), GetParam(), 3, {},
          {InputKind::kNormal});
    check(attention_spec(CpuAttnIsa::kVec16, DType::kF16, head, 16, 2, 2, all), GetParam(), 3, {},
          {InputKind::kNormal});
    check(attention_spec(CpuAttnIsa::kVec, DType::kF32, head, 32, 5, 1, all), GetParam(), 3,
          kForceSplit, {InputKind::kNormal});
    for (const Config& decode : kFp8Decodes) {
      check(fp8_spec(ir::KvCacheDtype::kFp8E4m3, DType::kBF16, head, 32, 8, 2), GetParam(), 3,
            decode, {InputKind::kNormal});
    }
    check(fp8_spec(ir::KvCacheDtype::kFp8E5m2, DType::kF16, head, 32, 2, 1, all), GetParam(), 3,
          kNoSplit, {InputKind::kNormal});
  }
  check(attention_spec(CpuAttnIsa::kVec, DType::kBF16, 4096, 32, 2, 1, {.sinks = true}), GetParam(),
        2, {}, {InputKind::kNormal});
  // paged_attention_v1/v2 through the gather (f32 has no direct kernel) and the direct kernel.
  check(paged_spec(true, DType::kF32, ir::KvCacheDtype::kAuto, 1000, 16, 8, 2, true, 256),
        GetParam(), 3, {}, {InputKind::kNormal});
  for (int64_t direct : {0, 1}) {
    check(paged_spec(false, DType::kBF16, ir::KvCacheDtype::kFp8E4m3, 528, 16, 8, 1, false),
          GetParam(), 3, Config().set("direct", direct), {InputKind::kNormal});
  }
}

// Every head size the IR allows generates at every level, with every feature: heads of up to 256
// dims unroll P·V over the head (the largest kernels: D = 256 with an fp8 cache and every
// feature, ~100 KiB of the 128 KiB buffer at AVX-512), larger ones loop over it, so a kernel's
// size stops growing with D (before the loop, AVX-512 f32 with every feature did not fit at
// D = 512, fp8 caches at 512, AVX2 past ~900, the AMX layout at 1024); large blocks too (the
// stream kick covers at most 16 pages of a group's span: D = 4096 with blocks of 512-1024 did
// not fit). Both arithmetics where vdpbf16ps serves (dpbf16 0 and 1, fp8 caches included).
TEST(X86AttentionConfig, LargestKernelsFitTheCodeBuffer) {
  const Features all{.causal = true, .window = true, .alibi = true, .softcap = true, .sinks = true};
  const auto expect_generates = [](const OpSpec& spec, const Config& config, X86Isa isa,
                                   auto generate) {
    const auto code = generate(spec, config, isa);
    EXPECT_TRUE(code.is_ok()) << to_string(spec) << " config=" << config.to_string() << " at "
                              << x86_isa_name(isa) << ": " << code.status().to_string();
  };
  const auto attention = [](const OpSpec& spec, const Config& config, X86Isa isa) {
    return codegen::x86::generate_cpu_attention(spec, config, isa);
  };
  const auto paged = [](const OpSpec& spec, const Config& config, X86Isa isa) {
    return codegen::x86::generate_paged_attention(spec, config, isa);
  };
  for (X86Isa isa : test::kX86Levels) {
    // The arithmetic knob's values at this level (vdpbf16ps needs AVX512_BF16).
    const std::vector<Config> arithmetics =
        isa >= X86Isa::kAvx512Bf16
            ? std::vector<Config>{Config().set("dpbf16", 0), Config().set("dpbf16", 1)}
            : std::vector<Config>{Config{}};
    for (int64_t head : {128, 144, 255, 256, 264, 512, 1000, 4096}) {
      for (int64_t block : {32, 1024}) {
        if (block == 1024 && head < 512) continue;
        for (auto [layout, dtype] : {std::pair{CpuAttnIsa::kVec, DType::kBF16},
                                     {CpuAttnIsa::kVec16, DType::kF16},
                                     {CpuAttnIsa::kVec, DType::kF32}}) {
          const OpSpec spec = attention_spec(layout, dtype, head, block, 16, 2, all);
          for (const Config& config :
               dtype == DType::kBF16 ? arithmetics : std::vector<Config>{Config{}}) {
            expect_generates(spec, config, isa, attention);
          }
        }
        for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
          // The largest unrolled kernels: an f32 query over an fp8 cache at D = 255 (every
          // tail), ~124 KiB at AVX512_BF16.
          for (DType dtype : {DType::kBF16, DType::kF32}) {
            const OpSpec spec = fp8_spec(kv, dtype, head, block, 16, 2, all);
            for (int64_t predecode : {0, 1}) {
              expect_generates(spec, Config().set("predecode", predecode), isa, attention);
            }
            if (isa >= X86Isa::kAvx512Bf16 && dtype == DType::kBF16) {
              expect_generates(spec, Config().set("dpbf16", 1), isa, attention);
            }
          }
        }
        if (isa >= X86Isa::kAvx512Bf16 && head % 32 == 0) {
          // The AMX layout: native tiles at amx, their emulation below.
          expect_generates(attention_spec(CpuAttnIsa::kAmx, DType::kBF16, head, block, 16, 2, all),
                           Config{}, isa, attention);
        }
      }
      if (head % 8 == 0) {
        // The gather's tile kernel takes the chunk as its block size: the largest, 512.
        for (DType dtype : {DType::kF32, DType::kBF16}) {
          const OpSpec spec =
              paged_spec(true, dtype, ir::KvCacheDtype::kAuto, head, 16, 16, 2, true, 512);
          for (int64_t chunk : {128, 512}) {
            expect_generates(spec, Config().set("direct", 0).set("chunk", chunk), isa, paged);
          }
        }
      }
    }
  }
}

TEST(X86AttentionConfig, BadPagedChunkKnobIsAClearError) {
  const OpSpec v1 = paged_spec(false, DType::kBF16, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, false);
  const OpSpec v2 =
      paged_spec(true, DType::kBF16, ir::KvCacheDtype::kAuto, 64, 16, 8, 2, false, 96);
  const auto expect_refused = [](const OpSpec& spec, int64_t chunk, std::string_view fragment) {
    auto code =
        codegen::x86::generate_paged_attention(spec, Config().set("chunk", chunk), X86Isa::kAvx512);
    ASSERT_FALSE(code.is_ok()) << to_string(spec) << " chunk=" << chunk;
    const std::string message = code.status().to_string();
    EXPECT_NE(message.find(fmt::format("chunk={}", chunk)), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  };
  for (int64_t chunk : {8, 48, 1024, -16}) {
    expect_refused(v1, chunk, "allowed values are 16, 32, 64, 128, 256 and 512 keys");
  }
  expect_refused(v2, 48, "allowed values are 16, 32, 64, 128, 256 and 512 keys");
  // A chunk that does not divide the partition (96) leaves a partial chunk per partition.
  for (int64_t chunk : {32, 64}) {
    EXPECT_TRUE(
        codegen::x86::generate_paged_attention(v2, Config().set("chunk", chunk), X86Isa::kAvx512)
            .is_ok());
  }
  expect_compile_refused(v1, Config().set("chunk", 100), "chunk=100");
}

// ---- AMX (isa=amx cache layout, tdpbf16ps) -----------------------------------------------

// The generated AMX kernel disassembles (objdump) to the tile sequence it is meant to be:
// ldtilecfg before any tile op, Q·Kᵀ and P·V as tileloadd + tdpbf16ps, results through
// tilestored, tilerelease before returning. Runs on any host (nothing is executed).
// The instructions among `mnemonics` in the CPU attention kernel for `spec` at `isa`, in code
// order (objdump of the emitted bytes), each as "mnemonic operands" in AT&T syntax.
std::vector<std::string> emitted_ops(const OpSpec& spec, X86Isa isa,
                                     std::initializer_list<const char*> mnemonics) {
  auto code = codegen::x86::generate_cpu_attention(spec, Config{}, isa);
  EXPECT_TRUE(code.is_ok()) << code.status().to_string();
  if (!code.is_ok()) return {};
  const std::string bin =
      ::testing::TempDir() + fmt::format("kiln_attention_{:016x}_{}.bin", hash64(spec), int(isa));
  const std::string txt = bin + ".txt";
  {
    std::ofstream out(bin, std::ios::binary);
    out.write(reinterpret_cast<const char*>(code.value().data()),
              std::streamsize(code.value().size()));
  }
  EXPECT_EQ(std::system(("objdump -D -b binary -m i386:x86-64 " + bin + " > " + txt).c_str()), 0);
  std::ifstream in(txt);
  std::vector<std::string> ops;
  for (std::string line; std::getline(in, line);) {
    // "  offset:\tbytes\tmnemonic operands", the operands padded with spaces
    const size_t tab = line.rfind('\t');
    if (tab == std::string::npos) continue;
    std::istringstream instruction(line.substr(tab + 1));
    std::string mnemonic, operands;
    instruction >> mnemonic >> operands;
    for (const char* m : mnemonics) {
      if (mnemonic == m) ops.push_back(operands.empty() ? mnemonic : mnemonic + " " + operands);
    }
  }
  return ops;
}

// The tile instructions of the AMX kernel for head size `head`, in code order (mnemonics).
std::vector<std::string> amx_tile_ops(int64_t head) {
  std::vector<std::string> ops =
      emitted_ops(attention_spec(CpuAttnIsa::kAmx, DType::kBF16, head, 32, 8, 1), X86Isa::kAmx,
                  {"ldtilecfg", "tilezero", "tileloadd", "tdpbf16ps", "tilestored", "tilerelease"});
  for (std::string& op : ops) op = op.substr(0, op.find(' '));
  return ops;
}

TEST(X86AttentionAmx, EmittedBytesDisassembleToTileSequence) {
  if (std::system("objdump --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "objdump (binutils) not found: cannot disassemble the emitted bytes";
  }
  // One variant per row count 1..16: each is ldtilecfg, then per group: 2 tilezero, a Q·Kᵀ
  // step of 32 dims (3 tileloadd, 2 tdpbf16ps) per chunk, 2 tilestored, 1 tileloadd (P), a
  // P·V step of 16 dims (2 tileloadd, tdpbf16ps, tilestored) per tile, and tilerelease at
  // the end. Heads of up to 256 dims emit every step in line (D/32 and D/16 of them); larger
  // ones loop over one step of each, so their kernels hold the same sequence at any D.
  for (int64_t head : {128, 512, 4096}) {
    const int64_t qk_steps = head <= 256 ? head / 32 : 1;
    const int64_t pv_steps = head <= 256 ? head / 16 : 1;
    std::vector<std::string> variant = {"ldtilecfg", "tilezero", "tilezero"};
    for (int64_t c = 0; c < qk_steps; ++c) {
      variant.insert(variant.end(),
                     {"tileloadd", "tileloadd", "tileloadd", "tdpbf16ps", "tdpbf16ps"});
    }
    variant.insert(variant.end(), {"tilestored", "tilestored", "tileloadd"});
    for (int64_t g = 0; g < pv_steps; ++g) {
      variant.insert(variant.end(), {"tileloadd", "tileloadd", "tdpbf16ps", "tilestored"});
    }
    variant.push_back("tilerelease");
    const std::vector<std::string> ops = amx_tile_ops(head);
    ASSERT_EQ(ops.size(), 16 * variant.size()) << "head_size=" << head;
    for (size_t i = 0; i < ops.size(); ++i) {
      ASSERT_EQ(ops[i], variant[i % variant.size()])
          << "head_size=" << head << ": tile instruction " << i;
    }
  }
}

// The vec path's P·V (vdpbf16ps, GQA 8, bf16 KV) fetches into L1, while each dims chunk of 32
// walks the group's V rows, the lines of the chunk that follows: one prefetcht0 per row for
// each line that starts in it (rows of whole lines), the first and last byte's lines
// otherwise, none in the last chunk; the next groups' lines go to L2 (prefetcht1 /
// prefetcht2), never through prefetcht0. Nothing is executed: the prefetches change no result,
// so this is where their presence is checked.
TEST(X86AttentionVec, PvChunksPrefetchTheFollowingChunk) {
  if (std::system("objdump --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "objdump (binutils) not found: cannot disassemble the emitted bytes";
  }
  // Per P·V (the kernel holds one for each row count 1..8; r13 at the step's first row): D = 128,
  // chunks at 0, 64, 128, 192 bytes of a 256-byte row; the three that have a follower fetch its
  // one line for each of the step's two rows. D = 80: 160-byte rows, chunks [0, 64), [64, 128),
  // [128, 160); the first two fetch their follower's first and last byte's lines of each row.
  // D = 512: the chunks run as a loop of one chunk a step (emit_dim_chunks), each fetching the
  // next 64 bytes of both 1024-byte rows.
  const std::pair<int64_t, std::vector<int64_t>> cases[] = {
      {128, {64, 256 + 64, 128, 256 + 128, 192, 256 + 192}},
      {80, {64, 127, 160 + 64, 160 + 127, 128, 159, 160 + 128, 160 + 159}},
      {512, {64, 1024 + 64}}};
  for (const auto& [head, offsets] : cases) {
    const OpSpec spec = attention_spec(CpuAttnIsa::kVec, DType::kBF16, head, 32, 8, 1);
    const std::vector<std::string> ops = emitted_ops(spec, X86Isa::kAvx512Bf16, {"prefetcht0"});
    ASSERT_EQ(ops.size(), 8 * offsets.size()) << "head_size=" << head;
    for (size_t i = 0; i < ops.size(); ++i) {
      EXPECT_EQ(ops[i], fmt::format("prefetcht0 {:#x}(%r13)", offsets[i % offsets.size()]))
          << "head_size=" << head << ": prefetcht0 " << i;
    }
  }
}

// Numerics of the AMX path against ref, natively (this needs AMX-BF16 and the kernel's
// permission for tile data).
TEST(X86AttentionAmx, NativeMatchesRef) {
  if (detect_host_x86_isa() < X86Isa::kAmx) {
    GTEST_SKIP() << "host CPU reports no AMX-BF16 tiles: the native AMX test is not run here";
  }
  for (int64_t head : {32, 64, 96, 128, 192, 256, 288, 512, 1024}) {
    check(attention_spec(CpuAttnIsa::kAmx, DType::kBF16, head, 32, 8, 2), X86Isa::kAmx, 5, {},
          {InputKind::kNormal});
  }
  for (int64_t block : {64, 128}) {
    check(attention_spec(CpuAttnIsa::kAmx, DType::kBF16, 64, block, 8, 2), X86Isa::kAmx, 4);
  }
  for (auto [hq, hkv] : {std::pair{4, 4}, {8, 1}, {16, 1}, {32, 1}, {9, 3}}) {
    check(attention_spec(CpuAttnIsa::kAmx, DType::kBF16, 128, 32, hq, hkv), X86Isa::kAmx, 4);
  }
  const Features variants[] = {{.window = true},
                               {.alibi = true},
                               {.softcap = true},
                               {.sinks = true},
                               {.causal = false},
                               {true, true, true, true, true},
                               {false, true, true, true, true}};
  for (const Features& f : variants) {
    check(attention_spec(CpuAttnIsa::kAmx, DType::kBF16, 64, 32, 8, 2, f), X86Isa::kAmx, 5);
  }
  for (const Config& config : {kForceSplit, kNoSplit}) {
    check(attention_spec(CpuAttnIsa::kAmx, DType::kBF16, 128, 32, 8, 1, {.sinks = true}),
          X86Isa::kAmx, 6, config);
  }
}

TEST(X86AttentionAmx, NanPastSequenceNeverRead) {
  if (detect_host_x86_isa() < X86Isa::kAmx) {
    GTEST_SKIP() << "host CPU reports no AMX-BF16 tiles: the native AMX test is not run here";
  }
  check_nan_past_sequence(CpuAttnIsa::kAmx, X86Isa::kAmx);
}

// The generator's AMX emulation (tile instructions as vdpbf16ps code over stack tiles), which
// serves isa=amx on AVX512_BF16 targets: the same numerics tests as the native path.
TEST(X86AttentionAmx, EmulationMatchesRef) {
  if (detect_host_x86_isa() < X86Isa::kAvx512Bf16) {
    GTEST_SKIP() << "host CPU has no AVX512_BF16: the AMX emulation cannot run here";
  }
  const X86Isa isa = X86Isa::kAvx512Bf16;
  for (int64_t head : {32, 96, 256, 288, 512}) {
    check(attention_spec(CpuAttnIsa::kAmx, DType::kBF16, head, 32, 8, 2), isa, 5, {},
          {InputKind::kNormal});
  }
  check(attention_spec(CpuAttnIsa::kAmx, DType::kBF16, 64, 128, 16, 1), isa, 4);
  check(
      attention_spec(CpuAttnIsa::kAmx, DType::kBF16, 64, 64, 9, 3, {true, true, true, true, true}),
      isa, 5);
  check(attention_spec(CpuAttnIsa::kAmx, DType::kBF16, 128, 32, 8, 1, {.sinks = true}), isa, 6,
        kForceSplit);
  check_nan_past_sequence(CpuAttnIsa::kAmx, isa);
}

// The AMX P·V multiplies whole 32-key tiles, so the masked keys of a group meet p = 0 there
// too: the emulation, and the native tiles where the host has them.
TEST(X86AttentionAmx, NonFiniteValuesAtMaskedKeysNeverReachTheirRows) {
  if (detect_host_x86_isa() < X86Isa::kAvx512Bf16) {
    GTEST_SKIP() << "host CPU has no AVX512_BF16: neither the AMX emulation nor AMX runs here";
  }
  std::vector<X86Isa> targets = {X86Isa::kAvx512Bf16};
  if (detect_host_x86_isa() >= X86Isa::kAmx) {
    targets.push_back(X86Isa::kAmx);
  } else {
    std::printf("host CPU reports no AMX-BF16 tiles: only the emulation is checked\n");
  }
  for (X86Isa target : targets) {
    for (bool causal : {true, false}) {
      check_non_finite_at_masked_keys(attention_spec(CpuAttnIsa::kAmx, DType::kBF16, 64, 32, 8, 2,
                                                     {.causal = causal, .window = true}),
                                      target);
    }
  }
}

TEST(X86AttentionAmx, RejectedWithoutAmx) {
  const OpSpec spec = attention_spec(CpuAttnIsa::kAmx, DType::kBF16, 64, 32, 8, 2);
  CompileOptions options;
  options.backend = BackendKind::kX86;
  options.isa = X86Isa::kAvx512;
  auto kernel = test_runtime().compile(spec, options);
  ASSERT_FALSE(kernel.is_ok());
  EXPECT_NE(kernel.status().to_string().find("AMX"), std::string::npos)
      << kernel.status().to_string();
}

// The levels whose code differs: AVX2, AVX-512, AVX512_BF16 (vdpbf16ps, the bf16 default
// there) and AVX512_FP16 (Sapphire Rapids and later: the fp32 path the bf16 default, fp8 codes
// decoded by VBMI table lookups).
INSTANTIATE_TEST_SUITE_P(Isa, X86AttentionTest,
                         ::testing::ValuesIn(test::isa_paths({X86Isa::kAvx2, X86Isa::kAvx512,
                                                              X86Isa::kAvx512Bf16,
                                                              X86Isa::kAvx512Fp16})),
                         [](const auto& info) { return std::string(x86_isa_name(info.param)); });

}  // namespace
}  // namespace jit
