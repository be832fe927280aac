// jit::ops for paged attention, merge_attn_states, the vertical/slash sparse-index conversion
// and the per-row top-k (spec/attention_ops.md, docs/ops.md).
#include <fmt/format.h>

#include "ir/check_args.h"
#include "runtime/ops.h"
#include "runtime/ops_internal.h"

namespace jit::ops {

using detail::expect_float;
using detail::expect_tensor_rank;
using detail::parse_kv_cache_dtype;
using detail::run;

namespace {

// v1 and v2 share everything but the scratch tensors and the partition size.
ir::PagedAttentionParams paged_params(std::string_view op, const Tensor& query,
                                      int64_t num_kv_heads, int64_t block_size,
                                      const Tensor& alibi_slopes, std::string_view kv_cache_dtype,
                                      int64_t blocksparse_vert_stride) {
  expect_float(op, "query", query);
  expect_tensor_rank(op, "query", query, {3});
  ir::PagedAttentionParams p;
  p.dtype = query.dtype();
  p.kv = parse_kv_cache_dtype(op, kv_cache_dtype, false);
  p.head_size = query.size(2);
  p.block_size = block_size;
  p.head_count_q = query.size(1);
  p.head_count_kv = num_kv_heads;
  p.alibi = alibi_slopes.defined();
  // vLLM's kernels switch to block-sparse masking iff vert_stride > 1.
  p.blocksparse = blocksparse_vert_stride > 1;
  return p;
}

void vertical_slash(OpKind op, KernelArgs args, int64_t context_size, int64_t block_size_M,
                    int64_t block_size_N, bool causal) {
  ir::VerticalSlashParams p;
  p.block_m = block_size_M;
  p.block_n = block_size_N;
  p.causal = causal;
  args.add_scalar(double(context_size));
  run(OpSpec::make(op, p), args, context_size);
}

ir::TopKParams top_k_params(int64_t topK) {
  ir::TopKParams p;
  p.top_k = topK;
  return p;
}

}  // namespace

void paged_attention_v1(Tensor out, Tensor query, Tensor key_cache, Tensor value_cache,
                        int64_t num_kv_heads, double scale, Tensor block_tables, Tensor seq_lens,
                        int64_t block_size, int64_t max_seq_len, Tensor alibi_slopes,
                        std::string_view kv_cache_dtype, Tensor k_scale, Tensor v_scale,
                        int64_t tp_rank, int64_t blocksparse_local_blocks,
                        int64_t blocksparse_vert_stride, int64_t blocksparse_block_size,
                        int64_t blocksparse_head_sliding_step) {
  const ir::PagedAttentionParams p =
      paged_params("paged_attention_v1", query, num_kv_heads, block_size, alibi_slopes,
                   kv_cache_dtype, blocksparse_vert_stride);
  run(OpSpec::make(OpKind::kPagedAttentionV1, p),
      KernelArgs({out, query, key_cache, value_cache, block_tables, seq_lens, alibi_slopes, k_scale,
                  v_scale},
                 {scale, double(max_seq_len), double(tp_rank), double(blocksparse_local_blocks),
                  double(blocksparse_vert_stride), double(blocksparse_block_size),
                  double(blocksparse_head_sliding_step)}),
      query.size(0));
}

void paged_attention_v2(Tensor out, Tensor exp_sums, Tensor max_logits, Tensor tmp_out,
                        Tensor query, Tensor key_cache, Tensor value_cache, int64_t num_kv_heads,
                        double scale, Tensor block_tables, Tensor seq_lens, int64_t block_size,
                        int64_t max_seq_len, Tensor alibi_slopes, std::string_view kv_cache_dtype,
                        Tensor k_scale, Tensor v_scale, int64_t tp_rank,
                        int64_t blocksparse_local_blocks, int64_t blocksparse_vert_stride,
                        int64_t blocksparse_block_size, int64_t blocksparse_head_sliding_step,
                        int64_t partition_size) {
  ir::PagedAttentionParams p = paged_params("paged_attention_v2", query, num_kv_heads, block_size,
                                            alibi_slopes, kv_cache_dtype, blocksparse_vert_stride);
  p.partition_size = partition_size;
  run(OpSpec::make(OpKind::kPagedAttentionV2, p),
      KernelArgs({out, exp_sums, max_logits, tmp_out, query, key_cache, value_cache, block_tables,
                  seq_lens, alibi_slopes, k_scale, v_scale},
                 {scale, double(max_seq_len), double(tp_rank), double(blocksparse_local_blocks),
                  double(blocksparse_vert_stride), double(blocksparse_block_size),
                  double(blocksparse_head_sliding_step)}),
      query.size(0));
}

void merge_attn_states(Tensor output, Tensor output_lse, Tensor prefix_output, Tensor prefix_lse,
                       Tensor suffix_output, Tensor suffix_lse,
                       std::optional<int64_t> prefill_tokens_with_context, Tensor output_scale) {
  constexpr std::string_view op = "merge_attn_states";
  expect_float(op, "prefix_output", prefix_output);
  expect_tensor_rank(op, "prefix_output", prefix_output, {3});
  if (prefill_tokens_with_context && *prefill_tokens_with_context < 0) {
    detail::fail(fmt::format("{}: argument 'prefill_tokens_with_context' = {} must be >= 0 or None",
                             op, *prefill_tokens_with_context));
  }
  ir::MergeAttnStatesParams p;
  p.dtype = prefix_output.dtype();
  p.out_dtype = output_scale.defined() ? DType::kFp8E4m3 : p.dtype;
  p.head_count = prefix_output.size(1);
  p.head_size = prefix_output.size(2);
  p.output_lse = output_lse.defined();
  // KernelArgs spells None as a negative count (all tokens have a prefix).
  const double with_context =
      prefill_tokens_with_context ? double(*prefill_tokens_with_context) : -1.0;
  run(OpSpec::make(OpKind::kMergeAttnStates, p),
      KernelArgs(
          {output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, output_scale},
          {with_context}),
      prefix_output.size(0));
}

void convert_vertical_slash_indexes(Tensor block_count, Tensor block_offset, Tensor column_count,
                                    Tensor column_index, Tensor q_seqlens, Tensor kv_seqlens,
                                    Tensor vertical_indexes, Tensor slash_indexes,
                                    int64_t context_size, int64_t block_size_M,
                                    int64_t block_size_N, bool causal) {
  vertical_slash(OpKind::kConvertVerticalSlashIndexes,
                 KernelArgs({block_count, block_offset, column_count, column_index, q_seqlens,
                             kv_seqlens, vertical_indexes, slash_indexes}),
                 context_size, block_size_M, block_size_N, causal);
}

void convert_vertical_slash_indexes_mergehead(
    Tensor block_count, Tensor block_offset, Tensor column_count, Tensor column_index,
    Tensor q_seqlens, Tensor kv_seqlens, Tensor vertical_indexes, Tensor slash_indexes,
    Tensor vertical_indices_count, Tensor slash_indices_count, int64_t context_size,
    int64_t block_size_M, int64_t block_size_N, bool causal) {
  vertical_slash(
      OpKind::kConvertVerticalSlashIndexesMergehead,
      KernelArgs({block_count, block_offset, column_count, column_index, q_seqlens, kv_seqlens,
                  vertical_indexes, slash_indexes, vertical_indices_count, slash_indices_count}),
      context_size, block_size_M, block_size_N, causal);
}

void top_k_per_row_prefill(Tensor logits, Tensor rowStarts, Tensor rowEnds, Tensor indices,
                           int64_t numRows, int64_t stride0, int64_t stride1, int64_t topK) {
  run(OpSpec::make(OpKind::kTopKPerRowPrefill, top_k_params(topK)),
      KernelArgs({logits, rowStarts, rowEnds, indices},
                 {double(numRows), double(stride0), double(stride1)}),
      numRows);
}

void top_k_per_row_decode(Tensor logits, int64_t next_n, Tensor seq_lens, Tensor indices,
                          int64_t numRows, int64_t stride0, int64_t stride1, int64_t topK) {
  run(OpSpec::make(OpKind::kTopKPerRowDecode, top_k_params(topK)),
      KernelArgs({logits, seq_lens, indices},
                 {double(next_n), double(numRows), double(stride0), double(stride1)}),
      numRows);
}

}  // namespace jit::ops
