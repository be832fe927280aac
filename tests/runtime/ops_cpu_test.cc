// jit::ops for the CPU attention ops: every example spec through the vLLM signature equals
// ref; bad arguments (ISA strings, metadata blobs) are named.
#include "tests/runtime/ops_test_util.h"

namespace jit {
namespace {

using test::expect_every_example_matches_ref;
using test::expect_ops_error;
using test::HostTensor;

TEST(OpsCpu, SchedulerMetadataMatchesRef) {
  expect_every_example_matches_ref(
      "cpu_attn_get_scheduler_metadata", {1, 5}, [](const OpSpec& s, const KernelArgs& a) {
        const auto& p = s.get<ir::CpuAttnSchedulerParams>();
        ops::cpu_attn_get_scheduler_metadata(a.tensor(0), int64_t(a.scalar(0)), p.head_count_q,
                                             p.head_count_kv, p.head_size, a.tensor(1), p.dtype,
                                             a.tensor(2), p.causal, int64_t(a.scalar(1)),
                                             std::string(ir::enum_name(p.isa)), a.scalar(2) != 0);
      });
}

TEST(OpsCpu, ReshapeAndCacheMatchesRef) {
  expect_every_example_matches_ref(
      "cpu_attn_reshape_and_cache", {1, 9}, [](const OpSpec& s, const KernelArgs& a) {
        // fp8 examples: the caches have the fp8 dtype and kv_cache_dtype is "auto", so the op
        // detects the format from the tensor (as with torch float8 caches); scales forwarded.
        const bool fp8 = s.get<ir::CpuAttnCacheWriteParams>().kv != ir::KvCacheDtype::kAuto;
        ops::cpu_attn_reshape_and_cache(
            a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3), a.tensor(4),
            std::string(ir::enum_name(s.get<ir::CpuAttnCacheWriteParams>().isa)),
            fp8 ? a.scalar(0) : 1.0, fp8 ? a.scalar(1) : 1.0);
      });
}

TEST(OpsCpu, AttentionWithKvCacheMatchesRef) {
  expect_every_example_matches_ref(
      "cpu_attention_with_kv_cache", {1, 4}, [](const OpSpec& s, const KernelArgs& a) {
        const bool fp8 = s.get<ir::CpuAttentionParams>().kv != ir::KvCacheDtype::kAuto;
        ops::cpu_attention_with_kv_cache(
            a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3), a.tensor(4), a.tensor(5),
            a.scalar(0), s.get<ir::CpuAttentionParams>().causal, a.tensor(6), int64_t(a.scalar(1)),
            int64_t(a.scalar(2)), a.tensor(7), a.scalar(3), a.tensor(8), a.tensor(9),
            fp8 ? a.scalar(4) : 1.0, fp8 ? a.scalar(5) : 1.0);
      });
}

TEST(OpsCpu, UnknownIsaIsNamed) {
  HostTensor key = HostTensor::zeros(DType::kBF16, {1, 1, 32});
  HostTensor cache = HostTensor::zeros(DType::kBF16, {1, 1, 32, 32});
  HostTensor slots = HostTensor::from_values(DType::kI64, {1}, {0});
  expect_ops_error(
      [&] {
        ops::cpu_attn_reshape_and_cache(key.tensor(), key.tensor(), cache.tensor(), cache.tensor(),
                                        slots.tensor(), "avx512");
      },
      {"'isa'", "avx512", "vec16"});
}

