// The parameter structs of kiln's CUDA kernels: one struct passed by value per launch. Plain
// C++ (no CUDA keyword, no toolkit header) so that the host fills exactly the layout the device
// reads: codegen/cuda/launch.cc builds them, the driver copies them into the kernel's
// parameter space, and the SIMT emulator passes them to the same kernel compiled for the host.
// Strides are in elements; row counts and strides are 64-bit.
#pragma once

namespace kiln {

/// rms_norm (residual == nullptr) and fused_add_rms_norm. One block per row.
struct NormArgs {
  void* dst;             ///< rms_norm: out (dense rows); fused: input (normalised in place)
  const void* src;       ///< rms_norm: input; fused: input
  void* residual;        ///< fused only: residual (z = x + r is written back here)
  const void* weight;    ///< [hidden], or nullptr when the spec has no weight
  long long dst_stride;  ///< elements between rows of dst
  long long src_stride;
  long long residual_stride;
  long long rows;
  float epsilon;
  int vector_ok;  ///< every pointer and row stride is aligned for the config's vector width
};

/// The six gated activations: input rows of 2d (or d interleaved pairs), output rows of d.
struct ActivationArgs {
  void* dst;
  const void* src;
  long long rows;
  float p0;  ///< fatrelu: threshold; swigluoai: alpha
  float p1;  ///< swigluoai: limit
  int vector_ok;
};

/// rotary_embedding, in place on query (and key). One block per token.
struct RopeArgs {
  const long long* positions;  ///< [tokens], already checked to lie inside the cache
  void* query;
  void* key;  ///< nullptr when the spec has no key
  const void* cos_sin;
  long long query_token_stride;
  long long query_head_stride;
  long long key_token_stride;
  long long key_head_stride;
  long long tokens;
  int vector_ok;  ///< heads, strides and the cache rows are aligned for the config's vector
};

}  // namespace kiln

namespace kiln {

/// reshape_and_cache and reshape_and_cache_flash. One block per token; padding slots (< 0)
/// are skipped.
struct CacheWriteArgs {
  const void* key;  ///< [T, H, D], rows at key_stride, heads dense
  const void* value;
  void* key_cache;
  void* value_cache;
  const long long* slots;  ///< [T] int64
  const float* k_scale;    ///< [1] or [H] (per-head fp8 scales); unused for kv=auto
  const float* v_scale;
  long long key_stride;  ///< elements between tokens of key
  long long value_stride;
  /// Flash caches: strides of the logical [NB, BS, H, D] view (D has stride 1), per cache.
  long long key_cache_strides[3];
  long long value_cache_strides[3];
  long long tokens;
  int vector_ok;
};

/// convert_fp8: element-wise quantise (float -> e4m3) or dequantise (e4m3 -> float).
struct ConvertArgs {
  void* dst;
  const void* src;
  long long count;
  float scale;
  int vector_ok;
};

}  // namespace kiln

namespace kiln {

/// merge_attn_states. One block per (token, head): blockIdx.x = token * heads + head.
struct MergeArgs {
  void* output;       ///< [T, H, D] (T or fp8 codes)
  float* output_lse;  ///< [H, T], or nullptr
  const void* prefix;
  const float* prefix_lse;  ///< [H, T]
  const void* suffix;
  const float* suffix_lse;
  const float* output_scale;    ///< [1] for an fp8 output, else nullptr
  long long output_strides[2];  ///< token, head (elements)
  long long prefix_strides[2];
  long long suffix_strides[2];
  long long tokens;
  double with_context;  ///< tokens at or past this index have no prefix
  int vector_ok;
};

}  // namespace kiln

namespace kiln {

/// top_k_per_row_prefill (row_starts/row_ends) and top_k_per_row_decode (seq_lens, next_n).
/// One block per row.
struct TopKArgs {
  const float* logits;  ///< element (r, c) at r * stride0 + c * stride1
  const int* row_starts;
  const int* row_ends;
  const int* seq_lens;
  int* indices;  ///< [rows, k]
  long long rows;
  long long stride0;
  long long stride1;
  long long columns;
  long long next_n;
};

}  // namespace kiln

