// The parameter struct of the paged attention kernels (templates/paged_attention.cuh). Plain
// C++, shared by the host (codegen/cuda/paged_attention.cc fills it) and the device, like
// kiln_args.cuh; kept in its own header so that the attention kernels stay out of the shared
// one. Strides are in elements.
#pragma once

namespace kiln {

/// paged_attention_v1/v2. Phase 0: grid (heads_q / kHeadsPerCta, seqs, partitions), one CTA
/// per (group of query heads sharing one kv head, sequence, partition). Phase 1 (v2 only): the
/// reduce, grid (heads_q, seqs), one CTA per (query head, sequence).
struct PagedAttentionArgs {
  void* out;                  ///< [S, Hq, D], dense
  float* exp_sums;            ///< v2: [S, Hq, partitions]
  float* max_logits;          ///< v2: [S, Hq, partitions]
  void* tmp_out;              ///< v2: [S, Hq, partitions, D]
  const void* query;          ///< [S, Hq, D], rows at query_stride
  const void* key_cache;      ///< [NB, Hkv, D/x, BS, x], 16-byte aligned
  const void* value_cache;    ///< [NB, Hkv, D, BS], addressed with the key cache's strides
  const int* block_tables;    ///< [S, table_width]
  const int* seq_lens;        ///< [S]
  const float* alibi_slopes;  ///< [Hq] or nullptr
  const float* k_scale;       ///< [1] (fp8 caches), else nullptr
  const float* v_scale;
  long long query_stride;  ///< elements between sequences of query
  long long block_stride;  ///< key_cache.stride(0)
  long long head_stride;   ///< key_cache.stride(1)
  long long table_width;   ///< block_tables.size(1)
  long long partitions;    ///< v2: P (the scratch buffers' partition count); v1: 1
  /// Block-sparse mode (spec §2.5; Sparse policy only): tp_rank, local blocks, vertical stride,
  /// sparse block size (a multiple of the cache block size) and head sliding step.
  long long tp_rank;
  long long sparse_local;
  long long sparse_vert;
  long long sparse_block;
  long long sparse_step;
  float scale;  ///< softmax scale
  int phase;    ///< 0: attention (v1, v2 phase 1); 1: the v2 reduce
};

}  // namespace kiln
