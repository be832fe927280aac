// jit::ops for the cache family: every example spec through the vLLM signature equals ref,
// and bad arguments are rejected with the argument named and nothing written.
#include "tests/runtime/ops_test_util.h"

namespace jit {
namespace {

using test::expect_every_example_matches_ref;
using test::expect_ops_error;
using test::HostTensor;

std::string kv_name(ir::KvCacheDtype kv) {
  return std::string(ir::enum_name(kv));
}

TEST(OpsCache, SwapBlocksMatchesRef) {
  expect_every_example_matches_ref("swap_blocks", {1, 5}, [](const OpSpec& s, const KernelArgs& a) {
    ops::swap_blocks(a.tensor(0), a.tensor(1), s.get<ir::SwapBlocksParams>().block_bytes,
                     a.tensor(2));
  });
}

TEST(OpsCache, ReshapeAndCacheMatchesRef) {
  expect_every_example_matches_ref(
      "reshape_and_cache", {1, 9}, [](const OpSpec& s, const KernelArgs& a) {
        ops::reshape_and_cache(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3), a.tensor(4),
                               kv_name(s.get<ir::PagedCacheWriteParams>().kv), a.tensor(5),
                               a.tensor(6));
      });
}

TEST(OpsCache, ReshapeAndCacheFlashMatchesRefInBothLayouts) {
  expect_every_example_matches_ref(
      "reshape_and_cache_flash", {1, 9}, [](const OpSpec& s, const KernelArgs& a) {
        ops::reshape_and_cache_flash(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3),
                                     a.tensor(4), kv_name(s.get<ir::FlashCacheWriteParams>().kv),
                                     a.tensor(5), a.tensor(6));
      });
}

TEST(OpsCache, ConcatAndCacheMlaMatchesRef) {
  expect_every_example_matches_ref(
      "concat_and_cache_mla", {1, 7}, [](const OpSpec& s, const KernelArgs& a) {
        ops::concat_and_cache_mla(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3),
                                  kv_name(s.get<ir::MlaCacheWriteParams>().kv), a.tensor(4));
      });
}

TEST(OpsCache, ConcatAndCacheMlaRopeFusedMatchesRef) {
  expect_every_example_matches_ref(
      "concat_and_cache_mla_rope_fused", {1, 5}, [](const OpSpec& s, const KernelArgs& a) {
        const auto& p = s.get<ir::MlaRopeCacheWriteParams>();
        ops::concat_and_cache_mla_rope_fused(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3),
                                             a.tensor(4), p.style == ir::RopeStyle::kNeox,
                                             a.tensor(5), a.tensor(6), kv_name(p.kv), a.tensor(7));
      });
}

TEST(OpsCache, ConvertFp8MatchesRefBothDirections) {
  expect_every_example_matches_ref("convert_fp8", {1, 37}, [](const OpSpec&, const KernelArgs& a) {
    ops::convert_fp8(a.tensor(0), a.tensor(1), a.scalar(0), "fp8");
  });
}

TEST(OpsCache, GatherAndMaybeDequantCacheMatchesRef) {
  expect_every_example_matches_ref(
      "gather_and_maybe_dequant_cache", {1, 9}, [](const OpSpec& s, const KernelArgs& a) {
        ops::gather_and_maybe_dequant_cache(
            a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3), a.tensor(4), int64_t(a.scalar(0)),
            kv_name(s.get<ir::GatherCacheParams>().kv), a.tensor(5), a.tensor(6));
      });
}

TEST(OpsCache, CpGatherCacheMatchesRef) {
  expect_every_example_matches_ref(
      "cp_gather_cache", {1, 9}, [](const OpSpec&, const KernelArgs& a) {
        ops::cp_gather_cache(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3),
                             int64_t(a.scalar(0)), a.tensor(4));
      });
}

TEST(OpsCache, CpGatherAndUpconvertMatchesRef) {
  expect_every_example_matches_ref(
      "cp_gather_and_upconvert_fp8_kv_cache", {1, 9}, [](const OpSpec&, const KernelArgs& a) {
        ops::cp_gather_and_upconvert_fp8_kv_cache(a.tensor(0), a.tensor(1), a.tensor(2),
                                                  a.tensor(3), a.tensor(4), int64_t(a.scalar(0)));
      });
}

TEST(OpsCache, IndexerKQuantAndCacheMatchesRef) {
  expect_every_example_matches_ref(
      "indexer_k_quant_and_cache", {1, 9}, [](const OpSpec& s, const KernelArgs& a) {
        const auto& p = s.get<ir::IndexerQuantParams>();
        ops::indexer_k_quant_and_cache(a.tensor(0), a.tensor(1), a.tensor(2), p.quant_block,
                                       p.scale_fmt == ir::ScaleFormat::kUe8m0 ? "ue8m0" : "auto");
      });
}

TEST(OpsCache, CpGatherIndexerKQuantCacheMatchesRef) {
  expect_every_example_matches_ref(
      "cp_gather_indexer_k_quant_cache", {1, 9}, [](const OpSpec&, const KernelArgs& a) {
        ops::cp_gather_indexer_k_quant_cache(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3),
                                             a.tensor(4));
      });
}

