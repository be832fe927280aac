// The ref backend's cache family: known answers worked out by hand from spec/cache_ops.md,
// write-then-gather round trips, properties (padding writes nothing, token order does not
// matter), rejected arguments with every output untouched, and the op cases `kiln check` runs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "codegen/ref/ref.h"
#include "ir/numeric.h"
#include "ir/op_spec.h"
#include "tests/harness/matchers.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

namespace ref = codegen::ref;
using ir::CacheLayout;
using ir::KvCacheDtype;
using ir::RopeStyle;
using ir::ScaleFormat;
using test::HostTensor;
using test::InputKind;
using test::matches;
using test::OpCase;
using test::Tolerance;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

void run_ok(const OpSpec& spec, const KernelArgs& args) {
  const Status status = ref::run(spec, args);
  ASSERT_TRUE(status.is_ok()) << to_string(spec) << ": " << status.to_string();
}

// Row-major flat index of `index` in a tensor of `sizes` (independent of any op's layout).
int64_t flat(const std::vector<int64_t>& sizes, const std::vector<int64_t>& index) {
  int64_t f = 0;
  for (size_t d = 0; d < sizes.size(); ++d) f = f * sizes[d] + index[d];
  return f;
}

HostTensor i64(std::vector<double> values) {
  return HostTensor::from_values(DType::kI64, {int64_t(values.size())}, values);
}
HostTensor i32(std::vector<int64_t> sizes, std::vector<double> values) {
  return HostTensor::from_values(DType::kI32, std::move(sizes), values);
}
HostTensor f32_scale(double v) {
  return HostTensor::from_values(DType::kF32, {1}, {v});
}

// The fp32 stored at byte `offset` of a uint8 tensor.
float f32_at(const HostTensor& t, int64_t offset) {
  uint8_t b[4];
  for (int i = 0; i < 4; ++i) b[i] = uint8_t(t.get(offset + i));
  float v;
  std::memcpy(&v, b, 4);
  return v;
}
uint16_t u16_at(const HostTensor& t, int64_t offset) {
  return uint16_t(uint16_t(t.get(offset)) | uint16_t(t.get(offset + 1)) << 8);
}

// A case from the harness; a failure to build one fails the test.
OpCase make(const OpSpec& spec, int64_t size, InputKind kind = InputKind::kNormal,
            uint64_t seed = 7) {
  Result<OpCase> c = test::make_case(spec, size, kind, seed);
  if (!c.is_ok()) {
    ADD_FAILURE() << to_string(spec) << ": " << c.status().to_string();
    return {};
  }
  return std::move(c).value();
}

int index_of(const OpCase& c, std::string_view name) {
  for (size_t i = 0; i < c.names.size(); ++i) {
    if (c.names[i] == name) return int(i);
  }
  ADD_FAILURE() << "no argument " << name;
  return 0;
}

// The call is refused as an invalid argument naming `arg`, and no tensor changed.
void expect_rejected(const OpSpec& spec, const OpCase& c, std::string_view arg) {
  std::vector<const HostTensor*> all;
  for (const HostTensor& t : c.tensors) all.push_back(&t);
  test::expect_ref_rejects(spec, c.args(), arg, all);
}

// ---- specs ------------------------------------------------------------------------------------

OpSpec paged_spec(DType dt, KvCacheDtype kv, int64_t heads, int64_t dim, int64_t bs) {
  return OpSpec::make(OpKind::kReshapeAndCache, ir::PagedCacheWriteParams{dt, kv, heads, dim, bs});
}
OpSpec flash_spec(DType dt, KvCacheDtype kv, int64_t heads, int64_t dim, int64_t bs,
                  CacheLayout layout, bool per_head = false) {
  return OpSpec::make(OpKind::kReshapeAndCacheFlash,
                      ir::FlashCacheWriteParams{dt, kv, heads, dim, bs, layout, per_head});
}
OpSpec mla_spec(DType dt, KvCacheDtype kv, int64_t rank, int64_t pe, int64_t bs) {
  return OpSpec::make(OpKind::kConcatAndCacheMla, ir::MlaCacheWriteParams{dt, kv, rank, pe, bs});
}
OpSpec rope_fused_spec(DType dt, KvCacheDtype kv, int64_t rank, int64_t rot, int64_t heads_q,
                       RopeStyle style, int64_t bs) {
  return OpSpec::make(OpKind::kConcatAndCacheMlaRopeFused,
                      ir::MlaRopeCacheWriteParams{dt, kv, rank, rot, heads_q, style, bs});
}
OpSpec convert_spec(DType dst, DType src) {
  return OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{dst, src});
}
OpSpec gather_spec(DType dt, KvCacheDtype kv, int64_t head_dim, int64_t bs) {
  return OpSpec::make(OpKind::kGatherAndMaybeDequantCache,
                      ir::GatherCacheParams{dt, kv, head_dim, bs});
}
OpSpec cp_gather_spec(DType dt, int64_t entry, int64_t bs) {
  return OpSpec::make(OpKind::kCpGatherCache, ir::CpGatherCacheParams{dt, entry, bs});
}
OpSpec upconvert_spec(int64_t bs) {
  return OpSpec::make(OpKind::kCpGatherAndUpconvertFp8KvCache, ir::UpconvertGatherParams{bs});
}
OpSpec indexer_spec(DType dt, int64_t dim, int64_t qbs, int64_t bs, ScaleFormat fmt) {
  return OpSpec::make(OpKind::kIndexerKQuantAndCache,
                      ir::IndexerQuantParams{dt, dim, qbs, bs, fmt});
}
OpSpec indexer_gather_spec(int64_t dim, int64_t qbs, int64_t bs) {
  return OpSpec::make(OpKind::kCpGatherIndexerKQuantCache, ir::IndexerGatherParams{dim, qbs, bs});
}
OpSpec swap_spec(int64_t block_bytes) {
  return OpSpec::make(OpKind::kSwapBlocks, ir::SwapBlocksParams{block_bytes});
}

// Valid specs of every cache op: vLLM's shapes, the odd ones the spec calls out (13 heads x
// 46 dims, H*D < 32, quant groups of 64), and every kv mode.
std::vector<OpSpec> cache_specs() {
  const DType bf16 = DType::kBF16, f16 = DType::kF16, f32 = DType::kF32;
  const KvCacheDtype autokv = KvCacheDtype::kAuto, e4m3 = KvCacheDtype::kFp8E4m3,
                     e5m2 = KvCacheDtype::kFp8E5m2, ds = KvCacheDtype::kFp8DsMla;
  return {
      swap_spec(4096),
      swap_spec(6),
      paged_spec(bf16, autokv, 8, 128, 16),
      paged_spec(f32, e4m3, 4, 64, 8),
      paged_spec(f16, e5m2, 2, 80, 32),
      flash_spec(bf16, autokv, 8, 128, 16, CacheLayout::kNhd),
      flash_spec(f32, e4m3, 4, 64, 8, CacheLayout::kHnd, true),
      flash_spec(bf16, e5m2, 13, 46, 16, CacheLayout::kNhd),
      flash_spec(f16, autokv, 1, 4, 8, CacheLayout::kHnd),
      mla_spec(bf16, autokv, 512, 64, 16),
      mla_spec(f32, e4m3, 256, 64, 16),
      mla_spec(f16, e5m2, 64, 32, 8),
      mla_spec(bf16, ds, 512, 64, 64),
      mla_spec(f16, ds, 512, 64, 16),
      rope_fused_spec(bf16, autokv, 512, 64, 16, RopeStyle::kGptj, 64),
      rope_fused_spec(f16, e4m3, 128, 64, 4, RopeStyle::kNeox, 16),
      rope_fused_spec(f32, autokv, 64, 32, 2, RopeStyle::kNeox, 16),
      convert_spec(DType::kFp8E4m3, bf16),
      convert_spec(DType::kFp8E4m3, f32),
      convert_spec(f16, DType::kFp8E4m3),
      convert_spec(f32, DType::kFp8E4m3),
      gather_spec(bf16, e4m3, 576, 64),
      gather_spec(f32, autokv, 320, 16),
      gather_spec(f16, e5m2, 100, 8),
      cp_gather_spec(bf16, 576, 64),
      cp_gather_spec(f32, 576, 16),
      cp_gather_spec(DType::kU8, 656, 64),
      cp_gather_spec(DType::kI32, 7, 4),
      upconvert_spec(64),
      upconvert_spec(4),
      indexer_spec(bf16, 128, 128, 64, ScaleFormat::kUe8m0),
      indexer_spec(f16, 128, 64, 16, ScaleFormat::kPlain),
      indexer_spec(bf16, 256, 128, 1, ScaleFormat::kUe8m0),
      indexer_gather_spec(128, 128, 64),
      indexer_gather_spec(128, 64, 16),
      OpSpec::make(
          OpKind::kRotaryEmbeddingAndCacheFlash,
          ir::RopeFlashCacheWriteParams{bf16, KvCacheDtype::kAuto, 8, 2, 64, 64,
                                        ir::RopeStyle::kNeox, 16, ir::CacheLayout::kNhd, false}),
      OpSpec::make(
          OpKind::kRotaryEmbeddingAndCacheFlash,
          ir::RopeFlashCacheWriteParams{f16, KvCacheDtype::kFp8E4m3, 4, 4, 80, 32,
                                        ir::RopeStyle::kGptj, 8, ir::CacheLayout::kHnd, true}),
  };
}

