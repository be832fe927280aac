// jit::ops for paged attention, merge_attn_states, the sparse-index conversion and the top-k:
// every example spec through the vLLM signature equals ref; bad arguments are named.
#include "tests/runtime/ops_test_util.h"

namespace jit {
namespace {

using test::expect_every_example_matches_ref;
using test::expect_ops_error;
using test::HostTensor;

std::string kv_name(const ir::PagedAttentionParams& p) {
  return std::string(ir::enum_name(p.kv));
}

// The block-sparse integers as vLLM passes them: the case's values in block-sparse mode, else
// the Python defaults (vLLM turns block-sparse masking on iff vert_stride > 1, so the case's
// values must not reach a call whose spec has blocksparse=false).
struct Sparse {
  int64_t tp_rank = 0, local_blocks = 0, vert_stride = 0, block_size = 64, sliding_step = 0;
};
Sparse sparse_args(const ir::PagedAttentionParams& p, const KernelArgs& a) {
  if (!p.blocksparse) return {};
  return {int64_t(a.scalar(2)), int64_t(a.scalar(3)), int64_t(a.scalar(4)), int64_t(a.scalar(5)),
          int64_t(a.scalar(6))};
}

TEST(OpsAttention, PagedAttentionV1MatchesRef) {
  expect_every_example_matches_ref(
      "paged_attention_v1", {1, 4}, [](const OpSpec& s, const KernelArgs& a) {
        const auto& p = s.get<ir::PagedAttentionParams>();
        const Sparse b = sparse_args(p, a);
        ops::paged_attention_v1(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3), p.head_count_kv,
                                a.scalar(0), a.tensor(4), a.tensor(5), p.block_size,
                                int64_t(a.scalar(1)), a.tensor(6), kv_name(p), a.tensor(7),
                                a.tensor(8), b.tp_rank, b.local_blocks, b.vert_stride, b.block_size,
                                b.sliding_step);
      });
}

TEST(OpsAttention, PagedAttentionV2MatchesRef) {
  expect_every_example_matches_ref(
      "paged_attention_v2", {1, 4}, [](const OpSpec& s, const KernelArgs& a) {
        const auto& p = s.get<ir::PagedAttentionParams>();
        const Sparse b = sparse_args(p, a);
        ops::paged_attention_v2(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3), a.tensor(4),
                                a.tensor(5), a.tensor(6), p.head_count_kv, a.scalar(0), a.tensor(7),
                                a.tensor(8), p.block_size, int64_t(a.scalar(1)), a.tensor(9),
                                kv_name(p), a.tensor(10), a.tensor(11), b.tp_rank, b.local_blocks,
                                b.vert_stride, b.block_size, b.sliding_step, p.partition_size);
      });
}

TEST(OpsAttention, MergeAttnStatesMatchesRef) {
  expect_every_example_matches_ref(
      "merge_attn_states", {1, 6}, [](const OpSpec&, const KernelArgs& a) {
        std::optional<int64_t> with_context;
        if (a.scalar(0) >= 0) with_context = int64_t(a.scalar(0));
        ops::merge_attn_states(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3), a.tensor(4),
                               a.tensor(5), with_context, a.tensor(6));
      });
}

TEST(OpsAttention, ConvertVerticalSlashIndexesMatchesRef) {
  expect_every_example_matches_ref(
      "convert_vertical_slash_indexes", {5, 130}, [](const OpSpec& s, const KernelArgs& a) {
        const auto& p = s.get<ir::VerticalSlashParams>();
        ops::convert_vertical_slash_indexes(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3),
                                            a.tensor(4), a.tensor(5), a.tensor(6), a.tensor(7),
                                            int64_t(a.scalar(0)), p.block_m, p.block_n, p.causal);
      });
}

TEST(OpsAttention, ConvertVerticalSlashIndexesMergeheadMatchesRef) {
  expect_every_example_matches_ref("convert_vertical_slash_indexes_mergehead", {5, 130},
                                   [](const OpSpec& s, const KernelArgs& a) {
                                     const auto& p = s.get<ir::VerticalSlashParams>();
                                     ops::convert_vertical_slash_indexes_mergehead(
                                         a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3),
                                         a.tensor(4), a.tensor(5), a.tensor(6), a.tensor(7),
                                         a.tensor(8), a.tensor(9), int64_t(a.scalar(0)), p.block_m,
                                         p.block_n, p.causal);
                                   });
}

