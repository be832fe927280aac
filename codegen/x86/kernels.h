// The x86 kernels' call arguments (read by the generated code at fixed offsets) and their
// generators. A kernel processes rows [row_begin, row_end) of its args.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codegen/target.h"
#include "ir/op_spec.h"
#include "ir/status.h"

namespace jit::codegen::x86 {

/// rms_norm: dst = out, src = input. fused_add_rms_norm: dst = src = input (in place),
/// residual = residual. Strides are in bytes.
struct NormCallArgs {
  void* dst;
  const void* src;
  void* residual;
  const void* weight;
  int64_t dst_row_stride;
  int64_t src_row_stride;
  int64_t residual_row_stride;
  float epsilon;
};

/// The gated activations: dst rows of d, src rows of 2d. Strides in bytes.
struct ActivationCallArgs {
  void* dst;
  const void* src;
  int64_t dst_row_stride;
  int64_t src_row_stride;
  float threshold;  ///< fatrelu_and_mul
  float alpha;      ///< swigluoai_and_mul
  float limit;      ///< swigluoai_and_mul
};

/// rotary_embedding, in place. Rows are tokens. Strides in bytes.
struct RopeCallArgs {
  const int64_t* positions;
  void* query;
  void* key;  ///< nullptr when the spec has key=false
  const void* cos_sin_cache;
  int64_t query_token_stride;
  int64_t query_head_stride;
  int64_t key_token_stride;
  int64_t key_head_stride;
};

/// reshape_and_cache, reshape_and_cache_flash and concat_and_cache_mla. Rows are tokens
/// (slot_mapping entries). Strides in bytes. The runner has checked every slot
/// (< num_blocks * block_size). concat_and_cache_mla: key = kv_c, value = k_pe, key_cache =
/// kv_cache, k_scale = scale (value_cache and v_scale unused).
struct CacheWriteCallArgs {
  const void* key;
  const void* value;
  void* key_cache;
  void* value_cache;
  const int64_t* slots;
  const float* k_scale;  ///< [1] or [heads] (per_head_scale); unread in kv=auto
  const float* v_scale;
  int64_t key_row_stride;
  int64_t value_row_stride;
  int64_t block_stride;  ///< flash: cache stride(0) (same for key and value); paged: unused;
                         ///< concat_and_cache_mla: kv_cache stride(0)
  int64_t entry_stride;  ///< concat_and_cache_mla: kv_cache stride(1); unused by the others
};

/// rotary_embedding_and_cache_flash: the cache write's arguments first (key = the key rotated in
/// place), then the rope's. Rows are tokens (positions); rows < slot_tokens also write the
/// cache. The runner has checked every position and slot. Strides in bytes.
struct RopeFlashCallArgs {
  CacheWriteCallArgs cache;
  const int64_t* positions;
  void* query;
  const void* cos_sin_cache;
  int64_t query_token_stride;
  int64_t query_head_stride;
  int64_t slot_tokens;  ///< slot_mapping.size(0) <= rows
};

/// swap_blocks. Rows are mapping pairs; pairs[2i], pairs[2i+1] are the byte offsets of the
/// source and destination blocks (checked by the runner).
struct SwapBlocksCallArgs {
  const uint8_t* src;
  uint8_t* dst;
  const int64_t* pairs;
};

/// convert_fp8. Rows are chunks of kConvertRowElements elements of the flat buffers; the last
/// row holds the remainder of `elements`.
struct ConvertFp8CallArgs {
  void* dst;
  const void* src;
  int64_t elements;
  float scale;
};
inline constexpr int64_t kConvertRowElements = 4096;

/// cp_gather_cache and gather_and_maybe_dequant_cache. Rows are destination rows: row i is
/// written at dst + i * dst_row_stride from the cache entry at src + src_offsets[i] (bytes),
/// or skipped (left untouched) when src_offsets[i] < 0. The runner has validated every index
/// the offsets come from (block table, cu_seq_lens, token_to_seq, seq_starts).
struct GatherCallArgs {
  const uint8_t* src;
  void* dst;                   ///< the first row of the call's rows
  const int64_t* src_offsets;  ///< one per row
  const float* scale;          ///< [1]; read only when dequantising fp8
  int64_t dst_row_stride;      ///< bytes
};

/// concat_and_cache_mla_rope_fused. Rows are tokens; the runner has checked every position
/// (< cos_sin_cache rows) and slot. Strides in bytes.
struct MlaRopeCallArgs {
  const int64_t* positions;
  void* q_pe;
  void* k_pe;
  const void* kv_c;
  const void* cos_sin_cache;
  const int64_t* slots;
  void* kv_cache;
  const float* scale;  ///< [1]; read in fp8 modes only
  int64_t q_token_stride;
  int64_t q_head_stride;
  int64_t k_pe_row_stride;
  int64_t kv_c_row_stride;
  int64_t block_stride;  ///< kv_cache stride(0)
  int64_t entry_stride;  ///< kv_cache stride(1)
};

/// indexer_k_quant_and_cache. Rows are tokens (k rows, dense); the runner has checked every
/// slot. The cache is dense: block b starts at b·block_bytes.
struct IndexerQuantCallArgs {
  const void* k;
  uint8_t* cache;
  const int64_t* slots;
};

/// cp_gather_indexer_k_quant_cache. Rows are runs: run i (runs[4i .. 4i+3] = first destination
/// row, row count <= block_size, byte offset of its cache block, first position in the block)
/// copies, per row, head_dim value bytes and 4·groups scale bytes of consecutive block positions
/// to consecutive destination rows. The runner resolved and checked every run's block (one
/// block-table read per block instead of per-row offsets).
struct IndexerGatherCallArgs {
  const uint8_t* cache;
  uint8_t* dst_k;
  uint8_t* dst_scale;
  const int64_t* runs;
  int64_t dst_k_row_stride;  ///< bytes
  int64_t dst_scale_row_stride;
};

/// merge_attn_states. Rows are tokens. Element strides of [T, H, D] tensors in bytes; the
/// LSE tensors are [H, T] dense fp32 (lse_head_stride = 4 T bytes).
struct MergeCallArgs {
  void* output;
  float* output_lse;  ///< nullptr unless the spec writes it
  const void* prefix;
  const float* prefix_lse;
  const void* suffix;
  const float* suffix_lse;
  int64_t output_token_stride;
  int64_t output_head_stride;
  int64_t prefix_token_stride;
  int64_t prefix_head_stride;
  int64_t suffix_token_stride;
  int64_t suffix_head_stride;
  int64_t lse_head_stride;
  int64_t with_context;  ///< tokens t >= with_context copy the suffix
  float inv_scale;       ///< fp8 output: float(1 / output_scale)
  /// 1 when the output and both its strides are 64-byte aligned: a large call may then store
  /// the bf16 blend with streaming stores.
  int64_t output_aligned;
};

/// Emits reshape_and_cache (PagedCacheWriteParams) or reshape_and_cache_flash
/// (FlashCacheWriteParams) at `isa`.
Result<std::vector<uint8_t>> generate_cache_write(const OpSpec& spec, X86Isa isa);
/// Emits rotary_embedding_and_cache_flash (RopeFlashCacheWriteParams) at `isa`.
Result<std::vector<uint8_t>> generate_rope_cache_flash(const OpSpec& spec, X86Isa isa);
/// Emits concat_and_cache_mla (MlaCacheWriteParams; kv auto, fp8_e4m3, fp8_e5m2) at `isa`.
Result<std::vector<uint8_t>> generate_mla_cache_write(const OpSpec& spec, X86Isa isa);
/// Emits swap_blocks (SwapBlocksParams) at `isa`; `rep_movsb`: each block by `rep movsb`
/// instead of vector loops.
Result<std::vector<uint8_t>> generate_swap_blocks(const OpSpec& spec, bool rep_movsb, X86Isa isa);
/// Emits cp_gather_cache (CpGatherCacheParams) or gather_and_maybe_dequant_cache
/// (GatherCacheParams) at `isa`.
Result<std::vector<uint8_t>> generate_gather(const OpSpec& spec, X86Isa isa);
/// Emits convert_fp8 (ConvertFp8Params) at `isa`.
Result<std::vector<uint8_t>> generate_convert_fp8(const OpSpec& spec, X86Isa isa);
/// Emits concat_and_cache_mla with kv=fp8_ds_mla (the 656-byte DeepSeek entry) at `isa`.
Result<std::vector<uint8_t>> generate_ds_mla_cache_write(const OpSpec& spec, X86Isa isa);
/// Emits concat_and_cache_mla_rope_fused (MlaRopeCacheWriteParams) at `isa`.
Result<std::vector<uint8_t>> generate_mla_rope_fused(const OpSpec& spec, X86Isa isa);
/// Emits cp_gather_and_upconvert_fp8_kv_cache (GatherCallArgs rows of 576 bf16) at `isa`.
Result<std::vector<uint8_t>> generate_upconvert_gather(const OpSpec& spec, X86Isa isa);
/// Emits indexer_k_quant_and_cache (IndexerQuantParams) at `isa`.
Result<std::vector<uint8_t>> generate_indexer_quant(const OpSpec& spec, X86Isa isa);
/// Emits cp_gather_indexer_k_quant_cache (IndexerGatherParams) at `isa`.
Result<std::vector<uint8_t>> generate_indexer_gather(const OpSpec& spec, X86Isa isa);
/// Emits merge_attn_states (MergeAttnStatesParams) at `isa`.
Result<std::vector<uint8_t>> generate_merge_attn_states(const OpSpec& spec, X86Isa isa);
/// Emits rms_norm / fused_add_rms_norm for `spec` (NormParams) at `isa`.
Result<std::vector<uint8_t>> generate_norm(const OpSpec& spec, X86Isa isa);
/// Emits rotary_embedding for `spec` (RopeParams) at `isa`.
Result<std::vector<uint8_t>> generate_rope(const OpSpec& spec, X86Isa isa);
/// Emits one of the six gated activations for `spec` (ActivationParams) at `isa`.
Result<std::vector<uint8_t>> generate_activation(const OpSpec& spec, X86Isa isa);

}  // namespace jit::codegen::x86