// ---- swap_blocks ------------------------------------------------------------------------------

TEST(SwapBlocksKnown, CopiesWholeBlocksInMappingOrder) {
  // 8-byte blocks; src block i holds bytes 10i .. 10i+7.
  HostTensor src = HostTensor::zeros(DType::kU8, {4, 8});
  for (int64_t i = 0; i < 32; ++i) src.set(i, double(10 * (i / 8) + i % 8));
  HostTensor dst = HostTensor::zeros(DType::kU8, {3, 8});
  test::fill_equal(dst, 99);
  // (2 -> 0), (0 -> 2), then (3 -> 2): the later copy wins.
  HostTensor mapping = HostTensor::from_values(DType::kI64, {3, 2}, {2, 0, 0, 2, 3, 2});
  run_ok(swap_spec(8), {src.tensor(), dst.tensor(), mapping.tensor()});
  for (int64_t j = 0; j < 8; ++j) {
    EXPECT_EQ(dst.get(j), 20 + j);
    EXPECT_EQ(dst.get(8 + j), 99) << "block 1 is not in the mapping";
    EXPECT_EQ(dst.get(16 + j), 30 + j);
  }
}

TEST(SwapBlocksKnown, BlockBytesIndependentOfDtype) {
  // A bf16 [2, 4] source with 4-byte blocks: block 1 = elements 2, 3 of row 0.
  HostTensor src = HostTensor::from_values(DType::kBF16, {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  HostTensor dst = HostTensor::zeros(DType::kBF16, {4});
  HostTensor mapping = HostTensor::from_values(DType::kI64, {1, 2}, {1, 0});
  run_ok(swap_spec(4), {src.tensor(), dst.tensor(), mapping.tensor()});
  EXPECT_EQ(dst.values(), (std::vector<double>{3, 4, 0, 0}));
}

// ---- reshape_and_cache ------------------------------------------------------------------------

TEST(ReshapeAndCacheKnown, TwoTokensInThePagedLayout) {
  // f32 -> x = 4; H = 2, D = 8 (two x-chunks), BS = 4, NB = 2.
  constexpr int64_t kH = 2, kD = 8, kBs = 4, kX = 4, kNb = 2;
  HostTensor key = HostTensor::zeros(DType::kF32, {2, kH, kD});
  HostTensor value = HostTensor::zeros(DType::kF32, {2, kH, kD});
  for (int64_t i = 0; i < key.numel(); ++i) {
    // key[t, h, d] = 1 + 100 t + 10 h + d; value = -key.
    const double v = 1 + 100 * (i / (kH * kD)) + 10 * ((i / kD) % kH) + i % kD;
    key.set(i, v);
    value.set(i, -v);
  }
  const std::vector<int64_t> kc_sizes{kNb, kH, kD / kX, kBs, kX}, vc_sizes{kNb, kH, kD, kBs};
  HostTensor key_cache = HostTensor::zeros(DType::kF32, kc_sizes);
  HostTensor value_cache = HostTensor::zeros(DType::kF32, vc_sizes);
  // Token 0 -> slot 5 = block 1, offset 1; token 1 -> slot 2 = block 0, offset 2.
  HostTensor slots = i64({5, 2});
  HostTensor scale = f32_scale(1);
  run_ok(paged_spec(DType::kF32, KvCacheDtype::kAuto, kH, kD, kBs),
         {key.tensor(), value.tensor(), key_cache.tensor(), value_cache.tensor(), slots.tensor(),
          scale.tensor(), scale.tensor()});
  // Worked by hand: key[0, 1, 6] = 17 goes to key_cache[1, 1, 6/4 = 1, 1, 6%4 = 2], flat
  // (((1*2 + 1)*2 + 1)*4 + 1)*4 + 2 = 118; value[0, 1, 6] = -17 to value_cache[1, 1, 6, 1],
  // flat ((1*2 + 1)*8 + 6)*4 + 1 = 121.
  EXPECT_EQ(key_cache.get(118), 17);
  EXPECT_EQ(value_cache.get(121), -17);
  const int64_t block[] = {1, 0}, offset[] = {1, 2};
  for (int64_t t = 0; t < 2; ++t) {
    for (int64_t h = 0; h < kH; ++h) {
      for (int64_t d = 0; d < kD; ++d) {
        const double v = 1 + 100 * t + 10 * h + d;
        EXPECT_EQ(key_cache.get(flat(kc_sizes, {block[t], h, d / kX, offset[t], d % kX})), v);
        EXPECT_EQ(value_cache.get(flat(vc_sizes, {block[t], h, d, offset[t]})), -v);
      }
    }
  }
  // Nothing else was written: 2 tokens x H x D non-zero elements in each cache.
  const auto nonzero = [](const HostTensor& t) {
    const std::vector<double> v = t.values();
    return std::count_if(v.begin(), v.end(), [](double x) { return x != 0; });
  };
  EXPECT_EQ(nonzero(key_cache), 2 * kH * kD);
  EXPECT_EQ(nonzero(value_cache), 2 * kH * kD);
}

TEST(ReshapeAndCacheKnown, EveryChunkBeyondFiveHundredTwelve) {
  // 64 heads x 128 bf16 dims = 1024 x-chunks: vLLM's current kernel skips chunks >= 512.
  constexpr int64_t kH = 64, kD = 128, kBs = 2;
  HostTensor key = HostTensor::zeros(DType::kBF16, {1, kH, kD});
  test::fill_equal(key, 3);
  HostTensor value = key;
  HostTensor key_cache = HostTensor::zeros(DType::kBF16, {1, kH, kD / 8, kBs, 8});
  HostTensor value_cache = HostTensor::zeros(DType::kBF16, {1, kH, kD, kBs});
  HostTensor slots = i64({1});
  HostTensor scale = f32_scale(1);
  run_ok(paged_spec(DType::kBF16, KvCacheDtype::kAuto, kH, kD, kBs),
         {key.tensor(), value.tensor(), key_cache.tensor(), value_cache.tensor(), slots.tensor(),
          scale.tensor(), scale.tensor()});
  for (int64_t h = 0; h < kH; ++h) {
    for (int64_t d = 0; d < kD; ++d) {
      ASSERT_EQ(key_cache.get(flat({1, kH, kD / 8, kBs, 8}, {0, h, d / 8, 1, d % 8})), 3);
      ASSERT_EQ(value_cache.get(flat({1, kH, kD, kBs}, {0, h, d, 1})), 3);
    }
  }
}

TEST(ReshapeAndCacheKnown, Fp8QuantisesWithTheScale) {
  // x = 16 for fp8: D = 16 is one chunk. Values / scale 2, then RNE with saturation:
  //   e4m3: 1 -> 0.5; 1000 -> 500 -> 448 (max); -0.3 -> -0.15 -> -0.15625 (10 * 2^-6);
  //   e5m2: 1000 -> 500 -> 512 (steps of 64 in [256, 512)); -0.3 -> -0.15 -> -0.15625 (5*2^-5);
  //   both: 0.004 -> 0.002 -> 2^-9 (e4m3: one smallest subnormal; e5m2: 1.024 * 2^-9 -> 2^-9).
  const std::vector<double> in = {1, 1000, -0.3, 0, -1e9, 3, 0.004, 2};
  struct Expect {
    KvCacheDtype kv;
    DType cache;
    std::vector<double> out;
  };
  const Expect cases[] = {
      {KvCacheDtype::kFp8E4m3, DType::kFp8E4m3, {0.5, 448, -0.15625, 0, -448, 1.5, 0.001953125, 1}},
      {KvCacheDtype::kFp8E5m2,
       DType::kFp8E5m2,
       {0.5, 512, -0.15625, 0, -57344, 1.5, 0.001953125, 1}},
  };
  for (const Expect& e : cases) {
    SCOPED_TRACE(enum_name(e.kv));
    std::vector<double> row(16, 0.0);
    std::copy(in.begin(), in.end(), row.begin());
    HostTensor key = HostTensor::from_values(DType::kF32, {1, 1, 16}, row);
    HostTensor key_cache = HostTensor::zeros(e.cache, {1, 1, 1, 1, 16});
    HostTensor value_cache = HostTensor::zeros(e.cache, {1, 1, 16, 1});
    HostTensor slots = i64({0});
    HostTensor k_scale = f32_scale(2), v_scale = f32_scale(0.5);
    run_ok(paged_spec(DType::kF32, e.kv, 1, 16, 1),
           {key.tensor(), key.tensor(), key_cache.tensor(), value_cache.tensor(), slots.tensor(),
            k_scale.tensor(), v_scale.tensor()});
    for (size_t i = 0; i < e.out.size(); ++i) EXPECT_EQ(key_cache.get(int64_t(i)), e.out[i]) << i;
    // The value cache holds the code of 1 / 0.5 = 2: 0x40 in both formats.
    EXPECT_EQ(uint8_t(value_cache.storage()[0]), 0x40);
  }
}

// ---- reshape_and_cache_flash ------------------------------------------------------------------

TEST(FlashKnown, NhdAndHndHoldTheSameLogicalCache) {
  for (CacheLayout layout : {CacheLayout::kNhd, CacheLayout::kHnd}) {
    const OpSpec spec = flash_spec(DType::kBF16, KvCacheDtype::kAuto, 3, 8, 4, layout);
    OpCase c = make(spec, 5);
    run_ok(spec, c.args());
    const HostTensor& key = c.tensors[0];
    const HostTensor& key_cache = c.tensors[2];
    const HostTensor& slots = c.tensors[4];
    for (int64_t t = 0; t < 5; ++t) {
      const int64_t s = int64_t(slots.get(t));
      if (s < 0) continue;
      for (int64_t i = 0; i < 3 * 8; ++i) {
        // Logical [NB, BS, H, D]: slot s's row is the H*D elements at s * H * D.
        ASSERT_EQ(key_cache.get(s * 24 + i), key.get(t * 24 + i)) << "t " << t << " i " << i;
      }
    }
  }
}

TEST(FlashKnown, PerHeadScalesAndTinyHeads) {
  // H = 2, D = 4 (H*D = 8 < 32: vLLM's warp-per-head path would hang); head 1 has scale 4.
  const OpSpec spec =
      flash_spec(DType::kF32, KvCacheDtype::kFp8E4m3, 2, 4, 2, CacheLayout::kHnd, true);
  HostTensor key = HostTensor::from_values(DType::kF32, {1, 2, 4}, {1, 2, 3, 4, 8, 16, 24, 32});
  // HND: physical [NB, H, BS, D] viewed as [NB, BS, H, D].
  HostTensor key_cache = HostTensor::strided(DType::kFp8E4m3, {1, 2, 2, 4}, {16, 4, 8, 1});
  HostTensor value_cache = HostTensor::strided(DType::kFp8E4m3, {1, 2, 2, 4}, {16, 4, 8, 1});
  HostTensor slots = i64({1});
  HostTensor scales = HostTensor::from_values(DType::kF32, {2}, {1, 4});
  run_ok(spec, {key.tensor(), key.tensor(), key_cache.tensor(), value_cache.tensor(),
                slots.tensor(), scales.tensor(), scales.tensor()});
  // Logical [0, 1, h, d]: head 0 as is, head 1 divided by 4.
  EXPECT_EQ(key_cache.values(),
            (std::vector<double>{0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 2, 4, 6, 8}));
  // Physically HND: head 1's row of offset 1 is bytes 12..15 of the storage.
  EXPECT_EQ(uint8_t(key_cache.storage()[12]), numeric::f32_to_fp8_e4m3(2));
}

// ---- concat_and_cache_mla ---------------------------------------------------------------------

TEST(ConcatMlaKnown, EntryIsKvCThenKPe) {
  HostTensor kv_c = HostTensor::from_values(DType::kF16, {2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor k_pe = HostTensor::from_values(DType::kF16, {2, 2}, {7, 8, 9, 10});
  HostTensor cache = HostTensor::zeros(DType::kF16, {2, 2, 5});
  HostTensor slots = i64({3, -1});
  HostTensor scale = f32_scale(1);
  run_ok(mla_spec(DType::kF16, KvCacheDtype::kAuto, 3, 2, 2),
         {kv_c.tensor(), k_pe.tensor(), cache.tensor(), slots.tensor(), scale.tensor()});
  // Slot 3 = block 1, offset 1: entry at flat 15; token 1 is padding.
  std::vector<double> expected(20, 0.0);
  const double entry[] = {1, 2, 3, 7, 8};
  std::copy(std::begin(entry), std::end(entry), expected.begin() + 15);
  EXPECT_EQ(cache.values(), expected);
}

TEST(ConcatMlaKnown, Fp8EntryUsesOneScale) {
  HostTensor kv_c = HostTensor::from_values(DType::kBF16, {1, 2}, {0.1, -600});
  HostTensor k_pe = HostTensor::from_values(DType::kBF16, {1, 1}, {0.4});
  HostTensor cache = HostTensor::zeros(DType::kFp8E4m3, {1, 1, 3});
  HostTensor slots = i64({0});
  HostTensor scale = f32_scale(0.1);
  run_ok(mla_spec(DType::kBF16, KvCacheDtype::kFp8E4m3, 2, 1, 1),
         {kv_c.tensor(), k_pe.tensor(), cache.tensor(), slots.tensor(), scale.tensor()});
  // bf16(0.1) / 0.1f and bf16(0.4) / 0.1f in fp32, then e4m3; -6000 saturates.
  const float s = 0.1f;
  EXPECT_EQ(cache.get(0),
            numeric::fp8_e4m3_to_f32(numeric::f32_to_fp8_e4m3(numeric::round_to_bf16(0.1f) / s)));
  EXPECT_EQ(cache.get(1), -448);
  EXPECT_EQ(cache.get(2),
            numeric::fp8_e4m3_to_f32(numeric::f32_to_fp8_e4m3(numeric::round_to_bf16(0.4f) / s)));
  EXPECT_EQ(cache.get(2), 4);  // 0.400390625 / 0.1 = 4.0039 -> 4
}

TEST(DsMlaKnown, EntryBytes) {
  // Tile 0: one 896, the rest 1 -> scale 896/448 = 2, codes 448 (0x7E) and 0.5 (0x30).
  // Tile 1: zeros -> scale FLT_MIN, codes 0. Tile 2: all -3.5 -> scale 2^-7, codes -448 (0xFE).
  // Tile 3: all 1 -> scale 1/448 (fp32), codes round(1 / (1/448)) = 448 (0x7E).
  std::vector<double> row(512, 0.0);
  for (int i = 0; i < 128; ++i) row[size_t(i)] = i == 0 ? 896 : 1;
  for (int i = 256; i < 384; ++i) row[size_t(i)] = -3.5;
  for (int i = 384; i < 512; ++i) row[size_t(i)] = 1;
  HostTensor kv_c = HostTensor::from_values(DType::kBF16, {1, 512}, row);
  std::vector<double> pe(64);
  std::iota(pe.begin(), pe.end(), -10.0);
  HostTensor k_pe = HostTensor::from_values(DType::kBF16, {1, 64}, pe);
  HostTensor cache = HostTensor::zeros(DType::kU8, {2, 2, 656});
  HostTensor slots = i64({2});
  HostTensor scale = f32_scale(123);  // ignored by fp8_ds_mla
  run_ok(mla_spec(DType::kBF16, KvCacheDtype::kFp8DsMla, 512, 64, 2),
         {kv_c.tensor(), k_pe.tensor(), cache.tensor(), slots.tensor(), scale.tensor()});
  const int64_t e = 2 * 656;  // slot 2 = block 1, offset 0
  EXPECT_EQ(cache.get(e + 0), 0x7E);
  EXPECT_EQ(cache.get(e + 1), 0x30);
  EXPECT_EQ(cache.get(e + 127), 0x30);
  EXPECT_EQ(cache.get(e + 128), 0x00);
  EXPECT_EQ(cache.get(e + 256), 0xFE);
  EXPECT_EQ(cache.get(e + 511), 0x7E);
  EXPECT_EQ(f32_at(cache, e + 512), 2.0f);
  EXPECT_EQ(f32_at(cache, e + 516), FLT_MIN);
  EXPECT_EQ(f32_at(cache, e + 520), 0x1p-7f);
  EXPECT_EQ(f32_at(cache, e + 524), 1.0f / 448.0f);
  for (int j = 0; j < 64; ++j) {
    EXPECT_EQ(u16_at(cache, e + 528 + 2 * j), numeric::f32_to_bf16(float(j - 10))) << j;
  }
  // Every other entry is untouched.
  for (int64_t i = 0; i < cache.numel(); ++i) {
    if (i < e || i >= e + 656) {
      ASSERT_EQ(cache.get(i), 0) << i;
    }
  }
}

// ---- concat_and_cache_mla_rope_fused ----------------------------------------------------------

TEST(RopeFusedKnown, RotatesQAlwaysAndKOnlyForWrittenTokens) {
  // rot 4, one q head, R 2. cos/sin row 1 = [c0 c1 | s0 s1] = [0 1 | 1 0]: pair 0 turns by
  // 90 degrees, pair 1 stays. q = [1 2 3 4]:
  //   neox pairs (0,2),(1,3): x'=1*0-3*1=-3, y'=3*0+1*1=1  -> [-3, 2, 1, 4]
  //   gptj pairs (0,1),(2,3): x'=1*0-2*1=-2, y'=2*0+1*1=1  -> [-2, 1, 3, 4]
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
    SCOPED_TRACE(enum_name(style));
    const std::vector<double> rotated = style == RopeStyle::kNeox
                                            ? std::vector<double>{-3, 2, 1, 4}
                                            : std::vector<double>{-2, 1, 3, 4};
    HostTensor positions = i64({1, 1});
    HostTensor q_pe = HostTensor::from_values(DType::kF32, {2, 1, 4}, {1, 2, 3, 4, 1, 2, 3, 4});
    HostTensor k_pe = HostTensor::from_values(DType::kF32, {2, 4}, {1, 2, 3, 4, 1, 2, 3, 4});
    HostTensor kv_c = HostTensor::from_values(DType::kF32, {2, 2}, {5, 6, 7, 8});
    HostTensor cos_sin = HostTensor::from_values(DType::kF32, {2, 4}, {1, 1, 0, 0, 0, 1, 1, 0});
    HostTensor slots = i64({1, -1});
    HostTensor cache = HostTensor::zeros(DType::kF32, {1, 2, 6});
    HostTensor scale = f32_scale(1);
    run_ok(rope_fused_spec(DType::kF32, KvCacheDtype::kAuto, 2, 4, 1, style, 2),
           {positions.tensor(), q_pe.tensor(), k_pe.tensor(), kv_c.tensor(), cos_sin.tensor(),
            slots.tensor(), cache.tensor(), scale.tensor()});
    std::vector<double> q_expected = rotated;
    q_expected.insert(q_expected.end(), rotated.begin(), rotated.end());
    EXPECT_EQ(q_pe.values(), q_expected) << "q_pe of the padded token is rotated too";
    std::vector<double> k_expected = rotated;
    for (double v : {1, 2, 3, 4}) k_expected.push_back(v);
    EXPECT_EQ(k_pe.values(), k_expected) << "k_pe of the padded token stays";
    std::vector<double> cache_expected = {0, 0, 0, 0, 0, 0, 5, 6};
    cache_expected.insert(cache_expected.end(), rotated.begin(), rotated.end());
    EXPECT_EQ(cache.values(), cache_expected);
  }
}

TEST(RopeFusedProperty, MatchesRotaryEmbeddingThenConcat) {
  // vLLM's manual-fusion test: rotary_embedding on q_pe and k_pe, then concat_and_cache_mla,
  // gives the same q_pe, k_pe and cache bits (16-bit types, both styles, fp8 too).
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
      for (KvCacheDtype kv : {KvCacheDtype::kAuto, KvCacheDtype::kFp8E4m3}) {
        SCOPED_TRACE(fmt::format("{} {} {}", dtype_name(dt), enum_name(style), enum_name(kv)));
        constexpr int64_t kRank = 32, kRot = 16, kHq = 3, kTokens = 9;
        const OpSpec fused = rope_fused_spec(dt, kv, kRank, kRot, kHq, style, 4);
        OpCase c = make(fused, kTokens);
        // All tokens written (the unfused pipeline rotates k_pe of padded tokens too).
        HostTensor& slots = c.tensors[5];
        for (int64_t t = 0; t < kTokens; ++t) slots.set(t, double(t * 2));
        OpCase unfused = c;
        run_ok(fused, c.args());
        const HostTensor& positions = unfused.tensors[0];
        HostTensor pos = HostTensor::zeros(DType::kI64, {kTokens});
        for (int64_t t = 0; t < kTokens; ++t) pos.set(t, positions.get(t));
        const OpSpec rope = OpSpec::make(OpKind::kRotaryEmbedding,
                                         ir::RopeParams{dt, dt, kRot, kRot, style, kHq, 1, true});
        HostTensor q = HostTensor::zeros(dt, {kTokens, kHq, kRot});
        HostTensor k = HostTensor::zeros(dt, {kTokens, 1, kRot});
        for (int64_t i = 0; i < q.numel(); ++i) q.set(i, unfused.tensors[1].get(i));
        for (int64_t i = 0; i < k.numel(); ++i) k.set(i, unfused.tensors[2].get(i));
        run_ok(rope, {pos.tensor(), q.tensor(), k.tensor(), unfused.tensors[4].tensor()});
        HostTensor k_rows = HostTensor::zeros(dt, {kTokens, kRot});
        for (int64_t i = 0; i < k.numel(); ++i) k_rows.set(i, k.get(i));
        run_ok(mla_spec(dt, kv, kRank, kRot, 4),
               {unfused.tensors[3].tensor(), k_rows.tensor(), unfused.tensors[6].tensor(),
                slots.tensor(), unfused.tensors[7].tensor()});
        for (int64_t i = 0; i < q.numel(); ++i) ASSERT_EQ(c.tensors[1].get(i), q.get(i)) << i;
        for (int64_t i = 0; i < k.numel(); ++i) ASSERT_EQ(c.tensors[2].get(i), k.get(i)) << i;
        EXPECT_TRUE(matches(c.tensors[6], unfused.tensors[6], Tolerance::exact()));
      }
    }
  }
}

// ---- convert_fp8 ------------------------------------------------------------------------------

TEST(ConvertFp8Known, QuantiseAndDequantise) {
  // Scale 2: x / 2 then e4m3 RNE, saturating: -1.5 -> 0xBC, 500 -> 448 (0x7E), inf -> 448,
  // 2^-12 is below half the smallest subnormal 2^-9 -> 0, NaN -> 0x7F, 0.15 -> 1.25 * 2^-3
  // (0x22).
  HostTensor src = HostTensor::from_values(
      DType::kF32, {2, 4}, {0, 1, -3, 1000, std::ldexp(1.0, -11), INFINITY, kNan, 0.3});
  HostTensor codes = HostTensor::zeros(DType::kU8, {2, 4});
  run_ok(convert_spec(DType::kFp8E4m3, DType::kF32), {{codes.tensor(), src.tensor()}, {2.0}});
  const std::vector<int> expected = {0x00, 0x30, 0xBC, 0x7E, 0x00, 0x7E, 0x7F, 0x22};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(codes.get(i), expected[size_t(i)]) << i;
  }
  // Dequantise with scale 0.5 into bf16: decode(code) * 0.5.
  HostTensor back = HostTensor::zeros(DType::kBF16, {8});
  run_ok(convert_spec(DType::kBF16, DType::kFp8E4m3), {{back.tensor(), codes.tensor()}, {0.5}});
  EXPECT_EQ(back.get(0), 0);
  EXPECT_EQ(back.get(1), 0.25);
  EXPECT_EQ(back.get(2), -0.75);
  EXPECT_EQ(back.get(3), 224);
  EXPECT_TRUE(std::isnan(back.get(6)));
  EXPECT_EQ(back.get(7), 0.15625 * 0.5);
}

