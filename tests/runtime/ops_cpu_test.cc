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
        ops::cpu_attn_reshape_and_cache(
            a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3), a.tensor(4),
            std::string(ir::enum_name(s.get<ir::CpuAttnCacheWriteParams>().isa)));
      });
}

TEST(OpsCpu, AttentionWithKvCacheMatchesRef) {
  expect_every_example_matches_ref(
      "cpu_attention_with_kv_cache", {1, 4}, [](const OpSpec& s, const KernelArgs& a) {
        ops::cpu_attention_with_kv_cache(
            a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3), a.tensor(4), a.tensor(5),
            a.scalar(0), s.get<ir::CpuAttentionParams>().causal, a.tensor(6), int64_t(a.scalar(1)),
            int64_t(a.scalar(2)), a.tensor(7), a.scalar(3), a.tensor(8), a.tensor(9));
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