namespace kiln {

/// convert_vertical_slash_indexes(_mergehead). One thread per (batch, head, row block).
struct VerticalSlashArgs {
  int* block_count;   ///< [B, H, rows]
  int* block_offset;  ///< [B, H, rows, nnz_s]
  int* column_count;  ///< [B, H, rows]
  int* column_index;  ///< [B, H, rows, nnz_v]
  const int* q_seqlens;
  const int* kv_seqlens;
  const int* vertical;         ///< [B, H, nnz_v], ascending
  const int* slash;            ///< [B, H, nnz_s], descending offsets
  const int* vertical_counts;  ///< [H] (mergehead), else nullptr: nnz_v per head
  const int* slash_counts;
  long long batch;
  long long heads;
  long long rows;
  long long nnz_v;
  long long nnz_s;
};

}  // namespace kiln

namespace kiln {

/// concat_and_cache_mla. One block per token.
struct MlaWriteArgs {
  const void* kv_c;  ///< [T, R], rows at kv_c_stride
  const void* k_pe;  ///< [T, P], rows at k_pe_stride
  void* cache;       ///< [NB, BS, entry], entry dense
  const long long* slots;
  const float* scale;  ///< [1] (fp8_e4m3 / fp8_e5m2)
  long long kv_c_stride;
  long long k_pe_stride;
  long long cache_block_stride;  ///< elements of the cache type
  long long cache_entry_stride;
  long long tokens;
};

}  // namespace kiln

namespace kiln {

/// gather_and_maybe_dequant_cache (one block per dst token) and cp_gather_cache (one block
/// per request).
struct GatherArgs {
  const void* src;          ///< paged cache [NB, BS, entry...], entry dense
  void* dst;                ///< rows at dst_stride
  const int* block_table;   ///< [B, max_blocks], rows at table_stride
  const int* cu_seq_lens;   ///< [B + 1]
  const int* token_to_seq;  ///< gather_and_maybe_dequant only
  const int* seq_starts;    ///< optional (nullptr)
  const float* scale;       ///< fp8 dequantisation scale [1]
  long long src_block_stride;
  long long src_entry_stride;
  long long dst_stride;
  long long table_stride;
  long long count;  ///< num_tokens (gather) or batch_size (cp_gather)
};

}  // namespace kiln

namespace kiln {

/// indexer_k_quant_and_cache (one block per token) and cp_gather_indexer_k_quant_cache (one
/// block per request).
struct IndexerArgs {
  const void* k;  ///< quant: [T, D] dense
  void* cache;    ///< u8 blocks of BS·D code bytes, then BS·G fp32 scales
  const long long* slots;
  void* dst_k;                   ///< gather: [N, D] bytes, rows at dst_k_stride
  void* dst_scale;               ///< gather: [N, 4G] bytes, rows at dst_scale_stride
  const int* block_table;        ///< [B, max_blocks], contiguous
  const int* cu_seq_lens;        ///< [B + 1]
  long long cache_block_stride;  ///< bytes between cache blocks
  long long dst_k_stride;
  long long dst_scale_stride;
  long long table_stride;
  long long count;  ///< tokens (quant) or requests (gather)
};

}  // namespace kiln

namespace kiln {

/// concat_and_cache_mla_rope_fused. One block per token.
struct MlaRopeArgs {
  const long long* positions;
  void* q_pe;           ///< [T, Hq, rot_dim]
  void* k_pe;           ///< [T, rot_dim]
  const void* kv_c;     ///< [T, R]
  const void* cos_sin;  ///< [max_position, rot_dim] of T
  const long long* slots;
  void* cache;  ///< [NB, BS, R + rot_dim]
  const float* scale;
  long long q_token_stride;
  long long q_head_stride;
  long long k_stride;
  long long kv_c_stride;
  long long cache_block_stride;
  long long cache_entry_stride;
  long long tokens;
};

/// cp_gather_and_upconvert_fp8_kv_cache. One block per dst row.
struct UpconvertArgs {
  const void* src;  ///< u8 [NB, BS, 656]
  void* dst;        ///< bf16 [rows, 576]
  const int* block_table;
  const int* workspace_starts;  ///< [B], non-decreasing, starts[0] == 0
  long long src_block_stride;
  long long src_entry_stride;
  long long dst_stride;
  long long table_stride;
  long long batch;
  long long rows;
};

}  // namespace kiln

namespace kiln {

/// swap_blocks: up to kSwapPairs (src block, dst block) pairs per launch, one block each. The
/// host reads the mapping (a CPU tensor, as in vLLM) and launches as often as needed.
constexpr int kSwapPairs = 12;
struct SwapArgs {
  const void* src;
  void* dst;
  long long pairs[kSwapPairs][2];
  int count;
  int vector_ok;  ///< src and dst 16-byte aligned (block_bytes % 16 == 0 is compile-time)
};

}  // namespace kiln