TEST(ConvertFp8Property, RoundTripErrorBound) {
  // vLLM's test: uniform [-224, 224], scale 1. e4m3 keeps 3 fraction bits: a normal value is
  // within 2^-4 relative, a subnormal within 2^-10 absolute; bf16 adds 2^-9 relative.
  HostTensor src = HostTensor::zeros(DType::kBF16, {4096});
  test::fill_uniform(src, 11, -224, 224);
  HostTensor codes = HostTensor::zeros(DType::kFp8E4m3, {4096});
  HostTensor back = HostTensor::zeros(DType::kBF16, {4096});
  run_ok(convert_spec(DType::kFp8E4m3, DType::kBF16), {{codes.tensor(), src.tensor()}, {1.0}});
  run_ok(convert_spec(DType::kBF16, DType::kFp8E4m3), {{back.tensor(), codes.tensor()}, {1.0}});
  for (int64_t i = 0; i < 4096; ++i) {
    const double x = src.get(i);
    ASSERT_LE(std::fabs(back.get(i) - x), std::fabs(x) * (0x1p-4 + 0x1p-9) + 0x1p-10) << x;
  }
}

// ---- gathers: round trips ---------------------------------------------------------------------

// An MLA cache written by concat_and_cache_mla from `tokens` rows, slot t -> perm[t].
struct MlaWrite {
  HostTensor kv_c, k_pe, cache, slots;
};
MlaWrite write_mla(DType dt, KvCacheDtype kv, int64_t rank, int64_t pe, int64_t bs, int64_t blocks,
                   const std::vector<int64_t>& slot_values, float scale) {
  const int64_t tokens = int64_t(slot_values.size());
  MlaWrite w;
  w.kv_c = HostTensor::zeros(dt, {tokens, rank});
  w.k_pe = HostTensor::zeros(dt, {tokens, pe});
  test::fill_normal(w.kv_c, 21);
  test::fill_normal(w.k_pe, 22);
  const DType cdt = kv == KvCacheDtype::kAuto ? dt : DType::kU8;
  w.cache = HostTensor::zeros(cdt, {blocks, bs, kv == KvCacheDtype::kFp8DsMla ? 656 : rank + pe});
  w.slots = HostTensor::zeros(DType::kI64, {tokens});
  for (int64_t t = 0; t < tokens; ++t) w.slots.set(t, double(slot_values[size_t(t)]));
  HostTensor s = f32_scale(scale);
  run_ok(mla_spec(dt, kv, rank, pe, bs),
         {w.kv_c.tensor(), w.k_pe.tensor(), w.cache.tensor(), w.slots.tensor(), s.tensor()});
  return w;
}