// A small auto-mode flash write whose arguments the bad-input tests spoil one at a time.
struct FlashCall {
  HostTensor key = HostTensor::zeros(DType::kBF16, {2, 2, 8});
  HostTensor value = HostTensor::zeros(DType::kBF16, {2, 2, 8});
  HostTensor key_cache = HostTensor::zeros(DType::kBF16, {3, 4, 2, 8});
  HostTensor value_cache = HostTensor::zeros(DType::kBF16, {3, 4, 2, 8});
  HostTensor slots = HostTensor::from_values(DType::kI64, {2}, {0, 5});
  HostTensor scale = HostTensor::from_values(DType::kF32, {1}, {1.0});
  FlashCall() {
    test::fill_normal(key, 1);
    test::fill_normal(value, 2);
  }
  void run(std::string_view kv = "auto") {
    ops::reshape_and_cache_flash(key.tensor(), value.tensor(), key_cache.tensor(),
                                 value_cache.tensor(), slots.tensor(), kv, scale.tensor(),
                                 scale.tensor());
  }
};

TEST(OpsCache, BadKvCacheDtypeIsNamedAndNothingIsWritten) {
  FlashCall c;
  const HostTensor before = c.key_cache;
  expect_ops_error([&] { c.run("fp9"); }, {"kv_cache_dtype", "fp9", "fp8_e4m3"});
  EXPECT_TRUE(test::matches(c.key_cache, before, test::Tolerance::exact()));
  c.run("bfloat16");  // vLLM's spelling of auto for a bf16 model
  EXPECT_FALSE(test::matches(c.key_cache, before, test::Tolerance::exact()));
}

TEST(OpsCache, OutOfRangeSlotIsNamedAndNothingIsWritten) {
  FlashCall c;
  c.slots = HostTensor::from_values(DType::kI64, {2}, {0, 12});  // 3 blocks x 4 slots
  const HostTensor before = c.key_cache;
  expect_ops_error([&] { c.run(); }, {"slot_mapping"});
  EXPECT_TRUE(test::matches(c.key_cache, before, test::Tolerance::exact()));
}

TEST(OpsCache, WrongRankKeyIsNamed) {
  FlashCall c;
  HostTensor flat = HostTensor::zeros(DType::kBF16, {2, 16});
  c.key = flat;
  expect_ops_error([&] { c.run(); }, {"reshape_and_cache_flash", "'key'"});
}

TEST(OpsCache, IntegerKeyIsNamed) {
  FlashCall c;
  c.key = HostTensor::zeros(DType::kI32, {2, 2, 8});
  expect_ops_error([&] { c.run(); }, {"'key'", "i32", "bf16"});
}

TEST(OpsCache, ConvertFp8RejectsE5m2AndTwoCodeTensors) {
  HostTensor src = HostTensor::zeros(DType::kF32, {8});
  HostTensor dst = HostTensor::zeros(DType::kU8, {8});
  expect_ops_error([&] { ops::convert_fp8(dst.tensor(), src.tensor(), 1.0, "fp8_e5m2"); },
                   {"kv_cache_dtype", "fp8_e5m2"});
  HostTensor codes = HostTensor::zeros(DType::kU8, {8});
  expect_ops_error([&] { ops::convert_fp8(dst.tensor(), codes.tensor(), 1.0, "fp8"); },
                   {"dst_cache", "src_cache"});
}

TEST(OpsCache, IndexerRejectsUnknownScaleFormat) {
  HostTensor k = HostTensor::zeros(DType::kBF16, {2, 128});
  HostTensor cache = HostTensor::zeros(DType::kU8, {2, 4, 132});
  HostTensor slots = HostTensor::from_values(DType::kI64, {2}, {0, 1});
  expect_ops_error(
      [&] {
        ops::indexer_k_quant_and_cache(k.tensor(), cache.tensor(), slots.tensor(), 128, "e8");
      },
      {"kv_cache_dtype", "ue8m0"});
}

TEST(OpsCache, IndexerGatherRejectsAScaleWidthThatIsNoGroupSize) {
  HostTensor cache = HostTensor::zeros(DType::kU8, {2, 4, 132});
  HostTensor dst_k = HostTensor::zeros(DType::kU8, {3, 128});
  HostTensor dst_scale = HostTensor::zeros(DType::kU8, {3, 3});
  HostTensor table = HostTensor::from_values(DType::kI32, {1, 1}, {0});
  HostTensor cu = HostTensor::from_values(DType::kI32, {2}, {0, 3});
  expect_ops_error(
      [&] {
        ops::cp_gather_indexer_k_quant_cache(cache.tensor(), dst_k.tensor(), dst_scale.tensor(),
                                             table.tensor(), cu.tensor());
      },
      {"dst_scale", "quant_block"});
}

TEST(OpsCache, SwapBlocksRejectsAZeroBlockSize) {
  HostTensor src = HostTensor::zeros(DType::kU8, {2, 16});
  HostTensor mapping = HostTensor::from_values(DType::kI64, {1, 2}, {0, 1});
  expect_ops_error([&] { ops::swap_blocks(src.tensor(), src.tensor(), 0, mapping.tensor()); },
                   {"block_size_in_bytes", "0"});
}

}  // namespace
}  // namespace jit
