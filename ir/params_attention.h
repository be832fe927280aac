// Compile-time parameters of the attention family (spec/attention_ops.md): paged attention,
// merge_attn_states, the vertical/slash sparse-index conversion and the per-row top-k.
//
// What is baked into the code and what stays a run-time argument:
//   paged_attention_v1 / v2: compile-time query dtype, kv (kv_cache_dtype mode), head_size,
//     block_size, heads_q, heads_kv (num_kv_heads), alibi (slopes given), blocksparse (vLLM's
//     vert_stride > 1 mode), partition_size (v2; 0 for v1); run-time: sequence count, seq_lens,
//     max_seq_len, block tables, query row stride, softmax scale, k_scale/v_scale, the
//     block-sparse integers (tp_rank, local blocks, vert stride, sparse block size, sliding
//     step).
//   merge_attn_states: compile-time input dtype, out_dtype (the input dtype, or fp8_e4m3 when
//     output_scale is given), heads, head_size, output_lse (written or None); run-time: token
//     count, head strides, prefill_tokens_with_context, output_scale.
//   convert_vertical_slash_indexes(_mergehead): compile-time block_m, block_n, causal;
//     run-time: batch, heads, NNZ_V/NNZ_S, sequence lengths, context_size (and the per-head
//     counts of the mergehead variant).
//   top_k_per_row_prefill / decode: compile-time top_k; run-time: row count, strides, row
//     ranges (prefill) or seq_lens and next_n (decode).
#pragma once

#include <cstdint>

#include "ir/estimate.h"
#include "ir/field.h"
#include "ir/op_kind.h"
#include "ir/status.h"

namespace jit::ir {

/// paged_attention_v1/v2: one query token per sequence against the legacy paged cache
/// (key [NB, Hkv, D/x, BS, x], value [NB, Hkv, D, BS]).
struct PagedAttentionParams {
  DType dtype = DType::kBF16;             ///< query/out type (f32/f16/bf16)
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< cache storage: auto (= dtype), fp8_e4m3, fp8_e5m2
  int64_t head_size = 0;                  ///< D, a multiple of x = 16 / cache element size
  int64_t block_size = 0;                 ///< BS
  int64_t head_count_q = 0;               ///< query heads
  int64_t head_count_kv = 0;              ///< kv heads; heads_q % heads_kv == 0
  bool alibi = false;                     ///< alibi_slopes given
  bool blocksparse = false;               ///< block-sparse mode (vLLM: vert_stride > 1)
  int64_t partition_size = 0;             ///< v2: tokens per partition (vLLM 512); v1: 0

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("kv", s.kv);
    v("head_size", s.head_size);
    v("block_size", s.block_size);
    v("heads_q", s.head_count_q);
    v("heads_kv", s.head_count_kv);
    v("alibi", s.alibi);
    v("blocksparse", s.blocksparse);
    v("partition_size", s.partition_size);
  }
  bool operator==(const PagedAttentionParams&) const = default;
};

/// merge_attn_states: merges two partial attention outputs [T, H, D] by their LSEs [H, T].
struct MergeAttnStatesParams {
  DType dtype = DType::kBF16;      ///< prefix/suffix output type (f32/f16/bf16)
  DType out_dtype = DType::kBF16;  ///< output type: dtype, or fp8_e4m3 (output_scale given)
  int64_t head_count = 0;          ///< H
  int64_t head_size = 0;           ///< D
  bool output_lse = false;         ///< output_lse is written (else None)

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("out_dtype", s.out_dtype);
    v("heads", s.head_count);
    v("head_size", s.head_size);
    v("output_lse", s.output_lse);
  }
  bool operator==(const MergeAttnStatesParams&) const = default;
};

/// convert_vertical_slash_indexes(_mergehead): MInference vertical/slash lists -> key blocks
/// of block_n columns and extra columns, per row block of block_m queries.
struct VerticalSlashParams {
  int64_t block_m = 64;  ///< BM, query rows per row block
  int64_t block_n = 64;  ///< BN, key columns per block; KILN requires block_n == block_m
  bool causal = true;    ///< causal (intra-chunk) or not (successive chunk)

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("block_m", s.block_m);
    v("block_n", s.block_n);
    v("causal", s.causal);
  }
  bool operator==(const VerticalSlashParams&) const = default;
};

/// top_k_per_row_prefill/decode: indices of the top_k largest fp32 logits of each row.
struct TopKParams {
  int64_t top_k = 2048;  ///< k (vLLM's topK), sizes the per-row output and staging buffers

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("top_k", s.top_k);
  }
  bool operator==(const TopKParams&) const = default;
};

/// Checks the params of `op` against its contract (target-independent); an invalid-argument
/// Status names the field and the allowed values or range.
Status validate(OpKind op, const PagedAttentionParams& p);
Status validate(OpKind op, const MergeAttnStatesParams& p);
Status validate(OpKind op, const VerticalSlashParams& p);
Status validate(OpKind op, const TopKParams& p);

/// Estimates use ProblemSize as: paged attention: batch = sequences, context = tokens per
/// sequence; merge_attn_states: tokens = T; vertical/slash: tokens = context_size (query
/// length), batch = batch entries x heads, context = NNZ_V + NNZ_S; top-k: tokens = rows,
/// context = row length.
Estimate estimate(OpKind op, const PagedAttentionParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const MergeAttnStatesParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const VerticalSlashParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const TopKParams& p, const ProblemSize& size);

}  // namespace jit::ir