// Block table of one request whose position p is at slot (table[p / bs]) * bs + p % bs, with
// the request's blocks in the shuffled order {3, 0, 2}.
constexpr int64_t kBs = 4;
const std::vector<int64_t> kBlocks = {3, 0, 2};
std::vector<int64_t> positions_to_slots(int64_t tokens) {
  std::vector<int64_t> slots;
  for (int64_t p = 0; p < tokens; ++p) slots.push_back(kBlocks[size_t(p / kBs)] * kBs + p % kBs);
  return slots;
}

TEST(GatherRoundTrip, CpGatherReturnsTheWrittenRows) {
  constexpr int64_t kTokens = 10, kRank = 6, kPe = 2;
  MlaWrite w = write_mla(DType::kF32, KvCacheDtype::kAuto, kRank, kPe, kBs, 4,
                         positions_to_slots(kTokens), 1);
  HostTensor dst = HostTensor::zeros(DType::kF32, {kTokens, kRank + kPe});
  HostTensor table = i32({1, 3}, {3, 0, 2});
  HostTensor cu = i32({2}, {0, kTokens});
  run_ok(cp_gather_spec(DType::kF32, kRank + kPe, kBs),
         {{w.cache.tensor(), dst.tensor(), table.tensor(), cu.tensor(), Tensor()}, {1}});
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t i = 0; i < kRank; ++i) ASSERT_EQ(dst.get(t * 8 + i), w.kv_c.get(t * kRank + i));
    for (int64_t i = 0; i < kPe; ++i)
      ASSERT_EQ(dst.get(t * 8 + kRank + i), w.k_pe.get(t * kPe + i));
  }
  // seq_starts shifts the position: starting at 5 gathers tokens 5..9 into rows 0..4.
  HostTensor dst2 = HostTensor::zeros(DType::kF32, {5, 8});
  HostTensor cu2 = i32({2}, {0, 5});
  HostTensor starts = i32({1}, {5});
  run_ok(cp_gather_spec(DType::kF32, 8, kBs),
         {{w.cache.tensor(), dst2.tensor(), table.tensor(), cu2.tensor(), starts.tensor()}, {1}});
  for (int64_t i = 0; i < 40; ++i) ASSERT_EQ(dst2.get(i), dst.get(40 + i)) << i;
}

