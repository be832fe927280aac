// jit::ops: vLLM's custom ops with vLLM's signatures and argument order. Each call derives
// the spec from its arguments, compiles it on first use (then finds it in memory), checks the
// arguments and runs. Errors throw jit::Error whose message names the argument and the
// allowed values; nothing is written when an argument is rejected.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "ir/dtype.h"
#include "ir/tensor.h"

namespace jit::ops {

/// out[r, :] = rnd(rnd(x * 1/sqrt(mean(x^2) + epsilon)) * weight) per row of input [..., H].
/// `out` is contiguous with input's shape; `weight` [H] may be absent (Tensor{}) for no weight.
void rms_norm(Tensor out, Tensor input, Tensor weight, double epsilon);

/// In place: residual = rnd(input + residual); input = rms_norm(residual) (see rms_norm).
void fused_add_rms_norm(Tensor input, Tensor residual, Tensor weight, double epsilon);

/// In place rotary embedding of query (and key unless it is absent) with rows of
/// cos_sin_cache [max_position, rot_dim] selected by positions ([T] or [B, S], int64).
void rotary_embedding(Tensor positions, Tensor query, Tensor key, int64_t head_size,
                      Tensor cos_sin_cache, bool is_neox);

/// out [..., d] = act(x) * y with x = input[..., :d], y = input[..., d:] (both contiguous).
void silu_and_mul(Tensor out, Tensor input);
/// out = x * silu(y).
void mul_and_silu(Tensor out, Tensor input);
/// out = gelu(x) * y with the exact (erf) GELU.
void gelu_and_mul(Tensor out, Tensor input);
/// out = gelu_tanh(x) * y (tanh approximation).
void gelu_tanh_and_mul(Tensor out, Tensor input);
/// out = (x > threshold ? x : 0) * y.
void fatrelu_and_mul(Tensor out, Tensor input, double threshold = 0.0);
/// GPT-OSS SwiGLU on interleaved (gate, up) pairs: (clamp(up) + 1) * g * sigmoid(alpha g),
/// g = min(gate, limit).
void swigluoai_and_mul(Tensor out, Tensor input, double alpha = 1.702, double limit = 7.0);

// ---- KV-cache writes, gathers and quantisers (spec/cache_ops.md; runtime/ops_cache.cc) ------
// A kv_cache_dtype string is vLLM's: "auto", "float16", "bfloat16", "fp8", "fp8_e4m3",
// "fp8_e5m2" (and "fp8_ds_mla" for concat_and_cache_mla). An fp8 cache may be u8 or the fp8
// dtype of its mode. Every index is checked before anything is written.

/// Copies whole blocks of `block_size_in_bytes` bytes: for each row (s, d) of block_mapping
/// [N, 2] (int64, in order), dst block d <- src block s.
void swap_blocks(Tensor src, Tensor dst, int64_t block_size_in_bytes, Tensor block_mapping);

/// Writes key/value [T, H, D] into the legacy paged caches (key [NB, H, D/x, BS, x], value
/// [NB, H, D, BS]) at slot_mapping [T] (int64, negative = skip), quantising in fp8 modes with
/// k_scale/v_scale [1] (f32).
void reshape_and_cache(Tensor key, Tensor value, Tensor key_cache, Tensor value_cache,
                       Tensor slot_mapping, std::string_view kv_cache_dtype, Tensor k_scale,
                       Tensor v_scale);

/// Writes key/value [T, H, D] into flash caches viewed as [NB, BS, H, D] (NHD or an HND
/// permutation, read from key_cache's strides); k_scale/v_scale hold 1 or H scales.
void reshape_and_cache_flash(Tensor key, Tensor value, Tensor key_cache, Tensor value_cache,
                             Tensor slot_mapping, std::string_view kv_cache_dtype, Tensor k_scale,
                             Tensor v_scale);

/// Writes MLA entries [kv_c (R) | k_pe (P)] into kv_cache [NB, BS, R + P] (or the 656-byte
/// fp8_ds_mla entry) at slot_mapping.
void concat_and_cache_mla(Tensor kv_c, Tensor k_pe, Tensor kv_cache, Tensor slot_mapping,
                          std::string_view kv_cache_dtype, Tensor scale);

/// Rotates q_pe [T, Hq, rot] and the written tokens' k_pe [T, rot] in place by the
/// cos_sin_cache row of positions[t], then writes [kv_c | k_pe] like concat_and_cache_mla.
void concat_and_cache_mla_rope_fused(Tensor positions, Tensor q_pe, Tensor k_pe, Tensor kv_c,
                                     Tensor cos_sin_cache, bool is_neox, Tensor slot_mapping,
                                     Tensor kv_cache, std::string_view kv_cache_dtype,
                                     Tensor kv_cache_scale);

/// Element-wise e4m3 quantise (float src -> fp8/u8 dst: fp8(x / scale)) or dequantise (fp8/u8
/// src -> float dst: decode(q) * scale). kv_cache_dtype must be "fp8" or "fp8_e4m3".
void convert_fp8(Tensor dst_cache, Tensor src_cache, double scale, std::string_view kv_cache_dtype);

/// dst[tok, :] = (dequantised) first dst.size(-1) elements of the cache entry of token tok of
/// request token_to_seq[tok], for tok < num_tokens. seq_starts may be absent.
void gather_and_maybe_dequant_cache(Tensor src_cache, Tensor dst, Tensor block_table,
                                    Tensor cu_seq_lens, Tensor token_to_seq, int64_t num_tokens,
                                    std::string_view kv_cache_dtype, Tensor scale,
                                    Tensor seq_starts);

/// Copies the cache entries [NB, BS, E...] of each request's tokens into dst rows
/// [cu_seq_lens[r], cu_seq_lens[r+1]). seq_starts may be absent.
void cp_gather_cache(Tensor src_cache, Tensor dst, Tensor block_table, Tensor cu_seq_lens,
                     int64_t batch_size, Tensor seq_starts);

/// Expands 656-byte fp8_ds_mla entries [NB, BS, 656] into bf16 rows dst [N, 576].
void cp_gather_and_upconvert_fp8_kv_cache(Tensor src_cache, Tensor dst, Tensor block_table,
                                          Tensor seq_lens, Tensor workspace_starts,
                                          int64_t batch_size);

/// Quantises k [T, D] (f16/bf16) per quant_block_size group to e4m3 into the indexer cache
/// [NB, BS, D + 4 D / quant_block_size] (u8). kv_cache_dtype is vLLM's scale format string:
/// "ue8m0" (power-of-two scales) or "auto"/"fp8"/"fp8_e4m3"/"plain"/"" (plain fp32 scales).
void indexer_k_quant_and_cache(Tensor k, Tensor kv_cache, Tensor slot_mapping,
                               int64_t quant_block_size, std::string_view kv_cache_dtype);

/// Copies the indexer cache's values into dst_k [N, D] and its fp32 scales as raw bytes into
/// dst_scale [N, 4 D / quant_block] (u8) for each request's tokens.
void cp_gather_indexer_k_quant_cache(Tensor kv_cache, Tensor dst_k, Tensor dst_scale,
                                     Tensor block_table, Tensor cu_seq_lens);

// ---- Attention, sparse indices, top-k (spec/attention_ops.md; runtime/ops_attention.cc) -----

/// Decode attention of query [S, Hq, D] against the legacy paged caches; out [S, Hq, D].
/// Block-sparse mode is on when blocksparse_vert_stride > 1.
void paged_attention_v1(Tensor out, Tensor query, Tensor key_cache, Tensor value_cache,
                        int64_t num_kv_heads, double scale, Tensor block_tables, Tensor seq_lens,
                        int64_t block_size, int64_t max_seq_len, Tensor alibi_slopes,
                        std::string_view kv_cache_dtype, Tensor k_scale, Tensor v_scale,
                        int64_t tp_rank = 0, int64_t blocksparse_local_blocks = 0,
                        int64_t blocksparse_vert_stride = 0, int64_t blocksparse_block_size = 64,
                        int64_t blocksparse_head_sliding_step = 0);

/// paged_attention_v1 split into partitions of `partition_size` tokens (vLLM: 512) with the
/// scratch tensors exp_sums/max_logits [S, Hq, P] (f32) and tmp_out [S, Hq, P, D].
void paged_attention_v2(Tensor out, Tensor exp_sums, Tensor max_logits, Tensor tmp_out,
                        Tensor query, Tensor key_cache, Tensor value_cache, int64_t num_kv_heads,
                        double scale, Tensor block_tables, Tensor seq_lens, int64_t block_size,
                        int64_t max_seq_len, Tensor alibi_slopes, std::string_view kv_cache_dtype,
                        Tensor k_scale, Tensor v_scale, int64_t tp_rank = 0,
                        int64_t blocksparse_local_blocks = 0, int64_t blocksparse_vert_stride = 0,
                        int64_t blocksparse_block_size = 64,
                        int64_t blocksparse_head_sliding_step = 0, int64_t partition_size = 512);

/// Merges prefix/suffix attention outputs [T, H, D] by their LSEs [H, T] into output (and
/// output_lse when present). Tokens at or past prefill_tokens_with_context (all when absent
/// have a prefix) copy the suffix. With output_scale [1] the output is fp8 e4m3.
void merge_attn_states(Tensor output, Tensor output_lse, Tensor prefix_output, Tensor prefix_lse,
                       Tensor suffix_output, Tensor suffix_lse,
                       std::optional<int64_t> prefill_tokens_with_context = std::nullopt,
                       Tensor output_scale = {});

/// MInference: vertical/slash index lists -> key blocks and extra columns per row block.
void convert_vertical_slash_indexes(Tensor block_count, Tensor block_offset, Tensor column_count,
                                    Tensor column_index, Tensor q_seqlens, Tensor kv_seqlens,
                                    Tensor vertical_indexes, Tensor slash_indexes,
                                    int64_t context_size, int64_t block_size_M,
                                    int64_t block_size_N, bool causal);

/// The same with per-head valid counts of the vertical and slash lists.
void convert_vertical_slash_indexes_mergehead(
    Tensor block_count, Tensor block_offset, Tensor column_count, Tensor column_index,
    Tensor q_seqlens, Tensor kv_seqlens, Tensor vertical_indexes, Tensor slash_indexes,
    Tensor vertical_indices_count, Tensor slash_indices_count, int64_t context_size,
    int64_t block_size_M, int64_t block_size_N, bool causal);

/// indices[r, :] = positions (relative to rowStarts[r]) of the topK largest f32 logits of
/// row r in [rowStarts[r], rowEnds[r]); -1 pads short rows.
void top_k_per_row_prefill(Tensor logits, Tensor rowStarts, Tensor rowEnds, Tensor indices,
                           int64_t numRows, int64_t stride0, int64_t stride1, int64_t topK);

/// As prefill with rows [0, seq_lens[r / next_n] - next_n + r % next_n + 1).
void top_k_per_row_decode(Tensor logits, int64_t next_n, Tensor seq_lens, Tensor indices,
                          int64_t numRows, int64_t stride0, int64_t stride1, int64_t topK);

// ---- CPU attention (spec/norm_act_cpu_ops.md section 3; runtime/ops_cpu.cc) ------------------

/// Bytes of the scheduler-metadata tensor (i8) cpu_attn_get_scheduler_metadata writes.
int64_t cpu_attn_metadata_bytes();

/// Plans the next cpu_attention_with_kv_cache call. vLLM returns the metadata tensor; here the
/// caller passes it first (i8 [cpu_attn_metadata_bytes()]). `dtype` is the query dtype;
/// `sliding_window_size` -1 means none; `isa` is "vec", "vec16", "amx" or "neon" (head sizes
/// that are multiples of 16 but not 32 always use vec16, as vLLM's dispatch does).
void cpu_attn_get_scheduler_metadata(Tensor metadata, int64_t num_reqs, int64_t num_heads,
                                     int64_t num_kv_heads, int64_t head_dim, Tensor seq_lens,
                                     DType dtype, Tensor query_start_loc, bool causal,
                                     int64_t sliding_window_size, std::string_view isa,
                                     bool enable_kv_split);

/// Writes key/value [T, Hkv, D] into caches [NB, Hkv, BS, D] in `isa`'s slab layout. With
/// kv_cache_dtype "fp8"/"fp8_e4m3"/"fp8_e5m2" (newest vLLM; isa vec, caches u8 or the fp8
/// dtype) the caches get fp8(x / k_scale) and fp8(x / v_scale); with "auto" a cache of an fp8
/// dtype selects that format.
void cpu_attn_reshape_and_cache(Tensor key, Tensor value, Tensor key_cache, Tensor value_cache,
                                Tensor slot_mapping, std::string_view isa, double k_scale = 1.0,
                                double v_scale = 1.0, std::string_view kv_cache_dtype = "auto");

/// Varlen attention over the caches written by cpu_attn_reshape_and_cache, planned by
/// scheduler_metadata (whose ISA it uses). sliding_window_left/right -1 = unbounded; softcap 0
/// = none; alibi_slopes and s_aux may be absent. An fp8 cache (kv_cache_dtype as for
/// cpu_attn_reshape_and_cache) is read as k = fp8·k_scale, v = fp8·v_scale.
void cpu_attention_with_kv_cache(Tensor query, Tensor key_cache, Tensor value_cache, Tensor output,
                                 Tensor query_start_loc, Tensor seq_lens, double scale, bool causal,
                                 Tensor alibi_slopes, int64_t sliding_window_left,
                                 int64_t sliding_window_right, Tensor block_table, double softcap,
                                 Tensor scheduler_metadata, Tensor s_aux, double k_scale = 1.0,
                                 double v_scale = 1.0, std::string_view kv_cache_dtype = "auto");
// ---- GEMM (vLLM's oneDNN ops; runtime/ops_gemm.cc) ---------------------------------------------
//
// A handler is an opaque int64 (vLLM's model) naming a kiln object that owns the handler tensor
// (docs/ops.md) made by create_onednn_mm / create_onednn_scaled_mm; the backend that serves the
// spec (onednn, else ref) keeps the weight in its preferred layout. Free it with
// release_onednn_handler. Handlers may be used from several threads at once.

/// Packs b [K, N] (any strides; vLLM passes weight.t()) of f32/f16/bf16 for onednn_mm and
/// returns the handler. `primitive_cache_size` (>= 1) bounds the primitives kept for its
/// (K, N, dtype) class.
int64_t create_onednn_mm(Tensor b, int64_t primitive_cache_size = 128);

/// c [M, N] = a [M, K] @ b + bias with fp32 accumulation and one rounding; a has b's dtype and
/// a unit last stride (any row stride), c is contiguous, bias [N] (same dtype) may be absent.
void onednn_mm(Tensor c, Tensor a, Tensor bias, int64_t handler);

/// Packs an int8 b [K, N] (column-major: weight.t()) and its fp32 scales b_scales (1 element:
/// per tensor, or N: per output channel) for onednn_scaled_mm. `output_type`: f32/f16/bf16;
/// `dynamic_act_quant`: per-token activation scales; `use_azp`: activation zero points.
int64_t create_onednn_scaled_mm(Tensor b, Tensor b_scales, DType output_type,
                                bool dynamic_act_quant, bool use_azp,
                                int64_t primitive_cache_size = 128);

/// int8 a [M, K] (contiguous) times the handler's b, exact in int32, then
/// static:  c = rnd(s_a · s_b[n] · Σ_k (a − azp)·b + bias[n])       (a_scales, azp: 1 element)
/// dynamic: c = rnd(s_a[m] · s_b[n] · Σ_k a·b − s_a[m]·azp[m]·azp_adj[n] + bias[n])
/// (a_scales, azp [M] or [M, 1]; azp_adj [N] or [1, N], required with azp). azp/azp_adj/bias
/// may be absent as the handler's use_azp allows; c [M, N] of output_type.
void onednn_scaled_mm(Tensor c, Tensor a, Tensor a_scales, Tensor azp, Tensor azp_adj, Tensor bias,
                      int64_t handler);

/// Frees a handler (vLLM's release_dnnl_matmul_handler); unknown handlers are an error.
void release_onednn_handler(int64_t handler);

}  // namespace jit::ops