// vLLM allocates fp8 caches as uint8: the kv_cache_dtype string names the format, and the
// codes equal the ref's for the same spec; unknown strings and fp8 on vec16 are named.
TEST(OpsCpu, Fp8U8CachesFollowTheKvCacheDtypeString) {
  HostTensor key = test::filled(DType::kBF16, {3, 2, 64}, 1);
  HostTensor value = test::filled(DType::kBF16, {3, 2, 64}, 2);
  HostTensor slots = HostTensor::from_values(DType::kI64, {3}, {0, 33, 62});
  for (const char* kv_name : {"fp8", "fp8_e5m2"}) {
    HostTensor kc = HostTensor::zeros(DType::kU8, {2, 2, 32, 64}), vc = kc;
    HostTensor want_k = kc, want_v = vc;
    ops::cpu_attn_reshape_and_cache(key.tensor(), value.tensor(), kc.tensor(), vc.tensor(),
                                    slots.tensor(), "vec", 0.37, 1.7, kv_name);
    ir::CpuAttnCacheWriteParams p{ir::CpuAttnIsa::kVec, DType::kBF16, 2, 64, 32};
    p.kv = std::string_view(kv_name) == "fp8" ? ir::KvCacheDtype::kFp8E4m3
                                              : ir::KvCacheDtype::kFp8E5m2;
    ASSERT_TRUE(codegen::ref::run(OpSpec::make(OpKind::kCpuAttnReshapeAndCache, p),
                                  KernelArgs({key.tensor(), value.tensor(), want_k.tensor(),
                                              want_v.tensor(), slots.tensor()},
                                             {0.37, 1.7}))
                    .is_ok());
    EXPECT_TRUE(test::matches(kc, want_k, test::Tolerance::exact())) << kv_name;
    EXPECT_TRUE(test::matches(vc, want_v, test::Tolerance::exact())) << kv_name;
    int64_t nonzero = 0;
    for (double x : kc.values()) nonzero += x != 0;
    EXPECT_GT(nonzero, 0) << kv_name;
  }
  HostTensor kc = HostTensor::zeros(DType::kU8, {2, 2, 32, 64});
  expect_ops_error(
      [&] {
        ops::cpu_attn_reshape_and_cache(key.tensor(), value.tensor(), kc.tensor(), kc.tensor(),
                                        slots.tensor(), "vec", 1.0, 1.0, "fp7");
      },
      {"kv_cache_dtype", "fp7"});
  HostTensor key80 = test::filled(DType::kBF16, {3, 2, 80}, 1);
  HostTensor kc80 = HostTensor::zeros(DType::kU8, {2, 2, 32, 80});
  expect_ops_error(
      [&] {
        ops::cpu_attn_reshape_and_cache(key80.tensor(), key80.tensor(), kc80.tensor(),
                                        kc80.tensor(), slots.tensor(), "vec", 1.0, 1.0, "fp8");
      },
      {"kv=fp8_e4m3", "isa=vec16"});
}

TEST(OpsCpu, SchedulerRejectsAnIntegerDtype) {
  HostTensor md = HostTensor::zeros(DType::kI8, {ops::cpu_attn_metadata_bytes()});
  HostTensor lens = HostTensor::from_values(DType::kI32, {1}, {1});
  HostTensor qsl = HostTensor::from_values(DType::kI32, {2}, {0, 1});
  expect_ops_error(
      [&] {
        ops::cpu_attn_get_scheduler_metadata(md.tensor(), 1, 1, 1, 32, lens.tensor(), DType::kI32,
                                             qsl.tensor(), true, -1, "vec", true);
      },
      {"'dtype'", "i32"});
}

TEST(OpsCpu, AttentionRejectsMetadataThatIsNotABlob) {
  HostTensor q = HostTensor::zeros(DType::kF32, {1, 1, 32});
  HostTensor cache = HostTensor::zeros(DType::kF32, {1, 1, 32, 32});
  HostTensor qsl = HostTensor::from_values(DType::kI32, {2}, {0, 1});
  HostTensor lens = HostTensor::from_values(DType::kI32, {1}, {1});
  HostTensor table = HostTensor::from_values(DType::kI32, {1, 1}, {0});
  HostTensor short_blob = HostTensor::zeros(DType::kI8, {8});
  HostTensor garbage = HostTensor::zeros(DType::kI8, {ops::cpu_attn_metadata_bytes()});
  test::fill_uniform(garbage, 3, -128, 127);
  HostTensor out = HostTensor::zeros(DType::kF32, {1, 1, 32});
  for (const HostTensor* md : {&short_blob, &garbage}) {
    expect_ops_error(
        [&] {
          ops::cpu_attention_with_kv_cache(q.tensor(), cache.tensor(), cache.tensor(), out.tensor(),
                                           qsl.tensor(), lens.tensor(), 0.1, true, Tensor{}, -1, -1,
                                           table.tensor(), 0.0, md->tensor(), Tensor{});
        },
        {"scheduler_metadata"});
  }
}

}  // namespace
}  // namespace jit