TEST(GatherRoundTrip, GatherAndMaybeDequant) {
  constexpr int64_t kTokens = 9, kRank = 8, kPe = 4;
  // auto: bit-exact rows; only the first head_dim = 10 elements are gathered.
  MlaWrite w = write_mla(DType::kBF16, KvCacheDtype::kAuto, kRank, kPe, kBs, 4,
                         positions_to_slots(kTokens), 1);
  HostTensor table = i32({1, 3}, {3, 0, 2});
  HostTensor cu = i32({2}, {0, kTokens});
  HostTensor token_to_seq = i32({kTokens}, std::vector<double>(kTokens, 0.0));
  HostTensor scale = f32_scale(1);
  HostTensor dst = HostTensor::zeros(DType::kBF16, {kTokens, 10});
  run_ok(gather_spec(DType::kBF16, KvCacheDtype::kAuto, 10, kBs),
         {{w.cache.tensor(), dst.tensor(), table.tensor(), cu.tensor(), token_to_seq.tensor(),
           scale.tensor(), Tensor()},
          {double(kTokens)}});
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t i = 0; i < 10; ++i) {
      const double expected =
          i < kRank ? w.kv_c.get(t * kRank + i) : w.k_pe.get(t * kPe + i - kRank);
      ASSERT_EQ(dst.get(t * 10 + i), expected);
    }
  }
  // fp8: the gathered row is rnd_bf16(decode(e4m3(x / s)) * s), within the e4m3 bound of x.
  const float s = 0.05f;
  MlaWrite q = write_mla(DType::kBF16, KvCacheDtype::kFp8E4m3, kRank, kPe, kBs, 4,
                         positions_to_slots(kTokens), s);
  HostTensor qscale = f32_scale(s);
  HostTensor dq = HostTensor::zeros(DType::kBF16, {kTokens, kRank + kPe});
  run_ok(gather_spec(DType::kBF16, KvCacheDtype::kFp8E4m3, kRank + kPe, kBs),
         {{q.cache.tensor(), dq.tensor(), table.tensor(), cu.tensor(), token_to_seq.tensor(),
           qscale.tensor(), Tensor()},
          {double(kTokens)}});
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t i = 0; i < kRank + kPe; ++i) {
      const float x =
          float(i < kRank ? q.kv_c.get(t * kRank + i) : q.k_pe.get(t * kPe + i - kRank));
      const float exact =
          numeric::round_to_bf16(numeric::fp8_e4m3_to_f32(numeric::f32_to_fp8_e4m3(x / s)) * s);
      ASSERT_EQ(dq.get(t * 12 + i), exact);
      ASSERT_LE(std::fabs(dq.get(t * 12 + i) - x), std::fabs(x) * (0x1p-4 + 0x1p-8) + s * 0x1p-9);
    }
  }
}

TEST(GatherAndMaybeDequantKnown, SkipsTokensPastTheirRequest) {
  // Two requests of 2 and 1 tokens, num_tokens 4: token 3 maps to request 1 but is at or past
  // cu_seq_lens[2] = 3, so dst row 3 keeps its value. seq_starts[1] = 5 reads position 5.
  HostTensor src = HostTensor::zeros(DType::kF32, {2, 4, 1});
  for (int64_t i = 0; i < 8; ++i) src.set(i, double(10 + i));
  HostTensor dst = HostTensor::from_values(DType::kF32, {4, 1}, {-1, -1, -1, -1});
  HostTensor table = i32({2, 2}, {1, 0, 0, 1});
  HostTensor cu = i32({3}, {0, 2, 3});
  HostTensor tts = i32({4}, {0, 0, 1, 1});
  HostTensor scale = f32_scale(1);
  HostTensor starts = i32({2}, {0, 5});
  run_ok(gather_spec(DType::kF32, KvCacheDtype::kAuto, 1, 4),
         {{src.tensor(), dst.tensor(), table.tensor(), cu.tensor(), tts.tensor(), scale.tensor(),
           starts.tensor()},
          {4}});
  // Request 0: positions 0, 1 in block 1 -> 14, 15. Request 1: token 2 at position
  // 2 - 2 + 5 = 5 -> column 1 -> block 1, offset 1 -> 15.
  EXPECT_EQ(dst.values(), (std::vector<double>{14, 15, 15, -1}));
}

TEST(UpconvertRoundTrip, DsMlaWriteThenUpconvert) {
  constexpr int64_t kTokens = 9;
  MlaWrite w = write_mla(DType::kBF16, KvCacheDtype::kFp8DsMla, 512, 64, kBs, 4,
                         positions_to_slots(kTokens), 1);
  // Two requests in the workspace: tokens 0..4 of the first and 0..3 of a second one that
  // reuses the same blocks.
  HostTensor table = i32({2, 3}, {3, 0, 2, 3, 0, 2});
  HostTensor seq_lens = i32({2}, {5, 4});
  HostTensor starts = i32({2}, {0, 5});
  HostTensor dst = HostTensor::zeros(DType::kBF16, {kTokens, 576});
  run_ok(
      upconvert_spec(kBs),
      {{w.cache.tensor(), dst.tensor(), table.tensor(), seq_lens.tensor(), starts.tensor()}, {2}});
  for (int64_t row = 0; row < kTokens; ++row) {
    const int64_t t = row < 5 ? row : row - 5;
    for (int64_t k = 0; k < 4; ++k) {
      float amax = 0;
      for (int64_t i = 128 * k; i < 128 * (k + 1); ++i) {
        amax = std::max(amax, std::fabs(float(w.kv_c.get(t * 512 + i))));
      }
      const float tile_scale = std::max(amax / 448.0f, FLT_MIN);
      for (int64_t i = 128 * k; i < 128 * (k + 1); ++i) {
        const double x = w.kv_c.get(t * 512 + i);
        ASSERT_LE(std::fabs(dst.get(row * 576 + i) - x),
                  std::fabs(x) * (0x1p-4 + 0x1p-8) + tile_scale * 0x1p-9)
            << row << " " << i;
      }
    }
    // The rope part comes back bit for bit.
    for (int64_t j = 0; j < 64; ++j)
      ASSERT_EQ(dst.get(row * 576 + 512 + j), w.k_pe.get(t * 64 + j));
  }
}

// ---- indexer ----------------------------------------------------------------------------------