TEST(OpsAttention, TopKPerRowPrefillMatchesRef) {
  expect_every_example_matches_ref(
      "top_k_per_row_prefill", {1, 3}, [](const OpSpec& s, const KernelArgs& a) {
        ops::top_k_per_row_prefill(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3),
                                   int64_t(a.scalar(0)), int64_t(a.scalar(1)), int64_t(a.scalar(2)),
                                   s.get<ir::TopKParams>().top_k);
      });
}

TEST(OpsAttention, TopKPerRowDecodeMatchesRef) {
  expect_every_example_matches_ref(
      "top_k_per_row_decode", {1, 4}, [](const OpSpec& s, const KernelArgs& a) {
        ops::top_k_per_row_decode(a.tensor(0), int64_t(a.scalar(0)), a.tensor(1), a.tensor(2),
                                  int64_t(a.scalar(1)), int64_t(a.scalar(2)), int64_t(a.scalar(3)),
                                  s.get<ir::TopKParams>().top_k);
      });
}

// merge_attn_states on [T=2, H=1, D=4] f32 with the arguments the bad-input tests spoil.
struct MergeCall {
  HostTensor out = HostTensor::zeros(DType::kF32, {2, 1, 4});
  HostTensor prefix = HostTensor::zeros(DType::kF32, {2, 1, 4});
  HostTensor suffix = HostTensor::zeros(DType::kF32, {2, 1, 4});
  HostTensor lse = HostTensor::from_values(DType::kF32, {1, 2}, {0.5, -1.0});
  void run(std::optional<int64_t> with_context = std::nullopt) {
    ops::merge_attn_states(out.tensor(), Tensor{}, prefix.tensor(), lse.tensor(), suffix.tensor(),
                           lse.tensor(), with_context);
  }
};

TEST(OpsAttention, MergeRejectsNegativePrefillCountAndIntegerInputs) {
  MergeCall c;
  expect_ops_error([&] { c.run(-2); }, {"prefill_tokens_with_context", "-2"});
  c.prefix = HostTensor::zeros(DType::kI32, {2, 1, 4});
  expect_ops_error([&] { c.run(); }, {"prefix_output", "i32"});
}

TEST(OpsAttention, MergeRejectsMismatchedSuffixShape) {
  MergeCall c;
  c.suffix = HostTensor::zeros(DType::kF32, {2, 1, 5});
  const HostTensor before = c.out;
  expect_ops_error([&] { c.run(); }, {"suffix_output"});
  EXPECT_TRUE(test::matches(c.out, before, test::Tolerance::exact()));
}

TEST(OpsAttention, PagedAttentionRejectsUnknownKvCacheDtype) {
  HostTensor out = HostTensor::zeros(DType::kF32, {1, 1, 4});
  HostTensor query = HostTensor::zeros(DType::kF32, {1, 1, 4});
  HostTensor kc = HostTensor::zeros(DType::kF32, {1, 1, 1, 4, 4});
  HostTensor vc = HostTensor::zeros(DType::kF32, {1, 1, 4, 4});
  HostTensor table = HostTensor::from_values(DType::kI32, {1, 1}, {0});
  HostTensor lens = HostTensor::from_values(DType::kI32, {1}, {1});
  expect_ops_error(
      [&] {
        ops::paged_attention_v1(out.tensor(), query.tensor(), kc.tensor(), vc.tensor(), 1, 0.5,
                                table.tensor(), lens.tensor(), 4, 1, Tensor{}, "int4", Tensor{},
                                Tensor{});
      },
      {"paged_attention_v1", "kv_cache_dtype", "int4"});
}

TEST(OpsAttention, TopKRejectsStridesThatAreNotTheLogits) {
  HostTensor logits = HostTensor::zeros(DType::kF32, {2, 8});
  HostTensor starts = HostTensor::from_values(DType::kI32, {2}, {0, 0});
  HostTensor ends = HostTensor::from_values(DType::kI32, {2}, {8, 8});
  HostTensor indices = HostTensor::zeros(DType::kI32, {2, 4});
  expect_ops_error(
      [&] {
        ops::top_k_per_row_prefill(logits.tensor(), starts.tensor(), ends.tensor(),
                                   indices.tensor(), 2, 9, 1, 4);
      },
      {"stride0"});
}

}  // namespace
}  // namespace jit