TEST(IndexerKnown, ScalesPerGroupAndUe8m0) {
  // D 128 in two groups of 64 (KILN: per-group for any quant_block dividing D), BS 2.
  // Group 0: amax 1000 -> plain 1000/448 = 2.2321; ue8m0 2^ceil(log2 2.2321) = 4.
  // Group 1: zeros -> 1e-4/448 (plain) or 2^-22 (ue8m0: 2^-23 < 2.232e-7 <= 2^-22).
  std::vector<double> row(128, 0.0);
  for (int i = 0; i < 64; ++i) row[size_t(i)] = i == 5 ? -1000 : 2;
  HostTensor k = HostTensor::from_values(DType::kBF16, {1, 128}, row);
  HostTensor slots = i64({3});  // block 1, offset 1
  for (ScaleFormat fmt : {ScaleFormat::kPlain, ScaleFormat::kUe8m0}) {
    SCOPED_TRACE(enum_name(fmt));
    HostTensor cache = HostTensor::zeros(DType::kU8, {2, 2, 128 + 8});
    run_ok(indexer_spec(DType::kBF16, 128, 64, 2, fmt),
           {k.tensor(), cache.tensor(), slots.tensor()});
    const int64_t block = 1 * 2 * 136;
    const bool ue8m0 = fmt == ScaleFormat::kUe8m0;
    const float sc0 = ue8m0 ? 4.0f : 1000.0f / 448.0f;
    const float sc1 = ue8m0 ? 0x1p-22f : 1e-4f / 448.0f;
    // Scales of (token 1, group g) at byte BS*D + 4*(1*2 + g) = 256 + 8 + 4g.
    EXPECT_EQ(f32_at(cache, block + 264), sc0);
    EXPECT_EQ(f32_at(cache, block + 268), sc1);
    // Values of token 1 at bytes 128 .. 255 of the block.
    EXPECT_EQ(cache.get(block + 128 + 5), numeric::f32_to_fp8_e4m3(-1000.0f / sc0));
    EXPECT_EQ(cache.get(block + 128 + 0), numeric::f32_to_fp8_e4m3(2.0f / sc0));
    if (ue8m0) {
      EXPECT_EQ(cache.get(block + 128 + 5), 0xF8);  // -250 -> -256 = -2^8
    }
    EXPECT_EQ(cache.get(block + 128 + 64), 0);
    // Token 0 of the block and block 0 are untouched.
    for (int64_t i = 0; i < 2 * 2 * 136; ++i) {
      const bool written =
          (i >= block + 128 && i < block + 256) || (i >= block + 264 && i < block + 272);
      if (!written) {
        ASSERT_EQ(cache.get(i), 0) << i;
      }
    }
  }
}

// The amax ignores every NaN, signalling ones included (CUDA's fmaxf): a signalling NaN right
// after the group's largest value must not reset the reduction (glibc's std::fmax returns NaN
// for it, and the values after it would then set the scale: 2 / 448 here).
TEST(IndexerKnown, SignallingNanIgnoredByTheAmax) {
  std::vector<double> row(128, 2.0);
  row[0] = -1000;
  HostTensor k = HostTensor::from_values(DType::kBF16, {1, 128}, row);
  k.set_bits(1, 0x7F81);  // a signalling NaN (quiet bit clear)
  k.set_bits(2, 0xFFC0);  // and a quiet one
  HostTensor slots = i64({0});
  HostTensor cache = HostTensor::zeros(DType::kU8, {1, 1, 128 + 4});
  run_ok(indexer_spec(DType::kBF16, 128, 128, 1, ScaleFormat::kPlain),
         {k.tensor(), cache.tensor(), slots.tensor()});
  EXPECT_EQ(f32_at(cache, 128), 1000.0f / 448.0f);
}

TEST(IndexerRoundTrip, QuantGatherDequantWithinSixteenScales) {
  // vLLM's round-trip test: D 128, qbs 128, BS 16, sequential slots, ue8m0; the max error per
  // token is <= 16 x the scale (half an e4m3 ulp at the top binade [256, 448]).
  constexpr int64_t kTokens = 17, kD = 128, kBsI = 16;
  HostTensor k = HostTensor::zeros(DType::kBF16, {kTokens, kD});
  test::fill_normal(k, 5, 0, 3);
  HostTensor cache = HostTensor::zeros(DType::kU8, {2, kBsI, kD + 4});
  std::vector<double> slot_values(kTokens);
  std::iota(slot_values.begin(), slot_values.end(), 0.0);
  HostTensor slots = i64(slot_values);
  run_ok(indexer_spec(DType::kBF16, kD, 128, kBsI, ScaleFormat::kUe8m0),
         {k.tensor(), cache.tensor(), slots.tensor()});
  // Gather back into an over-allocated destination (13 + 4 rows of sentinel 123 stay).
  HostTensor dst_k = HostTensor::zeros(DType::kFp8E4m3, {kTokens + 4, kD});
  HostTensor dst_scale = HostTensor::zeros(DType::kU8, {kTokens + 4, 4});
  test::fill_equal(dst_scale, 123);
  HostTensor table = i32({1, 2}, {0, 1});
  HostTensor cu = i32({2}, {0, kTokens});
  run_ok(indexer_gather_spec(kD, 128, kBsI),
         {cache.tensor(), dst_k.tensor(), dst_scale.tensor(), table.tensor(), cu.tensor()});
  for (int64_t t = 0; t < kTokens; ++t) {
    const float sc = f32_at(dst_scale, t * 4);
    float amax = 0;
    for (int64_t i = 0; i < kD; ++i) amax = std::max(amax, std::fabs(float(k.get(t * kD + i))));
    EXPECT_EQ(sc, std::exp2(std::ceil(std::log2(double(std::max(amax, 1e-4f) / 448.0f)))));
    for (int64_t i = 0; i < kD; ++i) {
      ASSERT_LE(std::fabs(dst_k.get(t * kD + i) * sc - k.get(t * kD + i)), 16 * sc);
    }
  }
  for (int64_t i = kTokens * 4; i < (kTokens + 4) * 4; ++i) EXPECT_EQ(dst_scale.get(i), 123);
}

// ---- properties over the op cases -------------------------------------------------------------

// The write ops and the index of their slot_mapping argument.
bool is_write(OpKind op) {
  return op == OpKind::kReshapeAndCache || op == OpKind::kReshapeAndCacheFlash ||
         op == OpKind::kConcatAndCacheMla || op == OpKind::kConcatAndCacheMlaRopeFused ||
         op == OpKind::kIndexerKQuantAndCache;
}

TEST(CacheProperty, PaddingSlotsWriteNothing) {
  for (const OpSpec& spec : cache_specs()) {
    if (!is_write(spec.op)) continue;
    SCOPED_TRACE(to_string(spec));
    OpCase c = make(spec, 6);
    HostTensor& slots = c.tensors[size_t(index_of(c, "slot_mapping"))];
    test::fill_equal(slots, -1);
    const OpCase before = c;
    run_ok(spec, c.args());
    for (size_t i = 0; i < c.tensors.size(); ++i) {
      // The rope-fused op rotates q_pe of padded tokens too (and only q_pe).
      if (c.names[i] == "q_pe") continue;
      EXPECT_TRUE(c.tensors[i].storage() == before.tensors[i].storage()) << c.names[i];
    }
  }
}

// Reverses the token order of every per-token input (rows of activations, slots, positions).
void reverse_tokens(OpCase& c, int64_t tokens) {
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const std::string& name = c.names[i];
    if (name != "key" && name != "value" && name != "kv_c" && name != "k_pe" && name != "k" &&
        name != "slot_mapping" && name != "q_pe" && name != "positions") {
      continue;
    }
    HostTensor& t = c.tensors[i];
    const int64_t row = t.numel() / t.sizes()[0];
    const HostTensor copy = t;
    for (int64_t r = 0; r < tokens; ++r) {
      for (int64_t j = 0; j < row; ++j) t.set(r * row + j, copy.get((tokens - 1 - r) * row + j));
    }
  }
}

TEST(CacheProperty, TokenOrderDoesNotMatter) {
  for (const OpSpec& spec : cache_specs()) {
    if (!is_write(spec.op)) continue;
    SCOPED_TRACE(to_string(spec));
    constexpr int64_t kTokens = 7;
    OpCase c = make(spec, kTokens);
    OpCase permuted = c;
    reverse_tokens(permuted, kTokens);
    run_ok(spec, c.args());
    run_ok(spec, permuted.args());
    for (size_t k = 0; k < c.outputs.size(); ++k) {
      const size_t i = size_t(c.outputs[k]);
      if (c.names[i] == "q_pe" || c.names[i] == "k_pe") continue;  // per-token outputs
      EXPECT_TRUE(matches(c.tensors[i], permuted.tensors[i], Tolerance::exact())) << c.names[i];
    }
  }
}

// ---- every op through make_case (what `kiln check` runs) --------------------------------------

TEST(CacheCases, EverySpecBuildsAndRuns) {
  std::vector<bool> covered(all_op_kinds().size(), false);
  for (const OpSpec& spec : cache_specs()) {
    ASSERT_TRUE(validate(spec).is_ok()) << to_string(spec) << ": " << validate(spec).to_string();
    EXPECT_TRUE(ref::implements(spec.op));
    covered[size_t(spec.op)] = true;
    for (InputKind kind : test::input_kinds_for(spec.op)) {
      for (int64_t size : {0, 1, 3, 17}) {
        SCOPED_TRACE(
            fmt::format("{} {} size {}", to_string(spec), test::input_kind_name(kind), size));
        OpCase c = make(spec, size, kind, 100 + uint64_t(size));
        ASSERT_EQ(c.tolerances.size(), c.outputs.size());
        ASSERT_EQ(c.names.size(), c.tensors.size());
        const OpCase before = c;
        run_ok(spec, c.args());
        // A second run on a fresh copy gives the same bits (the oracle is deterministic).
        OpCase again = before;
        run_ok(spec, again.args());
        for (size_t k = 0; k < c.outputs.size(); ++k) {
          const size_t i = size_t(c.outputs[k]);
          EXPECT_TRUE(c.tensors[i].storage() == again.tensors[i].storage()) << c.names[i];
          EXPECT_TRUE(matches(c.tensors[i], again.tensors[i], c.tolerances[k]));
        }
        // Zero rows write nothing.
        if (size == 0) {
          for (int i : c.outputs) {
            EXPECT_TRUE(c.tensors[size_t(i)].storage() == before.tensors[size_t(i)].storage())
                << c.names[size_t(i)];
          }
        }
      }
    }
  }
  for (OpKind op : all_op_kinds()) {
    if (op_family(op) == "cache") {
      EXPECT_TRUE(covered[size_t(op)]) << op_name(op);
    }
  }
}

TEST(CacheCases, WritesChangeTheCache) {
  // A case whose call would write nothing could not catch a backend that writes nothing.
  for (const OpSpec& spec : cache_specs()) {
    SCOPED_TRACE(to_string(spec));
    OpCase c = make(spec, 5);
    const OpCase before = c;
    run_ok(spec, c.args());
    bool changed = false;
    for (int i : c.outputs) {
      changed = changed || c.tensors[size_t(i)].storage() != before.tensors[size_t(i)].storage();
    }
    EXPECT_TRUE(changed);
  }
}

// ---- bad input --------------------------------------------------------------------------------

// `c` with argument `name` replaced by `t`.
OpCase with(OpCase c, std::string_view name, HostTensor t) {
  c.tensors[size_t(index_of(c, name))] = std::move(t);
  return c;
}

// An int32 copy of an int64 slot_mapping.
HostTensor as_i32(const HostTensor& t) {
  HostTensor out = HostTensor::zeros(DType::kI32, t.sizes());
  for (int64_t i = 0; i < t.numel(); ++i) out.set(i, t.get(i));
  return out;
}

// The case with the last slot set to `value`.
OpCase with_last_slot(OpCase c, double value) {
  HostTensor& slots = c.tensors[size_t(index_of(c, "slot_mapping"))];
  slots.set(slots.numel() - 1, value);
  return c;
}

// Common checks of a write op: int32 slots, a slot one past the cache (the last token, so that
// earlier tokens would have been written by a kernel that checks late).
void expect_slot_checks(const OpSpec& spec, const OpCase& c, int64_t capacity) {
  const HostTensor& slots = c.tensors[size_t(index_of(c, "slot_mapping"))];
  expect_rejected(spec, with(c, "slot_mapping", as_i32(slots)), "slot_mapping");
  expect_rejected(spec, with_last_slot(c, double(capacity)), "slot_mapping");
}

TEST(BadInput, SwapBlocks) {
  const OpSpec spec = swap_spec(64);
  const OpCase c = make(spec, 3);
  const int64_t blocks = c.tensors[0].sizes()[0];
  HostTensor mapping = c.tensors[2];
  mapping.set(5, double(blocks));  // last pair's destination
  expect_rejected(spec, with(c, "block_mapping", mapping), "block_mapping");
  mapping = c.tensors[2];
  mapping.set(4, -1);
  expect_rejected(spec, with(c, "block_mapping", mapping), "block_mapping");
  HostTensor m32 = HostTensor::zeros(DType::kI32, {3, 2});
  expect_rejected(spec, with(c, "block_mapping", m32), "block_mapping");
  expect_rejected(spec, with(c, "block_mapping", HostTensor::zeros(DType::kI64, {3, 3})),
                  "block_mapping");
  // 65 bytes per row: not whole blocks.
  expect_rejected(spec, with(c, "dst", HostTensor::zeros(DType::kU8, {blocks, 65})), "dst");
  // A strided src (the kv[:, 0] view): its blocks would not lie inside the tensor.
  expect_rejected(spec, with(c, "src", HostTensor::strided(DType::kU8, {blocks, 64}, {128, 1})),
                  "src");
}

TEST(BadInput, ReshapeAndCache) {
  const OpSpec spec = paged_spec(DType::kBF16, KvCacheDtype::kFp8E4m3, 2, 32, 4);
  const OpCase c = make(spec, 4);
  const int64_t blocks = c.tensors[2].sizes()[0];
  expect_slot_checks(spec, c, blocks * 4);
  expect_rejected(spec, with(c, "key", HostTensor::zeros(DType::kF16, {5, 2, 32})), "key");
  expect_rejected(spec, with(c, "value", HostTensor::zeros(DType::kBF16, {5, 2, 16})), "value");
  expect_rejected(spec, with(c, "key", HostTensor::zeros(DType::kBF16, {3, 2, 32})), "key");
  // fp8 caches: u8 or the kv's own fp8 type; x = 16 -> [NB, 2, 2, 4, 16].
  expect_rejected(spec,
                  with(c, "key_cache", HostTensor::zeros(DType::kFp8E5m2, {blocks, 2, 2, 4, 16})),
                  "key_cache");
  expect_rejected(spec, with(c, "key_cache", HostTensor::zeros(DType::kU8, {blocks, 2, 4, 4, 8})),
                  "key_cache");
  expect_rejected(spec, with(c, "value_cache", HostTensor::zeros(DType::kU8, {blocks, 2, 32, 8})),
                  "value_cache");
  expect_rejected(spec, with(c, "k_scale", HostTensor::zeros(DType::kF16, {1})), "k_scale");
}

TEST(BadInput, ReshapeAndCacheFlash) {
  const OpSpec spec =
      flash_spec(DType::kF16, KvCacheDtype::kFp8E4m3, 2, 8, 4, CacheLayout::kNhd, true);
  const OpCase c = make(spec, 4);
  const int64_t blocks = c.tensors[2].sizes()[0];
  expect_slot_checks(spec, c, blocks * 4);
  // An HND-strided cache for an NHD spec.
  expect_rejected(
      spec,
      with(c, "key_cache", HostTensor::strided(DType::kU8, {blocks, 4, 2, 8}, {64, 8, 32, 1})),
      "key_cache");
  expect_rejected(spec, with(c, "v_scale", HostTensor::zeros(DType::kF32, {1})), "v_scale");
  expect_rejected(spec, with(c, "key_cache", HostTensor::zeros(DType::kF16, {blocks, 4, 2, 8})),
                  "key_cache");
}

TEST(BadInput, ConcatAndCacheMla) {
  for (KvCacheDtype kv : {KvCacheDtype::kAuto, KvCacheDtype::kFp8DsMla}) {
    const OpSpec spec = mla_spec(DType::kBF16, kv, 512, 64, 16);
    SCOPED_TRACE(to_string(spec));
    const OpCase c = make(spec, 5);
    const int64_t blocks = c.tensors[2].sizes()[0];
    expect_slot_checks(spec, c, blocks * 16);
    expect_rejected(spec, with(c, "kv_c", HostTensor::zeros(DType::kF32, {6, 512})), "kv_c");
    expect_rejected(spec, with(c, "k_pe", HostTensor::zeros(DType::kBF16, {6, 1, 64})), "k_pe");
    // ds_mla entries are 656 bytes; auto entries 576 bf16 values.
    expect_rejected(spec, with(c, "kv_cache", HostTensor::zeros(DType::kU8, {blocks, 16, 576})),
                    "kv_cache");
  }
}

TEST(BadInput, ConcatAndCacheMlaRopeFused) {
  const OpSpec spec =
      rope_fused_spec(DType::kBF16, KvCacheDtype::kAuto, 64, 32, 2, RopeStyle::kNeox, 8);
  const OpCase c = make(spec, 5);
  const int64_t blocks = c.tensors[6].sizes()[0];
  expect_slot_checks(spec, c, blocks * 8);
  // A position past the cos/sin table (64 rows), on the last token.
  HostTensor positions = c.tensors[0];
  positions.set(4, 64);
  expect_rejected(spec, with(c, "positions", positions), "positions");
  positions.set(4, -1);
  expect_rejected(spec, with(c, "positions", positions), "positions");
  expect_rejected(spec, with(c, "slot_mapping", HostTensor::zeros(DType::kI64, {6})),
                  "slot_mapping");
  expect_rejected(spec, with(c, "k_pe", HostTensor::zeros(DType::kBF16, {5, 16})), "k_pe");
  expect_rejected(spec, with(c, "kv_cache_scale", HostTensor::zeros(DType::kF32, {2})),
                  "kv_cache_scale");
}

TEST(BadInput, ConvertFp8) {
  const OpSpec spec = convert_spec(DType::kFp8E4m3, DType::kBF16);
  const OpCase c = make(spec, 8);
  expect_rejected(spec, with(c, "dst_cache", HostTensor::zeros(DType::kFp8E5m2, {8})), "dst_cache");
  expect_rejected(spec, with(c, "src_cache", HostTensor::zeros(DType::kF16, {8})), "src_cache");
  expect_rejected(spec, with(c, "dst_cache", HostTensor::zeros(DType::kU8, {9})), "dst_cache");
  expect_rejected(spec, with(c, "src_cache", HostTensor::row_strided(DType::kBF16, {2, 4}, 8)),
                  "src_cache");
}

// The case with every block-table entry set to `value`.
OpCase with_all_blocks(OpCase c, double value) {
  test::fill_equal(c.tensors[size_t(index_of(c, "block_table"))], value);
  return c;
}

TEST(BadInput, Gathers) {
  // Block size 2 and 12 rows over at most 3 requests: some request has >= 4 rows and so
  // reads at least two block-table columns.
  constexpr int64_t kRows = 12;
  const OpSpec gather = gather_spec(DType::kBF16, KvCacheDtype::kFp8E4m3, 16, 2);
  const OpSpec cp = cp_gather_spec(DType::kF32, 16, 2);
  const OpSpec up = upconvert_spec(2);
  const OpSpec idx = indexer_gather_spec(128, 128, 2);
  for (const OpSpec& spec : {gather, cp, up, idx}) {
    SCOPED_TRACE(to_string(spec));
    const OpCase c = make(spec, kRows);
    const int64_t blocks = c.tensors[0].sizes()[0];
    const HostTensor& table = c.tensors[size_t(index_of(c, "block_table"))];
    expect_rejected(spec, with_all_blocks(c, double(blocks)), "block_table");
    expect_rejected(spec, with_all_blocks(c, -1), "block_table");
    expect_rejected(spec, with(c, "block_table", HostTensor::zeros(DType::kI64, table.sizes())),
                    "block_table");
    // One column is too few for the longest request.
    HostTensor narrow = HostTensor::zeros(DType::kI32, {table.sizes()[0], 1});
    for (int64_t r = 0; r < table.sizes()[0]; ++r) narrow.set(r, table.get(r * table.sizes()[1]));
    expect_rejected(spec, with(c, "block_table", narrow), "block_table");
  }
  // Op-specific arguments.
  const OpCase g = make(gather, kRows);
  HostTensor tts = g.tensors[4];
  tts.set(kRows - 1, 7);
  expect_rejected(gather, with(g, "token_to_seq", tts), "token_to_seq");
  expect_rejected(gather, with(g, "src_cache", HostTensor::zeros(DType::kF16, {8, 2, 16})),
                  "src_cache");
  expect_rejected(gather, with(g, "dst", HostTensor::zeros(DType::kBF16, {kRows, 15})), "dst");
  const OpCase p = make(cp, kRows);
  HostTensor cu = p.tensors[3];
  cu.set(cu.numel() - 1, 100);  // past dst's rows
  expect_rejected(cp, with(p, "cu_seq_lens", cu), "cu_seq_lens");
  expect_rejected(cp, with(p, "dst", HostTensor::zeros(DType::kBF16, {kRows, 16})), "dst");
  const OpCase u = make(up, kRows);
  expect_rejected(up, with(u, "dst", HostTensor::zeros(DType::kF16, {kRows, 576})), "dst");
  HostTensor ws = u.tensors[4];
  ws.set(0, 1);  // row 0 lies before the first request
  expect_rejected(up, with(u, "workspace_starts", ws), "workspace_starts");
  const OpCase x = make(idx, kRows);
  expect_rejected(idx, with(x, "dst_scale", HostTensor::zeros(DType::kF32, {kRows + 2, 1})),
                  "dst_scale");
  HostTensor xcu = x.tensors[4];
  xcu.set(xcu.numel() - 1, kRows + 3);  // more rows than the kRows + 2 destination rows
  expect_rejected(idx, with(x, "cu_seq_lens", xcu), "cu_seq_lens");
}

TEST(BadInput, GatherChecksEveryRowBeforeWriting) {
  // Request 0 is fine; request 1's second block is outside the cache: nothing is written, not
  // even request 0's rows.
  HostTensor src = HostTensor::zeros(DType::kF32, {4, 2, 3});
  test::fill_normal(src, 1);
  OpCase c;
  c.tensors = {src, HostTensor::zeros(DType::kF32, {6, 3}), i32({2, 2}, {1, 2, 0, 4}),
               i32({3}, {0, 2, 6}), HostTensor()};
  c.present = {true, true, true, true, false};
  c.names = {"src_cache", "dst", "block_table", "cu_seq_lens", "seq_starts"};
  c.scalars = {2};
  expect_rejected(cp_gather_spec(DType::kF32, 3, 2), c, "block_table[1, 1] = 4");
}

TEST(BadInput, IndexerKQuantAndCache) {
  const OpSpec spec = indexer_spec(DType::kBF16, 128, 128, 16, ScaleFormat::kUe8m0);
  const OpCase c = make(spec, 5);
  const int64_t blocks = c.tensors[1].sizes()[0];
  expect_slot_checks(spec, c, blocks * 16);
  expect_rejected(spec, with(c, "kv_cache", HostTensor::zeros(DType::kU8, {blocks, 16, 128})),
                  "kv_cache");
  expect_rejected(spec, with(c, "k", HostTensor::row_strided(DType::kBF16, {5, 128}, 256)), "k");
  expect_rejected(spec, with(c, "slot_mapping", HostTensor::zeros(DType::kI64, {4})),
                  "slot_mapping");
}

TEST(BadInput, WrongArgumentCount) {
  for (const OpSpec& spec : cache_specs()) {
    OpCase c = make(spec, 2);
    c.tensors.pop_back();
    c.present.pop_back();
    c.names.pop_back();
    const Status status = ref::run(spec, c.args());
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << to_string(spec);
    EXPECT_NE(status.message().find(op_name(spec.op)), std::string::npos) << status.message();
  }
}

// rotary_embedding_and_cache_flash is defined as rotary_embedding then
// reshape_and_cache_flash: the fused oracle equals the two oracles run in sequence on the same
// tensors (q, k rotated; both caches), for every layout, scale kind and pairing.
TEST(RopeAndCacheFlash, EqualsRopeThenReshapeAndCacheFlash) {
  for (KvCacheDtype kv : {KvCacheDtype::kAuto, KvCacheDtype::kFp8E5m2}) {
    for (CacheLayout layout : {CacheLayout::kNhd, CacheLayout::kHnd}) {
      for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
        const ir::RopeFlashCacheWriteParams p{
            DType::kBF16, kv, 6, 3, 40, 24, style, 8, layout, kv != KvCacheDtype::kAuto};
        const OpSpec spec = OpSpec::make(OpKind::kRotaryEmbeddingAndCacheFlash, p);
        OpCase fused = make(spec, 13);
        OpCase split = fused;
        run_ok(spec, fused.args());
        const auto& t = split.tensors;
        run_ok(OpSpec::make(OpKind::kRotaryEmbedding,
                            ir::RopeParams{p.dtype, p.dtype, p.head_size, p.rot_dim, p.style,
                                           p.head_count_q, p.head_count_kv, true}),
               KernelArgs({t[0].tensor(), t[1].tensor(), t[2].tensor(), t[4].tensor()}));
        run_ok(OpSpec::make(OpKind::kReshapeAndCacheFlash,
                            ir::FlashCacheWriteParams{p.dtype, p.kv, p.head_count_kv, p.head_size,
                                                      p.block_size, p.layout, p.per_head_scale}),
               KernelArgs({t[2].tensor(), t[3].tensor(), t[5].tensor(), t[6].tensor(),
                           t[7].tensor(), t[8].tensor(), t[9].tensor()}));
        for (int i : fused.outputs) {
          EXPECT_TRUE(fused.tensors[size_t(i)].storage() == split.tensors[size_t(i)].storage())
              << to_string(spec) << " " << fused.names[size_t(i)];
        }
        // The rotation and the cache write both happened.
        const OpCase before = make(spec, 13);
        EXPECT_FALSE(before.tensors[1].storage() == fused.tensors[1].storage());
        EXPECT_FALSE(before.tensors[5].storage() == fused.tensors[5].storage());
      }
    }
  }
}

}  // namespace
}  // namespace jit
